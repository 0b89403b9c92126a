"""What an agent receives, in tokens, and what it covers: search at k=10 at each detail level and context at
budgets 1k/2k/4k, on the SWE-bench dev split's issues (``--dataset``; default ``../shared/eval/swebench_lite_dev.jsonl``, beside the checkout, as ``repoctx eval`` is run in the docs).

    python bench/agent_tokens.py --out after.json            # measure the code on PYTHONPATH (rows: --limit N)
    PYTHONPATH=/tmp/before/src python bench/agent_tokens.py --out before.json   # the code before a change
    python bench/agent_tokens.py --table before.json after.json > bench/results/agent_tokens.md

Each row's tree and index come from the evaluation's machinery (``repoctx.evaluate``: the PyPI release of the
issue, cached under ``~/.cache/repoctx``), so a row is the same corpus ``repoctx eval`` scores.

Per row:
* search: ``Index.retrieve(issue, k=10)`` rendered as an agent receives it. With ``repoctx.render`` (issue 40)
  each level ``brief|signatures|full``, as text (``retrieval_text``: the CLI's and the MCP server's text) and as
  JSON (``wire(retrieval_dict(...))``: ``--json``, the service, MCP structured content). Without it (the code before),
  ``full`` is what ``repoctx search --json`` printed: ``Retrieval.to_dict()``; its text is the CLI's lines.
* context: ``Index.context(issue, task="code_query", budget=B)``: its text's tokens (``Context.tokens``).
* covered: a gold file is covered when a hit (search) or a citation (context) is in it; a gold function when a
  hit or citation names it or a def nested in it (the gold convention, as ``repoctx eval`` counts). ``body``:
  covered by more than its signature (a citation that goes past the unit's head).
* whole files: the tokens of the gold files read whole (what an agent pays to read them).
Tokens are MiniLM WordPiece tokens (``repoctx.providers.embedding.count_tokens``), as the budgets count them.
"""
from __future__ import annotations

import argparse
import json
import re
import statistics
import sys
import time
from pathlib import Path

from repoctx.config import Settings
from repoctx.providers.embedding import count_tokens
from repoctx.evaluate.corpus import load_rows
from repoctx.evaluate.metrics import function_key, normalize_gold_function
from repoctx.evaluate.runner import function_ranking, open_corpus_index
from repoctx.types import DEFS, outermost_def

DATASET = "../shared/eval/swebench_lite_dev.jsonl"
BUDGETS = (1000, 2000, 4000)
K = 10

try:  # the renderer of issue 40; absent in the code before it
    from repoctx import render
except ImportError:  # pragma: no cover - the "before" tree
    render = None


def _search_tokens(ix, r) -> dict[str, dict[str, int]]:
    if render is None:  # what repoctx search printed: the route, then a line per hit with its signals
        lines = [f"route: {r.route['mode']} ({r.route['reason']})"]
        for i, h in enumerate(r.hits, 1):
            sig = ", ".join(f"{k}#{v.get('rank', '')}" if isinstance(v, dict) and "rank" in v else k
                            for k, v in h.why.items() if k != "sub_queries")
            lines.append(f"{i:>3}. {h.capsule.citation}  {h.score:.4f} {sig}")
        return {"full": {"text": count_tokens("\n".join(lines)), "json": count_tokens(json.dumps(r.to_dict(trace=False)))}}
    out = {}
    wire = getattr(render, "wire", lambda d: d)  # what the surfaces send of the dict (brief: one line per hit)
    for detail in render.DETAILS:
        out[detail] = {"text": count_tokens(render.retrieval_text(r, detail, index=ix)),
                       "json": count_tokens(json.dumps(wire(render.retrieval_dict(r, detail, index=ix)), ensure_ascii=False))}
    return out


def _cited_units(ix, citations: list[str]) -> dict[tuple[str, str], set[tuple[int, int]]]:
    """(path, qualname) -> the line spans cited of it."""
    out: dict[tuple[str, str], set[tuple[int, int]]] = {}
    for cite in citations:
        where, qual = cite.rsplit(" :: ", 1)
        path, rng = where.rsplit(":", 1)
        a, b = (int(x) for x in rng.split("-"))
        out.setdefault((path, qual), set()).add((a, b))
    return out


def _head_lines(c) -> int:
    """How many lines open the unit before its body: the signature and a docstring's first line."""
    from repoctx.retrieve import slices

    raw = c.text.split("\n")
    h = slices.header_end(raw, c.language)
    doc = slices.docstring_span(raw, h, c.language)
    return (doc[0] if doc else h) + 1


