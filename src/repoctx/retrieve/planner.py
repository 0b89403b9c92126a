"""Planners turn a multi-part question into sub-queries, one per intent.

``OfflinePlanner`` is deterministic and needs no model: it splits clauses at question boundaries,
expands comparisons into entity × aspect, splits lists, and keeps identifiers and paths as anchors.
``LLMPlanner`` asks any Strands model for a plan in a strict JSON schema and falls back to the
offline planner when the answer does not validate.
"""

from __future__ import annotations

import json
import re
from dataclasses import dataclass, field
from functools import lru_cache
from typing import Protocol

from repoctx.retrieve.query import mentions
from repoctx.tokens import STOPWORDS

WH_WORDS = {"how", "where", "what", "which", "when", "why", "who", "whether", "compare", "explain"}

WH = r"(?:how|where|what|which|when|why|who|whether|in what|does|do|is|are|can)"
# "(?<!\s)": a whitespace run is tried from its start only (from every position, a long blank stretch is quadratic)
_CLAUSE_SPLIT = re.compile(
    rf"\?\s+|;\s+|\.\s+(?=[A-Z])|:\s+(?={WH}\b)|,\s*(?:and\s+|but\s+|or\s+)?(?={WH}\b)|(?<!\s)\s+and\s+(?={WH}\b)"
    rf"|,\s+and\s+(?:explain\s+|describe\s+|show\s+)",
    re.I,
)
_VERSUS = re.compile(r"\s+(?:versus|vs\.?|compared (?:with|to)|as opposed to)\s+", re.I)
# verbs that start the aspect of "compare how X and Y <verb> ..." (words that are often nouns too, such as
# cache, map, set, log or format, are left out: "the file-system and memcached bytecode caches: ...")
_ASPECT_VERBS = [
    v + suffix
    for v in (
        "handle",
        "implement",
        "render",
        "treat",
        "manage",
        "work",
        "deal",
        "process",
        "decide",
        "compute",
        "store",
        "support",
        "check",
        "roll",
        "convert",
        "parse",
        "validate",
        "write",
        "read",
        "choose",
        "build",
        "create",
        "load",
        "save",
        "draw",
        "resolve",
        "select",
        "split",
        "encode",
        "decode",
        "serialize",
        "generate",
        "collect",
        "find",
        "register",
        "install",
        "schedule",
        "dispatch",
        "compile",
        "emit",
        "evaluate",
        "transform",
        "estimate",
        "predict",
        "merge",
        "retry",
        "authenticate",
        "verify",
    )
    for suffix in ("", "s")
] + ["do", "does", "apply", "applies", "copy", "copies", "deploy", "deploys"]
_COMPARE_ASPECT = [  # "compare how X and Y handle aspect" / "compare X, Y and Z: aspect"
    re.compile(
        r"\bcompare\s+(?:how\s+)?(?P<entities>.+?)\s+(?P<aspect>(?:" + "|".join(_ASPECT_VERBS) + r")\b.*)$", re.I
    ),
    re.compile(r"\bcompare\s+(?:how\s+)?(?P<entities>.+?)\s*:\s*(?P<aspect>.+)$", re.I),
    re.compile(r"\bdifferences?\s+between\s+(?P<entities>.+?)\s+(?:in|for|when)\s+(?P<aspect>.+)$", re.I),
    # "how do the Python domain and the C++ domain differ in parsing ..., and in resolving ...": the aspects follow
    # "differ in" (read before _COMPARE_ONLY, which would keep the entities and drop what they are compared on)
    _DIFFER_IN := re.compile(
        r"^(?:how|in what way)\s+do\s+(?P<entities>.+?)\s+differ\s+(?:in|on|by|when)\s+"
        r"(?P<aspect>.+)$",
        re.I,
    ),
]
# "differ in A, and in B": each "in ..." is an aspect of its own
_DIFFER_ASPECTS = re.compile(r",?\s+(?:and|or)\s+(?:in|on|by|when)\s+(?=\w)", re.I)
_COMPARE_ONLY = [  # entities without an aspect: the aspects follow in later clauses
    re.compile(r"^(?:compare|contrast)\s+(?:how\s+)?(?P<entities>.+)$", re.I),
    re.compile(r"^(?:how|in what way)\s+do\s+(?P<entities>.+?)\s+differ\b.*$", re.I),
    re.compile(r"^(?:what(?:'s| is| are) the )?differences?\s+between\s+(?P<entities>.+)$", re.I),
]
# separators of listed items (split text whose whitespace runs are single spaces: on a long blank stretch the
# \s* and \s+ here try every split of the run at every position)
_LIST_ITEMS = re.compile(r"\s*(?:,\s*(?:and\s+|or\s+)?|\s+and\s+|\s+or\s+)\s*", re.I)
# longer clauses are paragraphs of a report, not list or comparison questions (the longest such question among
# the bench and training sets has 361 characters); the list-shaped rules below skip them
LIST_CLAUSE_MAX = 600
# "I'd like to understand how the fields get cleaned, how ...": before a question word only the phrase goes (the
# rest up to a comma is the first item of a list, not the subject of one)
_FILLER = re.compile(
    r"^(?:and\s+|also\s+|then\s+|so\s+)?(?:i'd like to understand|i want to (?:know|understand)|"
    r"walk me through|explain|tell me|show me|trace)\b"
    r"(?:\s+(?=(?:how|what|where|why|which|when|whether)\b)|[^:,]*[:,]?\s*)",
    re.I,
)
# an item starts at a non-space, or the space after each comma could go to the comma or to the item: 2^n ways
# to fail on a list of n items (seconds for 20)
_EACH_ITEM = r"[\w./()'-][\w\s./()'-]*?"
_EACH = re.compile(
    rf"^(?P<pre>.*?\b(?:the|do|does|are|is)\s+)"
    rf"(?P<items>{_EACH_ITEM}(?:,\s*{_EACH_ITEM})*,?\s+(?:and|or)\s+"
    rf"{_EACH_ITEM})\s+(?P<head>\w+)\s+each\b(?P<post>.*)$",
    re.I,
)
_CONTEXT = re.compile(
    r"^(?:for|in|when|whenever|once|after|before|if|given|on|with|inside|within|during|i want|"
    r"i'm|i am|we)\b",
    re.I,
)
_HAS_WH = re.compile(rf"\b{WH}\b", re.I)
_ASKS = re.compile(r"\b(?:how|where|what|which|why|who|whether)\b", re.I)
_AUX = {"does", "do", "did", "is", "are", "was", "were", "can", "could", "should", "will", "would"}
_LEAD = re.compile(
    r"^\s*(?:please\s+)?(?:walk me through|explain|describe|tell me about|show me|trace)\s+"
    r"(?P<subject>[^:?]{3,120}?)\s*:\s+(?P<rest>.+)$",
    re.I | re.S,
)
_EACH_WORD = re.compile(r"\b(?:each|both|respectively)\b", re.I)


