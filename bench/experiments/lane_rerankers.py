"""Capture the agentic lanes once, then score lane re-rankers on them in seconds (session 17).

    python bench/experiments/lane_rerankers.py capture OUT_DIR      # ~3 min warm: multi-part, training, unseen
    python bench/experiments/lane_rerankers.py score OUT_DIR [--trees] [--drop FEATURE,FEATURE]

``capture`` runs every multi-part (bench/data/multipart.jsonl) and training (bench/data/train/*.jsonl) question
through the agentic loop without a re-ranker, 30 deep, as ``bench/train_rerank.py`` does, and keeps per lane its
units' function keys, their re-ranker features and their label (gold of the lane's own intent, ``intent_gold``).
``score`` fits the linear re-ranker (``train_rerank.fit``) with each training project held out in turn and on all
training questions for the multi-part set, orders each lane by it, reads the scores as probabilities and chooses the
k results by expected coverage as ``AgenticRetriever._select`` does (parallel-implementation alignment is not
replayed, so the figures sit ~0.5-1 point under bench/agentic.py's), and prints intent coverage. It also prints the
union bound (an intent with a gold unit anywhere in its question's lanes). The unseen set (bench/data/unseen/) is
captured too and only scored, never fitted on (the model fitted on all training questions, as for the multi-part
set). ``--drop`` fits without the named features: a new feature is judged by scoring with and without it on one
capture (session 19). ``--trees`` adds gradient-boosted trees
(LightGBM, which the project does not depend on: ``pip install lightgbm==4.7.0`` into the environment first).
"""
from __future__ import annotations

import json
import math
import pickle
import sys
from pathlib import Path

HERE = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(HERE))
import train_rerank as tr  # noqa: E402
from agentic import question_index  # noqa: E402

from repoctx.config import Settings  # noqa: E402
from repoctx.retrieve.agentic import choose_by_coverage  # noqa: E402

SETS = {"multipart": [HERE / "data" / "multipart.jsonl"], "train": sorted((HERE / "data" / "train").glob("*.jsonl")),
        "unseen": sorted((HERE / "data" / "unseen").glob("*.jsonl"))}


def capture(out: Path) -> None:
    out.mkdir(parents=True, exist_ok=True)
    settings, indexes = Settings.from_env(), {}
    for name, files in SETS.items():
        recs = []
        for row in tr.load(files):
            lanes = tr.question_lanes(row, question_index(row, settings, indexes))
            rec_lanes = [[{"cid": h.capsule.id, "keys": ks, "f": f, "y": y} for h, ks, f, y in lane] for lane in lanes]
            recs.append({"id": row["id"], "corpus": row["corpus"]["pypi"], "intents": row["intents"], "lanes": rec_lanes})
        (out / f"{name}.pkl").write_bytes(pickle.dumps(recs))
        print(f"{name}: {len(recs)} questions captured")


def _p(x: float) -> float:
    return 1.0 / (1.0 + math.exp(-max(min(x, 50.0), -50.0)))


def choose(lanes: list[list[tuple[dict, float]]], k: int) -> list[str]:
    """The k units by expected coverage (as AgenticRetriever._select), then the lanes' reciprocal-rank fusion."""
    prob, unit = {}, {}
    for li, hs in enumerate(lanes):
        for h, p in hs:
            prob.setdefault(h["cid"], {})[li] = max(p, prob.get(h["cid"], {}).get(li, 0.0))
            unit.setdefault(h["cid"], h)
    chosen = choose_by_coverage(prob, len(lanes), k)
    rrf: dict[str, float] = {}
    for hs in lanes:
        for r, (h, _) in enumerate(hs[:10]):
            rrf[h["cid"]] = rrf.get(h["cid"], 0.0) + 1.0 / (60 + r)
    order = chosen + [c for c in sorted(rrf, key=lambda c: -rrf[c]) if c not in chosen]
    return list(dict.fromkeys(x for c in order for x in unit[c]["keys"]))[:k]


