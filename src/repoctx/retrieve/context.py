"""KC-RAG context building: the question's task decides how the retrieved capsules are compressed
into a token budget.

``build_context`` is the I/O edge (search, then graph reads through one ``Scope``); ``assemble`` is
the pure core that turns hits plus a small graph reader into a ``Context``.

code_query and refactor cut long units to what the question needs (``slices.py``): the signature, the lines that
mention the question's terms with the blocks around them, returns and raises, ``… lines a-b`` where lines are left
out. A citation ``path:a-b :: qualname`` names exactly the lines shown under it (a sliced unit has one per run of
shown lines) and each gap is listed in ``Context.left_out`` the same way, so ``citations`` and ``left_out`` never
overlap. The budget is spread: first the head (signature, first docstring line) of each unit in a fixed order of
priority, up to the first that does not fit in a share of the budget (so more budget never covers fewer units);
then the units' slices grow, then whole, in rounds.

What each task shows:
- code_query: the target, sliced (whole when the budget allows); its callees' signatures; the lines of its callers
  and of the tests that name it where they call it; the other hits, sliced, then whole.
- refactor: the target whole (sliced only when it alone does not fit: a refactor edits all of it); every caller's
  call sites; the other definitions of the name; the callees' bodies; then the other hits.
- code_gen: the layout of the hit directories and the names (signatures) of the hit files and their neighbours.
- search: a mini index of the hits, names and line spans grouped by file.
"""

from __future__ import annotations

import math
import posixpath
import re
import textwrap
from dataclasses import dataclass, field
from typing import Protocol

from repoctx.providers.embedding import count_tokens
from repoctx.retrieve import slices
from repoctx.retrieve.hybrid import is_test_unit, query_terms
from repoctx.store.base import EVERYTHING, Scope
from repoctx.tokens import code_tokens
from repoctx.types import Capsule, Context, FileHit, Hit

TASKS = ("code_query", "refactor", "code_gen", "search")
DEFAULT_BUDGETS = {"code_query": 2000, "refactor": 1500, "code_gen": 600, "search": 800}
SEARCH_K = {"code_query": 10, "refactor": 10, "code_gen": 10, "search": 30}

CODE_KINDS = ("function", "method", "class")
# code_query/refactor: how the budget is spread (see _Plan)
SKELETON_SHARE = 0.5  # the heads of the units (after the first) stop at half the budget: the rest is for depth
TARGET_CEILING = 0.45  # code_query: the target's slice, before the last round (whole when it fits in that)
RELATED_CEILING = 0.15  # each of the first hits after the target; later hits half that
SITE_CEILING = 0.06  # a caller's or a test's call sites
CALLEE_CEILING = 0.15  # refactor: each callee's body
TARGET_WHOLE = 600  # code_query: a target of at most this many tokens is shown whole (within its ceiling)
SMALL_WHOLE = 100  # another unit of at most this many tokens is shown whole rather than cut
# how many of the groups a question needs (a matching line with its blocks, a return) a unit shows: the target most,
# another hit a few (enough to see whether it is the place; the agent asks for more by name), a call site its calls
TARGET_GROUPS, RELATED_GROUPS, SITE_GROUPS = 10, 2, 2
EARLY_RELATED = 4  # code_query: hits whose heads come before the graph's neighbours
MAX_CALLEES, MAX_CALLERS, MAX_TESTS = 4, 3, 2
MAX_REFACTOR_SITES = 40  # refactor: callers and other definitions (a rename touches them all)
MAX_TERM_SHARE = 0.25  # a term in more than this share of the units says nothing about which lines matter
MAX_LAYOUT_DIRS = 5
MAX_DIR_FILES = 25
MAX_NAME_FILES = 8

# ---------------------------------------------------------------- task classification

_PREFIX = re.compile(
    r"^(?:"
    r"(?:please|pls|kindly|hey|hi|ok|okay|so|now|then|also|and|quick question)[,:!]?\s+"
    r"|(?:can|could|would|will) you(?: please)?\s+"
    r"|help me(?: to)?\s+"
    r"|i(?: would|'d| d)? (?:want|need|like|wish) to\s+"
    r"|we (?:need|want|have|should|must) to\s+"
    r"|(?:we|i) should\s+"
    r"|let'?s\s+"
    r"|how (?:do|can|should|would|could|might) (?:i|we|you|one)\s+"
    r"|how to\s+"
    r"|what(?:'s| is) the (?:best |right |cleanest |easiest |proper )?way to\s+"
    r"|is (?:there a|it possible) (?:(?:good |clean |simple )?way )?to\s+"
    r"|show me how to\s+"
    r"|go ahead and\s+"
    r"|try to\s+"
    r")"
)

