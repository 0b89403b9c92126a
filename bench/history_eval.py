"""Does a repository's own history help find what a fix changes? (issue 44: learn from the repository's history)

For each git bundle in ``../shared/history`` (click, attrs, marshmallow): mine its log (``repoctx.history``,
incremental: a second run mines nothing), take a cut-off date, index the tree at the cut-off commit (lexical,
embedder ``none``), and ask each later fix commit's cleaned message; gold = the functions it changed outside tests
(at its parent) that exist at the cut-off. Without: repoctx's standard search. With: the same fused with a BM25
over the messages of the commits before the cut-off that changed each function (file: each file). The fusion
weight is tuned on one project only and kept fixed on the others.

    python bench/history_eval.py                       # tune on click, confirm on attrs and marshmallow
    python bench/history_eval.py --tune attrs --json out.json

Prints a table and writes bench/results/history_eval.md.
"""
from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import time
from pathlib import Path

from repoctx.evaluate.corpus import cache_dir
from repoctx.evaluate.history import (
    SIGNALS,
    cutoff_commit,
    export_tree,
    index_keys,
    lexical_settings,
    make_split,
    rank_rows,
    score,
    tune,
)
from repoctx.evaluate.metrics import mcnemar
from repoctx.history import update_history
from repoctx.index import Index

ROOT = Path(__file__).resolve().parent.parent
# each cut-off leaves most of the project's history before it and 70-130 fix commits in the 1,500 days after it
# (click and attrs: to their last commit; marshmallow: 2018 to early 2022)
CUTOFFS = {"click": "2024-07-01", "attrs": "2022-07-01", "marshmallow": "2018-01-01"}
WEIGHTS = (0.0, 0.05, 0.1, 0.15, 0.25, 0.5, 0.75, 1.0, 1.5, 2.0, 3.0)
METRICS = ("fn_acc@1", "fn_acc@5", "fn_acc@10", "fn_mrr", "file_acc@1", "file_acc@5")


def clone_bundle(name: str, bundles: Path, work: Path) -> Path:
    """``work/name``: a clone of ``bundles/name.bundle`` (made once)."""
    repo = work / name
    if not repo.exists():
        subprocess.run(["git", "clone", "-q", str(bundles / f"{name}.bundle"), str(repo)], check=True,
                       capture_output=True)
    return repo


def run_project(name: str, bundles: Path, work: Path, cutoff_date: str, window_days: float, max_gold: int,
                fixes_only: bool, say) -> dict:
    repo = clone_bundle(name, bundles, work)
    load0 = os.getloadavg()[0]
    upd = update_history(repo, work / f"{name}.history.jsonl")
    again = update_history(repo, work / f"{name}.history.jsonl")
    commits = upd.history.commits
    say(f"{name}: {len(commits)} commits mined in {upd.seconds:.1f}s ({upd.mined} this run, incremental "
        f"{upd.incremental}); re-run mined {again.mined} in {again.seconds:.2f}s")
    sha, ctime = cutoff_commit(repo, cutoff_date)
    train_shas = set(subprocess.run(["git", "-C", str(repo), "rev-list", sha], capture_output=True, check=True,
                                    text=True).stdout.split())
    tree = export_tree(repo, sha, work / "trees" / f"{name}-{sha[:12]}")
    ix = Index(tree, lexical_settings(work / "indexes" / f"{name}-{sha[:12]}"), name=f"{name}-{sha[:12]}")
    try:
        t0 = time.perf_counter()
        ix.update(embed=False)
        index_s = time.perf_counter() - t0
        funcs, _classes, files = index_keys(ix)
        split = make_split(commits, train_shas, sha, ctime, funcs, files, window_days=window_days, max_gold=max_gold,
                           fixes_only=fixes_only)
        say(f"{name}: cut-off {cutoff_date} ({sha[:10]}), {len(split.train)} commits before it, "
            f"{split.fix_commits} {'fix ' if fixes_only else ''}commits after it within {window_days:.0f} days, "
            f"{len(split.rows)} rows "
            f"({split.no_gold} without a function that exists at the cut-off, {split.too_many} with more than "
            f"{max_gold}, {split.empty} with no word once cleaned)")
        t1 = time.perf_counter()
        ranked = rank_rows(ix, split, funcs, files)
        search_s = time.perf_counter() - t1
    finally:
        ix.close()
    # the mining time recorded with the history (a run that found it mined says how long mining took then)
    return {"name": name, "mined": len(commits), "mine_seconds": round(upd.history.seconds, 1),
            "mine_load": round(load0, 2) if upd.mined else None,
            "pairs": sum(len(c.symbols) for c in commits), "with_symbols": sum(1 for c in commits if c.symbols),
            "rerun_mined": again.mined, "cutoff": cutoff_date, "cutoff_sha": sha, "train": len(split.train),
            "fix_commits": split.fix_commits, "no_gold": split.no_gold, "too_many": split.too_many,
            "index_seconds": round(index_s, 1), "search_seconds": round(search_s, 1), "ranked": ranked}