def is_context(clause: str) -> bool:
    """'For symbolic matrices', 'When I save a figure to a file', 'In the admin change list': framing
    for the clauses that follow, not an intent. 'When does X happen' is a question."""
    words = clause.split()
    if not _CONTEXT.match(clause) or len(words) > 14:
        return False
    rest = words[1:]
    if rest and rest[0].lower() in _AUX:
        return False
    return not _ASKS.search(" ".join(rest)) and not (
        words[0].lower() in ("for", "in", "on", "with") and _HAS_WH.search(clause)
    )


def colon_list(clause: str) -> list[str] | None:
    """'How do the normalizations map a value: the linear one, the diverging one, and the log one'
    → one sub-query per item after the colon (items are noun phrases, not questions)."""
    if ": " not in clause:
        return None
    head, tail = clause.split(": ", 1)
    if _ASKS.match(tail.strip()) or len(head.split()) < 2:
        return None
    items = list_items(tail)
    return [f"{head}: {i}" for i in items] if items else None


def list_items(text: str) -> list[str] | None:
    """The items of a list of three or more noun phrases ("the usage line, the description text, and the
    options table"), or None when ``text`` does not read as one."""
    parts = split_top_level(text)
    items = [re.sub(r"^(?:and|or)\s+", "", i.strip(" .")) for i in parts if i.strip(" .")]
    # "a, b, and c" (the serial comma) marks a list even when its items are long descriptions
    oxford = len(parts) >= 3 and any(re.match(r"\s*(?:and|or)\s", p) for p in parts[2:])
    if len(items) >= 2 and " and " in items[-1] and not oxford:
        last = items.pop()
        items += [x.strip() for x in last.rsplit(" and ", 1)]
    if len(items) < 3 or any(len(i.split()) > (30 if oxford else 14) for i in items):
        return None
    return items


