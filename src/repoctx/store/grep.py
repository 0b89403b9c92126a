"""Grep over the indexed snapshot: a regular expression (Python ``re``) or a fixed string, one line at a time,
over the text of every indexed file a scope lets the caller see.

As Zoekt and Google Code Search do, the store narrows the files first with a trigram index (SQLite FTS5's
``trigram`` tokenizer, PostgreSQL's ``pg_trgm``) and the regular expression confirms each candidate. The
trigrams come from the pattern's syntax tree (``re._parser``): literal runs every match must contain,
joined by AND, alternatives by OR. Where a pattern has no such run (``\\w+_id``, ``^\\s*$``) nothing can be
derived and every file in scope is a candidate; the scan is bounded (``GrepLimits``).

The derivation is conservative by construction: it may let through files without a match, never drop a file
with one. Under ``ignore_case`` Python's ``re`` matches ``i`` with ``ı``/``İ``, ``k`` with the Kelvin sign and
``s`` with ``ſ``, which neither index folds: those letters become alternatives (SQLite) or single-character
wildcards (PostgreSQL), and a non-ASCII letter, whose case partners the two backends fold differently, breaks
a run.

Lines are what ``git grep`` calls lines: the text split at ``\\n`` (the indexer stores text with ``\\r\\n``
and ``\\r`` turned into ``\\n``, a leading BOM dropped and secrets redacted: grep sees what the index holds and
never what it redacted). A pattern is matched against each line on its own: ``^``/``$`` are the line's
start and end, and a match never spans a newline.

This module is pure (no I/O): the stores render its prefilter into their own queries, ``scan`` runs the
regular expression over the texts they yield.
"""

from __future__ import annotations

import re
import time
from collections.abc import Callable, Hashable, Iterable, Iterator
from dataclasses import dataclass, field
from itertools import product

# the parser and its opcodes (stable across 3.11-3.13); typeshed does not declare re's private modules
from re import _constants as _C, _parser as _P  # type: ignore[attr-defined]
from typing import Any

__all__ = [
    "PatternError",
    "GrepLimits",
    "GrepPlan",
    "Lit",
    "And",
    "Or",
    "compile_pattern",
    "scan",
    "fts5_query",
    "postgres_filter",
    "MAX_PATTERN",
]

MAX_PATTERN = 2000  # characters
_MAX_SET = 16  # alternative strings tracked per node before falling back to "must contain one of its parts"
_MAX_CLASS = 8  # characters of a class kept as alternatives
_MAX_WINDOWS = 24  # trigrams per literal sent to FTS5 (a long literal: an evenly spread subset suffices)
_MAX_ALTS = 16  # spellings of one trigram (case partners, classes) sent to FTS5

# Python's re, under IGNORECASE, matches these ASCII letters with characters neither FTS5 nor PostgreSQL fold
# to them (checked over every code point: no other ASCII character has such partners)
_IC_PARTNERS = {"i": ("i", "\u0131", "\u0130"), "k": ("k", "\u212a"), "s": ("s", "\u017f")}


class PatternError(ValueError):
    """A pattern grep cannot run; the message names the problem (``unterminated character set at position 3``)."""

    def __init__(self, pattern: str, reason: str, position: int | None = None):
        self.pattern, self.reason, self.position = pattern, reason, position
        shown = pattern if len(pattern) <= 80 else pattern[:77] + "..."
        super().__init__(f"bad pattern {shown!r}: {reason}")


@dataclass(frozen=True)
class GrepLimits:
    """The bounds of one grep call. When one stops the scan or a count, the result says so in ``cut``
    and ``total_exact`` is false."""

    max_seconds: float = 5.0  # wall time of the scan (checked between files and every 2,000 matching lines)
    max_bytes: int = 256 << 20  # text searched (characters), after the trigram prefilter
    max_file_matches: int = 1000  # matching lines counted per file
    max_total: int = 10_000  # matching lines counted in all (past it: "10,000+", the scan stops)
    max_limit: int = 1000  # matches returned per page
    max_context: int = 20  # context lines each side
    max_line_chars: int = 1000  # a longer line is cut there and ends with "…"


