"""The MCP server's text: token budgets, the text of each tool's result, errors.

Search hits are shaped by ``repoctx.render`` (the one renderer every surface shares); this module adds what
a protocol answer needs around them: headers and paging footers, the status and reindex reports, and the
counting that keeps a result inside the server's token budget."""

from __future__ import annotations

import json
import time
from typing import Any

from repoctx import render as shared


def count(text: str) -> int:
    """Tokens of ``text`` as every budget in repoctx counts them (``repoctx.providers.embedding.count_tokens``)."""
    from repoctx.providers.embedding import count_tokens

    return count_tokens(text)


def counts(texts: list[str]) -> list[int]:
    """Token counts of many texts (one parallel batch when the tokenizer allows it)."""
    try:
        from repoctx.providers.embedding import _counting_tokenizer

        tok = _counting_tokenizer()
        short = [t for t in texts if len(t) <= 20_000]
        if len(short) == len(texts):
            return [len(e.ids) for e in tok.encode_batch(texts, add_special_tokens=False)]
    except Exception:  # noqa: BLE001 - fall back to the public counter
        pass
    return [count(t) for t in texts]


def fits(text: str, budget: int) -> bool:
    """A WordPiece token covers at least one character, so a text no longer than the budget always fits."""
    return len(text) <= budget or count(text) <= budget


def to_json(d: Any) -> str:
    return json.dumps(d, ensure_ascii=False, separators=(",", ":"), default=str)


def clip(text: str, budget: int, note: str = "\n[... clipped to the token budget]") -> str:
    """The longest prefix of ``text`` (cut at a line end when possible) within ``budget`` tokens."""
    if count(text) <= budget:
        return text
    room = max(budget - count(note), 1)
    lo, hi = 0, len(text)
    while lo < hi:  # the longest prefix that fits
        mid = (lo + hi + 1) // 2
        if count(text[:mid]) <= room:
            lo = mid
        else:
            hi = mid - 1
    cut = text[:lo]
    nl = cut.rfind("\n")
    if nl > len(cut) // 2:
        cut = cut[:nl]
    return cut + note


def render_item(tool: str, item: Any, detail: str = shared.DEFAULT_DETAIL, several: bool = False) -> str:
    """One item of a paged list as text (``several``: more than one repository is served, so name it)."""
    if tool == "search_code":
        return shared.item_text(item, detail or shared.DEFAULT_DETAIL, with_repo=several)
    if tool == "symbol":
        return shared.symbol_match_text(item, with_repo=several)
    if tool == "outline":
        return shared.outline_unit_text(item)
    if tool in ("callers", "callees"):
        if not item.get("resolved"):
            return f"- {item.get('name')}  (not defined in the indexed code; called from {item.get('of')})"
        rel = "calls" if tool == "callers" else "called by"
        return f"- {item['citation']}  ({item.get('kind')}; {rel} {item.get('of')})"
    return f"- {item}"


def header(tool: str, d: dict, shown: tuple[int, int], total: int) -> str:
    a, b = shown
    rng = f"{a}-{b} of {total}" if total else "none"
    if tool == "search_code":
        lines = [
            f"search_code {d.get('query')!r}: {rng} ({d.get('level')}, {d.get('mode')}, "
            f"detail {d.get('detail') or shared.DEFAULT_DETAIL}); cite as given (path:start-end :: qualname)"
        ]
    elif tool == "symbol":
        lines = [
            f"symbol {d.get('name')!r}: definitions {a}-{b} of {d.get('total', total)}"
            if total
            else f"symbol {d.get('name')!r}: no definition"
        ]
        if d.get("hint"):
            lines.append(f"note: {d['hint']}")
        if d.get("did_you_mean"):
            lines.append(f"did you mean: {', '.join(d['did_you_mean'])}")
    elif tool == "outline":
        lines = [shared.outline_head(d, total) + (f"; units {rng}" if total and (a > 1 or b < total) else "")]
        if d.get("hint"):
            lines.append(f"note: {d['hint']}")
    elif tool in ("callers", "callees"):
        resolved = ", ".join(d.get("resolved") or []) or "nothing"
        lines = [f"{tool} of {d.get('symbol')!r} (resolved to {resolved}): {rng}."]
    elif tool == "list_files":
        lines = [f"list_files {d.get('glob')!r}: files {rng}."]
    else:
        lines = [f"{tool}: {rng}."]
    for n in d.get("notes") or []:
        lines.append(f"note: {n}")
    if d.get("note"):
        lines.append(f"note: {d['note']}")
    return "\n".join(lines)


def footer(tool: str, cursor: str | None) -> str:
    if not cursor:
        return ""
    return f'next_cursor: {cursor}\n(more: call {tool} again with the same arguments and cursor="{cursor}")'


def render_plain(tool: str, d: dict) -> str:
    if tool == "get_context":
        lines = [f"get_context ({d.get('task')}, {d.get('tokens')}/{d.get('budget')} tokens):", "", d.get("text", "")]
        if d.get("citations"):
            lines += ["", "citations:", *(f"- {c}" for c in d["citations"])]
        if d.get("note"):
            lines.append(f"note: {d['note']}")
        return "\n".join(lines)
    if tool == "index_status":
        return "\n".join(render_status(r) for r in d.get("repos", []))
    if tool == "reindex":
        return "\n".join(render_report(r) for r in d.get("reports", []))
    return f"{tool}:\n" + json.dumps(d, indent=1, ensure_ascii=False, default=str)


