"""Indexing and search speed on a real repository: Django 4.2 (the PyPI wheel, unpacked; never run).

    python bench/index_speed.py                 # markdown table
    python bench/index_speed.py --json          # the numbers as JSON
    python bench/index_speed.py --dense         # also with embeddings (Settings(embedder="local")), if supported
    python bench/index_speed.py --profile edit  # plus a cProfile top-15 (cumulative) of one phase
    python bench/index_speed.py --backend both  # SQLite and PostgreSQL (REPOCTX_DATABASE_URL, or a server
                                                # started from pip as the tests do) side by side, one run

The wheel and its unpacked tree live in the corpus cache (``$REPOCTX_CACHE`` or ``~/.cache/repoctx``,
see ``repoctx.evaluate.corpus``); each run copies the tree to a temporary directory so edits never touch the
cache. Phases:

* cold index — ``Index.update()`` on an empty index, in a child process so its peak RSS is its own
  (``os.wait4`` rusage of that child);
* no-op reindex — ``update()`` with nothing changed, median of 3;
* one-file edit — append a new function to ``django/db/models/query.py`` and ``update()``, median of
  3 different edits;
* search — 200 queries at k=10, deterministic (fixed seed): ~180 natural-language questions made from
  docstring first lines of random capsules plus 20 identifier queries; p50 / p95 after a short warm-up.
"""
from __future__ import annotations

import argparse
import cProfile
import io
import json
import os
import pstats
import random
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from dataclasses import fields
from pathlib import Path

from repoctx import Index, Settings
from repoctx.evaluate.corpus import fetch_wheel, materialize

CORPUS_ROW = {"corpus": {"pypi": "Django", "version": "4.2", "path_prefix": ""}, "instance_id": "bench"}
EDIT_FILE = "django/db/models/query.py"
SEED = 20240601
N_QUERIES = 200
N_IDENT = 20
N_WARMUP = 5
GOALS = {"cold_s": 10.0, "noop_s": 0.5, "edit_s": 0.3, "search_p50_ms": 20.0}


# --------------------------------------------------------------------------- helpers


def _settings(index_dir: Path, embedder: str, excludes: tuple[str, ...] = (), database_url: str = "") -> Settings:
    # a private vector cache per run: the cold number is a real cold embed, not a cache hit
    kw: dict = {"index_dir": index_dir, "vector_cache": index_dir / "vectors-cache.sqlite",
                "database_url": database_url or None}
    if excludes:
        kw["extra_ignores"] = tuple(excludes)
    if "embedder" in {f.name for f in fields(Settings)}:
        kw["embedder"] = embedder
    return Settings(**kw)


def _profile_top(prof: cProfile.Profile, n: int = 15) -> str:
    buf = io.StringIO()
    pstats.Stats(prof, stream=buf).strip_dirs().sort_stats("cumulative").print_stats(n)
    return buf.getvalue()


def _pct(values: list[float], q: float) -> float:
    s = sorted(values)
    if not s:
        return float("nan")
    pos = (len(s) - 1) * q
    lo, hi = int(pos), min(int(pos) + 1, len(s) - 1)
    return s[lo] + (s[hi] - s[lo]) * (pos - lo)


def _load() -> str:
    one, five, _ = os.getloadavg()
    return f"{one:.2f}/{five:.2f}"


# --------------------------------------------------------------------------- cold index (child process)


def _child_cold(repo: str, index_dir: str, embedder: str, excludes: tuple[str, ...], profile: bool,
                database_url: str = "") -> None:
    ix = Index(repo, _settings(Path(index_dir), embedder, excludes, database_url))
    prof = cProfile.Profile() if profile else None
    t0 = time.perf_counter()
    if prof:
        prof.enable()
    report = ix.update()
    if prof:
        prof.disable()
    wall = time.perf_counter() - t0
    out = {"seconds": report.seconds, "wall": wall, "files_seen": report.files_seen,
           "added": len(report.added), "capsules_written": report.capsules_written,
           "counts": ix.store.counts(ix.scope()), "dense": ix.dense_index() is not None,
           "embedded": ix.last_embed.embedded if ix.last_embed is not None else 0}
    if prof:
        out["profile"] = _profile_top(prof)
    ix.close()
    print(json.dumps(out))


