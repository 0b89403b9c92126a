"""Localization evaluation on real issues (format of shared/eval/README.md): for each row, index its
corpus (cached, reused between rows), ask the issue text, and score ranked files and functions.

A row that cannot be built (no usable corpus, a wheel that cannot be fetched, a commit that does not
exist, a revert patch that does not apply, an index that fails) is reported and skipped: it lands in
the result's ``errors`` and the run goes on. A row whose snapshot has a file that cannot be read (a
corrupt archive member, a blob a partial clone lacks, a file the indexer cannot open) keeps its place:
it is scored on the other files, the files left out are listed in its row (``unread_files``) and the
config's ``warnings``, and a warning says so."""

from __future__ import annotations

import logging
import sqlite3
import time
from collections.abc import Callable
from dataclasses import dataclass, field, replace
from pathlib import Path

from repoctx.config import Settings
from repoctx.evaluate.corpus import TREES, CorpusError, cache_dir, load_rows, materialize, unread_files
from repoctx.evaluate.metrics import aggregate, function_key, rank_metrics
from repoctx.index import Index
from repoctx.retrieve.hybrid import SearchOptions, file_aggregation, to_files
from repoctx.types import DEFS, Hit, outermost_def

KS = (1, 3, 5, 10)
log = logging.getLogger("repoctx.eval")


@dataclass(frozen=True)
class Config:
    name: str
    windows: bool = False  # index 1200/150 text windows instead of capsules (the seed's baseline)
    options: SearchOptions = field(default_factory=SearchOptions)
    dense: bool = True


# the ablations show one piece each (rerank=False); only the default has the second stage
CONFIGS: dict[str, Config] = {
    "baseline": Config(
        "baseline: windows + dense",
        windows=True,
        options=SearchOptions(
            lexical=False, exact=False, graph=False, demote_tests=False, demote_docs=False, rerank=False
        ),
    ),
    "capsules+dense": Config(
        "capsules + dense",
        options=SearchOptions(
            lexical=False, exact=False, graph=False, demote_tests=False, demote_docs=False, rerank=False
        ),
    ),
    "bm25": Config(
        "BM25 only",
        options=SearchOptions(exact=False, graph=False, demote_tests=False, demote_docs=False, rerank=False),
        dense=False,
    ),
    "hybrid": Config("hybrid (exact + BM25 + dense)", options=SearchOptions(graph=False, rerank=False)),
    "first-stage": Config("hybrid + graph, first stage only", options=SearchOptions(rerank=False)),
    "hybrid+graph": Config("hybrid + graph + re-ranker", options=SearchOptions()),
}
DEFAULT = "hybrid+graph"
ABLATION = ("baseline", "capsules+dense", "bm25", "hybrid", "first-stage", "hybrid+graph")


def _index_dir(tree: Path, windows: bool) -> Path:
    base = cache_dir() / "indexes"
    key = f"{tree.parent.name}-{tree.name}" if tree.parent.name in ("reverted", "git", "sdist") else tree.name
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


def _tree_index(tree: Path, windows: bool, settings: Settings, name_from: Path | None = None) -> Index:
    """One corpus tree as one repository, named after its cache key (in a shared PostgreSQL store
    every tree is its own repository). ``name_from``: the tree whose index this one was seeded from,
    whose repository name it keeps so that the update is incremental against the seed."""
    idx_dir = _index_dir(tree, windows)
    name = _index_dir(name_from or tree, windows).name.replace("+", "-")[:100]
    return Index(tree, replace(settings, index_dir=idx_dir, parse_mode="windows" if windows else "capsules"), name=name)


def open_corpus_index(
    row: dict, windows: bool, settings: Settings, tree_kind: str = "wheel", download_sdist: Callable | None = None
) -> Index:
    """The index of ``row``'s corpus as ``tree_kind`` ('wheel' | 'sdist', see :func:`materialize`)."""
    tree = materialize(row, tree=tree_kind, download_sdist=download_sdist)
    idx_dir = _index_dir(tree, windows)
    if tree.parent.name == "reverted" and not settings.database_url:
        # index the release once, then each reverted tree starts from it and re-parses only the patched files
        release = materialize(
            {k: v for k, v in row.items() if k != "revert_patch"}, tree=tree_kind, download_sdist=download_sdist
        )
        if not idx_dir.exists():
            rel = _tree_index(release, windows, settings)
            rel.update(embed=False)
            rel.close()
            _seed_from(_index_dir(release, windows), idx_dir)
        return _tree_index(tree, windows, settings, name_from=release)
    return _tree_index(tree, windows, settings)