_REFACTOR_ANYWHERE = re.compile(
    r"\brefactor\w*|\brenam(?:e|es|ed|ing)\b|\bclean(?:[\s-]?up)\b|\bcleanup\b"
    r"|\bchange (?:the |its |their |a )?(?:\w+ )?signatures?\b|\bsignature changes?\b"
    r"|\bcallers? of\b|\bcall[\s-]?sites?\b|\b(?:who|what) calls\b|\bdeduplicat\w*"
    r"|\badd (?:an? |the |one )?(?:new |extra |optional )?(?:parameter|argument|param|arg|kwarg)s?\b"
)
_REFACTOR_VERBS = frozenset(
    "move extract inline split rename restructure reorganize reorganise simplify consolidate decouple "
    "replace convert migrate deprecate tidy untangle merge refactor dedupe deduplicate".split()
)
_CODE_GEN_VERBS = frozenset("add implement write create generate scaffold build introduce draft bootstrap stub".split())
_SEARCH_VERBS = frozenset("find list locate enumerate grep search".split())
_QUESTION_WORDS = frozenset(
    "how what what's whats why where when which who whose does do did is are was were can could should "
    "would will explain describe tell".split()
)
_CODE_GEN_ANYWHERE = re.compile(
    r"\bscaffold\w*|\bboilerplate\b|\b(?:add|implement|write|create|generate|build) (?:a |an |the )?new\b"
)
_SEARCH_ANYWHERE = re.compile(
    r"\bwhere are (?:all|the)\b|\bwhich (?:files?|modules?|classes|functions|methods|places|tests|parts)\b"
    r"|\bwhat files\b|\busages? of\b"
    r"|\b(?:all|every) (?:the |of the )?(?:places?|occurrences?|usages?|uses|references|files|modules|classes"
    r"|functions|methods|subclasses|implementations|tests|definitions)\b"
    r"|\bwhere (?:else )?(?:is|are) [\w.]+ (?:used|called|referenced|imported)\b"
    r"|^show (?:me )?(?:all|every)\b|^give me (?:a list|all)\b|^get all\b"
)


def classify_task(query: str) -> str:
    """The KC-RAG task of a question: ``refactor``, ``code_gen``, ``search`` or ``code_query`` (default).

    Rule-based: strong refactor phrases anywhere win; then the leading imperative verb (after polite
    or "how do I" prefixes); then search / code-generation phrases; otherwise a question about code.
    """
    q = " ".join(query.lower().replace("’", "'").split())
    if _REFACTOR_ANYWHERE.search(q):
        return "refactor"
    prev = None
    while prev != q:
        prev, q = q, _PREFIX.sub("", q, count=1)
    words = re.findall(r"[a-z_']+", q)
    verb = words[0] if words else ""
    if verb in _REFACTOR_VERBS:
        return "refactor"
    if verb in _CODE_GEN_VERBS:
        return "code_gen"
    if verb in _SEARCH_VERBS or _SEARCH_ANYWHERE.search(q):
        return "search"
    if verb not in _QUESTION_WORDS and _CODE_GEN_ANYWHERE.search(q):
        return "code_gen"
    return "code_query"


# ---------------------------------------------------------------- graph reads (the I/O edge)


class GraphReader(Protocol):
    def callees(self, ids: list[str]) -> list[Capsule]: ...
    def callers(self, ids: list[str]) -> list[Capsule]: ...
    def file_capsules(self, repo: str, path: str) -> list[Capsule]: ...
    def visible_paths(self, repo: str, dirs: list[str]) -> list[str]: ...
    def namesakes(self, c: Capsule) -> list[Capsule]: ...
    def tests_naming(self, c: Capsule, limit: int) -> list[Capsule]: ...
    def term_weights(self, query: str) -> dict[str, float]: ...


