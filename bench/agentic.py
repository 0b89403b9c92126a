"""Standard vs agentic retrieval on multi-part questions (bench/data/multipart.jsonl), at equal k.

    python bench/agentic.py [--k 10] [--dense] [--json] [--limit N] [--corpus NAME] [--data FILE ...] [--oracle]

For each question: standard retrieval of the whole question vs the agentic loop with the offline
planner, both cut to the same k. An intent is covered when one of its gold `path:qualname`
locations is among the top k (a def nested in a function counts as that function). Prints intent
coverage, strict Acc@k (every intent covered), iterations used and latency; then the router's
decision rate on these questions and on the single-intent SWE-bench dev questions.

--oracle plans with the gold intent labels themselves (one sub-query per intent, no re-plan): the
coverage the rest of the pipeline reaches with a perfect planner, i.e. the ceiling that better planning
alone cannot pass.
"""
from __future__ import annotations

import argparse
import json
import statistics
import sys
import time
from dataclasses import replace
from pathlib import Path

from repoctx.config import Settings
from repoctx.evaluate.corpus import load_rows
from repoctx.evaluate.runner import function_ranking, open_corpus_index
from repoctx.retrieve.agentic import AgenticRetriever
from repoctx.retrieve.planner import SubQuery
from repoctx.retrieve.router import route

HERE = Path(__file__).resolve().parent
SWE = HERE.parent.parent / "shared" / "eval" / "swebench_lite_dev.jsonl"


def keys(hits, ix) -> list[str]:
    """Ranked path:qualname keys for functions/methods, plus classes as themselves."""
    out = []
    for h in hits:
        c = h.capsule
        if c.kind == "class":
            out.append(f"{c.path}:{c.qualname}")
        else:
            out.extend(function_ranking([h], ix))
    return list(dict.fromkeys(out))


def question_index(row: dict, settings: Settings, indexes: dict):
    """The (updated) index of a question's corpus, opened once per corpus and kept in ``indexes``."""
    key = (row["corpus"]["pypi"], row["corpus"]["version"])
    if key not in indexes:
        indexes[key] = open_corpus_index({"corpus": row["corpus"], "instance_id": row["id"]}, False, settings)
        indexes[key].update()
    return indexes[key]


def covered(ranked: list[str], intents: list[dict]) -> list[bool]:
    top = set(ranked)
    return [any(g in top for g in it["gold"]) for it in intents]


class OraclePlanner:
    """The question's gold intent labels as its sub-queries: an upper bound on what planning can give."""

    def __init__(self, row: dict):
        self.intents = [it["intent"] for it in row["intents"]]

    def plan(self, question: str) -> list[SubQuery]:
        return [SubQuery(i, i) for i in self.intents]

    def replan(self, question: str, uncovered: list[SubQuery], attempt: int) -> list[SubQuery]:
        return []


