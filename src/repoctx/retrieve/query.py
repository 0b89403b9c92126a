"""What a question mentions: identifiers, dotted names and paths (for exact matching)."""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from functools import lru_cache

from repoctx.tokens import code_tokens

_EXTENSIONS = r"(?:py|pyi|js|jsx|ts|tsx|go|java|rs|c|h|cc|cpp|hpp|cs|rb|php|kt|swift|scala|md|ya?ml|toml|json|sql|sh)"
# a path as an issue writes it: relative, absolute (``/usr/lib/python3.10/site-packages/...``, ``~/...``), Windows
# (``C:\Python310\lib\...``) or inside a URL (``https://github.com/o/r/blob/main/...``); clean_path makes it one the
# index can resolve
_PATH = re.compile(r"(?<![\w.~@+\\/-])((?:[A-Za-z]:)?(?:[\w.~@+-]*[\\/])*[\w-]+\." + _EXTENSIONS + r")\b")
_INSTALLED = re.compile(r"^(?:.*/)?(?:site|dist)-packages/")
# a bare file name heading a snippet as a comment (``# conf.py``, ``// in app.js``): the reporter's own file, not the
# repository's (SWE-bench dev: Sphinx 8282 and 8435's ``conf.py``, Django 16229's ``models.py`` and ``admin.py``)
_OWN_FILE = re.compile(r"^[ \t]*(?:#|//)[ \t]*(?:\w+[ \t]+){0,2}[\w-]+\.\w+[ \t]*:?[ \t]*\r?$", re.M)
# a line written right after a path: a traceback's ``File "x.py", line 84, in _execute``, pytest's ``x.py:84: in
# _execute``, IPython's ``File ~/x.py:84, in Cls.meth(self)``, a warning's or a linter's ``x.py:730:`` (a column may
# follow), a GitHub link's ``x.py#L84``; the function, when written, is a name, a dotted name or ``<module>``,
# ``<lambda>``, ``<listcomp>``
_LINE_AFTER = re.compile(r'"?(?:,\s*line\s+|:|#L)(\d{1,7})\b(?::\d+)?(?:[,:]?\s+in\s+(<\w+>|[A-Za-z_][\w.]*))?')


def clean_path(written: str) -> str:
    """A path as the repository would hold it, or a path that ends with it: backslashes as slashes; what an installed
    package sits under (``.../site-packages/``) dropped; a drive and a leading ``/``, ``./`` or ``~/`` dropped.
    ``C:\\Python310\\lib\\site-packages\\sympy\\core\\mul.py`` becomes ``sympy/core/mul.py``;
    ``/Users/me/mpl/lib/matplotlib/axis.py`` becomes ``Users/me/mpl/lib/matplotlib/axis.py``, and the store matches the
    repository's path it ends with."""
    path = re.sub(r"^[A-Za-z]:(?=[\\/])", "", written).replace("\\", "/")
    path = re.sub(r"/{2,}", "/", path)
    path = _INSTALLED.sub("", path)
    return re.sub(r"^(?:\.{1,2}/|~/|/)+", "", path)


_DOTTED = re.compile(r"\b([A-Za-z_]\w*(?:\.[A-Za-z_]\w*)+)\b")
_IDENT = re.compile(r"\b([A-Za-z_]\w*)\b")
_BACKTICK = re.compile(r"`([^`\n]{1,120})`")


def looks_like_code(word: str) -> bool:
    """snake_case, camelCase/PascalCase with an inner capital, dunder, or CONSTANT_CASE."""
    if len(word) < 3:
        return False
    if "_" in word.strip("_") or word.startswith("__"):
        return True
    return any(c.isupper() for c in word[1:]) and any(c.islower() for c in word)


def summary_line(text: str) -> str | None:
    """The line that sums up a text of several lines (an issue's title, a question above pasted code), or None
    for a one-line text. Markdown header, quote, bullet and bold marks are dropped; a line of fewer than three words, or
    one that is code (a fence, a prompt, a statement), or one with fewer than two content words ("How do I fix
    this?") sums nothing up."""
    lines = [ln.strip() for ln in text.strip().splitlines() if ln.strip()]
    if len(lines) < 2:
        return None
    # a header's or quote's marks, a list bullet and **bold** go; code's own marks (__isnull, pk__in, **kwargs) stay
    first = re.sub(r"^(?:[#>]+\s*|[-*]\s+)", "", lines[0])
    first = re.sub(r"\*\*(\S(?:[^*]*\S)?)\*\*", r"\1", first).strip()
    if (
        len(first.split()) < 3
        or len(first) > 300
        or re.match(r"^(```|>>>|\$ |import |from \w+ import |def |class )", first)
    ):
        return None
    return first if len(set(code_tokens(first, keep_stopwords=False))) >= 2 else None


@dataclass
class Mentions:
    identifiers: list[str]  # last components, most specific first
    dotted: list[str]
    paths: list[str]
    # (path, line, function or "") for each line of a file the question writes, in the order written
    locations: list[tuple[str, int, str]] = field(default_factory=list)


def mentions(query: str) -> Mentions:
    """What ``query`` names. Read once per question (``_read``): a search's exact lane, its file ranking's path vote
    and the planner each ask, and a 22 KB report takes ~9 ms to read; each caller gets lists of its own."""
    idents, dotted, paths, locations = _read(query)
    return Mentions(list(idents), list(dotted), list(paths), list(locations))


@lru_cache(maxsize=64)
def _read(
    query: str,
) -> tuple[tuple[str, ...], tuple[str, ...], tuple[str, ...], tuple[tuple[str, int, str], ...]]:
    own = [m.span() for m in _OWN_FILE.finditer(query)]
    paths: list[str] = []
    locations: list[tuple[str, int, str]] = []
    for m in _PATH.finditer(query):
        if (p := clean_path(m.group(1))) and not any(a <= m.start() < b for a, b in own):
            paths.append(p)
            if (at := _LINE_AFTER.match(query, m.end())) is not None:
                locations.append((p, int(at.group(1)), (at.group(2) or "").rstrip(".")))
    paths = list(dict.fromkeys(paths))
    path_set = set(paths)
    dotted: list[str] = []
    idents: list[str] = []
    for m in _BACKTICK.finditer(query):
        inner = m.group(1).strip().rstrip("()")
        if re.fullmatch(r"[A-Za-z_][\w.]*", inner):
            (dotted if "." in inner else idents).append(inner)
    for m in _DOTTED.finditer(query):
        d = m.group(1)
        if d in path_set or any(p.endswith(d) for p in paths) or re.search(r"\.(py|js|ts|md|txt|org|com|html)$", d):
            continue
        dotted.append(d)
    for m in _IDENT.finditer(query):
        w = m.group(1)
        end = m.end()
        if looks_like_code(w) or query[end : end + 1] == "(":
            idents.append(w)
    for d in dotted:
        idents.append(d.rsplit(".", 1)[-1])
    bare = query.strip().strip("`'\"").rstrip("()")
    if re.fullmatch(r"[A-Za-z_]\w*", bare):  # a one-word query names a symbol, whatever its case
        idents.insert(0, bare)
    return tuple(dict.fromkeys(idents)), tuple(dict.fromkeys(dotted)), tuple(paths), tuple(dict.fromkeys(locations))