def split_top_level(text: str) -> list[str]:
    """Comma-separated parts of ``text``, leaving commas inside (...), [...] and {...} alone:
    "sorting a dict into (key, value) pairs, formatting a size" → 2 parts."""
    parts, depth, start = [], 0, 0
    for i, ch in enumerate(text):
        if ch in "([{":
            depth += 1
        elif ch in ")]}":
            depth = max(depth - 1, 0)
        elif ch == "," and depth == 0:
            parts.append(text[start:i])
            start = i + 1
    parts.append(text[start:])
    return parts


@dataclass
class SubQuery:
    text: str
    intent: str  # short label of the intent it serves
    anchors: list[str] = field(default_factory=list)  # identifiers/paths to match exactly
    # the part's own words when ``text`` carries the question's framing ("For queries with aggregates and window
    # functions: how is an OVER (...) clause rendered"): searched too and fused into the intent's lane, so that the
    # framing's words, shared by every part, do not pull each part's lane toward the same units
    unframed: str = ""


class Planner(Protocol):
    def plan(self, question: str) -> list[SubQuery]: ...

    def replan(self, question: str, uncovered: list[SubQuery], attempt: int) -> list[SubQuery]: ...


def _clean(s: str) -> str:
    s = _FILLER.sub("", s.strip())
    s = re.sub(r"^(?:and|or|but|also|then)\s+", "", s.strip(" ,;:.?"), flags=re.I)
    return s.strip(" ,;:.?")


_RELATIVE = re.compile(
    r"^which\s+(?:can't|cannot|can not|is|isn't|are|aren't|has|have|doesn't|don't|does not|"
    r"do not|was|were|will|would|also|then|means|makes|lacks)\b",
    re.I,
)


_ASIDE = re.compile(r"\([^()]*(?:\([^()]*\)[^()]*)*\)")  # a parenthesized aside (one level of nesting inside)
_ASIDE_MARK = re.compile(r"qzaside(\d+)qz")


def mask_asides(text: str, asides: list[str] | None = None) -> tuple[str, list[str]]:
    """Each parenthesized aside replaced by one word-like mark: its commas, 'and', 'or' and ';' ('(padding for
    rolling; exact, trim or pad for coarsen)', '(normalizing by the weights of the non-missing values only)')
    belong to the aside, not to the clause's list or clauses. The asides are appended to ``asides`` (a new
    list by default; pass one list to mask several texts under distinct marks); ``unmask_asides`` puts them back."""
    asides = [] if asides is None else asides

    def mark(m: re.Match) -> str:
        asides.append(m.group(0))
        return f"qzaside{len(asides) - 1}qz"

    return _ASIDE.sub(mark, text), asides


def unmask_asides(text: str, asides: list[str]) -> str:
    return _ASIDE_MARK.sub(lambda m: asides[int(m.group(1))] if int(m.group(1)) < len(asides) else m.group(0), text)


def _bare_phrase(part: str) -> bool:
    """'in what order', 'into characters': a prepositional phrase with at most one content word (a framing such
    as 'In particular' or 'in a ColumnTransformer' is not one: it frames the clauses that follow)."""
    words = part.split()
    content = [w for w in words if w.lower() not in STOPWORDS and w.lower() not in WH_WORDS]
    return bool(words) and words[0].lower() in _PREPOSITIONS and len(content) <= 1 and not is_context(part)


def split_clauses(question: str) -> list[str]:
    parts: list[str] = []
    masked, asides = mask_asides(question)
    for p in (unmask_asides(_clean(p), asides) for p in _CLAUSE_SPLIT.split(masked)):
        if parts and (_RELATIVE.match(p) or _bare_phrase(p)):
            # "..., which can't alter a column in place" qualifies the clause before, as does "... and in what
            # order" (a phrase with one content word asks nothing on its own)
            parts[-1] = f"{parts[-1]}, {p}"
        elif p and len(p.split()) >= 2:
            parts.append(p)
    return parts or [question.strip()]


def _items(text: str) -> list[str]:
    # a leading dot stays: ".str, .dt and .plot accessors" name attributes
    items = (i.strip(" ,").rstrip(".").strip() for i in _LIST_ITEMS.split(" ".join(text.split())))
    return [i for i in items if i and i.lower() not in ("each", "each one", "both")]


_PLURAL = re.compile(r"^[a-z]{2,}[^siu]s$")  # "options", not "class", "status" or "analysis"


