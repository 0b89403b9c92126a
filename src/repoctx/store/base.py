"""The store contract: the whole surface the rest of repoctx uses to write and read an index.

Two protocols, one per side of the pipeline: ``StoreWriter`` (the indexer, bound to one repository
through ``RepoWriter``) and ``StoreReader`` (retrieval, context, tools, services). Every read takes a
``Scope`` that each backend compiles into its own query — its WHERE clause, or an id filter for a
vector index — lexical, dense and graph reads alike; nothing is filtered after the fact.

Capsule ids are namespaced by repository (``repo:path#qualname``), so one store holds many
repositories without collisions. The store sits on the ground floor: it imports nothing from
parsing, retrieval or serving.
"""

from __future__ import annotations

import json
import re
from collections.abc import Iterable, Iterator, Sequence
from contextlib import AbstractContextManager
from dataclasses import dataclass, field, replace
from typing import TYPE_CHECKING, Any, Protocol

from repoctx.store.globs import Dialect, GlobError, dialect as glob_dialect, parse as parse_glob
from repoctx.types import Capsule, Edge, UnitHead, UnitSpan

if TYPE_CHECKING:
    import numpy as np

    from repoctx.store.grep import GrepPlan

SCHEMA_VERSION = 4  # bump when a backend's tables change; an older index is rebuilt or migrated, never misread
_REPO_NAME = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._-]{0,99}$")


class StoreError(RuntimeError):
    """A store that cannot be used as asked; the message names the failure and the fix."""


class SchemaMismatch(StoreError):
    pass


class IndexBusy(StoreError):
    """Another process holds the repository's writer lock."""


def check_repo_name(name: str) -> str:
    if not _REPO_NAME.match(name or ""):
        raise ValueError(f"repository name {name!r}: use letters, digits, '.', '_' or '-' (at most 100)")
    return name


def capsule_id(repo: str, local_id: str) -> str:
    """The store-wide id of a capsule whose parser id is ``path#qualname``."""
    return f"{repo}:{local_id}"


def split_id(cid: str) -> tuple[str, str]:
    """(repo, local id) of a namespaced capsule id."""
    repo, _, local = cid.partition(":")
    return repo, local


# --------------------------------------------------------------------------- scope


def glob_regex(pattern: str) -> str:
    """A path pattern (the grammar of ``repoctx.store.globs``) as the reference Python regex, for
    ``re.match``; :class:`GlobError` when the grammar refuses it."""
    return parse_glob(pattern).python


def _patterns(owner: str, field_name: str, value: Any) -> tuple[str, ...]:
    """A rule's patterns as a tuple (scopes are dictionary keys), each one checked against the grammar:
    a pattern a backend could not read exactly is refused here, before any query is built."""
    if isinstance(value, str):
        raise GlobError(value, f"{owner}.{field_name} takes a list of patterns, not one string")
    out = tuple(value or ())
    for p in out:
        parse_glob(p)
    return out


@dataclass(frozen=True)
class Grant:
    """One access rule of a principal: a repository (``*`` for any) and the paths it may see there."""

    repo: str = "*"
    include: tuple[str, ...] = ()  # empty: every path
    exclude: tuple[str, ...] = ()

    def __post_init__(self) -> None:
        object.__setattr__(self, "include", _patterns("grant", "include", self.include))
        object.__setattr__(self, "exclude", _patterns("grant", "exclude", self.exclude))


