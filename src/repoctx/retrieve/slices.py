"""Cut a unit of code to the lines a question needs, keeping its real line numbers.

A unit's text is its file's lines ``start_line..end_line``, so line ``i`` of the text is line ``start_line + i``
of the file. A slice is a set of those lines: the signature (decorators and the ``def``/``class`` line or lines),
the first docstring line, the lines that mention the question's terms with the headers of the blocks that enclose
them (found by indentation: an ``if``, ``for``, ``try``, ``else``, a nested ``def``, a statement a continuation line
belongs to), and the returns and raises. What is left out between shown lines is one marker line,
``… lines a-b``, with the real numbers; every contiguous run of shown lines is cited ``path:a-b :: qualname``
and every gap is listed as left out the same way, so a citation names exactly the lines shown under it.

Pure: no store, no I/O. The context builder (``context.py``) decides how many tokens each unit may take.
"""

from __future__ import annotations

import re
import textwrap
from collections import Counter
from dataclasses import dataclass, field
from functools import lru_cache
from itertools import pairwise

from repoctx.providers.embedding import count_tokens
from repoctx.tokens import code_tokens
from repoctx.types import Capsule, printable

MAX_HEADER_LINES = 60  # where a signature's end is looked for (past this: its first line is the signature)
MAX_STATEMENT_LINES = 4  # a matching line that opens brackets brings up to this many lines that close them
MAX_HEAD_LINES = 8  # a longer signature shows its first lines and its last, its other lines being left to the slice
FOCUS_WEIGHT = 1000.0  # a line naming a focus name (a call site of the target) comes before any other match
MAX_REPEATS = 2  # lines matching the same terms as this many earlier ones come last
WHOLE_OVER_CORE = 1.3  # a unit whose whole costs at most this times what the question needs of it is shown whole
_EXIT = re.compile(r"^(?:return\b|raise\b|yield\b|throw\b|panic\(|os\.Exit\(|sys\.exit\()")
_CONTINUES = re.compile(r"^(?:except\b|else\b|elif\b|finally\b|catch\b|\}\s*(?:else|catch|finally)\b)")
_DOC_OPEN = re.compile(r"^(?:[rRuUbBfF]{0,2})(\"\"\"|'''|\"|')")
_OPENERS, _CLOSERS = "([{", ")]}"


@lru_cache(maxsize=1 << 16)
def line_cost(line: str) -> int:
    """Tokens of one shown line (the pieces are whitespace-joined, so the counts add up)."""
    return count_tokens(line)


def _indent(line: str) -> int:
    expanded = line.expandtabs(8)
    return len(expanded) - len(expanded.lstrip())


def _strip_comment(line: str, language: str) -> str:
    mark = "#" if language in ("python", "ruby", "bash", "shell", "r", "perl", "elixir", "yaml", "toml") else "//"
    i = line.find(mark)
    return line[:i] if i >= 0 else line


def _depth_change(line: str) -> int:
    """Brackets opened minus closed, strings crudely skipped (enough to see where a signature ends)."""
    depth, quote, prev = 0, "", ""
    for ch in line:
        if quote:
            if ch == quote and prev != "\\":
                quote = ""
        elif ch in "\"'`":
            quote = ch
        elif ch in _OPENERS:
            depth += 1
        elif ch in _CLOSERS:
            depth -= 1
        prev = ch
    return depth


def header_end(lines: list[str], language: str) -> int:
    """Index of the last line of the unit's signature: decorators and a ``def``/``class`` header written over
    several lines included (Python: the first line at bracket depth 0 that ends with ``:``; other languages: the
    first line that opens the body with ``{``, or ends a declaration). The first line when none is found."""
    depth = 0
    for i, raw in enumerate(lines[:MAX_HEADER_LINES]):
        line = _strip_comment(raw, language).rstrip()
        depth += _depth_change(line)
        if depth > 0:
            continue
        if language == "python":
            if line.endswith(":") and not line.lstrip().startswith("@"):
                return i
        elif "{" in line or line.endswith(";") or line.endswith("=>") or line.endswith("="):
            return i
    return 0