def _gains(before: list, after: list) -> str:
    cells = []
    for metric in ("fn_acc@1", "fn_acc@10", "file_acc@1"):
        g, lo, p = mcnemar(before, after, metric)
        cells.append(f"{g} / {lo} ({p:.3g})")
    return " | ".join(cells)


def _fmt(m: dict) -> str:
    return " | ".join(f"{m.get(k, '-')}" for k in METRICS)


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--bundles", type=Path, default=ROOT.parent / "shared" / "history")
    ap.add_argument("--work", type=Path, default=cache_dir() / "history")
    ap.add_argument("--projects", default="click,attrs,marshmallow")
    ap.add_argument("--tune", default="click", help="the one project the fusion weights are tuned on")
    ap.add_argument("--gold", choices=("fixes", "all"), default="fixes",
                    help="rows: the fix commits after the cut-off (default), or every commit after it")
    ap.add_argument("--window-days", type=float, default=1500)
    ap.add_argument("--max-gold", type=int, default=5)
    ap.add_argument("--out", type=Path, help="default bench/results/history_eval.md (--gold all: _all_commits.md)")
    ap.add_argument("--json", type=Path)
    args = ap.parse_args(argv)
    out_path = args.out or ROOT / "bench" / "results" / (
        "history_eval.md" if args.gold == "fixes" else "history_eval_all_commits.md")
    args.work.mkdir(parents=True, exist_ok=True)
    say = lambda s: print(s, file=sys.stderr, flush=True)  # noqa: E731 - a one-line progress printer
    names = [p.strip() for p in args.projects.split(",") if p.strip()]
    if args.tune not in names:
        ap.error("--tune must be one of --projects")
    load = os.getloadavg()
    results = {n: run_project(n, args.bundles, args.work, CUTOFFS[n], args.window_days, args.max_gold,
                              args.gold == "fixes", say) for n in names}
    tuned = results[args.tune]["ranked"]
    weights = {sig: tune(tuned, WEIGHTS, sig) for sig in SIGNALS}
    file_weights = {sig: tune(tuned, WEIGHTS, sig, level="file") for sig in SIGNALS}
    rows_are = "fix commits" if args.gold == "fixes" else "commits (any message)"
    lines = [f"History signals (issue 44), {time.strftime('%Y-%m-%d')}. Rows: the {rows_are} after each cut-off, "
             f"query = the cleaned message, gold = the functions it changed outside tests that exist at the cut-off. "
             f"Without: repoctx standard search, lexical (embedder `none`: exact + BM25 + graph + re-ranker) over the "
             f"cut-off tree. With, learned from the commits before the cut-off only and fused by weighted reciprocal "
             f"ranks (k 60): **field** = BM25 over the words of the messages of the commits that changed each "
             f"function (file); **similar** = the 20 past commits whose messages best match vote for what they "
             f"changed. Weights tuned on **{args.tune}** only, for functions on function Acc@10 (then Acc@1): "
             f"field **{weights['field']}**, similar **{weights['similar']}**; for files on file Acc@1 (then "
             f"Acc@5): field **{file_weights['field']}**, similar **{file_weights['similar']}**; fixed on the "
             f"others. Load avg at start "
             f"{load[0]:.2f}/{load[1]:.2f}; 2 shared CPUs.", "",
             "| project | rows | signal | fn Acc@1 | fn Acc@5 | fn Acc@10 | fn MRR | file Acc@1 | file Acc@5 |",
             "|---|---|---|---|---|---|---|---|---|"]
    mc_lines = ["| project | signal | fn Acc@1 gained / lost (p) | fn Acc@10 gained / lost (p) | "
                "file Acc@1 gained / lost (p) |", "|---|---|---|---|---|"]
    out_json: dict = {"weights": weights, "file_weights": file_weights, "tuned_on": args.tune, "gold": args.gold,
                      "projects": {}}
    pooled: dict[str, tuple[list, list]] = {sig: ([], []) for sig in SIGNALS}  # the untuned projects' rows
    for n in names:
        r = results[n]
        mark = " (tuned on)" if n == args.tune else ""
        base, base_rows = score(r["ranked"], 0.0)
        lines.append(f"| {n}{mark} | {base['n']} | without | {_fmt(base)} |")
        rec = {k: v for k, v in r.items() if k != "ranked"} | {"without": base}
        for sig in SIGNALS:
            hist, hist_rows = score(r["ranked"], weights[sig], sig, file_weights[sig])
            lines.append(f"| {n}{mark} | {hist['n']} | {sig} (w {weights[sig]}, files {file_weights[sig]}) | "
                         f"{_fmt(hist)} |")
            mc_lines.append(f"| {n}{mark} | {sig} | {_gains(base_rows, hist_rows)} |")
            if n != args.tune:
                pooled[sig][0].extend(base_rows)
                pooled[sig][1].extend(hist_rows)
            rec[sig] = hist
        out_json["projects"][n] = rec
    if len(names) > 2:
        for sig in SIGNALS:
            mc_lines.append(f"| the {len(names) - 1} untuned, pooled ({len(pooled[sig][0])} rows) | {sig} | "
                            f"{_gains(*pooled[sig])} |")
    grid = ["| weight | " + " | ".join(f"{n} {sig}" for sig in SIGNALS for n in names) + " |",
            "|---|" + "---|" * (len(names) * len(SIGNALS))]
    for w in WEIGHTS:
        cells = [score(results[n]["ranked"], w, sig)[0] for sig in SIGNALS for n in names]
        grid.append(f"| {w} | " + " | ".join(f"{m.get('fn_acc@10')} / {m.get('fn_acc@1')} · {m.get('file_acc@1')}"
                                             for m in cells) + " |")
    setup = ["| project | commits mined | s (load) | commits/s | (commit, function) pairs | commits with ≥ 1 | "
             f"cut-off | commits before | {args.gold} commits after | rows | left out: no function at cut-off / > "
             f"{args.max_gold} |", "|---|---|---|---|---|---|---|---|---|---|---|"]
    for n in names:
        r = results[n]
        rate = r["mined"] / r["mine_seconds"] if r["mine_seconds"] else 0.0
        load_s = f"load {r['mine_load']}" if r["mine_load"] is not None else "an earlier run"
        setup.append(f"| {n} | {r['mined']} | {r['mine_seconds']} ({load_s}) | {rate:.0f} | {r['pairs']} | "
                     f"{r['with_symbols']} | {r['cutoff']} `{r['cutoff_sha'][:10]}` | {r['train']} | "
                     f"{r['fix_commits']} | {len(r['ranked'])} | {r['no_gold']} / {r['too_many']} |")
    rates = [r["mined"] / r["mine_seconds"] for r in results.values() if r["mine_seconds"]]
    if rates:
        setup += ["", f"Mining rate {min(rates):.0f}-{max(rates):.0f} commits/s on one core: a 30,000-commit log "
                  f"would take {30000 / max(rates) / 60:.0f}-{30000 / min(rates) / 60:.0f} min (the cost grows with "
                  f"the size of the files each commit changes)."]
    text = "\n".join(lines + ["", "Rows gained / lost with each signal (exact McNemar p):", ""] + mc_lines
                     + ["", "Function Acc@10 / Acc@1 · file Acc@1 by weight (only the tuned-on columns chose the "
                        "weights):", ""]
                     + grid + ["", "Mining and the split:", ""] + setup) + "\n"
    print(text)
    out_path.parent.mkdir(parents=True, exist_ok=True)
    out_path.write_text(text, encoding="utf-8")
    if args.json:
        args.json.write_text(json.dumps(out_json, indent=1), encoding="utf-8")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
