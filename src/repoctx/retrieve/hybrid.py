"""Standard retrieval: exact mentions first, then reciprocal-rank fusion of lexical (BM25) and dense
ranks, then graph expansion. Pure over an injected store and optional vector index."""

from __future__ import annotations

import math
import re
from collections import Counter
from contextlib import nullcontext
from dataclasses import dataclass, field
from functools import lru_cache
from typing import Protocol

from repoctx.ingest.languages import is_test_path as is_test_path  # re-exported: its users import it from here
from repoctx.providers.embedding import squeeze, unit_head
from repoctx.retrieve.query import clean_path, mentions, summary_line
from repoctx.retrieve.router import reads_as_report
from repoctx.store.base import EVERYTHING, Scope, split_id
from repoctx.tokens import base_forms, code_tokens
from repoctx.types import DEFS, Capsule, FileHit, Hit, UnitHead, UnitSpan

RRF_K = 60
_RUST_TEST_MODULE = re.compile(r"(^|\.)tests?\.")  # #[cfg(test)] mod tests { ... } inside a source file
DOC_LANGUAGES = frozenset({"markdown", "rst", "text", "latex"})
_DECLARATIONS = re.compile(r"\.d\.[cm]?ts$")  # TypeScript declaration files repeat the code's names
_EXAMPLES = re.compile(r"(^|/)(examples?|samples?|demos?)/")  # code that uses the project, not the project
# a question about the documentation or the typings themselves keeps them at full weight
_ASKS_FOR_DOCS = re.compile(
    r"\b(docs?|documentation|documented|readme|changelog|changes file|release notes|guide|"
    r"tutorial|manual|typings?|type declarations?|d\.ts|examples?|samples?|demos?)\b",
    re.I,
)


def asks_for_docs(query: str) -> bool:
    """Whether ``query`` asks for the documentation, examples or typings themselves (then they keep their full
    weight). A text of several lines is read by the line that sums it up, its title (``summary_line``; a report
    whose first line is code, by that line): its body's "Example:", "as documented" or sample code say how the
    problem shows, not that the docs are what to find. The whole text of 34 of the dev split's 121 issues named
    such a word, 30 of them "example"; no title did, and an sdist's docs then outranked its code."""
    title = summary_line(query)
    if title is None and reads_as_report(query):
        title = next((ln for ln in query.strip().splitlines() if ln.strip()), "")
    return bool(_ASKS_FOR_DOCS.search(query if title is None else title))


class DenseIndex(Protocol):
    def search(self, query: str, k: int, scope: Scope = EVERYTHING) -> list[tuple[str, float]]: ...


SUMMARY_WEIGHT = 0.5  # the weight of a report's title line searched alone (two signals: lexical and dense)


@dataclass
class SearchOptions:
    k: int = 10
    level: str = "symbol"  # symbol | file
    lexical: bool = True
    dense: bool = True
    exact: bool = True
    # first: named identifiers/paths rank above everything; rrf: one more ranked signal; auto: first for a
    # query that is only names/paths, rrf for prose (issue texts mention many names: "first" measured
    # file Acc@5 79.3 vs 84.5 for rrf on the SWE-bench Django rows)
    exact_mode: str = "auto"
    graph: bool = True
    pool: int = 200  # candidates taken from each ranked signal
    max_terms: int = 48  # query terms kept for BM25 (rarest first)
    graph_seeds: int = 5
    graph_decay: float = 0.1  # 0.5 measured harmful (neighbours crowd out direct hits); 0.1 is neutral
    demote_tests: bool = True
    # docs windows and typings halved like tests for code questions (multi-language set: they took 1-3 of the
    # top 5); a question that asks for documentation keeps them
    demote_docs: bool = True
    # a file's score: "max" its best unit, "topN" the sum of its N best, "sum" all of them, "rrf" reciprocal ranks;
    # "auto": top2 for a report (an issue text: a fix's file matches in more than one unit; SWE-bench dev file
    # Acc@1 56.2 -> 62.8, both halves, both shipped models), max for a question (it asks for one unit:
    # top2 lost 4 of 86 multi-language questions, 2 of 121 multi-part intents)
    file_agg: str = "auto"
    # the second stage of a standard search (Index.search / retrieve, symbol level): the re-ranker (rerank.py,
    # fitted on other projects' questions; its whole-question weights) re-orders the first 30 units, the whole
    # question as one lane, then its units take their files' places into account (file_prior). Agentic sub-query
    # searches re-rank their own lanes and do not read this.
    rerank: bool = True
    kinds: tuple[str, ...] = ()
    weights: dict[str, float] = field(default_factory=lambda: {"lexical": 1.0, "dense": 1.0})