def run(k: int, dense: bool, limit: int | None, corpus: str | None = None, data: list[Path] | None = None,
        oracle: bool = False) -> dict:
    rows = [json.loads(line) for p in (data or [HERE / "data" / "multipart.jsonl"])
            for line in p.read_text().splitlines() if line.strip()]
    if corpus:
        rows = [r for r in rows if r["corpus"]["pypi"].lower() == corpus.lower()]
    rows = rows[:limit] if limit else rows
    settings = Settings.from_env() if dense else replace(Settings.from_env(), embedder="none")
    stats = {"standard": {"cov": [], "acc": [], "ms": []}, "agentic": {"cov": [], "acc": [], "ms": [], "iters": []}}
    per_row = []
    indexes = {}
    for row in rows:
        ix = question_index(row, settings, indexes)
        t0 = time.perf_counter()
        std_hits = ix.search(row["question"], k=3 * k)  # a deeper pool: modules take no slot of the k keys
        t1 = time.perf_counter()
        result = AgenticRetriever(ix, k=k, planner=OraclePlanner(row) if oracle else None).run(row["question"])
        t2 = time.perf_counter()
        std_cov = covered(keys(std_hits, ix)[:k], row["intents"])
        ag_cov = covered(keys(result.hits, ix)[:k], row["intents"])
        for name, cov, ms in (("standard", std_cov, t1 - t0), ("agentic", ag_cov, t2 - t1)):
            stats[name]["cov"].extend(cov)
            stats[name]["acc"].append(all(cov))
            stats[name]["ms"].append(1000 * ms)
        stats["agentic"]["iters"].append(result.iterations)
        per_row.append({"id": row["id"], "corpus": row["corpus"]["pypi"], "intents": len(row["intents"]),
                        "standard": sum(std_cov),
                        "agentic": sum(ag_cov), "sub_queries": len(result.sub_queries), "iterations": result.iterations})
        print(f"{row['id']}: intents {len(row['intents'])}, standard {sum(std_cov)}, agentic {sum(ag_cov)} "
              f"({len(result.sub_queries)} sub-queries, {result.iterations} it)", file=sys.stderr)

    def pct(xs):
        return round(100 * sum(xs) / max(len(xs), 1), 1)

    def p(xs, q):
        xs = sorted(xs)
        return round(xs[min(len(xs) - 1, int(q * len(xs)))], 1) if xs else None

    swe = load_rows(SWE) if SWE.exists() else []
    out = {"k": k, "dense": dense, "oracle": oracle, "questions": len(rows), "intents": len(stats["standard"]["cov"])}
    for name, s in stats.items():
        out[name] = {"intent_coverage": pct(s["cov"]), f"acc@{k}": pct(s["acc"]), "p50_ms": p(s["ms"], 0.5),
                     "p95_ms": p(s["ms"], 0.95)}
    out["agentic"]["mean_iterations"] = round(statistics.mean(stats["agentic"]["iters"]), 2)
    out["router"] = {
        "multipart_to_agentic": pct([route(r["question"]).mode == "agentic" for r in rows]),
        "swebench_to_standard": pct([route(r["query"]).mode == "standard" for r in swe]) if swe else None,
        "swebench_n": len(swe)}
    out["rows"] = per_row
    out["by_corpus"] = {}
    for corpus in dict.fromkeys(r["corpus"] for r in per_row):
        rs = [r for r in per_row if r["corpus"] == corpus]
        n = sum(r["intents"] for r in rs)
        out["by_corpus"][corpus] = {"questions": len(rs), "intents": n,
                                    **{name: round(100 * sum(r[name] for r in rs) / n, 1) for name in stats}}
    return out


def table(r: dict) -> str:
    k = r["k"]
    lines = [f"Multi-part questions: {r['questions']} questions, {r['intents']} intents, k={k}, "
             f"{'hybrid with dense' if r['dense'] else 'lexical + exact + graph (no dense)'}"
             + (", agentic planned by the oracle (gold intent labels)" if r.get("oracle") else ""), "",
             f"| path | intent coverage | strict Acc@{k} | iterations | p50 ms | p95 ms |", "|---|---|---|---|---|---|"]
    for name in ("standard", "agentic"):
        s = r[name]
        lines.append(f"| {name} | {s['intent_coverage']} | {s[f'acc@{k}']} | {s.get('mean_iterations', '-')} | "
                     f"{s['p50_ms']} | {s['p95_ms']} |")
    lines += ["", "| corpus | questions | intents | standard | agentic |", "|---|---|---|---|---|"]
    for corpus, c in r["by_corpus"].items():
        lines.append(f"| {corpus} | {c['questions']} | {c['intents']} | {c['standard']} | {c['agentic']} |")
    rt = r["router"]
    lines += ["", f"Router: {rt['multipart_to_agentic']} % of the multi-part questions go agentic; "
              f"{rt['swebench_to_standard']} % of {rt['swebench_n']} SWE-bench dev questions stay standard."]
    return "\n".join(lines)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--k", type=int, default=10)
    ap.add_argument("--dense", action="store_true", help="use the embedded dense model too (embeds the corpora)")
    ap.add_argument("--limit", type=int)
    ap.add_argument("--corpus", help="only questions over this PyPI project (Django, sympy, pytest)")
    ap.add_argument("--data", nargs="*", type=Path, help="question files (default bench/data/multipart.jsonl); "
                    "on bench/data/train/*.jsonl the agentic figures are in-sample for the shipped re-ranker")
    ap.add_argument("--oracle", action="store_true", help="plan with the gold intent labels (the planning ceiling)")
    ap.add_argument("--json", action="store_true")
    a = ap.parse_args()
    r = run(a.k, a.dense, a.limit, a.corpus, a.data, a.oracle)
    print(json.dumps(r) if a.json else table(r))


if __name__ == "__main__":
    main()