def _when(ts: float | None) -> str:
    return time.strftime("%Y-%m-%d %H:%M:%S", time.localtime(ts)) if ts else "never"


def _changes(d: dict, suffix: str = "") -> str:
    parts = []
    for k in ("added", "modified", "deleted"):
        n = d.get(f"{k}_count", d.get(k)) if suffix == "" else d.get(k)
        paths = d.get(f"{k}{suffix}") or []
        n = n if isinstance(n, int) else len(paths)
        if n:
            more = f", +{n - len(paths)} more" if n > len(paths) else ""
            parts.append(f"{n} {k} ({', '.join(paths)}{more})" if paths else f"{n} {k}")
    return "; ".join(parts) or "no changes"


def render_status(r: dict) -> str:
    name = r.get("repo")
    if r.get("building"):
        head = f"{name}: being indexed for the first time (background)"
    elif r.get("fresh") is None:
        head = f"{name}: indexed (files not on this machine: freshness not checked)"
    else:
        head = f"{name}: {'fresh' if r.get('fresh') else 'STALE'}"
        head += f", indexed {_when(r.get('indexed_at'))}"
        if r.get("indexed_git_head"):
            head += f" at git {str(r['indexed_git_head'])[:12]}"
    lines = [head]
    c = r.get("counts") or {}
    if c:
        lines.append("  " + ", ".join(f"{v} {k}" for k, v in c.items()))
    v = r.get("vectors")
    if isinstance(v, dict):
        if not v.get("enabled"):
            vec = "off (lexical search only)"
        else:
            vec = f"{v.get('model')} " + (f"{v['count']}/{v['total']} " if "count" in v else "")
            vec += f"({100 * float(v.get('coverage') or 0):.0f}% of units)"
        lines.append(f"  vectors: {vec}" + (f"; error {v['error']}" if v.get("error") else ""))
    if r.get("fresh") is False and not r.get("building"):
        lines.append(f"  changed since the index: {_changes(r)}")
    rf = r.get("refresh") or {}
    state = "running" if rf.get("running") else f"last check {_when(rf.get('last_check'))}"
    if rf.get("last_update"):
        u = rf["last_update"]
        state += f"; last refresh {_when(u.get('at'))} ({u.get('reason')}): {_changes(u, '_paths')}"
    if rf.get("error"):
        state += f"; error: {rf['error']}"
    lines.append(f"  background refresh: {state}")
    w = r.get("watch")
    if isinstance(w, dict) and w.get("note"):
        lines.append(f"  watch: {w['note']}")
    if r.get("note"):
        lines.append(f"  note: {r['note']}")
    return "\n".join(lines)


def render_report(r: dict) -> str:
    from repoctx.indexer import describe_no_change

    changes = _changes(r, "_paths")
    if changes == "no changes":  # say what an earlier refresh (this process's or another's) applied, and when
        changes = describe_no_change(r.get("previous_change"), counts="added" in (r.get("previous_change") or {}))
    line = f"{r.get('repo')}: reindexed in {r.get('seconds')}s: {changes}"
    if "files_seen" in r:
        line += f"; {r['files_seen']} files seen, {r['capsules_written']} units written"
    if r.get("vectors"):
        line += f"; vectors {r['vectors']}"
    for n in r.get("notes") or []:
        line += f"\n  note: {n}"
    return line


def render_error(d: dict) -> str:
    return f"{d.get('tool')} failed ({d.get('error')}): {d.get('detail')}"


def _cut_to_fit(item: dict, field: str, render, room: int) -> int:
    """Cuts item[field] to its first lines (a third fewer at a time, one at the least) until both render(item) and
    item as JSON fit ``room`` tokens; returns how many lines it kept."""
    lines = item[field].split("\n")
    while (
        len(lines) > 1
        and max(count(render({**item, field: "\n".join(lines)})), count(to_json({**item, field: "\n".join(lines)})))
        > room
    ):
        lines = lines[: max(1, len(lines) * 2 // 3)]
    item[field] = "\n".join(lines)
    return len(lines)


def shrink(item: Any, room: int) -> Any:
    """One result shortened to fit ``room`` tokens: a search hit's snippet or a definition's body cut."""
    if isinstance(item, dict) and item.get("text") and "citation" in item:  # a definition (symbol)
        item = dict(item)
        kept = _cut_to_fit(item, "text", shared.symbol_match_text, room)
        item["text_note"] = (
            f"body cut to its first {kept} lines to fit the token budget; read_file "
            f"{item.get('path')} from line {item.get('start_line', 1) + kept} for the rest"
        )
        return item
    if not isinstance(item, dict) or not item.get("snippet"):
        return item
    item = dict(item)
    kept = _cut_to_fit(item, "snippet", lambda x: shared.item_text(x, "full"), room)
    item["snippet_note"] = (
        f"snippet cut to {kept} lines to fit the token budget; read_file "
        f"{item.get('path')} lines {item.get('start_line')}-{item.get('end_line')} for the rest"
    )
    return item