def docstring_span(lines: list[str], after: int, language: str) -> tuple[int, int] | None:
    """(first, last) line index of a Python docstring right after the header, or None."""
    if language != "python":
        return None
    j = after + 1
    while j < len(lines) and not lines[j].strip():
        j += 1
    if j >= len(lines):
        return None
    s = lines[j].strip()
    m = _DOC_OPEN.match(s)
    if not m:
        return None
    q = m.group(1)
    rest = s[m.end() :]
    if q in ('"', "'") or q in rest:
        return j, j
    for k in range(j + 1, len(lines)):
        if q in lines[k]:
            return j, k
    return j, len(lines) - 1


@dataclass
class Sliceable:
    """A unit ready to be cut: its lines (dedented as shown), what is always shown, and the groups of lines a
    growing slice adds, best first."""

    capsule: Capsule
    shown_lines: list[str]  # dedented; the same count as the unit's lines
    head: frozenset[int]  # signature and first docstring line
    groups: list[frozenset[int]] = field(default_factory=list)
    outline: list[frozenset[int]] = field(default_factory=list)  # a class: the headers of its methods
    n_core: int = 0  # groups[:n_core]: what the question needs (its strong matches, returns and raises)
    _core_costs: dict[int, int] = field(default_factory=dict)

    def core(self, most: int | None = None) -> list[frozenset[int]]:
        """The groups the question needs, best first (at most ``most``)."""
        return self.groups[: self.n_core if most is None else min(most, self.n_core)]

    def core_cost(self, most: int | None = None) -> int:
        """Tokens of the head with the core groups: the unit as far as the question needs it."""
        key = -1 if most is None else most
        if key not in self._core_costs:
            self._core_costs[key] = cost(self, self.head.union(*self.core(most)))
        return self._core_costs[key]

    @property
    def n(self) -> int:
        return len(self.shown_lines)

    def everything(self) -> frozenset[int]:
        return frozenset(range(self.n))


def line_aligned(c: Capsule) -> bool:
    """Whether the unit's text is its file's lines start..end (a module unit's text is the lines outside its
    definitions: it cannot be cut and cited by line)."""
    return c.kind != "module" and c.text.count("\n") + 1 == c.end_line - c.start_line + 1


