"""The server store: PostgreSQL + pgvector, on the same contract as the SQLite store.

* Lexical: each term's postings in one row a repository (``repoctx_lex``, schema 5: the term's units, their
  column-weighted counts and lengths as varints, postings.py), scored by the same code as SQLite's (FTS5's
  ``bm25()``: k1 1.2, b 0.75, the column weights of ``postings.WEIGHTS``, idf and average length over the
  scope's repositories), so both backends rank alike. A posting a row of its own, in the heap and two btrees,
  made PostgreSQL's cold ingest 2.3x SQLite's and its postings 2 GiB at 221k units.
* Dense: pgvector, cosine distance, HNSW indexes (384 dimensions: the default model; 768: two shipped models side by
  side) searched with iterative scans so a scope's WHERE clause never starves the result.
* Writes: one transaction per update; rows are buffered and sent with COPY, flushed before any
  read the update makes; the lexical rows are written at its end. Per-repository unit counts and lengths are
  kept as counters and postings are a repository's own rows, so concurrent indexers of different
  repositories never touch the same row.
* Schema: created and upgraded only by ``migrate`` (``repoctx db migrate``); opening a store with an
  older schema is a clear error, never a migration on a request path.
"""

from __future__ import annotations

import json
import threading
import time
import zlib
from collections.abc import Callable, Iterable, Iterator, Sequence
from contextlib import contextmanager
from typing import TYPE_CHECKING, get_args

import numpy as np

from repoctx.capsules.parse import lexical_bodies
from repoctx.store import postings
from repoctx.store.base import (
    EMBED_KINDS,
    EVERYTHING,
    EmbedRow,
    FileRecord,
    IndexBusy,
    RepoRecord,
    Scope,
    StoreError,
    VectorState,
    capsule_columns,
    check_repo_name,
    compile_all,
    file_columns,
    like_suffix,
    text_key,
)
from repoctx.store.memory_bm25 import MemoryBM25, MemoryReads
from repoctx.store.sqlite import HEAD_COLS
from repoctx.types import Capsule, CapsuleKind, Edge, UnitHead, UnitSpan

if TYPE_CHECKING:
    import psycopg

    from repoctx.store.grep import GrepPlan

PG_SCHEMA_VERSION = 7
# every unit kind embedded: a repository's units (n_docs) are then what it embeds
_EMBEDS_EVERY_KIND = set(EMBED_KINDS) >= set(get_args(CapsuleKind))
DEFAULT_DIM = 384  # the embedded default model's
# dimensions with an HNSW index: the default model's and a pair of shipped models side by side
# (``REPOCTX_EMBEDDER=local+local:code*0.5``); other dimensions are searched exactly, without HNSW
HNSW_DIMS = (DEFAULT_DIM, 2 * DEFAULT_DIM)
EXACT_DENSE_MAX = 200_000  # units a scope's repositories may hold for an exact vector scan
GREP_PATH_FIRST = 300  # files in a grep's scope up to which their texts are read first, past which the trigram index

_MIGRATIONS: dict[int, str] = {
    1: f"""
CREATE EXTENSION IF NOT EXISTS vector;
CREATE TABLE IF NOT EXISTS repoctx_meta(repo TEXT NOT NULL, key TEXT NOT NULL, value TEXT, PRIMARY KEY(repo, key));
CREATE TABLE IF NOT EXISTS repoctx_repos(name TEXT PRIMARY KEY, root TEXT, created DOUBLE PRECISION,
  n_docs BIGINT NOT NULL DEFAULT 0, total_len DOUBLE PRECISION NOT NULL DEFAULT 0);
CREATE TABLE IF NOT EXISTS repoctx_files(repo TEXT NOT NULL, path TEXT NOT NULL, language TEXT, size BIGINT,
  mtime_ns BIGINT, hash TEXT, module TEXT, imports TEXT, method TEXT, note TEXT, PRIMARY KEY(repo, path));
CREATE TABLE IF NOT EXISTS repoctx_capsules(rid BIGSERIAL PRIMARY KEY, id TEXT UNIQUE NOT NULL, repo TEXT NOT NULL,
  path TEXT, language TEXT, kind TEXT, name TEXT, qualname TEXT, signature TEXT, params TEXT, returns TEXT,
  docstring TEXT, decorators TEXT, start_line INT, end_line INT, text TEXT, content_hash TEXT, parent TEXT,
  module TEXT, dl REAL NOT NULL DEFAULT 0);
CREATE INDEX IF NOT EXISTS repoctx_capsules_path ON repoctx_capsules(repo, path);
CREATE INDEX IF NOT EXISTS repoctx_capsules_name ON repoctx_capsules(name);
CREATE INDEX IF NOT EXISTS repoctx_capsules_qualname ON repoctx_capsules(qualname);
CREATE INDEX IF NOT EXISTS repoctx_capsules_module ON repoctx_capsules(repo, module) WHERE kind = 'module';
CREATE TABLE IF NOT EXISTS repoctx_postings(term TEXT NOT NULL, rid BIGINT NOT NULL, repo TEXT NOT NULL,
  wtf REAL NOT NULL, dl REAL NOT NULL);
CREATE INDEX IF NOT EXISTS repoctx_postings_term ON repoctx_postings(term) INCLUDE (rid, repo, wtf, dl);
CREATE INDEX IF NOT EXISTS repoctx_postings_rid ON repoctx_postings(rid);
CREATE TABLE IF NOT EXISTS repoctx_term_df(repo TEXT NOT NULL, term TEXT NOT NULL, df BIGINT NOT NULL,
  PRIMARY KEY(repo, term));
CREATE TABLE IF NOT EXISTS repoctx_edges(eid BIGSERIAL PRIMARY KEY, repo TEXT NOT NULL, src TEXT NOT NULL,
  kind TEXT NOT NULL, dst_name TEXT NOT NULL, dst_key TEXT, dst TEXT, src_path TEXT);
CREATE INDEX IF NOT EXISTS repoctx_edges_src ON repoctx_edges(src);
CREATE INDEX IF NOT EXISTS repoctx_edges_dst ON repoctx_edges(dst);
CREATE INDEX IF NOT EXISTS repoctx_edges_key ON repoctx_edges(repo, dst_key);
CREATE INDEX IF NOT EXISTS repoctx_edges_path ON repoctx_edges(repo, src_path);
CREATE TABLE IF NOT EXISTS repoctx_vectors(rid BIGINT PRIMARY KEY REFERENCES repoctx_capsules(rid) ON DELETE CASCADE,
  repo TEXT NOT NULL, model TEXT NOT NULL, embedding vector NOT NULL);
CREATE INDEX IF NOT EXISTS repoctx_vectors_repo ON repoctx_vectors(repo, model);
CREATE INDEX IF NOT EXISTS repoctx_vectors_hnsw ON repoctx_vectors
  USING hnsw ((embedding::vector({DEFAULT_DIM})) vector_cosine_ops) WHERE vector_dims(embedding) = {DEFAULT_DIM};
""",
    # document frequencies are read by term across every repository: the (repo, term) key cannot serve that
    2: "CREATE INDEX IF NOT EXISTS repoctx_term_df_term ON repoctx_term_df(term) INCLUDE (df);",
    # grep (issue 40): each indexed file's text once per repository and content, with a pg_trgm GIN index that
    # narrows the files a LIKE names before the regular expression confirms. Stored uncompressed (EXTERNAL): the
    # LIKE recheck and the read detoast every candidate, and pglz made that twice as slow (Django + Flask: 26 MB
    # instead of 10 MB)
    3: """
CREATE EXTENSION IF NOT EXISTS pg_trgm;
CREATE TABLE IF NOT EXISTS repoctx_texts(repo TEXT NOT NULL, hash TEXT NOT NULL, text TEXT NOT NULL,
  PRIMARY KEY(repo, hash));
ALTER TABLE repoctx_texts ALTER COLUMN text SET STORAGE EXTERNAL;
CREATE INDEX IF NOT EXISTS repoctx_texts_trgm ON repoctx_texts USING gin (text gin_trgm_ops);
ALTER TABLE repoctx_files ADD COLUMN IF NOT EXISTS text_hash TEXT;
CREATE INDEX IF NOT EXISTS repoctx_files_text ON repoctx_files(repo, text_hash);
""",
    # names counted and looked up within a scope's repositories (the re-ranker's name_counts, exact names): the
    # name index alone matched every repository's __init__/get/run (13,554 rows at 500k units) before the
    # repository was tested, 6 ms for Flask and 19 ms for Django on each search
    4: "CREATE INDEX IF NOT EXISTS repoctx_capsules_repo_name ON repoctx_capsules(repo, name) INCLUDE (kind);",
    # postings per term and repository (issue 39): one row a term, its postings packed (postings.py, with each
    # unit's length); the old rows are packed into it by _postings_to_lex, then dropped. Stored uncompressed: a
    # search reads a common term's whole row, and varints do not compress
    5: """
CREATE TABLE IF NOT EXISTS repoctx_lex(repo TEXT NOT NULL, term TEXT NOT NULL, n INT NOT NULL, last BIGINT NOT NULL,
  p BYTEA NOT NULL, PRIMARY KEY(repo, term));
ALTER TABLE repoctx_lex ALTER COLUMN p SET STORAGE EXTERNAL;
CREATE INDEX IF NOT EXISTS repoctx_lex_term ON repoctx_lex(term);
""",
    # each repository's mined git history (repoctx.history), kept where every API process and worker reads it: the
    # worker that indexes a checkout mines it, a search anywhere votes with it (its stamp: the history's first line)
    6: "CREATE TABLE IF NOT EXISTS repoctx_history(repo TEXT PRIMARY KEY, stamp TEXT NOT NULL, body BYTEA NOT NULL);",
    # two shipped models in one vector (a joint embedder, session 40): their 768-dimensional rows get an HNSW index of
    # their own, as the default's 384 have (an empty one costs nothing until a pair is indexed)
    7: f"""
CREATE INDEX IF NOT EXISTS repoctx_vectors_hnsw{HNSW_DIMS[1]} ON repoctx_vectors
  USING hnsw ((embedding::vector({HNSW_DIMS[1]})) vector_cosine_ops) WHERE vector_dims(embedding) = {HNSW_DIMS[1]};
""",
}
# extensions a migration creates: checked first, so a server without one is named, not a driver error
_EXTENSIONS: dict[int, tuple[tuple[str, str], ...]] = {
    1: (("vector", "dense search (pgvector)"),),
    3: (("pg_trgm", "grep's trigram index"),),
}

