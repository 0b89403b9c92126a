"""Localization metrics (as in LocAgent, arXiv:2503.09089). Pure functions, no I/O.

* ``acc@k`` (strict): 1.0 if *all* gold items are in the top k, else 0.0.
* ``recall@k``: fraction of gold items in the top k.
* ``mrr``: reciprocal rank of the first gold item (0.0 if none is ranked).

Ranked lists are de-duplicated (first occurrence wins) before scoring.
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Sequence

__all__ = ["rank_metrics", "aggregate", "function_key", "normalize_gold_function", "dedupe", "mcnemar"]

DEFAULT_KS: tuple[int, ...] = (1, 3, 5, 10)


def dedupe(items: Iterable[str]) -> list[str]:
    """Items in order with later duplicates removed."""
    return list(dict.fromkeys(items))


def rank_metrics(ranked: Sequence[str], gold: Sequence[str], ks: Sequence[int] = DEFAULT_KS) -> dict[str, float]:
    """``acc@k``, ``recall@k`` for each k and ``mrr`` of one ranked list against its gold set.

    With an empty gold set every metric is 0.0 (such rows should be left out by the caller).
    """
    ranked = dedupe(ranked)
    gold_set = set(gold)
    out: dict[str, float] = {}
    for k in ks:
        hits = len(gold_set.intersection(ranked[:k])) if gold_set else 0
        out[f"acc@{k}"] = 1.0 if gold_set and hits == len(gold_set) else 0.0
        out[f"recall@{k}"] = hits / len(gold_set) if gold_set else 0.0
    mrr = 0.0
    if gold_set:
        for i, item in enumerate(ranked, start=1):
            if item in gold_set:
                mrr = 1.0 / i
                break
    out["mrr"] = mrr
    return out


def aggregate(per_row: Sequence[dict[str, float]]) -> dict[str, float]:
    """Mean of every metric over rows, x100 and rounded to 1 decimal, plus ``n`` (number of rows).

    Metrics missing from some rows are averaged over the rows that have them.
    """
    sums: dict[str, float] = {}
    counts: dict[str, int] = {}
    for row in per_row:
        for key, value in row.items():
            if isinstance(value, bool) or not isinstance(value, (int, float)):
                continue
            sums[key] = sums.get(key, 0.0) + float(value)
            counts[key] = counts.get(key, 0) + 1
    out: dict[str, float] = {key: round(100.0 * sums[key] / counts[key], 1) for key in sums}
    out["n"] = len(per_row)
    return out


def _norm_path(path: str) -> str:
    path = path.replace("\\", "/")
    while path.startswith("./"):
        path = path[2:]
    return path.lstrip("/")


def function_key(path: str, qualname: str) -> str:
    """The gold function format ``path.py:Class.method`` (``path.py:func`` for a function)."""
    return f"{_norm_path(path)}:{qualname.strip()}"


def normalize_gold_function(s: str) -> str:
    """Canonical ``path:qualname`` for a gold (or predicted) function string.

    Normalizes path separators / a leading ``./`` and surrounding whitespace; the split is on the
    first ``:`` after the ``.py`` file name so qualnames stay intact.
    """
    s = s.strip()
    idx = s.find(".py:")
    if idx >= 0:
        path, qual = s[: idx + 3], s[idx + 4 :]
    elif ":" in s:
        path, qual = s.split(":", 1)
    else:
        return _norm_path(s)
    return function_key(path, qual)


def mcnemar(
    before: Sequence[dict[str, float]], after: Sequence[dict[str, float]], metric: str
) -> tuple[int, int, float]:
    """Rows gained and lost on one 0/1 metric, and the exact two-sided McNemar (binomial) p-value."""
    gained = sum(1 for a, b in zip(before, after, strict=True) if not a.get(metric) and b.get(metric))
    lost = sum(1 for a, b in zip(before, after, strict=True) if a.get(metric) and not b.get(metric))
    n = gained + lost
    if n == 0:
        return 0, 0, 1.0
    tail = sum(math.comb(n, i) for i in range(0, min(gained, lost) + 1)) / 2**n
    return gained, lost, min(1.0, 2 * tail)