def run_cold(repo: Path, index_dir: Path, embedder: str, excludes: tuple[str, ...] = (),
             profile: bool = False, database_url: str = "") -> dict:
    cmd = [sys.executable, os.path.abspath(__file__), "--_child-cold", str(repo), str(index_dir), embedder,
           json.dumps(list(excludes)), database_url]
    if profile:
        cmd.append("--_profile")
    t0 = time.perf_counter()
    proc = subprocess.Popen(cmd, stdout=subprocess.PIPE, text=True)
    stdout = proc.stdout.read()
    _, status, usage = os.wait4(proc.pid, 0)
    proc.returncode = os.waitstatus_to_exitcode(status)
    proc_wall = time.perf_counter() - t0
    if proc.returncode != 0:
        raise SystemExit(f"cold index child failed with exit code {proc.returncode} (traceback above); "
                         "a file that breaks the indexer can be left out with --exclude PATTERN")
    out = json.loads(stdout.strip().splitlines()[-1])
    out["process_wall"] = proc_wall
    out["peak_rss_mb"] = usage.ru_maxrss / 1024  # KiB on Linux
    out["cpu_s"] = usage.ru_utime + usage.ru_stime
    return out


# --------------------------------------------------------------------------- incremental


def run_noop(ix: Index, n: int = 3) -> dict:
    times = []
    for _ in range(n):
        t0 = time.perf_counter()
        report = ix.update()
        times.append(time.perf_counter() - t0)
        if report.changed:
            raise SystemExit(f"no-op reindex saw changes: +{report.added} ~{report.modified} -{report.deleted}")
    return {"median_s": statistics.median(times), "runs_s": times}


def _edit(repo: Path, i: int) -> str:
    name = f"bench_added_function_{i}_{os.getpid()}"
    with open(repo / EDIT_FILE, "a", encoding="utf-8") as fh:
        fh.write(f"\n\ndef {name}(queryset, limit={i}):\n"
                 f'    """Benchmark edit {i}: return the first rows of a queryset."""\n'
                 f"    return list(queryset[:limit])\n")
    return name


def run_edit(ix: Index, repo: Path, n: int = 3) -> dict:
    times, embedded = [], []
    for i in range(n):
        name = _edit(repo, i)
        t0 = time.perf_counter()
        report = ix.update()
        times.append(time.perf_counter() - t0)
        embedded.append(ix.last_embed.embedded if ix.last_embed is not None else 0)
        if report.modified != [EDIT_FILE] or report.added or report.deleted:
            raise SystemExit(f"edit reindex: expected only {EDIT_FILE} modified, got "
                             f"+{report.added} ~{report.modified} -{report.deleted}")
        if not ix.find(name):
            raise SystemExit(f"edit reindex: new function {name} not found in the index")
    return {"median_s": statistics.median(times), "runs_s": times, "embedded": embedded, "file": EDIT_FILE,
            "file_kb": (repo / EDIT_FILE).stat().st_size / 1024}


# --------------------------------------------------------------------------- search


def make_queries(ix: Index) -> list[tuple[str, str, str | None]]:
    """(kind, query, source capsule id) — deterministic for a given index."""
    rng = random.Random(SEED)
    caps = ix.store.all_capsules(ix.scope())  # ordered by id
    nl: list[tuple[str, str]] = []
    for c in caps:
        if "/tests/" in c.path or not c.docstring:
            continue
        first = c.docstring.strip().splitlines()[0].strip().rstrip(".")
        words = first.split()
        if 4 <= len(words) <= 20 and not first.startswith((">>>", ":", "..")):
            nl.append((first, c.id))
    seen: set[str] = set()
    nl_unique = [(q, cid) for q, cid in nl if not (q.lower() in seen or seen.add(q.lower()))]
    idents = sorted({c.qualname if "." in c.qualname and rng.random() < 0.3 else c.name
                     for c in caps if c.kind in ("function", "method", "class") and len(c.name) >= 6
                     and not c.name.startswith("test") and "/tests/" not in c.path})
    queries = [("nl", q, cid) for q, cid in rng.sample(nl_unique, min(N_QUERIES - N_IDENT, len(nl_unique)))]
    queries += [("ident", q, None) for q in rng.sample(idents, min(N_IDENT, len(idents)))]
    rng.shuffle(queries)
    return queries


def run_search(ix: Index, queries: list[tuple[str, str, str | None]], k: int = 10) -> dict:
    for _, q, _ in queries[:N_WARMUP]:
        ix.search(q, k=k)
    times: list[float] = []
    by_kind: dict[str, list[float]] = {}
    self_hits = nl_total = 0
    for kind, q, cid in queries:
        t0 = time.perf_counter()
        hits = ix.search(q, k=k)
        dt = (time.perf_counter() - t0) * 1000
        times.append(dt)
        by_kind.setdefault(kind, []).append(dt)
        if cid is not None:
            nl_total += 1
            self_hits += any(h.capsule.id == cid for h in hits)
    return {"n": len(times), "p50_ms": _pct(times, 0.5), "p95_ms": _pct(times, 0.95), "max_ms": max(times),
            "p50_by_kind_ms": {kd: _pct(v, 0.5) for kd, v in by_kind.items()},
            "n_by_kind": {kd: len(v) for kd, v in by_kind.items()},
            "self_recall_at_10": self_hits / nl_total if nl_total else None}


