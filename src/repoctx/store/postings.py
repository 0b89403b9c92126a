"""SQLite's lexical index (schema 9): each term's postings in one row, as varints, instead of FTS5.

FTS5 kept every token's position (detail=full: 15.8 MiB of Django's 50 MiB index) though a search only
ever asks, per term and unit, the column-weighted count BM25 scores (``bm25(fts, 10, 6, 3, 4, 2, 1)``: the
terms are OR-ed, never a phrase) and each unit's token count. So the index keeps exactly those:

* ``lex(key INTEGER PRIMARY KEY, term, n, last, p)``: a term's ``n`` postings, ``p`` the varints (LEB128)
  of (rowid gap, weighted count) pairs in rowid order, ``last`` its last rowid (postings of newer units are
  appended to ``p`` without reading it). ``key`` is the term's CRC-32 (``term_key``), the next free key on a
  collision (open addressing: a term with no postings left keeps its row, ``n`` 0, so that a probe goes on
  past it). No index of terms: the table is its own.
* ``lexdl(block INTEGER PRIMARY KEY, d)``: units' token counts + 1 (0: no unit), 4,096 rowids a block, a
  zstd-compressed uint32 array; ``lexstat``: the number of units and of tokens (BM25's N and average length).

A writer collects postings (:class:`Pending`) a window of ``FLUSH_POSTINGS`` at a time; postings that come
after a term's last (a cold index's every one) are packed into runs kept in memory and written once, when
every file is written (``files_written``) or at the commit; a unit written again with the same tokens (most
of a changed file's) changes no row.
Scores are computed as FTS5's ``fts5_aux.c`` does, in the same order (see memory_bm25.py): the same ranks.
"""

from __future__ import annotations

import re
import zlib
from array import array
from collections import Counter
from collections.abc import Callable, Iterable, Sequence
from itertools import chain
from typing import TYPE_CHECKING, NamedTuple

import numpy as np
import zstandard

from repoctx.heap import trim

if TYPE_CHECKING:
    import sqlite3

    from repoctx.types import Capsule

SCHEMA = (
    "CREATE TABLE IF NOT EXISTS lex(key INTEGER PRIMARY KEY, term TEXT NOT NULL, n INTEGER NOT NULL, "
    "last INTEGER NOT NULL, p BLOB NOT NULL)",
    "CREATE TABLE IF NOT EXISTS lexdl(block INTEGER PRIMARY KEY, d BLOB NOT NULL)",
    "CREATE TABLE IF NOT EXISTS lexstat(id INTEGER PRIMARY KEY CHECK (id = 0), units INTEGER NOT NULL, "
    "tokens INTEGER NOT NULL)",
)
# BM25 column weights: name, qualname, path, signature, docstring, body (integers: a weighted count is exact)
WEIGHTS = (10, 6, 3, 4, 2, 1)
BODY_CHARS = 200_000  # a unit's body is cut here before its tokens are counted
_BLOCK_BITS = 12
K1, B = 1.2, 0.75  # BM25's, as FTS5's bm25() sets them
# Pending.row_key when not a key (keys are signed 32-bit, a probe may pass 2**31): not looked up yet; no row
UNKNOWN, NO_ROW = -(1 << 41), -(1 << 40)
FLUSH_POSTINGS = 1 << 18  # a writer writes what it collected once this many postings wait (memory: 8 bytes each)
_PACK_POSTINGS = 1 << 16  # packed into varints this many at a time (~20 arrays of 8 bytes a posting meanwhile)
_PLAIN = re.compile(r"[A-Za-z0-9_]+")


class CorruptPostings(ValueError):
    pass


# ------------------------------------------------------------------------------------ varints (LEB128)
def encode_varints(values: np.ndarray) -> bytes:
    """Non-negative integers as little-endian base-128 varints, 7 bits a byte, the high bit set on all but the last."""
    v = np.asarray(values, dtype=np.uint64)
    if not len(v):
        return b""
    nbytes = _varint_sizes(v)
    ends = np.cumsum(nbytes)
    starts = ends - nbytes
    out = np.empty(int(ends[-1]), dtype=np.uint8)
    for j in range(int(nbytes.max())):
        m = nbytes > j
        byte = (v[m] >> np.uint64(7 * j)) & np.uint64(127)
        out[starts[m] + j] = (byte | np.where(nbytes[m] - 1 > j, np.uint64(128), np.uint64(0))).astype(np.uint8)
    return out.tobytes()