class StoreReader:
    """The reads the context builder needs, each through one ``Scope``."""

    def __init__(self, store, scope: Scope = EVERYTHING):
        self.store = store
        self.scope = scope

    def callees(self, ids: list[str]) -> list[Capsule]:
        dsts = [e.dst for e in self.store.edges_from(ids, ("calls",), self.scope) if e.dst]
        return self.store.capsules(list(dict.fromkeys(dsts)), self.scope)

    def callers(self, ids: list[str]) -> list[Capsule]:
        srcs = [e.src for e in self.store.edges_to(ids, ("calls",), self.scope)]
        return self.store.capsules(list(dict.fromkeys(srcs)), self.scope)

    def file_capsules(self, repo: str, path: str) -> list[Capsule]:
        return self.store.file_capsules(repo, path, self.scope)

    def namesakes(self, c: Capsule) -> list[Capsule]:
        """Other functions, methods and classes with the same name, in the same repository."""
        return [
            d
            for d in self.store.by_names([c.name], self.scope.with_repos((c.repo,)) if c.repo else self.scope)
            if d.id != c.id and d.name == c.name and d.kind in CODE_KINDS
        ]

    def tests_naming(self, c: Capsule, limit: int) -> list[Capsule]:
        """Test functions that call ``c`` (the graph), then those whose text names it (the lexical index; a
        method: its name and its class's)."""
        if len(c.name) < 3:
            return []
        out = [d for d in self.callers([c.id]) if is_test_unit(d) and d.kind in CODE_KINDS]
        ids = [cid for cid, _ in self.store.lexical([c.name.lower()], 50, self.scope)]
        named = {d.id: d for d in self.store.capsules(ids, self.scope)}
        # a method's name is often common (``handle``, ``save``): its class must be named too
        words = [re.compile(rf"\b{re.escape(w)}\b") for w in [c.name] + c.qualname.split(".")[-2:-1]]
        out += [
            named[i]
            for i in ids
            if i in named
            and named[i].kind in CODE_KINDS
            and is_test_unit(named[i])
            and all(w.search(named[i].text) for w in words)
        ]
        return list({d.id: d for d in out if d.id != c.id}.values())[:limit]

    def term_weights(self, query: str) -> dict[str, float]:
        """The question's terms (as the lexical search takes them) weighed by rarity (IDF); terms in more than
        ``MAX_TERM_SHARE`` of the units are left out."""
        terms = query_terms(self.store, query, 48, self.scope)
        df = self.store.doc_freqs(terms, self.scope)
        n = max(self.store.n_capsules(self.scope), 1)
        return {t: math.log(1 + n / (1 + df[t])) for t in terms if 0 < df.get(t, 0) <= MAX_TERM_SHARE * n}

    def visible_paths(self, repo: str, dirs: list[str]) -> list[str]:
        """The files directly in ``dirs``, plus one file under each of their subdirectories, that the
        scope lets the caller see (enough to draw each directory with its subdirectories collapsed)."""
        all_paths = [p for r, p in self.store.paths(self.scope.with_repos((repo,))) if r == repo]
        out: list[str] = []
        for d in dict.fromkeys(dirs):
            pre = d + "/" if d else ""
            seen_sub: set[str] = set()
            for p in all_paths:
                if not p.startswith(pre):
                    continue
                rest = p[len(pre) :]
                sub = rest.split("/", 1)[0] if "/" in rest else None
                if sub is not None and sub in seen_sub:
                    continue
                out.append(p)
                if sub is not None:
                    seen_sub.add(sub)
        return sorted(set(out))


# ---------------------------------------------------------------- the budget


@dataclass
class _Packer:
    """Text pieces added in order while they fit; whitespace-joined, so token counts add up."""

    budget: int
    parts: list[tuple[str, list[str]]] = field(default_factory=list)
    used: int = 0
    left_out: list[str] = field(default_factory=list)
    _sections: set[str] = field(default_factory=set)

    def room(self) -> int:
        return self.budget - self.used

    def heading_cost(self, section: str | None) -> int:
        return count_tokens(f"## {section}\n") if section and section not in self._sections else 0

    def add(
        self, text: str, citations: tuple[str, ...] | list[str] = (), section: str | None = None, record: bool = True
    ) -> bool:
        """Add ``text`` (under ``section``, whose heading comes with its first piece) if it fits;
        otherwise list ``citations`` as left out unless ``record`` is false (the caller will retry)."""
        if section and section not in self._sections:
            text = f"## {section}\n" + text
        n = count_tokens(text)
        if n > self.room():
            if record:
                self.left_out.extend(citations)
            return False
        if section:
            self._sections.add(section)
        self.parts.append((text, list(citations)))
        self.used += n
        return True

    def finish(self, task: str, budget: int) -> Context:
        text = "".join(t for t, _ in self.parts).rstrip() + "\n" if self.parts else ""
        tokens = count_tokens(text)
        while tokens > budget and self.parts:  # belt and braces: the final text is what counts
            _, cites = self.parts.pop()
            self.left_out.extend(cites)
            text = "".join(t for t, _ in self.parts).rstrip() + "\n" if self.parts else ""
            tokens = count_tokens(text)
        citations = list(dict.fromkeys(c for _, cites in self.parts for c in cites))
        left_out = [c for c in dict.fromkeys(self.left_out) if c not in citations]
        return Context(task=task, text=text, citations=citations, tokens=tokens, budget=budget, left_out=left_out)