# what the in-memory reads are valid for (memory_bm25.py): rids are never reused, the counters move with
# every write, the generation with every finished run
_CONTENT_KEY = (
    "SELECT (SELECT max(rid) FROM repoctx_capsules), (SELECT coalesce(sum(n_docs), 0) FROM repoctx_repos), "
    "(SELECT coalesce(sum(total_len), 0) FROM repoctx_repos), "
    "(SELECT string_agg(repo || '=' || value, ',' ORDER BY repo) FROM repoctx_meta WHERE key = 'generation'), "
    "(SELECT string_agg(name, ',' ORDER BY name) FROM repoctx_repos)"
)

# a token longer than this (a base64 blob, a minified line) is counted in the unit's length but gets no posting:
# a btree entry holds at most ~2.7 kB, and one 14 kB token in djangorestframework's sdist failed the whole COPY
MAX_POSTED_TERM = 512
# a large update's buffered rows are handed to a thread to write once this many postings wait (~5k units), with this
# many unit ids taken ahead, so the server writes while the indexer parses and tokenizes
_BEHIND_LINES = 250_000
_BEHIND_EDGES = 50_000
_RIDS_AHEAD = 20_000

# one row per repository of a scope: what :meth:`PostgresStore._scoped_content_key` compares
_SCOPED_KEY = (
    "SELECT r.name, r.created, r.n_docs, r.total_len, m.value FROM repoctx_repos r LEFT JOIN repoctx_meta m "
    "ON m.repo = r.name AND m.key = 'generation' WHERE r.name = ANY(%s) ORDER BY r.name"
)

# the tables a scoped search plans over: analyzed after a write that grew the store by a tenth or more
_ANALYZED = ("repoctx_capsules", "repoctx_lex", "repoctx_edges", "repoctx_files")

_COLS = (
    "c.id, c.repo, c.path, c.language, c.kind, c.name, c.qualname, c.signature, c.params, c.returns, "
    "c.docstring, c.decorators, c.start_line, c.end_line, c.text, c.content_hash, c.parent"
)


def _row_to_capsule(r) -> Capsule:
    return Capsule(
        id=r[0],
        repo=r[1] or "",
        path=r[2],
        language=r[3],
        kind=r[4],
        name=r[5],
        qualname=r[6],
        signature=r[7],
        params=json.loads(r[8] or "[]"),
        returns=r[9] or "",
        docstring=r[10] or "",
        decorators=json.loads(r[11] or "[]"),
        start_line=r[12],
        end_line=r[13],
        text=r[14],
        content_hash=r[15],
        parent=r[16],
    )


def _schema_version(conn) -> int | None:
    if conn.execute("SELECT to_regclass('repoctx_schema')").fetchone()[0] is None:
        return None
    row = conn.execute("SELECT max(version) FROM repoctx_schema").fetchone()
    return row[0] if row and row[0] is not None else None


def _postings_to_lex(conn) -> None:
    """Schema 5: the postings of schema 1-4 (a row each) packed into each term's row, then their tables dropped."""
    if conn.execute("SELECT to_regclass('repoctx_postings')").fetchone()[0] is None:
        return
    with conn.cursor(name="repoctx_migrate_postings") as cur:
        cur.execute('SELECT repo, term, rid, wtf, dl FROM repoctx_postings ORDER BY repo, term COLLATE "C", rid')
        rows: list[tuple] = []
        while batch := cur.fetchmany(200_000):
            rows += batch
            cut = len(rows)  # whole terms only: the last term may go on in the next batch
            while cut and rows[cut - 1][:2] == rows[-1][:2]:
                cut -= 1
            if cut:
                _copy_lex(conn, _lex_of_postings(rows[:cut]))
                rows = rows[cut:]
        if rows:
            _copy_lex(conn, _lex_of_postings(rows))
    conn.execute("DROP TABLE repoctx_postings")
    conn.execute("DROP TABLE IF EXISTS repoctx_term_df")


def _lex_of_postings(rows: list[tuple]) -> Iterator[tuple]:
    """(repo, term, n, last, p) of postings rows (repo, term, rid, wtf, dl) in (repo, term, rid) order."""
    a = 0
    while a < len(rows):
        b = a
        while b < len(rows) and rows[b][:2] == rows[a][:2]:
            b += 1
        rids = np.asarray([r[2] for r in rows[a:b]], dtype=np.int64)
        wtf = np.asarray([round(r[3]) for r in rows[a:b]], dtype=np.int64)
        dl = np.asarray([round(r[4]) for r in rows[a:b]], dtype=np.int64)
        yield rows[a][0], rows[a][1], b - a, int(rids[-1]), postings.pack(rids, wtf, dl)
        a = b


def _copy_lex(conn, rows: Iterable[tuple]) -> None:
    with conn.cursor().copy("COPY repoctx_lex(repo, term, n, last, p) FROM STDIN (FORMAT BINARY)") as cp:
        cp.set_types(["text", "text", "int4", "int8", "bytea"])
        for r in rows:
            cp.write_row(r)


# migrations that also move data, run after their version's SQL in the same transaction
_CONVERSIONS: dict[int, Callable] = {5: _postings_to_lex}


def migrate(url: str, to: int = PG_SCHEMA_VERSION) -> dict:
    """Create or upgrade the store's schema (versioned, in one transaction under an advisory lock); ``to``: stop at
    that version (tests build an older store with it)."""
    import psycopg

    try:
        with psycopg.connect(url, autocommit=False) as conn:
            conn.execute("SELECT pg_advisory_xact_lock(%s)", (zlib.crc32(b"repoctx:migrate"),))
            conn.execute("CREATE TABLE IF NOT EXISTS repoctx_schema(version INT PRIMARY KEY, applied DOUBLE PRECISION)")
            start = _schema_version(conn) or 0
            for version in sorted(v for v in _MIGRATIONS if start < v <= to):
                for name, why in _EXTENSIONS.get(version, ()):
                    require_extension(conn, name, why)
                conn.execute(_MIGRATIONS[version])
                if version in _CONVERSIONS:
                    _CONVERSIONS[version](conn)
                conn.execute("INSERT INTO repoctx_schema VALUES(%s, %s)", (version, time.time()))
            conn.commit()
    except psycopg.Error as e:
        raise StoreError(f"could not migrate the database: {type(e).__name__}: {str(e).splitlines()[0]}") from None
    return {"version": max(start, to), "from": start or None}


def require_extension(conn, name: str, why: str) -> None:
    """Create extension ``name`` unless it exists; a server that does not ship it is a StoreError naming it."""
    import psycopg

    if conn.execute("SELECT 1 FROM pg_extension WHERE extname = %s", (name,)).fetchone():
        return
    if not conn.execute("SELECT 1 FROM pg_available_extensions WHERE name = %s", (name,)).fetchone():
        raise StoreError(
            f"the PostgreSQL server does not have the extension {name} ({why} needs it): install it on "
            f"the server (for {name}: the postgresql-contrib package, or a managed PostgreSQL that offers "
            f"it), then run `repoctx db migrate` again"
        )
    try:
        with conn.transaction():
            conn.execute(f'CREATE EXTENSION IF NOT EXISTS "{name}"')
    except psycopg.Error as e:
        raise StoreError(
            f"could not create the PostgreSQL extension {name} ({why} needs it): {type(e).__name__}: "
            f"{str(e).splitlines()[0]} (a superuser can run CREATE EXTENSION {name} in this database)"
        ) from None