# --------------------------------------------------------------------------- the prefilter

# An item of a literal: one character, a set of characters (one of them), or None (any one character)
Item = str | frozenset | None


@dataclass(frozen=True)
class Lit:
    """The text contains this sequence (items: a character, one of a set, or any one character)."""

    items: tuple

    def __str__(self) -> str:
        return "".join(i if isinstance(i, str) else "?" for i in self.items)


@dataclass(frozen=True)
class And:
    parts: tuple


@dataclass(frozen=True)
class Or:
    parts: tuple


Query = Lit | And | Or | None  # None: no constraint (every file is a candidate)


def _and(parts: Iterable[Query]) -> Query:
    flat: list = []
    for p in parts:
        if p is None:
            continue
        flat.extend(p.parts if isinstance(p, And) else (p,))
    flat = list(dict.fromkeys(flat))
    return None if not flat else flat[0] if len(flat) == 1 else And(tuple(flat))


def _or(parts: Iterable[Query]) -> Query:
    flat: list = []
    for p in parts:
        if p is None:
            return None  # one alternative without a constraint: the whole OR constrains nothing
        flat.extend(p.parts if isinstance(p, Or) else (p,))
    flat = list(dict.fromkeys(flat))
    return None if not flat else flat[0] if len(flat) == 1 else Or(tuple(flat))


def _usable(items: tuple) -> bool:
    """Whether a literal holds a trigram an index can look up (three known characters in a row)."""
    run = 0
    for i in items:
        run = run + 1 if i is not None else 0
        if run == 3:
            return True
    return False


def _order(items: tuple) -> tuple:
    """A sort key for literals (sets have no order; queries are built the same way every time)."""
    return tuple((0, i) if isinstance(i, str) else (1, "".join(sorted(i))) if i is not None else (2, "") for i in items)


def _exact_query(strings: frozenset | None) -> Query:
    if strings is None:
        return None
    return _or(Lit(s) if _usable(s) else None for s in sorted(strings, key=_order))


def _ic_item(ch: str) -> Item:
    """A literal character under IGNORECASE, as an item the indexes can test."""
    if not ch.isascii():
        return None
    low = ch.lower()
    return frozenset(_IC_PARTNERS[low]) if low in _IC_PARTNERS else low


def _class_item(av, ic: bool) -> Item:
    chars: list[str] = []
    for op, a in av:
        if op is _C.LITERAL:
            chars.append(chr(a))
        elif op is _C.RANGE and a[1] - a[0] < _MAX_CLASS:
            chars.extend(chr(c) for c in range(a[0], a[1] + 1))
        else:  # NEGATE, CATEGORY, a wide RANGE
            return None
        if len(chars) > _MAX_CLASS:
            return None
    if ic:
        out: set[str] = set()
        for c in chars:
            item = _ic_item(c)
            if item is None:
                return None
            out.update(item if isinstance(item, frozenset) else (item,))
        chars = sorted(out)
    if not chars:
        return None
    return chars[0] if len(set(chars)) == 1 else frozenset(chars)


@dataclass(frozen=True)
class _Info:
    """What a node of the pattern tells: the exact strings it matches (None: unknown), strings every match
    begins and ends with (``{()}``: nothing known) and the query every match satisfies."""

    exact: frozenset | None
    prefix: frozenset
    suffix: frozenset
    query: Query


_NOTHING: frozenset = frozenset({()})


def _exact(strings) -> _Info:
    strings = frozenset(strings)
    return _Info(strings, strings, strings, _exact_query(strings))


def _unknown(query: Query = None) -> _Info:
    return _Info(None, _NOTHING, _NOTHING, query)


def _join(a: frozenset, b: frozenset) -> frozenset | None:
    return frozenset(x + y for x in a for y in b) if len(a) * len(b) <= _MAX_SET else None


