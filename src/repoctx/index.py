"""``repoctx.Index``: the small public surface the CLI, the copilot's tools, the API and the MCP server
all call. One store (SQLite embedded, or PostgreSQL) may hold many repositories; an ``Index`` is a
view of some of them. ``retrieve`` returns one ``Retrieval`` (sync, streamed, or async)."""

from __future__ import annotations

import hashlib
import json
import os
import re
import threading
import time
import zlib
from collections.abc import AsyncIterator, Callable, Iterable, Iterator
from contextlib import nullcontext
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import TYPE_CHECKING, Any

from repoctx.config import (  # re-exported: the settings rule every command follows lives with Settings now
    Settings,
    remember_settings as remember_settings,
    resolve_settings as resolve_settings,
)
from repoctx.store.base import EVERYTHING, Scope, StoreError, VectorState
from repoctx.types import Capsule, Context, Edge, FileHit, Hit, TraceEvent, iterate_in_thread
from repoctx.vectors import DenseRetriever, EmbedReport, VectorCache, fill_vectors

if TYPE_CHECKING:  # the indexer (tree-sitter, the walk) is imported only by what writes: a search never pays for it
    # and the retrieval modules only by what searches (their imports and regexes: ~0.02 s of a `repoctx index`)
    from repoctx.indexer import ProgressFn, UpdateReport
    from repoctx.retrieve.hybrid import SearchOptions
    from repoctx.store.grep import GrepLimits

LEVELS = ("symbol", "file")
MODES = ("auto", "standard", "agentic")
VECTOR_STATE_SECONDS = 2.0  # how long a repository's vector state is trusted by searches (fills move it)


def _similar_commits(body: bytes, repo: str, place: str = "") -> Any:
    """The ``SimilarCommits`` of a history as the store keeps it (zlib'd file), or None when it is not one. Built
    once per history and machine: it is kept in ``$REPOCTX_CACHE/history/votes-*.npz``, named by the repository in
    its store (``place``: the store's file or address, hashed: two stores may each hold a repository of one name)
    and the body's hash (a 39,000-commit history takes ~2 s to read and index, ~0.05 s to load), the repository's
    older ones removed. A cache that cannot be written costs the next process the build, nothing else."""
    from repoctx.config import default_cache_dir
    from repoctx.history import VOTES_VERSION, History, SimilarCommits
    from repoctx.tokens import TOKENIZER_VERSION

    who = hashlib.blake2b(f"{place}\0{repo}".encode(), digest_size=6).hexdigest()
    key = hashlib.blake2b(body, digest_size=12, person=f"v{VOTES_VERSION}t{TOKENIZER_VERSION}".encode()).hexdigest()
    folder = default_cache_dir() / "history"
    path = folder / f"votes-{who}-{key}.npz"
    if path.is_file():
        got = SimilarCommits.load(path)
        if got is not None:
            return got
    try:
        hist = History.parse(zlib.decompress(body).decode("utf-8", "replace"))
    except zlib.error:  # a damaged copy: no votes, never a failed search
        return None
    if hist is None:
        return None
    similar = SimilarCommits(hist.commits, by="files")
    try:
        similar.save(path)
        for old in folder.glob(f"votes-{who}-*.npz"):
            if old != path:
                old.unlink(missing_ok=True)
    except OSError:
        pass
    return similar


class NotIndexed(StoreError):
    pass


def open_store(settings: Settings, root: Path | None = None, create: bool = True, long_lived: bool = False):
    """The store the settings name: PostgreSQL when ``database_url`` is set, else the SQLite file in
    ``index_dir`` (default ``<root>/.repoctx``). With ``create=False`` a missing index is an error,
    never a new empty one. ``long_lived``: a server process, for which SQLite keeps BM25 in memory
    (unless ``settings.memory_lexical`` says otherwise)."""
    memory = long_lived if settings.memory_lexical is None else settings.memory_lexical
    if settings.database_url:
        from repoctx.store.postgres import PostgresStore

        return PostgresStore(settings.database_url, memory_lexical=memory, connect_timeout=settings.store_timeout)
    from repoctx.store.sqlite import SQLiteStore

    if settings.index_dir is not None:
        where = Path(settings.index_dir)
    elif root is not None:
        where = settings.index_dir_for(root)
    else:
        raise StoreError("no index location: give a repository path, REPOCTX_INDEX_DIR or REPOCTX_DATABASE_URL")
    return SQLiteStore(where / "index.sqlite", create=create, memory_lexical=memory)


def default_repo_name(root: Path) -> str:
    name = re.sub(r"[^A-Za-z0-9._-]+", "-", root.name).strip("-.") or "repo"
    return name[:80]


@dataclass
class Retrieval:
    """What one retrieval returns, whatever path it took: plain data that serialises to JSON."""

    query: str
    mode: str  # the path taken: standard | agentic
    route: dict  # the router's decision (mode, reason, shape)
    level: str  # symbol | file
    k: int
    hits: list[Hit]  # symbol level: the k best units; file level: the units behind the files
    files: list[FileHit] = field(default_factory=list)  # file level: the k best files
    events: list[TraceEvent] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)  # what the caller should know (e.g. vectors still filling)
    seconds: float = 0.0
    details: dict = field(default_factory=dict)  # agentic: sub-queries, coverage, iterations

    def to_dict(self, trace: bool = True) -> dict:
        out = {
            "query": self.query,
            "mode": self.mode,
            "route": self.route,
            "level": self.level,
            "k": self.k,
            "notes": self.notes,
            "seconds": round(self.seconds, 4),
            **self.details,
        }
        if self.level == "file":
            out["files"] = [f.to_dict() for f in self.files]
        else:
            out["hits"] = [h.to_dict() for h in self.hits]
        if trace:
            out["trace"] = [e.to_dict() for e in self.events]
        return out


# a cold index parsing at most this many files starts loading the embedding model while it parses (an update of an
# index that has files starts it at its first change; Index.update)
PRELOAD_MAX_FILES = 64