def prepare(c: Capsule, weights: dict[str, float], focus: tuple[str, ...] = ()) -> Sliceable | None:
    """The slice plan of ``c`` for a question whose terms weigh ``weights`` (term → weight, e.g. IDF). ``focus``:
    names whose every mention is wanted first (a caller's or a test's lines that call the target). None for a
    unit that cannot be cut by line (see ``line_aligned``)."""
    if not line_aligned(c):
        return None
    raw = c.text.split("\n")
    shown = textwrap.dedent(c.text).split("\n")
    lang = c.language
    h = header_end(raw, lang)
    head = set(range(h + 1)) if h < MAX_HEAD_LINES else set(range(MAX_HEAD_LINES - 1)) | {h}
    doc = docstring_span(raw, h, lang)
    excluded = set(range(doc[0], doc[1] + 1)) if doc else set()
    if doc:
        head.add(doc[0])
        if raw[doc[0]].strip() in ('"""', "'''", 'r"""') and doc[0] + 1 <= doc[1]:
            head.add(doc[0] + 1)  # the text of a docstring that opens on a line of its own
    # the body, and the lines of a long signature the head leaves out (a parameter the question names)
    body = [i for i in range(len(raw)) if i not in head and i not in excluded and raw[i].strip()]
    indents = {i: _indent(raw[i]) for i in body}

    def enclosing(i: int) -> set[int]:
        """``i``, the block headers above it (each less indented than the last), and for a line that opens a
        block, the block's first line."""
        out = {i}
        cur = indents[i]
        for j in range(i - 1, h, -1):
            if j in indents and indents[j] < cur:
                out.add(j)
                cur = indents[j]
        for j in sorted(out):  # an ``except``/``else`` shows the ``try``/``if`` it continues
            if _CONTINUES.match(raw[j].lstrip()):
                k = j - 1
                while k > h and (k not in indents or indents[k] > indents[j] or _CONTINUES.match(raw[k].lstrip())):
                    k -= 1
                if k > h and k in indents and indents[k] == indents[j]:
                    out.add(k)
        depth = _depth_change(_strip_comment(raw[i], lang))
        k = i
        while depth > 0 and k + 1 < len(raw) and k - i < MAX_STATEMENT_LINES:  # the rest of a statement it opens
            k += 1
            out.add(k)
            depth += _depth_change(_strip_comment(raw[k], lang))
        stripped = _strip_comment(raw[i], lang).rstrip()
        if stripped.endswith(":") or stripped.endswith("{"):
            nxt = next((k for k in body if k > i), None)
            if nxt is not None and indents[nxt] > indents[i]:
                out.add(nxt)
        return out

    focus_re = re.compile(r"\b(?:" + "|".join(re.escape(f) for f in focus) + r")\b") if focus else None
    scored: list[tuple[float, int, frozenset[str]]] = []
    for i in body:
        toks = set(code_tokens(raw[i], keep_stopwords=False))
        matched = frozenset(t for t in weights if t in toks)
        s = sum(weights[t] for t in matched)
        if focus_re is not None and focus_re.search(raw[i]):
            s += FOCUS_WEIGHT
        if s > 0:
            scored.append((s, i, matched))
    scored.sort(key=lambda x: (-x[0], x[1]))
    best = scored[0][0] if scored else 0.0
    strong: list[int] = []
    weak: list[int] = []
    repeats: Counter[frozenset[str]] = Counter()
    for s, i, matched in scored:
        # a line that says what two shown lines already say (the same terms) waits for the last groups
        if s >= 0.5 * best and (s >= FOCUS_WEIGHT or repeats[matched] < MAX_REPEATS):
            strong.append(i)
        else:
            weak.append(i)
        repeats[matched] += 1
    exits = [i for i in body if _EXIT.match(raw[i].lstrip())]
    outline: list[frozenset[int]] = []
    if c.kind == "class":  # the headers of its own methods (a multi-line signature whole), decorators left out
        defs = [
            i
            for i in body
            if raw[i].lstrip().startswith(("def ", "async def ", "fn ", "func "))
            or (lang != "python" and indents[i] == min(indents.values()) and "(" in raw[i])
        ]
        level = min((indents[i] for i in defs), default=0)  # not the functions nested in them
        outline = [frozenset(range(i, i + 1 + header_end(raw[i:], lang))) for i in defs if indents[i] == level]
    groups: list[frozenset[int]] = []
    seen: set[int] = set(head)
    for i in strong + exits:
        g = frozenset(enclosing(i) - seen) if i not in seen else frozenset()
        if g:
            groups.append(g)
            seen |= g
    groups += [g - seen for g in outline if g - seen]  # a class's interface is part of what a question needs of it
    seen.update(*outline)
    n_core = len(groups)
    for i in weak:
        g = frozenset(enclosing(i) - seen) if i not in seen else frozenset()
        if g:
            groups.append(g)
            seen |= g
    return Sliceable(c, shown, frozenset(head), groups, outline, n_core)


# ---------------------------------------------------------------- rendering


def _fence(text: str) -> str:
    fence = "```"
    while fence in text:
        fence += "`"
    return fence


def _runs(idx: list[int]) -> list[tuple[int, int]]:
    out: list[tuple[int, int]] = []
    for i in idx:
        if out and i == out[-1][1] + 1:
            out[-1] = (out[-1][0], i)
        else:
            out.append((i, i))
    return out


def cite(c: Capsule, a: int, b: int) -> str:
    """The citation of file lines a..b of ``c``."""
    return f"{printable(c.path)}:{a}-{b} :: {printable(c.qualname)}"


def complete(s: Sliceable, lines: frozenset[int]) -> frozenset[int]:
    """``lines`` with the gaps filled that cost no more than their marker: blank lines, a short line."""
    out = set(lines)
    idx = sorted(lines)
    for a, b in pairwise(idx):
        if b == a + 1:
            continue
        gap = range(a + 1, b)
        if sum(line_cost(s.shown_lines[k]) for k in gap) <= line_cost(_marker(s, a + 1, b - 1)):
            out.update(gap)
    return frozenset(out)


@dataclass(frozen=True)
class Piece:
    text: str
    citations: tuple[str, ...]
    left_out: tuple[str, ...]
    tokens: int
    whole: bool


