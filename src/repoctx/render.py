"""What every surface returns for a search: one renderer, three levels of detail.

An agent pays for every token a tool returns, so a search answers compactly unless asked for more. The
CLI (text and ``--json``), the MCP server, the copilot's tools and the HTTP service all shape hits here,
so a ``detail`` level means the same thing everywhere. Levels are cumulative: each adds fields to the one
before and never changes the meaning of a field it shares.

``brief`` (the default): one line per hit, ``path:start-end :: qualname(params) -> returns — why``; as a
    dict ``citation`` (``path:start-end :: qualname``: quote it as given), ``repo``, ``sig`` (the signature
    shortened: parameters by name, long lists cut with ``…``) and ``why`` (which signals found it: ``exact
    name``, ``lexical #1``, ``dense #3``, ``callee of X``, ...). Results come best first.
``signatures``: brief + ``path``, ``start_line``, ``end_line``, ``symbol`` (the qualname), ``kind``,
    ``score``, ``signature`` (whole), ``docstring`` (its first line), and ``callers``/``callees`` (how many
    units call it and it calls, in the caller's scope, when the renderer is given the index).
``full``: signatures + ``docstring`` up to three lines, ``snippet`` (the first 30 lines of the body) and,
    when cut, ``snippet_note``: every field the surfaces answered before levels existed.

File-level results (``level="file"``) carry ``repo``, ``path``, ``score``, ``units`` (how many units of the
file were found) and ``citations`` (theirs) at every level; ``signatures`` and ``full`` add ``symbols``:
the first five units with their whole signatures and docstrings' first lines.

The dict form (``retrieval_dict``, ``hit_dict``, ``file_dict``) is what the surfaces shape results with;
what they send as JSON (``--json``, the service, the MCP server's structured content, the copilot's tool
results) passes through ``wire``: at ``brief`` each result is sent as its one line, at the other levels as
its dict. The text form (``item_text``, ``retrieval_text``) is rendered from the same dicts, for the CLI and
the MCP server's text content.

``grep``, ``outline`` and ``symbol`` answer with the dicts of ``Index.grep``/``outline``/``symbol`` on every
surface; their text forms are here too (``grep_text``: ``path:line: text`` as ``git grep -n`` prints it,
``outline_text``: one line per unit, ``symbol_text``: each definition's citation and body).
"""

from __future__ import annotations

import inspect
from collections.abc import Iterable
from typing import Any

__all__ = [
    "DETAILS",
    "DEFAULT_DETAIL",
    "check_detail",
    "why_text",
    "short_signature",
    "hit_dict",
    "file_dict",
    "result_dicts",
    "retrieval_dict",
    "wire",
    "item_text",
    "items_text",
    "retrieval_text",
    "call_counts",
    "grep_match_text",
    "grep_text",
    "outline_unit_text",
    "outline_text",
    "symbol_match_text",
    "symbol_text",
]

DETAILS = ("brief", "signatures", "full")
DEFAULT_DETAIL = "brief"
QUERY_CHARS = 100  # a brief answer names its question by this much of it (an issue's text runs to 300 tokens)
SIG_CHARS = 56  # a brief signature's parameters and return type, at most (characters)
DOC_CHARS = 160
SNIPPET_LINES = 30
FULL_DOC_LINES = 3
FILE_SYMBOLS = 5  # units shown with their signatures per file (signatures, full)
BRIEF_FILE_UNITS = 3  # units named on a file's line at brief
HISTORY_SHA = 12  # a voting commit's id, as git log --abbrev=12 gives it: enough for `git show`


def check_detail(detail: Any) -> str:
    """``detail`` as one of ``DETAILS`` (case and spaces forgiven); ValueError naming the choices otherwise."""
    d = detail.strip().lower() if isinstance(detail, str) else detail
    if d in (None, ""):
        return DEFAULT_DETAIL
    if d not in DETAILS:
        raise ValueError(f"detail must be one of {', '.join(DETAILS)}, not {detail!r}")
    return d


# ---------------------------------------------------------------------------------------------- why
WHY_RANKS = 50  # a ranked signal past this rank is not named: it barely found the unit
WHY_SIGNALS = 2  # ranked signals named in a why, the best first