def _seq(data, ic: bool) -> _Info:
    cur = _NOTHING  # the strings that end here, contiguous since the last node nothing was known of
    prefix: frozenset | None = None
    parts: list[Query] = []
    for op, av in data:
        info = _node(op, av, ic)
        if info.exact is not None:
            joined = _join(cur, info.exact)
            if joined is not None:
                cur = joined
                continue
        # a node not known exactly: the run so far continues into its first characters and stops there; what
        # follows starts with its last characters
        joined = _join(cur, info.prefix) or cur
        if prefix is None:
            prefix = joined
        parts += [_exact_query(joined), info.query]
        cur = info.suffix
    if prefix is None:
        return _exact(cur)
    parts.append(_exact_query(cur))
    return _Info(None, prefix, cur, _and(parts))


def _node(op, av, ic: bool) -> _Info:
    if op is _C.LITERAL:
        return _exact({((_ic_item(chr(av)) if ic else chr(av)),)})
    if op in (_C.NOT_LITERAL, _C.ANY):
        return _exact({(None,)})
    if op is _C.IN:
        return _exact({(_class_item(av, ic),)})
    if op is _C.AT:
        return _exact(_NOTHING)
    if op is _C.SUBPATTERN:
        _group, add, delete, sub = av
        inner = (ic or bool(add & _C.SRE_FLAG_IGNORECASE)) and not (delete & _C.SRE_FLAG_IGNORECASE)
        return _seq(sub, inner)
    if op is getattr(_C, "ATOMIC_GROUP", None):
        return _seq(av, ic)
    if op is _C.BRANCH:
        infos = [_seq(b, ic) for b in av[1]]
        exacts = [i.exact for i in infos if i.exact is not None]
        if len(exacts) == len(infos) and sum(len(e) for e in exacts) <= _MAX_SET:
            return _exact(frozenset().union(*exacts))

        def union(sets: list[frozenset]) -> frozenset:
            return frozenset().union(*sets) if sum(len(x) for x in sets) <= _MAX_SET else _NOTHING

        return _Info(
            None, union([i.prefix for i in infos]), union([i.suffix for i in infos]), _or(i.query for i in infos)
        )
    if op in (_C.MAX_REPEAT, _C.MIN_REPEAT, getattr(_C, "POSSESSIVE_REPEAT", None)):
        lo, hi, sub = av
        info = _seq(sub, ic)
        if lo == 0:
            return _exact(_NOTHING) if hi == 0 else _unknown()
        if lo == hi and info.exact is not None and lo <= 8 and len(info.exact) ** lo <= _MAX_SET:
            strings = _NOTHING
            for _ in range(lo):
                joined = _join(strings, info.exact)
                assert joined is not None  # every partial product is within the bound checked above
                strings = joined
            return _exact(strings)
        # at least one repetition: it begins as the first and ends as the last
        return _Info(None, info.prefix, info.suffix, info.query)
    if op in (_C.ASSERT, _C.ASSERT_NOT):
        return _exact(_NOTHING)  # zero-width; what a lookaround requires is not required of the line
    return _unknown()  # back-references, conditionals: nothing known


def _line_unsafe(data) -> bool:
    """Whether whole-text search could disagree with a line-confined one: lookarounds see past a line's end,
    ``\\A`` and ``\\Z`` mean the text's ends, a scoped ``(?-m:...)`` turns ``^``/``$`` into them, and ``\\B``
    matches at an empty line's newline where the empty line alone has none."""
    for op, av in data:
        if op in (_C.ASSERT, _C.ASSERT_NOT):
            return True
        if op is _C.AT and av in (_C.AT_BEGINNING_STRING, _C.AT_END_STRING, _C.AT_NON_BOUNDARY):
            return True  # \B: Python's re finds none in an empty line, but one at an empty line's newline
        if op is _C.SUBPATTERN:
            if av[2] & _C.SRE_FLAG_MULTILINE or _line_unsafe(av[3]):
                return True
        elif op is getattr(_C, "ATOMIC_GROUP", None):
            if _line_unsafe(av):
                return True
        elif op is _C.BRANCH:
            if any(_line_unsafe(b) for b in av[1]):
                return True
        elif op in (_C.MAX_REPEAT, _C.MIN_REPEAT, getattr(_C, "POSSESSIVE_REPEAT", None)):
            if _line_unsafe(av[2]):
                return True
        elif op is _C.GROUPREF_EXISTS:
            if _line_unsafe(av[1]) or (av[2] is not None and _line_unsafe(av[2])):
                return True
    return False