class PostgresStore(MemoryReads):
    backend = "postgres"

    def __init__(
        self,
        url: str,
        min_size: int = 1,
        max_size: int = 8,
        memory_lexical: bool = False,
        connect_timeout: float | None = None,
    ):
        import psycopg
        from pgvector.psycopg import register_vector

        from repoctx.store.availability import connect_kwargs, connection_pool

        self.url = url
        try:
            with psycopg.connect(url, **connect_kwargs(connect_timeout)) as conn:
                version = _schema_version(conn)
        except psycopg.Error as e:
            raise StoreError(f"cannot reach the database in REPOCTX_DATABASE_URL: {type(e).__name__}") from None
        if version is None:
            raise StoreError("the database has no repoctx schema: run `repoctx db migrate`")
        if version < PG_SCHEMA_VERSION:
            raise StoreError(
                f"the database schema is at version {version}, this repoctx needs {PG_SCHEMA_VERSION}: "
                "run `repoctx db migrate`"
            )
        if version > PG_SCHEMA_VERSION:
            raise StoreError(
                f"the database schema (version {version}) is newer than this repoctx reads "
                f"({PG_SCHEMA_VERSION}): upgrade repoctx"
            )

        def configure(conn) -> None:
            register_vector(conn)
            conn.execute("SET hnsw.iterative_scan = strict_order")
            conn.execute("SET hnsw.ef_search = 100")
            conn.commit()

        # connect_timeout: how long a caller waits for the database before the pool gives up (an outage is
        # then an error the service answers 503, and the pool reconnects by itself when the database is back)
        self.pool = connection_pool(
            url,
            timeout=connect_timeout,
            min_size=min_size,
            max_size=max_size,
            configure=configure,
            kwargs={"autocommit": True},
            name="repoctx-store",
        )
        self._init_memory(memory_lexical)  # long-lived processes: BM25 and units in memory (memory_bm25.py)
        self._held = threading.local()  # the connection a search holds (reading())

    def release_memory(self) -> None:
        """Nothing to give back: the server holds the pages, and writes buffer only until their COPY."""

    def close(self) -> None:
        self.pool.close()

    @contextmanager
    def _conn(self):
        held = getattr(self._held, "conn", None)
        if held is not None:  # inside reading(): the search's one connection
            yield held
            return
        with self.pool.connection() as conn:
            yield conn

    @contextmanager
    def reading(self) -> Iterator[None]:
        """One search's reads on one connection, taken from the pool (and checked) once: a search makes a dozen
        small reads, and each checkout's check is a round trip of its own. The content key is pinned as in
        MemoryReads. Nested uses keep the outer connection."""
        if getattr(self._held, "conn", None) is not None:
            with super().reading():
                yield
            return
        with self.pool.connection() as conn:
            self._held.conn = conn
            try:
                with super().reading():
                    yield
            finally:
                self._held.conn = None

    def _q(self, sql: str, args=()) -> list[tuple]:
        with self._conn() as conn:
            return conn.execute(sql, args).fetchall()

    @staticmethod
    def _scope(scope: Scope, alias: str = "c", path_col: str = "path") -> tuple[str, list]:
        return scope.compile(f"{alias}.repo", f"{alias}.{path_col}", "%s", "postgres")

    # ---- repositories
    def register_repo(self, name: str, root: str) -> RepoRecord:
        check_repo_name(name)
        self._q(
            "INSERT INTO repoctx_repos(name, root, created) VALUES(%s,%s,%s) "
            "ON CONFLICT (name) DO UPDATE SET root = EXCLUDED.root RETURNING name",
            (name, root, time.time()),
        )
        rec = self.repo(name)
        if rec is None:  # dropped by another process in between
            raise StoreError(f"repository {name!r} was dropped while it was being registered")
        return rec

    def drop_repo(self, name: str) -> None:
        w = self.writer(name)
        with w.transaction():
            w.clear()
            w.tx().execute("DELETE FROM repoctx_meta WHERE repo=%s", (name,))
            w.tx().execute("DELETE FROM repoctx_repos WHERE name=%s", (name,))
            w.tx().execute("DELETE FROM repoctx_history WHERE repo=%s", (name,))

    def history(self, repo: str, known: str | None = None) -> tuple[str, bytes | None] | None:
        rows = self._q(
            "SELECT stamp, CASE WHEN stamp IS NOT DISTINCT FROM %s::text THEN NULL ELSE body END FROM repoctx_history "
            "WHERE repo=%s",
            (known, repo),
        )
        return (rows[0][0], bytes(rows[0][1]) if rows[0][1] is not None else None) if rows else None

    def put_history(self, repo: str, stamp: str, body: bytes) -> None:
        self._q(
            "INSERT INTO repoctx_history(repo, stamp, body) VALUES(%s,%s,%s) "
            "ON CONFLICT (repo) DO UPDATE SET stamp = EXCLUDED.stamp, body = EXCLUDED.body RETURNING repo",
            (repo, stamp, body),
        )

    def repo(self, name: str) -> RepoRecord | None:
        rows = self._q("SELECT name, root, created FROM repoctx_repos WHERE name=%s", (name,))
        if not rows:
            return None
        meta = dict(self._q("SELECT key, value FROM repoctx_meta WHERE repo=%s", (name,)))
        return RepoRecord(rows[0][0], rows[0][1], rows[0][2], meta)

    def repos(self, scope: Scope = EVERYTHING) -> list[RepoRecord]:
        # a repository dropped between the two reads is left out, not listed as None
        return [
            r
            for (n,) in self._q("SELECT name FROM repoctx_repos ORDER BY name")
            if scope.allows_repo(n) and (r := self.repo(n)) is not None
        ]

    def repo_by_root(self, root: str) -> RepoRecord | None:
        rows = self._q("SELECT name FROM repoctx_repos WHERE root=%s ORDER BY created LIMIT 1", (root,))
        return self.repo(rows[0][0]) if rows else None

    def writer(self, repo: str) -> PostgresRepoWriter:
        return PostgresRepoWriter(self, check_repo_name(repo))

    # ---- reads
    def meta(self, key: str, repo: str = "") -> str | None:
        rows = self._q("SELECT value FROM repoctx_meta WHERE repo=%s AND key=%s", (repo, key))
        return rows[0][0] if rows else None

    def paths(self, scope: Scope = EVERYTHING) -> list[tuple[str, str]]:
        where, args = self._scope(scope, "f")
        return [
            tuple(r)
            for r in self._q(f"SELECT f.repo, f.path FROM repoctx_files f WHERE {where} ORDER BY f.repo, f.path", args)
        ]

    def counts(self, scope: Scope = EVERYTHING) -> dict[str, int]:
        where, args = self._scope(scope)
        fwhere, fargs = self._scope(scope, "f")
        ewhere, eargs = self._scope(scope, "e", "src_path")
        with self._conn() as conn:
            q = lambda sql, a: conn.execute(sql, a).fetchone()[0]  # noqa: E731
            return {
                "files": q(f"SELECT count(*) FROM repoctx_files f WHERE {fwhere}", fargs),
                "capsules": q(f"SELECT count(*) FROM repoctx_capsules c WHERE {where}", args),
                "edges": q(f"SELECT count(*) FROM repoctx_edges e WHERE {ewhere}", eargs),
                "resolved_edges": q(
                    f"SELECT count(*) FROM repoctx_edges e WHERE e.dst IS NOT NULL AND {ewhere}", eargs
                ),
            }

    def capsules(self, ids: list[str], scope: Scope = EVERYTHING) -> list[Capsule]:
        if not ids:
            return []
        remembered = self._memory_capsules(ids, scope)
        if remembered is not None:
            return remembered
        where, args = self._scope(scope)
        out = {
            r[0]: _row_to_capsule(r)
            for r in self._q(
                f"SELECT {_COLS} FROM repoctx_capsules c WHERE c.id = ANY(%s) AND {where}", [list(set(ids))] + args
            )
        }
        return [out[i] for i in ids if i in out]

    def _read_heads(self, ids: list[str], scope: Scope) -> dict[str, UnitHead]:
        where, args = self._scope(scope)
        sql = f"SELECT {HEAD_COLS} FROM repoctx_capsules c WHERE c.id = ANY(%s) AND {where}"
        return {r[0]: UnitHead(*r) for r in self._q(sql, [list(set(ids))] + args)}

    def all_capsules(self, scope: Scope = EVERYTHING) -> list[Capsule]:
        where, args = self._scope(scope)
        return [
            _row_to_capsule(r)
            for r in self._q(f'SELECT {_COLS} FROM repoctx_capsules c WHERE {where} ORDER BY c.id COLLATE "C"', args)
        ]

    def all_edges(self, scope: Scope = EVERYTHING) -> list[tuple]:
        where, args = self._scope(scope, "e", "src_path")
        return [
            tuple(r)
            for r in self._q(
                f"SELECT e.src, e.kind, e.dst_name, e.dst FROM repoctx_edges e WHERE {where} "
                'ORDER BY e.src COLLATE "C", e.kind COLLATE "C", e.dst_name COLLATE "C", e.dst COLLATE "C" NULLS FIRST',
                args,
            )
        ]

    def file_spans(self, repo: str, path: str, scope: Scope = EVERYTHING) -> list[UnitSpan]:
        where, args = self._scope(scope)
        return [
            UnitSpan(*r)
            for r in self._q(
                "SELECT c.id, c.name, c.kind, c.start_line, c.end_line FROM repoctx_capsules c "
                f"WHERE c.repo=%s AND c.path=%s AND {where} ORDER BY c.start_line, c.end_line DESC",
                [repo, path] + args,
            )
        ]

    def file_capsules(self, repo: str, path: str, scope: Scope = EVERYTHING) -> list[Capsule]:
        where, args = self._scope(scope)
        return [
            _row_to_capsule(r)
            for r in self._q(
                f"SELECT {_COLS} FROM repoctx_capsules c WHERE c.repo=%s AND c.path=%s AND {where} "
                "ORDER BY c.start_line, c.end_line DESC",
                [repo, path] + args,
            )
        ]

    # BM25 statistics (document count, lengths, document frequencies) are those of the repositories the
    # scope names — what a store holding only them would give, as a single-repository SQLite index does —
    # and of the whole store when the scope names none.
    @staticmethod
    def _stats_filter(scope: Scope, col: str) -> tuple[str, list]:
        return (f" AND {col} = ANY(%s)", [list(scope.repos)]) if scope.repos else ("", [])

    def doc_freqs(self, terms: list[str], scope: Scope = EVERYTHING) -> dict[str, int]:
        if not terms:
            return {}
        remembered = self._memory_doc_freqs(terms, scope)
        if remembered is not None:
            return remembered
        where, args = self._stats_filter(scope, "repo")
        return {
            t: int(n)
            for t, n in self._q(
                f"SELECT term, sum(n) FROM repoctx_lex WHERE term = ANY(%s){where} GROUP BY term HAVING sum(n) > 0",
                [list(set(terms))] + args,
            )
        }

    def n_capsules(self, scope: Scope = EVERYTHING) -> int:
        where, args = self._stats_filter(scope, "name")
        return int(self._q(f"SELECT coalesce(sum(n_docs), 0) FROM repoctx_repos WHERE true{where}", args)[0][0] or 0)

    def lexical(self, terms: list[str], k: int, scope: Scope = EVERYTHING) -> list[tuple[str, float]]:
        """BM25 as SQLite's lexical search computes it (``postings.score``: FTS5's bm25()), over the postings and
        statistics of the scope's repositories (all of them when it names none); the scope's path rules and grants
        are then asked of the best units, a chunk at a time, in its WHERE clause."""
        terms = [t for t in dict.fromkeys(terms) if t]
        if not terms or k <= 0:
            return []
        remembered = self._memory_lexical(terms, k, scope)
        if remembered is not None:
            return remembered
        asked = postings.query_terms(terms)
        words = sorted({w for _, ws in asked for w in ws})
        if not words:
            return []
        repo_where, repo_args = self._stats_filter(scope, "name")
        lex_where, lex_args = self._stats_filter(scope, "repo")
        with self._conn() as conn:
            # one statement, one snapshot: the statistics (the row with no term), then the asked words' rows
            rows = conn.execute(
                "SELECT NULL::text, coalesce(sum(n_docs), 0)::float8, coalesce(sum(total_len), 0)::float8, "
                f"NULL::bytea FROM repoctx_repos WHERE true{repo_where} UNION ALL "
                f"(SELECT term, n, 0, p FROM repoctx_lex WHERE term = ANY(%s) AND n > 0{lex_where})",
                repo_args + [words] + lex_args,
            ).fetchall()
            stats = next(r for r in rows if r[0] is None)
            n_docs, total_len = float(stats[1]), float(stats[2])
            held = sorted((r for r in rows if r[0] is not None), key=lambda r: r[0])
            if not held:
                return []
            which, rowids, wtf, dl = postings.unpack_many([r[3] for r in held], [r[1] for r in held], 3)
            row_starts = np.searchsorted(which, np.arange(len(held) + 1))
            by_word: dict[str, tuple[np.ndarray, np.ndarray]] = {}
            a = 0
            while a < len(held):  # a word's rows (one a repository) are together
                b = a + 1
                while b < len(held) and held[b][0] == held[a][0]:
                    b += 1
                span = slice(int(row_starts[a]), int(row_starts[b]))
                by_word[held[a][0]] = (rowids[span], wtf[span])
                a = b
            order = np.argsort(rowids, kind="stable")
            sorted_rowids, sorted_dl = rowids[order], dl[order]
            units, scores = postings.score(
                asked,
                by_word,
                n_docs,
                total_len / n_docs if n_docs > 0 and total_len > 0 else 1.0,
                lambda u: sorted_dl[np.searchsorted(sorted_rowids, u)].astype(np.float64),
            )
            if not len(units):
                return []
            best = np.lexsort((units, -scores))  # best first, ties by rid
            if scope.include or scope.exclude or scope.grants is not None:
                where, args = self._scope(scope)
                sql = f"SELECT c.rid FROM repoctx_capsules c WHERE c.rid = ANY(%s) AND {where}"
                top = postings.first_admitted(
                    units, best, k, lambda chunk: {r[0] for r in conn.execute(sql, [chunk] + args).fetchall()}
                )
            else:
                top = best[:k]
            sql = "SELECT rid, id FROM repoctx_capsules WHERE rid = ANY(%s)"
            ids = dict(conn.execute(sql, [units[top].tolist()]).fetchall())
        return [(ids[r], s) for r, s in zip(units[top].tolist(), scores[top].tolist(), strict=True) if r in ids]

    # ---- BM25 and units in memory (long-lived processes): an accelerator, never the source of truth
    def _content_key(self) -> tuple:
        """Changes whenever the lexical index may have: a unit added or replaced (rids are never reused), a
        counter moved, a run finished, a repository registered or dropped. One round trip, read on every
        call: another process's finished run must be seen by the next search."""
        return tuple(self._q(_CONTENT_KEY)[0])

    def _build_memory_bm25(self) -> MemoryBM25:
        """The postings of every repository, scored with the whole database's statistics (what a search over
        all of them uses), read in one snapshot with the content key."""

        def read_key(conn: psycopg.Connection) -> tuple[tuple, float, float]:
            row = conn.execute(_CONTENT_KEY).fetchone()
            assert row is not None  # scalar subqueries: always one row
            key = tuple(row)
            return key, float(key[1] or 0), float(key[2] or 0)

        return self._read_bm25(
            read_key,
            'SELECT term, n, p FROM repoctx_lex WHERE n > 0 ORDER BY term COLLATE "C"',
            "SELECT rid, id FROM repoctx_capsules",
            [],
        )

    @staticmethod
    def _scoped_key(repos: tuple[str, ...], rows: list) -> tuple:
        return ("scoped", repos, tuple(tuple(r) for r in rows))

    def _scoped_content_key(self, repos: tuple[str, ...]) -> tuple:
        """Changes whenever the lexical index of ``repos`` may have: every committed write to a repository's units
        moves its generation in the same transaction; ``created`` tells a repository dropped and registered
        again (its generation starts over) from the one before."""
        return self._scoped_key(repos, self._q(_SCOPED_KEY, [list(repos)]))

    def _build_scoped_bm25(self, repos: tuple[str, ...]) -> MemoryBM25:
        """The postings of ``repos`` alone with their own statistics (what the SQL of :meth:`lexical` computes for
        a scope naming them), read in one snapshot with their content key."""

        def read_key(conn: psycopg.Connection) -> tuple[tuple, float, float]:
            rows = conn.execute(_SCOPED_KEY, [list(repos)]).fetchall()
            return (
                self._scoped_key(repos, rows),
                sum(float(r[2] or 0) for r in rows),
                sum(float(r[3] or 0) for r in rows),
            )

        return self._read_bm25(
            read_key,
            'SELECT term, n, p FROM repoctx_lex WHERE repo = ANY(%s) AND n > 0 ORDER BY term COLLATE "C"',
            "SELECT rid, id FROM repoctx_capsules WHERE repo = ANY(%s)",
            [list(repos)],
        )

    def _read_bm25(
        self,
        read_key: Callable[[psycopg.Connection], tuple[tuple, float, float]],
        lex_sql: str,
        units_sql: str,
        args: list,
    ) -> MemoryBM25:
        """A :class:`MemoryBM25` of the lexical rows and units the two queries read (``args`` for both), in one
        snapshot with what ``read_key`` reads there: the content key, the number of units and their total length."""
        started = time.perf_counter()
        with self._conn() as conn, conn.transaction():
            conn.execute("SET TRANSACTION ISOLATION LEVEL REPEATABLE READ READ ONLY")
            key, n_docs, total_len = read_key(conn)
            rows = conn.execute(lex_sql, args).fetchall()
            units = conn.execute(units_sql, args).fetchall()
        avgdl = total_len / n_docs if n_docs else 1.0
        return MemoryBM25.from_packed(key, rows, units, n_docs, avgdl, started)

    def _rowids_where(self, scope: Scope) -> list[int]:
        where, args = self._scope(scope)
        return [r[0] for r in self._q(f"SELECT c.rid FROM repoctx_capsules c WHERE {where}", args)]

    def _units_by_id(self, ids: list[str]) -> list[tuple[int, Capsule]]:
        return [
            (r[0], _row_to_capsule(r[1:]))
            for r in self._q(f"SELECT c.rid, {_COLS} FROM repoctx_capsules c WHERE c.id = ANY(%s)", [ids])
        ]

    def _memory_covers(self, scope: Scope, key: tuple) -> tuple[bool, bool]:
        """Statistics are those of the scope's repositories: the whole database's only when the scope names
        none or all of them. Path rules and grants are a mask."""
        held = set((key[4] or "").split(",")) - {""}
        covers = not scope.repos or held <= set(scope.repos)
        return covers, bool(scope.include or scope.exclude or scope.grants is not None)

    def by_names(self, names: list[str], scope: Scope = EVERYTHING) -> list[Capsule]:
        if not names:
            return []
        where, args = self._scope(scope)
        return [
            _row_to_capsule(r)
            for r in self._q(
                f"SELECT {_COLS} FROM repoctx_capsules c WHERE (c.name = ANY(%s) OR c.qualname = ANY(%s)) "
                f"AND c.kind != 'window' AND {where} ORDER BY c.id COLLATE \"C\"",
                [names, names] + args,
            )
        ]

    def name_counts(self, names: list[str], scope: Scope = EVERYTHING) -> dict[str, int]:
        if not names:
            return {}
        where, args = self._scope(scope)
        return {
            n: int(c)
            for n, c in self._q(
                f"SELECT c.name, count(*) FROM repoctx_capsules c WHERE c.name = ANY(%s) "
                f"AND c.kind IN ('function', 'method', 'class') AND {where} GROUP BY c.name",
                [list(set(names))] + args,
            )
        }

    def by_path_suffix(self, fragments: list[str], scope: Scope = EVERYTHING) -> list[str]:
        where, args = self._scope(scope)
        out: list[str] = []
        with self._conn() as conn:
            for frag in fragments:
                like = like_suffix(frag)
                rows = conn.execute(
                    f"SELECT c.id, c.path FROM repoctx_capsules c WHERE c.kind = 'module' "
                    f"AND (c.path = %s OR c.path LIKE %s) AND {where} ORDER BY length(c.path), c.id LIMIT 5",
                    [frag, like] + args,
                ).fetchall()
                if not rows and "/" in frag:  # the fragment holds more than the path: the longest path it ends with
                    rows = conn.execute(
                        f"SELECT c.id, c.path FROM repoctx_capsules c WHERE c.kind = 'module' "
                        f"AND strpos(c.path, '/') > 0 AND length(c.path) < length(%s) "
                        f"AND right(%s, length(c.path) + 1) = '/' || c.path "
                        f"AND {where} ORDER BY length(c.path) DESC, c.id LIMIT 5",
                        [frag, frag] + args,
                    ).fetchall()
                    rows = [r for r in rows if len(r[1]) == len(rows[0][1])]  # the longest only
                out.extend(r[0] for r in rows)
        return list(dict.fromkeys(out))

    def edges_from(self, ids: list[str], kinds: tuple[str, ...] = (), scope: Scope = EVERYTHING) -> list[Edge]:
        remembered = self._memory_edges("src", ids, kinds, scope)
        return remembered if remembered is not None else self._edges("src", ids, kinds, scope)

    def edges_to(self, ids: list[str], kinds: tuple[str, ...] = (), scope: Scope = EVERYTHING) -> list[Edge]:
        remembered = self._memory_edges("dst", ids, kinds, scope)
        return remembered if remembered is not None else self._edges("dst", ids, kinds, scope)

    def _edges(self, col: str, ids: list[str], kinds: tuple[str, ...], scope: Scope) -> list[Edge]:
        if not ids:
            return []
        sql = f"SELECT e.src, e.kind, e.dst_name, e.dst FROM repoctx_edges e WHERE e.{col} = ANY(%s)"
        args: list = [list(set(ids))]
        if kinds:
            sql += " AND e.kind = ANY(%s)"
            args.append(list(kinds))
        if scope.unrestricted:
            pass
        elif not (scope.include or scope.exclude or scope.grants is not None):
            # edges resolve within a repository: both ends are in e.repo. "|| ''": the id lookup is the selective
            # one; with fresh statistics missing, the planner ANDed a scan of the whole repository's edges
            sql += " AND (e.repo || '') = ANY(%s)"
            args.append(list(scope.repos))
        else:  # both ends must be visible: the source, and the target when resolved
            s_where, s_args = self._scope(scope, "s")
            d_where, d_args = self._scope(scope, "d")
            sql += (
                f" AND EXISTS (SELECT 1 FROM repoctx_capsules s WHERE s.id = e.src AND {s_where})"
                f" AND (e.dst IS NULL OR EXISTS (SELECT 1 FROM repoctx_capsules d WHERE d.id = e.dst AND {d_where}))"
            )
            args += s_args + d_args
        return [Edge(*r) for r in self._q(sql + " ORDER BY e.eid", args)]

    # ---- grep: the files' texts, narrowed by pg_trgm
    def grep_texts(self, plan: GrepPlan, scopes: Sequence[Scope]) -> Iterator[tuple[str, str, tuple[str, str], str]]:
        from repoctx.store.grep import postgres_filter

        scope_where, scope_args = compile_all(scopes, "f.repo", "f.path", "%s", "postgres")
        where, args = scope_where, scope_args
        pre = postgres_filter(plan.prefilter, "t.text", plan.ignore_case)
        if pre is not None:
            where, args = f"{where} AND {pre[0]}", args + pre[1]
        sql = (
            f"SELECT f.repo, f.path, t.hash, t.text FROM repoctx_files f JOIN repoctx_texts t ON t.repo = f.repo "
            f'AND t.hash = f.text_hash WHERE {where} ORDER BY f.repo COLLATE "C", f.path COLLATE "C"'
        )
        with self._conn() as conn, conn.transaction():
            if (
                pre is not None
                and conn.execute(
                    f"SELECT count(*) > %s FROM repoctx_files f WHERE {scope_where} AND f.text_hash IS NOT NULL",
                    [GREP_PATH_FIRST] + scope_args,
                ).fetchone()[0]
            ):
                # many files in scope: the trigram index first. The planner prices a scan of a few thousand texts
                # as cheap, not seeing that LIKE detoasts each whole file (Django: a scan 180 ms, the GIN bitmap
                # 80 ms); few files (a path glob): their texts first, as the planner would
                conn.execute("SET LOCAL enable_seqscan = off")
                conn.execute("SET LOCAL enable_indexscan = off")
            # a server-side cursor: texts stream in batches, and a scan cut short by its bounds reads no more
            with conn.cursor(name="repoctx_grep") as cur:
                cur.itersize = 64
                cur.execute(sql, args)
                for repo, path, key, text in cur:
                    yield repo, path, (repo, key), text

    def file_text(self, repo: str, path: str, scope: Scope = EVERYTHING) -> str | None:
        """The indexed text of one file (decoded, secrets redacted), or None when the scope hides it or the
        store holds none for it."""
        where, args = self._scope(scope, "f")
        rows = self._q(
            f"SELECT t.text FROM repoctx_files f JOIN repoctx_texts t ON t.repo = f.repo AND t.hash = "
            f"f.text_hash WHERE f.repo=%s AND f.path=%s AND {where}",
            [repo, path] + args,
        )
        return rows[0][0] if rows else None

    # ---- dense
    def _exact_dense(self, scope: Scope) -> bool:
        """Whether the scope's repositories are few enough units to scan exactly. An HNSW graph over many
        repositories, filtered down to one, loses recall (Django rows: function Acc@10 69.8 exact vs
        64.2 through the shared graph); exact is what the SQLite store does below 250k."""
        if not scope.repos:
            return False
        n = self._q("SELECT coalesce(sum(n_docs), 0) FROM repoctx_repos WHERE name = ANY(%s)", (list(scope.repos),))
        return int(n[0][0] or 0) <= EXACT_DENSE_MAX

    def vector_state(self, repo: str, model: str) -> VectorState:
        return self.vector_states([repo], model)[repo]

    def vectors_current(self, repo: str, model: str) -> bool:
        return self.vector_state(repo, model).current

    def vector_states(self, repos: Sequence[str], model: str) -> dict[str, VectorState]:
        """Each repository's vector state, in one round trip. Its units are the counter the writer keeps with
        them (``n_docs``: every unit kind is embedded, EMBED_KINDS), not a count of its rows: Django's count
        alone took 46 ms, and a search over 72 repositories asked for all of them."""
        repos = list(dict.fromkeys(repos))
        if not repos:
            return {}
        if _EMBEDS_EVERY_KIND:
            totals = dict(self._q("SELECT name, n_docs FROM repoctx_repos WHERE name = ANY(%s)", (repos,)))
        else:  # some kind is not embedded: count what is
            totals = dict(
                self._q(
                    "SELECT repo, count(*) FROM repoctx_capsules WHERE repo = ANY(%s) AND kind = ANY(%s) GROUP BY repo",
                    (repos, list(EMBED_KINDS)),
                )
            )
        by_repo: dict[str, dict[str, int]] = {}
        for repo, m, n in self._q(
            "SELECT repo, model, count(*) FROM repoctx_vectors WHERE repo = ANY(%s) GROUP BY repo, model", (repos,)
        ):
            by_repo.setdefault(repo, {})[m] = int(n)
        out = {}
        for repo in repos:
            models, total = by_repo.get(repo, {}), int(totals.get(repo) or 0)
            count = models.get(model, 0)
            shown = model if model in models else (max(models, key=lambda m: models[m]) if models else None)
            out[repo] = VectorState(shown, count, total, count == total and total > 0 and len(models) == 1)
        return out

    def repo_names(self) -> list[str]:
        return [n for (n,) in self._q("SELECT name FROM repoctx_repos ORDER BY name")]

    def dense(self, vector: np.ndarray, model: str, k: int, scope: Scope = EVERYTHING) -> list[tuple[str, float]]:
        from pgvector import Vector

        vec = Vector(np.asarray(vector, dtype=np.float32))
        dim = int(np.asarray(vector).shape[-1])
        where, args = self._scope(scope)
        dim_sql = f"vector_dims(v.embedding) = {dim}"
        if dim in HNSW_DIMS and not self._exact_dense(scope):
            # the expression and predicate an HNSW index was built on: approximate, over the whole store
            dist = f"(v.embedding::vector({dim})) <=> (%s::vector({dim}))"
        else:  # an expression the HNSW index cannot serve: an exact scan of the scope's rows
            dist = "(v.embedding <=> %s) + 0"
        sql = (
            f"SELECT c.id, 1 - ({dist}) AS sim FROM repoctx_vectors v JOIN repoctx_capsules c ON c.rid = v.rid "
            f"WHERE v.model = %s AND {dim_sql} AND {where} ORDER BY {dist} LIMIT %s"
        )
        rows = self._q(sql, [vec, model] + args + [vec, k])
        return [(r[0], float(r[1])) for r in rows]


