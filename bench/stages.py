"""What each stage of an in-process standard search costs, on Django 4.2 (the evaluation's cached index and
vectors: ``repoctx eval`` builds them).

    python bench/stages.py [--json] [--queries N]

The questions are the Django issue texts of the SWE-bench dev split (``/work/shared/eval/swebench_lite_dev.jsonl``,
or ``--dataset``), searched at k=10 after a warm-up. Each search's time is split by wrapping what the first stage
calls (the search's own code runs unchanged):

- exact: ``exact_hits``, ``resolve_paths`` and ``written_units`` (the identifiers, paths and lines a question names,
  looked up; the lines lane's units found);
- lexical: ``query_terms`` and the store's BM25 (the whole question and its title line);
- dense: the question's vector and the vector search (its title line too);
- graph: ``expand_graph`` (callers and callees of the top units);
- fusion: the rest of the first stage (reciprocal-rank fusion, unit heads, demotions, reading the units);
- linear second stage: ``Index._second_stage`` (rerank.py over the first 30 units);
- file prior: ``Index._file_prior`` (the first ``hybrid.FILE_PRIOR_DEPTH`` candidates' files ranked as a file-level
  search ranks them, and the first 30 units re-ordered by their own place and their file's);
- function windows, with ``REPOCTX_FUNCTION_WINDOWS=1`` only: ``hybrid.window_shares`` (the candidates' further body
  windows read, embedded when the vector cache lacks them, and compared with the question and its title line).
  ``--vector-cache PATH`` points the search at another vector cache (an empty one: every window embedded once).

(A cross-encoder stage was timed in session 31 with code that was not merged and is not in this repository; its
figures stay in docs/speed.md.)

Prints p50 / p95 wall milliseconds of each stage and of the whole search (the sum), the p50 of the process's CPU
milliseconds in it (every thread: what a stage costs whatever else the machine runs), and the machine's load.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import time
from pathlib import Path

from repoctx.config import Settings
from repoctx.evaluate.runner import open_corpus_index
from repoctx.retrieve import hybrid
from repoctx.retrieve.hybrid import SearchOptions

sys.path.insert(0, str(Path(__file__).resolve().parent))
from index_speed import _pct  # one percentile for every bench table

DJANGO = {"instance_id": "stages", "corpus": {"pypi": "Django", "version": "4.2", "path_prefix": ""}}
DATASET = Path("/work/shared/eval/swebench_lite_dev.jsonl")
# what the first stage calls, timed in place, and the stage each counts for
IN_FIRST_STAGE = {
    "exact_hits": "exact",
    "resolve_paths": "exact",
    "written_units": "exact",
    "query_terms": "lexical",
    "expand_graph": "graph",
    "window_shares": "function windows",
}
STAGES = ("exact", "lexical", "dense", "function windows", "fusion", "graph", "linear second stage", "file prior")


class Clock:
    """Seconds spent in each stage during one search: wall time, and the process's CPU time (every thread; what
    a stage costs whatever else the machine runs)."""

    def __init__(self) -> None:
        self.spent: dict[str, float] = {}
        self.cpu: dict[str, float] = {}

    def timed(self, stage: str, fn):
        def run(*a, **kw):
            t0, c0 = time.perf_counter(), time.process_time()
            try:
                return fn(*a, **kw)
            finally:
                self.spent[stage] = self.spent.get(stage, 0.0) + time.perf_counter() - t0
                self.cpu[stage] = self.cpu.get(stage, 0.0) + time.process_time() - c0

        return run


class Timed:
    """``obj`` with its method ``method`` timed as ``stage`` (the store's BM25 reads, the dense index's search)."""

    def __init__(self, obj, method: str, stage: str, clock: Clock) -> None:
        self._obj = obj
        setattr(self, method, clock.timed(stage, getattr(obj, method)))

    def __getattr__(self, name):
        return getattr(self._obj, name)


def questions(path: Path, n: int) -> list[str]:
    rows = [json.loads(x) for x in path.read_text().splitlines() if x.strip()]
    return [r["query"] for r in rows if r.get("repo") == "django/django"][:n]


def run(ix, qs: list[str]) -> tuple[dict[str, list[float]], dict[str, list[float]]]:
    """Each question searched as the product searches it (``Index._standard``: the first stage, the second, the file
    prior), with what each stage calls timed in place."""
    clock = Clock()
    store = Timed(ix.store, "lexical", "lexical", clock)  # the first stage's reads only (the later stages keep theirs)
    real = ix.dense_index()
    dense = Timed(real, "search", "dense", clock) if real is not None else None
    patched = {name: getattr(hybrid, name) for name in ("search", *IN_FIRST_STAGE)}
    first = [0.0, 0.0]  # the first stage's wall and CPU seconds in this search

    def first_stage(_store, *a, **kw):
        t0, c0 = time.perf_counter(), time.process_time()
        try:
            return patched["search"](store, *a, **kw)
        finally:
            first[0] += time.perf_counter() - t0
            first[1] += time.process_time() - c0

    hybrid.search = first_stage  # Index._stages imports it when it runs
    for name, stage in IN_FIRST_STAGE.items():
        setattr(hybrid, name, clock.timed(stage, patched[name]))
    ix._second_stage = clock.timed("linear second stage", ix._second_stage)  # on the instance, for this run
    ix._file_prior = clock.timed("file prior", ix._file_prior)
    out: dict[str, list[float]] = {s: [] for s in (*STAGES, "total")}
    cpu: dict[str, list[float]] = {s: [] for s in (*STAGES, "total")}
    named = {*IN_FIRST_STAGE.values(), "lexical", "dense"}  # inside the first stage: and the BM25 and vector reads
    opts = SearchOptions(k=10)
    try:
        for i, q in enumerate(qs):
            for warm in (True, False) if i < 2 else (False,):
                clock.spent, clock.cpu, first[:] = {}, {}, [0.0, 0.0]
                ix._standard(q, opts.k, opts.level, opts, ix.scope(None), dense)
                if warm:
                    continue
                clock.spent["fusion"] = max(0.0, first[0] - sum(v for k, v in clock.spent.items() if k in named))
                clock.cpu["fusion"] = max(0.0, first[1] - sum(v for k, v in clock.cpu.items() if k in named))
                for s in STAGES:
                    if s in clock.spent:
                        out[s].append(clock.spent[s] * 1000)
                        cpu[s].append(clock.cpu[s] * 1000)
                out["total"].append(sum(clock.spent.values()) * 1000)
                cpu["total"].append(sum(clock.cpu.values()) * 1000)
    finally:
        for name, fn in patched.items():
            setattr(hybrid, name, fn)
        del ix._second_stage, ix._file_prior
    return out, cpu


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--json", action="store_true")
    ap.add_argument("--queries", type=int, default=40)
    ap.add_argument("--dataset", type=Path, default=DATASET)
    ap.add_argument("--vector-cache", type=Path, help="the vector cache searches read (default: REPOCTX_CACHE's)")
    args = ap.parse_args(argv)
    settings = Settings.from_env(vector_cache=args.vector_cache)
    ix = open_corpus_index(DJANGO, False, settings)
    ix.update()
    qs = questions(args.dataset, args.queries)
    times, cpu = run(ix, qs)
    ix.close()
    load = os.getloadavg()
    rows = {
        s: {
            "p50_ms": round(_pct(v, 0.5), 1),
            "p95_ms": round(_pct(v, 0.95), 1),
            "cpu_p50_ms": round(_pct(cpu[s], 0.5), 1),
            "n": len(v),
        }
        for s, v in times.items()
        if v
    }
    if args.json:
        out = {
            "load": [round(x, 2) for x in load],
            "embedder": settings.embedder,
            "function_windows": settings.function_windows,
            "stages": rows,
        }
        print(json.dumps(out, indent=1))
        return 0
    print(
        f"Django 4.2, {len(qs)} SWE-bench dev issue texts, k=10, embedder {settings.embedder}"
        f"{', function windows' if settings.function_windows else ''}; "
        f"load {load[0]:.2f} {load[1]:.2f} {load[2]:.2f} (2 cores)\n"
    )
    print("| stage | p50 ms | p95 ms | CPU p50 ms (all threads) |\n|---|---|---|---|")
    for s, r in rows.items():
        print(f"| {s} | {r['p50_ms']} | {r['p95_ms']} | {r['cpu_p50_ms']} |")
    return 0


if __name__ == "__main__":
    sys.exit(main())