def _varint_sizes(values: np.ndarray) -> np.ndarray:
    v = np.asarray(values, dtype=np.uint64)
    nbytes = np.ones(len(v), dtype=np.int64)
    for bits in range(7, 64, 7):
        big = v >= np.uint64(1 << bits)
        if not big.any():
            break
        nbytes += big
    return nbytes


def decode_varints(buf: bytes) -> np.ndarray:
    b = np.frombuffer(buf, dtype=np.uint8)
    if not len(b):
        return np.zeros(0, dtype=np.int64)
    cont = b >= 128
    if not cont.any():
        return b.astype(np.int64)
    if cont[-1]:
        raise CorruptPostings("postings end inside a varint")
    ends = np.flatnonzero(~cont)
    starts = np.empty_like(ends)
    starts[0] = 0
    starts[1:] = ends[:-1] + 1
    lens = ends - starts + 1
    out = (b[starts] & 127).astype(np.int64)
    for j in range(1, int(lens.max())):
        m = lens > j
        out[m] |= (b[starts[m] + j].astype(np.int64) & 127) << (7 * j)
    return out


def _interleave(first: np.ndarray, cols: Sequence[np.ndarray]) -> np.ndarray:
    """``first`` and each of ``cols`` taken in turn: a0 b0 c0 a1 b1 c1 ..."""
    width = 1 + len(cols)
    out = np.empty(width * len(first), dtype=np.int64)
    out[0::width] = first
    for j, col in enumerate(cols, 1):
        out[j::width] = col
    return out


def pack(rowids: np.ndarray, wtf: np.ndarray, dl: np.ndarray | None = None) -> bytes:
    """One term's postings (rowids strictly increasing) as its row's ``p``: (rowid gap, weighted count) pairs,
    or with ``dl`` (PostgreSQL's rows, which carry each unit's token count) (gap, count, length) triples."""
    gaps = np.diff(np.asarray(rowids, dtype=np.int64), prepend=0)
    return encode_varints(_interleave(gaps, [wtf] if dl is None else [wtf, dl]))


def pack_runs(
    counts: np.ndarray, rowids: np.ndarray, cols: Sequence[np.ndarray], after: np.ndarray
) -> tuple[bytes, np.ndarray]:
    """Several terms' postings in one pass: ``rowids`` (and ``cols``, the values each posting carries) grouped by
    term, ``counts`` a term (each > 0), in rowid order within a term, each term's first gap taken from ``after``
    (its stored last rowid, or 0). The bytes, and each term's offsets in them (``len(counts) + 1``)."""
    rowids = np.asarray(rowids, dtype=np.int64)
    firsts = np.cumsum(counts) - counts
    gaps = np.diff(rowids, prepend=0)
    gaps[firsts] = rowids[firsts] - after
    values = _interleave(gaps, cols)
    per_term = np.add.reduceat(_varint_sizes(values), (1 + len(cols)) * firsts)
    return encode_varints(values), np.concatenate([[0], np.cumsum(per_term)])


def unpack_many(blobs: Sequence[bytes], counts: Sequence[int], width: int = 2) -> tuple[np.ndarray, ...]:
    """Several terms' postings at once: (the term's position in ``blobs`` per posting, rowids, weighted counts,
    and with ``width`` 3 the units' lengths)."""
    values = decode_varints(b"".join(blobs))
    counts_a = np.asarray(counts, dtype=np.int64)
    total = int(counts_a.sum())
    if len(values) != width * total:
        raise CorruptPostings(f"{len(values)} varints where {width * total} were counted")
    which = np.repeat(np.arange(len(counts_a)), counts_a)
    gaps = values[0::width]
    rowids = np.cumsum(gaps)
    if total:  # each term's first gap is its first rowid: take away what the terms before it summed to
        firsts = np.cumsum(counts_a) - counts_a
        before = np.zeros(len(counts_a), dtype=np.int64)
        has = counts_a > 0
        before[has] = rowids[firsts[has]] - gaps[firsts[has]]
        rowids -= before[which]
    return (which, rowids, *(values[j::width] for j in range(1, width)))


# ------------------------------------------------------------------------------------ a unit's postings
def unit_postings(columns: Sequence[Sequence[str]]) -> tuple[tuple[str, ...], tuple[int, ...], int]:
    """(terms, their column-weighted counts, the unit's token count) from the six columns' tokens."""
    counts: dict[str, int] = Counter(columns[5])
    get = counts.get
    for w, tokens in zip(WEIGHTS[:5], columns[:5], strict=True):
        for t in tokens:
            counts[t] = get(t, 0) + w
    return tuple(counts), tuple(counts.values()), sum(map(len, columns))


