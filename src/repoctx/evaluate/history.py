"""Does a repository's own history help find what a fix changes? A time-split evaluation on a git repository:

* cut-off: the last first-parent commit before a date; the tree at that commit is indexed once;
* gold: the commits after it (within a window) whose message names a fix, each with the functions and methods it
  changed (named at its parent by ``repoctx.history``), outside tests, kept when they exist at the cut-off tree;
* query: the commit's message, title and body, trailers, issue numbers and URLs removed (``clean_message``);
* without: repoctx's standard search over the cut-off index; with: the same candidates fused (weighted reciprocal
  ranks) with a BM25 ranking over a field learned only from commits reachable from the cut-off: per function, the
  words of the messages of the commits that changed it (per file, of the commits that modified it).

The signal is a pure re-ranking of the index's candidates and the mined field (``history_field``,
``HistoryRanker``, ``fuse``): no store change."""

from __future__ import annotations

import io
import re
import subprocess
import tarfile
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field, replace
from pathlib import Path

from repoctx.config import Settings
from repoctx.evaluate.metrics import function_key, rank_metrics
from repoctx.history import HistoryRanker, MinedCommit, SimilarCommits, clean_message, fuse, named_now
from repoctx.index import Index
from repoctx.retrieve.hybrid import SearchOptions, file_aggregation, is_test_path, to_files
from repoctx.tokens import code_tokens
from repoctx.types import DEFS, outermost_def

KS = (1, 5, 10)
_FIX = re.compile(r"\bfix(?:e[sd]|ing)?\b|\bbug(?:s|fix)?\b|\b(?:close[sd]?|resolve[sd]?)\s+#\d+", re.IGNORECASE)
# a fix of the tooling or the prose, not of behaviour: "apply ruff fixes", "fix typo", "fix docs build"
_NOT_BEHAVIOUR = re.compile(
    r"\b(?:typos?|lint(?:ing)?|ruff|mypy|flake8|pyflakes|black|isort|pre-commit|docs?|"
    r"documentation|docstrings?|spelling|grammar|changelog|readme|ci|tox|travis|coverage|"
    r"fixed font|fixtures?)\b",
    re.IGNORECASE,
)


def is_fix(message: str) -> bool:
    """A message that names a fix of behaviour: its title says Fix/fixes/fixed, bug or bugfix, or the message
    closes/resolves #N; a title about tooling or prose (typo, lint, docs, CI) is not one."""
    title = message.strip().split("\n", 1)[0]
    if _NOT_BEHAVIOUR.search(title):
        return False
    return bool(_FIX.search(title)) or bool(
        re.search(r"\b(?:close[sd]?|fix(?:e[sd])?|resolve[sd]?)\s+#\d+", message, re.IGNORECASE)
    )


# ---- the history field and its BM25


def history_field(
    commits: Iterable[MinedCommit], keep: set[str] | None = None, by: str = "symbols"
) -> dict[str, list[str]]:
    """Key (``path:qualname`` with ``by="symbols"``, path with ``by="files"``) → tokens of the cleaned messages of
    the commits that changed it, named as the newest commit names them (``named_now``: files renamed since are
    followed). ``keep``: only these keys (those the index has). Sweeps add nothing; tests get no field (the
    search demotes them for a question about code, and a fix's gold is outside them)."""
    out: dict[str, list[str]] = {}
    for c, symbols, files in named_now(commits):
        if c.sweep:
            continue
        keys = symbols if by == "symbols" else files
        toks: list[str] | None = None
        for key in dict.fromkeys(keys):
            if (keep is not None and key not in keep) or is_test_path(key.split(":", 1)[0]):
                continue
            if toks is None:
                toks = code_tokens(clean_message(c.message), keep_stopwords=False)
            out.setdefault(key, []).extend(toks)
    return out


# ---- the time split on one repository


def _git(repo: Path, *args: str) -> str:
    return subprocess.run(["git", "-C", str(repo), *args], capture_output=True, check=True, timeout=600).stdout.decode(
        "utf-8", "replace"
    )