def query_terms(store, query: str, max_terms: int, scope: Scope = EVERYTHING) -> list[str]:
    """Code tokens of the query, stop words out; for long questions the rarest terms (IDF) are kept."""
    tf = Counter(code_tokens(query, keep_stopwords=False))
    # the uninflected forms code names use (a question says "resolved", the code `_resolve_lookup`),
    # where the index holds them
    forms = {w: base_forms(w) for w in tf}
    df = store.doc_freqs(list(dict.fromkeys(list(tf) + [f for fs in forms.values() for f in fs])), scope)
    for w, fs in forms.items():
        for f in fs:
            if df.get(f, 0) > 0 and f not in tf:
                tf[f] = tf[w]
    terms = list(tf)
    if len(terms) <= max_terms:
        return terms
    n = max(store.n_capsules(scope), 1)
    present = [t for t in terms if df.get(t, 0) > 0]
    scored = sorted(present, key=lambda t: -(math.log(1 + n / (1 + df[t])) * (1 + math.log(tf[t]))))
    return scored[:max_terms]


def resolve_paths(store, paths: list[str], scope: Scope) -> dict[str, list[str]]:
    """Each written path's module units as the store resolves it (``by_path_suffix``), one call a distinct path: a
    search's exact lane and its lines lane read one resolution."""
    return {p: store.by_path_suffix([p], scope) for p in dict.fromkeys(paths)}


def file_of(cid: str) -> tuple[str, str]:
    """(repository, path) of a unit id."""
    repo, local = split_id(cid)
    return repo, local.rsplit("#", 1)[0]


def files_of(ids: list[str]) -> list[tuple[str, str]]:
    """(repository, path) of each unit id, in order, once each."""
    return list(dict.fromkeys(map(file_of, ids)))


def exact_hits(
    store, query: str, scope: Scope, resolved: dict[str, list[str]] | None = None
) -> list[tuple[str, float, str]]:
    """(capsule id, specificity, matched text) for identifiers and paths the question names (``resolved``: its
    paths as ``resolve_paths`` gives them, when the caller has them)."""
    m = mentions(query)
    out: dict[str, tuple[float, str]] = {}
    if m.identifiers or m.dotted:
        names = list(dict.fromkeys(m.identifiers + m.dotted))
        caps = store.by_names(names, scope)
        by_name: dict[str, list[Capsule]] = {}
        for c in caps:
            by_name.setdefault(c.name, []).append(c)
        # A dotted name matched whole is that definition, however many others share its last part
        # (``PassDict.to_json`` among ten ``to_json``: dividing by ten put the class ``PassDict`` first)
        full = {c.id: f for c in caps if (f := dotted_match(c, m.dotted)) is not None}
        n_full = Counter(full.values())
        for c in caps:
            n_same = len(by_name.get(c.name, [])) or 1
            if c.id in full:
                spec = 2.0 / n_full[full[c.id]]
            else:
                spec = 1.0 / n_same
                if n_same > 8:
                    continue  # a name that common says little
            prev = out.get(c.id)
            if prev is None or spec > prev[0]:
                out[c.id] = (spec, c.qualname)
    if resolved is None:
        resolved = resolve_paths(store, m.paths, scope)
    for cid in dict.fromkeys(c for p in m.paths for c in resolved[p]):
        # ``db/backends/oracle/features.py`` is django/db/..., not django/contrib/gis/db/...: the fewer folders a
        # path has before what the question wrote, the better it matches
        path = file_of(cid)[1]
        extra = min((path.count("/") - f.count("/") for f in m.paths if path == f or path.endswith("/" + f)), default=0)
        out[cid] = (max(out.get(cid, (0.0, ""))[0], 1.5 - 0.01 * min(extra, 9)), "path")
    return sorted(((cid, s, w) for cid, (s, w) in out.items()), key=lambda x: -x[1])