def _ranked(v: Any) -> int | None:
    """The rank a signal gave, or None when it gave none worth naming."""
    rank = v.get("rank") if isinstance(v, dict) else None
    return rank if isinstance(rank, int) and rank <= WHY_RANKS else None


def _seed_name(seed: str) -> str:
    """A capsule id (``repo:path#qualname``) as the short name a reader recognises (its last part)."""
    name = seed.rsplit("#", 1)[-1] if "#" in seed else seed
    return name.rsplit(".", 1)[-1] or name


def why_text(why: dict | None) -> str:
    """A hit's explanation in a few words: the (at most ``WHY_SIGNALS``) signals that ranked it best and at
    which rank (ranks past ``WHY_RANKS`` left out), a graph step (``callee of commit``: it calls or is called by a
    better hit), the line the question wrote in it, demotions."""
    if not why:
        return ""
    parts: list[str] = []
    ex = why.get("exact")
    if ex:
        matched = ex.get("matched", "") if isinstance(ex, dict) else ""
        parts.append("exact path" if "/" in str(matched) else "exact name")
    if isinstance(written := why.get("written"), dict) and written.get("at"):
        parts.append(f"written at {written['at']}")  # a traceback's frame, a warning's line (path characters only)
    ranked = [
        (rank, label)
        for signal, label in (
            ("lexical", "lexical"),
            ("dense", "dense"),
            ("summary_lexical", "title lexical"),
            ("summary_dense", "title dense"),
        )
        if (rank := _ranked(why.get(signal))) is not None
    ]
    ranked.sort()  # the signals that ranked it best, at most WHY_SIGNALS of them: a reason, not a ledger
    parts += [f"{label} #{rank}" for rank, label in ranked[:WHY_SIGNALS]]
    if isinstance(windows := why.get("windows"), dict) and windows.get("score", 0) > 0:
        parts.append("body window")  # its body past what the model reads lifted its file (REPOCTX_FUNCTION_WINDOWS)
    g = why.get("graph")
    if isinstance(g, dict):
        rel = g.get("relation") or "neighbour"
        parts.append(f"{rel} of {_seed_name(str(g.get('from', '')))}" if g.get("from") else rel)
    subs = why.get("sub_queries")
    if subs:
        parts.append(f"{len(subs)} sub-quer{'y' if len(subs) == 1 else 'ies'}")
    if "judge" in why:
        parts.append("judged relevant")
    if why.get("test_demoted"):
        parts.append("test")
    if why.get("doc_demoted"):
        parts.append("docs")
    return ", ".join(parts)


# ---------------------------------------------------------------------------------------------- signatures
def _split_top(text: str, sep: str) -> list[str]:
    """``text`` split at ``sep`` outside brackets and quotes."""
    out, depth, quote, cur = [], 0, "", []
    for ch in text:
        if quote:
            cur.append(ch)
            if ch == quote:
                quote = ""
            continue
        if ch in "\"'":
            quote = ch
        elif ch in "([{<":
            depth += 1
        elif ch in ")]}>":
            depth = max(depth - 1, 0)
        elif ch == sep and depth == 0:
            out.append("".join(cur))
            cur = []
            continue
        cur.append(ch)
    out.append("".join(cur))
    return out


_RECEIVERS = {"self", "cls", "&self", "&mut self", "mut self", "this"}
_COLON_TYPED = {"python", "typescript", "tsx", "javascript", "rust", "kotlin", "swift", "scala", "php", "ruby"}


def _param_name(p: str, language: str) -> str:
    """One parameter as its name alone (``timeout: int = 5`` -> ``timeout``; Java's ``String[] args`` ->
    ``args``; Go's ``w http.ResponseWriter`` -> ``w``)."""
    p = " ".join(p.split())
    if p in ("*", "/", "...") or p in _RECEIVERS:
        return p
    head = _split_top(p, "=")[0].strip()
    if ":" in head and (language in _COLON_TYPED or language not in ("go", "c", "cpp", "java", "csharp")):
        return head.split(":", 1)[0].strip()
    words = head.split()
    if not words:
        return head
    return words[0] if language == "go" else words[-1]


def _cut(text: str, limit: int) -> str:
    text = " ".join(text.split())
    return text if len(text) <= limit else text[: limit - 1].rstrip() + "…"