def _marker(s: Sliceable, a: int, b: int) -> str:
    """The line standing for lines a..b (indexes) left out: indented like the first of them."""
    first = next((s.shown_lines[k] for k in range(a, b + 1) if s.shown_lines[k].strip()), "")
    pad = first[: len(first) - len(first.lstrip())]
    start = s.capsule.start_line
    return f"{pad}… line {start + a}" if a == b else f"{pad}… lines {start + a}-{start + b}"


def render(s: Sliceable, lines: frozenset[int]) -> Piece:
    """The piece showing ``lines`` of the unit: whole (headed by its citation) or sliced (headed by its name and
    span, a marker for each gap)."""
    c = s.capsule
    lines = complete(s, lines)
    fence = _fence("\n".join(s.shown_lines))
    if len(lines) == s.n:
        body = "\n".join(s.shown_lines).rstrip("\n")
        text = f"### {c.citation}\n{fence}{c.language}\n{body}\n{fence}\n\n"
        return Piece(text, (c.citation,), (), count_tokens(text), True)
    idx = sorted(lines)
    out: list[str] = []
    gaps: list[tuple[int, int]] = []
    prev = -1
    for i in idx:
        if i > prev + 1:
            gaps.append((prev + 1, i - 1))
            out.append(_marker(s, prev + 1, i - 1))
        out.append(s.shown_lines[i])
        prev = i
    if prev < s.n - 1:
        gaps.append((prev + 1, s.n - 1))
        out.append(_marker(s, prev + 1, s.n - 1))
    body = "\n".join(out)
    head = f"### {printable(c.path)} :: {printable(c.qualname)} (lines {c.start_line}-{c.end_line}, sliced)\n"
    text = f"{head}{fence}{c.language}\n{body}\n{fence}\n\n"
    start = c.start_line
    cites = tuple(cite(c, start + a, start + b) for a, b in _runs(idx))
    left = tuple(cite(c, start + a, start + b) for a, b in gaps)
    return Piece(text, cites, left, count_tokens(text), False)


def cost(s: Sliceable, lines: frozenset[int]) -> int:
    """Tokens of ``render(s, lines)``, from cached per-line counts (exact: the counts add up over lines)."""
    lines = complete(s, lines)
    c = s.capsule
    fence = _fence("\n".join(s.shown_lines))
    if len(lines) == s.n:
        return (
            line_cost(f"### {c.citation}")
            + line_cost(f"{fence}{c.language}")
            + line_cost(fence)
            + sum(line_cost(x) for x in s.shown_lines)
        )
    idx = sorted(lines)
    total = line_cost(f"### {printable(c.path)} :: {printable(c.qualname)} (lines {c.start_line}-{c.end_line}, sliced)")
    total += line_cost(f"{fence}{c.language}") + line_cost(fence)
    prev = -1
    for i in idx:
        if i > prev + 1:
            total += line_cost(_marker(s, prev + 1, i - 1))
        total += line_cost(s.shown_lines[i])
        prev = i
    if prev < s.n - 1:
        total += line_cost(_marker(s, prev + 1, s.n - 1))
    return total


def grow(
    s: Sliceable,
    lines: frozenset[int],
    allowance: int,
    whole_ok: bool = True,
    core_only: bool = False,
    small: int = 0,
    most: int | None = None,
) -> frozenset[int]:
    """``lines`` grown within ``allowance`` tokens: the whole unit when it fits (and ``whole_ok``), else the plan's
    groups in order, each one that fits (a group that does not fit is skipped; a later, smaller one may).
    ``core_only``: only the groups the question needs (the ``most`` best), and the whole unit only when it costs at
    most ``small`` tokens or little more than those groups (``WHOLE_OVER_CORE``): a unit is not read whole because
    there is room."""
    whole = s.everything()
    if lines == whole:
        return whole
    if (
        whole_ok
        and cost(s, whole) <= allowance
        and (not core_only or cost(s, whole) <= max(small, WHOLE_OVER_CORE * s.core_cost(most)))
    ):
        return whole
    cur = frozenset(lines | s.head)
    if cost(s, cur) > allowance:
        return lines
    for g in s.core(most) if core_only else s.groups:
        if g <= cur:
            continue
        nxt = cur | g
        if cost(s, nxt) <= allowance:
            cur = nxt
    return cur