# a report's traceback ranks the functions of its three innermost frames in the repository, in a lane of their own
# (``lines``) at the weight of the others. SWE-bench dev, the 23 reports that write a line: function Acc@10 +1 -0 on
# wheels and sdists, file ranks as they were (to_files leaves the lane out); every frame instead of three pushed
# django 16816's gold function out of the first ten (docs/quality.md, session 43)
FRAMES = 3


def written_units(
    store, locations: list[tuple[str, int, str]], scope: Scope, resolved: dict[str, list[str]] | None = None
) -> list[tuple[str, str]]:
    """The functions and methods the lines ``locations`` writes fall in, as (capsule id, the line as written), a
    traceback's innermost frame first, at most ``FRAMES``: Python writes it last ("most recent call last", and pytest
    alike), JavaScript, Java, Go and Rust first. A frame that names its function is
    checked against the units at its line; a release other than the reporter's moves lines, so the function of
    that name in the file nearest the line is taken instead. A line that names none takes the innermost function
    spanning it. A path that resolves to several files (a bare ``base.py``), a ``<module>`` frame and a line outside
    any function name nothing. ``resolved``: the paths as ``resolve_paths`` gives them, when the caller has them."""
    out: dict[str, str] = {}
    resolved = dict(resolved or {})
    defs: dict[tuple[str, str], list[UnitSpan]] = {}
    innermost_last = bool(locations) and locations[-1][0].endswith((".py", ".pyi"))
    for path, line, name in reversed(locations) if innermost_last else locations:
        if len(out) >= FRAMES:
            break
        if path not in resolved:
            resolved.update(resolve_paths(store, [path], scope))
        if name == "<module>" or len(files := files_of(resolved[path])) != 1:
            continue
        key = files[0]
        if key not in defs:
            defs[key] = [u for u in store.file_spans(*key, scope) if u.kind in DEFS]
        spanning = sorted((c for c in defs[key] if c.start_line <= line <= c.end_line), key=lambda c: -c.start_line)
        if short := "" if name.startswith("<") else name.rsplit(".", 1)[-1]:
            spanning = [c for c in spanning if c.name == short] or sorted(
                (c for c in defs[key] if c.name == short), key=lambda c: abs(c.start_line - line)
            )
        if spanning:
            out.setdefault(spanning[0].id, f"{path}:{line}")
    return list(out.items())


# the paths a question writes vote for their files in a file-level ranking (Index.rank_files), at the weight of the
# history's vote (history.FILE_WEIGHT), not tuned: SWE-bench dev file Acc@1 wheels 61.2 -> 64.5 (+5 -1), sdists 60.2
# -> 62.7 (+5 -2), both halves of both up (docs/quality.md, session 42)
NAMED_WEIGHT = 0.25


def named_files(
    store, query: str, scope: Scope, resolved: dict[str, list[str]] | None = None
) -> tuple[dict[tuple[str, str], float], dict[tuple[str, str], str]]:
    """The files the paths ``query`` writes resolve to, as (repository, path): each one's share of the vote and the
    path written for it (``resolved``: its paths as ``resolve_paths`` gives them, when the caller has them). The j-th
    written path that resolves gives 1 / (60 + j), shared among the files it resolves to and divided by how many paths
    resolve: a report that names one file votes for it whole, a traceback of ten frames a tenth as much for each. Test
    files do not vote: a report names a test where the failure shows, and a search demotes tests for the same reason
    (a fix's own tests match its report too)."""
    if resolved is None:
        resolved = resolve_paths(store, mentions(query).paths, scope)
    voting = []
    for p, ids in resolved.items():
        if files := [f for f in files_of(ids) if not is_test_path(f[1])]:
            voting.append((p, files))
    votes: dict[tuple[str, str], float] = {}
    written: dict[tuple[str, str], str] = {}
    for j, (p, files) in enumerate(voting, 1):
        for key in files:
            votes[key] = votes.get(key, 0.0) + 1.0 / (60 + j) / len(files) / len(voting)
            written.setdefault(key, p)
    return votes, written


def dotted_match(c: Capsule, dotted: list[str]) -> str | None:
    """The dotted name of the question that names ``c`` whole, or None: its qualname itself
    (``Flask.make_response``), or its qualname after the packages and module it lives in, in order
    (``flask.app.Flask.make_response``, ``app.Flask.make_response``, ``models.Field.formfield`` for
    ``django/db/models/fields/__init__.py``: a package re-exports its modules' names). ``Flask.make_response`` does
    not name the function ``make_response`` of another module: a shorter qualname at the end of a dotted name is a
    match only when what comes before it is its own path."""
    for d in dotted:
        if d == c.qualname:
            return d
        if d.endswith("." + c.qualname):
            parts = iter(_module_parts(c.path))
            if all(p in parts for p in d[: -len(c.qualname) - 1].split(".")):  # a subsequence, in order
                return d
    return None


