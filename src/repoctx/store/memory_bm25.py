"""BM25 and units kept in memory by a long-lived process (the HTTP service, the MCP server), on either store.

SQLite FTS5 scores ``bm25()`` row by row at query time (PostgreSQL scores its postings in SQL the same way): a
question whose terms match 4,000 of Django's 12,000 units spends most of a search there. The score is a sum
over query terms of a value that depends only on the term and the unit::

    idf(t) * f(t, d) * (k1 + 1) / (f(t, d) + k1 * (1 - b + b * |d| / avgdl))

with ``f`` the column-weighted count of ``t`` in ``d``, ``|d|`` the unit's token count over all columns,
``idf(t) = ln((N - df + 0.5) / (df + 0.5))`` (at least 1e-6) and ``N``/``avgdl`` over the corpus
(``fts5_aux.c``). So each (term, unit) value can be computed once, as ``bm25s`` does, and a query becomes a
sum of a few arrays: about a millisecond instead of tens.

:class:`MemoryReads` adds this to a store, with the units a search reads (~200, mostly the same ones again
and again). It is only an accelerator: what it holds was read for one *content key* of the store (which
changes whenever units are added, removed or replaced, or a run finishes) and is used only while the key is
unchanged; a new key starts a rebuild in the background and the store's own queries answer meanwhile.
Anything it cannot answer exactly (a term FTS5 would split into a phrase, a scope whose statistics differ)
goes to the store's queries too. Scopes still come from the store's WHERE clause: the units a scope admits
are read with it once per (scope, content key) and kept as a mask.
"""

from __future__ import annotations

import re
import threading
import time
from collections import OrderedDict
from collections.abc import Callable, Hashable, Iterator, Sequence
from contextlib import contextmanager
from functools import partial
from typing import TYPE_CHECKING

import numpy as np

from repoctx.store import postings
from repoctx.store.base import EVERYTHING, Scope
from repoctx.store.postings import K1, B
from repoctx.types import Capsule, Edge, UnitHead

# indexes kept for scopes of some repositories (memory: ~12 bytes a posting; Django's sdist holds ~1.8M postings)
SCOPED_MAX = 32
SCOPED_POSTINGS = 12_000_000

# a term FTS5's unicode61 tokenizer (tokenchars '_') keeps as one token after case folding: ASCII letters,
# digits and underscores. Anything else (non-ASCII, punctuation that would make a phrase) goes to the store.
_PLAIN = re.compile(r"[A-Za-z0-9_]+")