def made_ahead(capsules: list[Capsule], lexical_bodies: dict[str, str], text: str | None) -> dict:
    """What a parse worker makes of a file for put_file when the writer is behind: its units' postings."""
    return {"lex": postings.lex_rows(capsules, lexical_bodies)}


class _LexChanges:
    """A transaction's changes to a repository's lexical rows: the postings of units added (with their lengths) and
    of units taken away, written at its end (:meth:`write`). A term's postings after its row's last unit (a cold
    index's every one) are appended to the row; a term that loses postings has its row read, changed and written
    whole. Terms longer than ``MAX_POSTED_TERM`` get no row. Units' postings are numbered by the vocabulary a window
    of ``postings.FLUSH_POSTINGS`` at a time, kept as arrays (20 bytes a posting: a cold index of Django held 592
    MiB while each unit's terms stayed strings until the end)."""

    def __init__(self) -> None:
        self.vocab = postings.Vocab()
        self.added: list[tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]] = []  # (terms, rids, wtf, dl)
        self.dropped: list[tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]] = []  # (terms, rids, wtf, dl)
        self._window()

    def _window(self) -> None:
        self.add = postings.Side("q")
        self.drop = postings.Side("q")

    def _close_window(self) -> None:
        if self.add.size:
            at, ar, aw = self.add.arrays(self.vocab)
            self.added.append((at, ar, aw, self.add.posting_lengths().astype(np.int32)))
        if self.drop.size:
            dt, dr, dw = self.drop.arrays(self.vocab)
            self.dropped.append((dt, dr, dw, self.drop.posting_lengths().astype(np.int32)))
        self._window()

    def __bool__(self) -> bool:
        return bool(self.add.size or self.drop.size or self.added or self.dropped)

    def add_unit(self, rid: int, unit: tuple) -> None:
        terms, wtf, dl = unit
        self.add.put(rid, terms, wtf, dl)
        if self.add.size + self.drop.size >= postings.FLUSH_POSTINGS:
            self._close_window()

    def drop_unit(self, rid: int, unit: tuple) -> None:
        terms, wtf, dl = unit
        self.drop.put(rid, terms, wtf, dl)
        if self.add.size + self.drop.size >= postings.FLUSH_POSTINGS:
            self._close_window()

    def write(self, conn: psycopg.Connection, repo: str, cold: bool) -> None:
        """Write the changes (``cold``: the repository held no row when the transaction began) and forget them."""
        if not self:
            return
        self._close_window()
        names = self.vocab.terms

        def joined(parts: list, j: int, dtype) -> np.ndarray:
            return np.concatenate([p[j] for p in parts]) if parts else np.zeros(0, dtype)

        types = (np.int32, np.int64, np.int32, np.int32)
        at, ar, aw, ad = (joined(self.added, j, t) for j, t in enumerate(types))
        dt, dr, dw, dd = (joined(self.dropped, j, t) for j, t in enumerate(types))
        self.__init__()  # type: ignore[misc]
        posted = np.fromiter((len(t) <= MAX_POSTED_TERM for t in names), dtype=bool, count=len(names))
        if not posted.all():
            keep = posted[at]
            at, ar, aw, ad = at[keep], ar[keep], aw[keep], ad[keep]
            keep = posted[dt]
            dt, dr, dw, dd = dt[keep], dr[keep], dw[keep], dd[keep]
        if len(dr) and len(ar):
            # a posting taken away and given back the same is no change: a unit written again unchanged keeps its rid
            # (put_file), and one added and taken away in the transaction never reaches the rows
            (at, ar, aw, ad), (dt, dr, _, _) = postings.cancel((at, ar, aw, ad), (dt, dr, dw, dd))
        a_count = np.bincount(at, minlength=len(names))
        d_count = np.bincount(dt, minlength=len(names))
        touched = np.flatnonzero((a_count > 0) | (d_count > 0))
        if not len(touched):
            return
        stored: dict[str, int] = {}  # a stored term's last unit
        if not cold:
            stored = dict(
                conn.execute(
                    "SELECT term, last FROM repoctx_lex WHERE repo=%s AND term = ANY(%s)",
                    (repo, [names[i] for i in touched.tolist()]),
                ).fetchall()
            )
        order = np.lexsort((ar, at))  # by term, then unit
        a_start = np.cumsum(a_count) - a_count
        last = np.fromiter((stored.get(names[i], -1) for i in touched.tolist()), dtype=np.int64, count=len(touched))
        has = a_count[touched] > 0
        first = np.full(len(touched), -1, dtype=np.int64)
        first[has] = ar[order[a_start[touched[has]]]]
        appended = (d_count[touched] == 0) & has & (first > last)
        added = (a_start, a_count, order, ar, aw, ad)
        inserts: list[tuple] = []
        self._append(conn, repo, names, touched[appended], last[appended], stored, added, inserts)
        rest = touched[~appended]
        if len(rest):
            self._merge(conn, repo, names, rest, added, (d_count, dr, dt), inserts)
        if inserts:
            inserts.sort(key=lambda r: r[1])  # in key order: the primary key's pages fill one after another
            _copy_lex(conn, inserts)

    @staticmethod
    def _append(conn, repo, names, new, after, stored, added, inserts) -> None:
        """Terms whose postings all come after their row's last unit: packed ~260k postings at a time, new
        rows to ``inserts``, stored ones appended to."""
        a_start, a_count, order, ar, aw, ad = added
        updates: list[tuple] = []
        ends = np.cumsum(a_count[new])
        a = 0
        while a < len(new):
            b = max(int(np.searchsorted(ends, (ends[a - 1] if a else 0) + (1 << 18), side="right")), a + 1)
            block = new[a:b]
            counts = a_count[block]
            firsts = np.cumsum(counts) - counts
            idx = order[np.repeat(a_start[block], counts) + np.arange(int(counts.sum())) - np.repeat(firsts, counts)]
            rids = ar[idx]
            data, offs = postings.pack_runs(counts, rids, [aw[idx], ad[idx]], np.maximum(after[a:b], 0))
            lasts = rids[firsts + counts - 1].tolist()
            offs_l = offs.tolist()
            for j, i in enumerate(block.tolist()):
                term, piece = names[i], data[offs_l[j] : offs_l[j + 1]]
                if term in stored:
                    updates.append((term, int(counts[j]), lasts[j], piece))
                else:
                    inserts.append((repo, term, int(counts[j]), lasts[j], piece))
            a = b
        _LexChanges._update(conn, repo, updates, append=True)

    @staticmethod
    def _update(conn, repo: str, rows: list[tuple], append: bool) -> None:
        """Stored rows given (term, n, last, p): their postings appended to (``append``), or replaced."""
        if not rows:
            return
        sets = "n = l.n + x.n, last = x.last, p = l.p || x.p" if append else "n = x.n, last = x.last, p = x.p"
        conn.execute(
            f"UPDATE repoctx_lex l SET {sets} FROM unnest(%s::text[], %s::int4[], %s::int8[], %s::bytea[]) "
            "AS x(term, n, last, p) WHERE l.repo = %s AND l.term = x.term",
            ([r[0] for r in rows], [r[1] for r in rows], [r[2] for r in rows], [r[3] for r in rows], repo),
        )

    @staticmethod
    def _merge(conn, repo, names, ids, added, dropped, inserts) -> None:
        """Terms that lose postings, or gain some before their last: each row read, changed and written whole."""
        a_start, a_count, order, ar, aw, ad = added
        d_count, dr, dt = dropped
        rows = {
            t: (n, p)
            for t, n, p in conn.execute(
                "SELECT term, n, p FROM repoctx_lex WHERE repo=%s AND term = ANY(%s)",
                (repo, [names[i] for i in ids.tolist()]),
            ).fetchall()
        }
        d_order = np.lexsort((dr, dt)) if len(dt) else np.zeros(0, np.int64)
        d_start = np.cumsum(d_count) - d_count
        updates: list[tuple] = []
        deletes: list[str] = []
        empty = np.zeros(0, dtype=np.int64)
        for i in ids.tolist():
            term = names[i]
            row = rows.get(term)
            rids, wtf, dl = postings.unpack_many([row[1]], [row[0]], 3)[1:] if row else (empty, empty, empty)
            if d_count[i]:
                keep = ~np.isin(rids, dr[d_order[d_start[i] : d_start[i] + d_count[i]]])
                rids, wtf, dl = rids[keep], wtf[keep], dl[keep]
            if a_count[i]:
                idx = order[a_start[i] : a_start[i] + a_count[i]]
                rids = np.concatenate([rids, ar[idx]])
                o = np.argsort(rids, kind="stable")
                rids = rids[o]
                wtf, dl = np.concatenate([wtf, aw[idx]])[o], np.concatenate([dl, ad[idx]])[o]
                if len(rids) > 1 and not (np.diff(rids) > 0).all():
                    raise postings.CorruptPostings(f"a unit given the term {term!r} twice")
            if not len(rids):
                if row is not None:
                    deletes.append(term)
                continue
            got = (term, len(rids), int(rids[-1]), postings.pack(rids, wtf, dl))
            if row is None:
                inserts.append((repo, *got))
            else:
                updates.append(got)
        _LexChanges._update(conn, repo, updates, append=False)
        if deletes:
            conn.execute("DELETE FROM repoctx_lex WHERE repo=%s AND term = ANY(%s)", (repo, deletes))