@lru_cache(maxsize=1 << 14)
def _module_parts(path: str) -> tuple[str, ...]:
    """``src/flask/app.py`` → ``("src", "flask", "app")``: the packages and module code imports it by."""
    stem = re.sub(r"\.[A-Za-z0-9]+$", "", path)
    parts = [p for p in stem.split("/") if p]
    if parts and parts[-1] == "__init__":
        parts = parts[:-1]
    return tuple(parts)


def names_only(query: str) -> bool:
    """A query made of identifiers and paths only (at most a few words), e.g. ``parse_http_date`` or
    ``QuerySet.only django/db/models/query.py``."""
    words = query.split()
    if not words or len(words) > 4:
        return False
    m = mentions(query)
    named = set(m.identifiers) | set(m.dotted) | set(m.paths)
    bare = [w.strip("`'\"(),:") for w in words]
    return all(w in named or clean_path(w) in named or any(w.startswith(n) for n in named) for w in bare)


@lru_cache(maxsize=1 << 16)
def _declarations_or_examples(path: str) -> bool:
    return bool(_DECLARATIONS.search(path) or _EXAMPLES.search(path))


def is_test_unit(c: Capsule | UnitHead) -> bool:
    return _unit_kind(c.path, c.language, c.qualname)[0]


def is_doc_unit(c: Capsule | UnitHead) -> bool:
    """Prose, declarations and examples: README/CHANGES windows, .rst/.txt pages, TypeScript .d.ts typings,
    code under examples/ (an example's ``AliasedGroup.resolve_command`` is not the project's)."""
    return _unit_kind(c.path, c.language, c.qualname)[1]


@lru_cache(maxsize=1 << 17)
def _unit_kind(path: str, language: str, qualname: str) -> tuple[bool, bool]:
    """(a test, documentation): what a search demotes (asked of every candidate; remembered)."""
    test = bool(is_test_path(path) or (language == "rust" and _RUST_TEST_MODULE.search(qualname)))
    return test, language in DOC_LANGUAGES or _declarations_or_examples(path)


def searched_summary(query: str, opts: SearchOptions) -> str:
    """A report's title line when the search also ranks it alone (its weight not 0), else ""."""
    return (summary_line(query) or "") if opts.weights.get("summary", SUMMARY_WEIGHT) else ""


def search(
    store,
    query: str,
    opts: SearchOptions | None = None,
    dense_index: DenseIndex | None = None,
    scope: Scope = EVERYTHING,
    limit: int | None = None,
    stats: dict | None = None,
) -> list[Hit]:
    """Every candidate, best first; ``limit``: only the first ``limit`` (the ranking is the same; ``stats``
    gets ``candidates``, how many there were; ``units``, the first ``FILE_PRIOR_DEPTH`` of them as (repository, path,
    the score their file counts), read without their texts; and with the exact lane on, ``resolved``, the paths the
    question writes as ``resolve_paths`` gave them). Each hit's ``why`` says which signals found it (rank and score),
    and any demotion or graph step."""
    reading = getattr(store, "reading", None)  # a store that keeps units in memory: one content key a search
    with reading() if reading is not None else nullcontext():
        return _search(store, query, opts or SearchOptions(), dense_index, scope, limit, stats)