class MemoryBM25:
    """Per-term spans of (unit, score) arrays; units are numbered densely, ``rowids`` maps them back.

    Term ``t``'s postings are ``rows[starts[i]:starts[i + 1]]`` (and the same span of ``scores``) with
    ``i = terms[t]``: 12 bytes a posting (an int32 unit number, a float64 score) and one dict entry a term."""

    def __init__(
        self,
        key: Hashable,
        terms: dict[str, int],
        starts: np.ndarray,
        rows: np.ndarray,
        scores: np.ndarray,
        rowids: np.ndarray,
        ids: list[str],
        seconds: float,
    ):
        self.key = key
        self.terms = terms  # term -> its number: its span is starts[i]:starts[i + 1]
        self.starts = starts
        self.rows = rows  # dense unit number per posting (int32)
        self.scores = scores
        self.rowids = rowids  # sorted store rowids, by dense number
        self.ids = ids  # capsule id by dense number
        self.rowid_of = dict(zip(ids, rowids.tolist(), strict=True))
        self.size = len(ids)
        self.seconds = seconds

    @staticmethod
    def answers(terms: Sequence[str]) -> bool:
        return all(_PLAIN.fullmatch(t) for t in terms)

    @staticmethod
    def _units(units: Sequence[tuple[int, str]]) -> tuple[np.ndarray, list[str]]:
        units = sorted(units)
        return np.fromiter((r for r, _ in units), dtype=np.int64, count=len(units)), [cid for _, cid in units]

    @staticmethod
    def _dense(all_rowids: np.ndarray, post_rowids: np.ndarray) -> np.ndarray:
        """Dense unit numbers (int32) of store rowids; -1 for a rowid the unit list lacks."""
        if not len(all_rowids):
            return np.full(len(post_rowids), -1, dtype=np.int32)
        rows = np.searchsorted(all_rowids, post_rowids)
        known = (rows < len(all_rowids)) & (all_rowids[np.minimum(rows, len(all_rowids) - 1)] == post_rowids)
        return np.where(known, rows, -1).astype(np.int32)

    @classmethod
    def _scored(
        cls,
        key: Hashable,
        terms: Sequence[str],
        starts: np.ndarray,
        rows: np.ndarray,
        wtf: np.ndarray,
        dl: Callable[[slice], np.ndarray],
        n_docs: float,
        avgdl: float,
        rowids: np.ndarray,
        ids: list[str],
        started: float,
    ) -> MemoryBM25:
        """``wtf`` (float64, one per posting, spans by ``starts``) becomes the scores in place, a block at a
        time (no posting-sized temporaries); ``dl(block)``: the unit lengths of a block's postings. A posting
        of a unit the id list lacks (row -1) scores 0 and points at unit 0: never returned."""
        df = np.diff(starts).astype(np.float64)
        idf = np.maximum(np.log((n_docs - df + 0.5) / (df + 0.5)), 1e-6)
        n = len(rows)
        step = 1 << 20
        for a in range(0, n, step):
            block = slice(a, min(a + step, n))
            at = np.searchsorted(starts, np.arange(block.start, block.stop), side="right") - 1
            w, dl_b = wtf[block], dl(block)
            # the same expression, in the same order, as the per-posting score always was
            w[:] = idf[at] * w * (K1 + 1) / (w + K1 * (1 - B + B * dl_b / (avgdl or 1.0)))
            unknown = rows[block] < 0
            w[unknown] = 0.0
            rows[block][unknown] = 0
        spans = {t: i for i, t in enumerate(terms)}
        return cls(key, spans, starts, rows, wtf, rowids, ids, time.perf_counter() - started)

    @classmethod
    def from_packed(
        cls,
        key: Hashable,
        rows: Sequence[tuple[str, int, bytes]],
        units: Sequence[tuple[int, str]],
        n_docs: float,
        avgdl: float,
        started: float,
        lengths: Callable[[np.ndarray], np.ndarray] | None = None,
    ) -> MemoryBM25:
        """From postings as the stores keep them (postings.py): rows of (term, n, packed postings) in term order, a
        term in one row (SQLite's, whose units' lengths ``lengths(rowids)`` gives) or in several, one a repository
        (PostgreSQL's, each posting carrying its unit's length). Decoded about a million postings at a time into
        the index's own arrays (a store of 221k units holds ~9M postings)."""
        width = 2 if lengths is not None else 3
        all_rowids, ids = cls._units(units)
        counts = np.fromiter((r[1] for r in rows), dtype=np.int64, count=len(rows))
        starts = np.zeros(len(rows) + 1, dtype=np.int64)
        np.cumsum(counts, out=starts[1:])
        dense = np.empty(int(starts[-1]), dtype=np.int32)
        wtf = np.empty(int(starts[-1]), dtype=np.float64)
        dl = np.empty(int(starts[-1]) if width == 3 else 0, dtype=np.float64)
        a = 0
        while a < len(rows):
            b = int(np.searchsorted(starts, starts[a] + (1 << 20), side="right"))
            b = max(b - 1, a + 1)
            _, rowids, w, *rest = postings.unpack_many([r[2] for r in rows[a:b]], counts[a:b].tolist(), width)
            dense[starts[a] : starts[b]] = cls._dense(all_rowids, rowids)
            wtf[starts[a] : starts[b]] = w
            if rest:
                dl[starts[a] : starts[b]] = rest[0]
            a = b
        firsts = [i for i in range(len(rows)) if i == 0 or rows[i][0] != rows[i - 1][0]]
        terms = [rows[i][0] for i in firsts]
        term_starts = starts[np.asarray([*firsts, len(rows)], dtype=np.int64)] if rows else np.zeros(1, np.int64)
        if lengths is None:
            block_dl: Callable[[slice], np.ndarray] = dl.__getitem__
        else:
            by_unit = lengths(all_rowids)

            def block_dl(block: slice) -> np.ndarray:
                return by_unit[np.maximum(dense[block], 0)] if len(by_unit) else np.zeros(block.stop - block.start)

        return cls._scored(key, terms, term_starts, dense, wtf, block_dl, n_docs, avgdl, all_rowids, ids, started)

    def _span(self, i: int) -> tuple[int, int]:
        return int(self.starts[i]), int(self.starts[i + 1])

    def doc_freqs(self, terms: Sequence[str]) -> dict[str, int]:
        return {
            t: e - s for t in dict.fromkeys(terms) if (i := self.terms.get(t)) is not None for s, e in (self._span(i),)
        }

    def top(self, terms: Sequence[str], k: int, admitted: np.ndarray | None = None) -> list[tuple[str, float]]:
        """The ``k`` best (capsule id, score) for an OR of ``terms``; ``admitted``: a mask by dense number."""
        wanted = dict.fromkeys(t.lower() for t in terms)  # (a query's case is folded, as the stores' own search does)
        spans = [self._span(self.terms[t]) for t in wanted if t in self.terms]
        if not spans or k <= 0:
            return []
        rows = np.concatenate([self.rows[s:e] for s, e in spans])
        vals = np.concatenate([self.scores[s:e] for s, e in spans])
        if admitted is not None:
            keep = admitted[rows]
            rows, vals = rows[keep], vals[keep]
        total = np.bincount(rows, weights=vals, minlength=self.size)
        hit = np.flatnonzero(total > 0)
        if len(hit) > k:
            hit = hit[np.argpartition(-total[hit], k - 1)[:k]]
        hit = hit[np.lexsort((self.rowids[hit], -total[hit]))]  # best first, ties by rowid (as FTS5 returns them)
        ids = self.ids
        return [(ids[r], s) for r, s in zip(hit.tolist(), total[hit].tolist(), strict=True)]


