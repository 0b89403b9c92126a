"""One Settings object: REPOCTX_* environment variables over defaults, validated once."""

from __future__ import annotations

import json
import os
from collections.abc import Iterable
from dataclasses import dataclass, field, replace
from pathlib import Path


class ConfigError(ValueError):
    pass


def is_postgres_url(target: str | os.PathLike | None) -> bool:
    """Whether a store target names PostgreSQL: a postgres(ql):// URL or a libpq key=value string,
    rather than a SQLite file path. One rule for the store, the sessions and the service."""
    if not target:
        return False
    text = str(target)
    return text.startswith(("postgres://", "postgresql://")) or "dbname=" in text or "host=" in text


def default_cache_dir() -> Path:
    """$REPOCTX_CACHE, else ~/.cache/repoctx: the vector cache, evaluation corpora, per-user indexes."""
    return Path(os.environ.get("REPOCTX_CACHE") or Path.home() / ".cache" / "repoctx")


def user_index_dir(root: Path) -> Path:
    """Where a repository's index lives when the repository itself cannot hold it (read-only),
    keyed by the repository's path."""
    import hashlib
    import re

    name = re.sub(r"[^A-Za-z0-9._-]+", "-", root.name).strip("-.") or "repo"
    return default_cache_dir() / "indexes" / f"{name}-{hashlib.blake2b(str(root).encode(), digest_size=5).hexdigest()}"


def _writable(path: Path) -> bool:
    """Whether a folder can take the index, asked without writing (os.access says EROFS even to root)."""
    probe = path
    while not probe.exists() and probe != probe.parent:
        probe = probe.parent
    return os.access(probe, os.W_OK | os.X_OK)


def _int_env(name: str, default: int) -> int:
    raw = os.environ.get(name)
    if raw is None or raw == "":
        return default
    try:
        value = int(raw)
    except ValueError:
        raise ConfigError(f"{name} must be an integer, got {raw!r}") from None
    if value <= 0:
        raise ConfigError(f"{name} must be positive, got {value}")
    return value


def float_env(name: str, default: float, lo: float = 0.0, env=None) -> float:
    """A number from the environment, greater than ``lo`` (NaN refused; ``inf`` allowed), else ``default``;
    ``ConfigError`` naming the variable when it is not. One reading for the library, the copilot and the service."""
    raw = (os.environ if env is None else env).get(name)
    if raw is None or raw.strip() == "":
        return default
    try:
        value = float(raw)
    except ValueError:
        raise ConfigError(f"{name} must be a number, got {raw!r}") from None
    if not value > lo:  # also NaN
        raise ConfigError(f"{name} must be greater than {lo:g}, got {value:g}")
    return value


def _bool_env(name: str) -> bool | None:
    raw = os.environ.get(name, "").strip().lower()
    if not raw:
        return None
    if raw in ("1", "true", "yes", "on"):
        return True
    if raw in ("0", "false", "no", "off"):
        return False
    raise ConfigError(f"{name} must be 1 or 0, got {raw!r}")


@dataclass(frozen=True)
class Settings:
    max_file_bytes: int = 1024 * 1024
    index_dir: Path | None = None  # default: <repo>/.repoctx
    embedder: str = "local"  # "none" disables dense vectors
    index_secrets: bool = False
    extra_ignores: tuple[str, ...] = field(default_factory=tuple)
    window_chunk_size: int = 1200
    window_overlap: int = 150
    parse_mode: str = "capsules"  # capsules | windows (every file as 1200/150 text windows: the seed's baseline)
    vector_cache: Path | None = None  # default: $REPOCTX_CACHE/vectors.sqlite (~/.cache/repoctx)
    # keep each embedded unit's vector in that shared cache for other indexes of the same code (REPOCTX_CACHE_VECTORS=1;
    # `repoctx eval` does: its trees share most units). Else an index is its own cache (an unchanged unit keeps its
    # vector) and the shared one holds a fill's vectors only until its index has them: Django's 48k, 24 MB
    cache_vectors: bool = False
    database_url: str | None = None  # PostgreSQL + pgvector instead of the embedded SQLite store
    # SQLite: BM25 precomputed in memory (store/memory_bm25.py). None: on for long-lived processes (the
    # service, the MCP server), off for one-shot commands, which would pay its build for one search
    memory_lexical: bool | None = None
    # the standard search's second stage (the re-ranker over its first 30 units; retrieve/rerank.py)
    second_stage: bool = True
    # a candidate function's body past what the model reads counts for its file (hybrid.window_shares): an option,
    # REPOCTX_FUNCTION_WINDOWS=1; its windows are embedded when a search first compares them, then read from the cache
    function_windows: bool = False
    # PostgreSQL: seconds to reach the database (connect, or wait for a pooled connection) before failing;
    # None: psycopg's defaults. The HTTP service sets it from REPOCTX_STORE_TIMEOUT
    store_timeout: float | None = None
    # long-lived processes (the MCP server, the service) watch the trees they index (repoctx/watch.py):
    # REPOCTX_WATCH=0 turns it off; a tree with more folders than REPOCTX_WATCH_MAX_DIRS is not watched
    watch: bool = True
    watch_max_dirs: int = 10_000
    # the tree's own git history (repoctx/history.py): each update of a git checkout mines the commits after the last
    # one it saw, newest first, files and messages only, for at most ``history_budget`` seconds (REPOCTX_HISTORY_BUDGET;
    # older ones past it are left out), and a file-level search moves up the files that the past commits most like
    # the question changed. REPOCTX_HISTORY=0 turns it off
    history: bool = True
    history_budget: float = 3.0

    @classmethod
    def from_env(cls, **overrides) -> Settings:
        base = cls(
            max_file_bytes=_int_env("REPOCTX_MAX_FILE_BYTES", 1024 * 1024),
            index_dir=Path(os.environ["REPOCTX_INDEX_DIR"]) if os.environ.get("REPOCTX_INDEX_DIR") else None,
            embedder=os.environ.get("REPOCTX_EMBEDDER", "local"),
            index_secrets=os.environ.get("REPOCTX_INDEX_SECRETS", "") in ("1", "true", "yes"),
            database_url=os.environ.get("REPOCTX_DATABASE_URL") or None,
            memory_lexical=_bool_env("REPOCTX_MEMORY_LEXICAL"),
            second_stage=_bool_env("REPOCTX_SECOND_STAGE") is not False,
            function_windows=_bool_env("REPOCTX_FUNCTION_WINDOWS") is True,
            cache_vectors=_bool_env("REPOCTX_CACHE_VECTORS") is True,
            watch=_bool_env("REPOCTX_WATCH") is not False,
            watch_max_dirs=_int_env("REPOCTX_WATCH_MAX_DIRS", 10_000),
            history=_bool_env("REPOCTX_HISTORY") is not False,
            history_budget=float_env("REPOCTX_HISTORY_BUDGET", 3.0),
        )
        return replace(base, **{k: v for k, v in overrides.items() if v is not None})

    def index_dir_for(self, root: Path) -> Path:
        """REPOCTX_INDEX_DIR when set; else ``<root>/.repoctx``, or a per-user folder keyed by the
        repository's path when the repository is read-only (an index already made in either is used)."""
        if self.index_dir:
            return Path(self.index_dir)
        local = root / ".repoctx"
        if (local / "index.sqlite").exists():
            return local
        user = user_index_dir(root)
        if (user / "index.sqlite").exists() or not _writable(local):
            return user
        return local