def _search(
    store,
    query: str,
    opts: SearchOptions,
    dense_index: DenseIndex | None,
    scope: Scope,
    limit: int | None,
    stats: dict | None,
) -> list[Hit]:
    ranks: list[tuple[str, dict[str, tuple[int, float]]]] = []  # per ranked signal: id -> (rank, score)
    why: dict[str, dict] = {}  # everything else a hit's explanation says (exact, demotions, graph)
    fused: dict[str, float] = {}

    def add_rank(signal: str, ranked: list[tuple[str, float]], weight: float) -> None:
        got: dict[str, tuple[int, float]] = {}
        for rank, (cid, score) in enumerate(ranked, 1):
            fused[cid] = fused.get(cid, 0.0) + weight / (RRF_K + rank)
            got[cid] = (rank, score)
        ranks.append((signal, got))

    # every signal that needs no vector is read first: the question's vector may still be on its way (a one-shot
    # search embeds it in a thread meanwhile). They are added in a fixed order, whatever order they were read in
    summary, w = searched_summary(query, opts), opts.weights.get("summary", SUMMARY_WEIGHT)
    lexical = summary_lexical = None
    if opts.lexical:
        lexical = store.lexical(query_terms(store, query, opts.max_terms, scope), opts.pool, scope)
        if summary:
            # a long report's title: its words are few and often common, so the rarest-terms cut of the whole
            # text drops them and its vector is diluted; the title searched alone is one more ranked signal
            summary_lexical = store.lexical(query_terms(store, summary, opts.max_terms, scope), opts.pool, scope)
    named = mentions(query)
    resolved = resolve_paths(store, named.paths, scope) if opts.exact else {}
    found = exact_hits(store, query, scope, resolved) if opts.exact else []
    if lexical is not None:
        add_rank("lexical", lexical, opts.weights.get("lexical", 1.0))
    dense_lanes: list[tuple[str, list[tuple[str, float]], list[tuple[str, float]], float]] = []
    if opts.dense and dense_index is not None:
        dense = dense_index.search(query, opts.pool, scope)
        add_rank("dense", dense, opts.weights.get("dense", 1.0))
        dense_lanes.append((query, dense, lexical or [], opts.weights.get("dense", 1.0)))
    if summary:
        if summary_lexical is not None:
            add_rank("summary_lexical", summary_lexical, w)
        if opts.dense and dense_index is not None:
            summary_dense = dense_index.search(summary, opts.pool, scope)
            add_rank("summary_dense", summary_dense, w)
            dense_lanes.append((summary, summary_dense, summary_lexical or [], w))
    # with REPOCTX_FUNCTION_WINDOWS=1, what the candidates' further body windows give their files (files only)
    on = dense_lanes and getattr(dense_index, "windows", False)
    windows = window_shares(store, dense_index, dense_lanes, scope) if on else {}
    lines_given: dict[str, tuple[str, float]] = {}  # a unit the lines name: the line as written, what the lane gave
    w_lines = opts.weights.get("lines", 1.0)  # 0: no lane, and the frames are not read
    if opts.exact and w_lines > 0 and (lines := written_units(store, named.locations, scope, resolved)):
        add_rank("lines", [(cid, 1.0) for cid, _ in lines], w_lines)
        lines_given = {cid: (at, w_lines / (RRF_K + rank)) for rank, (cid, at) in enumerate(lines, 1)}
    exact: dict[str, float] = {}
    if opts.exact:
        mode = opts.exact_mode if opts.exact_mode != "auto" else ("first" if names_only(query) else "rrf")
        for rank, (cid, spec, matched) in enumerate(found, 1):
            why.setdefault(cid, {})["exact"] = {"rank": rank, "matched": matched}
            if mode == "first":
                exact[cid] = spec
            else:
                fused[cid] = fused.get(cid, 0.0) + opts.weights.get("exact", 1.0) / (RRF_K + rank)

    ids = list(dict.fromkeys(list(exact) + sorted(fused, key=lambda c: -fused[c])[: opts.pool]))
    demote_docs = opts.demote_docs and not asks_for_docs(query)
    # every candidate's kind and path now; the texts of the units returned only (a popular name's callers
    # run to thousands of units, and reading a unit's text inflates its whole file)
    heads = store.unit_heads(ids, scope)
    scored: dict[str, float] = {}
    for cid in ids:
        c = heads.get(cid)
        if c is None or (opts.kinds and c.kind not in opts.kinds):
            continue
        s = fused.get(cid, 0.0) + (1.0 + exact[cid] if cid in exact else 0.0)
        test, doc = _unit_kind(c.path, c.language, c.qualname)
        factor = 1.0
        if opts.demote_tests and test:
            factor = 0.5
            why.setdefault(cid, {})["test_demoted"] = True
        elif demote_docs and doc:
            factor = 0.5
            why.setdefault(cid, {})["doc_demoted"] = True
        scored[cid] = s * factor
        if cid in windows:
            why.setdefault(cid, {})["windows"] = {"score": windows[cid] * factor}
        if cid in lines_given:  # where the question wrote it, what the lines gave it (its file's score leaves it out)
            at, given = lines_given[cid]
            why.setdefault(cid, {})["written"] = {"at": at, "score": given * factor}

    if opts.graph and scored:
        expand_graph(store, scored, heads, why, opts, scope)

    order = sorted(scored, key=lambda c: (-scored[c], c))  # every scored unit has its head in heads
    if stats is not None:
        stats["candidates"] = len(order)
        # the first candidates as a file ranking reads them, without their texts (Index._file_prior)
        stats["units"] = [
            (split_id(cid)[0], heads[cid].path, scored[cid] + _file_share(why.get(cid)))
            for cid in order[:FILE_PRIOR_DEPTH]
        ]
        if opts.exact:  # the paths it writes, resolved once for the exact and lines lanes and the files' ranking
            stats["resolved"] = resolved
    caps = {c.id: c for c in store.capsules(order[:limit], scope)}
    hits = []
    for cid in order[:limit]:
        if cid not in caps:  # replaced by a reindex since its head was read
            continue
        # the explanation is put together only for the hits returned
        explained = {
            signal: {"rank": rs[0], "score": round(float(rs[1]), 4)}
            for signal, got in ranks
            if (rs := got.get(cid)) is not None
        }
        explained.update(why.get(cid, ()))
        hits.append(Hit(caps[cid], scored[cid], explained))
    return hits


