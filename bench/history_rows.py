"""The history signal in `repoctx eval`, SWE-bench shaped (issue 44): each fix commit asked at its own parent.

`bench/history_search.py` freezes each project at one cut-off commit and asks the later fixes there. Here every
row is its own git corpus, as SWE-bench's full-tree rows are: the fix's first parent (its "base commit"), indexed
by `repoctx eval` as a checkout (`repoctx.evaluate.corpus`), whose history up to that commit votes on the file
ranking (`Index.with_history`), against the same rows with `--no-history`. Rows: for each bundle in
`../shared/history`, the fix commits within 1,500 days after history_eval's cut-off (the history vote's weight
was tuned on click's fixes before its cut-off; attrs and marshmallow were never tuned on), with 1 to 5 changed
functions outside tests, named at the parent; query = the cleaned message (issue numbers and trailers out). A class
the commit changed in its own lines (an attribute) names its file as gold, not a function (session 46: before, such a
row could never count at function level, since Acc@k wants every gold function in the first k and the function
ranking holds functions and methods only); a row whose changes are all such is left out of function level, as
SWE-bench's rows are.

    python bench/history_rows.py                      # default config (hybrid + graph, default model)
    python bench/history_rows.py --config bm25        # lexical only, faster
    python bench/history_rows.py --rows-only rows.jsonl   # write the rows and stop (`repoctx eval rows.jsonl`)
    python bench/history_rows.py --before --rows-only rows_before.jsonl   # the fixes before the cut-offs (205 rows)

The table goes to bench/results/history_rows.md (with --config bm25: history_rows_bm25.md).
"""

from __future__ import annotations

import argparse
import functools
import json
import os
import subprocess
import sys
import tempfile
import time
from dataclasses import replace
from pathlib import Path

from repoctx.config import Settings
from repoctx.evaluate.compare import within
from repoctx.evaluate.history import cutoff_commit, is_fix
from repoctx.evaluate.metrics import mcnemar
from repoctx.evaluate.runner import CONFIGS, evaluate
from repoctx.history import clean_message, span_map, update_history
from repoctx.ingest.languages import is_test_path
from repoctx.tokens import code_tokens

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT / "bench"))
from eval_halves import regold  # noqa: E402
from history_eval import CUTOFFS, clone_bundle  # noqa: E402 - the same cut-offs as the history evaluation

WINDOW_DAYS, MAX_GOLD = 1500, 5


def unit_kind(repo: Path, commit: str, key: str) -> str | None:
    """The kind (function, method, class) of the unit ``path:qualname`` names at ``commit``, as the miner's parser
    sees it (None: not found). The history names every unit a commit changed, a class when lines of its own body
    changed (an attribute, a decorator); function-level gold is functions and methods, as SWE-bench's is ("may be
    empty when the fix edits module-level code or class attributes only", ../shared/eval/README.md)."""
    path, _, qual = key.partition(":")
    return _kinds(repo, commit, path).get(qual)


@functools.cache
def _kinds(repo: Path, commit: str, path: str) -> dict[str, str]:
    got = subprocess.run(["git", "-C", str(repo), "show", f"{commit}:{path}"], capture_output=True)
    sm = span_map(path, got.stdout.decode("utf-8", "replace")) if got.returncode == 0 else None
    return {u.qualname: u.kind for u in sm.by_id.values()} if sm is not None else {}