def short_signature(c, limit: int = SIG_CHARS) -> str:
    """What follows a unit's citation on its brief line: ``(params) -> returns`` for a function or method
    (parameters by name, without ``self``/``cls``, cut with ``…`` past ``limit``); ``class``/``class (Base)``,
    ``module``, or a text window's first line."""
    kind = getattr(c, "kind", "")
    sig = (getattr(c, "signature", "") or "").strip()
    if kind in ("function", "method"):
        params = [p for p in (getattr(c, "params", None) or []) if p.strip()]
        ret = _cut(getattr(c, "returns", "") or "", 28)
        tail = f" -> {ret}" if ret else ""
        if not params and "(" not in sig:
            return _cut(sig, limit) if sig else "()"
        if not params:  # the parser kept no parameter list: the declaration's own, from its first '('
            inner = sig[sig.find("(") :]
            return _cut(inner, limit)
        names = [n for n in (_param_name(p, getattr(c, "language", "")) for p in params) if n not in _RECEIVERS]
        room = max(limit - len(tail) - 2, 8)
        shown: list[str] = []
        for n in names:
            if len(", ".join(shown + [n])) > room - 2:
                shown.append("…")
                break
            shown.append(n)
        return "(" + ", ".join(shown) + ")" + tail
    if kind == "class":
        i = sig.find("(")
        bases = sig[i:].rstrip(":{ ") if i >= 0 else ""
        return "class" + (f" {_cut(bases, limit - 6)}" if bases else "")
    if kind == "module":
        return "module"
    first = next((ln.strip() for ln in sig.splitlines() if ln.strip()), "")
    return _cut(first, min(limit, 48)) if first else kind


def _doc_line(doc: str) -> str:
    first = next((ln.strip() for ln in inspect.cleandoc(doc or "").splitlines() if ln.strip()), "")
    return _cut(first, DOC_CHARS)


def _doc_lines(doc: str, n: int = FULL_DOC_LINES, max_chars: int = 400) -> str:
    out = "\n".join(inspect.cleandoc(doc or "").splitlines()[:n])
    return out if len(out) <= max_chars else out[: max_chars - 1] + "…"


# ---------------------------------------------------------------------------------------------- dicts
def call_counts(index, ids: Iterable[str], scope=None) -> dict[str, tuple[int, int]]:
    """``{id: (callers, callees)}`` for units ``ids``, counted in ``scope`` with two reads of the graph:
    distinct calling units, distinct called units (a callee known only by name counts once per name)."""
    ids = list(dict.fromkeys(ids))
    if not ids:
        return {}
    sc = index.scope(scope)
    callers: dict[str, set] = {i: set() for i in ids}
    callees: dict[str, set] = {i: set() for i in ids}
    for e in index.store.edges_to(ids, ("calls",), sc):
        if e.dst in callers:
            callers[e.dst].add(e.src)
    for e in index.store.edges_from(ids, ("calls",), sc):
        if e.src in callees:
            callees[e.src].add(e.dst or ("name", e.dst_name))
    return {i: (len(callers[i]), len(callees[i])) for i in ids}


def hit_dict(hit, detail: str = DEFAULT_DETAIL, counts: tuple[int, int] | None = None) -> dict:
    """One unit hit at ``detail`` (see the module's docstring for the fields of each level)."""
    c = hit.capsule
    out: dict[str, Any] = {"citation": c.citation, "repo": c.repo, "sig": short_signature(c), "why": why_text(hit.why)}
    if detail == "brief":
        return out
    out.update(
        path=c.path,
        start_line=c.start_line,
        end_line=c.end_line,
        symbol=c.qualname,
        kind=c.kind,
        score=round(float(hit.score), 4),
        signature=c.signature,
        docstring=_doc_line(c.docstring) if detail == "signatures" else _doc_lines(c.docstring),
    )
    if counts is not None:
        out["callers"], out["callees"] = counts
    if detail == "full":
        lines = (c.text or "").split("\n")
        out["snippet"] = "\n".join(lines[:SNIPPET_LINES])
        if len(lines) > SNIPPET_LINES:
            out["snippet_note"] = (
                f"first {SNIPPET_LINES} of {len(lines)} lines; read the range {c.start_line}-{c.end_line} for the rest"
            )
    return out