# ---------------------------------------------------------------- rendering pieces


def _doc_first_line(c: Capsule) -> str:
    for line in c.docstring.splitlines():
        if line.strip():
            return line.strip()
    return ""


def _whole_piece(c: Capsule) -> str:
    body = textwrap.dedent(c.text).rstrip("\n")
    fence = slices._fence(body)
    return f"### {c.citation}\n{fence}{c.language}\n{body}\n{fence}\n\n"


# ---------------------------------------------------------------- code_query and refactor: sliced units


@dataclass
class _Unit:
    """One unit of a code_query/refactor context: its place (section), how far it may grow, what is shown."""

    capsule: Capsule
    section: str
    ceiling: float  # the share of the budget it may take (twice that in the second round); 0: its head only
    whole_ok: bool = True  # may be shown whole (an outline or a call-site slice stays what it is)
    # "core": grows to what the question needs of it (whole only when that is most of it, or it is small);
    # "full": grows to the whole unit, and in a last round takes what is left (refactor: what is being edited)
    depth: str = "core"
    small: int = 0  # tokens under which a "core" unit is shown whole
    most: int | None = None  # a "core" unit shows at most this many of the groups the question needs
    sl: slices.Sliceable | None = None
    lines: frozenset[int] | None = None  # shown lines (None: not shown); a unit that cannot be cut: all or nothing
    cost: int = 0

    def piece(self) -> slices.Piece:
        if self.sl is None:
            text = _whole_piece(self.capsule)
            return slices.Piece(text, (self.capsule.citation,), (), count_tokens(text), True)
        assert self.lines is not None  # a unit with a slicer shows at least its head (_Plan.skeleton)
        return slices.render(self.sl, self.lines)

    def cost_of(self, lines: frozenset[int] | None) -> int:
        if self.sl is None:
            return count_tokens(_whole_piece(self.capsule))
        assert lines is not None  # a unit with a slicer is priced from its head up
        return slices.cost(self.sl, lines)


class _Plan:
    """Units in a fixed order of priority, shown in sections.

    Coverage first, then depth. The skeleton shows each unit's head (signature and first docstring line) in
    priority order and stops at the first that does not fit in ``SKELETON_SHARE`` of the budget (the first unit
    may take all of it): which units a context cites depends on the budget only through that prefix, so more
    budget never covers less. Then rounds of growth: each unit's slice grows (matching lines with their blocks,
    returns and raises; the whole unit when that is most of it) up to its ceiling, then twice that, then, in a last
    round, as far as what is left allows (only the units a task reads whole), always in priority order. A unit grows to
    what the question needs of it, not to fill the budget: an agent pays for every token it is given."""

    def __init__(self, budget: int, sections: tuple[str, ...]):
        self.budget = budget
        self.sections = sections
        self.units: list[_Unit] = []
        self.left_out: list[str] = []
        self.used = 0
        self._headed: set[str] = set()

    def room(self) -> int:
        return self.budget - self.used

    def _heading(self, section: str) -> int:
        return 0 if section in self._headed else count_tokens(f"## {section}\n")

    def skeleton(self, cands: list[_Unit], weights: dict[str, float], focus: dict[str, tuple[str, ...]]) -> None:
        for i, u in enumerate(cands):
            if u.capsule.kind in CODE_KINDS:
                u.sl = slices.prepare(u.capsule, weights, focus.get(u.capsule.id, ()))
            head = u.sl.head if u.sl is not None else None
            need = u.cost_of(head) + self._heading(u.section)
            cap = self.budget if i == 0 else int(SKELETON_SHARE * self.budget)
            if self.used + need > cap:
                self.left_out.extend(c.capsule.citation for c in cands[i:])
                return
            u.lines = head
            u.cost = u.cost_of(head)
            self.used += need
            self._headed.add(u.section)
            self.units.append(u)

    def grow(self) -> None:
        for factor in (1.0, 2.0, None):
            for u in self.units:
                if u.sl is None or not u.ceiling or (factor is None and u.depth != "full"):
                    continue
                assert u.lines is not None  # planned units with a slicer show their head at least
                limit = u.cost + self.room()
                if factor is not None:
                    limit = min(limit, max(u.cost, int(u.ceiling * factor * self.budget)))
                lines = slices.grow(
                    u.sl, u.lines, limit, u.whole_ok, core_only=u.depth == "core", small=u.small, most=u.most
                )
                if lines != u.lines:
                    new = u.cost_of(lines)
                    if new - u.cost <= self.room():
                        self.used += new - u.cost
                        u.lines, u.cost = lines, new

    def finish(self, task: str) -> Context:
        parts: list[tuple[str, slices.Piece]] = []
        for section in self.sections:
            for u in self.units:
                if u.section == section:
                    parts.append((section, u.piece()))
        text = ""
        cites: list[str] = []
        left: list[str] = []
        seen: set[str] = set()
        for section, p in parts:
            if section not in seen:
                seen.add(section)
                text += f"## {section}\n"
            text += p.text
            cites.extend(p.citations)
            left.extend(p.left_out)
        text = text.rstrip() + "\n" if text else ""
        tokens = count_tokens(text)
        if tokens > self.budget and self.units:  # never (the counts add up); if ever, the last unit gives way
            dropped = self.units.pop()
            self.left_out.append(dropped.capsule.citation)
            return self.finish(task)
        citations = list(dict.fromkeys(cites))
        left_out = [c for c in dict.fromkeys(left + self.left_out) if c not in citations]
        return Context(task=task, text=text, citations=citations, tokens=tokens, budget=self.budget, left_out=left_out)