def expand_graph(
    store, scored: dict[str, float], heads: dict[str, UnitHead], why: dict, opts: SearchOptions, scope: Scope
) -> None:
    """Callers and callees of the top hits join with a decayed share of their seed's score."""
    seeds = sorted(scored, key=lambda c: -scored[c])[: opts.graph_seeds]
    neighbours: dict[str, tuple[float, str, str]] = {}
    out_edges = store.edges_from(seeds, ("calls", "inherits"), scope)
    in_edges = store.edges_to(seeds, ("calls", "inherits"), scope)
    for e in out_edges:
        if e.dst and e.dst not in seeds:
            s = scored[e.src] * opts.graph_decay
            if s > neighbours.get(e.dst, (0, "", ""))[0]:
                neighbours[e.dst] = (s, e.src, "callee" if e.kind == "calls" else "base")
    for e in in_edges:
        if e.src not in seeds:
            s = scored[e.dst] * opts.graph_decay * 0.5
            if s > neighbours.get(e.src, (0, "", ""))[0]:
                neighbours[e.src] = (s, e.dst, "caller" if e.kind == "calls" else "subclass")
    heads.update(store.unit_heads([cid for cid in neighbours if cid not in heads], scope))
    for cid, (s, seed, rel) in neighbours.items():
        if cid not in heads or (opts.kinds and heads[cid].kind not in opts.kinds):
            continue
        bonus = s * 0.2 if cid in scored else s
        if cid in scored:
            scored[cid] += bonus
        else:
            scored[cid] = bonus * (0.5 if opts.demote_tests and is_test_unit(heads[cid]) else 1.0)
        why.setdefault(cid, {})["graph"] = {"from": seed, "relation": rel, "score": round(bonus, 5)}


def file_aggregation(agg: str, query: str) -> str:
    """The aggregation ``to_files`` applies for ``query``: ``auto`` resolved by the query's shape."""
    if agg != "auto":
        return agg
    return "top2" if reads_as_report(query) else "max"


def to_files(hits: list[Hit], agg: str = "max") -> list[FileHit]:
    """Aggregate capsule hits into files: ``max`` (best capsule), ``topN`` (sum of the N best capsules'
    scores: a file whose second unit is also relevant outranks a file with one lucky match), ``sum`` (all)
    or ``rrf`` over capsule ranks (``file_aggregation`` resolves ``auto`` for a query). Scores, not list
    order, pick a file's best units, so a second stage that re-orders hits leaves the files as they were;
    each file lists its capsules in hit order."""
    files: dict[str, FileHit] = {}
    for h in hits:
        files.setdefault(h.capsule.path, FileHit(h.capsule.path, 0.0, [])).capsules.append(h)
    return _scored_files(files, [(h.capsule.path, h.score + _file_share(h.why)) for h in hits], agg)


