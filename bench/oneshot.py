"""One-shot commands as a user types them (a fresh process each): `repoctx search` hybrid and lexical, a no-op
`repoctx index` and a one-file reindex, wall seconds and peak RSS, old code against new in one run (issue 39).

    python bench/oneshot.py --tree /tmp/repoctx-bigtree/Django-4.2.16 --index-dir /tmp/oneshot-ix \\
        --src /work/main/src --src src --runs 5

Each ``--src`` is a ``src`` folder put first on PYTHONPATH; runs alternate between them (A B A B ...), so load
changes fall on both alike. The index (``--index-dir``, with vectors) must exist; the one-file reindex edits a
copy of one file of ``--tree`` inside a copy of the tree (``--work``), never the tree itself. Prints a table of
median (min) wall seconds and median peak RSS per command and code, with the load average before and after;
``--callgrind``: the searches' instruction counts instead (main thread and all threads), which the load leaves
alone.
"""

from __future__ import annotations

import argparse
import os
import shutil
import sqlite3
import statistics
import subprocess
import sys
import time
from pathlib import Path

REPOCTX = str(Path(sys.executable).with_name("repoctx"))
QUESTIONS = (
    "how does the ORM build a SQL query for a queryset filter",
    "where is the csrf token checked",
    "paginator",
)