def _code_hits(hits: list[Hit]) -> list[Capsule]:
    caps = [h.capsule for h in hits]
    return [c for c in caps if c.kind in CODE_KINDS] or caps


def _members(reader: GraphReader, cls: Capsule) -> list[Capsule]:
    return [m for m in reader.file_capsules(cls.repo, cls.path) if m.parent == cls.id]


def _target(hits: list[Hit], reader: GraphReader) -> tuple[Capsule, Capsule | None, list[Capsule]]:
    """(target, its class shown as an outline or None, the units the target's text holds). A top class gives way
    to its best-ranked method among the hits (the class is then an outline: its signature, docstring line and
    the headers of its methods); a class none of whose methods is a hit is the target itself. Decided from the
    hits alone, never from the budget, so every budget cites the same units in the same order."""
    cands = _code_hits(hits)
    top = cands[0]
    if top.kind == "class":
        members = _members(reader, top)
        method = next((c for c in cands[1:] if c.kind == "method" and c.parent == top.id), None)
        if method is not None:
            return method, top, [m for m in members if m.id != method.id]
        return top, None, members
    return top, None, []


def _outline(u: _Unit) -> None:
    """An outline unit grows only to the headers of its methods."""
    if u.sl is not None:
        u.sl.groups = list(u.sl.outline)
        u.sl.n_core = len(u.sl.groups)
        u.sl._core_costs.clear()


def _dedupe(cands: list[_Unit], skip: set[str]) -> list[_Unit]:
    out: list[_Unit] = []
    for u in cands:
        if u.capsule.id not in skip:
            skip.add(u.capsule.id)
            out.append(u)
    return out


def _focus_on(target: Capsule, units: list[Capsule]) -> dict[str, tuple[str, ...]]:
    """Callers and tests show the lines that name the target first (its call sites), in whatever section."""
    return {c.id: (target.name,) for c in units}


TARGET, OUTLINE, CALLEES, CALLERS, TESTS, RELATED = (
    "Target",
    "Target class (outline)",
    "Callees (signatures)",
    "Callers (call sites)",
    "Tests that name it",
    "Related",
)
NAMESAKES, CALLEE_BODIES = "Other definitions of the name (signatures)", "Callees (bodies)"