def file_dict(f, detail: str = DEFAULT_DETAIL) -> dict:
    """One file hit at ``detail``."""
    caps = [h.capsule for h in f.capsules]
    out: dict[str, Any] = {
        "repo": caps[0].repo if caps else "",
        "path": f.path,
        "score": round(float(f.score), 4),
        "units": len(caps),
        "citations": [c.citation for c in caps],
    }
    if f.history:  # the past commits most like the question that changed it: why the history moved it
        out["history"] = [{"commit": sha[:HISTORY_SHA], "title": title} for sha, title in f.history]
    if f.named:  # the path the question wrote for it
        out["named"] = f.named
    if detail != "brief":
        out["symbols"] = [
            {"citation": c.citation, "kind": c.kind, "signature": c.signature, "docstring": _doc_line(c.docstring)}
            for c in caps[:FILE_SYMBOLS]
        ]
    return out


def result_dicts(r, detail: str = DEFAULT_DETAIL, *, index=None, scope=None) -> list[dict]:
    """The results of a ``Retrieval`` (or a list of hits, or of file hits) at ``detail``. With ``index``,
    ``signatures`` and ``full`` count each unit's callers and callees in ``scope``."""
    detail = check_detail(detail)
    level = getattr(r, "level", None)
    items = r.files if level == "file" else getattr(r, "hits", r)
    items = list(items)
    if level == "file" or (items and hasattr(items[0], "capsules")):
        return [file_dict(f, detail) for f in items]
    counts: dict[str, tuple[int, int]] = {}
    if detail != "brief" and index is not None and items:
        try:
            counts = call_counts(index, [h.capsule.id for h in items], scope)
        except Exception:  # noqa: BLE001 - counts are a courtesy: the hits stand without them
            counts = {}
    return [hit_dict(h, detail, counts.get(h.capsule.id)) for h in items]


def retrieval_dict(r, detail: str = DEFAULT_DETAIL, *, index=None, scope=None, trace: bool = False) -> dict:
    """A ``Retrieval`` as every surface's JSON: the query, the path it took, notes, and its ``results`` at
    ``detail`` (``trace``: the trace events too)."""
    detail = check_detail(detail)
    results = result_dicts(r, detail, index=index, scope=scope)
    out = {
        "query": r.query,
        "mode": r.mode,
        "route": r.route,
        "level": r.level,
        "k": r.k,
        "detail": detail,
        "notes": list(r.notes),
        "seconds": round(r.seconds, 4),
        "count": len(results),
        "results": results,
    }
    for key in ("sub_queries", "iterations", "sufficient"):
        if key in r.details:
            out[key] = r.details[key]
    if trace:
        out["trace"] = [e.to_dict() for e in r.events]
    return out


def wire(d: dict) -> dict:
    """What a surface sends of a ``retrieval_dict`` (``--json``, the service, MCP structured content, the
    copilot's tool result): at ``brief`` each result is its one line (``item_text``), since as a dict the
    keys and quotes cost an agent more than the line itself (~870 tokens at k=10 against ~530 on repoctx's
    own src/), and the envelope leaves out what the caller knows or rarely needs (``query``: it asked it;
    ``route``, ``seconds``, empty ``notes``);
    ``signatures`` and ``full`` send everything, results as dicts with their fields."""
    if d.get("detail") != "brief":
        return d
    out = {k: v for k, v in d.items() if k not in ("query", "route", "seconds") and not (k == "notes" and not v)}
    results = d.get("results") or []
    if results and isinstance(results[0], dict):
        several = len({it.get("repo") for it in results}) > 1
        out["results"] = [item_text(it, "brief", with_repo=several) for it in results]
    return out


# ---------------------------------------------------------------------------------------------- text
def _indent(text: str, pad: str = "    ") -> str:
    return "\n".join(pad + ln for ln in text.split("\n"))