# --------------------------------------------------------------------------- the RE2 sieve
# A file the trigrams let through (or every file, when none can be derived) is first searched whole by RE2,
# a linear-time engine about six times faster than ``re`` on such scans, with a pattern that matches a SUPERSET
# of what the Python pattern matches: where RE2 finds nothing, no line can match, and the file is skipped;
# where it finds something, ``re`` decides line by line as before. Superset by construction, never by testing
# Unicode tables against each other: an assertion (\b, lookarounds, \A) is dropped (true everywhere), a
# category is its ASCII members or any non-ASCII character, a negated category any character, and anything
# the translation does not know (back-references, scoped flags, ignore-case) gives no sieve at all.

_NON_ASCII = "[^\\x00-\\x7f]"
_RE2_CATEGORY = {
    _C.CATEGORY_DIGIT: "[0-9]",
    _C.CATEGORY_WORD: "[0-9A-Za-z_]",
    _C.CATEGORY_SPACE: "[\\t\\n\\x0b\\x0c\\r \\x1c-\\x1f]",
}
_RE2_ANY_CHAR = "[\\x{0}-\\x{10FFFF}]"
_RE2_MAX_REPEAT = 1000


class _NoSieve(Exception):
    pass


def _re2_char(cp: int) -> str:
    ch = chr(cp)
    return ch if ch.isascii() and ch.isalnum() else f"\\x{{{cp:x}}}"


def _re2_item(op, av) -> str:
    """One class item as RE2 alternatives (a superset of what it matches)."""
    if op is _C.LITERAL:
        return _re2_char(av)
    if op is _C.RANGE:
        return f"[{_re2_char(av[0])}-{_re2_char(av[1])}]"
    if op is _C.CATEGORY:
        if av in _RE2_CATEGORY:
            return f"{_RE2_CATEGORY[av]}|{_NON_ASCII}"
        return _RE2_ANY_CHAR  # a negated category: any character is the superset
    raise _NoSieve


def _re2(data, dotall: bool) -> str:
    out = []
    for op, av in data:
        if op is _C.LITERAL:
            out.append(_re2_char(av))
        elif op is _C.NOT_LITERAL:
            out.append(f"[^{_re2_char(av)}]")
        elif op is _C.ANY:
            out.append(_RE2_ANY_CHAR if dotall else "[^\\n]")
        elif op is _C.IN:
            if av and av[0][0] is _C.NEGATE:
                out.append(_RE2_ANY_CHAR)  # [^...]: superset
            else:
                out.append("(?:" + "|".join(_re2_item(o, a) for o, a in av) + ")")
        elif op in (_C.MAX_REPEAT, _C.MIN_REPEAT, getattr(_C, "POSSESSIVE_REPEAT", None)):
            lo, hi, sub = av
            if lo > _RE2_MAX_REPEAT:
                raise _NoSieve
            hi_s = "" if hi is _C.MAXREPEAT or hi > _RE2_MAX_REPEAT else str(hi)
            out.append(f"(?:{_re2(sub, dotall)}){{{lo},{hi_s}}}")
        elif op is _C.SUBPATTERN:
            _group, add, dele, sub = av
            if add or dele:
                raise _NoSieve
            out.append(f"(?:{_re2(sub, dotall)})")
        elif op is getattr(_C, "ATOMIC_GROUP", None):
            out.append(f"(?:{_re2(av, dotall)})")
        elif op is _C.BRANCH:
            out.append("(?:" + "|".join(_re2(b, dotall) for b in av[1]) + ")")
        elif op is _C.AT:
            if av in (_C.AT_BEGINNING, _C.AT_BEGINNING_LINE):
                out.append("(?m:^)")
            elif av in (_C.AT_END, _C.AT_END_LINE):
                out.append("(?m:$)")
            # \b, \B, \A, \Z: dropped (true everywhere is the superset)
        elif op in (_C.ASSERT, _C.ASSERT_NOT):
            pass  # a lookaround: dropped
        else:  # back-references, conditionals
            raise _NoSieve
    return "".join(out)