def _assemble_code_query(query: str, hits: list[Hit], reader: GraphReader, budget: int) -> Context:
    """The target cut to what the question asks (whole when it is small), its callees' signatures, the lines of its
    callers and tests that call it, and the other hits cut to their best lines (whole when small)."""
    target, cls, inner = _target(hits, reader)
    own = {target.id} | {m.id for m in inner} | ({cls.id} if cls else set())
    callees = [c for c in reader.callees([target.id] + [m.id for m in inner]) if c.id not in own]
    callers = [c for c in reader.callers([target.id]) if c.id not in own and not is_test_unit(c)]
    tests = _tests_naming(reader, target)
    related = [c for c in _code_hits(hits) if c.parent not in own and c.id not in own]
    cands = [_Unit(target, TARGET, TARGET_CEILING, small=TARGET_WHOLE, most=TARGET_GROUPS)]
    if cls is not None:
        cands.append(_Unit(cls, OUTLINE, 1.0, whole_ok=False))
    # a hit that the target calls is shown among the callees, as a signature, where its rank puts it
    callee_ids, test_ids = {c.id for c in callees}, {c.id for c in tests}

    def hit(c: Capsule, ceiling: float) -> _Unit:
        if c.id in callee_ids:
            return _Unit(c, CALLEES, 0.0)
        return _Unit(c, TESTS if c.id in test_ids else RELATED, ceiling, small=SMALL_WHOLE, most=RELATED_GROUPS)

    cands += [hit(c, RELATED_CEILING) for c in related[:EARLY_RELATED]]
    cands += [_Unit(c, CALLEES, 0.0) for c in callees[:MAX_CALLEES]]
    cands += [_Unit(c, CALLERS, SITE_CEILING, whole_ok=False, most=SITE_GROUPS) for c in callers[:MAX_CALLERS]]
    cands += [_Unit(c, TESTS, SITE_CEILING, whole_ok=False, most=SITE_GROUPS) for c in tests[:MAX_TESTS]]
    cands += [hit(c, RELATED_CEILING / 2) for c in related[EARLY_RELATED:]]
    cands = _dedupe(cands, set())
    plan = _Plan(budget, (TARGET, OUTLINE, CALLEES, CALLERS, TESTS, RELATED))
    plan.skeleton(cands, reader_weights(reader, query), _focus_on(target, callers + tests))
    for u in plan.units:
        if u.section == OUTLINE:
            _outline(u)
    plan.grow()
    return plan.finish("code_query")


def _assemble_refactor(query: str, hits: list[Hit], reader: GraphReader, budget: int) -> Context:
    """The target whole (a refactor edits all of it; sliced only when it alone does not fit), every caller's call
    sites, the other definitions of its name, its callees' bodies, then the other hits."""
    target, cls, inner = _target(hits, reader)
    if cls is not None:  # a refactor of a class is about the class
        target, inner = cls, _members(reader, cls)
    own = {target.id} | {m.id for m in inner}
    callers = [c for c in reader.callers(list(own)) if c.id not in own]
    # a rename or signature change touches every definition of the name (overrides, other implementations)
    namesakes = [c for c in reader.namesakes(target) if c.id not in own]
    callees = [c for c in reader.callees(list(own)) if c.id not in own]
    tests = [c for c in _tests_naming(reader, target) if c.id not in own]
    cands = [_Unit(target, TARGET, 1.0, depth="full")]
    cands += [_Unit(c, CALLERS, SITE_CEILING, whole_ok=False) for c in callers[:MAX_REFACTOR_SITES]]
    cands += [_Unit(c, TESTS, SITE_CEILING, whole_ok=False) for c in tests]
    cands += [_Unit(c, NAMESAKES, 0.0) for c in namesakes[:MAX_REFACTOR_SITES]]
    cands += [_Unit(c, CALLEE_BODIES, CALLEE_CEILING, depth="full") for c in callees]
    cands += [
        _Unit(c, RELATED, RELATED_CEILING / 2, small=SMALL_WHOLE, most=RELATED_GROUPS)
        for c in _code_hits(hits)
        if c.parent not in own
    ]
    cands = _dedupe(cands, set())
    plan = _Plan(budget, (TARGET, CALLERS, TESTS, NAMESAKES, CALLEE_BODIES, RELATED))
    plan.skeleton(cands, reader_weights(reader, query), _focus_on(target, callers + tests + namesakes))
    plan.grow()
    return plan.finish("refactor")


def _tests_naming(reader: GraphReader, target: Capsule) -> list[Capsule]:
    fn = getattr(reader, "tests_naming", None)
    return fn(target, MAX_TESTS) if fn is not None else []


def reader_weights(reader: GraphReader, query: str) -> dict[str, float]:
    fn = getattr(reader, "term_weights", None)
    return fn(query) if fn is not None else {t: 1.0 for t in code_tokens(query, keep_stopwords=False)}