def function_ranking(hits: list[Hit], ix: Index, capsule_ix: Index | None = None) -> list[str]:
    """Ranked ``path:qualname`` keys of functions and methods. A nested function counts as the
    function that encloses it; a text window counts as the functions its lines overlap."""
    out: list[str] = []
    for h in hits:
        c = h.capsule
        if c.kind in DEFS:  # a def nested in a function counts as that function (the gold convention)
            out.append(function_key(c.path, outermost_def(c, ix.capsule).qualname))
        elif c.kind == "window" and capsule_ix is not None:
            for fc in capsule_ix.store.file_capsules(capsule_ix.repo, c.path):
                if (
                    fc.kind in ("function", "method")
                    and fc.start_line <= c.end_line
                    and fc.end_line >= c.start_line
                    and (fc.parent is None or ix_kind(capsule_ix, fc.parent) not in ("function", "method"))
                ):
                    out.append(function_key(fc.path, fc.qualname))
    return list(dict.fromkeys(out))


def ix_kind(ix: Index, cid: str) -> str | None:
    c = ix.capsule(cid)
    return c.kind if c else None


def _row_problem(row: dict) -> str | None:
    """Why a row cannot be scored whatever its corpus, or None."""
    if not isinstance(row.get("query"), str) or not row["query"].strip():
        return "row has no 'query'"
    gold = row.get("gold_files")
    if not isinstance(gold, list) or not gold:
        return "row has no 'gold_files'"
    return None


def _reason(exc: BaseException, stage: str) -> str:
    if isinstance(exc, CorpusError):
        return str(exc)
    msg = str(exc).strip().splitlines()
    return f"{stage} failed: {type(exc).__name__}" + (f": {msg[0][:300]}" if msg else "")


def _unread(ix: Index, reports: list) -> list[dict[str, str]]:
    """The files of a row's snapshot left out: those the corpus could not read, then those the indexer
    could not open."""
    out = {d["path"]: d for d in unread_files(ix.root)} if ix.root is not None else {}
    for report in reports:
        for path, reason in getattr(report, "skipped", None) or ():
            if reason.startswith("unreadable"):
                out.setdefault(path, {"path": path, "reason": reason})
    return list(out.values())


def _gold_missing(root: Path | None, gold_files: list[str]) -> list[str]:
    """The gold files that are not in the indexed tree (a wheel lacks what is outside the package)."""
    if root is None:
        return []
    return [g for g in gold_files if not (Path(root) / g).is_file()]