class MemoryBM25Cache:
    """One :class:`MemoryBM25` for a store, rebuilt in a background thread when the content key changes.

    ``current(key)`` returns the index only if it was built for ``key`` (else None, and a build starts):
    searches meanwhile go to the store, so a stale index never answers."""

    def __init__(self, build: Callable[[], MemoryBM25]):
        self._build = build
        self._index: MemoryBM25 | None = None
        self._building: Hashable | None = None
        self._lock = threading.Lock()
        self.error: str | None = None

    def current(self, key: Hashable, wait: bool = False) -> MemoryBM25 | None:
        index = self._index
        if index is not None and index.key == key:
            return index
        with self._lock:
            if self._building is None:
                self._building = key
                threading.Thread(target=self._run, name="repoctx-bm25", daemon=True).start()
        if wait:
            deadline = time.monotonic() + 600
            while time.monotonic() < deadline:
                index = self._index
                if index is not None and index.key == key:
                    return index
                with self._lock:
                    if self._building is None:  # built for another key (the content moved on), or failed
                        if self.error or (index is not None and index.key != key):
                            break
                time.sleep(0.02)
        return None

    def _run(self) -> None:
        try:
            index = self._build()  # reads the key with the data it describes
        except Exception as e:  # noqa: BLE001 - the store keeps answering with its own queries
            self.error = f"{type(e).__name__}: {str(e).splitlines()[0] if str(e) else ''}"
            index = None
        with self._lock:
            if index is not None:
                self._index, self.error = index, None
            self._building = None