def coverage(recs: list[dict], scorer, shift: float, k: int = 10) -> float:
    hit = n = 0
    for r in recs:
        lanes = []
        for hs in (h for h in r["lanes"] if h):
            s = scorer([h["f"] for h in hs])
            lanes.append([(hs[i], _p(s[i] - shift)) for i in sorted(range(len(hs)), key=lambda i: (-s[i], i))])
        top = set(choose(lanes, k))
        for it in r["intents"]:
            n += 1
            hit += any(g in top for g in it["gold"])
    return round(100 * hit / max(n, 1), 1)


def examples(recs: list[dict]) -> list[tuple[dict, float, str]]:
    return [(h["f"], h["y"], r["corpus"]) for r in recs for lane in r["lanes"] for h in lane]


def linear(data):
    m = tr.fit(data, None)
    return (lambda fs: [m.score(f) for f in fs]), m.meta["prior_shift"]


def trees(rounds: int = 200, depth: int = 3, balance: bool = True):
    import lightgbm as lgb
    import numpy as np

    def make(data):
        names = list(data[0][0])
        X = np.array([[f[n] for n in names] for f, _, _ in data])
        y = np.array([d[1] for d in data])
        pw = (len(y) - y.sum()) / max(y.sum(), 1.0)
        params = dict(objective="binary", verbose=-1, seed=0, deterministic=True, num_threads=2, num_leaves=2 ** depth - 1,
                      max_depth=depth, learning_rate=0.05, min_data_in_leaf=50, lambda_l2=1.0, feature_fraction=0.8,
                      bagging_fraction=0.8, bagging_freq=1, **({"scale_pos_weight": pw} if balance else {}))
        b = lgb.train(params, lgb.Dataset(X, y), rounds)
        return (lambda fs: list(b.predict(np.array([[f[n] for n in names] for f in fs]), raw_score=True))), \
            (math.log(pw) if balance else 0.0)
    return make


def without(recs: list[dict], drop: set[str]) -> list[dict]:
    for r in recs:
        for lane in r["lanes"]:
            for h in lane:
                h["f"] = {n: v for n, v in h["f"].items() if n not in drop}
    return recs


def score(out: Path, with_trees: bool, drop: set[str] = frozenset()) -> None:
    train, mp = (without(pickle.loads((out / f"{n}.pkl").read_bytes()), drop) for n in ("train", "multipart"))
    unseen_file = out / "unseen.pkl"
    unseen = without(pickle.loads(unseen_file.read_bytes()), drop) if unseen_file.exists() else []
    for name, recs in (("multipart", mp), ("train", train), ("unseen", unseen)):
        if not recs:
            continue
        n = sum(len(r["intents"]) for r in recs)
        union = sum(any(g in {x for lane in r["lanes"] for h in lane for x in h["keys"]} for g in it["gold"])
                    for r in recs for it in r["intents"])
        print(f"{name}: gold anywhere in the lanes (30 deep) for {100 * union / n:.1f} % of {n} intents")
    makers = {"linear": linear}
    if with_trees:
        makers |= {"trees d3 200 balanced": trees(), "trees d2 300": trees(300, 2, False)}
    data = examples(train)
    if drop:
        print(f"features left out: {', '.join(sorted(drop))}")
    print("| re-ranker | training, each project held out, k=10 | multi-part k=5 / 10 / 20 | unseen k=10 |\n|---|---|---|---|")
    for label, make in makers.items():
        held, n = 0.0, 0
        for proj in sorted({r["corpus"] for r in train}):
            sc, sh = make([d for d in data if d[2] != proj])
            recs = [r for r in train if r["corpus"] == proj]
            ni = sum(len(r["intents"]) for r in recs)
            held += coverage(recs, sc, sh) * ni
            n += ni
        sc, sh = make(data)
        print(f"| {label} | {held / n:.1f} | {' / '.join(str(coverage(mp, sc, sh, k)) for k in (5, 10, 20))} | "
              f"{coverage(unseen, sc, sh) if unseen else '-'} |")


if __name__ == "__main__":
    import argparse

    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("command", choices=("capture", "score"))
    ap.add_argument("out", type=Path)
    ap.add_argument("--trees", action="store_true")
    ap.add_argument("--drop", default="", help="score: features to fit without, comma-separated")
    a = ap.parse_args()
    if a.command == "capture":
        capture(a.out)
    else:
        score(a.out, a.trees, {f for f in a.drop.split(",") if f})