def resolve_settings(roots: Iterable[str | Path] = ()) -> Settings:
    """The settings every command uses for the repositories at ``roots`` (``repoctx index``, ``search``,
    ``status``, ``mcp``, ...): ``Settings.from_env()``, and for what the environment leaves unset of where an
    index lives and how it was built (``REPOCTX_INDEX_DIR``, ``REPOCTX_EMBEDDER``), the values the last
    ``repoctx index`` of those repositories used (``remember_settings``). An MCP client starts its server with
    a few variables of its own (the SDK's default: HOME, PATH, SHELL, TERM, USER, LOGNAME): without this, the
    server would not find the index ``repoctx index`` wrote and would build a second one in the repository.
    Records that disagree (two repositories indexed into different folders) are not used."""
    settings = Settings.from_env()
    if settings.database_url:  # one database names one store for everything (and its URL is never recorded)
        return settings
    records = [r for r in (_recorded(Path(x)) for x in roots if Path(x).is_dir()) if r is not None]
    overrides: dict = {}
    for var, key in (("REPOCTX_INDEX_DIR", "index_dir"), ("REPOCTX_EMBEDDER", "embedder")):
        if os.environ.get(var):
            continue
        values = {r.get(key) for r in records}
        value = values.pop() if len(values) == 1 else None  # every record agrees
        if value is not None:
            overrides[key] = Path(value) if key == "index_dir" else value
    return replace(settings, **overrides) if overrides else settings


def remember_settings(root: Path, settings: Settings) -> None:
    """After ``repoctx index``: record where the index of ``root`` is and which embedder built it (for
    ``resolve_settings`` in processes started without those variables). Nothing is recorded for the default
    location and model (found without a record) or for PostgreSQL. Best effort: a record that cannot be
    written only means the variables must be passed."""
    root = Path(root).resolve()
    path = _record_path(root)
    if settings.database_url or (
        settings.index_dir is None and settings.embedder == Settings().embedder and not path.exists()
    ):
        return
    rec = {
        "root": str(root),
        "index_dir": str(Path(settings.index_dir).resolve()) if settings.index_dir else None,
        "embedder": settings.embedder,
    }
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        tmp = path.with_suffix(f".{os.getpid()}.tmp")
        tmp.write_text(json.dumps(rec), encoding="utf-8")
        os.replace(tmp, path)
    except OSError:
        pass


def records_dir() -> Path:
    """Where ``remember_settings`` keeps its records (tests keep them in their own folder)."""
    return default_cache_dir() / "locations"


def _record_path(root: Path) -> Path:
    return records_dir() / f"{user_index_dir(root).name}.json"


def _recorded(root: Path) -> dict | None:
    """The record of ``root``'s last ``repoctx index``, when the index it names is still there."""
    root = root.resolve()
    try:
        rec = json.loads(_record_path(root).read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return None
    if not isinstance(rec, dict) or rec.get("root") != str(root):
        return None
    if rec.get("index_dir") and not (Path(rec["index_dir"]) / "index.sqlite").exists():
        return None  # moved or deleted since: the usual places apply
    return rec
