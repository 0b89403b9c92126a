"""Fit the re-rankers (src/repoctx/retrieve/rerank_weights*.json) on training questions.

    python bench/train_rerank.py [--role lanes|standard] [--data bench/data/train/*.jsonl] [--out PATH] [--no-write]
                                 [--reports N | --reports-rows FILE] [--save-reports FILE] [--history ROWS]

Training questions (bench/data/train/, same format as multipart.jsonl) are over projects that are
not in the evaluation set, so bench/agentic.py measures the shipped model on unseen code. For each
question the agentic loop runs without a re-ranker; every candidate of every sub-query's search
(30 deep) becomes one example, labelled 1 when it is a gold location of the intent that sub-query serves
(``intent_gold``). A logistic
regression (class-weighted, L2) is fitted with numpy. Before the final fit, each training project is
held out in turn: the model fitted on the others re-ranks it, and intent coverage at k=10 is
printed with and without it.

``--role standard`` fits the standard search's second stage instead (rerank_weights.standard.json) on the
lane examples above plus, per question, its own first-stage search (30 deep) as the one lane the second
stage sees, the units it may move being examples. Held out by project, intent coverage at k=10 of the
standard search is printed under the first stage, lane examples only (the weights the second stage used
before) and both.

``--reports N`` (standard role) adds issue-like rows: release-note entries of the pinned training packages against
the function their change edited in the release before (``bench/embedder/reports.py``; the pairs come from
``python bench/train_embedder.py mine --releases 12`` and are not committed), the newest N old releases of each
package, each searched as an issue report. Which rows that gives depends on the miner's version and on PyPI's
releases, so ``--save-reports FILE`` writes the rows used, each release's sdist named by file and sha256, and
``--reports-rows FILE`` fits on such a file instead (sdists not under ``--train-work`` are fetched from PyPI and
checked). The shipped file was fitted on ``bench/data/reports/standard_2026-12-03.jsonl``: its 326 rows, mined again
with the miner of its day (c5d7e61, ``--reports 2``). Their own function ranks are printed under the first stage,
the question-only weights and, five folds by package, weights fitted without the fold's packages.

``--history ROWS`` (standard role) adds fix commits read the same way: the rows ``bench/history_rows.py --rows-only``
writes (a commit's cleaned message, the repository at its parent, the functions it changed), each asked as an issue
report of its parent's index. Their own function ranks are printed under the first stage, the weights fitted without
them and, each project held out, weights fitted without that project's commits. Session 45 fitted with the 205 fixes
before the cut-offs (``--before``) and evaluated on the 167 after them; the shipped file is not fitted with them
(docs/research/index.md).
"""
from __future__ import annotations

import argparse
import datetime
import hashlib
import json
import sys
from dataclasses import replace
from pathlib import Path

import numpy as np

from repoctx.config import Settings
from repoctx.index import Index, second_stage_keeps
from repoctx.retrieve.agentic import AgenticRetriever, content_terms
from repoctx.retrieve.hybrid import SearchOptions
from repoctx.retrieve.rerank import (DEPTH, ROLES, LinearReranker, features_for_lanes, rerank_question,
                                     trained_dense, weights_file)

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))
from agentic import covered, keys, question_index  # noqa: E402  (same scoring as the benchmark)
from embedder.reports import gold_match, pin, pinned_rows, report_rows, unpack  # noqa: E402
from train_embedder import DEFAULT_WORK as TRAIN_WORK  # noqa: E402  (where its mined pairs are)


def load(paths: list[Path]) -> list[dict]:
    rows = []
    for p in paths:
        rows += [json.loads(line) for line in p.read_text().splitlines() if line.strip()]
    return rows


def intent_gold(sub_query: str, lane: list[str], intents: list[dict]) -> set[str]:
    """The gold of the intent a sub-query's lane serves: among the intents with a gold unit in the lane, the one
    whose words the sub-query shares most, then the one whose gold the lane ranks first (empty when the lane holds
    no gold). A lane is labelled for its own intent: labelled with the whole question's gold, a lane learnt to put
    first what another lane should bring (each training project held out: 69.3 -> 72.4 % of intents covered; the
    multi-part questions' oracle plan 73.6 -> 81.0)."""
    words = set(content_terms(sub_query))
    where: dict[str, int] = {}  # key -> its first place in the lane
    for i, k in enumerate(lane):
        where.setdefault(k, i)
    held = [it for it in intents if any(g in where for g in it["gold"])]
    if not held:
        return set()
    best = max(held, key=lambda it: (len(words & set(content_terms(it["intent"]))),
                                     -min(where[g] for g in it["gold"] if g in where)))
    return set(best["gold"])