def cutoff_commit(repo: Path, date: str) -> tuple[str, int]:
    """The last first-parent commit of HEAD before ``date``, and its committer time."""
    out = _git(repo, "rev-list", "-1", "--first-parent", f"--before={date}", "HEAD").strip()
    if not out:
        raise ValueError(f"no commit before {date} in {repo}")
    return out, int(_git(repo, "show", "-s", "--format=%ct", out).strip())


def export_tree(repo: Path, sha: str, dest: Path) -> Path:
    """The tree of ``sha`` as files under ``dest`` (once)."""
    if (dest / ".repoctx-tree-done").exists():
        return dest
    dest.mkdir(parents=True, exist_ok=True)
    data = subprocess.run(
        ["git", "-C", str(repo), "archive", "--format=tar", sha], capture_output=True, check=True, timeout=600
    ).stdout
    with tarfile.open(fileobj=io.BytesIO(data)) as tar:
        tar.extractall(dest, filter="data")
    (dest / ".repoctx-tree-done").write_text(sha)
    return dest


@dataclass
class GoldRow:
    sha: str
    time: int
    query: str
    gold_functions: list[str]
    gold_files: list[str]
    dropped: int = 0  # gold functions of the commit (outside tests) that the cut-off tree does not have


@dataclass
class Split:
    cutoff: str
    cutoff_time: int
    train: list[MinedCommit]
    rows: list[GoldRow]
    fix_commits: int  # fix commits after the cut-off in the window, before any filtering
    no_gold: int  # of those, left out: no function outside tests, or none that exists at the cut-off
    too_many: int  # of those, left out: more gold functions than max_gold
    empty: int = 0  # of those, left out: a message with no searchable word once cleaned ("Fix #123")


def make_split(
    commits: Sequence[MinedCommit],
    train_shas: set[str],
    cutoff: str,
    cutoff_time: int,
    functions: set[str],
    files: set[str],
    window_days: float = 730,
    max_gold: int = 5,
    fixes_only: bool = True,
) -> Split:
    """Train: the mined commits reachable from the cut-off. Gold: the fix commits after it (not reachable from it,
    committed after it and within ``window_days`` of it) with 1 to ``max_gold`` functions outside tests that exist
    in ``functions``, named at the cut-off (a file renamed between the cut-off and the fix's parent is followed
    back). ``commits``: newest first, as mined. ``fixes_only=False``: every commit after the cut-off is a row
    (more rows, a weaker likeness to an issue)."""
    train = [c for c in commits if c.sha in train_shas]
    end = cutoff_time + window_days * 86400
    rows: list[GoldRow] = []
    n_fix = no_gold = too_many = empty = 0
    backward: dict[str, str] = {}  # path after the cut-off → its path at the cut-off
    for c in reversed(commits):
        if c.sha in train_shas:
            continue
        symbols = [(backward.get(p, p), q) for p, _, q in (s.partition(":") for s in c.symbols)]
        for old, new in c.renames:
            backward[new] = backward.get(old, old)
        if c.time > end or c.time <= cutoff_time or c.sweep or (fixes_only and not is_fix(c.message)):
            continue
        n_fix += 1
        code = list(dict.fromkeys(f"{p}:{q}" for p, q in symbols if not is_test_path(p)))
        gold = [s for s in code if s in functions]
        if not gold:
            no_gold += 1
            continue
        if len(gold) > max_gold:
            too_many += 1
            continue
        query = clean_message(c.message)
        if not code_tokens(query, keep_stopwords=False):
            empty += 1
            continue
        gold_files = [f for f in dict.fromkeys(s.split(":", 1)[0] for s in gold) if f in files]
        rows.append(GoldRow(c.sha, c.time, query, gold, gold_files, len(code) - len(gold)))
    rows.sort(key=lambda r: r.time)
    return Split(cutoff, cutoff_time, train, rows, n_fix, no_gold, too_many, empty)