def _coverage(ix, ctx_text: str, cited: dict[tuple[str, str], set[tuple[int, int]]], gold_files: list[str],
              gold_funcs: list[str]):
    """(gold files covered, gold functions covered, gold functions shown past their head). Past the head: shown
    whole (a fenced piece headed by its citation), or sliced with more lines than its head."""
    files = {p for p, _ in cited}
    funcs: set[str] = set()
    body: set[str] = set()
    by_path: dict[str, list] = {}
    fenced = set(re.findall(r"^### (.+)\n`{3,}", ctx_text, re.M))
    for (path, qual), spans in cited.items():
        caps = by_path.setdefault(path, ix.store.file_capsules(ix.repo, path))
        c = next((c for c in caps if c.qualname == qual), None)
        if c is None or c.kind not in DEFS:
            continue
        outer = outermost_def(c, ix.capsule)
        key = function_key(outer.path, outer.qualname)
        funcs.add(key)
        if c.citation in fenced or (f"### {c.path} :: {c.qualname} (lines {c.start_line}-{c.end_line}, sliced)"
                                    in ctx_text and sum(b - a + 1 for a, b in spans) > _head_lines(c)):
            body.add(key)
    gf = [g for g in gold_files if g in files]
    gfn = [g for g in gold_funcs if g in funcs]
    gbody = [g for g in gold_funcs if g in body]
    return gf, gfn, gbody


def measure(rows: list[dict], say) -> list[dict]:
    settings = Settings.from_env()
    out = []
    for i, row in enumerate(rows, 1):
        t0 = time.perf_counter()
        try:
            ix = open_corpus_index(row, False, settings)
            ix.update()
        except Exception as e:  # noqa: BLE001 - a corpus that cannot be built is skipped, as repoctx eval does
            say(f"{i}/{len(rows)} {row['instance_id']}: skipped ({type(e).__name__}: {e})")
            continue
        try:
            q = row["query"]
            gold_files = list(row["gold_files"])
            gold_funcs = [normalize_gold_function(g) for g in row.get("gold_functions") or []]
            whole = sum(count_tokens((ix.root / p).read_text(encoding="utf-8", errors="replace"))
                        for p in gold_files if (ix.root / p).is_file())
            r = ix.retrieve(q, k=K)
            ranked = function_ranking(r.hits, ix)
            rec = {"instance_id": row["instance_id"], "repo": row["repo"], "gold_files": gold_files,
                   "gold_functions": gold_funcs, "whole_files_tokens": whole,
                   "search": {"tokens": _search_tokens(ix, r),
                              "files": [g for g in gold_files if g in {h.capsule.path for h in r.hits}],
                              "functions": [g for g in gold_funcs if g in ranked]},
                   "context": {}}
            for b in BUDGETS:
                ctx = ix.context(q, task="code_query", budget=b)
                gf, gfn, gbody = _coverage(ix, ctx.text, _cited_units(ix, ctx.citations), gold_files, gold_funcs)
                rec["context"][str(b)] = {"tokens": ctx.tokens, "files": gf, "functions": gfn, "body": gbody,
                                          "units": sorted({f"{p}:{q}" for p, q in _cited_units(ix, ctx.citations)})}
            out.append(rec)
            say(f"{i}/{len(rows)} {row['instance_id']}: ctx@4k {rec['context']['4000']['tokens']} tokens, "
                f"gold fns {len(rec['context']['4000']['functions'])}/{len(gold_funcs)} "
                f"({time.perf_counter() - t0:.1f}s)")
        finally:
            ix.close()
    return out


# ---------------------------------------------------------------------------------------------- the table

def _med(xs: list[float]) -> str:
    return f"{statistics.median(xs):,.0f}" if xs else "–"


def _rate(num: int, den: int) -> str:
    return f"{100 * num / den:.1f} % ({num}/{den})" if den else "–"


def summary(recs: list[dict]) -> dict:
    """The table's figures for one run."""
    n_files = sum(len(r["gold_files"]) for r in recs)
    n_funcs = sum(len(r["gold_functions"]) for r in recs)
    s: dict = {"rows": len(recs), "gold_files": n_files, "gold_functions": n_funcs,
               "whole_median": statistics.median([r["whole_files_tokens"] for r in recs]) if recs else 0,
               "search": {}, "context": {}}
    for level in ("brief", "signatures", "full"):
        got = [r["search"]["tokens"][level] for r in recs if level in r["search"]["tokens"]]
        if got:
            s["search"][level] = {"text": statistics.median([g["text"] for g in got]),
                                  "json": statistics.median([g["json"] for g in got])}
    s["search_files"] = sum(len(r["search"]["files"]) for r in recs)
    s["search_functions"] = sum(len(r["search"]["functions"]) for r in recs)
    for b in BUDGETS:
        key = str(b)
        toks = [r["context"][key]["tokens"] for r in recs]
        s["context"][key] = {
            "tokens_median": statistics.median(toks), "tokens_mean": statistics.fmean(toks),
            "files": sum(len(r["context"][key]["files"]) for r in recs),
            "functions": sum(len(r["context"][key]["functions"]) for r in recs),
            "body": sum(len(r["context"][key].get("body", r["context"][key]["functions"])) for r in recs),
            "saving_median": statistics.median([1 - r["context"][key]["tokens"] / r["whole_files_tokens"]
                                                for r in recs if r["whole_files_tokens"]]),
        }
    # acceptance: context at 4k covers the gold functions search ranks in its top 10; more budget never less
    s["missed_top10"] = [r["instance_id"] for r in recs
                         if not set(r["search"]["functions"]) <= set(r["context"]["4000"]["functions"])]
    s["not_monotone"] = [r["instance_id"] for r in recs
                         if not all(set(r["context"][str(a)]["units"]) <= set(r["context"][str(b)]["units"])
                                    for a, b in zip(BUDGETS, BUDGETS[1:]))]
    return s


