"""Route a question down the standard path (one intent) or the agentic path (several)."""

from __future__ import annotations

import re
from dataclasses import dataclass, field

from repoctx.retrieve.planner import _HAS_WH, OfflinePlanner, colon_list, expand_comparison, expand_list, split_clauses

_COMPARATIVE = re.compile(
    r"\b(compare|comparing|contrast|versus|vs\.?|differ|differences?\s+between|compared\s+(?:with|to)"
    r"|as opposed to|each\s+(?:one\s+)?(?:handle|do|decide))\b",
    re.I,
)
MAX_QUESTION_WORDS = 80  # a multi-part question is a paragraph at most; longer text reads as a report
_ASKS = re.compile(
    r"\?|^\s*(?:how|where|what|which|when|why|compare|contrast|explain|walk me|show|list|find|trace)\b"
    r"|[.!]\s+(?:compare|contrast|walk me through)\b",
    re.I,
)  # "X does A. Compare how ..."
# "^[ \t]*", not "^\s*": under re.M the latter runs from every line start over all the blank lines that follow
_REPORT = re.compile(
    r"Traceback \(most recent call last\)|```|^[ \t]*(?:>>>|\$ |File \")|Steps to reproduce|"
    r"Expected (?:behaviou?r|result)|Actual (?:behaviou?r|result)",
    re.I | re.M,
)


@dataclass(frozen=True)
class Route:
    mode: str  # standard | agentic
    reason: str
    shape: str  # single | comparative | multi-part | list | report
    # the offline plan the router made to decide, handed to the agentic loop so it is not made twice
    plan: tuple = field(default=(), compare=False, repr=False)

    def to_dict(self) -> dict:
        return {"mode": self.mode, "reason": self.reason, "shape": self.shape}


def reads_as_report(question: str) -> bool:
    """An issue report of one problem (code, a traceback, steps and expectations, or more than a paragraph),
    not a question."""
    return bool(_REPORT.search(question)) or len(question.split()) > MAX_QUESTION_WORDS


def route(question: str) -> Route:
    if reads_as_report(question):
        return Route("standard", "reads like a report of one problem (code, traceback or long text)", "report")
    if not _ASKS.search(question):
        return Route("standard", "a statement or keywords, not a question with parts", "single")
    clauses = split_clauses(question)
    if _COMPARATIVE.search(question) or any(expand_comparison(c) for c in clauses):
        return Route("agentic", "comparative question: each side and aspect is its own intent", "comparative")
    asking = [c for c in clauses if _HAS_WH.search(c)]
    if len(asking) >= 2:
        return Route("agentic", f"{len(asking)} questions in one", "multi-part")
    if any(expand_list(c) or colon_list(c) for c in clauses):
        return Route("agentic", "asks about a list of things", "list")
    plan = tuple(OfflinePlanner().plan(question))
    if len(plan) >= 2:
        return Route("agentic", "several parts that share one subject", "multi-part", plan)
    return Route("standard", "one intent", "single")