def _entities(raw: str) -> list[str]:
    items = [re.sub(r"^(?:the|a|an|how)\s+", "", i, flags=re.I) for i in _items(raw)]
    items = [i for i in items if i]
    # "SQLite and PostgreSQL backends", "monkeypatch, tmp_path and capsys fixtures": the last item's head noun is
    # shared by the one-word items before it, unless they are nouns of their own ("options and positional
    # arguments": a plain plural word names a thing, not a kind of the last item's)
    if (
        len(items) >= 2
        and len(items[-1].split()) >= 2
        and all(len(e.split()) == 1 and not _PLURAL.match(e) for e in items[:-1])
    ):
        noun = items[-1].split()[-1]  # "SQLite and PostgreSQL backends": the head noun is shared
        items = [f"{e} {noun}" for e in items[:-1]] + [items[-1]]
    return items


def _aspects(aspect: str) -> list[str]:
    """'handle JSON fields, transactions and connection errors' → one aspect per listed thing."""
    out = []
    for clause in split_clauses(aspect) or [aspect]:
        m = re.match(r"^(?P<verb>\w+)\s+(?P<rest>.+)$", clause)
        items = _items(m.group("rest")) if m else []
        if m and 2 <= len(items) <= 5 and all(len(i.split()) <= 4 for i in items):
            out += [f"{m.group('verb')} {i}" for i in items]
        else:
            out.append(clause)
    return out


# "compare A with B": the two sides of a comparison (a clause of its own, or the entities before a colon)
_WITH = re.compile(r"\s+with\s+", re.I)
_COMPARE_WITH = re.compile(r"^(?:compare|contrast)\s+(?P<a>[^:]+?)\s+with\s+(?P<b>[^:]+)$", re.I)
# "applied around each test": "each" after a preposition qualifies the noun after it, not the items before it
_PREPOSITIONS = frozenset(
    "about above across after against along among around at before behind below beneath beside "
    "between beyond by during for from in inside into near of off on onto out outside over per "
    "through throughout to toward towards under until upon with within without".split()
)


def _bare(phrase: str) -> str:
    return re.sub(r"^(?:the|a|an)\s+", "", phrase, flags=re.I)


def _compared(raw: str) -> list[str]:
    """The entities of a comparison: 'the SQLite and PostgreSQL backends', 'the normal Environment with the
    native one'."""
    items = _entities(raw)
    if len(items) == 1 and _WITH.search(items[0]):
        items = [_bare(x) for x in _WITH.split(items[0], maxsplit=1)]
    return items


def expand_comparison(clause: str) -> list[str] | None:
    """'compare X and Y: how do they A and B' → X A, X B, Y A, Y B; 'A for X versus Y' → A for X, A for Y."""
    if len(clause) > LIST_CLAUSE_MAX:  # a paragraph of a report (the "each" rule backtracks on long text)
        return None
    for pat in _COMPARE_ASPECT:
        m = pat.search(clause)
        if not m:
            continue
        entities = _compared(m.group("entities"))
        if len(entities) < 2:
            continue
        aspects = (
            [a for part in _DIFFER_ASPECTS.split(m.group("aspect")) for a in _aspects(part)]
            if pat is _DIFFER_IN
            else _aspects(m.group("aspect"))
        )
        return [f"{e} {a}" for e in entities for a in aspects]
    m = _COMPARE_WITH.match(clause)
    if m:
        return [m.group("a"), m.group("b")]
    parts = _VERSUS.split(clause)
    if len(parts) >= 2:
        first, last = parts[0].split(), parts[-1].split()
        if (
            len(parts) == 2
            and parts[0].rstrip().endswith(",")
            and len(last) >= 3
            and last[1].lower() != first[-1].strip(",").lower()
        ):
            # "how does the old system deduce facts, compared with the newer query-based system": the comparison is
            # of the whole clause with a phrase; each is a part (word by word, it planned "... deduce facts, newer ...")
            return [parts[0].rstrip(" ,"), parts[1].strip()]
        n = 2 if len(first) >= 2 and len(last) > 1 and last[1].lower() == first[-1].lower() else 1  # shared head noun
        pre, a = " ".join(first[:-n]), " ".join(first[-n:])
        b, post = " ".join(last[:n]), " ".join(last[n:])  # "grid tables versus simple tables in reST": both in reST
        items = [a] + [p.strip() for p in parts[1:-1]] + [b]
        return [" ".join(x for x in (pre, i, post) if x) for i in items]
    m = _EACH.search(clause)
    if m and m.group("head").lower() not in _PREPOSITIONS:
        items = _items(m.group("items"))
        if len(items) >= 2:
            return [f"{i} {m.group('head')}{m.group('post')}".strip() for i in items]
    return None