def units_postings(units: Iterable[tuple[str | None, ...]]) -> list[tuple]:
    """Each unit's postings (:func:`unit_postings`) from its (name, qualname, path, signature, docstring, body)."""
    from repoctx.tokens import code_tokens

    seen: dict[str, list[str]] = {}  # a file's units share their path, often names and signatures

    def tok(value: str | None) -> list[str]:
        value = value or ""
        got = seen.get(value)
        if got is None:
            got = seen[value] = code_tokens(value)
        return got

    return [
        unit_postings((tok(n), tok(q), tok(p), tok(s), tok(d), code_tokens((body or "")[:BODY_CHARS])))
        for n, q, p, s, d, body in units
    ]


def lex_rows(capsules: list[Capsule], lexical_bodies: dict[str, str]) -> list[tuple]:
    """Each unit's postings, its body being a class's own lines (``lexical_bodies``) or its text. Pure, so a
    parse worker can make them."""

    def body(c: Capsule) -> str:
        lex = lexical_bodies.get(c.id)
        return lex if lex is not None and lex != c.text else c.text

    return units_postings((c.name, c.qualname, c.path, c.signature, c.docstring, body(c)) for c in capsules)


def query_terms(terms: Iterable[str]) -> list[tuple[str, tuple[str, ...]]]:
    """Each asked term, case-folded, with the indexed terms it stands for: itself when plain, else its words
    (a term FTS5 would have read as a phrase matches the units holding every one of its words)."""
    out: list[tuple[str, tuple[str, ...]]] = []
    for t in dict.fromkeys(t.lower() for t in terms if t):  # (FTS5 would have counted "Foo" and "foo" twice)
        if _PLAIN.fullmatch(t):
            out.append((t, (t,)))
        else:
            words = tuple(dict.fromkeys(_PLAIN.findall(t)))
            if words:
                out.append((t, words))
    return out


# ------------------------------------------------------------------------------------ reading
def term_key(term: str | None) -> int:
    """A term's home key: its CRC-32, signed as SQLite stores it (``sqlite.id_hash``, the hash of units' ids,
    names and qualnames, is this function)."""
    h = zlib.crc32((term or "").encode("utf-8", "surrogatepass"))
    return h - (1 << 32) if h >= 1 << 31 else h


def rows_in(db: sqlite3.Connection, sql: str, values: list, args: Sequence = ()) -> list[tuple]:
    """``sql`` (its ``{}``: an IN list's placeholders, then ``args``' own) run on ``values`` 900 at a time."""
    out: list[tuple] = []
    for i in range(0, len(values), 900):
        chunk = values[i : i + 900]
        out += db.execute(sql.format(",".join("?" * len(chunk))), [*chunk, *args])
    return out


class Row(NamedTuple):
    key: int
    n: int
    last: int
    p: bytes | None  # None when not asked for


def read_terms(db: sqlite3.Connection, terms: Iterable[str], blobs: bool = True) -> dict[str, Row]:
    """The rows of the terms the index holds (rows left with no postings too), with their postings or not."""
    pending = {t: term_key(t) for t in dict.fromkeys(terms)}
    found: dict[str, Row] = {}
    cols = "key, term, n, last, p" if blobs else "key, term, n, last, NULL"
    while pending:
        keys = sorted(set(pending.values()))
        rows = {r[0]: r[1:] for r in rows_in(db, f"SELECT {cols} FROM lex WHERE key IN ({{}})", keys)}
        probe: dict[str, int] = {}
        for t, k in pending.items():
            row = rows.get(k)
            if row is None:
                continue
            if row[0] == t:
                found[t] = Row(k, row[1], row[2], row[3])
            else:  # another term's key: this one is further on
                probe[t] = k + 1
        pending = probe
    return found


def unique(a: np.ndarray) -> np.ndarray:
    """The sorted distinct values of ``a``, as numpy's unique gives them, without the import of numpy.ma that
    its first call makes (~8 ms of every one-shot command that reads postings)."""
    s = np.sort(np.asarray(a), kind="stable")
    if len(s) < 2:
        return s
    keep = np.empty(len(s), dtype=bool)
    keep[0] = True
    np.not_equal(s[1:], s[:-1], out=keep[1:])
    return s[keep]


