"""Code-aware tokens for the lexical index: identifiers kept whole and split at camelCase, snake_case
and dots, lower-cased. Used on documents and queries alike so both sides agree."""

from __future__ import annotations

import re
from collections.abc import Set as AbstractSet
from functools import lru_cache

# Bumped whenever the tokens change: an index built with other tokens is rebuilt whole.
# (Snowball stemming was tried and measured worse on the SWE-bench dev split: file Acc@5 75.9 → 70.7
# on the Django rows; so tokens are not stemmed.)
TOKENIZER_VERSION = "1"

_WORD = re.compile(r"[A-Za-z_][A-Za-z0-9_]*|[0-9]+[A-Za-z_][A-Za-z0-9_]*")
_CAMEL = re.compile(r"[A-Z]+(?=[A-Z][a-z0-9])|[A-Z]?[a-z0-9]+|[A-Z]+")

STOPWORDS = frozenset(
    """
a an the and or not of to in on at by for from with without is are was were be been being it its this that
these those as if then else but so do does did done have has had i we you he she they me my our your
can could should would will shall may might must there here when where which who whom what why how
all any some no yes into out up down over under again further once only own same than too very just
also get got use used using like want make made one two new now please thanks thank issue bug error
""".split()
)


def split_identifier(word: str) -> list[str]:
    parts: list[str] = []
    for piece in word.split("_"):
        if piece:
            parts.extend(m.group(0) for m in _CAMEL.finditer(piece))
    return parts


@lru_cache(maxsize=262_144)
def _word_tokens(word: str, keep_stopwords: bool) -> tuple[str, ...]:
    """The tokens of one word: itself lower-cased, then its camelCase/snake_case parts. Code repeats
    its words endlessly, so this is cached."""
    out: list[str] = []
    low = word.lower()
    if len(low) > 1 and (keep_stopwords or low not in STOPWORDS):
        out.append(low)
    if "_" in word or (not word.islower() and not word.isupper()):
        parts = split_identifier(word)
        if len(parts) > 1:
            for p in parts:
                lp = p.lower()
                if len(lp) > 1 and lp != low and (keep_stopwords or lp not in STOPWORDS):
                    out.append(lp)
    return tuple(out)


def code_tokens(text: str, keep_stopwords: bool = True) -> list[str]:
    out: list[str] = []
    extend = out.extend
    for word in _WORD.findall(text):
        extend(_word_tokens(word, keep_stopwords))
    return out


def fts_text(text: str) -> str:
    return " ".join(code_tokens(text))


# Words people write in full that code abbreviates. Used to match a question's words against names and
# paths (``local memory`` ~ ``LocMemCache``, ``database`` ~ ``db.py``); never changes indexed tokens.
ABBREVIATIONS: dict[str, tuple[str, ...]] = {
    "administrator": ("admin",),
    "allocate": ("alloc",),
    "application": ("app",),
    "argument": ("arg", "args"),
    "arguments": ("args", "arg"),
    "asynchronous": ("async", "aio"),
    "attribute": ("attr", "attrs"),
    "attributes": ("attrs", "attr"),
    "authentication": ("auth", "authn"),
    "authorization": ("auth", "authz"),
    "boolean": ("bool",),
    "buffer": ("buf",),
    "calculate": ("calc",),
    "character": ("char",),
    "command": ("cmd",),
    "compiler": ("comp",),
    "configuration": ("config", "conf", "cfg"),
    "config": ("conf", "cfg"),
    "connection": ("conn",),
    "context": ("ctx",),
    "current": ("cur", "curr"),
    "database": ("db",),
    "descriptor": ("fd",),
    "destination": ("dst", "dest"),
    "dictionary": ("dict",),
    "dictionaries": ("dict",),
    "directory": ("dir",),
    "document": ("doc",),
    "element": ("elem",),
    "environment": ("env",),
    "error": ("err",),
    "evaluate": ("eval",),
    "exception": ("exc",),
    "expression": ("expr",),
    "expressions": ("expr", "exprs"),
    "filesystem": ("fs",),
    "function": ("func", "fn"),
    "functions": ("funcs", "func"),
    "generate": ("gen",),
    "generator": ("gen",),
    "identifier": ("id", "ident"),
    "implementation": ("impl",),
    "index": ("idx",),
    "information": ("info",),
    "initialize": ("init",),
    "integer": ("int",),
    "length": ("len",),
    "library": ("lib",),
    "local": ("loc",),
    "matrix": ("mat",),
    "matrices": ("mat", "matrix"),
    "maximum": ("max",),
    "memory": ("mem",),
    "message": ("msg",),
    "minimum": ("min",),
    "module": ("mod",),
    "number": ("num",),
    "object": ("obj",),
    "package": ("pkg",),
    "parameter": ("param", "params"),
    "parameters": ("params", "param"),
    "polynomial": ("poly",),
    "polynomials": ("poly", "polys"),
    "position": ("pos",),
    "previous": ("prev",),
    "reference": ("ref",),
    "references": ("refs", "ref"),
    "regular": ("re",),
    "repository": ("repo",),
    "request": ("req",),
    "response": ("resp",),
    "sequence": ("seq",),
    "source": ("src",),
    "specification": ("spec",),
    "statistics": ("stats",),
    "string": ("str",),
    "strings": ("str",),
    "synchronize": ("sync",),
    "system": ("sys",),
    "temporary": ("tmp", "temp"),
    "transaction": ("txn",),
    "utility": ("util", "utils"),
    "value": ("val",),
    "values": ("vals", "val"),
    "variable": ("var",),
    "variables": ("vars", "var"),
}