# --------------------------------------------------------------------------- driver


def dense_supported(tmp: Path) -> bool:
    """True when Settings(embedder="local") yields a dense index after update (probed on a 1-file repo)."""
    if "embedder" not in {f.name for f in fields(Settings)}:
        return False
    repo = tmp / "probe"
    repo.mkdir()
    (repo / "m.py").write_text('def f():\n    """Probe."""\n    return 1\n')
    try:
        with Index(repo, _settings(tmp / "probe-index", "local")) as ix:
            ix.update()
            return ix.dense_index() is not None
    except Exception as exc:  # a missing model etc.
        print(f"dense probe failed: {type(exc).__name__}: {exc}", file=sys.stderr)
        return False


def bench_one(src_tree: Path, tmp: Path, embedder: str, excludes: tuple[str, ...], profile: str | None,
              log, backend: str = "sqlite") -> dict:
    label = embedder if backend == "sqlite" else f"{backend}, {embedder}"
    repo = tmp / f"django-{backend}-{embedder}" / "django-4.2"
    shutil.copytree(src_tree, repo)
    index_dir = tmp / f"index-{backend}-{embedder}"
    url = _fresh_postgres() if backend == "postgres" else ""
    out: dict = {"embedder": label, "backend": backend, "load_before": _load()}

    log(f"[{label}] cold index ...")
    out["cold"] = run_cold(repo, index_dir, embedder, excludes, database_url=url)
    ix = Index(repo, _settings(index_dir, embedder, excludes, url))
    log(f"[{label}] no-op reindex ...")
    out["noop"] = run_noop(ix)
    log(f"[{label}] one-file edits ...")
    out["edit"] = run_edit(ix, repo)
    log(f"[{label}] searches ...")
    queries = make_queries(ix)
    out["search"] = run_search(ix, queries)
    out["load_after"] = _load()

    if profile:
        log(f"[{label}] profiling {profile} ...")
        if profile == "cold":
            out["profile"] = run_cold(repo, tmp / f"index-{backend}-{embedder}-prof", embedder, excludes, profile=True,
                                      database_url=_fresh_postgres() if backend == "postgres" else "")["profile"]
        else:
            prof = cProfile.Profile()
            if profile == "noop":
                prof.runcall(ix.update)
            elif profile == "edit":
                _edit(repo, 99)
                prof.runcall(ix.update)
            elif profile == "search":
                prof.runcall(lambda: [ix.search(q, k=10) for _, q, _ in queries])
            out["profile"] = _profile_top(prof)
    ix.close()
    return out


def _fresh_postgres() -> str:
    """A new empty, migrated database: on REPOCTX_DATABASE_URL's server, or on one started from pip."""
    sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
    from repoctx.store.postgres import migrate
    from tests.pg import fresh_database

    url = fresh_database()
    migrate(url)
    return url


def _status(value: float, goal: float) -> str:
    return "ok" if value <= goal else f"**{value / goal:.1f}x over**"