def re2_sieve(tree, ignore_case: bool):
    """The compiled RE2 superset of a parsed pattern, or None (no RE2, ignore-case, or a construct it lacks)."""
    if ignore_case:
        return None
    try:
        import re2
    except ImportError:  # pragma: no cover - the sieve is an optimisation
        return None
    try:
        source = _re2(tree.data, bool(tree.state.flags & re.DOTALL))
        options = re2.Options()
        options.max_mem = 64 << 20
        return re2.compile(source, options)
    except (_NoSieve, RecursionError):
        return None
    except Exception:  # noqa: BLE001 - a pattern RE2 refuses (too big): no sieve, re alone decides
        return None


# --------------------------------------------------------------------------- rendering for the backends


def _windows(lit: Lit) -> list[tuple]:
    items = lit.items
    return [items[i : i + 3] for i in range(len(items) - 2)]


def _spread(values: list, n: int) -> list:
    if len(values) <= n:
        return values
    step = (len(values) - 1) / (n - 1)
    return [values[round(i * step)] for i in range(n)]


def fts5_query(q: Query) -> str | None:
    """An FTS5 MATCH expression over a ``trigram`` table (``detail=none``: one quoted trigram per term), or
    None when the query constrains nothing."""
    if q is None:
        return None
    if isinstance(q, Lit):
        terms = []
        for w in _windows(q):
            if any(i is None for i in w):
                continue
            spellings = list(product(*[sorted(i) if isinstance(i, frozenset) else (i,) for i in w]))
            if len(spellings) > _MAX_ALTS or any("\x00" in "".join(s) for s in spellings):
                continue
            alts = sorted({'"' + "".join(s).replace('"', '""') + '"' for s in spellings})
            terms.append(alts[0] if len(alts) == 1 else "(" + " OR ".join(alts) + ")")
        terms = _spread(list(dict.fromkeys(terms)), _MAX_WINDOWS)
        if not terms:
            return None
        return terms[0] if len(terms) == 1 else "(" + " AND ".join(terms) + ")"
    rendered = [fts5_query(p) for p in q.parts]
    parts = [p for p in rendered if p is not None]
    if isinstance(q, Or):
        if len(parts) < len(rendered):
            return None
        return "(" + " OR ".join(parts) + ")"
    return None if not parts else parts[0] if len(parts) == 1 else "(" + " AND ".join(parts) + ")"


def _like_escape(ch: str) -> str:
    return "\\" + ch if ch in "\\%_" else ch


def _pg_indexable(items: tuple) -> bool:
    """Whether pg_trgm can take a trigram from a LIKE of these items: it reads words (letters and digits), a word
    of three characters or more, or one of two with a known non-word character on each side (padded, as pg_trgm
    pads words). A LIKE it can take none from would scan the whole index."""

    def word(i) -> bool:
        return isinstance(i, str) and i.isascii() and i.isalnum()

    def edge(i) -> bool:
        return isinstance(i, str) and not word(i)

    n = len(items)
    j = 0
    while j < n:
        if not word(items[j]):
            j += 1
            continue
        k = j
        while k < n and word(items[k]):
            k += 1
        if k - j >= 3 or (k - j == 2 and j > 0 and edge(items[j - 1]) and k < n and edge(items[k])):
            return True
        j = k
    return False


def postgres_filter(q: Query, col: str, ignore_case: bool) -> tuple[str, list] | None:
    """A WHERE fragment of ``LIKE``/``ILIKE`` tests a ``pg_trgm`` GIN index serves, or None (a literal
    pg_trgm could take no trigram from is left out)."""
    if q is None:
        return None
    if isinstance(q, Lit):
        if not _pg_indexable(q.items):
            return None
        pattern = "%" + "".join(_like_escape(i) if isinstance(i, str) else "_" for i in q.items) + "%"
        return f"{col} {'ILIKE' if ignore_case else 'LIKE'} %s", [pattern]
    rendered = [postgres_filter(p, col, ignore_case) for p in q.parts]
    parts = [p for p in rendered if p is not None]
    if isinstance(q, Or):
        if len(parts) < len(rendered):
            return None
        return "(" + " OR ".join(p[0] for p in parts) + ")", [a for p in parts for a in p[1]]
    if not parts:
        return None
    return "(" + " AND ".join(p[0] for p in parts) + ")", [a for p in parts for a in p[1]]