@dataclass(frozen=True)
class Scope:
    """Which repositories and paths a read may see. Empty means everything.

    ``repos``/``include``/``exclude`` narrow a request; ``grants``, when set, are a principal's access
    rules (a row is visible only if some grant allows it), applied in the same WHERE clause. Path
    patterns follow one grammar (``repoctx.store.globs``: ``*`` crosses ``/``, ``[!a]``/``[^a]`` negate,
    ``\\`` escapes); one the grammar refuses raises :class:`GlobError` (a ``ValueError``) here."""

    repos: tuple[str, ...] = ()
    include: tuple[str, ...] = ()
    exclude: tuple[str, ...] = ()
    grants: tuple[Grant, ...] | None = None

    def __post_init__(self) -> None:
        object.__setattr__(self, "include", _patterns("scope", "include", self.include))
        object.__setattr__(self, "exclude", _patterns("scope", "exclude", self.exclude))
        if self.grants is not None:
            object.__setattr__(self, "grants", tuple(self.grants))

    @property
    def unrestricted(self) -> bool:
        return not (self.repos or self.include or self.exclude) and self.grants is None

    def with_repos(self, repos: Sequence[str]) -> Scope:
        return replace(self, repos=tuple(repos))

    def allows(self, repo: str, path: str) -> bool:
        """The same rule the backends compile, for checks that are not a query (a tool reading a file)."""
        if self.repos and repo not in self.repos:
            return False
        if self.include and not any(_match(p, path) for p in self.include):
            return False
        if any(_match(p, path) for p in self.exclude):
            return False
        if self.grants is not None:
            return any(
                (g.repo in ("*", repo))
                and (not g.include or any(_match(p, path) for p in g.include))
                and not any(_match(p, path) for p in g.exclude)
                for g in self.grants
            )
        return True

    def granted_repos(self) -> tuple[str, ...] | None:
        """The repositories the grants name, when every grant names one (none is ``*``): a read may stop at
        them, which changes nothing it sees and lets a store take its per-repository paths (an exact dense
        scan of one repository instead of a shared graph filtered down to it). None: no such bound."""
        if self.grants is None or not self.grants or any(g.repo == "*" for g in self.grants):
            return None
        return tuple(sorted({g.repo for g in self.grants}))

    def allows_repo(self, repo: str) -> bool:
        """Whether any path of ``repo`` may be visible (a repository the scope never sees is not named)."""
        if self.repos and repo not in self.repos:
            return False
        return self.grants is None or any(g.repo in ("*", repo) for g in self.grants)

    def compile(self, repo_col: str, path_col: str, placeholder: str, dialect: Dialect | str) -> tuple[str, list]:
        """The scope as a WHERE fragment for one backend's ``dialect`` (``"sqlite"``: ``path GLOB ?``,
        ``"postgres"``: ``path ~ %s``), every pattern bound as that backend's exact translation of it."""
        d = glob_dialect(dialect)
        test = d.test.format(col=path_col, ph=placeholder)

        def paths(include: tuple[str, ...], exclude: tuple[str, ...]) -> tuple[list[str], list]:
            """Path rules as clauses: any include pattern, and no exclude pattern."""
            out: list[str] = []
            if include:
                out.append("(" + " OR ".join([test] * len(include)) + ")")
            out += [f"NOT ({test})"] * len(exclude)
            return out, [d.bind(p) for p in (*include, *exclude)]

        clauses: list[str] = []
        args: list = []
        if self.repos:
            clauses.append(f"{repo_col} IN ({', '.join([placeholder] * len(self.repos))})")
            args += list(self.repos)
        sub, sub_args = paths(self.include, self.exclude)
        clauses += sub
        args += sub_args
        if self.grants is not None:
            alts = []
            for g in self.grants:
                sub, sub_args = ([f"{repo_col} = {placeholder}"], [g.repo]) if g.repo != "*" else ([], [])
                rules, rule_args = paths(g.include, g.exclude)
                alts.append("(" + (" AND ".join(sub + rules) or "1=1") + ")")
                args += sub_args + rule_args
            clauses.append("(" + (" OR ".join(alts) or "1=0") + ")")
        return (" AND ".join(clauses) or "1=1"), args

    def to_dict(self) -> dict[str, Any]:
        return {
            "repos": list(self.repos),
            "include": list(self.include),
            "exclude": list(self.exclude),
            "grants": None if self.grants is None else [g.__dict__ for g in self.grants],
        }


def compile_all(
    scopes: Sequence[Scope], repo_col: str, path_col: str, placeholder: str, dialect: Dialect | str
) -> tuple[str, list]:
    """Several scopes that must all allow a row (a caller's scope and a request's own narrowing), as one WHERE
    fragment: a request narrows what its caller may see, it never widens it."""
    wheres, args = [], []
    for s in scopes:
        w, a = s.compile(repo_col, path_col, placeholder, dialect)
        if w != "1=1":
            wheres.append(f"({w})")
            args += a
    return (" AND ".join(wheres) or "1=1"), args


def capsule_columns(c: Capsule) -> tuple:
    """A unit's descriptive columns in the stores' order, from ``path`` to ``end_line`` (both backends write
    them the same way; what precedes and follows differs per store)."""
    return (
        c.path,
        c.language,
        c.kind,
        c.name,
        c.qualname,
        c.signature,
        json.dumps(c.params),
        c.returns,
        c.docstring,
        json.dumps(c.decorators),
        c.start_line,
        c.end_line,
    )


def file_columns(rec: FileRecord) -> tuple:
    """A file's columns in the stores' order, from ``path`` to ``note`` (the repository before them and the text's
    key after them are each store's own)."""
    return (
        rec.path,
        rec.language,
        rec.size,
        rec.mtime_ns,
        rec.hash,
        rec.module,
        json.dumps(rec.imports),
        rec.method,
        rec.note,
    )