def markdown(results: list[dict], meta: dict) -> str:
    lines = [f"Django 4.2 ({meta['files']} files indexed, {meta['capsules']} capsules); "
             f"{meta['cpus']} CPUs, load avg 1m/5m {meta['load']}; Python {meta['python']}"
             + (f"; excluded: {', '.join(meta['excluded'])}" if meta["excluded"] else ""), ""]
    head = "| phase | " + " | ".join(f"value ({r['embedder']})" for r in results) + " | goal | status |"
    lines += [head, "|" + "---|" * (3 + len(results))]

    def row(label: str, vals: list[str], goal: str = "", status: str = "") -> None:
        lines.append(f"| {label} | " + " | ".join(vals) + f" | {goal} | {status} |")

    base = results[0]
    row("cold index (s)", [f"{r['cold']['seconds']:.2f}" for r in results], f"≤ {GOALS['cold_s']:g}",
        _status(base["cold"]["seconds"], GOALS["cold_s"]))
    row("cold: files/s", [f"{r['cold']['counts']['files'] / r['cold']['seconds']:.0f}" for r in results])
    row("cold: capsules/s", [f"{r['cold']['counts']['capsules'] / r['cold']['seconds']:.0f}" for r in results])
    row("cold: peak RSS (MiB)", [f"{r['cold']['peak_rss_mb']:.0f}" for r in results])
    row("cold: process wall incl. startup (s)", [f"{r['cold']['process_wall']:.2f}" for r in results])
    row("no-op reindex, median of 3 (s)", [f"{r['noop']['median_s']:.3f}" for r in results],
        f"≤ {GOALS['noop_s']:g}", _status(base["noop"]["median_s"], GOALS["noop_s"]))
    row(f"one-file edit ({Path(EDIT_FILE).name}), median of 3 (s)", [f"{r['edit']['median_s']:.3f}" for r in results],
        f"≤ {GOALS['edit_s']:g}", _status(base["edit"]["median_s"], GOALS["edit_s"]))
    row("one-file edit: texts embedded", [",".join(map(str, r["edit"].get("embedded", []))) for r in results])
    if len(results) > 1:
        row("cold: texts embedded", [str(r["cold"].get("embedded", "-")) for r in results])
    row(f"search p50, {base['search']['n']} queries, k=10 (ms)", [f"{r['search']['p50_ms']:.1f}" for r in results],
        f"≤ {GOALS['search_p50_ms']:g}", _status(base["search"]["p50_ms"], GOALS["search_p50_ms"]))
    row("search p95 (ms)", [f"{r['search']['p95_ms']:.1f}" for r in results])
    row("search p50 identifier / question (ms)",
        [f"{r['search']['p50_by_kind_ms'].get('ident', 0):.1f} / {r['search']['p50_by_kind_ms'].get('nl', 0):.1f}"
         for r in results])
    row("docstring query finds its capsule @10", [f"{r['search']['self_recall_at_10']:.0%}" for r in results])
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    if argv and argv[0] == "--_child-cold":
        _child_cold(argv[1], argv[2], argv[3], tuple(json.loads(argv[4])), "--_profile" in argv[6:], argv[5])
        return 0
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--dense", action="store_true", help="also run with embeddings (embedder='local') if supported")
    ap.add_argument("--json", action="store_true", help="print the numbers as JSON instead of a table")
    ap.add_argument("--profile", choices=("cold", "noop", "edit", "search"),
                    help="also print a cProfile top-15 (cumulative) of this phase (separate, unmeasured run)")
    ap.add_argument("--exclude", action="append", default=[], metavar="PATTERN",
                    help="gitignore pattern left out of the index (Settings.extra_ignores); repeatable")
    ap.add_argument("--keep", action="store_true", help="keep the temporary copy and index")
    ap.add_argument("--backend", choices=("sqlite", "postgres", "both"), default="sqlite",
                    help="the store: embedded SQLite, PostgreSQL + pgvector, or both in one run")
    args = ap.parse_args(argv)
    log = (lambda m: print(m, file=sys.stderr, flush=True))

    wheel = fetch_wheel("Django", "4.2")
    tree = materialize(CORPUS_ROW)
    log(f"corpus: {wheel.name} -> {tree}")
    tmp = Path(tempfile.mkdtemp(prefix="repoctx-bench-"))
    try:
        embedders = ["none"]
        dense_note = None
        if args.dense:
            if dense_supported(tmp):
                embedders.append(os.environ.get("REPOCTX_EMBEDDER", "local"))
            else:
                dense_note = "--dense: this repoctx does not build a dense index yet (Settings(embedder='local') " \
                             "gives Index.dense_index() is None); dense run skipped."
                log(dense_note)
        backends = ["sqlite", "postgres"] if args.backend == "both" else [args.backend]
        results = [bench_one(tree, tmp, e, tuple(args.exclude), args.profile, log, b)
                   for b in backends for e in embedders]
    finally:
        if args.keep:
            log(f"kept {tmp}")
        else:
            shutil.rmtree(tmp, ignore_errors=True)

    counts = results[0]["cold"]["counts"]
    meta = {"files": counts["files"], "capsules": counts["capsules"], "cpus": os.cpu_count(),
            "load": f"{results[0]['load_before']} → {results[-1]['load_after']}",
            "python": sys.version.split()[0], "wheel": wheel.name, "excluded": args.exclude}
    if args.json:
        print(json.dumps({"meta": meta, "goals": GOALS, "dense_note": dense_note, "results": results}, indent=2))
    else:
        print(markdown(results, meta))
        if dense_note:
            print(f"\n{dense_note}")
        for r in results:
            if "profile" in r:
                print(f"\ncProfile, {args.profile} ({r['embedder']}):\n```\n{r['profile'].strip()}\n```")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
