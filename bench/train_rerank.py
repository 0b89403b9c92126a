"""Fit the agentic lane re-ranker (src/repoctx/retrieve/rerank_weights.json) on training questions.

    python bench/train_rerank.py [--data bench/data/train/*.jsonl] [--out PATH] [--no-write]

Training questions (bench/data/train/, same format as multipart.jsonl) are over projects that are
not in the evaluation set, so bench/agentic.py measures the shipped model on unseen code. For each
question the agentic loop runs without a re-ranker; every candidate of every sub-query's search
(30 deep) becomes one example, labelled 1 when it is a gold location of the question. A logistic
regression (class-weighted, L2) is fitted with numpy. Before the final fit, each training project is
held out in turn: the model fitted on the others re-ranks it, and intent coverage at k=10 is
printed with and without it.
"""
from __future__ import annotations

import argparse
import datetime
import json
import sys
from dataclasses import replace
from pathlib import Path

import numpy as np

from repoctx.config import Settings
from repoctx.retrieve.agentic import AgenticRetriever, content_terms
from repoctx.retrieve.rerank import DEPTH, LinearReranker, features_for_lanes, weights_file

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))
from agentic import covered, keys, question_index  # noqa: E402  (same scoring as the benchmark)


def load(paths: list[Path]) -> list[dict]:
    rows = []
    for p in paths:
        rows += [json.loads(line) for line in p.read_text().splitlines() if line.strip()]
    return rows


def examples(rows: list[dict], settings: Settings) -> tuple[list[tuple[dict, float, str]], dict]:
    """(feature dict, label, project) per candidate, and the opened indexes by corpus."""
    out, indexes = [], {}
    for row in rows:
        ix = question_index(row, settings, indexes)
        res = AgenticRetriever(ix, reranker=None, per_query_k=DEPTH).run(row["question"])
        lanes = res.lanes["sub_queries"]
        gold = {g for it in row["intents"] for g in it["gold"]}
        feats = features_for_lanes(ix.store, [(content_terms(s.text), hits) for s, hits in lanes], res.lanes["question"],
                                   ix.dense_index(), [s.text for s, _ in lanes])
        for (_, hits), fs in zip(lanes, feats):
            for h, f in zip(hits, fs):
                out.append((f, float(bool(set(keys([h], ix)) & gold)), row["corpus"]["pypi"]))
    return out, indexes


def fit(data: list[tuple[dict, float, str]], embedder: str | None = None, l2: float = 1.0, iters: int = 3000,
        lr: float = 0.2) -> LinearReranker:
    names = list(data[0][0])
    X = np.array([[f[n] for n in names] for f, _, _ in data])
    y = np.array([lab for _, lab, _ in data])
    mu, sd = X.mean(0), X.std(0) + 1e-9
    Xn = (X - mu) / sd
    w, b = np.zeros(len(names)), 0.0
    pos_weight = (len(y) - y.sum()) / max(y.sum(), 1.0)  # positives are rare: weigh them up
    sw = np.where(y > 0, pos_weight, 1.0)
    for _ in range(iters):
        p = 1.0 / (1.0 + np.exp(-(Xn @ w + b)))
        g = (p - y) * sw
        w -= lr * (Xn.T @ g / len(y) + l2 * w / len(y))
        b -= lr * float(g.mean())
    # the class weighting shifts every log-odds by ln(pos_weight); the shift is kept so that the score
    # minus it reads as a calibrated probability (agentic selection uses that)
    return LinearReranker(names, [float(x) for x in mu], [float(x) for x in sd], [float(x) for x in w], float(b),
                          # the name-similarity features hold for this embedding model only (agentic checks it)
                          {"prior_shift": float(np.log(pos_weight)), "embedder": embedder})


def coverage(rows: list[dict], indexes: dict, model: LinearReranker | None, settings: Settings, k: int = 10) -> float:
    cov: list[bool] = []
    for row in rows:
        ix = question_index(row, settings, indexes)
        res = AgenticRetriever(ix, reranker=model, k=k).run(row["question"])
        cov += covered(keys(res.hits, ix)[:k], row["intents"])
    return round(100 * sum(cov) / max(len(cov), 1), 1)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--data", nargs="*", type=Path, default=sorted((HERE / "data" / "train").glob("*.jsonl")))
    ap.add_argument("--out", type=Path, default=None,
                    help="default: the shipped file of the embedding model in use (REPOCTX_EMBEDDER): "
                         "rerank_weights.json for the offline default, rerank_weights.<model>.json for another")
    ap.add_argument("--no-write", action="store_true")
    ap.add_argument("--lexical-only", action="store_true", help="no dense signal (faster; not what ships)")
    a = ap.parse_args()
    settings = Settings.from_env()
    if a.lexical_only:
        settings = replace(settings, embedder="none")
    rows = load(a.data)
    data, indexes = examples(rows, settings)
    embedder = next((ix.embedder.model_id for ix in indexes.values() if ix.embedder), None)
    print(f"{len(rows)} questions, {sum(len(r['intents']) for r in rows)} intents, {len(data)} candidates, "
          f"{int(sum(lab for _, lab, _ in data))} gold")
    cv = {}
    for hold in sorted({r["corpus"]["pypi"] for r in rows}):
        model = fit([d for d in data if d[2] != hold], embedder)
        held = [r for r in rows if r["corpus"]["pypi"] == hold]
        cv[hold] = {"questions": len(held), "first_stage": coverage(held, indexes, None, settings),
                    "reranked": coverage(held, indexes, model, settings)}
        print(f"held out {hold}: intent coverage@10 {cv[hold]['first_stage']} -> {cv[hold]['reranked']}")
    intents = {p: sum(len(r["intents"]) for r in rows if r["corpus"]["pypi"] == p) for p in cv}
    for key in ("first_stage", "reranked"):
        cv.setdefault("all", {})[key] = round(sum(cv[p][key] * intents[p] for p in intents) / sum(intents.values()), 1)
    print(f"held out, all projects (intent-weighted): {cv['all']['first_stage']} -> {cv['all']['reranked']}")
    model = fit(data, embedder)
    model.meta = {**(model.meta or {}), "trained_on": [str(p.relative_to(HERE.parent)) if p.is_relative_to(HERE.parent) else str(p)
                                 for p in a.data],
                  "questions": len(rows), "candidates": len(data), "gold": int(sum(lab for _, lab, _ in data)),
                  "held_out_coverage_at_10": cv, "date": datetime.date.today().isoformat(),
                  "command": "python bench/train_rerank.py" + (f" (REPOCTX_EMBEDDER={settings.embedder})" if settings.embedder not in (None, "", "local") else "")}
    print("weights:", {n: round(w, 2) for n, w in zip(model.features, model.weights)})
    if not a.no_write:
        from repoctx.embed import get_embedder

        default_id = get_embedder("local").model_id
        out = a.out or weights_file(None if embedder in (None, default_id) else embedder)
        out.write_text(model.to_json() + "\n")
        print(f"wrote {out}")


if __name__ == "__main__":
    main()
