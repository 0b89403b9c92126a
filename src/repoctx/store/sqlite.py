"""The embedded store: one SQLite file in WAL mode (FTS5 for BM25) holding any number of repositories,
and a FAISS index per repository beside it. One writer at a time, many readers, a connection per
thread; an update is one transaction, so a crash leaves the previous index whole."""

from __future__ import annotations

import fcntl
import json
import math
import os
import sqlite3
import threading
import time
from collections.abc import Callable, Iterable, Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

import numpy as np

from repoctx.heap import trim
from repoctx.store import postings
from repoctx.store.base import (
    EMBED_KINDS,
    EVERYTHING,
    EmbedRow,
    FileRecord,
    IndexBusy,
    RepoRecord,
    SchemaMismatch,
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
from repoctx.store.faiss_index import (
    HNSW_MIN_VECTORS,
    FaissIndex,
    Int8Matrix,
    StoredSet,
    empty_ids,
    ids_starting,
    quantize,
)
from repoctx.store.memory_bm25 import MemoryBM25, MemoryReads
from repoctx.types import Capsule, Edge, UnitHead, UnitSpan

if TYPE_CHECKING:
    from repoctx.store.grep import GrepPlan

# BM25 column weights: name, qualname, path, signature, docstring, body
BM25_WEIGHTS = tuple(map(float, postings.WEIGHTS))

# grep's texts (schema 4): each indexed file's text once per repository and content, and a contentless FTS5
# trigram index over it (detail=none: which texts hold a trigram, not where; the regular expression confirms).
# Contentless, so the text is not stored twice; a row leaves it by 'delete' with its text. Schema 7 (issue 39)
# keeps the text zstd-compressed (``z``, level 3, UTF-8 inside): Django's 22.0 MiB of texts take 5.7 MiB, and
# inflating all of them costs a full-scan grep ~0.07 s (zlib, tried in schema 4, cost 0.17 s of a ~0.5 s scan).
_ZSTD_LEVEL = 5  # (schema 9: Django's texts 5.74 -> 5.42 MiB; a parse worker compresses when the writer is behind)
# A text's trigrams go into text_fts when the writer has nothing else to do: a cold update's writer waits for its parse
# worker now and then (Django: ~1.2 s of ~9), and the trigram tokenizer is ~1.4 s of its work. Kept texts wait in
# memory up to this many characters (then the oldest go in at once), are indexed this many at a time while the writer
# waits, and every one before the commit.
_TRIGRAM_DEFERRED = 8 << 20
_TRIGRAM_STEP = 64 << 10
# the edges' indexes: a transaction that writes the first edges of the file builds them once at its end, after
# its inserts (Django's 234k edges: 0.57 -> 0.40 s), instead of keeping them up to date row by row
_EDGE_INDEXES = {
    "edges_dst": "CREATE INDEX IF NOT EXISTS edges_dst ON edges(dst) WHERE dst IS NOT NULL",
    "edges_name": "CREATE INDEX IF NOT EXISTS edges_name ON edges(name) WHERE name IS NOT NULL",
}
_TEXT_SCHEMA = (
    "CREATE TABLE IF NOT EXISTS texts(id INTEGER PRIMARY KEY, repo TEXT NOT NULL, hash TEXT NOT NULL, "
    "z BLOB NOT NULL, UNIQUE(repo, hash))",
    "CREATE VIRTUAL TABLE IF NOT EXISTS text_fts USING fts5(text, content='', tokenize='trigram', detail='none')",
    "CREATE INDEX IF NOT EXISTS files_text ON files(repo, text_hash)",
)


# Schema 5 (issue 39: Django's sdist took 252 MiB, 109 MiB of it edges and their four indexes, 38 MiB FTS5's own
# copy of the text). Edges are four integers: the source and target units' rowids (a unit keeps its rowid when its
# file is written again, so edges from other files stay pointed), the kind's position in EDGE_KINDS and the
# referenced name's id in ``names`` (each name once, with its key for re-resolution; none for 'contains', whose
# name is the target's qualname). The unit's repository and path are the source's. FTS5 is contentless: a row
# leaves it by 'delete' with the tokens it was given, made again from the unit (a class's lexical body, when not
# its text, is kept in ``lex``). A unit whose text is a slice of its file's text (grep's ``texts`` row ``tid``)
# keeps no copy: ``text`` is NULL and (``at``, ``span``) say where it is (schema 6). Rowids are AUTOINCREMENT: a
# rowid once freed is never given to another unit, so an edge still naming a deleted unit (until re-resolution
# moves it) can never reach the wrong one. Schema 7 stores no part of a unit that its row already says: ``id`` and
# ``parent`` are made on read (schema 8: by the view ``capsules``), "repo:path#" and the rest, which is the qualname
# unless ``id_tail`` says otherwise (``id_whole`` and ``parent_whole`` hold an id not of that form); a hexadecimal
# content hash is kept as its bytes (pack_hash); a unit's module is its file's (schema 8: so is its language, unless
# ``units.language`` says otherwise); a JSON list with nothing in it is NULL. Units are found
# by id through ``idh``, a hash of the id (an index of the ids themselves took 4.8 MiB of Django's index): a lookup
# tests both, ``_id_in``. Edges are looked up by target and by name only for a value (``dst IN``,
# ``name IN``): their indexes leave out the unresolved edges (42% of Django's) and the 'contains' ones (19%).
# Schema 8 keeps a signature or docstring found in the unit's text as its position there (slice_code: the columns
# have no type affinity, so an integer stays one) and a method's ``parent_tail`` as the length of the qualname's
# prefix it is, a class's lexical body (``lex``) as the runs of its text's lines it keeps (lines_code): Django's
# units' table 15.6 -> 10.8 MiB, every unit read back the same. Edges are clustered by
# their source (WITHOUT ROWID, keyed (src, seq)): no index of sources (2.9 MiB of Django's); ``seq`` numbers them in
# the order they were written, the order edges to one unit are read in (graph neighbours of equal score rank so).
# A unit names its file's row (``fid``; ``files.fid`` is an INTEGER PRIMARY KEY, so VACUUM keeps it): one file's
# units are found by that small index instead of one of (repo, path) (2.9 MiB of Django's, now 0.55). The units'
# table (``units``) keeps no repository or path either (2.2 MiB of Django's): ``capsules`` is a view joining each
# unit to its file's row, with the columns and the generated ``id`` and ``parent`` the table had; reads go through
# it (SQLite flattens it into each query), writes go to ``units``. Ids, names and
# qualnames are indexed by 32-bit hashes (id_hash; a lookup tests the value too): 0.6 MiB each instead of 0.85, 1.3
# and 2.4.
def _unit_id(u: str, f: str) -> str:
    """A unit's id, made from its row (alias ``u``, of ``units``) and its file's (``f``)."""
    return f"coalesce({u}.id_whole, {f}.repo || ':' || {f}.path || '#' || coalesce({u}.id_tail, {u}.qualname))"


# a unit's kind as stored: its position here (the commonest first: 0 and 1 take no byte in a row), else its name
UNIT_KINDS = ("method", "class", "window", "module", "function")
_UNIT_KIND = {k: i for i, k in enumerate(UNIT_KINDS)}


def _unit_kind(u: str) -> str:
    whens = " ".join(f"WHEN {i} THEN '{k}'" for i, k in enumerate(UNIT_KINDS))
    return f"CASE typeof({u}.kind) WHEN 'integer' THEN CASE {u}.kind {whens} END ELSE {u}.kind END"


# a name's key (what resolves it: its last parts) is the name's tail: kept as that tail's length (schema 9: Django's
# names table 1.2 -> 0.9 MiB), indexed as the expression
_NAME_KEY = "(CASE typeof(key) WHEN 'integer' THEN substr(name, length(name) - key + 1) ELSE key END)"


def _unit_name(u: str) -> str:
    """A unit's name: stored as the length of the qualname's tail it is (schema 9: most are; Django's names took
    0.8 MiB), else as text."""
    return (
        f"CASE typeof({u}.name) WHEN 'integer' THEN substr({u}.qualname, length({u}.qualname) - {u}.name + 1) "
        f"ELSE {u}.name END"
    )


def _tail_code(whole: str, tail: str) -> str | int:
    """``tail`` as stored beside ``whole``: its length when it ends ``whole`` (``_unit_name``, ``_NAME_KEY``)."""
    return len(tail) if whole.endswith(tail) else tail


def _unit_parent(u: str, f: str) -> str:
    return (
        f"coalesce({u}.parent_whole, {f}.repo || ':' || {f}.path || '#' || CASE WHEN typeof({u}.parent_tail) = "
        f"'integer' THEN substr({u}.qualname, 1, {u}.parent_tail) ELSE {u}.parent_tail END)"
    )


# a repository's mined git history (repoctx.history): its stamp (the history's first line) and its zlib'd file. Added
# within schema 9: an index made before has it made when a history is first kept, and reads none until then
_HISTORY_TABLE = "CREATE TABLE IF NOT EXISTS history(repo TEXT PRIMARY KEY, stamp TEXT NOT NULL, body BLOB NOT NULL)"

_SCHEMA = (
    """
CREATE TABLE IF NOT EXISTS meta(repo TEXT NOT NULL, key TEXT NOT NULL, value TEXT, PRIMARY KEY(repo, key));
CREATE TABLE IF NOT EXISTS repos(name TEXT PRIMARY KEY, root TEXT, created REAL);
CREATE TABLE IF NOT EXISTS files(
  fid INTEGER PRIMARY KEY, repo TEXT NOT NULL, path TEXT NOT NULL, language TEXT, size INTEGER, mtime_ns INTEGER,
  hash TEXT, module TEXT, imports TEXT, method TEXT, note TEXT, text_hash TEXT, UNIQUE(repo, path));
CREATE TABLE IF NOT EXISTS units(
  rowid INTEGER PRIMARY KEY AUTOINCREMENT, fid INTEGER NOT NULL, language TEXT,
  kind, name, qualname TEXT, signature, params TEXT, returns TEXT, docstring, decorators TEXT,
  start_line INTEGER, end_line INTEGER, text TEXT, content_hash TEXT, lex TEXT,
  tid INTEGER, at INTEGER, span INTEGER, id_tail TEXT, id_whole TEXT, parent_tail, parent_whole TEXT,
  idh INTEGER NOT NULL, nh INTEGER NOT NULL, qh INTEGER NOT NULL);
CREATE INDEX IF NOT EXISTS capsules_idh ON units(idh);
CREATE INDEX IF NOT EXISTS capsules_fid ON units(fid);
CREATE INDEX IF NOT EXISTS capsules_name ON units(nh);
CREATE INDEX IF NOT EXISTS capsules_qualname ON units(qh);
CREATE VIEW IF NOT EXISTS capsules AS SELECT u.rowid AS rowid, f.repo AS repo, f.path AS path, u.fid AS fid,
  coalesce(u.language, f.language) AS language, """
    + _unit_kind("u")
    + """ AS kind, """
    + _unit_name("u")
    + """ AS name, u.qualname AS qualname,
  u.signature AS signature, u.params AS params, u.returns AS returns, u.docstring AS docstring,
  u.decorators AS decorators, u.start_line AS start_line, u.end_line AS end_line, u.text AS text,
  u.content_hash AS content_hash, f.module AS module, u.lex AS lex, u.tid AS tid, u.at AS at, u.span AS span,
  u.id_tail AS id_tail, u.id_whole AS id_whole, u.parent_tail AS parent_tail, u.parent_whole AS parent_whole,
  u.idh AS idh, u.nh AS nh, u.qh AS qh,
  """
    + _unit_id("u", "f")
    + """ AS id, """
    + _unit_parent("u", "f")
    + """ AS parent
  FROM units u JOIN files f ON f.fid = u.fid;
CREATE TABLE IF NOT EXISTS names(id INTEGER PRIMARY KEY, name TEXT NOT NULL, key NOT NULL, h INTEGER NOT NULL);
CREATE INDEX IF NOT EXISTS names_h ON names(h);
CREATE INDEX IF NOT EXISTS names_key ON names("""
    + _NAME_KEY
    + """);
CREATE TABLE IF NOT EXISTS edges(
  src INTEGER NOT NULL, seq INTEGER NOT NULL, kind INTEGER NOT NULL, name INTEGER, dst INTEGER, PRIMARY KEY(src, seq)
) WITHOUT ROWID;
"""
    + "\n".join(f"{stmt};" for stmt in _EDGE_INDEXES.values())
    + """
"""
    + "\n".join(f"{stmt};" for stmt in (*postings.SCHEMA, *_TEXT_SCHEMA, _HISTORY_TABLE))
)

# this file's layout (base.SCHEMA_VERSION was 4: grep's texts); an older index is rebuilt. Schema 9: the lexical
# index is postings.py's, not FTS5's (Django's index 50.1 -> ~40 MiB)
SCHEMA_VERSION = 9

# an edge's kind by its position: alphabetical, so ordering by the stored integer orders by the name
EDGE_KINDS = ("calls", "contains", "imports", "inherits")
_KIND = {k: i for i, k in enumerate(EDGE_KINDS)}
_CONTAINS = _KIND["contains"]
# an edge as the Store interface speaks it: (src id, kind, dst_name, dst id), and (e.src, e.seq), e.dst for writers
_EDGE_FROM = (
    "FROM edges e JOIN capsules s ON s.rowid = e.src LEFT JOIN names n ON n.id = e.name "
    "LEFT JOIN units d ON d.rowid = e.dst LEFT JOIN files df ON df.fid = d.fid"
)  # the target by the tables, not the view: a join as the right side of a LEFT JOIN is not flattened but built whole
_D_ID = _unit_id("d", "df")
_EDGE_COLS = f"s.id, e.kind, coalesce(n.name, d.qualname), {_D_ID}"

# a file's units, by their file's row (``?``: the repository, the path)
_OF_FILE = "fid = (SELECT fid FROM files WHERE repo=? AND path=?)"
_UNITS_SEQ = "SELECT seq FROM sqlite_sequence WHERE name = 'units'"
# what put_file rewrites of a unit kept in place: every column but those the indexes read (idh, fid, nh, qh)
_UNIT_SET = ", ".join(
    f"{c}=?"
    for c in (
        "language kind name qualname signature params returns docstring decorators start_line end_line text "
        "content_hash lex tid at span id_tail id_whole parent_tail parent_whole"
    ).split()
)
# before ``repo=?`` in a query that also names units by id (``_id_in``): SQLite's planner otherwise walks every unit of
# the repository's files (Django: 25-35 ms a query, three in a one-file update) rather than the few ids' (0.1 ms)
_NOT_BY_REPO = "+"

_COLS = (
    "c.id, c.repo, c.path, c.language, c.kind, c.name, c.qualname, c.signature, c.params, c.returns, "
    "c.docstring, c.decorators, c.start_line, c.end_line, c.text, c.content_hash, c.parent, c.tid, c.at, c.span"
)
HEAD_COLS = "c.id, c.path, c.language, c.kind, c.qualname"  # a UnitHead (both backends: their capsules views agree)
_TEXT_AT = 14  # where _COLS has the text; the slice's three columns follow the row's 17 others
_SLICED = (7, 10)  # where _COLS has the signature and the docstring (slice_code)


def _json_list(value: str | None) -> list:
    return json.loads(value) if value and value != "[]" else []  # most units have no decorators, many no params


def row_to_capsule(r) -> Capsule:
    return Capsule(
        id=r[0],
        repo=r[1] or "",
        path=r[2],
        language=r[3],
        kind=r[4],
        name=r[5],
        qualname=r[6],
        signature=r[7],
        params=_json_list(r[8]),
        returns=r[9] or "",
        docstring=r[10] or "",
        decorators=_json_list(r[11]),
        start_line=r[12],
        end_line=r[13],
        text=r[14],
        content_hash=r[15].hex() if isinstance(r[15], bytes) else r[15],  # hash_text, for a row of Any
        parent=r[16],
    )


def inflater() -> Callable[[bytes], str]:
    """A function from a ``texts.z`` value to its text (a decompressor per caller: they are not thread-safe)."""
    import zstandard

    decompress = zstandard.ZstdDecompressor().decompress
    return lambda z: decompress(z).decode()


def deflater() -> Callable[[str], bytes]:
    """The inverse of :func:`inflater` (the frame records its size, which the decompressor needs)."""
    import zstandard

    compress = zstandard.ZstdCompressor(level=_ZSTD_LEVEL).compress
    return lambda text: compress(text.encode())


def slice_code(value: str, text: str | None) -> str | int:
    """A unit's signature or docstring as stored (schema 8): where it sits in the unit's own text, as one integer
    (offset << 24 | length), when it is a part of it (Django: 42k of 48k signatures, 1.9 MiB of them, and every
    non-empty docstring); else the string itself (a short one is no longer than its code)."""
    if len(value) < 8 or len(value) >= 1 << 24 or not text:
        return value
    at = text.find(value)
    return (at << 24) | len(value) if at >= 0 else value


def unslice(value: str | int | None, text: str | None) -> str | None:
    """The inverse of :func:`slice_code`, given the unit's text."""
    if isinstance(value, int):
        at = value >> 24
        return (text or "")[at : at + (value & 0xFFFFFF)]
    return value


def with_texts(db: sqlite3.Connection, rows: list, text_at: int, sliced: tuple[int, ...] = ()) -> list:
    """Rows whose text is NULL given their text back: sliced from their file's, named by the row's last three
    columns (tid, at, span), which are dropped. Each file's text is read once. ``sliced``: the positions of
    columns kept as :func:`slice_code` of that text (a signature, a docstring), given back as strings."""
    want = sorted({r[-3] for r in rows if r[text_at] is None and r[-3] is not None})
    texts: dict[int, str] = {}
    inflate = inflater() if want else None
    for chunk in _chunks(want):
        assert inflate is not None
        texts.update(
            (tid, inflate(z))
            for tid, z in db.execute(f"SELECT id, z FROM texts WHERE id IN ({_ph(len(chunk))})", chunk)
        )
    out = []
    for r in rows:
        r = tuple(r)
        if r[text_at] is None and r[-3] is not None:
            whole = texts.get(r[-3], "")
            r = r[:text_at] + (whole[r[-2] : r[-2] + r[-1]],) + r[text_at + 1 :]
        if sliced and any(isinstance(r[i], int) for i in sliced):
            r = tuple(unslice(v, r[text_at]) if i in sliced else v for i, v in enumerate(r))
        out.append(r[:-3])
    return out


def text_slices(text: str, capsules: list[Capsule]) -> list[tuple[int, int] | None]:
    """Where each unit's text sits in its file's text, looked for from the start of its first line (a method
    starts at its indent, a window mid-line); None where it is not one slice (a Python module's top-level code)."""
    starts = [0]
    pos = text.find("\n")
    while pos >= 0:
        starts.append(pos + 1)
        pos = text.find("\n", pos + 1)
    out: list[tuple[int, int] | None] = []
    for c in capsules:
        body = c.text or ""
        line = (c.start_line or 1) - 1
        if not body or not 0 <= line < len(starts):
            out.append(None)
            continue
        begin = starts[line]
        end_of_line = starts[line + 1] if line + 1 < len(starts) else len(text)
        at = text.find(body, begin, end_of_line + len(body))
        out.append((at, len(body)) if at >= 0 else None)
    return out


def _tail(unit_id: str, prefix: str | None) -> tuple[str | None, str | None]:
    """(what follows ``prefix``, None) for an id that begins with it, else (None, the id)."""
    if prefix is not None and unit_id.startswith(prefix):
        return unit_id[len(prefix) :], None
    return None, unit_id


def lines_code(lex: str, text: str | None) -> str | bytes:
    """A class's lexical body as stored: when its lines are some of its text's, in order (a class's own lines, its
    members' bodies left out), the runs of those lines' numbers, ``b"0-3,9-9"`` (Django: 1.8 MiB of bodies); else
    the body itself."""
    if not text:
        return lex
    lines, i = text.split("\n"), 0
    runs: list[list[int]] = []
    for line in lex.split("\n"):
        try:
            i = lines.index(line, i)
        except ValueError:
            return lex
        if runs and runs[-1][1] == i - 1:
            runs[-1][1] = i
        else:
            runs.append([i, i])
        i += 1
    code = ",".join(f"{a}-{b}" for a, b in runs).encode()
    return code if len(code) < len(lex) else lex


def unlines(stored: str | bytes, text: str | None) -> str:
    """The inverse of :func:`lines_code`, given the unit's text."""
    if not isinstance(stored, bytes):
        return stored
    lines = (text or "").split("\n")
    out = []
    for run in stored.decode().split(","):
        a, b = run.split("-")
        out += lines[int(a) : int(b) + 1]
    return "\n".join(out)


def _parent_code(tail: str | None, qualname: str | None) -> str | int | None:
    """``parent_tail`` as stored: the length of the qualname's prefix it is (a method's class), else itself."""
    if tail and qualname and qualname.startswith(tail) and qualname[len(tail) : len(tail) + 1] == ".":
        return len(tail)
    return tail


def pack_hash(content_hash: str | None) -> str | bytes | None:
    """A unit's content hash as stored: lower-case hexadecimal as its bytes (half the size), anything else as is."""
    if content_hash and len(content_hash) % 2 == 0 and content_hash == content_hash.lower():
        try:
            return bytes.fromhex(content_hash)
        except ValueError:
            pass
    return content_hash


def hash_text(stored: str | bytes | None) -> str | None:
    """The inverse of :func:`pack_hash`."""
    return stored.hex() if isinstance(stored, bytes) else stored


# ``capsules.idh``, ``nh``, ``qh``: a signed 32-bit hash of a unit's id, name or qualname (CRC-32: stable across
# processes, unlike ``hash``, and four bytes in a row and in its index, where the strings took 4.8 MiB (ids), 2.4
# (qualnames) and 1.3 (names) of Django's index). A lookup tests the value too: a collision costs a row read. The
# lexical index keys its terms by the same hash.
id_hash = postings.term_key


def _id_in(ids: list[str], alias: str = "", col: str = "id", hashed: str = "idh") -> tuple[str, list]:
    """A WHERE test for units whose ``col`` (id, name or qualname) is one of ``ids`` (at most 500), by the hash
    index ``hashed``, and its arguments."""
    a = f"{alias}." if alias else ""
    return f"{a}{hashed} IN ({_ph(len(ids))}) AND {a}{col} IN ({_ph(len(ids))})", [id_hash(i) for i in ids] + ids


def _ph(n: int) -> str:
    return ",".join("?" * n)


def _chunks(values: list, size: int = 500) -> Iterator[list]:
    for i in range(0, len(values), size):
        yield values[i : i + size]


class SQLiteStore(MemoryReads):
    """``SQLiteStore(dir / "index.sqlite")``; opening never creates a missing index unless ``create``."""

    backend = "sqlite"

    def __init__(self, path: Path, create: bool = True, memory_lexical: bool = False):
        self.path = Path(path)
        self.dir = self.path.parent
        if not create and not self.path.exists():
            raise StoreError(f"no index at {self.path}")
        if create:
            self.dir.mkdir(parents=True, exist_ok=True)
        self._local = threading.local()
        self._conns: list[sqlite3.Connection] = []
        self._conns_lock = threading.Lock()
        self._faiss: dict[str, FaissIndex] = {}
        self._allowed: dict[tuple, set[str]] = {}
        self._init_memory(memory_lexical)  # long-lived processes: BM25 and units in memory (memory_bm25.py)
        db = self.db
        self._identity = self._file_identity()
        version = self._schema_version(db)
        if version is None:
            if not create:
                raise StoreError(f"no index at {self.path}")
            db.executescript(_SCHEMA)
            db.execute("INSERT OR REPLACE INTO meta VALUES('', 'schema_version', ?)", (str(SCHEMA_VERSION),))
        elif version != SCHEMA_VERSION:
            if not create:
                raise SchemaMismatch(
                    f"the index at {self.dir} was built by another repoctx version (schema {version}, "
                    f"this one reads {SCHEMA_VERSION}): run `repoctx index` to rebuild it"
                )
            self._rebuild_schema(db)

    # ---- connections: one per thread (sqlite3 objects must not be shared across threads)
    @property
    def db(self) -> sqlite3.Connection:
        conn = getattr(self._local, "conn", None)
        if conn is None:
            conn = sqlite3.connect(str(self.path), timeout=30, isolation_level=None, check_same_thread=False)
            conn.execute("PRAGMA journal_mode=WAL")
            conn.execute("PRAGMA synchronous=NORMAL")
            conn.execute("PRAGMA busy_timeout=30000")
            conn.execute(f"PRAGMA cache_size=-{self.READ_CACHE_KIB}")
            conn.execute("PRAGMA temp_store=MEMORY")
            self._local.conn = conn
            with self._conns_lock:
                self._conns.append(conn)
        return conn

    def _file_identity(self) -> tuple[int, int] | None:
        try:
            st = self.path.stat()
        except OSError:
            return None
        return st.st_dev, st.st_ino

    def check_present(self) -> None:
        """Raise when the index file was deleted or replaced under this open store: SQLite would go on
        reading and writing the unlinked file, and nothing would be saved."""
        if self._identity is None or self._file_identity() != self._identity:
            raise StoreError(
                f"the index at {self.dir} was removed while it was open: run `repoctx index` to rebuild it"
            )

    @staticmethod
    def _schema_version(db) -> int | None:
        tables = {r[0] for r in db.execute("SELECT name FROM sqlite_master WHERE type='table'")}
        if "meta" not in tables:
            return None
        cols = [r[1] for r in db.execute("PRAGMA table_info(meta)")]
        if "repo" not in cols:  # schema 1 kept (key, value)
            return 1
        r = db.execute("SELECT value FROM meta WHERE repo='' AND key='schema_version'").fetchone()
        return int(r[0]) if r else 1

    def _rebuild_schema(self, db) -> None:
        """An index is derived data: an older layout is dropped and rebuilt by the next update."""
        db.execute("BEGIN IMMEDIATE")
        try:
            for (name,) in db.execute("SELECT name FROM sqlite_master WHERE type='view'").fetchall():
                db.execute(f"DROP VIEW IF EXISTS {name}")
            # virtual tables first: dropping one drops its shadow tables (which may not be dropped alone)
            for (name,) in db.execute(
                "SELECT name FROM sqlite_master WHERE type='table' AND sql LIKE 'CREATE VIRTUAL%' "
                "AND name NOT LIKE 'fts\\_%' ESCAPE '\\'"
            ).fetchall():
                db.execute(f"DROP TABLE IF EXISTS {name}")
            for (name,) in db.execute(
                "SELECT name FROM sqlite_master WHERE type='table' AND name NOT LIKE 'sqlite_%' "
                "AND name NOT LIKE 'fts_%'"
            ).fetchall():
                db.execute(f"DROP TABLE IF EXISTS {name}")
            db.execute("COMMIT")
        except BaseException:
            if db.in_transaction:
                db.execute("ROLLBACK")
            raise
        # the dropped tables' pages would stay in the file as free pages (a schema 7 index of Django rebuilt as
        # schema 8 kept its 65.7 MiB, 14 MiB of them free); emptied, the file is copied in a moment
        try:
            db.execute("VACUUM")
        except sqlite3.OperationalError:  # another connection mid-read: the file keeps its free pages
            pass
        db.executescript(_SCHEMA)
        db.execute("INSERT OR REPLACE INTO meta VALUES('', 'schema_version', ?)", (str(SCHEMA_VERSION),))

    # SQLite's page cache per connection, in KiB: searches keep pages read; a write transaction (a cold build writes
    # ~70 MiB of pages in one) spills its dirty pages to the WAL past a smaller one: Django's cold build peaks at
    # 235 MiB RSS instead of 279 and costs ~0.4 s more CPU (17.4 s user instead of 17.0, medians of 3, load 3-4)
    READ_CACHE_KIB = 65536
    WRITE_CACHE_KIB = 8192

    WAL_KEEP = 16 << 20  # a write-ahead log larger than this is checkpointed and truncated after a write

    def shrink_wal(self) -> bool:
        """After a large write (a cold build is one transaction: Django's left a 101 MiB WAL beside a 93 MiB
        index), copy the WAL into the database and truncate it. Never waits: with a reader in the middle of a read
        the checkpoint is skipped (busy) and a later write tries again. True when the log was truncated."""
        wal = self.path.with_name(self.path.name + "-wal")
        try:
            if wal.stat().st_size <= self.WAL_KEEP:
                return False
        except OSError:
            return False
        db = self.db
        db.execute("PRAGMA busy_timeout=0")
        try:
            busy = db.execute("PRAGMA wal_checkpoint(TRUNCATE)").fetchone()[0]
        except sqlite3.OperationalError:  # locked by another writer: the next write tries again
            busy = 1
        finally:
            db.execute("PRAGMA busy_timeout=30000")
        return not busy

    def release_memory(self) -> None:
        """This connection's page cache, up to 64 MiB after a large write (readers fill it again as they read)."""
        try:
            self.db.execute("PRAGMA shrink_memory")
        except sqlite3.Error:
            pass

    def close(self) -> None:
        with self._conns_lock:
            for conn in self._conns:
                try:
                    conn.close()
                except sqlite3.Error:
                    pass
            self._conns.clear()
        self._local = threading.local()

    def _scope(self, scope: Scope, alias: str = "c", path_col: str = "path") -> tuple[str, list]:
        # "+repo": the repository test must not steer SQLite to a (repo, ...) index; the id, name and
        # FTS lookups it sits beside are the selective ones (with it, capsules-by-id scanned a whole repo)
        return scope.compile(f"+{alias}.repo", f"{alias}.{path_col}", "?", "sqlite")

    # ---- repositories
    def register_repo(self, name: str, root: str) -> RepoRecord:
        check_repo_name(name)
        db = self.db
        row = db.execute("SELECT name, root, created FROM repos WHERE name=?", (name,)).fetchone()
        if row is None:
            db.execute("INSERT INTO repos VALUES(?,?,?)", (name, root, time.time()))
        elif row[1] != root:
            db.execute("UPDATE repos SET root=? WHERE name=?", (root, name))
        rec = self.repo(name)
        if rec is None:  # dropped by another process in between
            raise StoreError(f"repository {name!r} was dropped while it was being registered")
        return rec

    def drop_repo(self, name: str) -> None:
        w = self.writer(name)
        with w.transaction():
            w.clear()
            self.db.execute("DELETE FROM meta WHERE repo=?", (name,))
            self.db.execute("DELETE FROM repos WHERE name=?", (name,))
            self._drop_history(name)

    # ---- the repositories' mined git histories (``_HISTORY_TABLE``)
    def history(self, repo: str, known: str | None = None) -> tuple[str, bytes | None] | None:
        rows = self._on_history(
            "SELECT stamp, CASE WHEN stamp IS ? THEN NULL ELSE body END FROM history WHERE repo=?", (known, repo)
        )
        return (rows[0][0], rows[0][1]) if rows else None

    def put_history(self, repo: str, stamp: str, body: bytes) -> None:
        self.db.execute(_HISTORY_TABLE)
        self.db.execute("INSERT OR REPLACE INTO history(repo, stamp, body) VALUES(?,?,?)", (repo, stamp, body))

    def _drop_history(self, repo: str) -> None:
        self._on_history("DELETE FROM history WHERE repo=?", (repo,))

    def _on_history(self, sql: str, args: tuple) -> list[tuple]:
        """``sql`` on the history table; no rows when the index predates it (made by the first ``put_history``)."""
        try:
            return self.db.execute(sql, args).fetchall()
        except sqlite3.OperationalError as e:
            if "no such table" in str(e):
                return []
            raise

    def repo(self, name: str) -> RepoRecord | None:
        row = self.db.execute("SELECT name, root, created FROM repos WHERE name=?", (name,)).fetchone()
        if row is None:
            return None
        meta = dict(self.db.execute("SELECT key, value FROM meta WHERE repo=?", (name,)).fetchall())
        return RepoRecord(row[0], row[1], row[2], meta)

    def repos(self, scope: Scope = EVERYTHING) -> list[RepoRecord]:
        # a repository dropped between the two reads is left out, not listed as None
        names = [r[0] for r in self.db.execute("SELECT name FROM repos ORDER BY name")]
        return [r for n in names if scope.allows_repo(n) and (r := self.repo(n)) is not None]

    def repo_by_root(self, root: str) -> RepoRecord | None:
        row = self.db.execute("SELECT name FROM repos WHERE root=? ORDER BY created LIMIT 1", (root,)).fetchone()
        return self.repo(row[0]) if row else None

    def writer(self, repo: str) -> SQLiteRepoWriter:
        return SQLiteRepoWriter(self, check_repo_name(repo))

    # ---- reads
    def meta(self, key: str, repo: str = "") -> str | None:
        r = self.db.execute("SELECT value FROM meta WHERE repo=? AND key=?", (repo, key)).fetchone()
        return r[0] if r else None

    def paths(self, scope: Scope = EVERYTHING) -> list[tuple[str, str]]:
        where, args = self._scope(scope, "f")
        return [
            tuple(r)
            for r in self.db.execute(f"SELECT f.repo, f.path FROM files f WHERE {where} ORDER BY f.repo, f.path", args)
        ]

    def counts(self, scope: Scope = EVERYTHING) -> dict[str, int]:
        db = self.db
        own = not db.in_transaction  # one snapshot: another repository written meanwhile is in none of the counts
        if own:
            db.execute("BEGIN")
        try:
            # the same numbers without joining every edge to its unit (Django: ~0.1 s)
            if self._admits_whole_file(scope):
                scope = EVERYTHING
            where, args = self._scope(scope)
            fwhere, fargs = self._scope(scope, "f")
            ewhere, eargs = self._scope(scope, "s")  # an edge is where its source unit is
            q = lambda sql, a: db.execute(sql, a).fetchone()[0]  # noqa: E731
            edges = "edges e JOIN capsules s ON s.rowid = e.src" if not scope.unrestricted else "edges e"
            return {
                "files": q(f"SELECT count(*) FROM files f WHERE {fwhere}", fargs),
                "capsules": q(f"SELECT count(*) FROM capsules c WHERE {where}", args),
                "edges": q(f"SELECT count(*) FROM {edges} WHERE {ewhere}", eargs),
                "resolved_edges": q(f"SELECT count(*) FROM {edges} WHERE e.dst IS NOT NULL AND {ewhere}", eargs),
            }
        finally:
            if own:
                db.execute("COMMIT")

    def capsules(self, ids: list[str], scope: Scope = EVERYTHING) -> list[Capsule]:
        if not ids:
            return []
        remembered = self._memory_capsules(ids, scope)
        if remembered is not None:
            return remembered
        where, args = self._scope(scope)
        out: dict[str, Capsule] = {}
        for chunk in _chunks(list(dict.fromkeys(ids))):
            by_id, id_args = _id_in(chunk, "c")
            for r in with_texts(
                self.db,
                self.db.execute(f"SELECT {_COLS} FROM capsules c WHERE {by_id} AND {where}", id_args + args).fetchall(),
                _TEXT_AT,
                _SLICED,
            ):
                out[r[0]] = row_to_capsule(r)
        return [out[i] for i in ids if i in out]

    def _read_heads(self, ids: list[str], scope: Scope) -> dict[str, UnitHead]:
        where, args = self._scope(scope)
        out: dict[str, UnitHead] = {}
        for chunk in _chunks(list(dict.fromkeys(ids))):
            by_id, id_args = _id_in(chunk, "c")
            sql = f"SELECT {HEAD_COLS} FROM capsules c WHERE {by_id} AND {where}"
            out.update((r[0], UnitHead(*r)) for r in self.db.execute(sql, id_args + args))
        return out

    def all_capsules(self, scope: Scope = EVERYTHING) -> list[Capsule]:
        where, args = self._scope(scope)
        return [
            row_to_capsule(r)
            for r in with_texts(
                self.db,
                self.db.execute(f"SELECT {_COLS} FROM capsules c WHERE {where} ORDER BY c.id", args).fetchall(),
                _TEXT_AT,
                _SLICED,
            )
        ]

    def all_edges(self, scope: Scope = EVERYTHING) -> list[tuple]:
        where, args = self._scope(scope, "s")
        return [
            (r[0], EDGE_KINDS[r[1]], r[2], r[3])
            for r in self.db.execute(f"SELECT {_EDGE_COLS} {_EDGE_FROM} WHERE {where} ORDER BY 1, 2, 3, 4", args)
        ]

    def file_spans(self, repo: str, path: str, scope: Scope = EVERYTHING) -> list[UnitSpan]:
        where, args = self._scope(scope)
        return [
            UnitSpan(*r)
            for r in self.db.execute(
                f"SELECT c.id, c.name, c.kind, c.start_line, c.end_line FROM capsules c WHERE c.{_OF_FILE} AND {where} "
                "ORDER BY c.start_line, c.end_line DESC",
                [repo, path] + args,
            ).fetchall()
        ]

    def file_capsules(self, repo: str, path: str, scope: Scope = EVERYTHING) -> list[Capsule]:
        where, args = self._scope(scope)
        return [
            row_to_capsule(r)
            for r in with_texts(
                self.db,
                self.db.execute(
                    f"SELECT {_COLS} FROM capsules c WHERE c.{_OF_FILE} AND {where} "
                    "ORDER BY c.start_line, c.end_line DESC",
                    [repo, path] + args,
                ).fetchall(),
                _TEXT_AT,
                _SLICED,
            )
        ]

    def doc_freqs(self, terms: list[str], scope: Scope = EVERYTHING) -> dict[str, int]:
        """Over the whole file (the postings are the store's): a store of one repository, as each repository's
        default index is, gives that repository's own statistics."""
        remembered = self._memory_doc_freqs(terms, scope)
        if remembered is not None:
            return remembered
        return {t: row.n for t, row in postings.read_terms(self.db, terms, blobs=False).items() if row.n}

    def n_capsules(self, scope: Scope = EVERYTHING) -> int:
        return self.db.execute("SELECT count(*) FROM units").fetchone()[0]

    def lexical(self, terms: list[str], k: int, scope: Scope = EVERYTHING) -> list[tuple[str, float]]:
        """BM25 over code tokens; terms are already tokenised. Higher score is better."""
        terms = [t for t in dict.fromkeys(terms) if t]
        if not terms or k <= 0:
            return []
        remembered = self._memory_lexical(terms, k, scope)
        if remembered is not None:
            return remembered
        db = self.db
        own = not db.in_transaction  # (a caller's transaction is the snapshot already)
        if own:
            db.execute("BEGIN")  # one snapshot: the postings, the lengths and the totals agree
        try:
            rowids, scores = self._score_postings(db, postings.query_terms(terms))
            if not len(rowids):
                return []
            order = np.lexsort((rowids, -scores))  # best first, ties by rowid
            if self._admits_whole_file(scope):  # the repositories as this snapshot holds them
                top = order[:k]
            else:
                top = self._first_admitted(rowids, order, k, scope)
            ids = self._ids_of_rowids(rowids[top].tolist())
        finally:
            if own:
                db.execute("COMMIT")
        return [(ids[r], s) for r, s in zip(rowids[top].tolist(), scores[top].tolist(), strict=True) if r in ids]

    @staticmethod
    def _score_postings(
        db: sqlite3.Connection, asked: list[tuple[str, tuple[str, ...]]]
    ) -> tuple[np.ndarray, np.ndarray]:
        """(rowids, scores) of the units matching any asked term (``postings.score``)."""
        found = postings.read_terms(db, {w for _, words in asked for w in words})
        held = [w for w, row in found.items() if row.n]
        if not held:
            return np.zeros(0, dtype=np.int64), np.zeros(0)
        which, rowids, wtf = postings.unpack_many([found[w].p or b"" for w in held], [found[w].n for w in held])
        spans = np.searchsorted(which, np.arange(len(held) + 1))
        by_word = {w: (rowids[spans[i] : spans[i + 1]], wtf[spans[i] : spans[i + 1]]) for i, w in enumerate(held)}
        n_docs, n_tokens = postings.stats(db)
        return postings.score(
            asked,
            by_word,
            n_docs,
            n_tokens / n_docs if n_docs else 1.0,
            lambda units: postings.lengths_of(postings.read_lengths(db, units), units),
        )

    def _first_admitted(self, rowids: np.ndarray, order: np.ndarray, k: int, scope: Scope) -> np.ndarray:
        """The first ``k`` positions of ``order`` whose units ``scope`` admits (its WHERE clause)."""
        where, args = self._scope(scope)
        sql = f"SELECT c.rowid FROM capsules c WHERE c.rowid IN ({{}}) AND {where}"
        return postings.first_admitted(
            rowids, order, k, lambda chunk: {r[0] for r in postings.rows_in(self.db, sql, chunk, args)}
        )

    def _ids_of_rowids(self, rowids: list[int]) -> dict[int, str]:
        return dict(postings.rows_in(self.db, "SELECT c.rowid, c.id FROM capsules c WHERE c.rowid IN ({})", rowids))

    # ---- BM25 in memory (long-lived processes): an accelerator, never the source of truth
    def _content_key(self) -> tuple:
        """Changes whenever the lexical index may have: units added, removed or replaced, a run finished, a
        repository's files written. Read again only when something was written since (this connection's changes,
        or a commit by any other connection: SQLite's data_version), so a search pays one pragma, not four table
        reads."""
        db = self.db
        stamp = (db.execute("PRAGMA data_version").fetchone()[0], db.total_changes)
        cached = getattr(self._local, "content_key", None)
        if cached is not None and cached[0] == stamp:
            return cached[1]
        key = tuple(
            db.execute(
                "SELECT (SELECT max(rowid) FROM units), (SELECT count(*) FROM units), "
                "(SELECT group_concat(repo || '=' || value) FROM meta WHERE key = 'generation'), "
                # the repositories with files (_memory_covers): one written whose generation is not yet is in it
                "(SELECT group_concat(repo, char(10)) FROM (SELECT DISTINCT repo FROM files))"
            ).fetchone()
        )
        self._local.content_key = (stamp, key)
        return key

    def _build_memory_bm25(self) -> MemoryBM25:
        """From the postings as stored, read in one snapshot with the content key, decoded a block of terms at a
        time into the index's own arrays (a store of 221k units holds ~9M postings)."""
        db = self.db  # the building thread's own connection
        started = time.perf_counter()
        db.execute("BEGIN")
        try:
            key = self._content_key()
            units = db.execute("SELECT rowid, id FROM capsules").fetchall()
            n_docs, n_tokens = postings.stats(db)
            blocks = postings.read_lengths(db)
            rows = db.execute("SELECT term, n, p FROM lex WHERE n > 0").fetchall()
        finally:
            db.execute("COMMIT")
        return MemoryBM25.from_packed(
            key,
            rows,
            units,
            float(n_docs),
            n_tokens / n_docs if n_docs else 1.0,
            started,
            lengths=lambda rowids: postings.lengths_of(blocks, rowids),
        )

    def _rowids_where(self, scope: Scope) -> list[int]:
        where, args = self._scope(scope)
        return [r[0] for r in self.db.execute(f"SELECT c.rowid FROM capsules c WHERE {where}", args)]

    def _units_by_id(self, ids: list[str]) -> list[tuple[int, Capsule]]:
        out = []
        for chunk in _chunks(ids):
            by_id, id_args = _id_in(chunk, "c")
            out += [
                (r[0], row_to_capsule(r[1:]))
                for r in with_texts(
                    self.db,
                    self.db.execute(f"SELECT c.rowid, {_COLS} FROM capsules c WHERE {by_id}", id_args).fetchall(),
                    _TEXT_AT + 1,
                    tuple(i + 1 for i in _SLICED),
                )
            ]
        return out

    def _memory_covers(self, scope: Scope, key: tuple) -> tuple[bool, bool]:
        """FTS5's statistics are the whole file's whatever the scope: always covered; masked unless the
        scope admits the whole file."""
        return True, not self._admits_whole_file(scope, key)

    def _admits_whole_file(self, scope: Scope, key: tuple | None = None) -> bool:
        """True when the scope lets every unit of this file through (no path rule, no grant, and its
        repositories are all the file holds: a one-repository index searched as itself). The repositories held are
        those of the content ``key`` a memory read uses, else read now, in the caller's snapshot: a repository
        written since must not pass through a scope that does not name it."""
        if scope.include or scope.exclude or scope.grants is not None:
            return False
        if not scope.repos:
            return True
        if key is not None:
            held = set(key[3].split("\n")) if key[3] else set()
        else:
            held = {r[0] for r in self.db.execute("SELECT DISTINCT repo FROM files")}
        return held <= set(scope.repos)

    def by_names(self, names: list[str], scope: Scope = EVERYTHING) -> list[Capsule]:
        if not names:
            return []
        where, args = self._scope(scope)
        by_name, name_args = _id_in(names, "c", "name", "nh")
        by_qual, qual_args = _id_in(names, "c", "qualname", "qh")
        return [
            row_to_capsule(r)
            for r in with_texts(
                self.db,
                self.db.execute(
                    f"SELECT {_COLS} FROM capsules c WHERE (({by_name}) OR ({by_qual})) "
                    f"AND c.kind != 'window' AND {where} ORDER BY c.id",
                    name_args + qual_args + args,
                ).fetchall(),
                _TEXT_AT,
                _SLICED,
            )
        ]

    def name_counts(self, names: list[str], scope: Scope = EVERYTHING) -> dict[str, int]:
        """How many definitions carry each name (a name defined everywhere says little)."""
        where, args = self._scope(scope)
        out: dict[str, int] = {}
        for chunk in _chunks(list(dict.fromkeys(names))):
            by_name, name_args = _id_in(chunk, "c", "name", "nh")
            out.update(
                self.db.execute(
                    f"SELECT c.name, COUNT(*) FROM capsules c WHERE {by_name} "
                    f"AND c.kind IN ('function', 'method', 'class') AND {where} GROUP BY c.name",
                    name_args + args,
                ).fetchall()
            )
        return out

    def by_path_suffix(self, fragments: list[str], scope: Scope = EVERYTHING) -> list[str]:
        # the paths are matched in ``files`` (a row a file) and only those files' units read (CROSS JOIN: the order
        # as written); SQLite's planner otherwise scans every unit, computing its kind (Django: 7-8 ms a path, 0.4-0.8)
        where, args = self._scope(scope, alias="f")
        head = "SELECT c.id, f.path FROM files f CROSS JOIN capsules c ON c.fid = f.fid WHERE c.kind = 'module' AND"
        out: list[str] = []
        for frag in fragments:
            rows = self.db.execute(
                f"{head} (f.path = ? OR f.path LIKE ? ESCAPE '\\') AND {where} ORDER BY length(f.path), c.id LIMIT 5",
                [frag, like_suffix(frag)] + args,
            ).fetchall()
            if not rows and "/" in frag:  # the fragment holds more than the path: the longest path it ends with
                rows = self.db.execute(
                    f"{head} instr(f.path, '/') > 0 AND length(f.path) < length(?) "
                    f"AND substr(?, length(?) - length(f.path)) = '/' || f.path "
                    f"AND {where} ORDER BY length(f.path) DESC, c.id LIMIT 5",
                    [frag, frag, frag] + args,
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
        kind_ids = [_KIND[k] for k in kinds if k in _KIND]
        if kinds and not kind_ids:
            return []
        kind_sql = f" AND e.kind IN ({_ph(len(kind_ids))})" if kinds else ""
        if scope.unrestricted:
            scope_sql, scope_args = "", []
        elif not (scope.include or scope.exclude or scope.grants is not None):
            # edges resolve within a repository: both ends are in the source's
            scope_sql, scope_args = f" AND +s.repo IN ({_ph(len(scope.repos))})", list(scope.repos)
        else:  # both ends must be visible: the source, and the target when resolved
            s_where, s_args = self._scope(scope, "s")
            d_where, d_args = self._scope(scope, "df")
            scope_sql = f" AND {s_where} AND (e.dst IS NULL OR (d.rowid IS NOT NULL AND {d_where}))"
            scope_args = s_args + d_args
        end = "s.id" if col == "src" else _D_ID
        out = []
        for chunk in _chunks(list(dict.fromkeys(ids))):
            # the order of the index these rows were read by before schema 5: by the end's id, then as written
            by_id, id_args = _id_in(chunk)
            out += [
                Edge(r[0], EDGE_KINDS[r[1]], r[2], r[3])
                for r in self.db.execute(
                    f"SELECT {_EDGE_COLS} {_EDGE_FROM} WHERE e.{col} IN (SELECT rowid FROM capsules WHERE {by_id})"
                    f"{kind_sql}{scope_sql} ORDER BY {end}, e.seq",
                    id_args + kind_ids + scope_args,
                )
            ]
        return out

    # ---- grep: the files' texts, narrowed by the trigram index
    def grep_texts(self, plan: GrepPlan, scopes: Sequence[Scope]) -> Iterator[tuple[str, str, int, str]]:
        from repoctx.store.grep import fts5_query

        where, args = compile_all(scopes, "+f.repo", "f.path", "?", "sqlite")
        match = fts5_query(plan.prefilter)
        sql = (
            "SELECT f.repo, f.path, t.id, t.z FROM files f "
            f"JOIN texts t ON t.repo = f.repo AND t.hash = f.text_hash WHERE {where}"
        )
        if match is not None:
            sql += " AND t.id IN (SELECT rowid FROM text_fts WHERE text_fts MATCH ?)"
            args = args + [match]
        cur = self.db.execute(sql + " ORDER BY f.repo, f.path", args)
        inflate = inflater()
        try:  # rows stream from one statement (one read snapshot); closing the generator ends it
            for repo, path, tid, z in cur:
                yield repo, path, tid, inflate(z)
        finally:
            cur.close()

    def file_text(self, repo: str, path: str, scope: Scope = EVERYTHING) -> str | None:
        """The indexed text of one file (decoded, secrets redacted), or None when the scope hides it or the
        store holds none for it."""
        where, args = self._scope(scope, "f")
        row = self.db.execute(
            f"SELECT t.z FROM files f JOIN texts t ON t.repo = f.repo AND t.hash = f.text_hash "
            f"WHERE f.repo=? AND f.path=? AND {where}",
            [repo, path] + args,
        ).fetchone()
        return inflater()(row[0]) if row else None

    # ---- dense
    def faiss_for(self, repo: str) -> FaissIndex:
        fx = self._faiss.get(repo)
        if fx is None:
            fx = self._faiss[repo] = FaissIndex(self.dir / "vectors" / repo)
        return fx

    def vector_state(self, repo: str, model: str) -> VectorState:
        meta = self.faiss_for(repo).meta() or {}
        current = self._whole(repo, model, meta)
        if current:  # a whole set of this generation holds a vector of every unit: its count is theirs
            total = int(meta["total"])
        else:  # counting reads every unit's row (Django: ~0.1 s), too much for each one-shot search
            total = self._unit_count(repo)
        count = int(meta.get("count", 0)) if meta.get("model") == model else 0
        return VectorState(meta.get("model"), count, total, current)

    def vectors_current(self, repo: str, model: str) -> bool:
        """``vector_state(repo, model).current`` without counting the units when it is not (an update's fill asks
        before it starts: the count cost a one-file update of Django ~15 ms)."""
        return self._whole(repo, model, self.faiss_for(repo).meta() or {})

    def _whole(self, repo: str, model: str, meta: dict) -> bool:
        return (
            bool(meta)
            and meta.get("model") == model
            and meta.get("generation") == (self.meta("generation", repo) or "")
            and meta.get("count") == meta.get("total")
        )

    def _unit_count(self, repo: str) -> int:
        """The units of ``repo`` that should have a vector, counted again only when something was written since
        (``_content_key``'s stamp): an update's fill asks four times."""
        db = self.db
        stamp = (db.execute("PRAGMA data_version").fetchone()[0], db.total_changes)
        counted = getattr(self._local, "unit_counts", None)
        if counted is None:
            counted = self._local.unit_counts = {}
        hit = counted.get(repo)
        if hit is not None and hit[0] == stamp:
            return hit[1]
        n = db.execute(
            f"SELECT count(*) FROM capsules WHERE repo=? AND kind IN ({_ph(len(EMBED_KINDS))})", [repo, *EMBED_KINDS]
        ).fetchone()[0]
        counted[repo] = (stamp, n)
        return n

    def dense(self, vector: np.ndarray, model: str, k: int, scope: Scope = EVERYTHING) -> list[tuple[str, float]]:
        repos = [
            r
            for r in (scope.repos or [n for (n,) in self.db.execute("SELECT name FROM repos")])
            if scope.allows_repo(r)
        ]
        out: list[tuple[str, float]] = []
        for repo in repos:
            fx = self.faiss_for(repo)
            if fx.model != model:
                continue
            out += fx.search(vector, k, self._allowed_ids(repo, scope))
        return sorted(out, key=lambda x: -x[1])[:k]

    def warm_dense(self, model: str, scope: Scope = EVERYTHING) -> None:
        """Read the vector sets ``dense`` will scan (their ids: Django's 48k, ~11 ms), e.g. while the question's
        vector is still being made."""
        for repo in scope.repos or [n for (n,) in self.db.execute("SELECT name FROM repos")]:
            fx = self.faiss_for(repo)
            if scope.allows_repo(repo) and fx.model == model:
                fx.load()

    def _allowed_ids(self, repo: str, scope: Scope) -> set[str] | None:
        """The ids a scope lets a repository's vector search return (None: all of them), remembered per
        generation of the repository."""
        narrow = Scope(include=scope.include, exclude=scope.exclude, grants=scope.grants)
        if narrow.unrestricted:
            return None
        key = (repo, narrow, self.meta("generation", repo))
        got = self._allowed.get(key)
        if got is None:
            if len(self._allowed) > 64:
                self._allowed.clear()
            where, args = self._scope(narrow)
            got = self._allowed[key] = {
                r[0] for r in self.db.execute(f"SELECT c.id FROM capsules c WHERE c.repo=? AND {where}", [repo] + args)
            }
        return got


@contextmanager
def file_lock(path: Path, wait: bool = True) -> Iterator[None]:
    """An exclusive lock held while the block runs (released by the OS if the process dies)."""
    path.parent.mkdir(parents=True, exist_ok=True)
    fd = os.open(path, os.O_CREAT | os.O_RDWR, 0o644)
    try:
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | (0 if wait else fcntl.LOCK_NB))
        except BlockingIOError:
            raise IndexBusy(f"another repoctx process is indexing {path.stem.rsplit('.', 1)[0]}") from None
        yield
    finally:
        os.close(fd)


_worker_deflate: Callable[[str], bytes] | None = None  # a parse worker's own compressor (made once in it)


def made_ahead(capsules: list[Capsule], lexical_bodies: dict[str, str], text: str | None) -> dict:
    """What a parse worker makes of a file for put_file when the writer is behind: its text compressed as
    ``texts.z`` keeps it, and its units' postings (``postings.lex_rows``)."""
    global _worker_deflate
    out: dict = {"lex": postings.lex_rows(capsules, lexical_bodies)}
    if text is not None:
        if _worker_deflate is None:
            _worker_deflate = deflater()
        out["z"] = _worker_deflate(text)
    return out


class SQLiteRepoWriter:
    ahead = staticmethod(made_ahead)  # what put_file's ``ahead`` takes, made by a parse worker

    def __init__(self, store: SQLiteStore, repo: str):
        self.store = store
        self.repo = repo
        self._carry: _Carry | None = None  # embed_rows' plan for vector_sink
        self._deflate: Callable[[str], bytes] | None = None  # made on the first text written
        self._begin()

    def _begin(self) -> None:
        """What one transaction remembers: the rowid of each unit it wrote or deleted (a unit written again
        takes its old rowid back, so edges from other files still reach it), and the names' ids."""
        self._rowids: dict[str, int] = {}
        self._freed: dict[str, int] = {}  # deleted units, until written again
        self._name_ids: dict[str, int] = {}
        self._next_seq: int | None = None  # the last edge's seq, once read in this transaction
        self._edges_seen = False  # put_edges asked once whether the file held any edge before
        self._edge_indexes_dropped = False  # it did not: the indexes are built at commit (_EDGE_INDEXES)
        self._lex = postings.Pending()  # the lexical index's changes, written before the commit
        # a rewritten file's edges as they were, {path: {src rowid: [(kind, name, dst), ...]}}, until put_edges
        self._old_edges: dict[str, dict[int, list[tuple]]] = {}
        # texts kept for grep's trigram index and not yet given to it (_TRIGRAM_DEFERRED): {texts.id: text}
        self._trigrams: dict[int, str] = {}
        self._trigram_chars = 0

    @property
    def db(self) -> sqlite3.Connection:
        return self.store.db

    @contextmanager
    def transaction(self) -> Iterator[None]:
        db = self.db
        db.execute(f"PRAGMA cache_size=-{self.store.WRITE_CACHE_KIB}")
        try:
            db.execute("BEGIN IMMEDIATE")
            self._begin()
            try:
                yield
                for path in list(self._old_edges):  # files put again whose edges were not (none in an update)
                    self._drop_old_edges(path)
                self._index_trigrams()
                self._lex.flush(db)
                if self._edge_indexes_dropped:
                    for stmt in _EDGE_INDEXES.values():
                        db.execute(stmt)
            except BaseException:
                if db.in_transaction:
                    db.execute("ROLLBACK")
                self._begin()
                raise
            db.execute("COMMIT")
        finally:
            db.execute(f"PRAGMA cache_size=-{self.store.READ_CACHE_KIB}")
        self._begin()
        self.store.shrink_wal()

    def lock(self, kind: str = "index", wait: bool = True):
        return file_lock(self.store.dir / "locks" / f"{self.repo}.{kind}.lock", wait)

    def files(self) -> dict[str, FileRecord]:
        rows = self.db.execute(
            "SELECT path, language, size, mtime_ns, hash, module, imports, method, note, text_hash "
            "FROM files WHERE repo=?",
            (self.repo,),
        ).fetchall()
        # every file's imports in one parse: a json.loads a file cost Django's every update (no-op too) ~15 ms
        imports = json.loads("[" + ",".join(r[6] or "{}" for r in rows) + "]")
        return {
            r[0]: FileRecord(r[0], r[1], r[2], r[3], r[4], r[5], imp, r[7], r[8] or "", r[9] or "")
            for r, imp in zip(rows, imports, strict=True)
        }

    def meta(self, key: str) -> str | None:
        return self.store.meta(key, self.repo)

    def set_meta(self, key: str, value: str) -> None:
        self.db.execute("INSERT OR REPLACE INTO meta VALUES(?,?,?)", (self.repo, key, value))

    def clear(self) -> None:
        others = self.db.execute("SELECT EXISTS (SELECT 1 FROM capsules WHERE repo != ?)", (self.repo,)).fetchone()[0]
        self.db.execute("DELETE FROM edges WHERE src IN (SELECT rowid FROM capsules WHERE repo=?)", (self.repo,))
        self.db.execute("DELETE FROM units WHERE fid IN (SELECT fid FROM files WHERE repo=?)", (self.repo,))
        self.db.execute("DELETE FROM files WHERE repo=?", (self.repo,))
        # the lexical index is emptied whole and the other repositories' units given to it again: a clear is a
        # rebuild, often for other tokens (what this transaction had collected is in the units: made again)
        self._lex = postings.Pending()
        for table in ("lex", "lexdl", "lexstat"):
            self.db.execute(f"DELETE FROM {table}")
        if others:
            self._lex_units("1=1", [], delete=False)
        else:
            self.db.execute("DELETE FROM names")
        if self.db.execute("SELECT EXISTS (SELECT 1 FROM texts WHERE repo != ?)", (self.repo,)).fetchone()[0]:
            inflate = inflater()
            for tid, z in self.db.execute("SELECT id, z FROM texts WHERE repo=?", (self.repo,)).fetchall():
                self._unindex_text(tid, inflate(z))
        else:
            self.db.execute("INSERT INTO text_fts(text_fts) VALUES('delete-all')")
            self._trigrams.clear()
            self._trigram_chars = 0
        self.db.execute("DELETE FROM texts WHERE repo=?", (self.repo,))

    # ---- texts (grep): one row per repository and content, referenced by files.text_hash
    def _keep_text(self, text: str, z: bytes | None = None) -> tuple[str, int]:
        """The text's key and its row's id (``z``: the text compressed already, by a parse worker)."""
        key = text_key(text)
        row = self.db.execute("SELECT id FROM texts WHERE repo=? AND hash=?", (self.repo, key)).fetchone()
        if row is not None:  # stored already: not compressed again
            return key, row[0]
        if z is None:
            if self._deflate is None:
                self._deflate = deflater()
            z = self._deflate(text)
        cur = self.db.execute("INSERT INTO texts(repo, hash, z) VALUES(?,?,?)", (self.repo, key, z))
        tid = cur.lastrowid
        assert tid is not None  # set by every successful INSERT
        self._trigrams[tid] = text
        self._trigram_chars += len(text)
        if self._trigram_chars > _TRIGRAM_DEFERRED:
            self._index_trigrams(self._trigram_chars - _TRIGRAM_DEFERRED // 2)
        return key, tid

    def _index_trigrams(self, chars: float = math.inf) -> bool:
        """Give texts kept since the last call to grep's trigram index, the oldest first, until ``chars``
        characters went in (all of them by default); whether there was any."""
        pending = self._trigrams
        if not pending:
            return False
        put = self.db.execute
        while pending and chars > 0:
            tid = next(iter(pending))
            text = pending.pop(tid)
            put("INSERT INTO text_fts(rowid, text) VALUES(?,?)", (tid, text))
            chars -= len(text)
            self._trigram_chars -= len(text)
        return True

    def idle(self) -> bool:
        """Work that can wait, done a little at a time while the update waits for its parse worker (the texts'
        trigrams); whether there was any. The rest is done before the commit."""
        return self._index_trigrams(_TRIGRAM_STEP)

    def _unindex_text(self, tid: int, text: str) -> None:
        kept = self._trigrams.pop(tid, None)
        if kept is not None:  # never indexed
            self._trigram_chars -= len(kept)
            return
        self.db.execute("INSERT INTO text_fts(text_fts, rowid, text) VALUES('delete', ?, ?)", (tid, text))

    def _release_text(self, key: str | None) -> None:
        """Drop a text no file of the repository refers to any more."""
        if (
            not key
            or self.db.execute(
                "SELECT EXISTS (SELECT 1 FROM files WHERE repo=? AND text_hash=?)", (self.repo, key)
            ).fetchone()[0]
        ):
            return
        row = self.db.execute("SELECT id, z FROM texts WHERE repo=? AND hash=?", (self.repo, key)).fetchone()
        if row is not None:
            self._unindex_text(row[0], inflater()(row[1]))
            self.db.execute("DELETE FROM texts WHERE id=?", (row[0],))

    def put_text(self, path: str, text: str) -> None:
        old = self.db.execute("SELECT text_hash FROM files WHERE repo=? AND path=?", (self.repo, path)).fetchone()
        if old is None:
            return
        key, _ = self._keep_text(text)
        if old[0] != key:
            if old[0]:  # units sliced from the text being let go keep their own copy
                rows = with_texts(
                    self.db,
                    self.db.execute(
                        f"SELECT rowid, text, tid, at, span FROM capsules WHERE {_OF_FILE} AND text IS NULL",
                        (self.repo, path),
                    ).fetchall(),
                    1,
                )
                self.db.executemany(
                    "UPDATE units SET text=?, tid=NULL, at=NULL, span=NULL WHERE rowid=?",
                    [(r[1], r[0]) for r in rows],
                )
            self.db.execute("UPDATE files SET text_hash=? WHERE repo=? AND path=?", (key, self.repo, path))
            self._release_text(old[0])

    def _lex_units(self, where: str, args: list, delete: bool) -> None:
        """Give the units ``where`` selects to the lexical index, or (``delete``) take them out of it: with the
        postings put_file gave them, made again from what the units hold."""
        rows = with_texts(
            self.db,
            self.db.execute(
                f"SELECT rowid, name, qualname, path, signature, docstring, text, lex, tid, at, span "
                f"FROM capsules WHERE {where}",
                args,
            ).fetchall(),
            6,
            (4, 5),
        )
        put = self._lex.drop_unit if delete else self._lex.add_unit
        units = ((*r[1:6], unlines(r[7], r[6]) if r[7] is not None else r[6]) for r in rows)
        for r, unit in zip(rows, postings.units_postings(units), strict=True):
            put(r[0], unit)

    def put_file(
        self,
        rec: FileRecord,
        capsules: list[Capsule],
        lexical_bodies: dict[str, str],
        text: str | None = None,
        ahead: dict | None = None,
    ) -> None:
        """``ahead``: what ``made_ahead`` made of the file in a parse worker (its postings, its text compressed).
        A file written before keeps its row, and each of its units still there keeps its row, rewritten in place
        without the columns its indexes read (by id, name, qualname, file): an edited file's units were deleted and
        inserted again, every entry of four indexes with them (Django's query.py, 3 functions added: 302 of the 601
        pages the update wrote, and each page is written again when the log is copied into the database)."""
        ahead = ahead or {}
        old_rows, fid, old_key = self._let_file_go(rec.path, keep_edges=True)
        kept = set(old_rows.values())  # (old_rows loses each unit that is still there)
        key, tid = self._keep_text(text, ahead.get("z")) if text is not None else (None, None)
        slices = text_slices(text, capsules) if text is not None else [None] * len(capsules)
        if fid is None:
            fid = self.db.execute(
                "INSERT INTO files(repo, path, language, size, mtime_ns, hash, module, imports, method, note, "
                "text_hash) VALUES(?,?,?,?,?,?,?,?,?,?,?)",
                (self.repo, *file_columns(rec), key),
            ).lastrowid
        else:
            self.db.execute(
                "UPDATE files SET path=?, language=?, size=?, mtime_ns=?, hash=?, module=?, imports=?, method=?, "
                "note=?, text_hash=? WHERE fid=?",
                (*file_columns(rec), key, fid),
            )
            if old_key != key:
                self._release_text(old_key)
        rows = []
        for c, where in zip(capsules, slices, strict=True):
            lex = lexical_bodies.get(c.id)
            own_lines = lines_code(lex, c.text) if lex is not None and lex != c.text else None
            if c.path != rec.path:  # a unit's path is its file's row's (the view ``capsules`` reads it there)
                raise StoreError(f"a unit of {c.path} given with the file {rec.path}")
            prefix = f"{self.repo}:{c.path}#"
            id_tail, id_whole = _tail(c.id, prefix)
            if id_tail is not None and id_tail == c.qualname:
                id_tail = None
            cols = capsule_columns(c)
            parent_tail, parent_whole = _tail(c.parent, prefix) if c.parent is not None else (None, None)
            rows.append(
                (
                    old_rows.pop(c.id, None) or self._freed.pop(c.id, None),
                    None if cols[1] == rec.language else cols[1],  # the view reads the file's
                    _UNIT_KIND.get(cols[2], cols[2]),
                    _tail_code(cols[4], cols[3]) if cols[3] else cols[3],
                    cols[4],
                    slice_code(cols[5], c.text) if cols[5] else cols[5],
                    None if cols[6] == "[]" else cols[6],
                    cols[7],
                    slice_code(cols[8], c.text) if cols[8] else cols[8],
                    None if cols[9] == "[]" else cols[9],
                    *cols[10:],
                    c.text if where is None else None,
                    pack_hash(c.content_hash),
                    own_lines,
                    None if where is None else tid,
                    *(where or (None, None)),
                    id_tail,
                    id_whole,
                    _parent_code(parent_tail, c.qualname),
                    parent_whole,
                    id_hash(c.id),
                    fid,
                    id_hash(c.name),
                    id_hash(c.qualname),
                )
            )
        if old_rows:  # units the file no longer has, and their edges
            gone = list(old_rows.items())
            self.db.executemany("DELETE FROM edges WHERE src=?", [(r,) for _, r in gone])
            self.db.executemany("DELETE FROM units WHERE rowid=?", [(r,) for _, r in gone])
            old_edges = self._old_edges.get(rec.path, {})
            for cid, rowid in gone:
                self._freed[cid] = rowid
                old_edges.pop(rowid, None)
        in_place = {row[0] for row in rows if row[0] in kept}
        if in_place:
            self.db.executemany(
                f"UPDATE units SET {_UNIT_SET} WHERE rowid=?",
                [(*row[1:22], row[0]) for row in rows if row[0] in in_place],
            )
            # a name or qualname hash that changed with the same id (a rename within a file keeps no id: rare)
            self.db.executemany(
                "UPDATE units SET nh=?, qh=? WHERE rowid=? AND (nh IS NOT ? OR qh IS NOT ?)",
                [(row[24], row[25], row[0], row[24], row[25]) for row in rows if row[0] in in_place],
            )
        added = [row for row in rows if row[0] not in in_place]
        # a unit given no rowid takes the next after the largest ever given (AUTOINCREMENT), in the order written:
        # known without reading them back (Django's cold index: 3,917 reads by id)
        # (a rowid given again is one that was: below the sequence, which it leaves as it is); checked by the sequence
        # after the inserts (executemany leaves ``lastrowid`` unset)
        seq = self.db.execute(_UNITS_SEQ).fetchone()
        self.db.executemany(
            "INSERT INTO units(rowid, language, kind, name, qualname, signature, params, returns, "
            "docstring, decorators, start_line, end_line, text, content_hash, lex, tid, at, span, "
            f"id_tail, id_whole, parent_tail, parent_whole, idh, fid, nh, qh) VALUES({_ph(26)})",
            added,
        )
        given, nxt, last = {}, seq[0] if seq else 0, None
        for c, row in zip(capsules, rows, strict=True):
            if row[0] is None:
                nxt += 1
                last = nxt
            given[c.id] = row[0] if row[0] is not None else nxt
        if last is None or self.db.execute(_UNITS_SEQ).fetchone()[0] == last:
            self._rowids.update(given)
        rowids = self._rowid_map([c.id for c in capsules])  # (those not known above are read)
        add = self._lex.add_unit
        for c, unit in zip(capsules, ahead.get("lex") or postings.lex_rows(capsules, lexical_bodies), strict=True):
            add(rowids[c.id], unit)
        if self._lex.full():
            self._lex.flush(self.db, final=False)

    def files_written(self) -> None:
        self._lex.flush(self.db)
        trim()

    def touch_file(self, path: str, size: int, mtime_ns: int) -> None:
        self.db.execute(
            "UPDATE files SET size=?, mtime_ns=? WHERE repo=? AND path=?", (size, mtime_ns, self.repo, path)
        )

    def delete_file(self, path: str) -> None:
        kept, fid, old_key = self._let_file_go(path)
        if kept:
            self.db.executemany("DELETE FROM units WHERE rowid=?", [(r,) for r in kept.values()])
            self._freed.update(kept)
        if fid is not None:
            self.db.execute("DELETE FROM files WHERE fid=?", (fid,))
            self._release_text(old_key)

    def _let_file_go(self, path: str, keep_edges: bool = False) -> tuple[dict[str, int], int | None, str | None]:
        """Take a file's units out of the lexical index and its edges out of the graph; its units' rowids by id
        (their rows stay, for the caller to rewrite or delete), its row's id and its text's key. ``keep_edges``: the
        edges stay until put_edges gives the file's again (each unit's kept when they are the same), read here."""
        self._drop_old_edges(path)
        old = self.db.execute("SELECT fid, text_hash FROM files WHERE repo=? AND path=?", (self.repo, path)).fetchone()
        if old is None:
            return {}, None, None
        units = dict(self.db.execute("SELECT id, rowid FROM capsules WHERE fid=?", (old[0],)).fetchall())
        if units:
            self._lex_units("fid=?", [old[0]], delete=True)
            if keep_edges:
                by_src: dict[int, list[tuple]] = {}
                for src, *edge in self.db.execute(
                    "SELECT src, kind, name, dst FROM edges WHERE src IN (SELECT rowid FROM units WHERE fid=?) "
                    "ORDER BY src, seq",
                    (old[0],),
                ):
                    by_src.setdefault(src, []).append(tuple(edge))
                self._old_edges[path] = by_src
            else:
                self.db.execute("DELETE FROM edges WHERE src IN (SELECT rowid FROM units WHERE fid=?)", (old[0],))
            for cid in units:
                self._rowids.pop(cid, None)
        return units, old[0], old[1]

    def _rowid_map(self, ids: Iterable[str | None]) -> dict[str, int]:
        """Units' rowids by id: those this transaction wrote from memory, the rest read."""
        want = [i for i in dict.fromkeys(ids) if i is not None and i not in self._rowids]
        for chunk in _chunks(want):
            by_id, id_args = _id_in(chunk)
            got = dict(self.db.execute(f"SELECT id, rowid FROM capsules WHERE {by_id}", id_args))
            # keyed by the caller's strings (a cold build holds every unit's id already), not SQLite's copies
            self._rowids.update((i, got[i]) for i in chunk if i in got)
        return self._rowids

    def _name_map(self, pairs: dict[str, str]) -> dict[str, int]:
        """Names' ids (written when new), by name; ``pairs``: name -> its key."""
        want = [n for n in pairs if n not in self._name_ids]
        if want:
            self._read_name_ids(want)
            new = [n for n in want if n not in self._name_ids]
            self.db.executemany(
                "INSERT INTO names(name, key, h) VALUES(?,?,?)",
                ((n, _tail_code(n, pairs[n]), id_hash(n)) for n in new),
            )
            self._read_name_ids(new)
        return self._name_ids

    def _read_name_ids(self, names: list[str]) -> None:
        """By the names' hash index (a name once, not again in a unique index: 0.9 MiB of Django's)."""
        for chunk in _chunks(names):
            by_name, args = _id_in(chunk, "", "name", "h")
            self._name_ids.update(self.db.execute(f"SELECT name, id FROM names WHERE {by_name}", args).fetchall())

    def put_edges(self, edges: Iterable[tuple[Edge, str | None]], src_path: str) -> None:
        edges = list(edges)
        if edges and not self._edges_seen:
            self._edges_seen = True
            if self.db.execute("SELECT 1 FROM edges LIMIT 1").fetchone() is None:
                for name in _EDGE_INDEXES:  # built again before the commit (a rollback keeps them)
                    self.db.execute(f"DROP INDEX IF EXISTS {name}")
                self._edge_indexes_dropped = True
        rowids = self._rowid_map([e.src for e, _ in edges] + [e.dst for e, _ in edges])
        names = self._name_map({e.dst_name: key or "" for e, key in edges if e.kind != "contains"})
        given: list[tuple[int, tuple]] = []
        for e, _key in edges:
            src = rowids.get(e.src)
            if src is None:
                raise StoreError(f"an edge from {e.src}, which {src_path} does not define")
            contains = e.kind == "contains"
            given.append(
                (
                    src,
                    (
                        _KIND[e.kind],
                        None if contains else names[e.dst_name],
                        rowids.get(e.dst) if e.dst is not None else None,
                    ),
                )
            )
        old = self._old_edges.pop(src_path, None)
        if old is not None:
            # a unit whose edges are the ones it had keeps their rows (and their index entries); one whose edges
            # changed has them written again, numbered after every other (as a rewritten file's all were)
            new: dict[int, list[tuple]] = {}
            for src, edge in given:
                new.setdefault(src, []).append(edge)
            same = {src for src, got in new.items() if old.get(src) == got}
            stale = [(src,) for src in old if src not in same]
            self.db.executemany("DELETE FROM edges WHERE src=?", stale)
            given = [(src, edge) for src, edge in given if src not in same]
        rows = []
        seq = self._edge_seq()
        for src, edge in given:
            seq += 1
            rows.append((src, seq, *edge))
        self.db.executemany("INSERT INTO edges(src, seq, kind, name, dst) VALUES(?,?,?,?,?)", rows)
        if rows:
            self._next_seq = seq
            self.db.execute("INSERT OR REPLACE INTO meta VALUES('', 'edge_seq', ?)", (str(seq),))

    def _drop_old_edges(self, path: str) -> None:
        """Delete the edges a rewritten file had, if put_edges did not take them over."""
        old = self._old_edges.pop(path, None)
        if old:
            self.db.executemany("DELETE FROM edges WHERE src=?", [(src,) for src in old])

    def _edge_seq(self) -> int:
        """The last edge's ``seq``: edges are numbered in the order they are written, across the file (the order
        edges to one unit are read in, as the rowids of schema 7 gave it), kept in meta so a write does not scan."""
        if self._next_seq is None:
            kept = self.store.meta("edge_seq")
            self._next_seq = (
                int(kept) if kept else self.db.execute("SELECT coalesce(max(seq), 0) FROM edges").fetchone()[0]
            )
        return self._next_seq

    def set_edge_dst(self, edge_key, dst: str | None) -> None:
        self.db.execute(
            "UPDATE edges SET dst=? WHERE src=? AND seq=?",
            (self._rowid_map([dst]).get(dst) if dst is not None else None, *edge_key),
        )

    def cands_by_name(self, name: str) -> list[tuple]:
        return [
            tuple(r)
            for r in self.db.execute(
                "SELECT id, path, qualname, kind, module FROM capsules WHERE nh=? AND name=? AND repo=? "
                "AND kind NOT IN ('module','window') ORDER BY id",
                (id_hash(name), name, self.repo),
            )
        ]

    def module_cand(self, key: str) -> tuple | None:
        # by the qualname index, then the path index (with "repo=? AND (qualname=? OR path=?)" SQLite read every
        # module of the repository: 1.5 ms a lookup, 0.07 s of a one-file update of Django)
        r = self.db.execute(
            "SELECT id, path, qualname, kind, module FROM capsules WHERE rowid IN ("
            "SELECT rowid FROM capsules WHERE qh=? AND qualname=? AND +repo=? AND kind='module' UNION ALL "
            f"SELECT rowid FROM capsules WHERE {_OF_FILE} AND kind='module') ORDER BY id LIMIT 1",
            (id_hash(key), key, self.repo, self.repo, key),
        ).fetchone()
        return tuple(r) if r else None

    def edges_needing(self, keys: set[str], dsts: set[str], exclude_paths: set[str]) -> list[tuple]:
        """Edges outside exclude_paths whose target name is in keys or whose target is in dsts:
        (edge key, src, kind, dst_name, dst, src_path)."""
        rows: dict[tuple[int, int], tuple] = {}
        gone = {rowid: cid for cid, rowid in self._freed.items()}  # a deleted unit's edges still name it
        known = self._rowid_map(dsts)
        dst_rowids = sorted({known[d] for d in dsts if d in known} | {self._freed[d] for d in dsts if d in self._freed})
        # from the names (or the targets) to their edges: "s.repo=?" would read every edge of the repository
        sel = (
            f"SELECT e.src, e.seq, s.id, e.kind, n.name, e.dst, {_D_ID}, s.path {_EDGE_FROM} WHERE +s.repo=? "
            f"AND e.kind != {_CONTAINS} AND "
        )
        for where, values in (
            (f"e.name IN (SELECT id FROM names WHERE {_NAME_KEY} IN ({{}}))", sorted(keys)),
            ("e.dst IN ({})", dst_rowids),
        ):
            for chunk in _chunks(values):
                for r in self.db.execute(sel + where.format(_ph(len(chunk))), [self.repo] + chunk):
                    if r[7] not in exclude_paths:
                        dst = r[6] if r[6] is not None or r[5] is None else gone.get(r[5])
                        rows[r[0], r[1]] = ((r[0], r[1]), r[2], EDGE_KINDS[r[3]], r[4], dst, r[7])
        return list(rows.values())

    def bases_of(self, ids: list[str]) -> dict[str, list[tuple[str, str, str]]]:
        out: dict[str, list[tuple[str, str, str]]] = {}
        for chunk in _chunks(sorted(set(ids))):
            by_id, id_args = _id_in(chunk, "s")
            for src, dst, path, qual in self.db.execute(
                "SELECT s.id, d.id, d.path, d.qualname FROM edges e JOIN capsules s ON s.rowid = e.src "
                f"JOIN capsules d ON d.rowid = e.dst WHERE {_NOT_BY_REPO}s.repo=? AND e.kind={_KIND['inherits']} "
                f"AND {by_id} ORDER BY e.seq",
                [self.repo] + id_args,
            ):
                out.setdefault(src, []).append((dst, path, qual))
        return out

    def capsule_rows(self, path: str) -> list[tuple]:
        return [
            tuple(r)
            for r in self.db.execute(
                f"SELECT id, path, qualname, kind, module, language, name FROM capsules WHERE {_OF_FILE}",
                (self.repo, path),
            )
        ]

    # ---- vectors: the FAISS set is swapped in whole; units unchanged since the last set keep their vectors
    # from it, so an edit reads, looks up and embeds only what it changed (rebuilding the texts of every unit
    # and looking each up in the vector cache took 1.5 s of a one-file edit of Django)
    def embed_rows(self, model: str) -> tuple[list[EmbedRow], bool]:
        from repoctx.providers.embedding import EMBED_TEXT_VERSION

        self._carry = None
        if self.store.vector_state(self.repo, model).current:
            return [], True
        kinds = [self.repo, *EMBED_KINDS]
        units = f"repo=? AND kind IN ({_ph(len(EMBED_KINDS))})"
        hashes = {
            cid: hash_text(h) or ""
            for cid, h in self.db.execute(f"SELECT id, content_hash FROM capsules WHERE {units}", kinds)
        }
        keep_ids: list[str] = []
        keep: np.ndarray | Int8Matrix = np.zeros((0, 0), dtype=np.float32)
        old = self.store.faiss_for(self.repo).reusable(model, None, EMBED_TEXT_VERSION, int8=True)
        if old is not None:
            ids, matrix, old_hashes = old
            pos = [i for i, (cid, h) in enumerate(zip(ids, old_hashes, strict=True)) if h and hashes.get(cid) == h]
            keep_ids, keep = [ids[i] for i in pos], matrix[pos]
        self._carry = _Carry(keep_ids, keep, hashes, EMBED_TEXT_VERSION)
        kept = set(keep_ids)
        return self._rows_to_embed([cid for cid in hashes if cid not in kept]), True

    def _rows_to_embed(self, ids: list[str]) -> list[EmbedRow]:
        """The embedding rows of those of ``ids`` that are units of a kind that gets a vector, in id order."""
        rows: list[tuple] = []
        for chunk in _chunks(sorted(ids)):
            by_id, id_args = _id_in(chunk)
            rows += with_texts(
                self.db,
                self.db.execute(
                    "SELECT id, path, qualname, signature, docstring, text, tid, at, span FROM capsules WHERE "
                    f"{_NOT_BY_REPO}repo=? AND kind IN ({_ph(len(EMBED_KINDS))}) AND {by_id}",
                    [self.repo, *EMBED_KINDS, *id_args],
                ).fetchall(),
                5,
                (3, 4),
            )
        return [EmbedRow(*r) for r in sorted(rows)]

    def patch_rows(self, model: str, paths: list[str], generation: int) -> list[EmbedRow] | None:
        """``embed_rows`` after an update that rewrote or removed only the files ``paths`` and so moved the repository
        from ``generation - 1`` to ``generation``, when the stored int8 set was whole at ``generation - 1``: the rows
        of those files' units it has no vector of, read without reading every unit (Django: 0.1-0.25 s), and the
        sink ``vector_sink`` gives then patches the set (``FaissIndex.write_patch``). None: use ``embed_rows``."""
        from repoctx.providers.embedding import EMBED_TEXT_VERSION

        self._carry = None
        if generation < 1 or len(paths) > PATCH_MAX_FILES or self.meta("generation") != str(generation):
            return None
        stored = self.store.faiss_for(self.repo).patchable(model, EMBED_TEXT_VERSION, str(generation - 1))
        if stored is None:
            return None
        wanted = set(paths)
        units: dict[str, str] = {}  # the files' units now: id -> content hash
        for path in wanted:
            for cid, h in self.db.execute(
                f"SELECT id, content_hash FROM capsules WHERE {_OF_FILE} AND kind IN ({_ph(len(EMBED_KINDS))})",
                [self.repo, path, *EMBED_KINDS],
            ):
                units[cid] = hash_text(h) or ""
        # every id of those files' units starts so (``repo:path#qualname``): a scan in C, then a look at each hit
        starts = tuple(f"{self.repo}:{path}#" for path in wanted)
        kept: set[str] = set()
        hidden: list[int] = []  # stored positions of those files' units that are gone or changed
        maybe: dict[str, int] = {}  # gone from those files, by the id's look: unless another file has the id
        for i in ids_starting(stored.ids, starts):
            cid = stored.ids[i]
            if cid in units:
                if stored.hashes[i] and stored.hashes[i] == units[cid] and cid not in kept:
                    kept.add(cid)
                else:
                    hidden.append(i)
            else:
                maybe[cid] = i
        for chunk in _chunks(list(maybe)):  # a path with '#' in it can look like another's id: ask the store
            by_id, id_args = _id_in(chunk)
            sql = f"SELECT id FROM capsules WHERE {_NOT_BY_REPO}repo=? AND {by_id}"
            for (cid,) in self.db.execute(sql, [self.repo, *id_args]):
                del maybe[cid]
        hidden += maybe.values()
        alive = len(stored.ids) - len(empty_ids(stored.ids)) - len(hidden)
        self._carry = _Carry([], np.zeros((0, 0), dtype=np.float32), units, EMBED_TEXT_VERSION, (stored, hidden, alive))
        return self._rows_to_embed([cid for cid in units if cid not in kept])

    def vector_sink(self, model: str, dim: int, whole: bool) -> FaissSink:
        carry, self._carry = self._carry, None
        sink = FaissSink(self.store.faiss_for(self.repo), model, dim, self.meta("generation") or "", carry)
        if carry is not None and carry.ids:
            if carry.vectors.shape[1] != dim:
                raise StoreError(
                    f"the index's vectors for {model} have dimension {carry.vectors.shape[1]}, the model says {dim}"
                )
            sink.add(carry.ids, carry.vectors)
        return sink


# past this many files an update's units are read as every unit's are (``embed_rows``): the scan of the stored ids for
# theirs grows with their number
PATCH_MAX_FILES = 256


@dataclass
class _Carry:
    """What a new vector set takes over from the current one: the vectors of units whose content is
    unchanged, and every unit's content hash (recorded with the new set for the next update)."""

    ids: list[str]
    vectors: np.ndarray | Int8Matrix
    hashes: dict[str, str]
    text_version: int
    # a patch of the stored set instead (``patch_rows``): the set, its positions to hide, how many of its rows stay
    patch: tuple[StoredSet, list[int], int] | None = None


class FaissSink:
    """Collects a repository's vectors and swaps in a new FAISS index; ``publish`` makes what has been
    added so far searchable (a first index answers dense queries while the rest is embedded)."""

    def __init__(self, fx: FaissIndex, model: str, dim: int, generation: str, carry: _Carry | None = None):
        self.fx, self.model, self.dim, self.generation = fx, model, dim, generation
        self.carry = carry
        self.ids: list[str] = []
        # one buffer the rows are copied into, grown by half when full: publishing and finishing write a view of it,
        # never a concatenated second copy. Once the caller says how many rows come (``reserve``) and the set will be
        # stored as int8 rows (below HNSW_MIN_VECTORS), rows are kept quantized as they arrive (Django's 48k rows:
        # 18 MiB instead of 74; a row is quantized alone, so the stored set is the same bytes). Rows carried over
        # from the stored set come as int8 (``Int8Matrix``) and stay so: quantizing a carried row's dequantized form
        # gives it back exactly, so the set is the one a float32 carry would store
        self._rows = np.zeros((0, dim), dtype=np.float32)
        self._scale: np.ndarray | None = None  # set: _rows holds int8 rows and these are their scales
        self.expected: int | None = None

    def _room(self, rows: int) -> None:
        n = len(self.ids)
        if n + rows <= len(self._rows):
            return
        size = max(n + rows, len(self._rows) * 3 // 2, 1024)
        grown = np.empty((size, self.dim), dtype=self._rows.dtype)
        grown[:n] = self._rows[:n]
        self._rows = grown
        if self._scale is not None:
            scale = np.empty(size, dtype=np.float32)
            scale[:n] = self._scale[:n]
            self._scale = scale

    def _to_int8(self, rows: int) -> None:
        """Hold the rows as int8 from now on, with room for ``rows`` more."""
        n = len(self.ids)
        q, scale = quantize(self._rows[:n])
        self._rows, self._scale = np.empty((n + rows, self.dim), dtype=np.int8), np.empty(n + rows, np.float32)
        self._rows[:n], self._scale[:n] = q, scale

    def add(self, ids: list[str], matrix: np.ndarray | Int8Matrix) -> None:
        if len(ids) and matrix.shape[1] != self.dim:
            raise StoreError(f"vectors of dimension {matrix.shape[1]} given to a {self.dim}-dimensional index")
        n, k = len(self.ids), len(ids)
        if isinstance(matrix, Int8Matrix) and self._scale is None:
            self._to_int8(k)
        self._room(k)
        if isinstance(matrix, Int8Matrix):
            assert self._scale is not None
            self._rows[n : n + k] = np.asarray(matrix.q).reshape(k, self.dim)
            self._scale[n : n + k] = np.asarray(matrix.scale, dtype=np.float32)
        else:
            rows = np.asarray(matrix, dtype=np.float32).reshape(k, self.dim)
            if self._scale is None:
                self._rows[n : n + k] = rows
            else:
                self._rows[n : n + k], self._scale[n : n + k] = quantize(rows)
        self.ids += ids

    def reserve(self, rows: int) -> None:
        """Room for ``rows`` more rows at once (the caller knows how many it will add)."""
        if self._scale is None and len(self.ids) + rows < HNSW_MIN_VECTORS:
            self._to_int8(rows)
        else:
            self._room(rows)

    def _matrix(self) -> np.ndarray | Int8Matrix:
        n = len(self.ids)
        return self._rows[:n] if self._scale is None else Int8Matrix(self._rows[:n], self._scale[:n])

    @property
    def kept(self) -> int:
        if self.carry is not None and self.carry.patch is not None:
            return self.carry.patch[2]
        return len(self.carry.ids) if self.carry is not None else 0

    def _hashes(self) -> dict:
        if self.carry is None:
            return {}
        return {"hashes": [self.carry.hashes.get(cid, "") for cid in self.ids], "text_version": self.carry.text_version}

    def publish(self, total: int) -> None:
        """A partial set, marked as such (``count < total``), so status reports coverage. ``total``: the
        units handed to the fill; those carried over from the last set count too. A patch (a few files' units)
        shows when it is finished."""
        if self.carry is not None and self.carry.patch is not None:
            return
        self.fx.write(
            self.model,
            self.dim,
            list(self.ids),
            self._matrix(),
            self.generation,
            total=total + self.kept,
            **self._hashes(),
        )

    def finish(self) -> None:
        if self.carry is not None and self.carry.patch is not None:
            stored, hidden, _ = self.carry.patch
            got = self._hashes()["hashes"]
            self.fx.write_patch(stored, hidden, self.ids, self._matrix(), got, self.generation)
            return
        self.fx.write(self.model, self.dim, self.ids, self._matrix(), self.generation, **self._hashes())