def compared_entities(clause: str) -> list[str] | None:
    """Entities of a clause that only names what is compared ('Compare the SQLite and PostgreSQL backends')."""
    for pat in _COMPARE_ONLY:
        m = pat.search(clause)
        if m:
            items = _entities(m.group("entities"))
            if len(items) >= 2 and all(len(i.split()) <= 4 for i in items):
                return items
    return None


# Each list item starts at a non-space: with "\s*[^,]+" an indented line could be split k ways per item, and
# a pasted code block in an issue report took the match minutes (catastrophic backtracking).
_LIST = re.compile(
    r"^(?P<pre>.*\b(?:are|is|do|does|the|of|for|through)\s+)"
    r"(?P<items>[^,\s][^,]*(?:,\s*[^,\s][^,]*)+,?\s+(?:and|or)\s+[^,\s][^,]*?)"
    r"(?P<post>\s+(?:handled|applied|implemented|computed|used|processed|built|evaluated|defined|"
    r"supported|resolved|found|stored|rendered|parsed|matched|work)\b.*)?$",
    re.I,
)


def expand_list(clause: str) -> list[str] | None:
    """'how are A, B and C handled' → one sub-query per item when the items are short noun phrases."""
    if len(clause) > LIST_CLAUSE_MAX:  # a paragraph of a report, not a list question
        return None
    m = _LIST.search(clause)
    if not m:
        return None
    items = _items(m.group("items"))
    if len(items) < 3 or any(len(i.split()) > 6 for i in items):
        return None
    # "how is each line marked run, missed or partial", "how are text values turned into durations, dates and
    # integer ranges": the first item holds the clause's words and the rest are bare values; the list is the
    # object of one question, not its subjects (split, it gave "how is missed", "how are dates")
    head = len(items[0].split())
    if head >= 4 and all(head >= len(i.split()) + 2 for i in items[1:]):
        return None
    pre, post = m.group("pre").strip(), (m.group("post") or "").strip()
    last = pre.split()[-1].lower() if pre else ""
    # "the usage line, the description text": the "the" that ends ``pre`` is not said twice
    items = [" ".join(i.split()[1:]) if i.split()[0].lower() == last and len(i.split()) > 1 else i for i in items]
    return [" ".join(x for x in (pre, i, post) if x) for i in items]


class OfflinePlanner:
    """Rules, no model: clauses, then comparisons (entity × aspect), then lists."""

    max_subqueries = 8

    def plan(self, question: str) -> list[SubQuery]:
        m = mentions(question)
        anchors_all = m.identifiers + m.paths
        subs: list[SubQuery] = []
        context: list[str] = []
        carried: list[str] | None = None
        body = question
        lead = _LEAD.match(question)
        if lead:  # "Walk me through how constrained layout works: where ..., how ...": the subject frames each part
            context.append(lead.group("subject").strip())
            body = lead.group("rest")
        asides: list[str] = []  # every clause's asides, under distinct marks (entities carry across clauses)
        for clause in split_clauses(body):
            clause, _ = mask_asides(clause, asides)  # the rules read the clause without its asides' commas
            if is_context(clause):
                context.append(clause)  # "For symbolic matrices": framing for what follows, not an intent
                items = _entities(re.sub(r"^\w+\s+", "", clause))
                if len(items) >= 2 and _EACH_WORD.search(question) and all(len(i.split()) <= 4 for i in items):
                    carried = items  # "For the log, symlog and logit scales, how does each one ..."
                    context.pop()
                continue
            pair = _COMPARE_WITH.match(clause)
            if pair and _EACH_WORD.search(question):  # "Compare A with B: how does each ...": A and B frame the parts
                carried = [_bare(pair.group(x)) for x in ("a", "b")]
                continue
            parts = expand_comparison(clause)
            if parts is None:
                entities = compared_entities(clause)
                if entities:
                    carried = entities
                    continue
                parts = (
                    colon_list(clause)
                    or expand_list(clause)
                    or (lead and _ASKS.match(clause) is None and list_items(clause))
                    or [clause]
                )
            if carried and not any(e.split()[0].lower() in clause.lower() for e in carried):
                parts = [f"{e}: {p}" for e in carried for p in parts]
            for p in parts:
                text = unmask_asides(f"{' '.join(context)}: {p}" if context else p, asides)
                p = unmask_asides(p, asides)
                subs.append(
                    SubQuery(
                        text=text, intent=p, anchors=[a for a in anchors_all if a in p], unframed=p if context else ""
                    )
                )
        if carried and not subs:
            subs = [SubQuery(e, e) for e in (unmask_asides(e, asides) for e in carried)]
        seen: set[str] = set()
        out = []
        for s in subs:
            key = s.text.lower()
            if key not in seen:
                seen.add(key)
                out.append(s)
        return out[: self.max_subqueries] or [SubQuery(question, question)]

    def replan(self, question: str, uncovered: list[SubQuery], attempt: int) -> list[SubQuery]:
        """Reformulate what is not covered: first with the question's framing words added (the subject
        the clause leaves implicit), then with the clause's content words only."""
        first = split_clauses(question)[0]
        frame = " ".join(
            w
            for w in re.findall(r"[A-Za-z_][\w.]*", first)
            if (w[0].isupper() or "_" in w) and w.lower() not in STOPWORDS and w.lower() not in WH_WORDS
        )[:80]
        out = []
        for s in uncovered:
            if attempt == 1 and frame and frame.lower() not in s.text.lower():
                out.append(SubQuery(f"{frame} {s.text}", s.intent, s.anchors))
            else:
                words = [w for w in re.findall(r"[A-Za-z_][\w.]*", s.text) if len(w) > 3]
                out.append(SubQuery(" ".join(words[:8]) or s.text, s.intent, s.anchors))
        return out