# --------------------------------------------------------------------------- compiling a pattern


@dataclass(frozen=True)
class GrepPlan:
    pattern: str
    fixed: bool
    ignore_case: bool
    regex: re.Pattern
    prefilter: Query  # None: every file in scope is a candidate
    line_safe: bool  # whole-text search finds every line a line-confined search would
    sieve: Any = None  # an RE2 pattern matching a superset: a file it finds nothing in is skipped (or None)

    def describe(self) -> str:
        if self.prefilter is None:
            return (
                "none: the pattern has no literal of 3 characters every match contains; every file in scope was scanned"
            )
        return "trigrams of " + _show(self.prefilter)


def _show(q: Lit | And | Or) -> str:
    if isinstance(q, Lit):
        return repr(str(q))
    sep = " AND " if isinstance(q, And) else " OR "
    return "(" + sep.join(_show(p) for p in q.parts) + ")"


def compile_pattern(pattern: str, *, fixed: bool = False, ignore_case: bool = False) -> GrepPlan:
    """The plan for one pattern: the compiled regular expression and its trigram prefilter. Raises
    :class:`PatternError` for a regex ``re`` refuses, naming the problem and its position."""
    if not isinstance(pattern, str):
        raise PatternError(repr(pattern), "the pattern must be a string")
    if len(pattern) > MAX_PATTERN:
        raise PatternError(pattern, f"longer than {MAX_PATTERN} characters")
    if fixed and "\n" in pattern:
        raise PatternError(pattern, "a newline: grep matches one line at a time (search for each line apart)")
    source = re.escape(pattern) if fixed else pattern
    flags = re.MULTILINE | (re.IGNORECASE if ignore_case else 0)
    try:
        regex = re.compile(source, flags)
        tree = _P.parse(source, flags)
    except re.error as e:
        raise PatternError(pattern, str(e), e.pos) from None
    except (RecursionError, OverflowError) as e:  # a pattern nested or repeated past what re can compile
        raise PatternError(pattern, f"too complex to compile ({type(e).__name__})") from None
    ic = bool(tree.state.flags & re.IGNORECASE)
    try:
        prefilter = _seq(tree.data, ic).query
    except RecursionError:
        prefilter = None
    ic = ic or bool(flags & re.IGNORECASE)
    return GrepPlan(pattern, fixed, ignore_case, regex, prefilter, not _line_unsafe(tree.data), re2_sieve(tree, ic))


# --------------------------------------------------------------------------- matching


def match_lines(plan: GrepPlan, text: str, cap: int) -> tuple[list[int], bool]:
    """The 1-based numbers of the lines of ``text`` the pattern matches (at most ``cap``), and whether more
    were left uncounted."""
    rx = plan.regex
    out: list[int] = []
    if plan.sieve is not None and plan.sieve.search(text) is None:
        return out, False  # the superset finds nothing: no line of this text can match
    n = len(text)
    if not plan.line_safe:
        lines = text.split("\n")
        if text.endswith("\n") or not text:
            lines.pop()
        for i, line in enumerate(lines, 1):
            if rx.search(line) is not None:
                if len(out) == cap:
                    return out, True
                out.append(i)
        return out, False
    # one search over the whole text finds the next line that may match; a match that crosses a newline is
    # checked again on its first line alone. Every line-confined match is also a match of the whole text (no
    # lookaround, no \A or \Z: each step sees what it would see in the line), so none is skipped.
    pos, lineno, counted = 0, 1, 0
    search = rx.search
    while pos <= n:
        m = search(text, pos)
        if m is None:
            break
        s = m.start()
        if s == n and (n == 0 or text[n - 1] == "\n"):
            break  # the empty "line" after a final newline is no line
        le = text.find("\n", s)
        le = n if le < 0 else le
        lineno += text.count("\n", counted, s)
        counted = s
        if m.end() <= le or search(text[text.rfind("\n", 0, s) + 1 : le]) is not None:
            if len(out) == cap:
                return out, True
            out.append(lineno)
        pos = le + 1
    return out, False