def examples(rows: list[dict], settings: Settings, per_intent: bool = True) -> tuple[list[tuple[dict, float, str]], dict]:
    """(feature dict, label, project) per candidate, and the opened indexes by corpus. ``per_intent``: a
    candidate is gold when it is its lane's intent's (``intent_gold``), else when it is any intent's (what the
    standard search, whose one lane is the whole question, looks for)."""
    out, indexes = [], {}
    for row in rows:
        for lane in question_lanes(row, question_index(row, settings, indexes), per_intent):
            out += [(f, label, row["corpus"]["pypi"]) for _, _, f, label in lane]
    return out, indexes


def question_lanes(row: dict, ix, per_intent: bool = True) -> list[list[tuple]]:
    """A question's sub-query lanes as the loop makes them without a re-ranker (30 deep): per lane, per unit,
    (hit, its path:qualname keys, its features, its label; see ``examples`` for ``per_intent``)."""
    res = AgenticRetriever(ix, reranker=None, per_query_k=DEPTH).run(row["question"])
    lanes = res.lanes["sub_queries"]
    feats = features_for_lanes(ix.store, [(content_terms(s.text), hits) for s, hits in lanes], res.lanes["question"],
                               ix.dense_index(), [s.text for s, _ in lanes])
    out = []
    for (sub, hits), fs in zip(lanes, feats):
        hit_keys = [keys([h], ix) for h in hits]
        lane_gold = intent_gold(sub.text, [k for ks in hit_keys for k in ks], row["intents"]) if per_intent \
            else {g for it in row["intents"] for g in it["gold"]}
        out.append([(h, ks, f, float(bool(set(ks) & lane_gold))) for h, ks, f in zip(hits, hit_keys, fs)])
    return out


_FIRST: dict[tuple[int, str], list] = {}


def first_stage(ix, question: str) -> list:
    """A question's standard search without its second stage, searched once per run (the examples and
    each held-out model's coverage read it; re-ranking builds new lists and leaves it as it was)."""
    key = (id(ix), question)
    if key not in _FIRST:
        _FIRST[key] = ix.search(question, k=DEPTH, options=SearchOptions(k=DEPTH, rerank=False))
    return _FIRST[key]


def standard_examples(rows: list[dict], settings: Settings, indexes: dict) -> list[tuple[dict, float, str]]:
    """(feature dict, label, project) per unit the standard search's second stage may move. ``indexes``: the
    corpora opened so far (the held-out coverage then reads the same first-stage searches)."""
    out = []
    for row in rows:
        ix = question_index(row, settings, indexes)
        q = row["question"]
        hits = first_stage(ix, q)
        keep = second_stage_keeps(q, hits)
        gold = {g for it in row["intents"] for g in it["gold"]}
        feats = features_for_lanes(ix.store, [(content_terms(q), hits)], hits, ix.dense_index(), [q])[0]
        for h, f in zip(hits, feats):
            if h.capsule.id not in keep:
                out.append((f, float(bool(set(keys([h], ix)) & gold)), row["corpus"]["pypi"]))
    return out


def report_searches(rows: list[dict], settings: Settings) -> list[tuple[dict, list, list[list[str]], set[str], list]]:
    """Per release-note row: (row, the first-stage hits' (id, kind), their keys, the ids the second stage keeps,
    their features). Each old release is unpacked and indexed once (under the evaluation cache, like the other
    corpora); a release that does not index is left out, said."""
    from repoctx.evaluate.corpus import cache_dir

    out, by_tree = [], {}
    for r in rows:
        by_tree.setdefault(r["tree"], []).append(r)
    for n, (tree, group) in enumerate(by_tree.items(), 1):
        root = unpack(Path(group[0]["archive"]), Path(tree))
        name = "rel-" + root.name
        ix = None
        try:
            ix = Index(root, replace(settings, index_dir=cache_dir() / "indexes" / name), name=name[:100])
            ix.update()
        except Exception as e:  # noqa: BLE001
            print(f"  ! {root.name}: {type(e).__name__}: {str(e)[:200]}", file=sys.stderr)
            if ix is not None:
                ix.close()
            continue
        try:
            out += [x for r in group if (x := report_search(ix, r)) is not None]
        finally:
            ix.close()
        print(f"[reports {n}/{len(by_tree)}] {root.name}: {len(group)} rows", file=sys.stderr, flush=True)
    return out