class Index:
    """A view of one or more repositories in a store.

    ``Index(path)`` is one repository on disk (``update`` indexes it, registering it under a name);
    ``Index(settings=..., repos=("a", "b"))`` reads repositories already indexed in a shared store
    (``repos=()``: every one). Reads are scoped to the view's repositories unless the scope names others.
    """

    def __init__(
        self,
        root: str | Path | None = None,
        settings: Settings | None = None,
        embedder=None,
        *,
        name: str | None = None,
        repos: tuple[str, ...] | list[str] | None = None,
        store=None,
        create: bool = True,
    ):
        self.settings = settings or Settings.from_env()
        self.root: Path | None = None
        if root is not None:
            self.root = Path(root).resolve()
            if not self.root.is_dir():
                raise FileNotFoundError(f"not a directory: {root}")
        self.store = store if store is not None else open_store(self.settings, self.root, create=create)
        self.index_dir = (
            self.settings.index_dir_for(self.root)
            if self.root and not self.settings.database_url
            else self.settings.index_dir
        )
        if self.root is not None:
            self.repo = self._name_for(self.root, name)
            self.repos: tuple[str, ...] = (self.repo,)
        else:
            self.repos = tuple(repos or ())
            self.repo = self.repos[0] if len(self.repos) == 1 else ""
        self._embedder = embedder  # any object with encode(texts) -> array, model_id and dim
        self._dense: DenseRetriever | None = None
        self._bg: threading.Thread | None = None
        self._vstates: dict[tuple[str, str], tuple[float, VectorState]] = {}  # (repo, model) -> (until, state)
        # repo -> (until, the stamp of its history in the store, its SimilarCommits): the votes a search reads
        self._history: dict[str, tuple[float, str | None, Any]] = {}
        self._history_kept: str | None = None  # the stamp of this index's own history in the store, once known
        self._history_folder: tuple[Path, str] | tuple[()] | None = None  # history.tracked_folder(root), once asked
        self._history_aside: dict[str, threading.Thread] = {}  # repo -> the thread reading its newer history
        self.last_history: Any = None  # the last update's HistoryUpdate (repoctx.history), None when none was mined
        self._vstates_lock = threading.Lock()
        self._names: tuple[float, tuple[str, ...]] | None = None  # (until, the store's repository names)
        self.last_embed: EmbedReport | None = None
        self.embed_error: str | None = None
        self._grep_limits: GrepLimits | None = None

    @property
    def grep_limits(self) -> GrepLimits:
        """grep's bounds for this view (a service may set its own). Made on first use: a search never imports the
        grep module (~25M instructions of a one-shot `repoctx search`, callgrind)."""
        if self._grep_limits is None:
            from repoctx.store.grep import GrepLimits

            self._grep_limits = GrepLimits()
        return self._grep_limits

    @grep_limits.setter
    def grep_limits(self, limits: GrepLimits) -> None:
        self._grep_limits = limits

    def _name_for(self, root: Path, name: str | None) -> str:
        known = self.store.repo_by_root(str(root))
        if name:
            return name
        if known is not None:
            return known.name
        base = default_repo_name(root)
        taken = self.store.repo(base) if hasattr(self.store, "repo") else None
        if taken is not None and taken.root != str(root):  # another checkout with the same folder name
            base = f"{base}-{hashlib.blake2b(str(root).encode(), digest_size=3).hexdigest()}"
        return base

    # ---- scope
    def scope(self, scope: Scope | None = None) -> Scope:
        """The caller's scope narrowed to this view's repositories when it names none. Grants that each allow a
        whole repository (no path rules) become that list of repositories, grants dropped: the same rows, read
        through the stores' per-repository paths (no per-row grant test, the scope's own BM25 statistics, an
        exact dense scan of those repositories) instead of a WHERE clause over every row."""
        scope = scope or EVERYTHING
        granted = scope.granted_repos()
        if granted is not None and _whole_repositories(scope):
            wanted = scope.repos or granted
            within = tuple(r for r in wanted if r in granted and (scope.repos or not self.repos or r in self.repos))
            if within:
                return replace(scope, repos=within, grants=None)
            return scope  # nothing granted is asked for: the grants stay and admit nothing
        if scope.repos:
            return scope
        if granted is not None:  # a key's grants that each name a repository bound the read to those
            within = tuple(r for r in granted if not self.repos or r in self.repos)
            if within:
                return replace(scope, repos=within)
        return scope if not self.repos else replace(scope, repos=self.repos)

    # ---- writing
    def update(
        self,
        progress: ProgressFn | None = None,
        wait: bool = True,
        embed: bool = True,
        background: bool = False,
        by: str = "index update",
        history_backfill: bool = True,
    ) -> UpdateReport:
        """Refresh the lexical index and graph (one transaction), then fill dense vectors for what
        changed. With ``background=True`` vectors fill in a thread while lexical search already answers.
        ``by`` names the updater in the store's record of the change (``UpdateReport.previous_change``).
        ``history_backfill=False``: a git history that its time budget left incomplete is not taken further back by
        this update (a watched save's refresh, which should end within its second or two)."""
        from repoctx.indexer import RELEASE_AFTER_UNITS, release_memory, update_index

        if self.root is None:
            raise StoreError("this Index reads a store; open Index(path) to index a repository")
        notes = []
        try:
            self.check_store()
        except StoreError:  # the index folder was deleted under us: start a new one rather than write nowhere
            self.store.close()
            self.store = open_store(self.settings, self.root, create=True)
            self._dense = None
            notes.append(f"the index at {self.index_dir} had been removed while open; rebuilt it from scratch")
        self.store.register_repo(self.repo, str(self.root))
        writer = self.store.writer(self.repo)
        start = getattr(self.embedder, "load_in_background", None) if embed else None
        started = False

        def emit(event: dict) -> None:
            # an update whose files the vectors will need starts the model's load (its session is made mostly outside
            # the GIL) beside the walk's rest and the parse: from the first changed file the walk meets (Django, one
            # file edited: 0.59 -> 0.52 s at idle when it started at the plan), or at the plan of a cold index of a
            # few files. Not for a cold index of many: beside a cold parse it raised the peak RSS to 416 MiB and
            # slowed it on a busy machine
            nonlocal started
            kind = event.get("event")
            if kind == "first_change" or (kind == "plan" and 0 < event.get("to_parse", 0) <= PRELOAD_MAX_FILES):
                if start is not None and not started:
                    started = True
                    start()
                if kind == "first_change":
                    return  # the index's own business: a caller's progress hears of the plan, as before
            if progress is not None:
                progress(event)

        with writer.lock("index", wait=wait):
            report = update_index(self.root, writer, self.settings, emit, by=by)
        if report.capsules_written >= RELEASE_AFTER_UNITS:
            release_memory(self.store)
        self._vstates.clear()
        self._names = None
        report.notes += notes
        note = self._update_history(report.git_head, history_backfill)
        if note:
            report.notes.append(note)
        if embed and self.embedder is not None:
            # what this update changed, when it moved the generation (else the set may lack another's changes)
            changed = (report.written, report.generation) if report.changed and report.generation else None
            if background:
                self._bg = threading.Thread(target=self._fill, args=(progress, changed), daemon=True)
                self._bg.start()
            else:
                self._fill(progress, changed)
        return report

    # ---- the tree's own git history: past commits like a question vote for the files they changed
    def _history_source(self, head: str | None) -> tuple[Path, str | None] | None:
        """Where this index's root's history is mined: (the git work tree's top, the root's folder in it, None for
        the top itself), or None: history off, not in git (``head``: the HEAD the update read), or a folder inside a
        checkout that git tracks nothing in (``history.tracked_folder``; asked once per index)."""
        if not self.settings.history or self.root is None:
            return None
        if (self.root / ".git").exists():
            return self.root, None
        if head is None:
            return None
        if self._history_folder is None:
            from repoctx.history import tracked_folder

            self._history_folder = tracked_folder(self.root) or ()
        return self._history_folder or None

    def history_path(self) -> Path:
        """Where this machine keeps the mined history of this index's root while it mines it (beside the vector
        cache: one file per repository and root); the store keeps a copy that every process reads."""
        from repoctx.config import default_cache_dir

        key = hashlib.blake2b(str(self.root).encode(), digest_size=5).hexdigest()
        return default_cache_dir() / "history" / f"{self.repo}-{key}.jsonl"

    def _update_history(self, head: str | None, backfill: bool = True) -> str | None:
        """Mine the commits after the last one seen (files and messages, ``history_budget`` seconds at most, newest
        first), then, with ``backfill`` and time left, older ones that an earlier budget left out; ``head``: the HEAD
        the update read (None: asked again). The history is mined in a file on this machine, taken from the store
        when this machine has none (another worker mined it), and the store is given the file when it changed, so
        a search in any process of the store votes with it. A failure (no git, a broken repository) is a note; the
        index is never the worse for it."""
        from repoctx.history import update_history

        try:
            source = self._history_source(head)
            if source is None:
                return None
            path = self.history_path()
            if not path.exists():
                self._history_from_store(path)
            self.last_history = update_history(
                source[0],
                path,
                time_budget=self.settings.history_budget,
                symbols=False,
                load=False,
                head=head,
                backfill=backfill,
                under=source[1],
            )
            self._history_to_store(path)
        except Exception as e:  # noqa: BLE001 - git missing or failing: the search goes on without the history
            return f"the git history was not read ({type(e).__name__}: {str(e).splitlines()[0] if str(e) else ''})"
        return None

    def _history_from_store(self, path: Path) -> None:
        """Write the store's copy of this repository's history to ``path`` (none kept: nothing written)."""
        got = self.store.history(self.repo)
        if got is None or got[1] is None:
            return
        path.parent.mkdir(parents=True, exist_ok=True)
        tmp = path.with_suffix(path.suffix + f".{os.getpid()}.tmp")
        tmp.write_bytes(zlib.decompress(got[1]))
        os.replace(tmp, path)
        self._history_kept = got[0]

    def _history_to_store(self, path: Path) -> None:
        """Give the store the history at ``path`` when its first line (its stamp: head, completeness, tail, time)
        is not the one the store keeps. An update that changed nothing reads that line only."""
        try:
            with path.open("rb") as f:
                stamp = f.readline().decode("utf-8", "replace").strip()
        except OSError:
            return
        if not stamp or stamp == self._history_kept:
            return
        got = self.store.history(self.repo, known=stamp)
        if got is None or got[0] != stamp:
            self.store.put_history(self.repo, stamp, zlib.compress(path.read_bytes(), 1))
        self._history_kept = stamp

    def _store_place(self) -> str:
        """Where this index's store is (its SQLite file, or its database's address), for the votes' cache name."""
        place = getattr(self.store, "path", None) or getattr(self.store, "url", None)
        return str(Path(place).resolve() if isinstance(place, Path) else place or "")

    def _history_votes(self, query: str, repo: str) -> list[tuple[str, list[Any]]]:
        """The files of ``repo`` that the past commits most like ``query`` changed, best first, each with the commits
        that voted for it most (``history.Voter``); none without a mined history. The history is the store's copy
        (whichever process or machine mined it), checked at most every ``VECTOR_STATE_SECONDS`` for a newer stamp. A
        newer one (a push) is read in a thread while the last one votes: a 39,000-commit history takes ~1-2 s to read
        and index, which no search should wait for twice (a process that finds it in this machine's cache,
        ``_similar_commits``, loads it in ~15 ms)."""
        now = time.monotonic()
        known = self._history.get(repo)
        if known is None or known[0] < now:
            got = self.store.history(repo, known=known[1] if known else None)
            if got is None:
                known = (now + VECTOR_STATE_SECONDS, None, None)
            elif known is None or known[2] is None:
                similar = _similar_commits(got[1], repo, self._store_place()) if got[1] is not None else None
                known = (now + VECTOR_STATE_SECONDS, got[0], similar)
            else:
                if got[1] is not None:
                    self._read_history_aside(repo, got[0], got[1])
                known = (now + VECTOR_STATE_SECONDS, known[1], known[2])
            self._history[repo] = known
        similar = known[2]
        return [(p, why) for p, _, why in similar.rank_voters(query)] if similar is not None else []

    def _read_history_aside(self, repo: str, stamp: str, body: bytes) -> None:
        if repo in self._history_aside:
            return

        def read() -> None:
            try:
                similar = _similar_commits(body, repo, self._store_place())
                self._history[repo] = (time.monotonic() + VECTOR_STATE_SECONDS, stamp, similar)
            finally:
                self._history_aside.pop(repo, None)

        self._history_aside[repo] = t = threading.Thread(target=read, name="repoctx-history", daemon=True)
        t.start()

    def rank_files(
        self, query: str, files: list[FileHit], scope: Scope, resolved: dict[str, list[str]] | None = None
    ) -> tuple[list[FileHit], dict[str, int]]:
        """``files`` as a file-level search ranks them: re-ordered by their repositories' history votes
        (``with_history``), then by the paths the question writes (``with_named``; ``resolved``: those paths as
        ``hybrid.resolve_paths`` gave them, when the caller has them); how many files each moved."""
        files, by_history = self.with_history(query, files)
        files, by_paths = self.with_named(query, files, scope, resolved)
        return files, {"history": by_history, "named": by_paths}

    def with_history(self, query: str, files: list[FileHit]) -> tuple[list[FileHit], int]:
        """``files`` re-ordered by their repositories' history votes, weighted reciprocal ranks (as ``history.fuse`` at
        ``history.FILE_WEIGHT``, each repository's votes ranked among its files the search found: a file it did not
        find, as one the scope hides, never joins), and how many moved. A file that got votes names the commits that
        gave it the most (``FileHit.history``)."""
        from repoctx.history import FILE_WEIGHT

        if len(files) < 2 or not self.settings.history:
            return files, 0
        keys = _file_keys(files)
        found: dict[str, set[str]] = {}
        for key in keys:
            if key is not None:
                found.setdefault(key[0], set()).add(key[1])
        voted: dict[tuple[str, str], tuple[int, list[Any]]] = {}  # (repo, path) -> (its rank among the votes, voters)
        for repo, paths in found.items():
            votes = [(p, why) for p, why in self._history_votes(query, repo) if p in paths]
            voted.update({(repo, p): (i, why) for i, (p, why) in enumerate(votes, 1)})
        if not voted:
            return files, 0
        got = [voted.get(key) if key is not None else None for key in keys]
        for f, vote in zip(files, got, strict=True):
            f.history = [(v.sha, v.title) for v in vote[1]] if vote else []
        return _fused(files, [FILE_WEIGHT / (60 + vote[0]) if vote else 0.0 for vote in got])

    def with_named(
        self, query: str, files: list[FileHit], scope: Scope, resolved: dict[str, list[str]] | None = None
    ) -> tuple[list[FileHit], int]:
        """``files`` re-ordered by the paths the question writes (``hybrid.named_files``, weighted reciprocal ranks at
        ``hybrid.NAMED_WEIGHT``; a file the search did not find never joins), and how many moved. A file a written
        path names says so (``FileHit.named``)."""
        from repoctx.retrieve.hybrid import NAMED_WEIGHT, named_files

        if len(files) < 2:
            return files, 0
        votes, written = named_files(self.store, query, scope, resolved)
        if not votes:
            return files, 0
        keys = _file_keys(files)
        for f, key in zip(files, keys, strict=True):
            f.named = written.get(key, "") if key is not None else ""
        return _fused(files, [NAMED_WEIGHT * votes.get(key, 0.0) if key is not None else 0.0 for key in keys])

    @property
    def embedder(self):
        if self._embedder is not None:
            return self._embedder
        if self.settings.embedder in ("none", "", None):
            return None
        from repoctx.providers.embedding import get_embedder

        self._embedder = get_embedder(self.settings.embedder)
        return self._embedder

    def _fill(
        self, progress: ProgressFn | None = None, changed: tuple[list[str], int] | None = None
    ) -> EmbedReport | None:
        """Embed what the content-hash cache lacks and hand the vectors to the store. ``changed``: the files the
        update before rewrote or removed and the generation it wrote (``fill_vectors``)."""
        writer = self.store.writer(self.repo)
        model = self.embedder.model_id
        if self.store.vectors_current(self.repo, model):
            return None
        try:
            with writer.lock("vectors", wait=True):
                if self.store.vectors_current(self.repo, model):
                    return None
                cache = VectorCache(self.settings.vector_cache)
                try:
                    self.last_embed = fill_vectors(
                        writer, self.embedder, cache, progress, keep=self.settings.cache_vectors, changed=changed
                    )
                finally:
                    cache.close()  # its log folded in now: a process may end without finalisers (cli._Commands)
                self._vstates.clear()
                self.embed_error = None
                return self.last_embed
        except Exception as e:  # lexical search keeps working; the reason is kept for status
            self.embed_error = f"{type(e).__name__}: {e}"
            raise

    def wait_vectors(self, timeout: float | None = None) -> None:
        if self._bg is not None:
            self._bg.join(timeout)

    # ---- state
    def check_store(self) -> None:
        """Raise StoreError when the store this view reads has vanished (an index folder deleted)."""
        check = getattr(self.store, "check_present", None)
        if check is not None:
            check()

    def meta(self, key: str) -> str | None:
        return self.store.meta(key, self.repo)

    def indexed(self) -> bool:
        return (
            all(self.store.meta("complete", r) == "1" for r in self.repos) if self.repos else bool(self.store.repos())
        )

    def status(self) -> dict:
        from repoctx.indexer import stale_files

        out = stale_files(self.root, self.store.writer(self.repo), self.settings) if self.root else {}
        out["repo"] = self.repo
        out["counts"] = self.store.counts(self.scope())
        out["indexed"] = self.indexed()
        out["vectors"] = self.vectors_status()
        out["history"] = self.history_status()
        return out

    def history_status(self) -> dict:
        """This repository's mined git history as the store keeps it: whether one is kept, the commit it reaches,
        how many commits it lists, and whether it goes back to the first one (else the next updates go on)."""
        if not self.settings.history:
            return {"enabled": False, "kept": False}
        got = self.store.history(self.repo, known=self._history_kept) if self.repo else None  # (its body: not sent)
        try:
            if got is None:
                raise ValueError("none kept")
            meta = json.loads(got[0])
            commits = meta.get("commits")
            if not isinstance(commits, int):  # a history kept before the count was: a line a commit, after the first
                body = got[1] if got[1] is not None else (self.store.history(self.repo) or ("", b""))[1]
                commits = zlib.decompress(body or b"").count(b"\n") - 1
        except (ValueError, zlib.error):
            return {"enabled": True, "kept": False}
        return {
            "enabled": True,
            "kept": True,
            "head": meta.get("head"),
            "commits": max(0, commits),
            "complete": bool(meta.get("complete", True)),
            "seconds": meta.get("seconds"),
        }

    def vectors_status(self) -> dict:
        emb = self.embedder
        if emb is None:
            return {
                "enabled": False,
                "model": None,
                "indexed_model": None,
                "count": 0,
                "total": 0,
                "coverage": 0.0,
                "current": False,
                "error": self.embed_error,
            }
        repos = list(self.repos or [r.name for r in self.store.repos()])
        many = getattr(self.store, "vector_states", None)
        states = (
            list(many(repos, emb.model_id).values())
            if many is not None
            else [self.store.vector_state(r, emb.model_id) for r in repos]
        )
        count, total = sum(s.count for s in states), sum(s.total for s in states)
        models = {s.model for s in states if s.model}
        return {
            "enabled": True,
            "model": emb.model_id,
            "indexed_model": ", ".join(sorted(models)) or None,
            "count": count,
            "total": total,
            "coverage": round(count / total, 4) if total else 1.0,
            "current": bool(states) and all(s.current for s in states),
            "error": self.embed_error,
        }

    def files(self, scope: Scope | None = None) -> list[tuple[str, str]]:
        """(repository, path) of every indexed file the scope lets the caller see."""
        return self.store.paths(self.scope(scope))

    # ---- reading
    def dense_index(self, scope: Scope | None = None) -> DenseRetriever | None:
        """The dense retriever, or None when no embedder is configured or no vectors of its model exist
        in scope (then the model is never loaded: a lexical-only search stays fast)."""
        emb = self.embedder
        if emb is None:
            return None
        if not any(s.count for _, s in self._vector_states(self.scope(scope), emb.model_id)):
            return None
        if self._dense is None:
            self._dense = DenseRetriever(
                self.store, emb, VectorCache(self.settings.vector_cache), windows=self.settings.function_windows
            )
        return self._dense

    def search(
        self,
        query: str,
        k: int = 10,
        level: str = "symbol",
        scope: Scope | None = None,
        options: SearchOptions | None = None,
    ) -> list[Hit] | list[FileHit]:
        """Standard (hybrid) search: the k best units, or files."""
        from repoctx.retrieve.hybrid import SearchOptions, file_aggregation, to_files

        query = _check_query(query)
        self.check_store()
        scope = self.scope(scope)
        opts = options or SearchOptions(k=k, level=level)
        hits, _ = self._standard(query, k, level, opts, scope, self.dense_index(scope))
        if level == "file":
            return self.rank_files(query, to_files(hits, file_aggregation(opts.file_agg, query)), scope)[0][:k]
        return hits[:k]

    def _standard(
        self, query: str, k: int, level: str, opts: SearchOptions, scope: Scope, dense, stats: dict | None = None
    ) -> tuple[list[Hit], str]:
        """The standard search's units and what its second stage did: for files every candidate in the first
        stage's order (files are ranked from its scores); for units the first max(k, 30), the first 30 re-ranked,
        then in the order their files' ranking gives them too (``_file_prior``)."""
        reading = getattr(self.store, "reading", None)  # both stages' reads: one content key, one connection
        with reading() if reading is not None else nullcontext():
            return self._stages(query, k, level, opts, scope, dense, stats)

    def _stages(
        self, query: str, k: int, level: str, opts: SearchOptions, scope: Scope, dense, stats: dict | None
    ) -> tuple[list[Hit], str]:
        from repoctx.retrieve import rerank as rr
        from repoctx.retrieve.hybrid import search

        if level == "file":
            return search(self.store, query, opts, dense, scope, stats=stats), ""
        if not (opts.rerank and self.settings.second_stage):
            return search(self.store, query, opts, dense, scope, limit=k, stats=stats), ""
        seen = stats if stats is not None else {}
        hits = search(self.store, query, opts, dense, scope, limit=max(k, rr.DEPTH), stats=seen)
        ranked, said = self._second_stage(query, hits, scope, dense)
        return self._file_prior(query, ranked, opts, scope, seen["units"], seen.get("resolved")), said

    def _file_prior(
        self,
        query: str,
        hits: list[Hit],
        opts: SearchOptions,
        scope: Scope,
        units: list[tuple[str, str, float]],
        resolved: dict[str, list[str]] | None = None,
    ) -> list[Hit]:
        """A standard search's re-ranked units, the first ``rerank.DEPTH`` of them in the order their files' ranking
        gives them too (``hybrid.file_prior``); the files ranked as a file-level search ranks them, from the first
        candidates (``units``, a search's ``stats["units"]``; ``resolved``, its ``stats["resolved"]``)."""
        from repoctx.retrieve import rerank as rr
        from repoctx.retrieve.hybrid import file_aggregation, file_prior, unit_files

        ranking = unit_files(units, file_aggregation(opts.file_agg, query))
        files, _ = self.rank_files(query, ranking, scope, resolved)
        return file_prior(hits[: rr.DEPTH], files) + hits[rr.DEPTH :]

    def _second_stage(self, query: str, hits: list[Hit], scope: Scope, dense) -> tuple[list[Hit], str]:
        """A standard search's first units re-ordered by the shipped re-ranker, the whole question as one
        lane, with the weights fitted for that (``rerank_weights.standard.json``; SWE-bench dev function
        Acc@1 28.1 -> 38.6, Acc@10 57.9 -> 62.3; multi-language questions Acc@1 36.0 -> 45.3); and what was
        done, for the trace. A re-ranker that fails leaves the first stage's order."""
        from repoctx.retrieve import rerank as rr

        if len(hits) < 2:
            return hits, ""
        from repoctx.retrieve.agentic import content_terms  # agentic.py is loaded only when needed

        try:
            model = rr.load_reranker(embedder=rr.embedder_ids(self), role="standard")
            if model is None:
                return hits, ""
            ranked = rr.rerank_question(
                self.store,
                model,
                content_terms(query),
                hits,
                query,
                rr.trained_dense(model, dense),
                scope,
                keep=second_stage_keeps(query, hits),
            )
        except Exception as e:  # noqa: BLE001 - the first stage's order stands
            return hits, f"second stage failed ({type(e).__name__}); first-stage order kept"
        return ranked, f"first {min(len(hits), rr.DEPTH)} re-ranked"

    def retrieve(
        self,
        query: str,
        k: int = 10,
        level: str = "symbol",
        mode: str = "auto",
        scope: Scope | None = None,
        planner=None,
        max_iterations: int = 5,
        on_event: Callable[[TraceEvent], None] | None = None,
        options: SearchOptions | None = None,
        judge=None,
    ) -> Retrieval:
        """Standard or agentic retrieval (the router decides in ``auto``), as one ``Retrieval``.
        ``on_event`` sees each trace event as it happens. ``planner``/``judge``: a model's planner and
        per-intent relevance judge for the agentic path (``llm_helpers``); offline rules without them."""
        result: Retrieval | None = None
        for ev in self.stream(query, k, level, mode, scope, planner, max_iterations, options, judge=judge):
            if ev.step == "Result":
                result = ev.data["retrieval"]
            if on_event is not None:
                on_event(ev)
        assert result is not None  # stream() always ends with its Result event
        return result

    def stream(
        self,
        query: str,
        k: int = 10,
        level: str = "symbol",
        mode: str = "auto",
        scope: Scope | None = None,
        planner=None,
        max_iterations: int = 5,
        options: SearchOptions | None = None,
        judge=None,
    ) -> Iterator[TraceEvent]:
        """Trace events as they happen; the last is ``Result`` with ``data["retrieval"]``. ``options``
        tune the standard search (signals, pool; evaluation runs its configurations through them)."""
        from repoctx.retrieve.agentic import AgenticRetriever
        from repoctx.retrieve.hybrid import SearchOptions, file_aggregation, search, to_files
        from repoctx.retrieve.router import Route, route

        query = _check_query(query)
        if mode not in MODES:
            raise ValueError(f"mode must be one of {', '.join(MODES)}, not {mode!r}")
        if level not in LEVELS:
            raise ValueError(f"level must be one of {', '.join(LEVELS)}, not {level!r}")
        if k < 1:
            raise ValueError("k must be at least 1")
        t0 = time.perf_counter()
        self.check_store()
        scope = self.scope(scope)
        events: list[TraceEvent] = []
        decision = route(query) if mode == "auto" else Route(mode, "chosen by the caller", "forced")
        ev = TraceEvent("Routing", "SUCCEEDED", f"{decision.mode}: {decision.reason}", data=decision.to_dict())
        events.append(ev)
        yield ev
        depth = k if level == "symbol" else max(5 * k, 50)  # files need a deeper pool of units
        details: dict = {}
        if decision.mode == "agentic":
            retriever = AgenticRetriever(
                self,
                planner=planner,
                max_iterations=max_iterations,
                k=depth,
                scope=scope,
                plan=decision.plan if planner is None else (),
                judge=judge,
            )
            hits: list[Hit] = []
            for ev in retriever.stream(query):
                if ev.step == "Result":
                    res = ev.data["result"]
                    hits = res.hits
                    details = {
                        "sub_queries": res.sub_queries,
                        "iterations": res.iterations,
                        "sufficient": res.sufficient,
                        "coverage": res.coverage,
                        "expanded": res.expanded,
                    }
                    continue
                events.append(ev)
                yield ev
        else:
            ev = TraceEvent("Retrieval", "IN_PROGRESS", "standard retrieval", query)
            events.append(ev)
            yield ev
            opts = options or SearchOptions(k=depth, level=level)
            dense = self.dense_index(scope) if opts.dense else None
            if dense is not None:  # embedded in a thread while the lexical signals are read
                dense.prefetch(_dense_texts(query, opts))
            stats: dict = {}
            hits, said = self._standard(query, k, level, opts, scope, dense, stats)
            n = stats["candidates"]
            ev = TraceEvent("Retrieval", "SUCCEEDED", f"{n} candidates" + (f", {said}" if said else ""), query, n)
            events.append(ev)
            yield ev
        files: list[FileHit] = []
        if level == "file":
            agg = file_aggregation((options or SearchOptions()).file_agg, query)
            files = to_files(hits, agg)
            if len(files) < k and decision.mode == "agentic":  # top up from the whole question's ranking
                seen = {f.path for f in files}
                more = search(self.store, query, SearchOptions(k=depth, level=level), self.dense_index(scope), scope)
                files += [f for f in to_files(more, agg) if f.path not in seen]
            files, moved = self.rank_files(query, files, scope)
            for key, step, what in (
                ("history", "History", "the past commits most like it"),
                ("named", "Paths", "the paths it writes"),
            ):
                if moved[key]:
                    ev = TraceEvent(step, "SUCCEEDED", f"{moved[key]} files moved by {what}", query)
                    events.append(ev)
                    yield ev
            files = files[:k]
            hits = [h for f in files for h in f.capsules]
        else:
            hits = hits[:k]
        retrieval = Retrieval(
            query,
            decision.mode,
            decision.to_dict(),
            level,
            k,
            hits,
            files,
            events,
            self._notes(scope),
            time.perf_counter() - t0,
            details,
        )
        n = len(files) if level == "file" else len(hits)
        yield TraceEvent(
            "Result",
            "SUCCEEDED",
            f"{n} {'files' if level == 'file' else 'hits'}",
            hits=n,
            data={"retrieval": retrieval},
        )

    async def aretrieve(self, query: str, **kw) -> Retrieval:
        """``retrieve`` for asyncio callers: the work runs in a worker thread, the loop never blocks."""
        import asyncio

        return await asyncio.to_thread(self.retrieve, query, **kw)

    async def astream(self, query: str, **kw) -> AsyncIterator[TraceEvent]:
        """``stream`` for asyncio callers: each step runs in a worker thread."""
        async for ev in iterate_in_thread(self.stream(query, **kw)):
            yield ev

    def _notes(self, scope: Scope) -> list[str]:
        """What a caller should know about the vectors behind an answer: nothing when no embedder is configured
        or they are complete; "still being filled" only while a fill runs (here or in another process)."""
        emb = self.embedder
        if emb is None:
            return []
        states = self._vector_states(scope, emb.model_id)
        count, total = sum(s.count for _, s in states), sum(s.total for _, s in states)
        if not total or count >= total:
            return []
        # a scoped caller learns the share, never unit counts of files or repositories outside what it may read
        cover = (
            f"{count} of {total} units ({100 * count / total:.0f}%)"
            if scope.unrestricted
            else f"{100 * count / total:.0f}% of the units"
        )
        if self._filling([r for r, s in states if s.count < s.total]):
            return [
                f"dense vectors cover {cover}: they are still being filled, so this answer uses lexical search "
                f"for the rest"
            ]
        if not count:
            return [
                f"dense search is off: this index holds no vectors of {emb.model_id} (`repoctx index` builds "
                f"them), so this answer is lexical"
            ]
        return [
            f"dense vectors cover {cover} and none are being filled (`repoctx index` completes them): this "
            f"answer uses lexical search for the rest"
        ]

    def _vector_states(self, scope: Scope, model: str) -> list[tuple[str, VectorState]]:
        """(repository, its vector state) for the repositories ``scope`` may see, each read at most once per
        ``VECTOR_STATE_SECONDS``: a search asks twice (dense or not, notes), and a store of many repositories
        would count each one's units on every request."""
        repos = [r for r in scope.repos or self._repo_names() if scope.allows_repo(r)]
        now = time.monotonic()
        stale = [r for r in repos if (hit := self._vstates.get((r, model))) is None or hit[0] < now]
        if stale:
            with self._vstates_lock:  # one reader at a time: concurrent searches wait for its answer, not repeat it
                now = time.monotonic()
                stale = [r for r in stale if (hit := self._vstates.get((r, model))) is None or hit[0] < now]
                if stale:
                    many = getattr(self.store, "vector_states", None)  # one round trip for many repositories
                    got = (
                        many(stale, model)
                        if many is not None
                        else {r: self.store.vector_state(r, model) for r in stale}
                    )
                    until = time.monotonic() + VECTOR_STATE_SECONDS
                    self._vstates.update({(r, model): (until, state) for r, state in got.items()})
        return [(r, hit[1]) for r in repos if (hit := self._vstates.get((r, model))) is not None]

    def _repo_names(self) -> tuple[str, ...]:
        """The store's repository names, read at most once per ``VECTOR_STATE_SECONDS``."""
        now = time.monotonic()
        if self._names is None or self._names[0] < now:
            names = getattr(self.store, "repo_names", None)  # names only: no metadata read per repository
            listed = tuple(names()) if names is not None else tuple(r.name for r in self.store.repos())
            self._names = (now + VECTOR_STATE_SECONDS, listed)
        return self._names[1]

    def _filling(self, repos: list[str]) -> bool:
        """Whether vectors of ``repos`` are being filled now: by this view's thread, or by whoever holds a
        repository's vectors lock (another process, another view's thread)."""
        if self._bg is not None and self._bg.is_alive():
            return True
        from repoctx.store.base import IndexBusy

        for repo in repos:
            try:
                with self.store.writer(repo).lock("vectors", wait=False):
                    pass
            except IndexBusy:
                return True
            except Exception:  # noqa: BLE001 - a lock that cannot be probed (read-only index) says nothing
                continue
        return False

    def context(
        self,
        query: str,
        task: str | None = None,
        budget: int | None = None,
        mode: str = "standard",
        scope: Scope | None = None,
    ) -> Context:
        """Context compressed to the task (code_query, refactor, code_gen, search) inside a token budget.
        With mode auto/agentic the hits come from the router / agentic loop."""
        from repoctx.retrieve.context import DEFAULT_BUDGETS, build_context, classify_task, hits_for

        query = _check_query(query)
        scope = self.scope(scope)
        hits = None
        if mode != "standard":
            task = task or classify_task(query)
            k = max(30, hits_for(task, DEFAULT_BUDGETS.get(task, 2000) if budget is None else budget))
            hits = self.retrieve(query, k=k, mode=mode, scope=scope).hits
        return build_context(self, query, task=task, budget=budget, scope=scope, hits=hits)

    # ---- grep, outline, symbol: what an agent reaches for by habit, over the indexed snapshot (no checkout)
    def grep(
        self,
        pattern: str,
        *,
        fixed: bool = False,
        ignore_case: bool = False,
        paths: Iterable[str] | str = (),
        repos: Iterable[str] | str | None = None,
        scope: Scope | None = None,
        limit: int = 100,
        offset: int = 0,
        context: int = 0,
    ) -> dict:
        """Lines of the indexed files that match ``pattern``, like ``git grep -n`` over the snapshot the index
        holds (it works on a service without a checkout).

        ``pattern`` is a Python ``re`` regular expression (``fixed=True``: a literal string), matched against
        each line on its own: ``^``/``$`` are the line's start and end, a match never spans lines.
        ``ignore_case`` is ``re.IGNORECASE``. ``paths``: path globs of the access-rule grammar
        (``repoctx.store.globs``: ``*`` crosses ``/``, so ``src/*.py`` is every Python file under ``src``), any
        of which a file must match; ``repos`` narrows to repositories. Neither widens ``scope``, which the
        store applies in its query: a file the scope hides is never read.

        Files are narrowed by a trigram index, then searched with the regex; a pattern without a literal of
        3 characters (``\\w+_id`` still has ``_id``; ``^\\s*$`` has none) searches every file in scope,
        within bounds (``self.grep_limits``: time, text searched, matching lines per file and in all).

        Returns ``{"pattern", "fixed", "ignore_case", "paths", "matches": [{"repo", "path", "line", "text"}
        (+ "before"/"after": up to ``context`` lines each side)], "total", "total_exact", "files_scanned",
        "files_matched", "offset", "limit", "next_offset", "truncated", "cut", "prefilter", "seconds"}``.
        Matches are ordered by repository, path and line; ``offset``/``limit`` page through them
        (``next_offset`` is the next page's offset, None at the end). ``total`` counts every matching line
        in scope unless a bound stopped the count (``total_exact`` false, ``cut`` says which bound and what
        was left). Raises :class:`repoctx.store.grep.PatternError` (a ``ValueError``) for a bad regex, naming
        the problem and its position, and ``ValueError`` for bad arguments."""
        from repoctx.store.grep import compile_pattern, scan

        t0 = time.perf_counter()
        limits = self.grep_limits
        if not isinstance(limit, int) or not 1 <= limit <= limits.max_limit:
            raise ValueError(f"limit must be a whole number from 1 to {limits.max_limit}, not {limit!r}")
        if not isinstance(offset, int) or offset < 0:
            raise ValueError(f"offset must be a whole number of 0 or more, not {offset!r}")
        if not isinstance(context, int) or not 0 <= context <= limits.max_context:
            raise ValueError(f"context must be a whole number from 0 to {limits.max_context}, not {context!r}")
        plan = compile_pattern(pattern, fixed=fixed, ignore_case=ignore_case)
        paths = (paths,) if isinstance(paths, str) else tuple(paths or ())
        scopes = [self.scope(scope)]
        if paths:
            scopes.append(Scope(include=paths))  # a GlobError (ValueError) names a pattern the grammar refuses
        if repos is not None:
            scopes.append(
                Scope(repos=(repos,) if isinstance(repos, str) else tuple(repos)) if repos else Scope(grants=())
            )  # an empty list of repositories: nothing
        self.check_store()
        res = scan(
            plan, self.store.grep_texts(plan, scopes), limit=limit, offset=offset, context=context, limits=limits
        )
        end = offset + len(res.matches)
        more = res.total > end
        return {
            "pattern": pattern,
            "fixed": fixed,
            "ignore_case": ignore_case,
            "paths": list(paths),
            "matches": res.matches,
            "total": res.total,
            "total_exact": not res.cut,
            "files_scanned": res.files_scanned,
            "files_matched": res.files_matched,
            "offset": offset,
            "limit": limit,
            "next_offset": end if more else None,
            "truncated": more or bool(res.cut),
            "cut": res.cut,
            "prefilter": plan.describe(),
            "seconds": round(time.perf_counter() - t0, 4),
        }

    def outline(self, path: str, *, repo: str | None = None, scope: Scope | None = None) -> dict:
        """A file's units (classes, functions, methods, nested ones) in line order: ``{"repo", "path",
        "language", "units": [{"qualname", "name", "kind", "signature", "start_line", "end_line", "depth",
        "parent", "callers", "citation"}], "hint"}``. ``depth`` is 0 at the top level; ``parent`` the qualname
        of the enclosing unit (None at the top); ``callers`` the number of distinct units in scope with a
        resolved call into the unit. A path the index does not hold, or the scope hides, gives no units and a
        ``hint`` (the same answer for both); ``repo`` is needed only when several repositories hold the path."""
        scope = self.scope(scope)
        self.check_store()
        path = _clean_path(path)
        empty: dict[str, Any] = {"repo": repo, "path": path, "language": None, "units": []}
        if not path:
            return {**empty, "hint": "give a file path, relative to the repository root"}
        held = []
        for name in [repo] if repo else (scope.repos or [r.name for r in self.store.repos(scope)]):
            caps = self.store.file_capsules(name, path, scope) if scope.allows_repo(name) else []
            if caps:
                held.append((name, caps))
        if not held:
            near = self.store.by_path_suffix([path.rsplit("/", 1)[-1]], scope)[:5]
            near_paths = [c.path for c in self.store.capsules(near, scope)]
            missing = f"no indexed file {path!r} in scope" + (
                f"; files with that name: {', '.join(near_paths)}" if near_paths else "; grep or search can find it"
            )
            return {**empty, "hint": missing}
        if len(held) > 1:
            raise ValueError(f"{path!r} is in several repositories ({', '.join(n for n, _ in held)}): pass repo")
        name, caps = held[0]
        units = [c for c in caps if c.kind not in ("module", "window")]
        by_id = {c.id: c for c in units}
        callers: dict[str, set[str]] = {}
        for e in self.store.edges_to([c.id for c in units], ("calls",), scope) if units else []:
            if e.dst is not None:
                callers.setdefault(e.dst, set()).add(e.src)

        def depth(c: Capsule) -> int:
            d, p = 0, by_id.get(c.parent or "")
            while p is not None and d < 100:
                d, p = d + 1, by_id.get(p.parent or "")
            return d

        out = [
            {
                "qualname": c.qualname,
                "name": c.name,
                "kind": c.kind,
                "signature": c.signature,
                "start_line": c.start_line,
                "end_line": c.end_line,
                "depth": depth(c),
                "parent": by_id[c.parent].qualname if c.parent in by_id else None,
                "callers": len(callers.get(c.id, ())),
                "citation": c.citation,
            }
            for c in units
        ]
        hint = (
            None if out else (f"no classes or functions parsed in {path!r} ({caps[0].language}); grep reads its lines")
        )
        return {"repo": name, "path": path, "language": caps[0].language, "units": out, "hint": hint}

    def symbol(self, name: str, *, scope: Scope | None = None, limit: int = 10) -> dict:
        """The whole body of every definition named ``name``: a qualified name (``ModelAdmin.get_search_results``),
        a plain one (``get_search_results``: every definition so named), one prefixed by its module
        (``django.contrib.admin.options.ModelAdmin``) or its file (``path.py:Class.method``, or a citation
        ``path:10-20 :: qualname``). Several matches are all listed, none guessed: ``{"name", "matches": [{"repo",
        "path", "qualname", "kind", "signature", "start_line", "end_line", "citation", "text"}], "total",
        "truncated", "hint", "did_you_mean"}``, exact qualified names first. No match: an empty list, a
        ``hint`` and ``did_you_mean`` (qualified names that end with the last part of ``name``)."""
        if not isinstance(limit, int) or not 1 <= limit <= 50:
            raise ValueError(f"limit must be a whole number from 1 to 50, not {limit!r}")
        if not isinstance(name, str) or not name.strip():
            raise ValueError("name is empty: give a function, class or method name")
        scope = self.scope(scope)
        self.check_store()
        name = name.strip()
        path, qual = _split_symbol(name)
        found = [c for c in self.store.by_names([qual], scope) if c.kind != "module" or c.qualname == qual]
        if path is not None:
            found = [c for c in found if c.path == path]
        elif not found and "." in qual:  # a module-qualified name: module.path.Class.method
            parts = qual.split(".")
            cands = [".".join(parts[i:]) for i in range(1, len(parts))]
            found = [
                c
                for c in self.store.by_names(cands, scope)
                if c.kind != "module"
                and _module_matches(c.path, qual[: len(qual) - len(c.qualname) - 1])
                and qual.endswith("." + c.qualname)
            ]
        found.sort(key=lambda c: (c.qualname != qual, c.repo, c.path, c.start_line))
        matches = [
            {
                "repo": c.repo,
                "path": c.path,
                "qualname": c.qualname,
                "kind": c.kind,
                "signature": c.signature,
                "start_line": c.start_line,
                "end_line": c.end_line,
                "citation": c.citation,
                "text": c.text,
            }
            for c in found[:limit]
        ]
        hint, near = None, []
        if not found:
            last = qual.rsplit(".", 1)[-1]
            near = sorted({c.qualname for c in self.store.by_names([last], scope) if c.kind != "module"})[:10]
            hint = f"no definition named {name!r} in scope" + (
                "; definitions with that last name are in did_you_mean"
                if near
                else "; search finds it by description, grep by the text it contains"
            )
        elif len(found) > limit:
            hint = f"{len(found)} definitions match; give a qualified name or path:qualname to pick one"
        return {
            "name": name,
            "matches": matches,
            "total": len(found),
            "truncated": len(found) > limit,
            "hint": hint,
            "did_you_mean": near,
        }

    def capsule(self, capsule_id: str, scope: Scope | None = None) -> Capsule | None:
        got = self.store.capsules([capsule_id], self.scope(scope))
        return got[0] if got else None

    def find(self, name: str, scope: Scope | None = None) -> list[Capsule]:
        """Capsules whose name or qualname is exactly ``name``."""
        return self.store.by_names([name], self.scope(scope))

    def callees(self, capsule_id: str, scope: Scope | None = None) -> list[Edge]:
        return self.store.edges_from([capsule_id], ("calls",), self.scope(scope))

    def callers(self, capsule_id: str, scope: Scope | None = None) -> list[Edge]:
        return self.store.edges_to([capsule_id], ("calls",), self.scope(scope))

    def close(self) -> None:
        self.store.close()

    def __enter__(self) -> Index:
        return self

    def __exit__(self, *exc) -> None:
        self.close()