def _line_at(text: str, starts: list[int], i: int, max_chars: int) -> str:
    end = text.find("\n", starts[i])
    line = text[starts[i] :] if end < 0 else text[starts[i] : end]
    return line if len(line) <= max_chars else line[:max_chars] + "…"


def _line_starts(text: str) -> list[int]:
    starts = [0]
    find = text.find
    i = find("\n")
    while i >= 0:
        starts.append(i + 1)
        i = find("\n", i + 1)
    if len(starts) > 1 and starts[-1] == len(text):
        starts.pop()
    return starts


@dataclass
class ScanResult:
    matches: list[dict] = field(default_factory=list)
    total: int = 0
    files_scanned: int = 0
    files_matched: int = 0
    cut: list[str] = field(default_factory=list)


def scan(
    plan: GrepPlan,
    texts: Iterator[tuple[str, str, Hashable, str]],
    *,
    limit: int,
    offset: int,
    context: int,
    limits: GrepLimits,
    clock: Callable[[], float] = time.monotonic,
) -> ScanResult:
    """Run the plan over ``(repo, path, text key, text)`` in the order given, keeping matches ``offset`` to
    ``offset + limit`` of that order and counting the rest (within ``limits``). Texts that share a key are
    searched once."""
    res = ScanResult()
    seen: dict[Hashable, tuple[list[int], bool]] = {}
    start = clock()
    scanned_chars = 0
    capped_files = 0
    stop_after = offset + limit
    try:
        for repo, path, key, text in texts:
            if clock() - start > limits.max_seconds:
                res.cut.append(
                    f"time: stopped after {limits.max_seconds:g} s, {res.files_scanned} files in; "
                    "later files were not searched"
                )
                break
            if scanned_chars > limits.max_bytes:
                res.cut.append(
                    f"work: stopped after {limits.max_bytes >> 20} MiB of text, {res.files_scanned} files "
                    "in; later files were not searched (narrow the paths or add a literal to the pattern)"
                )
                break
            got = seen.get(key)
            if got is None:
                got = seen[key] = match_lines(plan, text, limits.max_file_matches)
                scanned_chars += len(text)
            lines, capped = got
            res.files_scanned += 1
            if capped:
                capped_files += 1
            if not lines:
                continue
            res.files_matched += 1
            if res.total < stop_after and res.total + len(lines) > offset:
                starts = _line_starts(text)
                for j, ln in enumerate(lines):
                    k = res.total + j
                    if k < offset:
                        continue
                    if k >= stop_after:
                        break
                    hit = {
                        "repo": repo,
                        "path": path,
                        "line": ln,
                        "text": _line_at(text, starts, ln - 1, limits.max_line_chars),
                    }
                    if context:
                        hit["before"] = [
                            _line_at(text, starts, i, limits.max_line_chars)
                            for i in range(max(0, ln - 1 - context), ln - 1)
                        ]
                        hit["after"] = [
                            _line_at(text, starts, i, limits.max_line_chars)
                            for i in range(ln, min(len(starts), ln + context))
                        ]
                    res.matches.append(hit)
            res.total += len(lines)
            if res.total >= limits.max_total:
                res.cut.append(
                    f"count: stopped at {res.total:,} matching lines (the bound is {limits.max_total:,}), "
                    f"{res.files_scanned} files in; later files were not searched"
                )
                break
    finally:
        close = getattr(texts, "close", None)
        if close is not None:
            close()
    if capped_files:
        res.cut.insert(
            0,
            f"per file: {capped_files} file{'s' if capped_files != 1 else ''} had more than "
            f"{limits.max_file_matches:,} matching lines; only the first {limits.max_file_matches:,} "
            "of each were counted",
        )
    return res
