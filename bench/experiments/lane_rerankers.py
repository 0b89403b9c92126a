"""Capture the agentic lanes once, then score lane re-rankers on them in seconds (session 17).

    python bench/experiments/lane_rerankers.py capture OUT_DIR      # ~3 min warm: multi-part, training, unseen
    python bench/experiments/lane_rerankers.py score OUT_DIR [--trees] [--drop FEATURE,FEATURE]
                                              [--discount GAMMA:class|file] [--softmax T:MASS:MIX]
                                              [--platt A:B | --calibrate]
    python bench/experiments/lane_rerankers.py standard-rank OUT_DIR NEW_DIR   # + the standard path's ranks

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
capture (session 19). ``--discount`` and ``--softmax`` change how the k are chosen from the lanes (session 20,
see ``choose`` and ``lane_probs``). ``--platt A:B`` reads a lane score s as sigmoid(A * (s - shift) + B) instead of
sigmoid(s - shift); ``--calibrate`` fits A and B (Platt scaling) on the training lanes' out-of-fold scores, each
unit scored by the model fitted without its project (session 25, not kept). ``--trees`` adds gradient-boosted trees
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


def standard_rank(src: Path, out: Path) -> None:
    """A capture with two more features per lane unit: its rank in the standard search's second-stage ranking of
    the whole question (``qstd``, log rank, 60 when not in its 30) and whether that rank is in the first three
    (``qstd_top3``). The standard re-ranker is fitted on the training questions' whole-question examples
    (``train_rerank.standard_examples``) with the question's own project held out, on all of them for the other
    sets, so no unit is scored by a model that saw its question (session 20: stacking the standard path's
    judgement into the lanes; not kept)."""
    from repoctx.index import second_stage_keeps
    from repoctx.retrieve.agentic import content_terms
    from repoctx.retrieve.rerank import embedder_id, rerank_question, trained_dense

    out.mkdir(parents=True, exist_ok=True)
    settings, indexes = Settings.from_env(), {}
    rows = {name: {r["id"]: r for r in tr.load(files)} for name, files in SETS.items()}
    data = tr.standard_examples(list(rows["train"].values()), settings, indexes)
    emb = embedder_id(next(iter(indexes.values())))
    models = {p: tr.fit([d for d in data if d[2] != p], emb) for p in {d[2] for d in data}}
    models[None] = tr.fit(data, emb)
    for name in SETS:
        file = src / f"{name}.pkl"
        if not file.exists():
            continue
        recs = pickle.loads(file.read_bytes())
        for r in recs:
            row = rows[name][r["id"]]
            ix, q = question_index(row, settings, indexes), row["question"]
            model = models[row["corpus"]["pypi"]] if name == "train" else models[None]
            hits = tr.first_stage(ix, q)
            ranked = rerank_question(ix.store, model, content_terms(q), hits, q, trained_dense(model, ix.dense_index()),
                                     keep=second_stage_keeps(q, hits))
            rank = {h.capsule.id: i for i, h in enumerate(ranked, 1)}
            for lane in r["lanes"]:
                for h in lane:
                    h["f"]["qstd"] = math.log(rank.get(h["cid"], 60))
                    h["f"]["qstd_top3"] = float(rank.get(h["cid"], 60) <= 3)
        (out / f"{name}.pkl").write_bytes(pickle.dumps(recs))
        print(f"{name}: {len(recs)} questions with the standard ranks")


def _p(x: float) -> float:
    return 1.0 / (1.0 + math.exp(-max(min(x, 50.0), -50.0)))


def owner(key: str, level: str) -> str:
    """The file of a ``path:qualname`` key, or (level "class") its class, a top-level function's being its file."""
    path, _, qual = key.partition(":")
    return path if level == "file" or "." not in qual else f"{path}:{qual.rsplit('.', 1)[0]}"


def choose(lanes: list[list[tuple[dict, float]]], k: int, discount: tuple[float, str] | None = None) -> list[str]:
    """The k units by expected coverage (as AgenticRetriever._select), then the lanes' reciprocal-rank fusion.
    ``discount`` (gamma, "class" or "file"): once a unit is chosen, the units of its class (file) that share a lane
    with it count gamma times their probability there, as if their being right were tied to its being right
    (session 20: below 1 reads "not that class then", above 1 "that class then"; neither kept)."""
    prob, unit = {}, {}
    for li, hs in enumerate(lanes):
        for h, p in hs:
            prob.setdefault(h["cid"], {})[li] = max(p, prob.get(h["cid"], {}).get(li, 0.0))
            unit.setdefault(h["cid"], h)
    if discount is None:
        chosen = choose_by_coverage(prob, len(lanes), k)
    else:
        gamma, level = discount
        group = {c: owner(unit[c]["keys"][0], level) if unit[c]["keys"] else c for c in unit}
        miss, chosen, left = [1.0] * len(lanes), [], set(prob)
        while left and len(chosen) < k:
            gain = {c: sum(p * miss[li] for li, p in prob[c].items()) for c in left}
            best = max(sorted(left), key=lambda c: gain[c])
            chosen.append(best)
            left.discard(best)
            for li, p in prob[best].items():
                miss[li] *= 1.0 - p
            for c in left:
                if group[c] == group[best]:
                    prob[c] = {li: min(p * gamma, 1.0) if li in prob[best] else p for li, p in prob[c].items()}
    rrf: dict[str, float] = {}
    for hs in lanes:
        for r, (h, _) in enumerate(hs[:10]):
            rrf[h["cid"]] = rrf.get(h["cid"], 0.0) + 1.0 / (60 + r)
    order = chosen + [c for c in sorted(rrf, key=lambda c: -rrf[c]) if c not in chosen]
    return list(dict.fromkeys(x for c in order for x in unit[c]["keys"]))[:k]