def unique_inverse(a: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """:func:`unique`, and each element's index among those values (numpy's ``return_inverse``)."""
    a = np.asarray(a)
    order = np.argsort(a, kind="stable")
    s = a[order]
    first = np.empty(len(s), dtype=bool)
    if len(s):
        first[0] = True
        np.not_equal(s[1:], s[:-1], out=first[1:])
    inverse = np.empty(len(s), dtype=np.intp)
    inverse[order] = np.cumsum(first) - 1
    return s[first], inverse


def score(
    asked: list[tuple[str, tuple[str, ...]]],
    by_word: dict[str, tuple[np.ndarray, np.ndarray]],
    n_docs: float,
    avgdl: float,
    lengths: Callable[[np.ndarray], np.ndarray],
) -> tuple[np.ndarray, np.ndarray]:
    """(rowids, scores) of the units matching any asked term (:func:`query_terms`): FTS5's bm25() (fts5_aux.c),
    term by term in the order asked, each (idf, weighted count, unit length) as it computes them. ``by_word``: each
    held word's (rowids, weighted counts); ``lengths(units)``: the token counts of sorted distinct rowids. A term of
    several words (which FTS5 read as a phrase) matches the units holding all of them, counted as its rarest word."""
    parts: list[tuple[np.ndarray, np.ndarray]] = []
    for _, words in asked:
        if any(w not in by_word for w in words):
            continue
        r, f = by_word[words[0]]
        for w in words[1:]:  # every word's units, the least count
            r2, f2 = by_word[w]
            common, i1, i2 = np.intersect1d(r, r2, assume_unique=True, return_indices=True)
            r, f = common, np.minimum(f[i1], f2[i2])
        if len(r):
            parts.append((r, f.astype(np.float64)))
    if not parts:
        return np.zeros(0, dtype=np.int64), np.zeros(0)
    every = np.concatenate([r for r, _ in parts])
    units, at = unique_inverse(every)
    dl = lengths(units)[at]
    scores = np.empty(len(every))
    pos = 0
    for r, f in parts:
        df = len(r)
        idf = max(float(np.log((n_docs - df + 0.5) / (df + 0.5))), 1e-6)
        d = dl[pos : pos + df]
        scores[pos : pos + df] = idf * ((f * (K1 + 1.0)) / (f + K1 * (1 - B + B * d / avgdl)))
        pos += df
    return units, np.bincount(at, weights=scores, minlength=len(units))


def first_admitted(
    rowids: np.ndarray, order: np.ndarray, k: int, admitted: Callable[[list[int]], set[int]]
) -> np.ndarray:
    """The first ``k`` positions of ``order`` whose units ``admitted`` keeps (a scope's WHERE clause, asked of a
    chunk of rowids at a time, each chunk four times the last)."""
    kept: list[int] = []
    pos, size = 0, max(4 * k, 256)
    while len(kept) < k and pos < len(order):
        chunk = order[pos : pos + size]
        pos += len(chunk)
        ok = admitted(rowids[chunk].tolist())
        kept += [int(i) for i in chunk if int(rowids[i]) in ok]
        size *= 4
    return np.asarray(kept[:k], dtype=np.int64)


def read_lengths(db: sqlite3.Connection, rowids: np.ndarray | None = None) -> dict[int, np.ndarray]:
    """Blocks of units' token counts + 1 (uint32, 0 where no unit is), the blocks holding ``rowids`` or all."""
    inflate = zstandard.ZstdDecompressor().decompress
    if rowids is None:
        rows = db.execute("SELECT block, d FROM lexdl").fetchall()
    else:
        blocks = unique(np.asarray(rowids, dtype=np.int64) >> _BLOCK_BITS).tolist()
        rows = rows_in(db, "SELECT block, d FROM lexdl WHERE block IN ({})", blocks)
    return {b: np.frombuffer(inflate(d), dtype=np.uint32) for b, d in rows}


def lengths_of(blocks: dict[int, np.ndarray], rowids: np.ndarray) -> np.ndarray:
    """The token counts of ``rowids`` (float64), from :func:`read_lengths`."""
    out = np.zeros(len(rowids), dtype=np.float64)
    if not len(rowids):
        return out
    block = rowids >> _BLOCK_BITS
    at = rowids & ((1 << _BLOCK_BITS) - 1)
    for b in unique(block).tolist():
        m = block == b
        arr = blocks.get(int(b))
        if arr is not None:
            out[m] = arr[at[m]]
    return np.maximum(out - 1, 0)


def stats(db: sqlite3.Connection) -> tuple[int, int]:
    row = db.execute("SELECT units, tokens FROM lexstat WHERE id = 0").fetchone()
    return (row[0], row[1]) if row else (0, 0)


# ------------------------------------------------------------------------------------ writing
class Vocab(dict):
    """term -> its number in this transaction; a new term takes the next."""

    def __init__(self) -> None:
        super().__init__()
        self.terms: list[str] = []

    def __missing__(self, term: str) -> int:
        i = self[term] = len(self.terms)
        self.terms.append(term)
        return i


class Side:
    """Postings a unit at a time: each unit's rowid (and length) and its (terms, weighted counts) as given, numbered
    by the vocabulary only when the window is flushed (one pass over them all)."""

    def __init__(self, typecode: str = "i") -> None:
        self.typecode = typecode
        self.units, self.sizes, self.lengths = array(typecode), array("i"), array("q")
        self.term_lists: list[Sequence[str]] = []
        self.wtf_lists: list[Sequence[int]] = []
        self.size = 0

    def put(self, rowid: int, terms: Sequence[str], wtf: Sequence[int], dl: int = 0) -> None:
        self.units.append(rowid)
        self.sizes.append(len(terms))
        self.lengths.append(dl)
        self.term_lists.append(terms)
        self.wtf_lists.append(wtf)
        self.size += len(terms)

    def arrays(self, vocab: Vocab) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        """(term numbers, rowids, weighted counts), one a posting."""
        if not self.size:
            return np.zeros(0, np.int32), np.zeros(0, self.typecode), np.zeros(0, np.int32)
        terms = np.frombuffer(array("i", map(vocab.__getitem__, chain.from_iterable(self.term_lists))), dtype=np.int32)
        wtf = np.frombuffer(array("i", chain.from_iterable(self.wtf_lists)), dtype=np.int32)
        rowids = np.repeat(np.frombuffer(self.units, dtype=self.typecode), np.frombuffer(self.sizes, dtype=np.int32))
        return terms, rowids, wtf

    def posting_lengths(self) -> np.ndarray:
        """Each posting's unit length (what :meth:`put` was given), in :meth:`arrays`' order."""
        return np.repeat(np.frombuffer(self.lengths, dtype=np.int64), np.frombuffer(self.sizes, dtype=np.int32))


def cancel(added: Sequence[np.ndarray], dropped: Sequence[np.ndarray]) -> tuple[list[np.ndarray], list[np.ndarray]]:
    """Postings added and taken away, each as parallel arrays (term, rowid, then what a posting carries), without
    the pairs of one added and one taken away that are the same in every array: no change to any row."""
    width = len(added)
    both = np.concatenate(
        [np.stack([*added, np.ones_like(added[0])]), np.stack([*dropped, -np.ones_like(dropped[0])])], 1
    )
    both = both[:, np.lexsort(both[::-1])]
    same = np.all(both[:width, 1:] == both[:width, :-1], axis=0) & (both[width, 1:] != both[width, :-1])
    gone = np.zeros(both.shape[1], dtype=bool)
    gone[1:] |= same
    gone[:-1] |= same
    both = both[:, ~gone]
    add = both[width] > 0
    return [row[add] for row in both[:width]], [row[~add] for row in both[:width]]


class Pending:
    """A transaction's lexical changes: postings added and taken away and units' token counts, a window of
    ``FLUSH_POSTINGS`` at a time (:meth:`flush`). Postings of units newer than a term's last (a cold index's
    every posting) are packed into runs kept in memory, a few bytes a posting, and written at the commit
    (:meth:`flush` with ``final``): each row is then written once. Terms are numbered for the transaction
    (``vocab``); what is known of each is kept in arrays by that number."""

    def __init__(self) -> None:
        self.vocab = Vocab()
        self.stored_empty: bool | None = None  # the index held no term when the transaction began
        self.run_n = np.zeros(0, dtype=np.int64)  # postings in the term's run (0: none)
        self.run_last = np.zeros(0, dtype=np.int64)  # the run's last rowid
        # the runs' bytes: per window, (its terms' numbers, the bytes, each term's span in them), joined at a spill
        self.pieces: list[tuple[np.ndarray, bytes, np.ndarray]] = []
        self.row_key = np.zeros(0, dtype=np.int64)  # the term's stored row: its key, NO_ROW, or UNKNOWN
        self.row_last = np.zeros(0, dtype=np.int64)  # that row's last rowid
        self._window()

    def _window(self) -> None:
        self.add = Side()
        self.drop = Side()
        self.lengths: dict[int, int] = {}  # rowid -> token count (-1: the unit is gone)

    def __bool__(self) -> bool:
        return bool(self.lengths or self.add.size or self.drop.size)

    def full(self) -> bool:
        return self.add.size + self.drop.size >= FLUSH_POSTINGS

    def add_unit(self, rowid: int, postings: tuple) -> None:
        terms, wtf, dl = postings
        self.add.put(rowid, terms, wtf)
        self.lengths[rowid] = dl

    def drop_unit(self, rowid: int, postings: tuple) -> None:
        terms, wtf, _dl = postings
        self.drop.put(rowid, terms, wtf)
        self.lengths[rowid] = -1  # (a unit written again is dropped first, then added)

    def flush(self, db: sqlite3.Connection, final: bool = True) -> None:
        """Write the window (``final``: and every run)."""
        if self:
            if self.stored_empty is None:
                self.stored_empty = bool(db.execute("SELECT NOT EXISTS (SELECT 1 FROM lex)").fetchone()[0])
            self._flush_lengths(db)
            added, dropped = self.add.arrays(self.vocab), self.drop.arrays(self.vocab)
            self._window()
            self._grow()
            self._flush_postings(db, added, dropped)
            del added, dropped
            trim()  # the window's temporaries (medium-sized arrays stay in glibc's heap otherwise)
        if final:
            self._spill(db)
            self.__init__()  # type: ignore[misc]

    def _grow(self) -> None:
        n = len(self.vocab.terms)
        extra = n - len(self.run_n)
        if extra > 0:
            self.run_n = np.concatenate([self.run_n, np.zeros(extra, np.int64)])
            self.run_last = np.concatenate([self.run_last, np.zeros(extra, np.int64)])
            self.row_key = np.concatenate([self.row_key, np.full(extra, UNKNOWN, np.int64)])
            self.row_last = np.concatenate([self.row_last, np.zeros(extra, np.int64)])

    # -- units' token counts and the totals
    def _flush_lengths(self, db: sqlite3.Connection) -> None:
        deflate = zstandard.ZstdCompressor(level=3).compress
        rowids = np.fromiter(self.lengths, dtype=np.int64, count=len(self.lengths))
        values = np.fromiter(self.lengths.values(), dtype=np.int64, count=len(self.lengths))
        blocks = read_lengths(db, rowids)
        units, tokens = stats(db)
        size = 1 << _BLOCK_BITS
        for b in unique(rowids >> _BLOCK_BITS).tolist():
            m = (rowids >> _BLOCK_BITS) == b
            arr = blocks[b].copy() if b in blocks else np.zeros(size, dtype=np.uint32)
            at = rowids[m] & (size - 1)
            old = arr[at].astype(np.int64)
            new = values[m] + 1  # -1 (gone) -> 0
            units += int((new > 0).sum()) - int((old > 0).sum())
            tokens += int(np.maximum(new - 1, 0).sum()) - int(np.maximum(old - 1, 0).sum())
            arr[at] = new.astype(np.uint32)
            if arr.any():
                db.execute("INSERT OR REPLACE INTO lexdl(block, d) VALUES(?,?)", (b, deflate(arr.tobytes())))
            else:
                db.execute("DELETE FROM lexdl WHERE block = ?", (b,))
        db.execute("INSERT OR REPLACE INTO lexstat(id, units, tokens) VALUES(0,?,?)", (units, tokens))

    # -- the postings
    def _flush_postings(self, db: sqlite3.Connection, added: tuple, dropped: tuple) -> None:
        terms = self.vocab.terms
        at, ar, aw = added
        dt, dr, dw = dropped
        if len(dt):  # a posting taken away and given back the same (a unit written again unchanged) is no change
            (at, ar, aw), (dt, dr, _) = cancel((at, ar, aw), (dt, dr, dw))
        n_terms = len(terms)
        a_count = np.bincount(at, minlength=n_terms)
        d_count = np.bincount(dt, minlength=n_terms)
        touched = np.flatnonzero((a_count > 0) | (d_count > 0))
        if not len(touched):
            return
        self._look_up(db, touched[(self.row_key[touched] == UNKNOWN) & (self.run_n[touched] == 0)])
        # the added postings by term, then rowid (units are mostly added in rowid order: then no second key)
        order = np.argsort(at, kind="stable")
        a_end = np.cumsum(a_count)
        a_start = a_end - a_count
        if len(order) > 1:
            r_sorted = ar[order]
            step_back = np.diff(r_sorted) <= 0
            step_back[a_start[1:][a_count[1:] > 0] - 1] = False  # a term's first posting may follow any rowid
            if step_back.any():
                order = np.lexsort((ar, at))
            del r_sorted, step_back
        first_added = np.zeros(n_terms, dtype=np.int64)
        first_added[a_count > 0] = ar[order[a_start[a_count > 0]]]
        # a term's last rowid: its run's, else its stored row's (-1: none)
        last = np.where(
            self.run_n[touched] > 0,
            self.run_last[touched],
            np.where(self.row_key[touched] > NO_ROW, self.row_last[touched], -1),
        )
        # appended: postings all after the term's last, none taken away (a cold index's every term)
        appended = (d_count[touched] == 0) & (first_added[touched] > last)
        rest = touched[~appended]
        if len(rest):
            self._merge(db, rest, (a_start, a_count, order, ar, aw), (d_count, dr, dt))
        new = touched[appended]
        after = np.maximum(last[appended], 0)
        ends = np.cumsum(a_count[new])
        a = 0
        while a < len(new):  # appended postings packed together, ~_PACK_POSTINGS at a time
            b = max(int(np.searchsorted(ends, (ends[a - 1] if a else 0) + _PACK_POSTINGS, side="right")), a + 1)
            block = new[a:b]
            counts, lasts, data, offs = self._pack_runs(block, after[a:b], a_start, a_count, order, ar, aw)
            self.pieces.append((block.astype(np.int32), data, offs))
            self.run_n[block] += counts
            self.run_last[block] = lasts
            a = b

    def _look_up(self, db: sqlite3.Connection, ids: np.ndarray) -> None:
        """Learn which of these terms the index holds, with their keys and last rowids."""
        if not len(ids):
            return
        if self.stored_empty:
            self.row_key[ids] = NO_ROW
            return
        terms = self.vocab.terms
        rows = read_terms(db, [terms[i] for i in ids.tolist()], blobs=False)
        for i in ids.tolist():
            row = rows.get(terms[i])
            self.row_key[i] = NO_ROW if row is None else row.key
            self.row_last[i] = 0 if row is None else row.last

    def _merge(self, db: sqlite3.Connection, ids: np.ndarray, added: tuple, dropped: tuple) -> None:
        """Terms whose postings change inside: each row read, changed and written whole."""
        a_start, a_count, order, ar, aw = added
        d_count, dr, dt = dropped
        terms = self.vocab.terms
        if self.run_n[ids].any():  # a run of this transaction joins its row first
            self._spill(db)
        blobs = read_terms(db, [terms[i] for i in ids.tolist()])
        d_order = np.lexsort((dr, dt)) if len(dt) else np.zeros(0, np.int64)
        d_end = np.cumsum(d_count)
        d_start = d_end - d_count
        merged: list[tuple[int | None, str, int, int, bytes]] = []
        for i in ids.tolist():
            term = terms[i]
            row = blobs.get(term)
            if row is not None and row.n:
                _, rowids, wtf = unpack_many([row.p or b""], [row.n])
            else:
                rowids = wtf = np.zeros(0, dtype=np.int64)
            if d_count[i]:
                keep = ~np.isin(rowids, dr[d_order[d_start[i] : d_end[i]]])
                rowids, wtf = rowids[keep], wtf[keep]
            if a_count[i]:
                idx = order[a_start[i] : a_start[i] + a_count[i]]
                rowids = np.concatenate([rowids, ar[idx]])
                wtf = np.concatenate([wtf, aw[idx]])
                o = np.argsort(rowids, kind="stable")
                rowids, wtf = rowids[o], wtf[o]
                if len(rowids) > 1 and not (np.diff(rowids) > 0).all():
                    raise CorruptPostings(f"a unit given the term {term!r} twice")
            if row is None and not len(rowids):
                continue
            last = int(rowids[-1]) if len(rowids) else 0
            merged.append((row.key if row is not None else None, term, len(rowids), last, pack(rowids, wtf)))
        self._write(db, merged)
        self.row_key[ids] = UNKNOWN  # (a new row's key is its first free place)
        self.stored_empty = False

    def _spill(self, db: sqlite3.Connection) -> None:
        """Write every run: each term's pieces joined in the order they came (one buffer for them all), appended
        to its stored row, or as a new row in key order; rows are made as SQLite takes them, never listed."""
        if not self.pieces:
            return
        ids = np.concatenate([t for t, _, _ in self.pieces])
        spans = [o for _, _, o in self.pieces]
        lengths = np.concatenate([np.diff(o) for o in spans])
        base = np.cumsum([0] + [len(d) for _, d, _ in self.pieces[:-1]])
        starts = np.concatenate([o[:-1] + b for o, b in zip(spans, base.tolist(), strict=True)])
        data = np.frombuffer(b"".join(d for _, d, _ in self.pieces), dtype=np.uint8)
        self.pieces = []
        by_term = np.argsort(ids, kind="stable")  # a term's pieces stay in the order they came
        ids, starts, lengths = ids[by_term], starts[by_term], lengths[by_term]
        parts = []
        done = np.cumsum(lengths)
        a = 0
        while a < len(ids):  # gathered ~256 KB at a time (the gather's indexes take 8 bytes a byte)
            b = max(int(np.searchsorted(done, (done[a - 1] if a else 0) + (1 << 18), side="right")), a + 1)
            n = lengths[a:b]
            firsts = np.cumsum(n) - n
            parts.append(data[np.repeat(starts[a:b] - firsts, n) + np.arange(int(n.sum()))].tobytes())
            a = b
        joined = b"".join(parts)
        del data, parts, starts
        terms = unique(ids)  # each term's bytes: joined[ends[j - 1]:ends[j]]
        sizes = np.bincount(ids, weights=lengths, minlength=len(self.run_n))[terms].astype(np.int64)
        ends = np.cumsum(sizes)
        begins = ends - sizes
        keys = self.row_key[terms]
        stored = keys > NO_ROW
        db.executemany(  # (a blob concatenated is text: cast back, byte for byte)
            "UPDATE lex SET n = n + ?, last = ?, p = CAST(p || ? AS BLOB) WHERE key = ?",
            (
                (int(self.run_n[i]), int(self.run_last[i]), joined[int(a0) : int(a1)], int(k))
                for i, k, a0, a1 in zip(terms[stored], keys[stored], begins[stored], ends[stored], strict=True)
            ),
        )
        new = np.flatnonzero(~stored)
        names = self.vocab.terms
        homes = self._places(db, [names[i] for i in terms[new].tolist()])
        order = np.argsort(homes, kind="stable")  # in key order: pages fill one after another (~70% full else)
        db.executemany(
            "INSERT INTO lex(key, term, n, last, p) VALUES(?,?,?,?,?)",
            (
                (
                    int(homes[j]),
                    names[i],
                    int(self.run_n[i]),
                    int(self.run_last[i]),
                    joined[int(begins[x]) : int(ends[x])],
                )
                for j in order.tolist()
                for x in (int(new[j]),)
                for i in (int(terms[x]),)
            ),
        )
        self.run_n[terms] = 0
        self.row_key[terms] = UNKNOWN
        self.stored_empty = False

    @staticmethod
    def _places(db: sqlite3.Connection, terms: list[str]) -> np.ndarray:
        """Keys for new terms' rows: each its home key (``term_key``), or the next free one after it."""
        homes = [term_key(t) for t in terms]
        taken: set[int] = set()
        if db.execute("SELECT EXISTS (SELECT 1 FROM lex)").fetchone()[0]:
            taken.update(r[0] for r in rows_in(db, "SELECT key FROM lex WHERE key IN ({})", sorted(set(homes))))
            probe = True
        else:
            probe = False
        out = np.empty(len(homes), dtype=np.int64)
        for j, home in enumerate(homes):
            k = home
            while k in taken or (
                probe and k != home and db.execute("SELECT 1 FROM lex WHERE key = ?", (k,)).fetchone()
            ):
                taken.add(k)
                k += 1
            taken.add(k)
            out[j] = k
        return out

    @staticmethod
    def _pack_runs(new, after, a_start, a_count, order, ar, aw) -> tuple[np.ndarray, np.ndarray, bytes, np.ndarray]:
        """Each term's added postings as varints, its first gap from ``after`` (its last rowid, or 0), packed
        in one pass: (counts, last rowids, the bytes, each term's offsets in them)."""
        counts = a_count[new]
        firsts = np.cumsum(counts) - counts
        run = np.arange(int(counts.sum())) - np.repeat(firsts, counts)  # a term's run: its start in ``order`` + 0, 1..
        idx = order[np.repeat(a_start[new], counts) + run]
        rowids = ar[idx].astype(np.int64)
        data, offs = pack_runs(counts, rowids, [aw[idx]], after)
        return counts, rowids[firsts + counts - 1], data, offs

    @staticmethod
    def _write(db: sqlite3.Connection, writes: list[tuple[int | None, str, int, int, bytes]]) -> None:
        """Rows with a key replace theirs; a new term's (key None) takes its home key's first free place."""
        db.executemany(
            "UPDATE lex SET n = ?, last = ?, p = ? WHERE key = ?",
            [(n, last, p, key) for key, _t, n, last, p in writes if key is not None],
        )
        new = [(t, n, last, p) for key, t, n, last, p in writes if key is None]
        if not new:
            return
        keys = Pending._places(db, [t for t, *_ in new])
        rows = sorted((int(k), t, n, last, p) for k, (t, n, last, p) in zip(keys, new, strict=True))
        db.executemany("INSERT INTO lex(key, term, n, last, p) VALUES(?,?,?,?,?)", rows)