def item_text(item: dict, detail: str = DEFAULT_DETAIL, *, with_repo: bool = False) -> str:
    """One result dict (from ``hit_dict``/``file_dict``) as text: its line, and at ``signatures``/``full``
    the indented lines under it. ``with_repo``: prefix the repository (several are served)."""
    repo = f"{item['repo']}:" if with_repo and item.get("repo") else ""
    if "citation" not in item:  # a file
        cites = item.get("citations") or []
        line = f"{repo}{item['path']}"
        if cites:
            names = [c.split(" :: ", 1)[-1] + ":" + c.split(" :: ", 1)[0].rsplit(":", 1)[-1] for c in cites]
            shown = names[:BRIEF_FILE_UNITS]
            more = f" +{len(names) - len(shown)} more" if len(names) > len(shown) else ""
            line += f" — {', '.join(shown)}{more}"
        if item.get("history"):
            line += "\n    past commits like it: " + "; ".join(
                f'{h["commit"]} "{h["title"]}"' if h.get("title") else h["commit"] for h in item["history"]
            )
        if detail == "brief" or not item.get("symbols"):
            return line
        lines = [line]
        for s in item["symbols"]:
            lines.append(f"    {s['citation']}")
            if s.get("signature"):
                lines.append(f"        {_cut(s['signature'], 200)}")
            if s.get("docstring"):
                lines.append(f"        {s['docstring']}")
        return "\n".join(lines)
    why = f" — {item['why']}" if item.get("why") else ""
    sig = str(item.get("sig") or "")
    line = f"{repo}{item['citation']}{sig if sig.startswith('(') else f'  {sig}' if sig else ''}{why}"
    if detail == "brief":
        return line
    lines = [line]
    if item.get("signature"):
        lines.append(_indent(item["signature"]))
    if item.get("docstring"):
        lines.append(_indent(item["docstring"]))
    if "callers" in item:
        lines.append(f"    callers {item['callers']}, callees {item['callees']}")
    if detail == "full" and item.get("snippet"):
        lines += ["    ```", _indent(item["snippet"]), "    ```"]
        if item.get("snippet_note"):
            lines.append(f"    ({item['snippet_note']})")
    return "\n".join(lines)


def items_text(items: list[dict], detail: str = DEFAULT_DETAIL, *, with_repo: bool = False) -> str:
    sep = "\n" if detail == "brief" else "\n\n"
    return sep.join(item_text(it, detail, with_repo=with_repo) for it in items)


def retrieval_text(r, detail: str = DEFAULT_DETAIL, *, index=None, scope=None) -> str:
    """A ``Retrieval`` (or its ``retrieval_dict``) as text: a header line, notes, then one entry per result."""
    d = r if isinstance(r, dict) else retrieval_dict(r, detail, index=index, scope=scope)
    detail = d.get("detail", detail)
    items = d.get("results") or []
    several = len({it.get("repo") for it in items}) > 1
    noun = "files" if d.get("level") == "file" else "results"
    query = d.get("query") or ""
    query = _cut(query, QUERY_CHARS) if detail == "brief" else query
    head = f"{len(items)} {noun} for {query!r} ({d.get('mode')}, detail {detail})"
    parts = [head, *(f"note: {n}" for n in d.get("notes") or [])]
    if items:
        parts.append(items_text(items, detail, with_repo=several))
    else:
        parts.append("no matches in scope")
    return "\n".join(parts)


# ---------------------------------------------------------------------------------------------- grep, outline, symbol
def grep_match_text(m: dict, *, with_repo: bool = False) -> str:
    """One match of ``Index.grep`` as ``git grep -n`` prints it: ``path:line: text``, its context lines as
    ``path-line- text``."""
    where = f"{m['repo']}:{m['path']}" if with_repo and m.get("repo") else m["path"]
    before, after = m.get("before") or [], m.get("after") or []
    first = m["line"] - len(before)
    lines = [f"{where}-{first + i}- {t}" for i, t in enumerate(before)]
    lines.append(f"{where}:{m['line']}: {m['text']}")
    lines += [f"{where}-{m['line'] + 1 + i}- {t}" for i, t in enumerate(after)]
    return "\n".join(lines)