def run(cmd: list[str], env: dict, cwd: str | None = None) -> tuple[float, float, float]:
    """(wall seconds, peak RSS MiB, CPU seconds) of one process."""
    t0 = time.perf_counter()
    proc = subprocess.Popen(cmd, env=env, cwd=cwd, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
    _, status, usage = os.wait4(proc.pid, 0)
    wall = time.perf_counter() - t0
    err = proc.stderr.read().decode() if proc.stderr else ""
    proc.returncode = os.waitstatus_to_exitcode(status)
    if proc.returncode not in (0, 1):
        raise SystemExit(f"{' '.join(cmd)} failed ({proc.returncode}): {err.strip()[-400:]}")
    return wall, usage.ru_maxrss / 1024, usage.ru_utime + usage.ru_stime


def instructions(jobs: list, envs: list[dict], names: list[str]) -> int:
    """Each search once per code under callgrind, one output file per thread: the instructions of the main
    thread (a one-shot search's critical path, but where it waits for the model thread) and of all threads.
    Wall seconds on these shared 2 CPUs move with the load; instruction counts do not (valgrind runs the
    threads one at a time, so it says nothing of their overlap)."""
    import glob
    import tempfile

    print("millions of instructions (valgrind --tool=callgrind): main thread / all threads\n")
    print("| command | " + " | ".join(f"{s} main | all" for s in names) + " |")
    print("|---|" + "---|---|" * len(names))
    with tempfile.TemporaryDirectory(prefix="oneshot-cg-") as tmp:
        for label, cmd, extra, _ in jobs:
            cells = []
            for i, env in enumerate(envs):
                run(cmd, {**env, **extra})  # .pyc written, pages cached
                out = f"{tmp}/cg.{i}"
                valgrind = ["valgrind", "--tool=callgrind", "--separate-threads=yes", f"--callgrind-out-file={out}"]
                subprocess.run(
                    valgrind + cmd, env={**env, **extra}, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL
                )
                counts = []
                for path in sorted(glob.glob(f"{out}-*")):
                    with open(path) as fh:
                        counts += [int(line.split()[1]) for line in fh if line.startswith("summary:")][:1]
                    os.unlink(path)
                main_thread = counts[0] if counts else 0
                cells.append(f"{main_thread / 1e6:,.0f} | {sum(counts) / 1e6:,.0f}")
            print(f"| {label} | " + " | ".join(cells) + " |")
    return 0


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--tree", type=Path, required=True)
    ap.add_argument("--index-dir", type=Path, required=True)
    ap.add_argument("--cache", type=Path, default=None, help="REPOCTX_CACHE (default: the environment's)")
    ap.add_argument("--src", action="append", required=True, help="a src folder (repeat: old, new)")
    ap.add_argument("--runs", type=int, default=5)
    ap.add_argument("--work", type=Path, default=Path("/tmp/oneshot-bench-tree"))
    ap.add_argument("--only", default="search,lexical,noop,onefile")
    ap.add_argument(
        "--callgrind",
        action="store_true",
        help="instructions instead of seconds (valgrind): the same at any load; one run of each search per code",
    )
    args = ap.parse_args()
    only = set(args.only.split(","))
    # PYTHONDONTWRITEBYTECODE would compile every module of the checkout in every run: a user's install has .pyc
    drop = ("PYTHONPATH", "PYTHONDONTWRITEBYTECODE")
    base = {k: v for k, v in os.environ.items() if not k.startswith("REPOCTX_") and k not in drop}
    if args.cache:
        base["REPOCTX_CACHE"] = str(args.cache)
    envs = [{**base, "PYTHONPATH": str(Path(s).resolve())} for s in args.src]
    tree = str(args.tree.resolve())
    jobs: list[tuple[str, list[str], dict, Path | None]] = []
    # the default embedder named: else a record of an earlier `REPOCTX_EMBEDDER=none repoctx index` would decide
    ix = {"REPOCTX_INDEX_DIR": str(args.index_dir), "REPOCTX_EMBEDDER": "local"}
    for q in QUESTIONS:
        if "search" in only:
            jobs.append((f'search "{q}" (hybrid)', [REPOCTX, "search", q, "--repo", tree], ix, None))
        if "lexical" in only:
            lex = {**ix, "REPOCTX_EMBEDDER": "none"}
            jobs.append((f'search "{q}" (lexical)', [REPOCTX, "search", q, "--repo", tree], lex, None))
    if "noop" in only:
        jobs.append(("index (no-op)", [REPOCTX, "index", tree], ix, None))
    edit_ix = args.work / "ix"
    if "onefile" in only:
        # a copy of the tree and of its index: the reindex writes there, the measured index stays as it was
        shutil.rmtree(args.work, ignore_errors=True)
        shutil.copytree(args.tree, args.work / "tree", symlinks=True)
        shutil.copytree(args.index_dir, edit_ix, ignore=shutil.ignore_patterns("*-wal", "*-shm", "index.sqlite"))
        with sqlite3.connect(args.index_dir / "index.sqlite") as src, sqlite3.connect(edit_ix / "index.sqlite") as dst:
            src.backup(dst)  # a consistent copy while other processes read (and checkpoint) the index
        jobs.append(
            (
                "index (one file edited)",
                # under the indexed repository's own name: else the copy is a second repository of the store
                # (its counts then join every edge to its unit: ~0.1 s a count) and its first update a full one
                [REPOCTX, "index", str(args.work / "tree"), "--name", args.tree.resolve().name],
                {"REPOCTX_INDEX_DIR": str(edit_ix), "REPOCTX_EMBEDDER": "local"},
                args.work / "tree" / "django/utils/text.py",
            )
        )
    if args.callgrind:
        return instructions([j for j in jobs if j[3] is None and j[0].startswith("search")], envs, args.src)
    before = os.getloadavg()
    results: dict[tuple[str, int], list[tuple[float, float, float]]] = {}
    for label, cmd, extra, edit in jobs:
        for i, env in enumerate(envs):  # once each untimed: page cache, .pyc, the copy's first (full) index
            if edit is not None and i == 0:
                run(cmd, {**env, **extra})
            run(cmd, {**env, **extra})
        for r in range(args.runs):
            for i, env in enumerate(envs):
                if edit is not None:
                    with edit.open("a") as fh:
                        fh.write(f"\n\ndef _oneshot_edit_{r}_{i}():\n    return {r}\n")
                results.setdefault((label, i), []).append(run(cmd, {**env, **extra}))
    after = os.getloadavg()
    print(
        f"{os.cpu_count()} CPUs, load avg 1m {before[0]:.2f} -> {after[0]:.2f}; {args.runs} runs each, alternating; "
        "median (min) wall seconds, median CPU seconds, median peak RSS MiB\n"
    )
    print("| command | " + " | ".join(f"{s} wall | CPU | RSS" for s in args.src) + " |")
    print("|---|" + "---|---|---|" * len(args.src))
    for label, *_ in jobs:
        cells = []
        for i in range(len(envs)):
            got = results[(label, i)]
            walls, rss, cpu = [g[0] for g in got], [g[1] for g in got], [g[2] for g in got]
            cells.append(
                f"{statistics.median(walls):.3f} ({min(walls):.3f}) | {statistics.median(cpu):.3f} | "
                f"{statistics.median(rss):.0f}"
            )
        print(f"| {label} | " + " | ".join(cells) + " |")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