def unit_files(units: list[tuple[str, str, float]], agg: str = "max") -> list[FileHit]:
    """Files ranked as ``to_files`` ranks them, from units read without their texts: (repository, path, score),
    best first (a search's ``stats["units"]``). Each file names its repository and lists no units."""
    files: dict[str, FileHit] = {}
    for repo, path, _ in units:
        files.setdefault(path, FileHit(path, 0.0, repo=repo))
    return _scored_files(files, [(path, score) for _, path, score in units], agg)


def _scored_files(files: dict[str, FileHit], scores: list[tuple[str, float]], agg: str) -> list[FileHit]:
    """``files`` scored from their units' (path, score), best unit first, and sorted best first."""
    top = _top_n(agg)
    parts: dict[str, list[float]] = {}
    for rank, (path, score) in enumerate(scores, 1):
        parts.setdefault(path, []).append(1.0 / (RRF_K + rank) if agg == "rrf" else score)
    for path, fh in files.items():
        best = sorted(parts[path], reverse=True)
        fh.score = sum(best if top is None else best[:top])
    return sorted(files.values(), key=lambda f: (-f.score, f.path))


# a unit's file counts in its place (session 47): a standard search's first 30 units, once re-ranked, are ordered by
# reciprocal rank fusion of their own place and their file's place in the file ranking (``Index.rank_files``: the
# units' scores, the history's vote, the paths the question writes), the file's at the history's weight
# (history.FILE_WEIGHT), not tuned. A function of the best file rises past a few of a file below it; a whole ranking
# is never overturned. SWE-bench dev function Acc@10 wheels 68.4 -> 70.2, sdists 66.7 -> 68.5 (+2 -0 each), history
# rows +1 -0 and +0 -0; no row lost at any cut-off on the four samples (docs/quality.md). The files are ranked from
# the first FILE_PRIOR_DEPTH candidates (``repoctx eval``'s depth), read without their texts, whatever the k.
FILE_PRIOR_WEIGHT = 0.25
FILE_PRIOR_DEPTH = 300


def file_prior(hits: list[Hit], files: list[FileHit], weight: float = FILE_PRIOR_WEIGHT) -> list[Hit]:
    """``hits`` re-ordered by 1 / (60 + their place) + ``weight`` / (60 + their file's place in ``files``); a unit
    whose file is not among ``files`` is ranked after all of them. Ties keep their order. A unit that moves says
    where it was and its file's place (``why["file_prior"]``)."""
    place = {f.path: i for i, f in enumerate(files, 1)}
    unranked = len(place) + 1
    file_rank = [place.get(h.capsule.path, unranked) for h in hits]
    order = rrf_order([weight / (RRF_K + r) for r in file_rank])
    for new, i in enumerate(order):
        if new != i:
            hits[i].why["file_prior"] = {"was": i + 1, "file_rank": file_rank[i]}
    return [hits[i] for i in order]


def rrf_order(bonus: list[float]) -> list[int]:
    """The places of a ranked list (0-based) re-ordered by the reciprocal rank of each place (k 60) plus its
    ``bonus``; ties keep their order. A file ranking moved by votes (``Index.rank_files``) and units moved by their
    files' places (``file_prior``) are both this."""
    return sorted(range(len(bonus)), key=lambda i: -(1.0 / (RRF_K + i + 1) + bonus[i]))


def _file_share(why: dict | None) -> float:
    """What a unit's file counts beyond or short of the unit's own score (read in its ``why``):
    - the lines a question writes: what they gave the unit, its file's score leaves out. The paths written vote for
      files on their own (``named_files``), and a traceback's frames counted again pushed the files it names above
      the one the fix is in (dev sdists: django 13448's ``creation.py`` 2 -> 4, session 43);
    - its body's further windows (``window_shares``, an option): what they would give it, its file's score adds."""
    return given_score(why, "windows") - given_score(why, "written")


def given_score(why: dict | None, signal: str) -> float:
    """The score a signal recorded in a unit's ``why`` gave it (0 when it gave none)."""
    got = (why or {}).get(signal)
    return float(got.get("score", 0.0)) if isinstance(got, dict) else 0.0