def _layout_lines(paths: list[str], dirs: list[str], hit_files: set[str]) -> list[str]:
    """A tree of ``dirs`` (their files, and their subdirectories collapsed), with the ancestors."""
    tree: dict = {}

    def node(d: str) -> dict:
        cur = tree
        for part in [p for p in d.split("/") if p]:
            cur = cur.setdefault(part + "/", {})
        return cur

    for d in dirs:
        here = node(d)
        pre = d + "/" if d else ""
        files = [p for p in paths if posixpath.dirname(p) == d]
        for p in files[:MAX_DIR_FILES]:
            here[posixpath.basename(p) + (" *" if p in hit_files else "")] = None
        if len(files) > MAX_DIR_FILES:
            here[f"... {len(files) - MAX_DIR_FILES} more files"] = None
        for p in paths:
            if p.startswith(pre) and "/" in p[len(pre) :]:
                here.setdefault(p[len(pre) :].split("/", 1)[0] + "/", {})

    def render(t: dict, depth: int) -> list[str]:
        out: list[str] = []
        for key in sorted(t, key=lambda k: (k.endswith("/"), k.startswith("..."), k)):
            out.append("  " * depth + key)
            if t[key]:
                out += render(t[key], depth + 1)
        return out

    return render(tree, 0)


def _names_lines(caps: list[Capsule]) -> list[tuple[str, Capsule]]:
    """Classes and functions of one file as signatures, methods indented under their class."""
    by_id = {c.id: c for c in caps}
    out = []
    for c in caps:
        if c.kind not in CODE_KINDS:
            continue
        depth, parent = 0, by_id.get(c.parent or "")
        while parent is not None and parent.kind == "class":
            depth += 1
            parent = by_id.get(parent.parent or "")
        if parent is not None and parent.kind in ("function", "method"):
            continue  # local helpers are not part of a file's names
        out.append(("    " * depth + (c.signature or c.qualname), c))
    return out