def report_search(ix, r: dict):
    """One report's first stage, 30 deep, in ``report_searches``' form (None: fewer than two units found)."""
    q = r["query"]
    hits = ix.search(q, k=DEPTH, options=SearchOptions(k=DEPTH, rerank=False))
    if len(hits) < 2:
        return None
    feats = features_for_lanes(ix.store, [(content_terms(q), hits)], hits, ix.dense_index(), [q])[0]
    return (r, [(h.capsule.id, h.capsule.kind) for h in hits], [keys([h], ix) for h in hits],
            second_stage_keeps(q, hits, report=True), feats)


def history_searches(path: Path, settings: Settings) -> list:
    """``report_searches`` for the fix commits ``bench/history_rows.py --rows-only`` wrote (a row per commit: its
    cleaned message, the repository at its parent as a git corpus, the functions it changed as gold), each asked
    as an issue report of its parent's index (under the evaluation cache, as `repoctx eval` opens it). A row's
    ``package`` is its project, so the examples fold by project (``report_examples(..., "history:")``)."""
    from repoctx.evaluate.runner import open_corpus_index

    out = []
    rows = load([path])
    for n, row in enumerate(rows, 1):
        ix = open_corpus_index(row, False, settings)
        try:
            ix.update()
            r = {"id": row["instance_id"], "package": row["repo"], "query": row["query"],
                 "gold": row["gold_functions"]}
            if (x := report_search(ix, r)) is not None:
                out.append(x)
        finally:
            ix.close()
        if n % 50 == 0 or n == len(rows):
            print(f"[history {n}/{len(rows)}]", file=sys.stderr, flush=True)
    return out


def report_examples(searches, prefix: str = "report:") -> list[tuple[dict, float, str]]:
    """(feature dict, label, package) per unit the second stage may move, the note read as an issue report
    (what it names is not kept in place); a function or method is gold when the note's change edited it.
    ``prefix``: what the package is named with as an example's project (release notes ``report:``, fix commits
    ``history:``)."""
    out = []
    for r, hits, hit_keys, keep, feats in searches:
        for (cid, kind), ks, f in zip(hits, hit_keys, feats):
            if cid not in keep:
                gold = kind in ("function", "method") and gold_match(ks, r["gold"])
                out.append((f, float(gold), prefix + r["package"]))
    return out


def second_stage_order(model: LinearReranker | None, feats: list[dict], kept: list[bool]) -> list[int]:
    """Positions of a standard search's first units after its second stage: the units it may move re-ordered by
    ``model``'s score (ties keep their order), the kept ones where they were (as ``rerank.rerank_question``)."""
    order = list(range(len(feats)))
    if model is None:
        return order
    moved = iter(sorted((i for i in order if not kept[i]), key=lambda i: (-model.score(feats[i]), i)))
    return [i if kept[i] else next(moved) for i in order]


def report_rank(search, model: LinearReranker | None) -> int | None:
    """Rank of a release-note row's gold among the functions after ``model``'s second stage (None: not in 30)."""
    r, hits, hit_keys, keep, feats = search
    order = second_stage_order(model, feats, [cid in keep for cid, _ in hits])
    funcs = [i for i in order if hits[i][1] in ("function", "method")]
    return next((j for j, i in enumerate(funcs, 1) if gold_match(hit_keys[i], r["gold"])), None)


def rank_summary(ranks: list[int | None]) -> dict:
    """Function Acc@1/10 and MRR (percent) of gold ranks."""
    n = max(len(ranks), 1)
    return {"n": len(ranks), "acc@1": round(100 * sum(r == 1 for r in ranks) / n, 1),
            "acc@10": round(100 * sum(r is not None and r <= 10 for r in ranks) / n, 1),
            "mrr": round(100 * sum(1.0 / r for r in ranks if r) / n, 1)}


def report_metrics(searches, model: LinearReranker | None) -> dict:
    """Function Acc@1/10 and MRR of the release-note rows under ``model``'s second stage (None: first stage)."""
    return rank_summary([report_rank(x, model) for x in searches])


