"""What the standard search's second stage costs and changes, on Django 4.2 (the evaluation's cached
index and vectors: ``repoctx eval`` builds them).

    python bench/second_stage.py [--json]

The 200 queries of ``bench/index_speed.py`` (docstring first lines of random units, and identifiers),
k=10, run three times on one index: the first stage alone (``SearchOptions(rerank=False)``); with the
second stage while the unit names it compares are not in the vector cache yet (a fresh cache file);
and again with those names cached. Prints p50 / p95 latency and how often a docstring's own unit is in
the top 10 (and first), after a short warm-up of each.
"""
from __future__ import annotations

import argparse
import json
import sys
import tempfile
import time
from dataclasses import replace
from pathlib import Path

from repoctx.config import Settings
from repoctx.evaluate.runner import open_corpus_index
from repoctx.retrieve.hybrid import SearchOptions

sys.path.insert(0, str(Path(__file__).resolve().parent))
from index_speed import N_WARMUP, _pct, make_queries  # noqa: E402  (the same queries)

DJANGO = {"instance_id": "second-stage", "corpus": {"pypi": "Django", "version": "4.2", "path_prefix": ""}}


def run(ix, queries, rerank: bool) -> dict:
    opts = SearchOptions(k=10, rerank=rerank)
    times, own1, own10, n_own = [], 0, 0, 0
    for _, q, _ in queries[:N_WARMUP]:
        ix.search(q + " (warm-up)", k=10, options=opts)
    for _, q, cid in queries:
        t0 = time.perf_counter()
        hits = ix.search(q, k=10, options=opts)
        times.append((time.perf_counter() - t0) * 1000)
        if cid is not None:
            n_own += 1
            ids = [h.capsule.id for h in hits]
            own10 += cid in ids
            own1 += bool(ids) and ids[0] == cid
    return {"p50_ms": round(_pct(times, 0.5), 1), "p95_ms": round(_pct(times, 0.95), 1),
            "own_at_1": round(100 * own1 / max(n_own, 1), 1), "own_at_10": round(100 * own10 / max(n_own, 1), 1),
            "n": len(times)}


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--json", action="store_true")
    args = ap.parse_args(argv)
    with tempfile.TemporaryDirectory() as tmp:
        base = Settings.from_env()
        ix = open_corpus_index(DJANGO, False, base)
        ix.update()
        queries = make_queries(ix)
        rows = {"first stage only": run(ix, queries, False)}
        ix.close()
        # a fresh cache file holds no unit names yet; the units' own vectors come from the index
        fresh = replace(base, vector_cache=Path(tmp) / "names.sqlite")
        ix = open_corpus_index(DJANGO, False, fresh)
        rows["second stage, names not cached"] = run(ix, queries, True)
        ix.close()
        ix = open_corpus_index(DJANGO, False, fresh)  # another process's view: names from the cache file
        rows["second stage, names cached"] = run(ix, queries, True)
        ix.close()
    if args.json:
        print(json.dumps(rows, indent=1))
        return 0
    print(f"Django 4.2, {rows['first stage only']['n']} queries, k=10, embedder {base.embedder}\n")
    print("| search | p50 ms | p95 ms | docstring's own unit first | in top 10 |\n|---|---|---|---|---|")
    for name, r in rows.items():
        print(f"| {name} | {r['p50_ms']} | {r['p95_ms']} | {r['own_at_1']} % | {r['own_at_10']} % |")
    return 0


if __name__ == "__main__":
    sys.exit(main())
