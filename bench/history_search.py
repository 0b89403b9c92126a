"""The history signal as users get it (issue 44): a git checkout indexed with the defaults, asked file-level questions.

For each git bundle in ``../shared/history`` (click, attrs, marshmallow), the same time split as
``bench/history_eval.py`` (its cut-offs; rows: the fix commits after the cut-off, query = the cleaned message, gold =
the files of the functions it changed outside tests that exist at the cut-off). Unlike that script, which fuses
rankings it computes itself from the mined commits before the cut-off, this one measures the product path: a clone
checked out at the cut-off commit is indexed by ``Index.update()`` with the default settings (lexical, embedder
``none``), which mines the checkout's own history (files and messages, within ``REPOCTX_HISTORY_BUDGET``, 3 s by
default), and each question goes through ``Index.retrieve(q, k=10, level="file", mode="standard")`` with the history
(the default) and without it (``REPOCTX_HISTORY=0``: a second ``Index`` on the same store).

    python bench/history_search.py                  # table to bench/results/history_search.md
    python bench/history_search.py --budget 0.5     # a smaller mining budget

Needs ``git``; the bundles' histories are mined once more with their functions for the gold (as history_eval does).
"""

from __future__ import annotations

import argparse
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from repoctx.config import Settings
from repoctx.evaluate.history import cutoff_commit, index_keys, make_split
from repoctx.evaluate.metrics import mcnemar, rank_metrics
from repoctx.history import update_history
from repoctx.index import Index

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT / "bench"))
from history_eval import CUTOFFS, clone_bundle  # noqa: E402 - the same cut-offs as the history evaluation

KS = (1, 5)