def lane_probs(s: list[float], shift: float, softmax: tuple[float, float, float] | None = None,
               platt: tuple[float, float] | None = None) -> list[float]:
    """A lane's scores read as probabilities: each a sigmoid (as the loop reads them), or with ``softmax`` (T, mass,
    mix) that share of the lane's softmax at temperature T times ``mass`` (the lane's units compete for its one
    intent), mixed with the sigmoid (mix 1: softmax alone; session 20, not kept). ``platt`` (A, B): the sigmoid
    of A * (s - shift) + B (session 25, not kept)."""
    a, b = platt or (1.0, 0.0)
    sig = [_p(a * (x - shift) + b) for x in s]
    if softmax is None:
        return sig
    t, mass, mix = softmax
    top = max(s)
    e = [math.exp((x - top) / t) for x in s]
    z = sum(e)
    return [mix * mass * ei / z + (1 - mix) * si for ei, si in zip(e, sig)]


def coverage(recs: list[dict], scorer, shift: float, k: int = 10, select: dict | None = None) -> float:
    select = select or {}
    hit = n = 0
    for r in recs:
        lanes = []
        for hs in (h for h in r["lanes"] if h):
            s = scorer([h["f"] for h in hs])
            ps = lane_probs(s, shift, select.get("softmax"), select.get("platt"))
            lanes.append([(hs[i], ps[i]) for i in sorted(range(len(hs)), key=lambda i: (-s[i], i))])
        top = set(choose(lanes, k, select.get("discount")))
        for it in r["intents"]:
            n += 1
            hit += any(g in top for g in it["gold"])
    return round(100 * hit / max(n, 1), 1)


def examples(recs: list[dict]) -> list[tuple[dict, float, str]]:
    return [(h["f"], h["y"], r["corpus"]) for r in recs for lane in r["lanes"] for h in lane]


def fit_platt(train: list[dict], make) -> tuple[float, float]:
    """Platt scaling of the lane scores: A and B of sigmoid(A * (s - shift) + B) fitted by logistic regression on
    every training unit's out-of-fold score (the model fitted without the unit's project scores it)."""
    import numpy as np

    data, xs, ys = examples(train), [], []
    for proj in sorted({r["corpus"] for r in train}):
        sc, sh = make([d for d in data if d[2] != proj])
        for r in (r for r in train if r["corpus"] == proj):
            for lane in (h for h in r["lanes"] if h):
                xs += [x - sh for x in sc([h["f"] for h in lane])]
                ys += [h["y"] for h in lane]
    x, y, a, b = np.array(xs), np.array(ys, dtype=float), 1.0, 0.0
    for _ in range(5000):  # plain gradient descent on the log-loss; two parameters, convex
        p = 1.0 / (1.0 + np.exp(-(a * x + b)))
        a, b = a - 0.5 * float(((p - y) * x).mean()), b - 0.5 * float((p - y).mean())
    return a, b


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


def score(out: Path, with_trees: bool, drop: set[str] = frozenset(), select: dict | None = None,
          calibrate: bool = False) -> None:
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
    if calibrate:
        select = {**(select or {}), "platt": fit_platt(train, linear)}
        print(f"Platt scaling fitted on the training lanes' out-of-fold scores: A {select['platt'][0]:.3f}, "
              f"B {select['platt'][1]:.3f}")
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
            held += coverage(recs, sc, sh, select=select) * ni
            n += ni
        sc, sh = make(data)
        print(f"| {label} | {held / n:.1f} | {' / '.join(str(coverage(mp, sc, sh, k, select)) for k in (5, 10, 20))} | "
              f"{coverage(unseen, sc, sh, select=select) if unseen else '-'} |")


if __name__ == "__main__":
    import argparse

    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("command", choices=("capture", "score", "standard-rank"))
    ap.add_argument("out", type=Path)
    ap.add_argument("into", type=Path, nargs="?", help="standard-rank: where the augmented capture goes")
    ap.add_argument("--trees", action="store_true")
    ap.add_argument("--drop", default="", help="score: features to fit without, comma-separated")
    ap.add_argument("--discount", metavar="GAMMA:class|file",
                    help="score: choose the k with units tied to a chosen one's class or file (see choose)")
    ap.add_argument("--softmax", metavar="T:MASS:MIX", help="score: read lane scores through a softmax (see lane_probs)")
    ap.add_argument("--platt", metavar="A:B", help="score: read a lane score s as sigmoid(A * (s - shift) + B)")
    ap.add_argument("--calibrate", action="store_true",
                    help="score: fit --platt's A and B on the training lanes' out-of-fold scores")
    a = ap.parse_args()
    select = {}
    if a.discount:
        gamma, level = a.discount.split(":")
        if level not in ("class", "file"):
            ap.error("--discount: the level is class or file")
        select["discount"] = (float(gamma), level)
    if a.softmax:
        select["softmax"] = tuple(float(x) for x in a.softmax.split(":"))
        if len(select["softmax"]) != 3:
            ap.error("--softmax takes T:MASS:MIX")
    if a.platt and a.calibrate:
        ap.error("--platt and --calibrate: one or the other")
    if a.platt:
        select["platt"] = tuple(float(x) for x in a.platt.split(":"))
        if len(select["platt"]) != 2:
            ap.error("--platt takes A:B")
    if a.command == "capture":
        capture(a.out)
    elif a.command == "standard-rank":
        if a.into is None:
            ap.error("standard-rank takes the capture and a new folder: standard-rank CAPTURE_DIR OUT_DIR")
        standard_rank(a.out, a.into)
    else:
        score(a.out, a.trees, {f for f in a.drop.split(",") if f}, select, a.calibrate)