def _dense_texts(query: str, opts: SearchOptions) -> list[str]:
    """What a standard search embeds: the question, and a report's title line when it is searched alone."""
    from repoctx.retrieve.hybrid import searched_summary

    summary = searched_summary(query, opts)
    return [query, summary] if summary else [query]


def _whole_repositories(scope: Scope) -> bool:
    """Whether each grant of ``scope`` allows a whole repository: no path rule in the grants or the scope."""
    return (
        scope.grants is not None
        and not (scope.include or scope.exclude)
        and all(not (g.include or g.exclude) for g in scope.grants)
    )


def second_stage_keeps(query: str, hits: list[Hit], report: bool | None = None) -> set[str]:
    """Ids of the units among the first ``rr.DEPTH`` that stay where the first stage put them, the
    others being re-ordered around them by the second stage:
    - what a question names is what it asks about (a report names the API where the problem shows,
      the fix is often elsewhere: keeping those in place cost the SWE-bench issues 37.7 -> 34.2);
    - modules, documentation, typings and examples, and the tests the first stage demoted: the model
      was fitted on functions and classes (the first stage knows when a question asks for docs; a
      module's docstring says what its file is for);
    - a unit both BM25 and the dense model rank first, where both kinds of evidence agree (a
      docstring's own words as the query: its unit first 74 % -> 37 % if the model may move it).
    (``report``: whether the query is an issue report; None: as the router reads it)
    """
    from repoctx.retrieve import rerank as rr
    from repoctx.retrieve.hybrid import is_doc_unit
    from repoctx.retrieve.router import reads_as_report

    named = () if (reads_as_report(query) if report is None else report) else ("exact",)
    return {
        h.capsule.id
        for h in hits[: rr.DEPTH]
        if h.capsule.kind == "module"
        or is_doc_unit(h.capsule)
        or any(w in h.why for w in (*named, "test_demoted"))
        or _first_by_both(h)
    }