@lru_cache(maxsize=1)
def plan_schema():
    """The JSON plan an LLM planner must answer with (a pydantic model). Built on first use: pydantic costs
    a one-shot `repoctx search` ~0.1 s of import, and only the LLM planner needs it."""
    from pydantic import BaseModel, ConfigDict, Field

    class PlanItem(BaseModel):
        model_config = ConfigDict(extra="forbid")
        query: str = Field(min_length=3, max_length=300)
        intent: str = Field(min_length=1, max_length=200)

    class Plan(BaseModel):
        model_config = ConfigDict(extra="forbid")
        sub_queries: list[PlanItem] = Field(min_length=1, max_length=10)

    return Plan


def ask_json(model, system_prompt: str, prompt: str, schema):
    """One answer from a Strands model, parsed into the pydantic ``schema`` (its JSON schema goes into the
    ``{schema}`` slot of ``system_prompt``; a fenced answer is unwrapped). Raises ValueError out of schema."""
    from strands import Agent

    agent = Agent(
        model=model,
        tools=[],
        callback_handler=None,
        system_prompt=system_prompt.format(schema=json.dumps(schema.model_json_schema())),
    )
    text = str(agent(prompt)).strip()
    if text.startswith("```"):
        text = re.sub(r"^```(?:json)?\s*|\s*```$", "", text)
    return schema.model_validate_json(text)


PLANNER_PROMPT = """You split a developer's question about a code base into independent search queries,
one per intent (each entity x aspect of a comparison, each item of a list, each clause).
Answer with JSON only, exactly matching this schema, no prose:
{schema}"""


class LLMPlanner:
    """Any Strands model (Bedrock, OpenAI-compatible, Ollama, or a scripted one in tests)."""

    def __init__(self, model, fallback: Planner | None = None):
        self.model = model
        self.fallback = fallback or OfflinePlanner()

    def _ask(self, prompt: str):
        return ask_json(self.model, PLANNER_PROMPT, prompt, plan_schema())

    def plan(self, question: str) -> list[SubQuery]:
        return self.plan_with_note(question)[0]

    def plan_with_note(self, question: str) -> tuple[list[SubQuery], str | None]:
        """The plan, and why the offline rules made it instead when the model could not (None if it did).
        Nothing is kept on the planner, so one planner serves concurrent questions."""
        try:
            plan = self._ask(f"Question: {question}")
        except ValueError as e:  # pydantic's ValidationError is a ValueError
            return self.fallback.plan(question), f"malformed plan: {str(e).splitlines()[0]}"
        except Exception as e:  # noqa: BLE001 - provider unreachable etc.: plan offline rather than fail the search
            return self.fallback.plan(question), f"planner model failed: {type(e).__name__}"
        anchors = mentions(question)
        return [
            SubQuery(i.query, i.intent, [a for a in anchors.identifiers + anchors.paths if a in i.query])
            for i in plan.sub_queries
        ], None

    def replan(self, question: str, uncovered: list[SubQuery], attempt: int) -> list[SubQuery]:
        return self.fallback.replan(question, uncovered, attempt)