def text_key(text: str) -> str:
    """The key a file's indexed text is stored under (per repository): its content hash."""
    import hashlib

    return hashlib.blake2b(text.encode("utf-8", "surrogatepass"), digest_size=16).hexdigest()


def like_suffix(fragment: str) -> str:
    """A LIKE pattern (escape character ``\\``) for paths ending in ``/fragment``."""
    return "%/" + fragment.replace("\\", "\\\\").replace("%", "\\%").replace("_", "\\_")


def _match(pattern: str, path: str) -> bool:
    return parse_glob(pattern).matches(path)


EVERYTHING = Scope()


# --------------------------------------------------------------------------- records


@dataclass(slots=True)
class FileRecord:
    path: str
    language: str
    size: int
    mtime_ns: int
    hash: str
    module: str
    imports: dict[str, str]
    method: str
    note: str = ""
    text_hash: str = ""  # the key of the file's indexed text (grep); "" when the store has none for it


@dataclass(slots=True)
class RepoRecord:
    name: str
    root: str  # where it was indexed from (a path on the indexing machine)
    created: float = 0.0
    meta: dict[str, str] = field(default_factory=dict)

    def to_dict(self) -> dict[str, Any]:
        return {"name": self.name, "root": self.root, "created": self.created, "meta": dict(self.meta)}


@dataclass(slots=True)
class EmbedRow:
    """What the embedder reads of a capsule."""

    id: str
    path: str
    qualname: str
    signature: str
    docstring: str
    text: str


@dataclass(slots=True)
class VectorState:
    model: str | None  # the model the repository's vectors were made with
    count: int  # capsules with a vector of the model asked about
    total: int  # capsules that should have one
    current: bool  # every capsule of the current generation has a vector of ``model``

    def to_dict(self) -> dict[str, Any]:
        return {"model": self.model, "count": self.count, "total": self.total, "current": self.current}


EMBED_KINDS = ("function", "method", "class", "module", "window")


# --------------------------------------------------------------------------- protocols


class StoreReader(Protocol):
    """Everything retrieval, context, tools and services read. Every read honours ``scope``."""

    backend: str  # "sqlite" | "postgres"

    def meta(self, key: str, repo: str = "") -> str | None: ...
    def repos(self, scope: Scope = EVERYTHING) -> list[RepoRecord]: ...
    def repo(self, name: str) -> RepoRecord | None: ...
    def repo_by_root(self, root: str) -> RepoRecord | None: ...
    # a repository's mined git history (repoctx.history), kept where every process of a store reads it: (its stamp,
    # its body: the zlib of the history file), the body None when the stamp is ``known``; None when none is kept
    def history(self, repo: str, known: str | None = None) -> tuple[str, bytes | None] | None: ...
    def paths(self, scope: Scope = EVERYTHING) -> list[tuple[str, str]]: ...  # (repo, path) indexed
    def counts(self, scope: Scope = EVERYTHING) -> dict[str, int]: ...
    # capsules
    def capsules(self, ids: list[str], scope: Scope = EVERYTHING) -> list[Capsule]: ...
    # the same units without their texts (what a search asks of every candidate), by id
    def unit_heads(self, ids: list[str], scope: Scope = EVERYTHING) -> dict[str, UnitHead]: ...
    def file_capsules(self, repo: str, path: str, scope: Scope = EVERYTHING) -> list[Capsule]: ...
    def file_spans(self, repo: str, path: str, scope: Scope = EVERYTHING) -> list[UnitSpan]: ...  # no texts read
    def all_capsules(self, scope: Scope = EVERYTHING) -> list[Capsule]: ...
    def by_names(self, names: list[str], scope: Scope = EVERYTHING) -> list[Capsule]: ...
    def name_counts(self, names: list[str], scope: Scope = EVERYTHING) -> dict[str, int]: ...
    def by_path_suffix(self, fragments: list[str], scope: Scope = EVERYTHING) -> list[str]: ...
    # lexical: BM25 over code tokens (column-weighted as ``BM25_WEIGHTS``)
    def lexical(self, terms: list[str], k: int, scope: Scope = EVERYTHING) -> list[tuple[str, float]]: ...
    def doc_freqs(self, terms: list[str], scope: Scope = EVERYTHING) -> dict[str, int]: ...
    def n_capsules(self, scope: Scope = EVERYTHING) -> int: ...
    # dense: nearest capsules to a unit vector (cosine), under one model
    def dense(self, vector: np.ndarray, model: str, k: int, scope: Scope = EVERYTHING) -> list[tuple[str, float]]: ...
    def vector_state(self, repo: str, model: str) -> VectorState: ...
    # ``vector_state(repo, model).current``, asked by an update's fill before it starts (no count of the units needed)
    def vectors_current(self, repo: str, model: str) -> bool: ...
    # graph: an edge is visible when its source (and its resolved target) is in scope
    def edges_from(self, ids: list[str], kinds: tuple[str, ...] = (), scope: Scope = EVERYTHING) -> list[Edge]: ...
    def edges_to(self, ids: list[str], kinds: tuple[str, ...] = (), scope: Scope = EVERYTHING) -> list[Edge]: ...
    def all_edges(self, scope: Scope = EVERYTHING) -> list[tuple]: ...
    # grep: (repo, path, text key, text) of the indexed files all ``scopes`` allow whose text the plan's trigram
    # prefilter admits, ordered by repository then path (code point order); streamed
    def grep_texts(self, plan: GrepPlan, scopes: Sequence[Scope]) -> Iterator[tuple[str, str, Any, str]]: ...
    def file_text(self, repo: str, path: str, scope: Scope = EVERYTHING) -> str | None: ...
    def close(self) -> None: ...


