"""One grammar for the path patterns of access rules, translated exactly for each place a path meets one.

A pattern is parsed once into tokens; each backend gets its own text from those tokens: a Python regular
expression (the reference matcher, used for checks that are not a query), a PostgreSQL regular
expression (``path ~ ...``) and a SQLite GLOB pattern (``path GLOB ...``). A pattern one of them could
not express exactly is refused with :class:`GlobError` before any backend sees it: an access rule never
means one thing on SQLite and another on PostgreSQL.

The grammar (the whole repository-relative path must match; case-sensitive; unicode is literal):

* ``*`` any run of characters, ``/`` included; ``**`` is the same as ``*``
* ``?`` exactly one character, ``/`` included
* ``[abc]`` one of the listed characters; ``[a-z]`` a range (by code point); ``[!abc]`` and ``[^abc]``
  any character but those (``/`` too unless listed); ``]`` ends a class, ``-`` is literal first or last
* ``\\c`` the character ``c`` literally, outside and inside classes
* anything else is itself

Refused: an unclosed ``[``, an empty class (``[]``, ``[!]``), a reversed range (``[z-a]``), a ``-``
inside a class that is neither first, last nor a range, ``[:``/``[.``/``[=`` inside a class (POSIX
classes are not part of the grammar), a trailing lone backslash, control characters (NUL included),
lone surrogates, an empty pattern, and patterns over 500 characters.

This module is on the store's ground floor: it imports nothing from the rest of repoctx.
"""

from __future__ import annotations

import re
import unicodedata
from collections.abc import Callable
from dataclasses import dataclass
from functools import lru_cache

__all__ = [
    "GlobError",
    "Glob",
    "Dialect",
    "SQLITE",
    "POSTGRES",
    "DIALECTS",
    "MAX_PATTERN",
    "parse",
    "check",
    "matches",
    "dialect",
]

MAX_PATTERN = 500  # characters


class GlobError(ValueError):
    """A path pattern the grammar refuses; ``reason`` says why (and how to write what was meant)."""

    def __init__(self, pattern: object, reason: str):
        self.pattern, self.reason = pattern, reason
        shown = pattern if not isinstance(pattern, str) or len(pattern) <= 80 else pattern[:77] + "..."
        super().__init__(f"path pattern {shown!r}: {reason}")


# --------------------------------------------------------------------------- tokens


@dataclass(frozen=True, slots=True)
class _Lit:
    ch: str


@dataclass(frozen=True, slots=True)
class _Star:
    pass


@dataclass(frozen=True, slots=True)
class _One:
    pass


@dataclass(frozen=True, slots=True)
class _Class:
    negated: bool
    ranges: tuple[tuple[int, int], ...]  # sorted, merged, non-adjacent code point intervals


_Token = _Lit | _Star | _One | _Class
_STAR, _ONE = _Star(), _One()


def _bad_char(pattern: str, i: int) -> None:
    ch = pattern[i]
    cat = unicodedata.category(ch)
    if cat == "Cc":
        raise GlobError(pattern, f"control character U+{ord(ch):04X} at position {i}")
    if cat == "Cs":
        raise GlobError(pattern, f"lone surrogate U+{ord(ch):04X} at position {i} (not a character a path can hold)")


def _merge(intervals: list[tuple[int, int]]) -> tuple[tuple[int, int], ...]:
    out: list[list[int]] = []
    for lo, hi in sorted(intervals):
        if out and lo <= out[-1][1] + 1:
            out[-1][1] = max(out[-1][1], hi)
        else:
            out.append([lo, hi])
    return tuple((lo, hi) for lo, hi in out)


