"""Where the agentic path's missed intents are: per missed intent, the plan, each lane's rank of a gold unit after
the second stage (with the lane's first three and their scores), and the k units chosen (session 25).

    python bench/experiments/agentic_misses.py [--data FILE ...] [--k 10] [--oracle]

Same loop and scoring as ``bench/agentic.py --dense`` (the embedded default model; the indexes it builds are
reused). A lane that holds no gold unit of the intent is not printed: the intent's gold is in none of its 30.
"""
from __future__ import annotations

import argparse
import sys
from pathlib import Path

HERE = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(HERE))
from agentic import OraclePlanner, covered, keys, question_index  # noqa: E402
from train_rerank import load  # noqa: E402

from repoctx.config import Settings  # noqa: E402
from repoctx.retrieve.agentic import AgenticRetriever  # noqa: E402


class Recording(AgenticRetriever):
    """The loop as it runs, keeping the re-ranked lanes and the chosen units that ``_select`` sees."""

    def _select(self, lanes):
        self.seen_lanes = lanes
        self.chosen = super()._select(lanes)
        return self.chosen


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--data", nargs="*", type=Path, default=[HERE / "data" / "multipart.jsonl"])
    ap.add_argument("--k", type=int, default=10)
    ap.add_argument("--oracle", action="store_true", help="plan with the gold intent labels")
    a = ap.parse_args()
    rows = load(a.data)
    settings, indexes, missed = Settings.from_env(), {}, 0
    for row in rows:
        ix = question_index(row, settings, indexes)
        loop = Recording(ix, k=a.k, planner=OraclePlanner(row) if a.oracle else None)
        res = loop.run(row["question"])
        cov = covered(keys(res.hits, ix)[:a.k], row["intents"])
        if all(cov):
            continue
        print(f"{'=' * 80}\n{row['id']}: {row['question']}")
        for s in res.sub_queries:
            print(f"  plan: {s}")
        lanes = getattr(loop, "seen_lanes", [])
        for it, ok in zip(row["intents"], cov):
            if ok:
                continue
            missed += 1
            print(f"  MISSED: {it['intent']} | gold: {', '.join(it['gold'])}")
            for li, lane in enumerate(lanes):
                at = next((r for r, h in enumerate(lane) if set(keys([h], ix)) & set(it["gold"])), None)
                if at is None:
                    continue
                top = ", ".join(f"{h.capsule.qualname} ({h.why.get('rerank', {}).get('score')})" for h in lane[:3])
                label = res.sub_queries[li] if li < len(res.sub_queries) else f"lane {li}"
                print(f"    lane '{label}': gold at rank {at} (score {lane[at].why.get('rerank', {}).get('score')}); "
                      f"first three: {top}")
        print(f"  chosen: {', '.join(h.capsule.qualname for h in getattr(loop, 'chosen', []))}")
    print(f"\n{missed} of {sum(len(r['intents']) for r in rows)} intents missed at k={a.k}")


if __name__ == "__main__":
    main()
