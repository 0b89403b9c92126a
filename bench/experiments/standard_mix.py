"""What the standard search adds to the agentic path's ten (session 20).

    python bench/experiments/standard_mix.py capture OUT.jsonl [--data FILE ...]   # ~1 min warm on the multi-part set
    python bench/experiments/standard_mix.py score OUT.jsonl [--k 10]

``capture`` runs each question (default bench/data/multipart.jsonl) through the standard search (30 units, second
stage included, as ``bench/agentic.py`` runs it) and the agentic loop at k, and keeps both rankings' function keys
and the keys of every unit in the loop's sub-query lanes (30 deep, before re-ranking). ``score`` prints intent
coverage at k for: the agentic ten; the standard ten; the agentic first k-m with the standard search's best m not
already there (m = 1..4); the better of the two paths per question (a bound no fixed rule reaches, since it picks
with the gold); and how many intents have a gold unit in the standard search's 30 but in none of the lanes.
"""
from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

HERE = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(HERE))
from agentic import keys, question_index  # noqa: E402

from repoctx.config import Settings  # noqa: E402
from repoctx.retrieve.agentic import AgenticRetriever  # noqa: E402


def capture(out: Path, data: list[Path], k: int) -> None:
    settings, indexes = Settings.from_env(), {}
    with out.open("w") as f:
        for p in data:
            for line in p.read_text().splitlines():
                if not line.strip():
                    continue
                row = json.loads(line)
                ix = question_index(row, settings, indexes)
                std = keys(ix.search(row["question"], k=3 * k), ix)[:30]
                res = AgenticRetriever(ix, k=k).run(row["question"])
                lanes = {x for _, hits in res.lanes["sub_queries"] for x in keys(hits, ix)}
                f.write(json.dumps({"id": row["id"], "intents": [it["gold"] for it in row["intents"]], "std": std,
                                    "agentic": keys(res.hits, ix)[:k], "lanes": sorted(lanes)}) + "\n")


def covered(top: list[str], gold: list[str]) -> bool:
    return any(g in top for g in gold)


def score(path: Path, k: int) -> None:
    rows = [json.loads(line) for line in path.read_text().splitlines() if line.strip()]
    n = sum(len(r["intents"]) for r in rows)

    def cov(pick) -> str:
        c = sum(covered(pick(r)[:k], g) for r in rows for g in r["intents"])
        return f"{100 * c / n:.1f} ({c})"

    def mix(m: int):
        def pick(r):
            head = r["agentic"][:k - m]
            return head + [x for x in r["std"] if x not in head][:m]
        return pick

    best = sum(max(sum(covered(r["agentic"][:k], g) for g in r["intents"]),
                   sum(covered(r["std"][:k], g) for g in r["intents"])) for r in rows)
    only_std = sum(covered(r["std"], g) and not covered(r["lanes"], g) for r in rows for g in r["intents"])
    print(f"{len(rows)} questions, {n} intents, k={k}\n\n| the k | intent coverage (intents) |\n|---|---|")
    print(f"| agentic | {cov(lambda r: r['agentic'])} |\n| standard | {cov(lambda r: r['std'])} |")
    for m in (1, 2, 3, 4):
        print(f"| agentic first {k - m} + standard's best {m} | {cov(mix(m))} |")
    print(f"| the better path per question (picked with the gold) | {100 * best / n:.1f} ({best}) |")
    print(f"\nintents with a gold unit in the standard search's 30 and in no lane: {only_std}")


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("command", choices=("capture", "score"))
    ap.add_argument("out", type=Path)
    ap.add_argument("--data", nargs="*", type=Path, default=[HERE / "data" / "multipart.jsonl"])
    ap.add_argument("--k", type=int, default=10)
    a = ap.parse_args()
    if a.command == "capture":
        capture(a.out, a.data, a.k)
    else:
        score(a.out, a.k)


if __name__ == "__main__":
    main()
