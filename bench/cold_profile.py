"""Where a cold lexical index's time goes, old code against new, on the same tree in the same run.

    python bench/cold_profile.py --src old=/tmp/old/src --src new=src            # 3 rounds, alternating
    python bench/cold_profile.py --src new=src --src inproc=src:inproc --busy    # beside a CPU-bound process

Each run is a fresh child process (``PYTHONPATH`` = the given source tree) that builds a cold index of the tree
(default: Django 4.2.16's sdist, as bench/big_tree.py unpacks it) with ``Index.update`` and no embedder, into a
private folder. A ``:inproc`` suffix parses in this process (``indexer.PIPELINE_MIN_FILES`` set out of reach).
Phases come from the update's own progress events: walk + read + hash (to ``plan``), parse + write (to ``link``),
link + commit (to ``done``). CPU is user + sys of the child and of any worker it forked; peak RSS is the child's
own and the largest of its children's. ``--busy`` runs a ``while 1: pass`` process beside every run. The load
average is printed with each run: the machine is shared, so compare rows of one run, not runs.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

TREE = Path("/tmp/repoctx-bigtree/Django-4.2.16")

CHILD = r"""
import json, os, resource, sys, time
from pathlib import Path
t0 = time.perf_counter()
if sys.argv[2] == "inproc":
    import repoctx.indexer as indexer
    indexer.PIPELINE_MIN_FILES = 10 ** 9
from repoctx.index import Index
marks = {}
def progress(e):
    marks.setdefault(e["event"], time.perf_counter() - t0)
t1 = time.perf_counter()
with Index(Path(sys.argv[1])) as ix:
    report = ix.update(progress=progress, embed=False)
wall = time.perf_counter() - t0
me, kids = resource.getrusage(resource.RUSAGE_SELF), resource.getrusage(resource.RUSAGE_CHILDREN)
print(json.dumps({
    "wall": wall, "import": t1 - t0, "plan": marks.get("plan"), "link": marks.get("link"), "done": marks.get("done"),
    "cpu": me.ru_utime + me.ru_stime + kids.ru_utime + kids.ru_stime, "cpu_kids": kids.ru_utime + kids.ru_stime,
    "rss": me.ru_maxrss / 1024, "rss_kids": kids.ru_maxrss / 1024, "units": report.capsules_written,
}))
"""


def run_once(src: str, mode: str, tree: Path) -> dict:
    with tempfile.TemporaryDirectory(prefix="cold-profile-") as d:
        env = {
            **os.environ,
            "PYTHONPATH": str(Path(src).resolve()),
            "REPOCTX_INDEX_DIR": f"{d}/idx",
            "REPOCTX_CACHE": f"{d}/cache",
            "REPOCTX_EMBEDDER": "none",
        }
        load = os.getloadavg()[0]
        out = subprocess.run(
            [sys.executable, "-c", CHILD, str(tree), mode], env=env, capture_output=True, text=True, check=True
        )
        row = json.loads(out.stdout.strip().splitlines()[-1])
        row["load"] = load
        return row


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--src", action="append", required=True, help="label=path/to/src[:inproc]")
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--tree", type=Path, default=TREE)
    ap.add_argument("--busy", action="store_true", help="a CPU-bound process runs beside every run")
    args = ap.parse_args()
    srcs = []
    for spec in args.src:
        label, _, rest = spec.partition("=")
        path, _, mode = rest.partition(":")
        srcs.append((label, path, mode or "auto"))
    burner = subprocess.Popen([sys.executable, "-c", "while 1: pass"]) if args.busy else None
    rows: dict[str, list[dict]] = {label: [] for label, _, _ in srcs}
    try:
        for r in range(args.rounds):
            for label, path, mode in srcs if r % 2 == 0 else reversed(srcs):
                row = run_once(path, mode, args.tree)
                rows[label].append(row)
                print(
                    f"{label:>8} round {r + 1}: wall {row['wall']:5.1f} s (walk {row['plan'] - row['import']:.1f}, "
                    f"parse+write {row['link'] - row['plan']:.1f}, link+commit {row['done'] - row['link']:.1f}) "
                    f"CPU {row['cpu']:5.1f} s (worker {row['cpu_kids']:.1f}) RSS {row['rss']:.0f}/{row['rss_kids']:.0f}"
                    f" MiB, load {row['load']:.1f}",
                    flush=True,
                )
                time.sleep(1)
    finally:
        if burner is not None:
            burner.kill()
            burner.wait()
    print(f"\n{'busy' if args.busy else 'idle'} medians of {args.rounds}:")
    print("| code | wall s | walk | parse + write | link + commit | CPU s | peak RSS MiB (main / worker) | load |")
    print("|---|---|---|---|---|---|---|---|")
    for label, got in rows.items():

        def med(f):
            return statistics.median(f(x) for x in got)

        print(
            f"| {label} | {med(lambda x: x['wall']):.1f} | {med(lambda x: x['plan'] - x['import']):.1f} | "
            f"{med(lambda x: x['link'] - x['plan']):.1f} | {med(lambda x: x['done'] - x['link']):.1f} | "
            f"{med(lambda x: x['cpu']):.1f} | {med(lambda x: x['rss']):.0f} / {med(lambda x: x['rss_kids']):.0f} | "
            f"{min(x['load'] for x in got):.1f}-{max(x['load'] for x in got):.1f} |"
        )


if __name__ == "__main__":
    main()