def base_forms(word: str) -> list[str]:
    """Candidate uninflected forms of an English word (``resolved`` → resolve, ``tokenizing`` → tokenize,
    ``entries`` → entry, ``stopped`` → stop). Over-generates on purpose: callers keep the candidates the
    index actually holds. Indexed tokens are never stemmed (stemming measured worse, see above)."""
    w = word
    if len(w) < 5 or not w.isalpha():
        return []
    out: list[str] = []
    if w.endswith("ies") or w.endswith("ied"):
        out.append(w[:-3] + "y")
    if w.endswith("es"):
        out.append(w[:-2])
    if w.endswith("s") and not w.endswith("ss"):
        out.append(w[:-1])
    for suffix in ("ed", "ing"):
        if w.endswith(suffix):
            stem = w[: -len(suffix)]
            out += [stem, stem + "e"]
            if len(stem) > 2 and stem[-1] == stem[-2]:
                out.append(stem[:-1])  # stopped, running
    return [c for c in dict.fromkeys(out) if len(c) >= 3 and c != w]


@lru_cache(maxsize=65_536)
def term_forms(term: str) -> frozenset[str]:
    """The tokens that stand for a question's term in a name: itself, its known abbreviations and its
    uninflected forms (``term_in``). Questions repeat their words, so this is cached."""
    return frozenset((term, *ABBREVIATIONS.get(term, ()), *base_forms(term)))


def term_in(term: str, tokens: AbstractSet[str]) -> bool:
    """Whether a question's term is among a name's tokens: directly, as a known abbreviation, or uninflected
    (``resolved`` ~ ``_resolve_lookup``)."""
    return not term_forms(term).isdisjoint(tokens)


_DIGITS = "0123456789"


@lru_cache(maxsize=262_144)
def _name_word_tokens(word: str) -> tuple[str, ...]:
    """``name_tokens`` of one word: its tokens and those with their trailing digits dropped (both are per
    token, so a text's name tokens are the union of its words')."""
    toks = _word_tokens(word, True)
    return toks + tuple(t.rstrip(_DIGITS) for t in toks if t[-1].isdigit() and len(t.rstrip(_DIGITS)) > 2)


def _name_token_set(text: str) -> frozenset[str]:
    return frozenset().union(*map(_name_word_tokens, set(_WORD.findall(text))))


# Texts up to SHORT_TEXT characters (names, paths, signatures, most docstrings) recur across searches and
# cost little to keep; longer ones (bodies) are kept too, but fewer and only up to LONG_TEXT characters, so
# the caches stay within tens of MB.
SHORT_TEXT, LONG_TEXT = 256, 16_384
_short_name_tokens = lru_cache(maxsize=65_536)(_name_token_set)
_long_name_tokens = lru_cache(maxsize=2_048)(_name_token_set)


def name_token_set(text: str) -> frozenset[str]:
    """``name_tokens`` as a frozenset, cached (bounded) per text: the re-ranker asks it of each candidate's
    name, path, signature, docstring and body on every search."""
    if len(text) <= SHORT_TEXT:
        return _short_name_tokens(text)
    if len(text) <= LONG_TEXT:
        return _long_name_tokens(text)
    return _name_token_set(text)


def name_tokens(text: str) -> set[str]:
    """Tokens of a name or path for matching a question's words: digits at the end also dropped
    (``sqlite3`` → ``sqlite``, ``py3k`` stays)."""
    return set(name_token_set(text))