class PostgresRepoWriter:
    """One repository's writes. Rows are buffered and sent with COPY; every read the update makes
    flushes first, so it sees the transaction's own writes. The lexical rows are written at the end."""

    ahead = staticmethod(made_ahead)  # what put_file's ``ahead`` takes, made by a parse worker

    def __init__(self, store: PostgresStore, repo: str):
        self.store = store
        self.repo = repo
        self.conn: psycopg.Connection | None = None  # the open transaction's (see tx())
        self._caps: list[tuple] = []
        self._files: list[tuple] = []
        self._texts: dict[str, str] = {}  # grep's texts to write, by key
        self._edges: list[tuple] = []
        self._lex = _LexChanges()
        self._freed: dict[str, int] = {}  # units deleted in this transaction: id -> rid, taken back if written again
        self._since = 0  # postings made since the last hand-off
        self._docs = 0
        self._len = 0.0
        self._rids: list[int] = []
        self._cold = False  # the repository had no files when the transaction began: nothing to delete
        self._written = 0  # units copied in the open transaction
        # a flush handed to a thread (_hand_off) while the update goes on, and what it raised
        self._behind: threading.Thread | None = None
        self._behind_error: BaseException | None = None

    # ---- transaction and lock
    @contextmanager
    def transaction(self) -> Iterator[None]:
        with self.store.pool.connection() as conn:
            self.conn = conn
            self._written = 0
            try:
                with conn.transaction():
                    self._cold = not conn.execute(
                        "SELECT EXISTS (SELECT 1 FROM repoctx_files WHERE repo=%s)", (self.repo,)
                    ).fetchone()[0]
                    try:
                        yield
                    except BaseException:
                        self._wait_behind(reraise=False)  # the connection is the thread's until it is done
                        raise
                    self._flush()
                    self._lex.write(conn, self.repo, self._cold)
                self._analyze_if_grown(conn)
            finally:
                self._wait_behind(reraise=False)
                self.conn = None
                self._reset()

    def _analyze_if_grown(self, conn: psycopg.Connection) -> None:
        """After a commit that grew the units by a tenth or more (a cold index, a big push), refresh the
        planner's statistics now. Autovacuum would, within a minute or so; meanwhile the planner costs a scoped
        search with the old row counts (measured: a fresh 50k-unit store answered a one-repository search at
        p95 699 ms before, ~130 ms after). ANALYZE samples a bounded number of rows: well under a second."""
        if self._written < 1000:
            return
        known = conn.execute("SELECT reltuples FROM pg_class WHERE oid = 'repoctx_capsules'::regclass").fetchone()
        before = max(float(known[0]) if known else 0.0, 0.0)  # -1: never analyzed
        if self._written < 0.1 * before:
            return
        for table in _ANALYZED:
            conn.execute(f"ANALYZE {table}")  # the pool's connections autocommit: each takes effect now

    @contextmanager
    def lock(self, kind: str = "index", wait: bool = True) -> Iterator[None]:
        """A session advisory lock on its own connection: one indexer per repository across machines,
        released by the server if the holder dies."""
        key = zlib.crc32(f"repoctx:{self.repo}:{kind}".encode())
        with self.store.pool.connection() as conn:
            if wait:
                conn.execute("SELECT pg_advisory_lock(%s)", (key,))
            elif not conn.execute("SELECT pg_try_advisory_lock(%s)", (key,)).fetchone()[0]:
                raise IndexBusy(f"another repoctx process is indexing {self.repo}")
            try:
                yield
            finally:
                conn.execute("SELECT pg_advisory_unlock(%s)", (key,))

    def tx(self) -> psycopg.Connection:
        """The connection of the open :meth:`transaction` (once a flush handed to a thread is done with it)."""
        if self.conn is None:
            raise StoreError("no transaction is open")
        self._wait_behind()
        return self.conn

    def _reset(self) -> None:
        self._caps, self._files, self._edges, self._texts = [], [], [], {}
        self._docs, self._len, self._rids, self._since = 0, 0.0, [], 0
        self._lex, self._freed = _LexChanges(), {}

    @contextmanager
    def _c(self):
        if self.conn is not None:
            self._flush()
            yield self.conn
        else:
            with self.store.pool.connection() as conn:
                yield conn

    def _flush(self) -> None:
        self._wait_behind()
        if self.conn is not None:
            self._write(self.conn, self._take())

    def _take(self, counts: bool = True) -> tuple:
        """The buffered rows, and with ``counts`` the units' count and length, the buffers emptied. (A hand-off
        leaves the counts to add up: the repository's row is then updated once.)"""
        out = (self._texts, self._files, self._caps, self._edges)
        self._written += len(self._caps)
        self._texts, self._caps, self._files, self._edges = {}, [], [], []
        if not counts:
            return (*out, 0, 0.0)
        got = (*out, self._docs, self._len)
        self._docs, self._len = 0, 0.0
        return got

    def _hand_off(self) -> None:
        """Write what is buffered from a thread while the update goes on (a cold index of Django wrote every row
        in one flush at its end: 15.7 s of its 27.9, the server busy and the indexer waiting, then the reverse).
        Whatever uses the connection next waits for it (``tx``, ``_c``, ``_flush``); unit ids are taken ahead."""
        self._wait_behind()
        conn = self.conn
        if conn is None:
            return
        if len(self._rids) < _RIDS_AHEAD:
            rows = conn.execute(
                "SELECT nextval('repoctx_capsules_rid_seq') FROM generate_series(1, %s)", (_RIDS_AHEAD,)
            ).fetchall()
            self._rids = [r[0] for r in rows][::-1] + self._rids
        taken = self._take(counts=False)
        self._since = 0

        def run() -> None:
            try:
                self._write(conn, taken)
            except BaseException as e:  # noqa: BLE001 - raised in the indexer's thread by _wait_behind
                self._behind_error = e

        self._behind = threading.Thread(target=run, name="repoctx-pg-flush", daemon=True)
        self._behind.start()

    def _wait_behind(self, reraise: bool = True) -> None:
        if self._behind is not None:
            self._behind.join()
            self._behind = None
        err, self._behind_error = self._behind_error, None
        if err is not None and reraise:
            raise err

    def _write(self, conn: psycopg.Connection, taken: tuple) -> None:
        texts, files, caps, edges, docs, length = taken
        if texts:  # new texts only: one the repository holds already stays
            batch: list[tuple[str, str]] = []
            size = 0
            for key, text in [*texts.items(), (None, "")]:
                if key is not None:
                    batch.append((key, text))
                    size += len(text)
                if batch and (key is None or size > 8 << 20):
                    conn.execute(
                        "INSERT INTO repoctx_texts(repo, hash, text) SELECT %s, h, t FROM unnest(%s::text[], "
                        "%s::text[]) AS x(h, t) ON CONFLICT (repo, hash) DO NOTHING",
                        (self.repo, [b[0] for b in batch], [b[1] for b in batch]),
                    )
                    batch, size = [], 0
        if files:
            with conn.cursor().copy(
                "COPY repoctx_files(repo, path, language, size, mtime_ns, hash, module, imports, "
                "method, note, text_hash) FROM STDIN"
            ) as cp:
                for r in files:
                    cp.write_row(r)
        if caps:
            with conn.cursor().copy(
                "COPY repoctx_capsules(rid, id, repo, path, language, kind, name, qualname, "
                "signature, params, returns, docstring, decorators, start_line, end_line, text, "
                "content_hash, parent, module, dl) FROM STDIN"
            ) as cp:
                for r in caps:
                    cp.write_row(r)
        if edges:
            with conn.cursor().copy(
                "COPY repoctx_edges(repo, src, kind, dst_name, dst_key, dst, src_path) FROM STDIN"
            ) as cp:
                for r in edges:
                    cp.write_row(r)
        self._apply_counts(conn, docs, length)

    def _apply_counts(self, conn, docs: int, length: float) -> None:
        if docs or length:
            conn.execute(
                "UPDATE repoctx_repos SET n_docs = n_docs + %s, total_len = total_len + %s WHERE name=%s",
                (docs, length, self.repo),
            )

    def _next_rid(self) -> int:
        if not self._rids:
            rows = (
                self.tx().execute("SELECT nextval('repoctx_capsules_rid_seq') FROM generate_series(1, 1000)").fetchall()
            )
            self._rids = [r[0] for r in rows][::-1]
        return self._rids.pop()

    # ---- reads of the repository's own state
    def files(self) -> dict[str, FileRecord]:
        with self._c() as conn:
            rows = conn.execute(
                "SELECT path, language, size, mtime_ns, hash, module, imports, method, note, text_hash "
                "FROM repoctx_files WHERE repo=%s",
                (self.repo,),
            ).fetchall()
        return {
            r[0]: FileRecord(r[0], r[1], r[2], r[3], r[4], r[5], json.loads(r[6] or "{}"), r[7], r[8] or "", r[9] or "")
            for r in rows
        }

    def meta(self, key: str) -> str | None:
        with self._c() as conn:
            row = conn.execute("SELECT value FROM repoctx_meta WHERE repo=%s AND key=%s", (self.repo, key)).fetchone()
        return row[0] if row else None

    def set_meta(self, key: str, value: str) -> None:
        with self._c() as conn:
            conn.execute(
                "INSERT INTO repoctx_meta VALUES(%s,%s,%s) ON CONFLICT (repo, key) DO UPDATE SET "
                "value = EXCLUDED.value",
                (self.repo, key, value),
            )

    # ---- writes
    def clear(self) -> None:
        with self._c() as conn:
            for table in ("repoctx_lex", "repoctx_capsules", "repoctx_edges", "repoctx_files", "repoctx_texts"):
                conn.execute(f"DELETE FROM {table} WHERE repo=%s", (self.repo,))
            conn.execute("UPDATE repoctx_repos SET n_docs = 0, total_len = 0 WHERE name=%s", (self.repo,))
        self._lex, self._freed = _LexChanges(), {}  # (what was taken away or added before is gone with the rows)
        self._cold = True

    def put_file(
        self,
        rec: FileRecord,
        capsules: list[Capsule],
        lexical_bodies: dict[str, str],
        text: str | None = None,
        ahead: dict | None = None,  # what the writer's ``ahead`` made of the file in a parse worker (SQLite's)
    ) -> None:
        if not self._cold:
            self.delete_file(rec.path)
        key = None
        if text is not None:
            key = text_key(text)
            self._texts[key] = text
        self._files.append(
            (
                self.repo,
                *file_columns(rec),
                key,
            )
        )
        lex = (ahead or {}).get("lex") or postings.lex_rows(capsules, lexical_bodies)
        for c, unit in zip(capsules, lex, strict=True):
            rid = self._freed.pop(c.id, None)
            if rid is None:  # (a unit written again takes its rid back: unchanged, its postings change nothing)
                rid = self._next_rid()
            dl = unit[2]
            self._caps.append(
                (
                    rid,
                    c.id,
                    self.repo,
                    *capsule_columns(c),
                    c.text,
                    c.content_hash,
                    c.parent,
                    rec.module,
                    float(dl),
                )
            )
            self._lex.add_unit(rid, unit)
            self._since += len(unit[0])
            self._docs += 1
            self._len += dl
        if self._since >= _BEHIND_LINES:
            self._hand_off()

    def put_text(self, path: str, text: str) -> None:
        key = text_key(text)
        with self._c() as conn:
            old = conn.execute(
                "SELECT text_hash FROM repoctx_files WHERE repo=%s AND path=%s", (self.repo, path)
            ).fetchone()
            if old is None or old[0] == key:
                return
            self._texts[key] = text
            conn.execute("UPDATE repoctx_files SET text_hash=%s WHERE repo=%s AND path=%s", (key, self.repo, path))
            self._release_text(conn, old[0])

    def _release_text(self, conn, key: str | None) -> None:
        """Drop a text no file of the repository refers to any more (a text still waiting in the buffer is
        written by the next flush whatever happens here)."""
        if key:
            conn.execute(
                "DELETE FROM repoctx_texts t WHERE t.repo=%s AND t.hash=%s AND NOT EXISTS (SELECT 1 FROM "
                "repoctx_files f WHERE f.repo=%s AND f.text_hash=%s)",
                (self.repo, key, self.repo, key),
            )

    def files_written(self) -> None:  # postings are written at the end of the transaction
        pass

    def touch_file(self, path: str, size: int, mtime_ns: int) -> None:
        with self._c() as conn:
            conn.execute(
                "UPDATE repoctx_files SET size=%s, mtime_ns=%s WHERE repo=%s AND path=%s",
                (size, mtime_ns, self.repo, path),
            )

    def delete_file(self, path: str) -> None:
        if self.conn is None:
            raise StoreError("writes happen inside writer.transaction()")
        self._wait_behind()
        if any(f[1] == path for f in self._files):
            self._flush()
        conn = self.conn
        old = conn.execute(
            "SELECT text_hash FROM repoctx_files WHERE repo=%s AND path=%s", (self.repo, path)
        ).fetchone()
        gone = conn.execute(
            f"SELECT c.rid, c.dl, {_COLS} FROM repoctx_capsules c WHERE c.repo=%s AND c.path=%s", (self.repo, path)
        ).fetchall()
        if not gone:
            conn.execute("DELETE FROM repoctx_edges WHERE repo=%s AND src_path=%s", (self.repo, path))
            conn.execute("DELETE FROM repoctx_files WHERE repo=%s AND path=%s", (self.repo, path))
            if old is not None:
                self._release_text(conn, old[0])
            return
        # the units' postings taken away, made again as put_file made them (a class's body: its own lines)
        units = [_row_to_capsule(r[2:]) for r in gone]
        for r, c, unit in zip(gone, units, postings.lex_rows(units, lexical_bodies(units)), strict=True):
            self._lex.drop_unit(r[0], unit)
            self._freed[c.id] = r[0]
        conn.execute("DELETE FROM repoctx_capsules WHERE repo=%s AND path=%s", (self.repo, path))
        conn.execute("DELETE FROM repoctx_edges WHERE repo=%s AND src_path=%s", (self.repo, path))
        conn.execute("DELETE FROM repoctx_files WHERE repo=%s AND path=%s", (self.repo, path))
        if old is not None:
            self._release_text(conn, old[0])
        self._apply_counts(conn, -len(gone), -sum(float(r[1]) for r in gone))

    def put_edges(self, edges: Iterable[tuple[Edge, str | None]], src_path: str) -> None:
        self._edges.extend((self.repo, e.src, e.kind, e.dst_name, key, e.dst, src_path) for e, key in edges)
        if len(self._edges) >= _BEHIND_EDGES:  # a cold update's edges come last, a few files at a time
            self._hand_off()

    def set_edge_dst(self, edge_key, dst: str | None) -> None:
        with self._c() as conn:
            conn.execute("UPDATE repoctx_edges SET dst=%s WHERE eid=%s", (dst, edge_key))

    # ---- lookups for incremental resolution
    def cands_by_name(self, name: str) -> list[tuple]:
        with self._c() as conn:
            return [
                tuple(r)
                for r in conn.execute(
                    "SELECT id, path, qualname, kind, module FROM repoctx_capsules WHERE name=%s AND repo=%s "
                    "AND kind NOT IN ('module','window') ORDER BY id COLLATE \"C\"",
                    (name, self.repo),
                ).fetchall()
            ]

    def module_cand(self, key: str) -> tuple | None:
        with self._c() as conn:
            r = conn.execute(
                "SELECT id, path, qualname, kind, module FROM repoctx_capsules WHERE repo=%s AND "
                "kind='module' AND (qualname=%s OR path=%s) ORDER BY id COLLATE \"C\" LIMIT 1",
                (self.repo, key, key),
            ).fetchone()
        return tuple(r) if r else None

    def edges_needing(self, keys: set[str], dsts: set[str], exclude_paths: set[str]) -> list[tuple]:
        with self._c() as conn:
            rows = conn.execute(
                "SELECT eid, src, kind, dst_name, dst, src_path FROM repoctx_edges "
                "WHERE repo=%s AND kind != 'contains' "
                "AND (dst_key = ANY(%s) OR dst = ANY(%s))",
                (self.repo, sorted(keys), sorted(dsts)),
            ).fetchall()
        return [tuple(r) for r in rows if r[5] not in exclude_paths]

    def bases_of(self, ids: list[str]) -> dict[str, list[tuple[str, str, str]]]:
        out: dict[str, list[tuple[str, str, str]]] = {}
        with self._c() as conn:
            for src, dst, path, qual in conn.execute(
                "SELECT e.src, e.dst, c.path, c.qualname FROM repoctx_edges e JOIN repoctx_capsules c ON c.id = e.dst "
                "WHERE e.repo=%s AND e.kind='inherits' AND e.src = ANY(%s) ORDER BY e.eid",
                (self.repo, sorted(set(ids))),
            ).fetchall():
                out.setdefault(src, []).append((dst, path, qual))
        return out

    def capsule_rows(self, path: str) -> list[tuple]:
        with self._c() as conn:
            return [
                tuple(r)
                for r in conn.execute(
                    "SELECT id, path, qualname, kind, module, language, name FROM repoctx_capsules "
                    "WHERE repo=%s AND path=%s",
                    (self.repo, path),
                ).fetchall()
            ]

    # ---- vectors: only what lacks a vector of the model is embedded; each batch commits on its own
    def embed_rows(self, model: str) -> tuple[list[EmbedRow], bool]:
        with self._c() as conn:
            rows = conn.execute(
                "SELECT c.id, c.path, c.qualname, c.signature, c.docstring, c.text FROM repoctx_capsules c "
                "LEFT JOIN repoctx_vectors v ON v.rid = c.rid AND v.model = %s WHERE c.repo = %s AND c.kind = ANY(%s) "
                'AND v.rid IS NULL ORDER BY c.id COLLATE "C"',
                (model, self.repo, list(EMBED_KINDS)),
            ).fetchall()
        return [EmbedRow(*r) for r in rows], False

    def vector_sink(self, model: str, dim: int, whole: bool) -> PgVectorSink:
        return PgVectorSink(self.store, self.repo, model, dim)


