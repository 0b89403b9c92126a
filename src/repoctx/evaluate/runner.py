"""Localization evaluation on real issues (format of shared/eval/README.md): for each row, index its
corpus (cached, reused between rows), ask the issue text, and score ranked files and functions."""
from __future__ import annotations

import sqlite3
import time
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Callable

from repoctx.config import Settings
from repoctx.evaluate.corpus import cache_dir, load_rows, materialize
from repoctx.index import Index
from repoctx.evaluate.metrics import aggregate, function_key, rank_metrics
from repoctx.retrieve.hybrid import SearchOptions, to_files
from repoctx.types import Hit

KS = (1, 3, 5, 10)


@dataclass(frozen=True)
class Config:
    name: str
    windows: bool = False  # index 1200/150 text windows instead of capsules (the seed's baseline)
    options: SearchOptions = field(default_factory=SearchOptions)
    dense: bool = True


CONFIGS: dict[str, Config] = {
    "baseline": Config("baseline: windows + dense", windows=True,
                       options=SearchOptions(lexical=False, exact=False, graph=False, demote_tests=False, demote_docs=False)),
    "capsules+dense": Config("capsules + dense", options=SearchOptions(lexical=False, exact=False, graph=False,
                                                                       demote_tests=False, demote_docs=False)),
    "bm25": Config("BM25 only", options=SearchOptions(exact=False, graph=False, demote_tests=False, demote_docs=False), dense=False),
    "hybrid": Config("hybrid (exact + BM25 + dense)", options=SearchOptions(graph=False)),
    "hybrid+graph": Config("hybrid + graph", options=SearchOptions()),
}
DEFAULT = "hybrid+graph"
ABLATION = ("baseline", "capsules+dense", "bm25", "hybrid", "hybrid+graph")


def _index_dir(tree: Path, windows: bool) -> Path:
    base = cache_dir() / "indexes"
    key = f"reverted-{tree.name}" if tree.parent.name == "reverted" else tree.name
    return base / (key + ("--windows" if windows else ""))


def _seed_from(release_dir: Path, target: Path) -> None:
    """A reverted tree differs from its release in a few files: start from the release's index."""
    src = release_dir / "index.sqlite"
    if target.exists() or not src.exists():
        return
    target.mkdir(parents=True)
    con = sqlite3.connect(str(src))
    try:
        dst = sqlite3.connect(str(target / "index.sqlite"))
        con.backup(dst)
        dst.close()
    finally:
        con.close()


def _tree_index(tree: Path, windows: bool, settings: Settings) -> Index:
    """One corpus tree as one repository, named after its cache key (in a shared PostgreSQL store
    every tree is its own repository)."""
    idx_dir = _index_dir(tree, windows)
    return Index(tree, replace(settings, index_dir=idx_dir, parse_mode="windows" if windows else "capsules"),
                 name=idx_dir.name.replace("+", "-")[:100])


def open_corpus_index(row: dict, windows: bool, settings: Settings) -> Index:
    tree = materialize(row)
    idx_dir = _index_dir(tree, windows)
    if tree.parent.name == "reverted" and not idx_dir.exists() and not settings.database_url:
        # index the release once, then each reverted tree starts from it and re-parses only the patched files
        release = materialize({k: v for k, v in row.items() if k != "revert_patch"})
        rel = _tree_index(release, windows, settings)
        rel.update(embed=False)
        rel.close()
        _seed_from(_index_dir(release, windows), idx_dir)
    return _tree_index(tree, windows, settings)


def function_ranking(hits: list[Hit], ix: Index, capsule_ix: Index | None = None) -> list[str]:
    """Ranked ``path:qualname`` keys of functions and methods. A nested function counts as the
    function that encloses it; a text window counts as the functions its lines overlap."""
    out: list[str] = []
    for h in hits:
        c = h.capsule
        if c.kind in ("function", "method"):
            qual, parent = c.qualname, c.parent
            while parent:  # a def nested in a function counts as that function (the gold convention)
                p = ix.capsule(parent)
                if p is None or p.kind not in ("function", "method"):
                    break
                qual, parent = p.qualname, p.parent
            out.append(function_key(c.path, qual))
        elif c.kind == "window" and capsule_ix is not None:
            for fc in capsule_ix.store.file_capsules(capsule_ix.repo, c.path):
                if fc.kind in ("function", "method") and fc.start_line <= c.end_line and fc.end_line >= c.start_line \
                        and (fc.parent is None or ix_kind(capsule_ix, fc.parent) not in ("function", "method")):
                    out.append(function_key(fc.path, fc.qualname))
    return list(dict.fromkeys(out))


