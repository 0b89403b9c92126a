"""Issue 44's goal on a set of rows: the default and the shipped options, side by side, against the goal's figures.

The goal (file Acc@1 >= 67, file Acc@5 >= 90, function Acc@10 >= 75 on issues nobody tuned on) is measured on rows
kept aside from the sessions that tune the ranking; this runs them in one go. Each variant is ``repoctx eval ROWS
--config hybrid+graph --json`` with its environment, on the same caches (``REPOCTX_CACHE``), one after the other:

- ``default``: the product as it ships;
- ``windows``: ``REPOCTX_FUNCTION_WINDOWS=1`` (a function's body read in windows for the file ranking);
- ``code``: ``REPOCTX_EMBEDDER=local:code`` (the code-tuned model; its vectors are made on the first run).

It prints each variant's file Acc@1 / Acc@5 and function Acc@10, whether each reaches the goal, and each option
against the default row by row (gained / lost, exact McNemar p; ``bench/eval_halves.py`` gives the halves).

    python bench/goal.py UNSEEN.jsonl --tree both --out runs/        # runs/<variant>-<tree>.json kept; --reuse reads them
    python bench/goal.py UNSEEN.jsonl --tree both --out runs/ --variants code --reuse   # one option, against the saved default
    python bench/goal.py ../shared/eval/swebench_lite_dev.jsonl --variants default,windows
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
from pathlib import Path

from repoctx.evaluate.compare import compare

VARIANTS = {
    "default": {},
    "windows": {"REPOCTX_FUNCTION_WINDOWS": "1"},
    "code": {"REPOCTX_EMBEDDER": "local:code"},
}
GOAL = (("file", 1, 67.0), ("file", 5, 90.0), ("function", 10, 75.0))
CONFIG = "hybrid+graph"


def run(rows: Path, tree: str, env: dict[str, str], out: Path) -> dict:
    """One ``repoctx eval`` run with ``env`` added to this process's environment, saved at ``out``."""
    cmd = [sys.executable, "-m", "repoctx.cli", "eval", str(rows), "--config", CONFIG, "--tree", tree, "--json"]
    proc = subprocess.run(cmd, env={**os.environ, **env}, capture_output=True, text=True)
    if proc.returncode != 0:
        tail = proc.stderr.strip().splitlines()[-1:] or ["no message"]
        raise SystemExit(f"repoctx eval failed ({' '.join(f'{k}={v}' for k, v in env.items()) or 'default'}): {tail[0]}")
    out.write_text(proc.stdout)
    return json.loads(proc.stdout)


def per_tree(data: dict, trees: list[str]) -> dict[str, dict]:
    """``{tree: the config's result}`` of one run (a ``--tree both`` run holds one result per tree)."""
    if "wheel" in data or "sdist" in data:
        return {t: data[t][CONFIG] for t in trees if t in data}
    return {trees[0]: data[CONFIG]}


def table(results: dict[str, dict[str, dict]]) -> str:
    goal = " / ".join(f"{lv} Acc@{k} >= {v:g}" for lv, k, v in GOAL)
    lines = [
        f"goal: {goal}",
        "",
        "| tree | variant | rows | file Acc@1 | file Acc@5 | function Acc@10 | goal | against default "
        "(file Acc@1; function Acc@10) |",
        "|---|---|---|---|---|---|---|---|",
    ]
    for tree in sorted({t for r in results.values() for t in r}):
        base = results.get("default", {}).get(tree)
        for name, runs in results.items():
            res = runs.get(tree)
            if res is None:
                continue
            figs = [res[lv][f"acc@{k}"] for lv, k, _ in GOAL]
            met = all(f >= v for f, (_, _, v) in zip(figs, GOAL, strict=True))
            versus = ""
            if base is not None and name != "default":
                part = compare(base, res)["parts"]["all"]
                cells = []
                for lv, k in (("file", 1), ("function", 10)):
                    m = part[lv][f"acc@{k}"]
                    cells.append(f"{m['before']} → {m['after']} (+{m['gained']} −{m['lost']}, p {m['p']:.2g})")
                versus = "; ".join(cells)
            lines.append(
                f"| {tree} | {name} | {res['n']} | "
                + " | ".join(f"{f:.1f}" for f in figs)
                + f" | {'met' if met else 'not met'} | {versus} |"
            )
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("rows", type=Path, help="a dataset of repoctx eval rows (JSONL)")
    ap.add_argument("--tree", choices=("wheel", "sdist", "both"), default="wheel")
    ap.add_argument("--variants", default=",".join(VARIANTS), help=f"of {', '.join(VARIANTS)} (default: all)")
    ap.add_argument("--out", type=Path, default=Path("goal-runs"), help="where each variant's run is kept")
    ap.add_argument("--reuse", action="store_true", help="read a variant's run from --out when it is there")
    args = ap.parse_args(argv)
    names = [v.strip() for v in args.variants.split(",") if v.strip()]
    unknown = [v for v in names if v not in VARIANTS]
    if unknown:
        ap.error(f"unknown variant {unknown[0]!r} (known: {', '.join(VARIANTS)})")
    trees = ["wheel", "sdist"] if args.tree == "both" else [args.tree]
    args.out.mkdir(parents=True, exist_ok=True)
    if args.reuse and "default" not in names and (args.out / f"default-{args.tree}.json").exists():
        names.insert(0, "default")  # an option run alone is still read against the saved default
    results = {}
    for name in names:
        path = args.out / f"{name}-{args.tree}.json"
        data = json.loads(path.read_text()) if args.reuse and path.exists() else run(args.rows, args.tree, VARIANTS[name], path)
        results[name] = per_tree(data, trees)
    print(table(results))
    return 0


if __name__ == "__main__":
    sys.exit(main())