class VectorSink(Protocol):
    """Receives a repository's vectors while they are computed; ``finish`` makes them searchable whole."""

    def add(self, ids: list[str], matrix: np.ndarray) -> None: ...
    def finish(self) -> None: ...


class RepoWriter(Protocol):
    """The indexer's view of one repository in the store. Writes happen inside ``transaction()``: all
    of an update commits or none of it does."""

    repo: str

    def transaction(self) -> AbstractContextManager[None]: ...
    def lock(self, kind: str = "index", wait: bool = True) -> AbstractContextManager[None]: ...  # one writer per repo
    def files(self) -> dict[str, FileRecord]: ...
    def meta(self, key: str) -> str | None: ...
    def set_meta(self, key: str, value: str) -> None: ...
    def clear(self) -> None: ...
    # every file of the update is written (edges follow): what the writer collected for them goes to the store now,
    # before the graph's resolution holds its own memory (SQLite's lexical postings)
    def files_written(self) -> None: ...
    # ``text``: the file's indexed text (decoded, redacted) kept for grep, written with its capsules
    def put_file(
        self,
        rec: FileRecord,
        capsules: list[Capsule],
        lexical_bodies: dict[str, str],
        text: str | None = None,
        ahead: dict | None = None,  # what the writer's ``ahead`` made of the file in a parse worker (SQLite's)
    ) -> None: ...
    def put_text(self, path: str, text: str) -> None: ...  # the text of a file indexed before texts were kept
    def touch_file(self, path: str, size: int, mtime_ns: int) -> None: ...
    def delete_file(self, path: str) -> None: ...
    def put_edges(self, edges: Iterable[tuple[Edge, str | None]], src_path: str) -> None: ...  # (edge, dst_key)
    def set_edge_dst(self, edge_key: Any, dst: str | None) -> None: ...
    # lookups for incremental resolution (see the transaction's own writes)
    def cands_by_name(self, name: str) -> list[tuple[str, str, str, str, str]]: ...
    def module_cand(self, key: str) -> tuple[str, str, str, str, str] | None: ...
    def edges_needing(self, keys: set[str], dsts: set[str], exclude_paths: set[str]) -> list[tuple]: ...
    # class id -> its resolved base classes as (id, path, qualname), in the order the class lists them
    def bases_of(self, ids: list[str]) -> dict[str, list[tuple[str, str, str]]]: ...
    def capsule_rows(self, path: str) -> list[tuple]: ...
    # vectors
    def embed_rows(self, model: str) -> tuple[list[EmbedRow], bool]: ...  # (rows to embed, whole set?)
    def vector_sink(self, model: str, dim: int, whole: bool) -> VectorSink: ...


class StoreWriter(Protocol):
    def writer(self, repo: str) -> RepoWriter: ...
    def register_repo(self, name: str, root: str) -> RepoRecord: ...
    def drop_repo(self, name: str) -> None: ...
    def put_history(self, repo: str, stamp: str, body: bytes) -> None: ...  # replaces the repository's kept history
    def release_memory(self) -> None: ...  # after a large write: give back the caches it filled


class Store(StoreReader, StoreWriter, Protocol):
    """A backend: SQLite (embedded, FAISS beside it) or PostgreSQL (pgvector)."""
