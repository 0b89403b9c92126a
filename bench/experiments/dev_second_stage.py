"""Capture the dev split's first stage once, then score any standard re-ranker on it in seconds (session 15).

    python bench/experiments/dev_second_stage.py capture ../shared/eval/swebench_lite_dev.jsonl OUT.pkl
    python bench/experiments/dev_second_stage.py score OUT.pkl [WEIGHTS.json ...]

``capture`` runs each row's first stage exactly as ``repoctx eval`` does (pool 300, no second stage) and keeps,
per row, the function keys of every hit, the second stage's features of the first 30 and the units it keeps
in place. ``score`` re-orders those 30 with a weights file (default: the shipped standard weights) and prints
function Acc@1/5/10 and MRR, for all rows and by halves of the split (even / odd rows), so that a change can be
checked on a half it was not looked at on. With the shipped weights it reproduces ``repoctx eval``'s figures."""
from __future__ import annotations

import pickle
import sys
from pathlib import Path

from repoctx.config import Settings
from repoctx.evaluate.corpus import load_rows
from repoctx.evaluate.metrics import rank_metrics
from repoctx.evaluate.runner import function_ranking, open_corpus_index
from repoctx.index import second_stage_keeps
from repoctx.retrieve import rerank as rr
from repoctx.retrieve.agentic import content_terms
from repoctx.retrieve.hybrid import SearchOptions, search

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
from train_rerank import second_stage_order  # noqa: E402  (the second stage's order, as the trainer scores it)

KS = (1, 5, 10)


def capture(dataset: str, out: str) -> None:
    s = Settings.from_env()
    rows = []
    for i, row in enumerate(load_rows(dataset)):
        if not row.get("gold_functions"):
            continue
        ix = open_corpus_index(row, False, s)
        ix.update()
        q = row["query"]
        dense = ix.dense_index()
        hits = search(ix.store, q, SearchOptions(pool=300, k=300), dense, ix.scope(), limit=300)
        model = rr.load_reranker(embedder=rr.embedder_id(ix), role="standard")
        head = hits[:rr.DEPTH]
        named = rr.trained_dense(model, dense)
        feats = rr.features_for_lanes(ix.store, [(content_terms(q), head)], hits, named,
                                      [q] if named is not None else None, ix.scope())[0]
        keep = second_stage_keeps(q, hits)
        rows.append({"id": row["instance_id"], "pos": i, "repo": row["repo"], "gold": row["gold_functions"],
                     "keys": [function_ranking([h], ix) for h in hits], "feats": feats,
                     "keep": [h.capsule.id in keep for h in head]})
        ix.close()
        print(f"{len(rows)} {row['instance_id']}", file=sys.stderr, flush=True)
    pickle.dump(rows, open(out, "wb"))


def ranking(r: dict, model: rr.LinearReranker | None) -> list[str]:
    n = len(r["feats"])
    order = (second_stage_order(model, r["feats"], r["keep"]) if n >= 2 else list(range(n))) \
        + list(range(n, len(r["keys"])))
    return list(dict.fromkeys(k for i in order for k in r["keys"][i]))


def metrics(rows: list[dict], model) -> dict:
    per = [rank_metrics(ranking(r, model), r["gold"], KS) for r in rows]
    out = {f"acc@{k}": round(100 * sum(p[f"acc@{k}"] for p in per) / len(per), 1) for k in KS}
    out["mrr"] = round(100 * sum(p["mrr"] for p in per) / len(per), 1)
    out["n"] = len(per)
    return out


def score(path: str, weights: list[str]) -> None:
    rows = pickle.load(open(path, "rb"))
    models = [("first stage", None), ("shipped", rr.load_reranker(role="standard"))]
    models += [(w, rr.LinearReranker.from_json(Path(w).read_text())) for w in weights]
    for name, m in models:
        a, ev, od = (metrics(rows, m), metrics([r for r in rows if r["pos"] % 2 == 0], m),
                     metrics([r for r in rows if r["pos"] % 2 == 1], m))
        print(f"{name}: all {a}  even {ev}  odd {od}")


if __name__ == "__main__":
    if sys.argv[1] == "capture":
        capture(sys.argv[2], sys.argv[3])
    else:
        score(sys.argv[2], sys.argv[3:])