def project_rows(name: str, bundles: Path, work: Path, before: bool = False) -> list[dict]:
    """The rows of one bundle, oldest first (so that consecutive trees share their units' vectors); ``before``: the fix
    commits of the window before the cut-off instead (click's were the history vote's tuning set; the first stage was
    tuned on none of them)."""
    repo = clone_bundle(name, bundles, work)
    commits = update_history(repo, work / f"{name}.gold.jsonl").history.commits  # with functions: the gold
    _, ctime = cutoff_commit(repo, CUTOFFS[name])
    start, end = (ctime - WINDOW_DAYS * 86400, ctime) if before else (ctime, ctime + WINDOW_DAYS * 86400)
    # the commits of the main line (first parents from HEAD): a squash-merged pull request or a direct commit, whose
    # history holds no earlier commit of the same pull request (a merged branch's commits have their siblings)
    main_line = set(
        subprocess.run(
            ["git", "-C", str(repo), "rev-list", "--first-parent", "HEAD"], capture_output=True, check=True, text=True
        ).stdout.split()
    )
    rows = []
    for c in commits:
        if not (start < c.time <= end) or c.sweep or not c.parents or not is_fix(c.message):
            continue
        gold = [s for s in dict.fromkeys(c.symbols) if not is_test_path(s.split(":", 1)[0])]
        query = clean_message(c.message)
        if not 1 <= len(gold) <= MAX_GOLD or not code_tokens(query, keep_stopwords=False):
            continue
        rows.append(
            {
                "instance_id": f"{name}-{c.sha[:10]}",
                "repo": name,
                "time": c.time,
                "query": query,
                "gold_files": list(dict.fromkeys(s.split(":", 1)[0] for s in gold)),
                "gold_functions": [s for s in gold if unit_kind(repo, c.parents[0], s) != "class"],
                "corpus": {"git": str(repo), "commit": c.parents[0], "path_prefix": ""},
                "main_line": c.sha in main_line,
            }
        )
    rows.sort(key=lambda r: r["time"])
    return rows


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--bundles", type=Path, default=ROOT.parent / "shared" / "history")
    ap.add_argument("--work", type=Path, default=None, help="scratch folder (default: a temporary one)")
    ap.add_argument("--config", default="hybrid+graph", choices=sorted(CONFIGS))
    ap.add_argument("--rows-only", type=Path, help="write the rows (JSONL) here and stop")
    ap.add_argument("--before", action="store_true", help=f"the fix commits of the {WINDOW_DAYS:,} days before the "
                    "cut-offs instead (a second sample for first-stage changes; click's tuned the history vote)")
    ap.add_argument("--out", type=Path)
    ap.add_argument("--table-only", action="store_true", help="the table again from the saved run's JSON")
    args = ap.parse_args()
    work = args.work or Path(tempfile.mkdtemp(prefix="repoctx-histrows-"))
    work.mkdir(parents=True, exist_ok=True)
    os.environ.setdefault("REPOCTX_CACHE", str(work / "cache"))  # trees, indexes, vectors and histories
    rows = [r for name in CUTOFFS for r in project_rows(name, args.bundles, work, args.before)]
    dataset = args.rows_only or work / "rows.jsonl"
    dataset.write_text("".join(json.dumps(r) + "\n" for r in rows))
    print(f"{len(rows)} rows: " + ", ".join(f"{n} {sum(r['repo'] == n for r in rows)}" for n in CUTOFFS), flush=True)
    if args.rows_only:
        return
    stem = "history_rows_before" if args.before else "history_rows"
    out = args.out or ROOT / "bench" / "results" / (
        f"{stem}.md" if args.config == "hybrid+graph" else f"{stem}_{args.config.replace('+', '_')}.md"
    )
    if args.table_only:
        runs = json.loads(out.with_suffix(".json").read_text())
    else:
        meta = {"time": time.time(), "load": [os.getloadavg()[0]]}
        settings = Settings.from_env()
        runs = {}
        for label, s in (("with", settings), ("without", replace(settings, history=False))):
            t = time.perf_counter()
            runs[label] = evaluate(dataset, configs=(args.config,), settings=s, progress=print)[args.config]
            runs[label]["seconds"] = round(time.perf_counter() - t, 1)
        meta["load"].append(os.getloadavg()[0])
        meta["head"] = subprocess.run(
            ["git", "-C", str(ROOT), "rev-parse", "--short", "HEAD"], capture_output=True, text=True
        ).stdout.strip()
        runs["meta"] = meta
        out.with_suffix(".json").write_text(json.dumps(runs))
    meta = runs.pop("meta")
    # a saved run made before session 46 named classes as function gold too: scored against the rows' gold
    runs = {label: regold(run, {r["instance_id"]: r["gold_functions"] for r in rows}) for label, run in runs.items()}
    t0, load, head = meta["time"], meta["load"], meta["head"]
    per = {label: {r["instance_id"]: r for r in run["rows"]} for label, run in runs.items()}
    ids = [r["instance_id"] for r in rows if r["instance_id"] in per["with"] and r["instance_id"] in per["without"]]

    def hit(label: str, iid: str, k: int, level: str = "file") -> dict[str, float]:
        """Acc@k as `repoctx eval` counts it: every gold file (function) in the first k."""
        return {"acc": 1.0 if within(per[label][iid], level, k) else 0.0}

    lines = [
        "# The history signal in `repoctx eval`: each fix asked at its own parent commit (issue 44)",
        "",
        f"Run {time.strftime('%Y-%m-%d %H:%M', time.gmtime(t0))} UTC by `python bench/history_rows.py --config "
        f"{args.config}` at repoctx {head}; load {load[0]:.2f} at the start, {load[1]:.2f} at the end; "
        f"{runs['with']['seconds']} s with the history (trees, indexes and histories made), "
        f"{runs['without']['seconds']} s without (the same indexes). Config: {CONFIGS[args.config].name}. "
        "Each row is a git corpus at the fix commit's first parent, indexed by `repoctx eval` as a checkout whose "
        "history up to that commit votes on the file ranking; `--no-history` is the same run without the vote. "
        f"Rows: the fix commits within {WINDOW_DAYS:,} days after `bench/history_eval.py`'s cut-offs with 1-{MAX_GOLD} "
        "changed functions outside tests (gold, named at the parent); query = the cleaned message. The vote's weight "
        "(0.25) was chosen on click's fixes before its cut-off; attrs and marshmallow were not tuned on.",
        "",
        "| project | rows | file Acc@1 without → with | gained / lost (p) | file Acc@5 without → with "
        "| gained / lost (p) | function Acc@10 without → with | history: rows / moved / median commits |",
        "|---|---|---|---|---|---|---|---|",
    ]
    pooled: dict[str, list] = {"w1": [], "o1": [], "w5": [], "o5": []}
    main_line = {r["instance_id"] for r in rows if r["main_line"]}
    groups = [(name, name, [i for i in ids if per["with"][i]["repo"] == name]) for name in CUTOFFS]
    groups += [(name, f"{name}, main line only", [i for i in g if i in main_line]) for name, _, g in groups]
    for name, label, mine in groups:
        if not mine:
            continue
        cells = []
        for k in (1, 5):
            before = [hit("without", i, k) for i in mine]
            after = [hit("with", i, k) for i in mine]
            g, lo, p = mcnemar(before, after, "acc")
            acc = (
                round(100 * sum(m["acc"] for m in before) / len(mine), 1),
                round(100 * sum(m["acc"] for m in after) / len(mine), 1),
            )
            cells += [f"{acc[0]} → {acc[1]}", f"{g} / {lo} ({p:.3g})"]
            if name != "click" and label == name:
                pooled[f"o{k}"] += before
                pooled[f"w{k}"] += after
        fn = [i for i in mine if per["with"][i]["gold_function_ranks"]]
        f10 = [
            round(100 * sum(hit(lab, i, 10, "function")["acc"] for i in fn) / max(1, len(fn)), 1)
            for lab in ("without", "with")
        ]
        commits = sorted(per["with"][i]["history_commits"] or 0 for i in mine)
        had = sum(1 for i in mine if per["with"][i]["history_commits"] is not None)
        moved = sum(1 for i in mine if per["with"][i]["history_moved"])
        lines.append(
            f"| {label}{' (tuned on)' if name == 'click' else ''} | {len(mine)} | {cells[0]} | {cells[1]} | "
            f"{cells[2]} | {cells[3]} | {f10[0]} → {f10[1]} | {had} / {moved} / {commits[len(commits) // 2]} |"
        )
    g, lo, p = mcnemar(pooled["o1"], pooled["w1"], "acc")
    g5, lo5, p5 = mcnemar(pooled["o5"], pooled["w5"], "acc")
    lines += [
        "",
        f"The untuned two pooled: file Acc@1 {g} rows gained, {lo} lost (exact McNemar p {p:.4f}); file Acc@5 {g5} "
        f"gained, {lo5} lost (p {p5:.4f}). Acc@k as `repoctx eval` counts it: every gold file in the first k. "
        '"Main line '
        'only": the rows whose commit is a first parent from HEAD (a squash-merged pull request or a direct commit), '
        "whose history cannot hold an earlier commit of the same pull request, as a merged branch's commits' can. "
        "The function "
        "ranking is the same list with and without (the vote moves files only); the column shows it did not move. "
        "Function gold is the functions and methods a fix changed (a class it changed in its own lines counts for "
        "its file only, since session 46; a run saved before is scored again that way). "
        f"Rows skipped: with {runs['with']['skipped']}, without {runs['without']['skipped']}. Query p50 (ms): with "
        f"{runs['with']['query_ms_p50']}, without {runs['without']['query_ms_p50']}.",
        "",
    ]
    out.write_text("\n".join(lines))
    print("\n".join(lines))


if __name__ == "__main__":
    main()