def _parse_class(pattern: str, start: int) -> tuple[_Class, int]:
    """The class opening at ``pattern[start] == '['``; returns it and the index after its ``]``."""
    n = len(pattern)
    i = start + 1
    negated = i < n and pattern[i] in "!^"
    if negated:
        i += 1
    body = i
    if i < n and pattern[i] == "]":
        raise GlobError(pattern, f"empty class at position {start} ('[' then ']'; write '\\]' to match ']')")
    intervals: list[tuple[int, int]] = []

    def endpoint(j: int, first_or_last_ok: bool) -> tuple[str, int, bool]:
        """(character, next index, escaped) of the class item at ``j``."""
        if j >= n:
            raise GlobError(pattern, f"unclosed '[' at position {start} (write '\\[' for a literal '[')")
        c = pattern[j]
        if c == "\\":
            if j + 1 >= n:
                raise GlobError(pattern, "trailing lone backslash (write '\\\\' for a literal backslash)")
            _bad_char(pattern, j + 1)
            return pattern[j + 1], j + 2, True
        _bad_char(pattern, j)
        if c == "[" and j + 1 < n and pattern[j + 1] in ":.=":
            raise GlobError(
                pattern,
                f"'[{pattern[j + 1]}' at position {j} inside a class: POSIX classes are not "
                "part of the grammar (write '\\[' for a literal '[')",
            )
        if c == "-" and j + 1 >= n:
            raise GlobError(pattern, f"unclosed '[' at position {start} (write '\\[' for a literal '[')")
        if c == "-" and not first_or_last_ok:
            raise GlobError(
                pattern,
                f"'-' at position {j} inside a class is neither first, last nor a range "
                "(write '\\-' for a literal '-')",
            )
        return c, j + 1, False

    while True:
        if i >= n:
            raise GlobError(pattern, f"unclosed '[' at position {start} (write '\\[' for a literal '[')")
        if pattern[i] == "]":
            break
        last = i + 1 < n and pattern[i + 1] == "]"
        lo, i, escaped = endpoint(i, i == body or last)
        if (escaped or lo != "-") and i + 1 < n and pattern[i] == "-" and pattern[i + 1] != "]":
            hi, i, _ = endpoint(i + 1, False)  # a range's end is never a bare '-'
            if ord(hi) < ord(lo):
                raise GlobError(pattern, f"reversed range '{lo}-{hi}' in the class at position {start}")
            intervals.append((ord(lo), ord(hi)))
        else:
            intervals.append((ord(lo), ord(lo)))
    return _Class(negated, _merge(intervals)), i + 1


def _tokens(pattern: str) -> tuple[_Token, ...]:
    if not isinstance(pattern, str):
        raise GlobError(pattern, f"expected a string, not {type(pattern).__name__}")
    if not pattern:
        raise GlobError(pattern, "empty pattern (it would match no path)")
    if len(pattern) > MAX_PATTERN:
        raise GlobError(pattern, f"longer than {MAX_PATTERN} characters ({len(pattern)})")
    out: list[_Token] = []
    i, n = 0, len(pattern)
    while i < n:
        c = pattern[i]
        if c == "*":
            if not out or out[-1] is not _STAR:  # '**' (and any longer run) is '*'
                out.append(_STAR)
            i += 1
        elif c == "?":
            out.append(_ONE)
            i += 1
        elif c == "[":
            cls, i = _parse_class(pattern, i)
            out.append(cls)
        elif c == "\\":
            if i + 1 >= n:
                raise GlobError(pattern, "trailing lone backslash (write '\\\\' for a literal backslash)")
            _bad_char(pattern, i + 1)
            out.append(_Lit(pattern[i + 1]))
            i += 2
        else:
            _bad_char(pattern, i)
            out.append(_Lit(c))
            i += 1
    return tuple(out)


# --------------------------------------------------------------------------- translations


def _py_char(cp: int) -> str:
    return f"\\U{cp:08x}"


def _python_unit(t: _Token) -> str:
    if isinstance(t, _Lit):
        return re.escape(t.ch)
    if isinstance(t, _One):
        return "."
    assert isinstance(t, _Class)
    items = "".join(_py_char(lo) if lo == hi else f"{_py_char(lo)}-{_py_char(hi)}" for lo, hi in t.ranges)
    return "[" + ("^" if t.negated else "") + items + "]"


def _python(tokens: tuple[_Token, ...]) -> str:
    """Anchored at both ends under ``re.match``. Every run between stars is fixed-length, so matching
    each at its leftmost place is exact; the atomic groups (as ``fnmatch`` does) keep a pattern with
    many stars from backtracking into exponential time."""
    segments: list[list[_Token]] = [[]]
    for t in tokens:
        if t is _STAR:
            segments.append([])
        else:
            segments[-1].append(t)
    seg = ["".join(_python_unit(t) for t in s) for s in segments]
    if len(seg) == 1:
        body = seg[0]
    else:
        body = seg[0] + "".join(f"(?>.*?{s})" for s in seg[1:-1]) + ".*" + seg[-1]
    return f"(?s:{body})\\Z"


def _pg_char(cp: int) -> str:
    ch = chr(cp)
    if ch.isascii() and ch.isalnum():
        return ch
    return f"\\u{cp:04x}" if cp <= 0xFFFF else f"\\U{cp:08x}"


def _postgres(tokens: tuple[_Token, ...]) -> str:
    """A PostgreSQL ARE (``~``, case-sensitive, not newline-sensitive: ``.`` and ``[^...]`` match a
    newline). Inside brackets every character but an ASCII letter or digit is a character-entry escape
    (``\\u005d``), which is always an ordinary character: no ``]``, ``^``, ``-``, ``\\`` or ``[:`` to
    misread. Ranges compare code points (checked on the server for non-ASCII)."""
    out = ["^"]
    for t in tokens:
        if isinstance(t, _Star):
            out.append(".*")
        elif isinstance(t, _One):
            out.append(".")
        elif isinstance(t, _Lit):
            out.append("\\" + t.ch if t.ch.isascii() and not t.ch.isalnum() else t.ch)
        else:
            items = "".join(_pg_char(lo) if lo == hi else f"{_pg_char(lo)}-{_pg_char(hi)}" for lo, hi in t.ranges)
            out.append("[" + ("^" if t.negated else "") + items + "]")
    out.append("$")
    return "".join(out)