class MemoryReads:
    """For a store in a long-lived process: BM25, document frequencies and units from memory.

    The store provides ``_content_key()`` (a tuple that changes whenever the lexical index may have),
    ``_build_memory_bm25()`` (a :class:`MemoryBM25` of the current content, its key read in the same
    snapshot), ``_rowids_where(scope)`` (the rowids its WHERE clause admits), ``_units_by_id(ids)``
    ((rowid, capsule) pairs, unscoped), and ``_memory_covers(scope, key)``: whether the in-memory statistics
    are the ones the store would use for ``scope`` and whether the scope needs a mask, as (covers, masked).

    A store whose statistics follow the scope's repositories (PostgreSQL) also provides ``_scoped_content_key(
    repos)`` and ``_build_scoped_bm25(repos)``: a scope naming some of its repositories then reads a
    :class:`MemoryBM25` of those repositories alone, built on the first search that asks for them and kept while
    their own content is unchanged (a write to another repository leaves it valid). A service whose keys each see
    one repository holds the repositories its keys ask for, not the whole store.
    """

    if TYPE_CHECKING:  # what the store provides (declared for the type checker only: the store's own win)

        def _content_key(self) -> tuple: ...
        def _build_memory_bm25(self) -> MemoryBM25: ...
        def _rowids_where(self, scope: Scope) -> list[int]: ...
        def _units_by_id(self, ids: list[str]) -> list[tuple[int, Capsule]]: ...
        def _read_heads(self, ids: list[str], scope: Scope) -> dict[str, UnitHead]: ...
        def _memory_covers(self, scope: Scope, key: tuple) -> tuple[bool, bool]: ...
        def _edges(self, col: str, ids: list[str], kinds: tuple[str, ...], scope: Scope) -> list[Edge]: ...

    def _scoped_content_key(self, repos: tuple[str, ...]) -> Hashable | None:
        """The content key of ``repos`` alone (None: this store keeps no index per scope)."""
        return None

    def _build_scoped_bm25(self, repos: tuple[str, ...]) -> MemoryBM25:
        raise NotImplementedError

    def _init_memory(self, enabled: bool) -> None:
        self._bm25 = MemoryBM25Cache(self._build_memory_bm25) if enabled else None
        self._units: dict[str, tuple[int, Capsule] | None] = {}  # None: the store has no such unit
        self._units_key: Hashable | None = None
        self._units_lock = threading.Lock()
        self._admitted: dict[tuple, frozenset] = {}
        self._edge_lists: dict[tuple, dict[str, list]] = {}
        self._edges_key: Hashable | None = None
        self._masks: dict[tuple, np.ndarray] = {}
        self._pin = threading.local()
        # indexes of some repositories (scopes whose statistics are not the whole store's), least recently used first
        self._scoped: OrderedDict[tuple[str, ...], MemoryBM25Cache] = OrderedDict()
        self._scoped_keys: tuple[Hashable, dict[tuple[str, ...], Hashable | None]] = (None, {})
        self._scoped_lock = threading.Lock()

    @property
    def memory_enabled(self) -> bool:
        return self._bm25 is not None

    @contextmanager
    def reading(self) -> Iterator[None]:
        """One search's reads from memory use one content key, read once at the start (on PostgreSQL a round
        trip; SQLite a pragma) instead of once per read. Nested uses keep the outer key."""
        if self._bm25 is None or getattr(self._pin, "key", None) is not None:
            yield
            return
        self._pin.key = self._content_key()
        try:
            yield
        finally:
            self._pin.key = None

    def _key(self) -> tuple:
        """The content key: the one pinned by :meth:`reading` on this thread, else read now."""
        key = getattr(self._pin, "key", None)
        return key if key is not None else self._content_key()

    def warm_lexical(self, wait: bool = False) -> bool:
        """Start (or wait for) the in-memory BM25 build; True when it is ready for the current content."""
        return self._bm25 is not None and self._bm25.current(self._content_key(), wait=wait) is not None

    def scoped_building(self) -> int:
        """How many indexes of some repositories are being built now (their scopes are answered by the store's
        queries meanwhile): a health check says so."""
        with self._scoped_lock:
            return sum(1 for c in self._scoped.values() if c._building is not None)

    def _memory_index(self, scope: Scope) -> tuple[MemoryBM25 | None, np.ndarray | None]:
        """The in-memory BM25 for ``scope`` and its mask (None: the scope admits everything)."""
        if self._bm25 is None:
            return None, None
        key = self._key()
        covers, masked = self._memory_covers(scope, key)
        if covers:
            mem = self._bm25.current(key)
        elif scope.repos:
            mem = self._scoped_index(tuple(sorted(set(scope.repos))), key)
        else:
            return None, None
        if mem is None:
            return None, None
        return mem, (self._mask(scope, key, mem) if masked else None)

    def _scoped_index(self, repos: tuple[str, ...], key: Hashable) -> MemoryBM25 | None:
        """The index of ``repos`` alone if built for their current content, else None (and a build starts)."""
        with self._scoped_lock:
            known_for, keys = self._scoped_keys
            if known_for != key:  # the store's content moved: each scope's own key is read again, once
                known_for, keys = self._scoped_keys = (key, {})
        if repos in keys:
            skey = keys[repos]
        else:
            skey = keys[repos] = self._scoped_content_key(repos)
        if skey is None:
            return None
        with self._scoped_lock:
            cache = self._scoped.get(repos)
            if cache is None:
                cache = self._scoped[repos] = MemoryBM25Cache(partial(self._build_scoped_bm25, repos))
                self._evict_scoped(keep=repos)
            else:
                self._scoped.move_to_end(repos)
        return cache.current(skey)

    def _evict_scoped(self, keep: tuple[str, ...]) -> None:
        """Bound the scoped indexes: at most SCOPED_MAX of them and SCOPED_POSTINGS postings in all, least
        recently used dropped first (a dropped one is rebuilt when asked for again)."""

        def size(c: MemoryBM25Cache) -> int:
            return len(c._index.rows) if c._index is not None else 0

        total = sum(size(c) for c in self._scoped.values())
        for repos in list(self._scoped):
            if len(self._scoped) <= SCOPED_MAX and total <= SCOPED_POSTINGS:
                break
            if repos != keep:
                total -= size(self._scoped.pop(repos))

    def _memory_lexical(self, terms: list[str], k: int, scope: Scope) -> list[tuple[str, float]] | None:
        if self._bm25 is None or not MemoryBM25.answers(terms):
            return None
        mem, mask = self._memory_index(scope)
        if mem is None:
            return None
        return mem.top(terms, k, mask)

    def _memory_doc_freqs(self, terms: list[str], scope: Scope) -> dict[str, int] | None:
        mem, _ = self._memory_index(scope)
        return None if mem is None else mem.doc_freqs(terms)

    def _admitted_rowids(self, scope: Scope, key: Hashable) -> frozenset:
        """The rowids the scope's WHERE clause admits, read once per (scope, content key)."""
        got = self._admitted.get((scope, key))
        if got is None:
            if len(self._admitted) > 64:
                self._admitted.clear()
            got = self._admitted[(scope, key)] = frozenset(self._rowids_where(scope))
        return got

    def _mask(self, scope: Scope, key: Hashable, mem: MemoryBM25) -> np.ndarray:
        got = self._masks.get((scope, mem.key))
        if got is None:
            if len(self._masks) > 64:
                self._masks.clear()
            allowed = self._admitted_rowids(scope, key)
            got = self._masks[(scope, mem.key)] = np.isin(mem.rowids, np.fromiter(allowed, np.int64, len(allowed)))
        return got

    def _memory_edges(self, col: str, ids: list[str], kinds: tuple[str, ...], scope: Scope) -> list | None:
        """Edges by id, read once per content key (a search reads the edges of its five best units, often
        the same ones), then restricted to the scope: its repositories (an edge's ends are in the source's
        repository, the id's prefix), and under path rules or grants both ends tested against the scope's
        admitted rowids (its WHERE clause, read once) instead of a WHERE per edge end."""
        if self._bm25 is None:
            return None
        path_rules = bool(scope.include or scope.exclude or scope.grants is not None)
        mem = None
        if path_rules:
            mem, _ = self._memory_index(scope)
            if mem is None:
                return None
        key = self._key()
        with self._units_lock:
            if self._edges_key != key:
                self._edge_lists, self._edges_key = {}, key
            lists = self._edge_lists.setdefault((col, kinds), {})
        wanted = list(dict.fromkeys(ids))
        missing = [i for i in wanted if i not in lists]
        if missing:
            found: dict[str, list] = {i: [] for i in missing}
            for e in self._edges(col, missing, kinds, EVERYTHING):
                end = e.src if col == "src" else e.dst
                assert end is not None  # the edges were read by this end, one of the ids
                found[end].append(e)
            lists.update(found)
            if len(lists) > 200_000:  # bounded like the units
                with self._units_lock:
                    self._edge_lists = {}
        edges = [e for i in wanted for e in lists.get(i, ())]
        if scope.repos:
            repos = set(scope.repos)
            edges = [e for e in edges if e.src.split(":", 1)[0] in repos]
        if not path_rules:
            return edges
        assert mem is not None  # read above whenever there are path rules
        allowed, rid = self._admitted_rowids(scope, mem.key), mem.rowid_of
        return [e for e in edges if rid.get(e.src, -1) in allowed and (e.dst is None or rid.get(e.dst, -1) in allowed)]

    def unit_heads(self, ids: list[str], scope: Scope = EVERYTHING) -> dict[str, UnitHead]:
        """The units' heads (what a search asks of every candidate), from the units kept in memory when they are,
        else from the store (``_read_heads``: the same WHERE as its full reads)."""
        if not ids:
            return {}
        remembered = self._memory_capsules(ids, scope)
        if remembered is not None:
            return {c.id: UnitHead.of(c) for c in remembered}
        return self._read_heads(ids, scope)

    def _memory_capsules(self, ids: list[str], scope: Scope) -> list[Capsule] | None:
        """Units read once per content key and kept; the scope's rowids (its WHERE clause) filter them.
        The objects are shared: callers must not change them (none does)."""
        if self._bm25 is None:
            return None
        key = self._key()
        covers, masked = self._memory_covers(scope, key)
        with self._units_lock:
            if self._units_key != key:
                self._units, self._units_key = {}, key
            units = self._units
        missing = [i for i in dict.fromkeys(ids) if i not in units]
        if missing:
            found = {capsule.id: (rowid, capsule) for rowid, capsule in self._units_by_id(missing)}
            # an id the store does not hold (an edge to a unit since replaced) is remembered as absent too
            units.update({i: found.get(i) for i in missing})
            if len(units) > 200_000:  # a bound for huge stores: start over rather than grow without end
                with self._units_lock:
                    if self._units is units:
                        self._units = {}
        got = [u for i in ids if (u := units.get(i)) is not None]
        if covers and not masked:
            return [c for _, c in got]
        allowed = self._admitted_rowids(scope, key)
        return [c for r, c in got if r in allowed]