class PgVectorSink:
    def __init__(self, store: PostgresStore, repo: str, model: str, dim: int):
        self.store, self.repo, self.model, self.dim = store, repo, model, dim
        with store.pool.connection() as conn:  # another model's vectors of this repository are stale now
            conn.execute("DELETE FROM repoctx_vectors WHERE repo=%s AND model <> %s", (repo, model))

    def add(self, ids: list[str], matrix: np.ndarray) -> None:
        from pgvector import Vector

        if not ids:
            return
        if matrix.shape[1] != self.dim:
            raise StoreError(f"vectors of dimension {matrix.shape[1]} given for a {self.dim}-dimensional model")
        with self.store.pool.connection() as conn, conn.transaction():
            rid = dict(conn.execute("SELECT id, rid FROM repoctx_capsules WHERE id = ANY(%s)", (ids,)).fetchall())
            rows = [
                (rid[i], self.repo, self.model, Vector(np.asarray(v, dtype=np.float32)))
                for i, v in zip(ids, matrix, strict=True)
                if i in rid
            ]
            with conn.cursor() as cur:
                cur.executemany(
                    "INSERT INTO repoctx_vectors(rid, repo, model, embedding) VALUES(%s,%s,%s,%s) "
                    "ON CONFLICT (rid) DO UPDATE SET model = EXCLUDED.model, embedding = EXCLUDED.embedding",
                    rows,
                )

    def finish(self) -> None:
        pass