def _assemble_code_gen(query: str, hits: list[Hit], reader: GraphReader, budget: int) -> Context:
    """The layout of the hit files' directories and the names (signatures) of the hit files and their
    neighbours: where new code goes and the conventions it follows, no bodies."""
    repo = hits[0].capsule.repo  # the layout of the repository the best hit is in
    hit_files = list(dict.fromkeys(h.capsule.path for h in hits if h.capsule.repo == repo))
    dirs = list(dict.fromkeys(posixpath.dirname(p) for p in hit_files))[:MAX_LAYOUT_DIRS]
    paths = reader.visible_paths(repo, dirs)

    # The layout may take at most half the budget, the names the rest: the names are placed first, in a fixed
    # order, up to the first that does not fit in what the whole layout would leave of the budget (so more budget
    # never names fewer files); the layout then takes what the names left.
    # Hit files first, then their neighbours in the same directories: conventions to follow.
    lines = _layout_lines(paths, dirs, set(hit_files))
    layout_all = count_tokens("## Layout (* = file with hits)\n" + "".join(line + "\n" for line in lines) + "\n")
    names_part = _Packer(budget - min(layout_all, budget // 2))
    neighbours = [p for p in paths if posixpath.dirname(p) in dirs and p not in hit_files]
    files = (hit_files + neighbours)[:MAX_NAME_FILES]
    for n, path in enumerate(files):
        caps = reader.file_capsules(repo, path)
        module = next((c for c in caps if c.kind == "module"), None)
        if module is None and not caps:
            continue
        cite = (
            module.citation
            if module
            else f"{path}:{min(c.start_line for c in caps)}-{max(c.end_line for c in caps)} :: {path}"
        )
        names = _names_lines(caps)
        if not names:
            continue
        head = f"### {cite}\n"
        if not names_part.add(head + names[0][0] + "\n", [cite], section="Existing names"):
            names_part.left_out.extend(_file_cite(reader, repo, p) for p in files[n + 1 :])
            break
        full = True
        for i, (line, c) in enumerate(names[1:], 1):
            if not names_part.add(line + "\n"):
                names_part.left_out.extend(c.citation for _, c in names[i:])
                full = False
                break
        if not full or not names_part.add("\n"):
            names_part.left_out.extend(_file_cite(reader, repo, p) for p in files[n + 1 :])
            break

    cap = budget - names_part.used
    text = "## Layout (* = file with hits)\n"
    packer = _Packer(budget)
    if count_tokens(text) <= cap:
        for i, line in enumerate(lines):
            more = f"... {len(lines) - i} more entries\n"
            if count_tokens(text + line + "\n" + (more if i < len(lines) - 1 else "")) > cap:
                if count_tokens(text + more) <= cap:
                    text += more
                break
            text += line + "\n"
        if text.count("\n") > 1:
            packer.add(text + "\n")
    for part, cites in names_part.parts:
        packer.parts.append((part, cites))
        packer.used += count_tokens(part)
    packer.left_out += [c for c in names_part.left_out if c]
    return packer.finish("code_gen", budget)


def _file_cite(reader: GraphReader, repo: str, path: str) -> str:
    caps = reader.file_capsules(repo, path)
    module = next((c for c in caps if c.kind == "module"), None)
    if module is not None:
        return module.citation
    return f"{path}:{min(c.start_line for c in caps)}-{max(c.end_line for c in caps)} :: {path}" if caps else ""


def _assemble_search(query: str, hits: list[Hit], reader: GraphReader, budget: int) -> Context:
    """A mini index: the hits' names and line spans grouped by file, in rank order of the files, until the first
    that does not fit (so more budget never lists fewer)."""
    packer = _Packer(budget)
    by_file: dict[str, list[Capsule]] = {}
    for h in hits:
        by_file.setdefault(h.capsule.path, []).append(h.capsule)
    listed = [
        (path, c)
        for path, caps in by_file.items()
        for c in {c.id: c for c in ([c for c in caps if c.kind != "module"] or caps)}.values()
    ]
    headed: set[str] = set()
    for n, (path, c) in enumerate(listed):
        doc = _doc_first_line(c)
        line = f"  {c.qualname} (lines {c.start_line}-{c.end_line})" + (f" — {doc}" if doc else "") + "\n"
        if not packer.add(("" if path in headed else f"{path}\n") + line, [c.citation]):
            packer.left_out.extend(x.citation for _, x in listed[n + 1 :])
            break
        headed.add(path)
    return packer.finish("search", budget)


_ASSEMBLERS = {
    "code_query": _assemble_code_query,
    "refactor": _assemble_refactor,
    "code_gen": _assemble_code_gen,
    "search": _assemble_search,
}


def _nothing_found(task: str, query: str, budget: int) -> Context:
    for text in (f"No indexed code matched the query: {query.strip()[:200]}\n", "No indexed code matched.\n", ""):
        if count_tokens(text) <= budget:
            return Context(task=task, text=text, citations=[], tokens=count_tokens(text), budget=budget)
    return Context(task=task, text="", citations=[], tokens=0, budget=budget)


def assemble(task: str, query: str, hits: list[Hit], reader: GraphReader, budget: int) -> Context:
    """The pure core: compress ``hits`` for ``task`` into ``budget`` tokens, reading the graph via ``reader``."""
    if not hits:
        return _nothing_found(task, query, budget)
    return _ASSEMBLERS[task](query, hits, reader, budget)


def hits_for(task: str, budget: int) -> int:
    """How many hits a budget can use: the task's few, more when the budget has room (one per ~250 tokens: on the
    dev split 16 hits at 4k cover 93 gold functions of 131 for a median 2.3k tokens, 10 hits 85 for 1.6k)."""
    return max(SEARCH_K[task], min(100, budget // 250))


def build_context(
    index,
    query: str,
    task: str | None = None,
    budget: int | None = None,
    scope: Scope = EVERYTHING,
    hits: list[Hit] | None = None,
) -> Context:
    """Retrieve for ``query`` (unless ``hits`` are given) and compress the result for the task.

    ``task`` defaults to ``classify_task(query)``; ``budget`` to the task's default. The returned
    text never exceeds ``budget`` tokens (MiniLM WordPiece, as ``count_tokens`` counts).
    """
    task = task or classify_task(query)
    if task not in TASKS:
        raise ValueError(f"unknown task {task!r}: expected one of {', '.join(TASKS)}")
    budget = DEFAULT_BUDGETS[task] if budget is None else int(budget)
    if budget < 0:
        raise ValueError("budget must be >= 0")
    if hits is None:
        hits = index.search(query, k=hits_for(task, budget), scope=scope)
    flat: list[Hit] = []
    for h in hits:
        flat.extend(h.capsules if isinstance(h, FileHit) else [h])
    return assemble(task, query, flat, StoreReader(index.store, scope), budget)