# A function's body past what the model reads (sessions 44-45; an option, REPOCTX_FUNCTION_WINDOWS=1). A unit's vector
# reads its first 512 characters (128 tokens), and 63 % of the SWE-bench dev split's gold functions are longer. With
# the option, each candidate function's next BODY_WINDOWS windows of its body (each headed by its path, name and
# signature, as its own vector is) are compared with the question, and its file counts what the dense lane would give
# it with its best window standing for it, beyond what the lane gives it: files only, the units keep their order (but
# for the file prior, which reads the files' ranking). Candidates: the first WINDOW_CANDIDATES of the dense and of the
# lexical lane, in each dense lane (the question's and its title's). The windows' vectors are embedded when first
# compared and read from the vector cache after that. File Acc@1 on 611 rows: +21 -7 (dev wheels 64.5 -> 68.6, sdists
# 64.4 -> 66.1, history rows 47.9 -> 49.7 and 57.1 -> 59.0); function Acc@10 the same but the dev wheels' 70.2 -> 69.3
# (docs/quality.md). Not the default: issue 44's rule asks function Acc@10 to rise too.
WINDOW_CHARS = 512  # what the default model reads of a text: 128 tokens at 4 characters (embed_text)
BODY_WINDOWS = 2
WINDOW_CANDIDATES = 100


def body_windows(c: Capsule) -> list[str]:
    """A function's or method's body past its first window, in at most ``BODY_WINDOWS`` windows of ``WINDOW_CHARS``
    characters (blank lines and indentation dropped, overlapping by a quarter), each headed by its path, qualified
    name and signature. Empty for a unit that fits in one window, or that is no function."""
    if c.kind not in ("function", "method") or not c.text:
        return []
    head = unit_head(c)
    body = squeeze(c.text)
    room = max(128, WINDOW_CHARS - len(head) - 1)
    if len(body) <= room:
        return []
    step = room * 3 // 4
    out: list[str] = []
    for i in range(step, len(body), step):  # the first window is what the unit's own vector reads
        out.append(f"{head}\n{body[i : i + room]}")
        if len(out) >= BODY_WINDOWS or i + room >= len(body):
            break
    return out


def window_shares(
    store,
    dense_index,
    lanes: list[tuple[str, list[tuple[str, float]], list[tuple[str, float]], float]],
    scope: Scope,
) -> dict[str, float]:
    """Per unit: what each dense lane (text, its ranking, the lexical ranking of the same text, its weight) would give
    it, beyond what it gives it, with each candidate's best body window (``body_windows``) standing for it when its
    cosine is the higher. The candidates' texts are read once, their windows compared with every lane's text in one
    batch (``DenseRetriever.similarities``)."""
    cands = [
        list(
            dict.fromkeys(
                [cid for cid, _ in dense[:WINDOW_CANDIDATES]] + [cid for cid, _ in lexical[:WINDOW_CANDIDATES]]
            )
        )
        for _, dense, lexical, _ in lanes
    ]
    texts = {
        c.id: ws
        for c in store.capsules(list(dict.fromkeys(x for ids in cands for x in ids)), scope)
        if (ws := body_windows(c))
    }
    if not texts:
        return {}
    asked = [
        (text, [t for cid in ids if cid in texts for t in texts[cid]])
        for (text, *_), ids in zip(lanes, cands, strict=True)
    ]
    shares: dict[str, float] = {}
    for (_, dense, _, weight), ids, sims in zip(lanes, cands, dense_index.similarities(asked), strict=True):
        if not sims:  # no candidate of this lane has a further window: its ranking is the plain one
            continue
        score = dict(dense)
        got = iter(sims)
        for cid in ids:
            if cid in texts:
                best = max(next(got) for _ in texts[cid])
                score[cid] = max(score[cid], best) if cid in score else best
        plain = {cid: r for r, (cid, _) in enumerate(dense, 1)}
        for r, cid in enumerate(sorted(score, key=lambda c: (-score[c], c)), 1):  # every unit of the lane, and more
            d = weight / (RRF_K + r) - (weight / (RRF_K + plain[cid]) if cid in plain else 0.0)
            if d:
                shares[cid] = shares.get(cid, 0.0) + d
    return shares


def _top_n(agg: str) -> int | None:
    """How many of a file's units (best first) its score adds up (None: all of them)."""
    if agg == "max":
        return 1
    if agg in ("sum", "rrf"):
        return None
    if agg.startswith("top") and agg[3:].isdigit() and int(agg[3:]) >= 1:
        return int(agg[3:])
    raise ValueError(f"file aggregation must be max, sum, rrf or topN (N >= 1), not {agg!r}")