def _first_by_both(h: Hit) -> bool:
    lex, dense = h.why.get("lexical"), h.why.get("dense")
    return isinstance(lex, dict) and isinstance(dense, dict) and lex.get("rank") == 1 and dense.get("rank") == 1


_CITATION = re.compile(r"^(?P<path>.+?):\d+-\d+\s*::\s*(?P<qual>\S+)$")


def _clean_path(path: str) -> str:
    path = (path or "").strip().replace("\\", "/")
    while path.startswith("./"):
        path = path[2:]
    return path.lstrip("/")


def _split_symbol(name: str) -> tuple[str | None, str]:
    """(path or None, qualified name) of what ``symbol`` was given: a citation ``path:1-9 :: qual``,
    ``path::qual``, ``path:qual`` (a path has a ``/`` or an extension), or a name."""
    m = _CITATION.match(name)
    if m:
        return _clean_path(m["path"]), m["qual"]
    for sep in ("::", ":"):
        if sep in name:
            left, right = (x.strip() for x in name.rsplit(sep, 1))
            if left and right and ("/" in left or re.search(r"\.\w+$", left)):
                return _clean_path(left), right
    return None, name


def _module_matches(path: str, module: str) -> bool:
    """Whether a file is the module a dotted name starts with (``a/b/c.py``, ``src/a/b/c.py`` or
    ``a/b/c/__init__.py`` for ``a.b.c``; ``b.c`` too)."""
    stem = path.rsplit(".", 1)[0].replace("/", ".")
    if stem.endswith(".__init__"):
        stem = stem[: -len(".__init__")]
    return bool(module) and (stem == module or stem.endswith("." + module))


def _check_query(query: str) -> str:
    if not isinstance(query, str) or not query.strip():
        raise ValueError("the query is empty: ask a question or name a symbol")
    return query.strip()


def _file_keys(files: list[FileHit]) -> list[tuple[str, str] | None]:
    """Each file hit's (repository, path); None for one without units or a repository."""
    return [(f.repo or f.capsules[0].capsule.repo, f.path) if f.repo or f.capsules else None for f in files]


def _fused(files: list[FileHit], bonus: list[float]) -> tuple[list[FileHit], int]:
    """``files`` re-ordered by the reciprocal rank of their place (k 60) plus each one's vote (``hybrid.rrf_order``),
    and how many moved."""
    from repoctx.retrieve.hybrid import rrf_order

    out = [files[i] for i in rrf_order(bonus)]
    return out, sum(a.path != b.path for a, b in zip(out, files, strict=True))