def ix_kind(ix: Index, cid: str) -> str | None:
    c = ix.capsule(cid)
    return c.kind if c else None


def evaluate(dataset: str | Path, limit: int | None = None, configs: tuple[str, ...] = (DEFAULT,),
             settings: Settings | None = None, progress: Callable[[str], None] | None = None,
             repos: tuple[str, ...] = ()) -> dict:
    """Run the configs over the dataset; returns {config: {"n", "file", "function", "by_repo", ...}}."""
    settings = settings or Settings.from_env()
    say = progress or (lambda s: None)
    rows = load_rows(dataset, limit)
    if repos:
        rows = [r for r in rows if r["repo"] in repos]
    results: dict[str, dict] = {}
    for cname in configs:
        cfg = CONFIGS[cname]
        per_file, per_func = [], []
        by_repo: dict[str, dict[str, list]] = {}
        times, index_s = [], 0.0
        cfg_settings = settings if cfg.dense else replace(settings, embedder="none")
        rows_out = []
        for i, row in enumerate(rows, 1):
            t0 = time.perf_counter()
            ix = open_corpus_index(row, cfg.windows, cfg_settings)
            ix.update()
            cap_ix = None
            if cfg.windows:
                cap_ix = open_corpus_index(row, False, replace(cfg_settings, embedder="none"))
                cap_ix.update(embed=False)
            index_s += time.perf_counter() - t0
            t1 = time.perf_counter()
            opts = replace(cfg.options, pool=300)
            hits = ix.retrieve(row["query"], k=opts.pool, mode="standard", options=opts).hits
            times.append(time.perf_counter() - t1)
            files = [f.path for f in to_files(hits, opts.file_agg)]
            funcs = function_ranking(hits, ix, cap_ix)
            fm = rank_metrics(files, row["gold_files"], KS)
            per_file.append(fm)
            rec = by_repo.setdefault(row["repo"], {"file": [], "function": []})
            rec["file"].append(fm)
            fn = None
            if row.get("gold_functions"):
                fn = rank_metrics(funcs, row["gold_functions"], KS)
                per_func.append(fn)
                rec["function"].append(fn)
            rows_out.append({"instance_id": row["instance_id"], "file_rank": _first_rank(files, row["gold_files"]),
                             "function_rank": _first_rank(funcs, row.get("gold_functions") or [])})
            say(f"[{cname}] {i}/{len(rows)} {row['instance_id']}: file acc@5={fm['acc@5']:.0f} "
                f"func acc@10={fn['acc@10'] if fn else float('nan'):.0f} ({time.perf_counter() - t0:.1f}s)")
            ix.close()
            if cap_ix is not None:
                cap_ix.close()
        times.sort()
        results[cname] = {
            "name": cfg.name, "n": len(rows), "file": _summary(per_file), "function": _summary(per_func),
            "by_repo": {repo: {"n": len(v["file"]), "file": _summary(v["file"]), "function": _summary(v["function"])}
                        for repo, v in sorted(by_repo.items())},
            "query_ms_p50": round(1000 * times[len(times) // 2], 1) if times else None,
            "index_seconds": round(index_s, 1), "rows": rows_out,
        }
    return results


def _first_rank(ranked: list[str], gold: list[str]) -> int | None:
    g = set(gold)
    return next((i for i, x in enumerate(ranked, 1) if x in g), None)


def _summary(per_row: list[dict]) -> dict:
    if not per_row:
        return {"n": 0}
    agg = aggregate(per_row)
    return agg


def markdown_table(results: dict) -> str:
    lines = ["| config | n | file Acc@1 | @3 | @5 | @10 | file MRR | fn n | fn Acc@5 | fn Acc@10 | fn MRR |",
             "|---|---|---|---|---|---|---|---|---|---|---|"]
    for r in results.values():
        f, fn = r["file"], r["function"]
        lines.append(f"| {r['name']} | {r['n']} | {f.get('acc@1', '-')} | {f.get('acc@3', '-')} | {f.get('acc@5', '-')} | "
                     f"{f.get('acc@10', '-')} | {f.get('mrr', '-')} | {fn.get('n', 0)} | {fn.get('acc@5', '-')} | "
                     f"{fn.get('acc@10', '-')} | {fn.get('mrr', '-')} |")
    return "\n".join(lines)