def run_project(name: str, bundles: Path, work: Path, budget: float, fixes_only: bool, say) -> dict:
    repo = clone_bundle(name, bundles, work)
    commits = update_history(repo, work / f"{name}.gold.jsonl").history.commits  # with functions: the gold
    sha, ctime = cutoff_commit(repo, CUTOFFS[name])
    train = set(
        subprocess.run(
            ["git", "-C", str(repo), "rev-list", sha], capture_output=True, check=True, text=True
        ).stdout.split()
    )
    tree = work / "checkouts" / name
    if not tree.exists():
        subprocess.run(["git", "clone", "-q", "--no-checkout", str(repo), str(tree)], check=True, capture_output=True)
        subprocess.run(["git", "-C", str(tree), "checkout", "-q", "--detach", sha], check=True, capture_output=True)
    settings = Settings(index_dir=work / "indexes" / name, embedder="none", history_budget=budget)
    ix = Index(tree, settings, name=name)
    t0 = time.perf_counter()
    ix.update(embed=False)
    index_s = time.perf_counter() - t0
    hist = ix.last_history
    plain = Index(tree, Settings(index_dir=work / "indexes" / name, embedder="none", history=False), name=name)
    funcs, _classes, files = index_keys(ix)
    split = make_split(commits, train, sha, ctime, funcs, files, window_days=1500, max_gold=5, fixes_only=fixes_only)
    rows = [r for r in split.rows if r.gold_files]
    per: dict[str, list[dict]] = {"without": [], "with": []}
    t1 = time.perf_counter()
    for r in rows:
        for label, index in (("without", plain), ("with", ix)):
            got = [f.path for f in index.retrieve(r.query, k=10, level="file", mode="standard").files]
            per[label].append(rank_metrics(got, r.gold_files, KS))
    search_s = time.perf_counter() - t1
    vote_ms = []
    for r in rows:  # the history's own stage: the similar commits' vote (its BM25 over the messages)
        t2 = time.perf_counter()
        ix._history_votes(r.query, name)
        vote_ms.append(1000 * (time.perf_counter() - t2))
    vote_ms.sort()
    ix.close()
    plain.close()
    out = {
        "project": name,
        "cutoff": CUTOFFS[name],
        "sha": sha[:10],
        "rows": len(rows),
        "index_s": round(index_s, 1),
        "history": {
            "commits": len(hist.history.commits),
            "mined_s": round(hist.history.seconds, 2),
            "complete": hist.history.complete,
            "train_commits": len(split.train),
        },
        "search_s_per_question": round(search_s / max(1, 2 * len(rows)), 3),
        "vote_ms_p50_p95": (
            round(vote_ms[len(vote_ms) // 2], 2) if vote_ms else 0.0,
            round(vote_ms[min(len(vote_ms) - 1, int(0.95 * len(vote_ms)))], 2) if vote_ms else 0.0,
        ),
    }
    for label, ms in per.items():
        for k in KS:
            out[f"{label}_acc@{k}"] = round(100 * sum(m[f"acc@{k}"] for m in ms) / max(1, len(ms)), 1)
    for k in KS:
        gained, lost, p = mcnemar(per["without"], per["with"], f"acc@{k}")
        out[f"acc@{k}_gained_lost_p"] = (gained, lost, round(p, 4))
    say(f"{name}: {out}")
    out["per_row"] = per
    return out


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--bundles", type=Path, default=ROOT.parent / "shared" / "history")
    ap.add_argument("--work", type=Path, default=None, help="scratch folder (default: a temporary one)")
    ap.add_argument("--budget", type=float, default=Settings().history_budget)
    ap.add_argument(
        "--gold",
        choices=("fixes", "all"),
        default="fixes",
        help="rows: the fix commits after the cut-off (as history_eval), or every commit",
    )
    ap.add_argument("--out", type=Path, help="default bench/results/history_search.md (--gold all: _all_commits.md)")
    args = ap.parse_args()
    work = args.work or Path(tempfile.mkdtemp(prefix="repoctx-histsearch-"))
    os.environ.setdefault("REPOCTX_CACHE", str(work / "cache"))  # the mined histories of the checkouts live here
    load = os.getloadavg()
    fixes = args.gold == "fixes"
    out = args.out or ROOT / "bench" / "results" / f"history_search{'' if fixes else '_all_commits'}.md"
    results = [run_project(n, args.bundles, work, args.budget, fixes, print) for n in CUTOFFS]
    head = subprocess.run(
        ["git", "-C", str(ROOT), "rev-parse", "--short", "HEAD"], capture_output=True, text=True
    ).stdout.strip()
    lines = [
        "# The history signal as users get it: file-level search of a git checkout (issue 44)",
        "",
        f"Run {time.strftime('%Y-%m-%d %H:%M', time.gmtime())} UTC by `python bench/history_search.py --budget "
        f"{args.budget:g} --gold {args.gold}` at repoctx {head}; load {load[0]:.2f} at the start, "
        f"{os.getloadavg()[0]:.2f} at the end. "
        "Each project's clone checked out at the cut-off of `bench/history_eval.py`, indexed with the defaults "
        "(embedder `none`), which mines the checkout's history; rows: the "
        f"{'fix commits' if fixes else 'commits'} within 1,500 days after the cut-off with 1-5 gold functions (as "
        "history_eval), here those with a gold file at the cut-off; "
        '`Index.retrieve(q, k=10, level="file", mode="standard")` with the history and without it '
        "(`REPOCTX_HISTORY=0`). The weight (0.25) was chosen on click's fix commits by history_eval; attrs and "
        "marshmallow were not tuned on.",
        "",
        "| project | rows | file Acc@1 without → with | gained / lost (p) | file Acc@5 without → with | gained / lost "
        "(p) | commits mined (s, complete) | index s | s a question | the vote, ms p50 / p95 |",
        "|---|---|---|---|---|---|---|---|---|---|",
    ]
    for r in results:
        g1, g5 = r["acc@1_gained_lost_p"], r["acc@5_gained_lost_p"]
        h = r["history"]
        lines.append(
            f"| {r['project']}{' (tuned on)' if r['project'] == 'click' else ''} | {r['rows']} | "
            f"{r['without_acc@1']} → {r['with_acc@1']} | {g1[0]} / {g1[1]} ({g1[2]}) | {r['without_acc@5']} → "
            f"{r['with_acc@5']} | {g5[0]} / {g5[1]} ({g5[2]}) | {h['commits']} ({h['mined_s']}, "
            f"{'yes' if h['complete'] else 'no'}) | {r['index_s']} | {r['search_s_per_question']} | "
            f"{r['vote_ms_p50_p95'][0]} / {r['vote_ms_p50_p95'][1]} |"
        )
    untuned = [r for r in results if r["project"] != "click"]
    g, lo, p = mcnemar(
        [m for r in untuned for m in r["per_row"]["without"]],
        [m for r in untuned for m in r["per_row"]["with"]],
        "acc@1",
    )
    lines += ["", f"The untuned two pooled, file Acc@1: {g} rows gained, {lo} lost (exact McNemar p {p:.4f}).", ""]
    out.write_text("\n".join(lines))
    print("\n".join(lines))


if __name__ == "__main__":
    main()