def grep_head(d: dict, shown: int | None = None) -> str:
    """The first line of a grep answer: what was searched and how many lines matched."""
    n = len(d.get("matches") or []) if shown is None else shown
    total = f"{d.get('total')}" + ("" if d.get("total_exact", True) else "+")
    how = ("literal" if d.get("fixed") else "regex") + (", ignoring case" if d.get("ignore_case") else "")
    paths = f" in {', '.join(d['paths'])}" if d.get("paths") else ""
    off = int(d.get("offset") or 0)
    files, scanned = d.get("files_matched"), d.get("files_scanned")
    head = f"grep {d.get('pattern')!r} ({how}){paths}: "
    if not d.get("total"):
        return head + f"no matching line ({scanned} file{'' if scanned == 1 else 's'} searched)"
    rng = f"{off + 1}-{off + n} of {total}" if n else f"none of {total} past offset {off}"
    return head + f"matching lines {rng}, in {files} file{'' if files == 1 else 's'} of {scanned} searched"


def grep_text(d: dict, *, with_repo: bool | None = None, more: str = "more: offset {}") -> str:
    """An ``Index.grep`` answer as text: a head line, the matches, what stopped a count, how to get more."""
    matches = d.get("matches") or []
    several = len({m.get("repo") for m in matches}) > 1 if with_repo is None else with_repo
    parts = [grep_head(d)]
    sep = "--" if any(m.get("before") or m.get("after") for m in matches) else None
    for i, m in enumerate(matches):
        if sep and i:
            parts.append(sep)
        parts.append(grep_match_text(m, with_repo=several))
    for c in d.get("cut") or []:
        parts.append(f"note: {c}")
    if d.get("next_offset") is not None:
        parts.append(more.format(d["next_offset"]))
    return "\n".join(parts)


def outline_unit_text(u: dict) -> str:
    """One unit of ``Index.outline``: ``start-end qualname: signature · N callers``, indented by depth."""
    sig = " ".join(str(u.get("signature") or "").split())
    sig = sig if len(sig) <= 200 else sig[:199] + "…"
    n = u.get("callers")
    callers = f" · {n} caller{'' if n == 1 else 's'}" if isinstance(n, int) else ""
    return f"{'  ' * int(u.get('depth') or 0)}{u['start_line']}-{u['end_line']} {u['qualname']}: {sig}{callers}"


def outline_head(d: dict, total: int | None = None, *, with_repo: bool = False) -> str:
    n = len(d.get("units") or []) if total is None else total
    where = f"{d['repo']}:{d['path']}" if d.get("repo") and with_repo else d.get("path")
    if not d.get("language"):
        return f"outline {where}: not an indexed file in scope"
    return f"outline {where} ({d['language']}): {n} unit{'' if n == 1 else 's'}" + (
        f"; cite as {d.get('path')}:start-end :: qualname" if n else ""
    )


def outline_text(d: dict) -> str:
    """An ``Index.outline`` answer as text: a head line, then one line per unit in line order."""
    parts = [outline_head(d), *(outline_unit_text(u) for u in d.get("units") or [])]
    if d.get("hint"):
        parts.append(f"note: {d['hint']}")
    return "\n".join(parts)


def symbol_match_text(m: dict, *, body: bool = True, with_repo: bool = False) -> str:
    """One definition of ``Index.symbol``: its citation and kind, then its whole text (``body``) or its
    signature."""
    repo = f"{m['repo']}:" if with_repo and m.get("repo") else ""
    head = f"{repo}{m['citation']} ({m.get('kind')})"
    text = m.get("text") if body else None
    if text is None:
        return f"{head}\n{' '.join(str(m.get('signature') or '').split())}"
    out = f"{head}\n{text}"
    if m.get("text_note"):
        out += f"\n({m['text_note']})"
    return out


def symbol_head(d: dict) -> str:
    total, n = d.get("total", 0), len(d.get("matches") or [])
    if not n:
        return f"symbol {d.get('name')!r}: no definition"
    return f"symbol {d.get('name')!r}: definitions 1-{n} of {total}"


def symbol_text(d: dict, *, body: bool = True) -> str:
    """An ``Index.symbol`` answer as text: every definition listed (none guessed), then the hint."""
    matches = d.get("matches") or []
    several = len({m.get("repo") for m in matches}) > 1
    notes = [f"note: {d['hint']}"] if d.get("hint") else []
    if d.get("did_you_mean"):
        notes.append(f"did you mean: {', '.join(d['did_you_mean'])}")
    head = "\n".join([symbol_head(d), *notes])
    return ("\n\n" if body else "\n").join(
        [head, *(symbol_match_text(m, body=body, with_repo=several) for m in matches)]
    )