def own_figures(searches, data: list, extra: list, prefix: str, fold: dict, names: tuple[str, str]) -> dict:
    """The function ranks of report-like rows (``searches``, whose examples are ``extra``, projects named ``prefix`` +
    package) under the first stage, under weights fitted on ``data`` alone (``names[0]``) and, for each group of
    ``fold`` (package → group), under weights fitted on ``data`` and ``extra`` without that group (``names[1]``)."""
    held = {g: fit(data + [d for d in extra if fold[d[2][len(prefix):]] != g], None) for g in set(fold.values())}
    return {"first_stage": report_metrics(searches, None), names[0]: report_metrics(searches, fit(data, None)),
            names[1]: rank_summary([report_rank(x, held[fold[x[0]["package"]]]) for x in searches])}


def standard_coverage(rows: list[dict], indexes: dict, model: LinearReranker | None, settings: Settings,
                      k: int = 10) -> float:
    """Intent coverage at k of the standard search, its second stage done by ``model`` (None: first stage)."""
    cov: list[bool] = []
    for row in rows:
        ix = question_index(row, settings, indexes)
        q = row["question"]
        hits = first_stage(ix, q)
        if model is not None:
            hits = rerank_question(ix.store, model, content_terms(q), hits, q, trained_dense(model, ix.dense_index()),
                                   keep=second_stage_keeps(q, hits))
        cov += covered(keys(hits, ix)[:k], row["intents"])
    return round(100 * sum(cov) / max(len(cov), 1), 1)


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


