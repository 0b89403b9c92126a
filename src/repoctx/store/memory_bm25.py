"""FTS5's BM25, precomputed in memory for a long-lived process (the HTTP service, the MCP server).

SQLite FTS5 scores ``bm25()`` row by row at query time: a question whose terms match 4,000 of Django's
12,000 units spends most of a search there. Its score is a sum over query terms of a value that depends
only on the term and the row::

    idf(t) * f(t, d) * (k1 + 1) / (f(t, d) + k1 * (1 - b + b * |d| / avgdl))

with ``f`` the column-weighted count of ``t`` in ``d``, ``|d|`` the row's token count over all columns,
``idf(t) = ln((N - df + 0.5) / (df + 0.5))`` (at least 1e-6) and ``N``/``avgdl`` over the whole FTS table
(``fts5_aux.c``). So each (term, row) value can be computed once, as ``bm25s`` does, and a query becomes a
sum of a few arrays: about a millisecond instead of tens.

:class:`MemoryBM25` is only an accelerator. It is built from the index's own FTS5 data (its
``instance`` vocabulary: the same tokens, the same case folding), is used only while the index's content
key is the one it was built for, and anything it cannot answer exactly (a term FTS5 would split into a
phrase) goes back to FTS5. Scope rules still apply: the caller passes the rows the scope admits, computed
by the store's WHERE clause.
"""
from __future__ import annotations

import re
import threading
import time
from typing import Callable, Hashable, Sequence

import numpy as np

K1, B = 1.2, 0.75

# a term FTS5's unicode61 tokenizer (tokenchars '_') keeps as one token after case folding: ASCII letters,
# digits and underscores. Anything else (non-ASCII, punctuation that would make a phrase) goes to FTS5.
_PLAIN = re.compile(r"[A-Za-z0-9_]+")


class MemoryBM25:
    """Per-term arrays of (row, score), sorted by term; ``top`` sums them for a query."""

    def __init__(self, key: Hashable, terms: dict[str, tuple[int, int]], rows: np.ndarray, scores: np.ndarray,
                 ids: list[str | None], seconds: float):
        self.key = key
        self.terms = terms
        self.rows = rows
        self.scores = scores
        self.ids = ids  # capsule id by rowid (None: no capsule)
        self.size = len(ids)
        self.seconds = seconds

    @staticmethod
    def answers(terms: Sequence[str]) -> bool:
        return all(_PLAIN.fullmatch(t) for t in terms)

    @classmethod
    def build(cls, db, weights: dict[str, float], key: Hashable, table: str = "fts") -> "MemoryBM25":
        """Read the FTS5 table's token instances (one pass, grouped by term and row in SQL)."""
        start = time.perf_counter()
        db.execute(f"CREATE VIRTUAL TABLE IF NOT EXISTS temp.{table}_instances USING fts5vocab(main, '{table}', "
                   "'instance')")
        case = " ".join(f"WHEN '{col}' THEN {float(w)!r}" for col, w in weights.items())
        got = db.execute(f"SELECT term, doc, sum(CASE col {case} ELSE 0 END), count(*) FROM temp.{table}_instances "
                         "GROUP BY term, doc").fetchall()
        n_rows = db.execute(f"SELECT count(*) FROM {table}").fetchone()[0]
        id_rows = db.execute("SELECT rowid, id FROM capsules").fetchall()
        size = max([r[0] for r in id_rows] + [r[1] for r in got[-1:]] + [0]) + 1
        ids: list[str | None] = [None] * size
        for rowid, cid in id_rows:
            ids[rowid] = cid
        if not got:
            return cls(key, {}, np.zeros(0, np.int64), np.zeros(0, np.float64), ids, time.perf_counter() - start)
        term_col, doc_col, wtf_col, cnt_col = zip(*got)
        rows = np.fromiter(doc_col, dtype=np.int64, count=len(got))
        wtf = np.fromiter(wtf_col, dtype=np.float64, count=len(got))
        dl = np.bincount(rows, weights=np.fromiter(cnt_col, dtype=np.float64, count=len(got)), minlength=size)
        avgdl = float(dl.sum()) / n_rows if n_rows else 1.0
        terms: dict[str, tuple[int, int]] = {}
        first = 0
        for i in range(1, len(term_col) + 1):  # rows come grouped by term
            if i == len(term_col) or term_col[i] != term_col[first]:
                terms[term_col[first]] = (first, i)
                first = i
        df = np.empty(len(got), dtype=np.float64)
        for s, e in terms.values():
            df[s:e] = e - s
        idf = np.maximum(np.log((n_rows - df + 0.5) / (df + 0.5)), 1e-6)
        scores = idf * wtf * (K1 + 1) / (wtf + K1 * (1 - B + B * dl[rows] / (avgdl or 1.0)))
        return cls(key, terms, rows, scores, ids, time.perf_counter() - start)

    def top(self, terms: Sequence[str], k: int, admitted: np.ndarray | None = None) -> list[tuple[str, float]]:
        """The ``k`` best (capsule id, score) for an OR of ``terms``; ``admitted``: a boolean mask by rowid."""
        spans = [self.terms[t.lower()] for t in dict.fromkeys(terms) if t.lower() in self.terms]
        if not spans or k <= 0:
            return []
        rows = np.concatenate([self.rows[s:e] for s, e in spans])
        vals = np.concatenate([self.scores[s:e] for s, e in spans])
        if admitted is not None:
            if len(admitted) < self.size:
                admitted = np.concatenate([admitted, np.zeros(self.size - len(admitted), dtype=bool)])
            keep = admitted[rows]
            rows, vals = rows[keep], vals[keep]
        total = np.bincount(rows, weights=vals, minlength=self.size)
        hit = np.flatnonzero(total)
        if len(hit) > k:
            hit = hit[np.argpartition(-total[hit], k - 1)[:k]]
        order = sorted(hit.tolist(), key=lambda r: (-total[r], r))
        return [(self.ids[r], float(total[r])) for r in order if self.ids[r] is not None]


class MemoryBM25Cache:
    """One :class:`MemoryBM25` for a store, rebuilt in a background thread when the content key changes.

    ``current(key)`` returns the index only if it was built for ``key`` (else None, and a build starts):
    searches meanwhile go to FTS5, so a stale index never answers."""

    def __init__(self, build: Callable[[Hashable], MemoryBM25]):
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
            if self._building != key:
                self._building = key
                thread = threading.Thread(target=self._run, args=(key,), name="repoctx-bm25", daemon=True)
                thread.start()
            else:
                thread = None
        if wait:
            deadline = time.monotonic() + 300
            while time.monotonic() < deadline:
                index = self._index
                if index is not None and index.key == key:
                    return index
                if self._building != key:
                    break
                time.sleep(0.02)
        return None

    def _run(self, key: Hashable) -> None:
        try:
            index = self._build(key)
        except Exception as e:  # the index keeps answering through FTS5
            self.error = f"{type(e).__name__}: {str(e).splitlines()[0] if str(e) else ''}"
            with self._lock:
                if self._building == key:
                    self._building = None
            return
        with self._lock:
            if self._building == key:
                self._index = index
                self._building = None