_GLOB_LITERAL = {"*": "[*]", "?": "[?]", "[": "[[]"}
_RBRACKET, _DASH, _CARET = ord("]"), ord("-"), ord("^")
_GLOB_CLASS_SPECIAL = (_RBRACKET, _DASH, _CARET)


def _sqlite_class(t: _Class) -> str:
    """SQLite's GLOB has no escape, and in a class ``]`` is literal only first (after ``^``), ``-`` only
    first or last (or right after ``]``), ``^`` only when not first. So: the special characters come
    out of every range (a range never starts or ends on one), ``]`` goes first, ``-`` next (where it
    cannot start a range), then the other characters and the ranges, and ``^`` last."""
    specials: set[int] = set()
    singles: list[int] = []
    ranges: list[tuple[int, int]] = []
    for lo, hi in t.ranges:
        while lo <= hi and lo in _GLOB_CLASS_SPECIAL:
            specials.add(lo)
            lo += 1
        while hi >= lo and hi in _GLOB_CLASS_SPECIAL:
            specials.add(hi)
            hi -= 1
        if lo == hi:
            singles.append(lo)
        elif lo < hi:
            ranges.append((lo, hi))
    if not t.negated and not ranges and len(singles) + len(specials) == 1:
        ch = chr(singles[0] if singles else next(iter(specials)))
        return _GLOB_LITERAL.get(ch, ch)  # one character: a literal (also the only way to write a lone '^')
    body = ("]" if _RBRACKET in specials else "") + ("-" if _DASH in specials else "")
    body += "".join(map(chr, singles)) + "".join(f"{chr(lo)}-{chr(hi)}" for lo, hi in ranges)
    body += "^" if _CARET in specials else ""
    return "[" + ("^" if t.negated else "") + body + "]"


def _sqlite(tokens: tuple[_Token, ...]) -> str:
    """A SQLite GLOB pattern (anchored by nature; ``*`` and ``?`` cross ``/``; case-sensitive; code points)."""
    out = []
    for t in tokens:
        if isinstance(t, _Star):
            out.append("*")
        elif isinstance(t, _One):
            out.append("?")
        elif isinstance(t, _Lit):
            out.append(_GLOB_LITERAL.get(t.ch, t.ch))
        else:
            out.append(_sqlite_class(t))
    return "".join(out)


# --------------------------------------------------------------------------- public surface


@dataclass(frozen=True)
class Glob:
    """A parsed pattern and its exact translations."""

    pattern: str
    python: str  # a Python regex for ``re.match`` (the reference matcher)
    postgres: str  # a PostgreSQL ARE for ``path ~ ...``
    sqlite: str  # a SQLite GLOB pattern for ``path GLOB ...``

    def matches(self, path: str) -> bool:
        return _compiled(self.python).match(path) is not None


@lru_cache(maxsize=4096)
def _compiled(regex: str) -> re.Pattern:
    return re.compile(regex)


@lru_cache(maxsize=4096)
def parse(pattern: str) -> Glob:
    """The pattern parsed and translated; :class:`GlobError` (a ``ValueError``) says why one is refused."""
    tokens = _tokens(pattern)
    return Glob(pattern, _python(tokens), _postgres(tokens), _sqlite(tokens))


def check(pattern: str) -> str:
    """``pattern`` itself when the grammar accepts it; :class:`GlobError` otherwise."""
    return parse(pattern).pattern


def matches(pattern: str, path: str) -> bool:
    """Whether ``path`` (repository-relative) matches ``pattern`` as every backend reads it."""
    return parse(pattern).matches(path)


@dataclass(frozen=True)
class Dialect:
    """How one SQL backend tests a path column against a pattern: ``test`` with ``{col}`` and ``{ph}``
    (its placeholder), and the pattern's text to bind."""

    name: str
    test: str
    translate: Callable[[Glob], str]

    def bind(self, pattern: str) -> str:
        return self.translate(parse(pattern))


SQLITE = Dialect("sqlite", "{col} GLOB {ph}", lambda g: g.sqlite)
POSTGRES = Dialect("postgres", "{col} ~ {ph}", lambda g: g.postgres)
DIALECTS = {d.name: d for d in (SQLITE, POSTGRES)}


def dialect(d: Dialect | str) -> Dialect:
    if isinstance(d, Dialect):
        return d
    try:
        return DIALECTS[d]
    except KeyError:
        raise ValueError(f"no path-pattern dialect {d!r}: one of {', '.join(DIALECTS)}") from None