def table(before: list[dict], after: list[dict]) -> str:
    ids = {r["instance_id"] for r in before} & {r["instance_id"] for r in after}
    b = summary([r for r in before if r["instance_id"] in ids])
    a = summary([r for r in after if r["instance_id"] in ids])
    out = [f"# What an agent receives: tokens and coverage on the SWE-bench dev split ({a['rows']} issues)", "",
           "Produced by `python bench/agent_tokens.py` (its docstring says how); tokens are MiniLM WordPiece tokens, "
           f"medians over the rows; {a['gold_files']} gold files and {a['gold_functions']} gold functions in all. "
           f"Reading the gold files whole costs a median {_med([r['whole_files_tokens'] for r in after if r['instance_id'] in ids])} tokens.",
           "", "## Search, k=10", "",
           "| detail | before: text | before: JSON | after: text | after: JSON | gold files covered | gold functions covered |",
           "|---|---|---|---|---|---|---|"]
    for level in ("brief", "signatures", "full"):
        bs, as_ = b["search"].get(level, {}), a["search"].get(level, {})
        cells = [f"{x[f]:,.0f}" if x else "–" for x in (bs, as_) for f in ("text", "json")]
        out.append(f"| {level} | {' | '.join(cells)} | "
                   f"{_rate(a['search_files'], a['gold_files'])} | {_rate(a['search_functions'], a['gold_functions'])} |")
    out += ["", "Before, there were no levels: `full` is what `repoctx search --json` printed (`Retrieval.to_dict()`, "
            "every hit's capsule with its whole text) and its text the CLI's one line per hit. Coverage does not "
            "depend on the level (the same ten hits).", "",
            "## Context (code_query), by budget", "",
            "| budget | before: tokens | after: tokens | before: gold files | after: gold files | "
            "before: gold functions | after: gold functions | after: past the signature | "
            "before: fewer tokens than whole files | after: fewer tokens than whole files |",
            "|---|---|---|---|---|---|---|---|---|---|"]
    for key in (str(x) for x in BUDGETS):
        bc, ac = b["context"][key], a["context"][key]
        out.append(f"| {int(key) // 1000}k | {bc['tokens_median']:,.0f} | {ac['tokens_median']:,.0f} | "
                   f"{_rate(bc['files'], b['gold_files'])} | {_rate(ac['files'], a['gold_files'])} | "
                   f"{_rate(bc['functions'], b['gold_functions'])} | {_rate(ac['functions'], a['gold_functions'])} | "
                   f"{_rate(ac['body'], a['gold_functions'])} | "
                   f"{100 * bc['saving_median']:.0f} % | {100 * ac['saving_median']:.0f} % |")
    out += ["", "Fewer tokens than whole files: the median over rows of 1 − context tokens / the gold files' tokens.", "",
            "## Acceptance", "",
            f"- Search's top 10 ranks {_rate(a['search_functions'], a['gold_functions'])} of the gold functions; "
            f"context at 4k covers {_rate(a['context']['4000']['functions'], a['gold_functions'])} "
            f"(before {_rate(b['context']['4000']['functions'], b['gold_functions'])}). Rows where context at 4k misses a "
            f"gold function search ranks in its top 10: after {len(a['missed_top10'])}"
            f"{' (' + ', '.join(a['missed_top10']) + ')' if a['missed_top10'] else ''}, before {len(b['missed_top10'])}.",
            f"- Context at 4k: a median {100 * a['context']['4000']['saving_median']:.0f} % fewer tokens than reading "
            f"the gold files whole (before {100 * b['context']['4000']['saving_median']:.0f} %).",
            f"- More budget never covers less (units cited at 1k ⊆ 2k ⊆ 4k): rows where it does, after "
            f"{len(a['not_monotone'])}{' (' + ', '.join(a['not_monotone']) + ')' if a['not_monotone'] else ''}, "
            f"before {len(b['not_monotone'])}.", ""]
    return "\n".join(out)


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--dataset", default=DATASET)
    ap.add_argument("--limit", type=int)
    ap.add_argument("--out", type=Path, help="write the per-row measures here (JSON)")
    ap.add_argument("--table", nargs=2, type=Path, metavar=("BEFORE", "AFTER"), help="print the table of two runs")
    args = ap.parse_args()
    if args.table:
        print(table(json.loads(args.table[0].read_text()), json.loads(args.table[1].read_text())))
        return 0
    rows = load_rows(args.dataset, args.limit)
    recs = measure(rows, lambda s: print(s, file=sys.stderr, flush=True))
    if args.out:
        args.out.write_text(json.dumps(recs))
    s = summary(recs)
    print(json.dumps({k: v for k, v in s.items()}, indent=1, default=str))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