def index_keys(ix: Index) -> tuple[set[str], set[str], set[str]]:
    """(function keys, class keys, files) of an index, as gold and the mined history name them."""
    caps = ix.store.all_capsules(ix.scope())
    by_id = {c.id: c for c in caps}
    funcs, classes, files = set(), set(), set()
    for c in caps:
        files.add(c.path)
        if c.kind in DEFS:
            funcs.add(function_key(c.path, outermost_def(c, by_id.get).qualname))
        elif c.kind == "class":
            classes.add(function_key(c.path, c.qualname))
    return funcs, classes, files


SIGNALS = ("field", "similar")  # HistoryRanker over history_field; SimilarCommits


@dataclass
class Ranked:
    """One gold row's rankings without the history signal, and each history signal's own rankings:
    ``signals[name] = (functions, files)``."""

    row: GoldRow
    functions: list[str]
    files: list[str]
    signals: dict[str, tuple[list[str], list[str]]] = field(default_factory=dict)


def rank_rows(ix: Index, split: Split, functions: set[str], files: set[str], pool: int = 300) -> list[Ranked]:
    """Search each gold row's query (lexical standard search, the default stages) and rank it by each history
    signal, learned from the split's training commits only."""
    from repoctx.evaluate.runner import function_ranking

    rankers: dict[str, tuple[HistoryRanker | SimilarCommits, HistoryRanker | SimilarCommits]] = {
        "field": (
            HistoryRanker(history_field(split.train, keep=functions)),
            HistoryRanker(history_field(split.train, keep=files, by="files")),
        ),
        "similar": (SimilarCommits(split.train, keep=functions), SimilarCommits(split.train, keep=files, by="files")),
    }
    opts = SearchOptions(dense=False, pool=pool)
    out = []
    for row in split.rows:
        hits = ix.retrieve(row.query, k=pool, mode="standard", options=opts).hits
        ranked_files = [f.path for f in to_files(hits, file_aggregation(opts.file_agg, row.query))]
        signals = {
            name: ([k for k, _ in fn.rank(row.query)], [k for k, _ in fl.rank(row.query)])
            for name, (fn, fl) in rankers.items()
        }
        out.append(Ranked(row, function_ranking(hits, ix), ranked_files, signals))
    return out


def score(
    ranked: Sequence[Ranked], weight: float, signal: str = "field", file_weight: float | None = None
) -> tuple[dict[str, float], list[dict[str, float]]]:
    """Mean metrics (x100) and per-row metrics of the rankings fused with a history signal at ``weight`` (files at
    ``file_weight``, the same weight when None)."""
    per_row = []
    fw = weight if file_weight is None else file_weight
    for r in ranked:
        hist_fn, hist_files = r.signals.get(signal, ([], []))
        fm = rank_metrics(fuse(r.functions, hist_fn, weight), r.row.gold_functions, KS)
        row = {f"fn_acc@{k}": fm[f"acc@{k}"] for k in KS} | {"fn_mrr": fm["mrr"]}
        if r.row.gold_files:
            fl = rank_metrics(fuse(r.files, hist_files, fw), r.row.gold_files, KS)
            row |= {"file_acc@1": fl["acc@1"], "file_acc@5": fl["acc@5"]}
        per_row.append(row)
    keys = sorted({k for row in per_row for k in row})
    means = {
        k: round(100 * sum(row.get(k, 0.0) for row in per_row) / max(1, sum(k in row for row in per_row)), 1)
        for k in keys
    }
    means["n"] = len(per_row)
    return means, per_row


def tune(ranked: Sequence[Ranked], weights: Sequence[float], signal: str = "field", level: str = "function") -> float:
    """The weight with the best function Acc@10 (ties: Acc@1, then the smaller weight), or with
    ``level="file"`` the best file Acc@1 (ties: Acc@5, then the smaller weight)."""
    means = {w: score(ranked, w, signal)[0] for w in weights}
    first, second = ("fn_acc@10", "fn_acc@1") if level == "function" else ("file_acc@1", "file_acc@5")
    return max(weights, key=lambda w: (means[w].get(first, 0.0), means[w].get(second, 0.0), -w))


def lexical_settings(index_dir: Path) -> Settings:
    return replace(Settings.from_env(), index_dir=index_dir, embedder="none")
