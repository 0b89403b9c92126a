"""Code as HTML on the server (Pygments): one ``<span class="line">`` per source line, so a page can number,
anchor and mark lines without a client-side highlighter. Pygments escapes the text; nothing else goes in."""

from __future__ import annotations

import html
from functools import lru_cache

from pygments import highlight
from pygments.formatters import HtmlFormatter
from pygments.lexers import get_lexer_for_filename
from pygments.lexers.special import TextLexer
from pygments.util import ClassNotFound

LIGHT_STYLE = "default"
DARK_STYLE = "github-dark"
MAX_CHARS = 200_000

__all__ = ["highlight_lines", "pygments_css"]


def _lexer(path: str):
    try:
        return get_lexer_for_filename(path or "x.txt", stripnl=False, ensurenl=False)
    except ClassNotFound:
        return TextLexer(stripnl=False, ensurenl=False)


def highlight_lines(lines: list[str], path: str, first: int = 1, marked: tuple[int, int] | None = None) -> str:
    """``lines`` (without their newlines) as highlighted HTML, numbered from ``first``; lines inside ``marked``
    (a 1-based inclusive range) carry the class ``hit``."""
    text = "\n".join(lines)[:MAX_CHARS]
    try:
        body = highlight(text + "\n", _lexer(path), HtmlFormatter(nowrap=True))
    except Exception:  # noqa: BLE001 - a lexer that fails still leaves the text readable
        body = html.escape(text + "\n")
    # HtmlFormatter closes its spans at every line end, so the output splits on newlines line for line
    out_lines = body.split("\n")[: len(lines)]
    parts = []
    for i, code in enumerate(out_lines):
        n = first + i
        hit = marked is not None and marked[0] <= n <= marked[1]
        parts.append(
            f'<span class="line{" hit" if hit else ""}" id="L{n}" data-n="{n}">'
            f'<span class="ln" aria-hidden="true">{n}</span><span class="src">{code or " "}</span></span>'
        )
    return "".join(parts)  # block-level lines: a newline between them would show as a blank line in <pre>


@lru_cache(maxsize=1)
def pygments_css() -> str:
    """Token colours for the light theme, and for the dark one (the OS preference or the page's toggle)."""
    light = HtmlFormatter(style=LIGHT_STYLE).get_style_defs(".code")
    dark_rules = HtmlFormatter(style=DARK_STYLE).get_style_defs(".code")
    dark_forced = dark_rules.replace(".code", ':root[data-theme="dark"] .code')
    dark_auto = dark_rules.replace(".code", ':root:not([data-theme="light"]) .code')
    return f"{light}\n{dark_forced}\n@media (prefers-color-scheme: dark) {{\n{dark_auto}\n}}\n"