def evaluate(
    dataset: str | Path,
    limit: int | None = None,
    configs: tuple[str, ...] = (DEFAULT,),
    settings: Settings | None = None,
    progress: Callable[[str], None] | None = None,
    repos: tuple[str, ...] = (),
    on_error: Callable[[str, str, str], None] | None = None,
    on_warning: Callable[[str, str, str], None] | None = None,
    tree: str = "wheel",
    download_sdist: Callable[[str, str, Path], tuple[bool, str]] | None = None,
) -> dict:
    """Run the configs over the dataset (rows of ``repos`` if given, then the first ``limit`` of them).

    ``tree``: index each PyPI release as its wheel (``"wheel"``) or as its sdist (``"sdist"``: tests and
    docs included, as a checkout has them; ``download_sdist`` fetches one that is not cached, see
    :func:`repoctx.evaluate.corpus.fetch_sdist`). Git corpora are the same checkout in both.

    Returns ``{config: {"name", "tree", "n", "rows_total", "skipped", "errors", "warnings", "gold_missing",
    "file", "function", "by_repo", "query_ms_p50", "index_seconds", "history", "rows"}}`` whatever the number of
    configs. ``gold_missing`` counts the scored rows with a gold file absent from the tree (each row lists
    them as ``gold_missing``). ``n`` counts
    the scored rows; ``errors`` lists ``{"instance_id", "reason"}`` of the rows skipped for that config
    (a corpus that cannot be built is tried once and skipped in every config); ``on_error(config,
    instance_id, reason)`` is called as each row is skipped. ``warnings`` lists ``{"instance_id",
    "warning", "unread_files"}`` of the rows scored without some files of their snapshot (each row
    lists them as ``unread_files``); ``on_warning(config, instance_id, warning)`` is called for each,
    else the warning is logged (``repoctx.eval``) once per row and message. A git corpus' tree is a checkout
    of its commit: its history up to that commit votes on the file ranking, as in a file-level search
    (``Index.rank_files``, which also lets the paths a report writes vote; ``settings.history`` off: those alone;
    each row's ``paths_moved``: how many files they moved). ``history`` counts the rows whose tree had a mined
    history (each row's ``history_commits``; None without one) and those whose file ranking it changed
    (``history_moved``: how many files moved).
    """
    if tree not in TREES:
        raise ValueError(f"tree must be one of {TREES}, got {tree!r}")
    # the shared vector cache kept: a reverted tree, a sdist and another release share most units with an index
    # made before, whose vectors they take from it instead of embedding them again
    settings = replace(settings or Settings.from_env(), cache_vectors=True)
    say = progress or (lambda s: None)
    rows = load_rows(dataset)
    if repos:
        rows = [r for r in rows if r.get("repo") in repos]
    if limit is not None:
        rows = rows[:limit]
    corpus_failed: dict[int, str] = {}  # row position -> reason, shared by the configs
    warned: set[tuple[str, str]] = set()
    results: dict[str, dict] = {}
    for cname in configs:
        cfg = CONFIGS[cname]
        per_file, per_func = [], []
        by_repo: dict[str, dict[str, list]] = {}
        times, index_s = [], 0.0
        cfg_settings = settings if cfg.dense else replace(settings, embedder="none")
        rows_out, errors, warnings = [], [], []
        for i, row in enumerate(rows, 1):
            iid = str(row.get("instance_id") or f"row-{i}")

            def skip(reason: str) -> None:
                errors.append({"instance_id": iid, "reason": reason})  # noqa: B023 - skip() runs within this iteration
                if on_error is not None:
                    on_error(cname, iid, reason)  # noqa: B023 - skip() runs within this iteration
                else:
                    say(f"[{cname}] {i}/{len(rows)} {iid}: skipped: {reason}")  # noqa: B023 - skip() runs within this iteration

            if i in corpus_failed:
                skip(corpus_failed[i])
                continue
            problem = _row_problem(row)
            if problem:
                corpus_failed[i] = problem
                skip(problem)
                continue
            t0 = time.perf_counter()
            ix = cap_ix = None
            stage = "index"
            try:
                ix = open_corpus_index(row, cfg.windows, cfg_settings, tree, download_sdist)
                reports = [ix.update()]
                if cfg.windows:
                    cap_ix = open_corpus_index(row, False, replace(cfg_settings, embedder="none"), tree, download_sdist)
                    reports.append(cap_ix.update(embed=False))
                unread = _unread(ix, reports)
                missing = _gold_missing(ix.root, list(row["gold_files"]))
                index_s += time.perf_counter() - t0
                stage = "search"
                t1 = time.perf_counter()
                opts = replace(cfg.options, pool=300)
                hits = ix.retrieve(row["query"], k=opts.pool, mode="standard", options=opts).hits
                # as a file-level search ranks them: a checkout's own history votes too, and the paths the report
                # writes (Index.rank_files)
                agg = file_aggregation(opts.file_agg, row["query"])
                ranked, moved_by = ix.rank_files(row["query"], to_files(hits, agg), ix.scope())
                moved = moved_by["history"]
                times.append(time.perf_counter() - t1)
                files = [f.path for f in ranked]
                funcs = function_ranking(hits, ix, cap_ix)
                hist = ix.history_status()
            except CorpusError as exc:
                corpus_failed[i] = _reason(exc, stage)
                skip(corpus_failed[i])
                continue
            except Exception as exc:  # noqa: BLE001 - one broken row must not end a long run
                skip(_reason(exc, stage))
                continue
            finally:
                for x in (ix, cap_ix):
                    if x is not None:
                        try:
                            x.close()
                        except Exception:  # noqa: BLE001
                            pass
            gold_files = list(row["gold_files"])
            gold_funcs = list(row.get("gold_functions") or [])
            fm = rank_metrics(files, gold_files, KS)
            per_file.append(fm)
            rec = by_repo.setdefault(str(row.get("repo") or "?"), {"file": [], "function": []})
            rec["file"].append(fm)
            fn = None
            if gold_funcs:
                fn = rank_metrics(funcs, gold_funcs, KS)
                per_func.append(fn)
                rec["function"].append(fn)
            rows_out.append(
                {
                    "instance_id": iid,
                    "repo": row.get("repo"),
                    "file_rank": _first_rank(files, gold_files),
                    "function_rank": _first_rank(funcs, gold_funcs),
                    "gold_file_ranks": _ranks(files, gold_files),
                    "gold_function_ranks": _ranks(funcs, gold_funcs),
                    "gold_missing": missing,
                    "unread_files": unread,
                    "history_commits": hist.get("commits", 0) if hist.get("kept") else None,
                    "history_moved": moved,
                    "paths_moved": moved_by["named"],
                }
            )
            if unread:
                shown = ", ".join(f"{d['path']} ({d['reason']})" for d in unread[:3])
                message = (
                    f"scored without {len(unread)} file{'s' if len(unread) != 1 else ''} of its snapshot "
                    f"that could not be read: {shown}{', ...' if len(unread) > 3 else ''}"
                )
                warnings.append({"instance_id": iid, "warning": message, "unread_files": unread})
                if on_warning is not None:
                    on_warning(cname, iid, message)
                elif (iid, message) not in warned:
                    warned.add((iid, message))
                    log.warning("%s: %s", iid, message)
            say(
                f"[{cname}{'' if tree == 'wheel' else ' ' + tree}] {i}/{len(rows)} {iid}: file acc@5={fm['acc@5']:.0f} "
                f"func acc@10={fn['acc@10'] if fn else float('nan'):.0f} ({time.perf_counter() - t0:.1f}s)"
            )
        times.sort()
        results[cname] = {
            "name": cfg.name,
            "tree": tree,
            "n": len(rows_out),
            "rows_total": len(rows),
            "skipped": len(errors),
            "gold_missing": sum(1 for r in rows_out if r["gold_missing"]),
            "errors": errors,
            "warnings": warnings,
            "file": _summary(per_file),
            "function": _summary(per_func),
            "by_repo": {
                repo: {"n": len(v["file"]), "file": _summary(v["file"]), "function": _summary(v["function"])}
                for repo, v in sorted(by_repo.items())
            },
            "query_ms_p50": round(1000 * times[len(times) // 2], 1) if times else None,
            "index_seconds": round(index_s, 1),
            # the settings a ranking depends on: what a results file was measured with (REPOCTX_EMBEDDER, ...)
            "settings": {
                "embedder": cfg_settings.embedder,
                "second_stage": cfg_settings.second_stage,
                "function_windows": cfg_settings.function_windows,
                "history": cfg_settings.history,
            },
            # rows whose tree is a checkout with a mined history, and those whose file ranking it changed
            "history": {
                "rows": sum(1 for r in rows_out if r["history_commits"] is not None),
                "moved": sum(1 for r in rows_out if r["history_moved"]),
            },
            "rows": rows_out,
        }
    return results


def evaluate_trees(dataset: str | Path, trees: tuple[str, ...] = TREES, **kwargs) -> dict:
    """:func:`evaluate` once per tree kind, same rows and configs: ``{tree: {config: result}}``."""
    return {t: evaluate(dataset, tree=t, **kwargs) for t in trees}


def _ranks(ranked: list[str], gold: list[str]) -> dict[str, int | None]:
    """1-based rank of each gold item in the (de-duplicated) ranking, None when it is not ranked."""
    pos: dict[str, int] = {}
    for i, x in enumerate(dict.fromkeys(ranked), 1):
        pos.setdefault(x, i)
    return {g: pos.get(g) for g in gold}


def _first_rank(ranked: list[str], gold: list[str]) -> int | None:
    g = set(gold)
    return next((i for i, x in enumerate(dict.fromkeys(ranked), 1) if x in g), None)


def _summary(per_row: list[dict]) -> dict:
    if not per_row:
        return {"n": 0}
    agg = aggregate(per_row)
    return agg


def markdown_table(results: dict) -> str:
    """One line per config; rows that were skipped are counted in their own column and under the table."""
    lines = [
        "| config | n | skipped | file Acc@1 | @3 | @5 | @10 | file MRR | fn n | fn Acc@1 | fn Acc@5 | fn Acc@10 "
        "| fn MRR |",
        "|---|---|---|---|---|---|---|---|---|---|---|---|---|",
    ]
    notes = []
    for r in results.values():
        f, fn = r["file"], r["function"]
        skipped = r.get("skipped", 0)
        lines.append(
            f"| {r['name']} | {r['n']} | {skipped} | {f.get('acc@1', '-')} | {f.get('acc@3', '-')} | "
            f"{f.get('acc@5', '-')} | {f.get('acc@10', '-')} | {f.get('mrr', '-')} | {fn.get('n', 0)} | "
            f"{fn.get('acc@1', '-')} | {fn.get('acc@5', '-')} | {fn.get('acc@10', '-')} | {fn.get('mrr', '-')} |"
        )
        if skipped:
            total = r.get("rows_total", r["n"] + skipped)
            ids = ", ".join(e["instance_id"] for e in r.get("errors", [])[:5])
            more = ", ..." if skipped > 5 else ""
            notes.append(f"{r['name']}: {skipped} of {total} rows skipped ({ids}{more})")
        warned = r.get("warnings") or []
        if warned:
            ids = ", ".join(w["instance_id"] for w in warned[:5]) + (", ..." if len(warned) > 5 else "")
            notes.append(
                f"{r['name']}: {len(warned)} of {r['n']} rows scored without files that could not be read ({ids})"
            )
        notes += _history_note(r, r["name"])
        ran = r.get("settings") or {}  # what it ran with, when not the defaults
        options = [f"REPOCTX_EMBEDDER={ran['embedder']}"] if ran.get("embedder") not in (None, "local", "none") else []
        options += ["REPOCTX_FUNCTION_WINDOWS=1"] if ran.get("function_windows") else []
        options += ["REPOCTX_SECOND_STAGE=0"] if ran.get("second_stage") is False else []
        if options:
            notes.append(f"{r['name']}: measured with {', '.join(options)}")
    return "\n".join(lines + ([""] + notes if notes else []))


def _history_note(r: dict, label: str) -> list[str]:
    """The table's line on the rows whose tree had a git history (none when no row had one)."""
    hist = r.get("history") or {}
    if not hist.get("rows"):
        return []
    return [
        f"{label}: {hist['rows']} of {r['n']} rows' trees are git checkouts whose mined history voted on the file "
        f"ranking; it changed {hist.get('moved', 0)} of them (--no-history: without it)"
    ]


def markdown_trees(by_tree: dict) -> str:
    """The same configs on each tree kind, side by side: one line per config and tree, with the rows
    whose gold files are missing from the tree counted (they cannot be ranked)."""
    lines = [
        "| config | tree | n | skipped | gold missing | file Acc@1 | @3 | @5 | @10 | file MRR | fn n | fn Acc@1 "
        "| fn Acc@5 | fn Acc@10 | fn MRR |",
        "|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|",
    ]
    notes = []
    configs = list(dict.fromkeys(c for results in by_tree.values() for c in results))
    for cname in configs:
        for tree, results in by_tree.items():
            r = results.get(cname)
            if r is None:
                continue
            f, fn = r["file"], r["function"]
            lines.append(
                f"| {r['name']} | {tree} | {r['n']} | {r.get('skipped', 0)} | {r.get('gold_missing', 0)} | "
                f"{f.get('acc@1', '-')} | {f.get('acc@3', '-')} | {f.get('acc@5', '-')} | "
                f"{f.get('acc@10', '-')} | {f.get('mrr', '-')} | {fn.get('n', 0)} | {fn.get('acc@1', '-')} | "
                f"{fn.get('acc@5', '-')} | {fn.get('acc@10', '-')} | {fn.get('mrr', '-')} |"
            )
            if r.get("skipped"):
                ids = ", ".join(e["instance_id"] for e in r.get("errors", [])[:5])
                more = ", ..." if r["skipped"] > 5 else ""
                notes.append(
                    f"{r['name']} ({tree}): {r['skipped']} of {r.get('rows_total')} rows skipped ({ids}{more})"
                )
            notes += _history_note(r, f"{r['name']} ({tree})")
        scored = [{x["instance_id"] for x in res[cname]["rows"]} for res in by_tree.values() if cname in res]
        if len(scored) > 1 and len({frozenset(s) for s in scored}) > 1:
            notes.append(f"{cname}: {len(set.intersection(*scored))} rows scored on every tree")
    return "\n".join(lines + ([""] + notes if notes else []))
