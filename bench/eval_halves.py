"""Two `repoctx eval --json` runs compared row by row, on all rows and on the odd and even halves of the split.

    python bench/eval_halves.py BEFORE.json AFTER.json [--config hybrid+graph] [--tree wheel|sdist]
                                [--dataset ../shared/eval/swebench_lite_dev.jsonl] [--regold] [--json]
    python bench/eval_halves.py RESULTS.json#wheel_default RESULTS.json#wheel_kind_places   # two runs of one file

Prints file Acc@1/3/5/10 and function Acc@1/5/10 before → after with the rows gained and lost and the exact McNemar
p, the MRRs, and whether the rule a ranking change is kept by holds: file Acc@1 and function Acc@10 raised on both
halves (issue 44). Halves are the odd and even rows of ``--dataset`` counted from 1 (default: the shared dev split
when it is there, else the order of BEFORE's rows). A run of ``--tree both`` is read at ``--tree``; ``FILE#NAME`` reads
the run saved under NAME in FILE (a results file that keeps several, e.g. ``bench/results/eval_session38_*.json``).
``--regold``: function level scored against ``--dataset``'s ``gold_functions`` instead of those the runs were made
with, which may only have lost keys since (a run keeps every gold's rank): session 46's history rows no longer name
the classes a fix changed as function gold, and the runs made before are read again that way.
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

from repoctx.evaluate.compare import compare, markdown

DEV = Path(__file__).resolve().parent.parent.parent / "shared" / "eval" / "swebench_lite_dev.jsonl"


def result(path: Path, config: str | None, tree: str | None) -> dict:
    """One config's result in a saved run (a ``--tree both`` run is read at ``tree``; ``FILE#NAME``: the one saved
    under NAME)."""
    name = None
    if not path.exists() and "#" in path.name:
        file, _, name = path.name.partition("#")
        path = path.with_name(file)
    data = json.loads(path.read_text())
    if name is not None:
        if not isinstance(data.get(name), dict) or "rows" not in data[name]:
            raise ValueError(f"{path} has no run {name!r}")
        return data[name]
    if "wheel" in data or "sdist" in data:
        pick = tree or "wheel"
        if pick not in data:
            raise ValueError(f"{path} has no {pick!r} tree (it has {', '.join(data)})")
        data = data[pick]
    configs = {k: v for k, v in data.items() if isinstance(v, dict) and "rows" in v}
    if config is None and len(configs) == 1:
        return next(iter(configs.values()))
    name = config or "hybrid+graph"
    if name not in configs:
        raise ValueError(f"{path} has no config {name!r} (it has {', '.join(configs) or 'none'})")
    return configs[name]


def regold(run: dict, gold: dict[str, list[str]]) -> dict:
    """``run`` with each row's function-level gold cut to ``gold[instance id]`` (a row not in ``gold`` as it was):
    its gold ranks kept for those keys, its first rank the best of them (none left: the row leaves function level)."""
    rows = []
    for r in run.get("rows", []):
        want = gold.get(r["instance_id"])
        if want is not None:
            had = r.get("gold_function_ranks") or {}
            if not set(want) <= set(had):
                raise ValueError(
                    f"{r['instance_id']}: gold {sorted(set(want) - set(had))[0]!r} was not scored in the "
                    "run; run it again on the dataset"
                )
            ranks = {k: had[k] for k in want}
            got = [v for v in ranks.values() if v is not None]
            r = {**r, "gold_function_ranks": ranks, "function_rank": min(got) if got else None}
        rows.append(r)
    return {**run, "rows": rows}


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("before", type=Path)
    ap.add_argument("after", type=Path)
    ap.add_argument("--config", default=None, help="the config to read (default: the only one, else hybrid+graph)")
    ap.add_argument("--tree", choices=("wheel", "sdist"), default=None, help="in a --tree both run (default wheel)")
    ap.add_argument("--dataset", type=Path, default=None, help=f"the split whose order makes the halves ({DEV})")
    ap.add_argument(
        "--regold",
        action="store_true",
        help="function level against --dataset's gold_functions (a subset of what the runs scored)",
    )
    ap.add_argument("--json", action="store_true")
    args = ap.parse_args(argv)
    dataset = args.dataset or (DEV if DEV.exists() else None)
    try:  # an unreadable file, a missing tree or config, a row outside the dataset: said in one line
        before = result(args.before, args.config, args.tree)
        after = result(args.after, args.config, args.tree)
        order = None
        if dataset is not None:
            rows = [json.loads(x) for x in dataset.read_text().splitlines() if x.strip()]
            order = [r["instance_id"] for r in rows]
            if args.regold:
                gold = {r["instance_id"]: list(r.get("gold_functions") or []) for r in rows}
                before, after = regold(before, gold), regold(after, gold)
        elif args.regold:
            raise ValueError("--regold reads the gold of --dataset")
        got = compare(before, after, order)
    except (OSError, ValueError) as e:
        print(f"eval_halves: {e}", file=sys.stderr)
        return 2
    if args.json:
        print(json.dumps(got, indent=1))
    else:
        print(markdown(got, args.before.name, args.after.name), end="")
    return 0


if __name__ == "__main__":
    sys.exit(main())