def _rel(p: Path) -> str:
    """A path as the project names it (relative to the checkout when inside it)."""
    p = p.resolve()
    return str(p.relative_to(HERE.parent)) if p.is_relative_to(HERE.parent) else str(p)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--data", nargs="*", type=Path, default=sorted((HERE / "data" / "train").glob("*.jsonl")))
    ap.add_argument("--out", type=Path, default=None,
                    help="default: the shipped file of the embedding model in use (REPOCTX_EMBEDDER): "
                         "rerank_weights.json for the offline default, rerank_weights.<model>.json for another")
    ap.add_argument("--role", choices=ROLES, default="lanes",
                    help="lanes: the agentic path's sub-query lanes; standard: the standard search's second stage")
    ap.add_argument("--reports", type=int, default=0, metavar="N",
                    help="--role standard: also fit on release-note pairs read as issue reports, the newest N old "
                         "releases of each package (mined by bench/train_embedder.py mine --releases; 0: none)")
    ap.add_argument("--reports-rows", type=Path, default=None, metavar="FILE",
                    help="--role standard: fit on the release-note rows of FILE (--save-reports' form) instead")
    ap.add_argument("--save-reports", type=Path, default=None, metavar="FILE",
                    help="write the release-note rows the fit used, pinned by sdist file and sha256")
    ap.add_argument("--train-work", type=Path, default=TRAIN_WORK, help="where the mined pairs are (%(default)s)")
    ap.add_argument("--history", type=Path, default=None, metavar="ROWS",
                    help="--role standard: also fit on fix commits read as issue reports at their parents, the rows "
                         "bench/history_rows.py --rows-only writes (keep the rows you evaluate on out of them)")
    ap.add_argument("--no-write", action="store_true")
    ap.add_argument("--lexical-only", action="store_true", help="no dense signal (faster; not what ships)")
    a = ap.parse_args()
    if a.reports and a.reports_rows:
        ap.error("--reports and --reports-rows: one or the other")
    for flag, f in (("--reports-rows", a.reports_rows), ("--history", a.history)):
        if f is not None and not f.is_file():
            ap.error(f"{flag}: no file {f}")
    rows_file = a.reports_rows or a.save_reports  # the release-note rows the fit is made on, pinned
    settings = Settings.from_env()
    if a.lexical_only:
        settings = replace(settings, embedder="none")
    rows = load(a.data)
    standard = a.role == "standard"
    data, indexes = examples(rows, settings, per_intent=not standard)
    lane_data = data
    if standard:  # the standard setting's own examples beside the lanes' (either alone did no better held out)
        data = standard_examples(rows, settings, indexes) + lane_data
    report_cv = {}
    if standard and (a.reports or a.reports_rows):
        report_list = (pinned_rows(a.reports_rows, a.train_work) if a.reports_rows
                       else report_rows(a.train_work, max_versions=a.reports))
        if a.save_reports:
            a.save_reports.write_text("".join(json.dumps(r) + "\n" for r in pin(report_list)))
            print(f"wrote {a.save_reports} ({len(report_list)} rows)")
        searches = report_searches(report_list, settings)
        rdata = report_examples(searches)
        print(f"{len(searches)} release-note reports, {len(rdata)} candidates, {int(sum(x[1] for x in rdata))} gold")
        # the reports' own figures, five folds by package
        fold = {p: i % 5 for i, p in enumerate(sorted({r["package"] for r, *_ in searches}))}
        report_cv = own_figures(searches, data, rdata, "report:", fold, ("questions_only", "with_reports_held_out"))
        print("release-note reports, function ranks: " + "; ".join(f"{n} {v}" for n, v in report_cv.items()))
        data = data + rdata
    history_cv = {}
    if standard and a.history:
        hsearches = history_searches(a.history, settings)
        hdata = report_examples(hsearches, "history:")
        print(f"{len(hsearches)} history reports, {len(hdata)} candidates, {int(sum(x[1] for x in hdata))} gold")
        # their own figures, each project held out in turn
        projects = {x[0]["package"]: x[0]["package"] for x in hsearches}
        history_cv = own_figures(hsearches, data, hdata, "history:", projects, ("without_history", "with_history_held_out"))
        print("history reports, function ranks: " + "; ".join(f"{n} {v}" for n, v in history_cv.items()))
        data = data + hdata
    embedder = next((ix.embedder.model_id for ix in indexes.values() if ix.embedder), None)
    print(f"{len(rows)} questions, {sum(len(r['intents']) for r in rows)} intents, {len(data)} candidates, "
          f"{int(sum(lab for _, lab, _ in data))} gold")
    cv = {}
    for hold in sorted({r["corpus"]["pypi"] for r in rows}):
        model = fit([d for d in data if d[2] != hold], embedder)
        held = [r for r in rows if r["corpus"]["pypi"] == hold]
        if standard:
            cv[hold] = {"questions": len(held), "first_stage": standard_coverage(held, indexes, None, settings),
                        "lane_examples": standard_coverage(held, indexes, fit([d for d in lane_data if d[2] != hold],
                                                                              embedder), settings),
                        "reranked": standard_coverage(held, indexes, model, settings)}
        else:
            cv[hold] = {"questions": len(held), "first_stage": coverage(held, indexes, None, settings),
                        "reranked": coverage(held, indexes, model, settings)}
        print(f"held out {hold}: intent coverage@10 " + " -> ".join(f"{v}" for n, v in cv[hold].items() if n != "questions"))
    intents = {p: sum(len(r["intents"]) for r in rows if r["corpus"]["pypi"] == p) for p in cv}
    for key in [n for n in cv[next(iter(intents))] if n != "questions"]:
        cv.setdefault("all", {})[key] = round(sum(cv[p][key] * intents[p] for p in intents) / sum(intents.values()), 1)
    print("held out, all projects (intent-weighted): " + " -> ".join(f"{n} {v}" for n, v in cv["all"].items()))
    model = fit(data, embedder)
    meta = {"trained_on": [_rel(p) for p in a.data], "questions": len(rows), "candidates": len(data),
            "gold": int(sum(lab for _, lab, _ in data)), "held_out_coverage_at_10": cv,
            "date": datetime.date.today().isoformat()}
    command = "python bench/train_rerank.py" + (" --role standard" if standard else "")
    if report_cv:
        rel = {"versions_per_package": a.reports} if a.reports else {}
        if rows_file:
            rel |= {"rows": _rel(rows_file), "rows_sha256": hashlib.sha256(rows_file.read_bytes()).hexdigest()}
        meta["release_note_reports"] = rel | report_cv
    if history_cv:
        meta["history_reports"] = {"rows": _rel(a.history), **history_cv}
    command += f" --reports {a.reports}" if a.reports else ""
    command += f" --reports-rows {_rel(a.reports_rows)}" if a.reports_rows else ""
    command += f" --history {a.history}" if a.history else ""
    if settings.embedder not in (None, "", "local"):
        command += f" (REPOCTX_EMBEDDER={settings.embedder})"
    model.meta = {**(model.meta or {}), **meta, "role": a.role, "command": command}
    print("weights:", {n: round(w, 2) for n, w in zip(model.features, model.weights)})
    if not a.no_write:
        from repoctx.providers.embedding import get_embedder

        default_id = get_embedder("local").model_id
        out = a.out or weights_file(None if embedder in (None, default_id) else embedder, a.role)
        out.write_text(model.to_json() + "\n")
        print(f"wrote {out}")


if __name__ == "__main__":
    main()
