"""repoctx as an MCP server: the copilot's tools for Claude Code, Cursor and any MCP client.

``build_server(repos, settings, scope_for_key=None)`` returns the official SDK's ``MCPServer`` with the tools
``search_code``, ``get_context``, ``find_symbol``, ``callers``, ``callees``, ``read_file``, ``list_files``,
``index_status`` and ``reindex``. Each read calls the one implementation, ``repoctx.copilot.tools.RepoTools``,
under the caller's ``Scope``; this module adds what a protocol server needs on top:

* **Bounded outputs.** A result's text rendering and its structured content each stay within a token budget
  (``max_tokens``, default 20,000, counted with ``repoctx.embed.count_tokens``; some clients refuse results
  over 25,000). Long lists (search results, definitions, callers, files) and file lines are split into pages:
  the result carries ``next_cursor``, and the same call with ``cursor=<next_cursor>`` returns the next page.
  A cursor is opaque (tool, a hash of the arguments, an offset): it is stateless, so it survives restarts,
  and a cursor used with other arguments is refused rather than misapplied.
* **Starts fast.** Opening an existing index does no indexing and loads no embedding model; a freshness check
  runs in a background thread on start and again at most once a minute when a tool is called. A stale index
  is refreshed incrementally in that thread (lexical index and graph; vectors too once the model is loaded,
  or by ``reindex``); ``index_status`` reports freshness and the refresh's state. An unindexed repository is
  indexed in the background and the tools say so until it is ready.
* **Errors** are MCP tool errors (``isError``) whose text names the reason; the structured content is
  RepoTools' ``{"error", "detail", "tool"}``.
* **HTTP** (streamable HTTP, served by uvicorn): every request needs ``Authorization: Bearer KEY``; the key's
  ``Scope`` (from ``scope_for_key``) is what RepoTools reads through, so a restricted key never sees
  restricted paths; no key or an unknown key is answered 401 before any MCP handling.

Several repositories: ``--repo`` repeated. With a shared store (``REPOCTX_INDEX_DIR`` or
``REPOCTX_DATABASE_URL``) one view reads them all; otherwise each repository's own index is read and the
results are merged. Tools then take an optional ``repo`` argument (default: all of them; ``get_context`` needs
one when it would be ambiguous).

Without explicit settings the server resolves them as every command does (``repoctx.index.resolve_settings``):
the store and embedder ``repoctx index`` used for these repositories, even when the client passes none of the
user's REPOCTX_* variables.

Entry points: ``build_server``, ``http_app``, ``mcp_command`` (the ``repoctx mcp`` command),
``register(app)`` (adds that command to a Typer app) and ``python -m repoctx.mcp_server``.
"""
from __future__ import annotations

import base64
import binascii
import hashlib
import hmac
import inspect
import json
import logging
import os
import threading
import time
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Annotated, Any, Callable, Literal, Optional

import typer
from mcp.server.mcpserver import Context, MCPServer
from mcp_types import CallToolResult, TextContent, ToolAnnotations
from pydantic import Field

from repoctx.config import ConfigError, Settings
from repoctx.copilot.tools import MAX_K, RepoTools
from repoctx.index import Index, open_store, resolve_settings
from repoctx.store.base import EVERYTHING, IndexBusy, SchemaMismatch, Scope, StoreError

__all__ = ["build_server", "http_app", "mcp_command", "register", "RepoctxMCP", "ScopeForKey", "keys_file_scope_for_key",
           "service_scope_for_key", "DEFAULT_MAX_TOKENS", "TOOLS"]

log = logging.getLogger("repoctx.mcp")

DEFAULT_MAX_TOKENS = 20_000
MIN_MAX_TOKENS = 200
REFRESH_INTERVAL = 60.0  # seconds between freshness checks noticed by tool calls
LIST_PREVIEW = 20  # changed paths shown by index_status / reindex
TOOLS = ("search_code", "get_context", "find_symbol", "callers", "callees", "read_file", "list_files",
         "index_status", "reindex")
PAGED = {"search_code": "results", "find_symbol": "definitions", "callers": "callers", "callees": "callees",
         "list_files": "files"}

ScopeForKey = Callable[[str], Optional[Scope]]
"""An API key -> the Scope its principal may read, or None for an unknown (or revoked) key."""


class _Refusal(Exception):
    """An error result built before RepoTools is reached (unknown repo, bad cursor, not indexed yet)."""

    def __init__(self, tool: str, code: str, detail: str):
        super().__init__(detail)
        self.result = {"error": code, "detail": detail, "tool": tool}


def _is_error(d: Any) -> bool:
    return isinstance(d, dict) and "error" in d and "detail" in d and "tool" in d


# ---------------------------------------------------------------------------------------------- tokens
def _count(text: str) -> int:
    from repoctx.embed import count_tokens

    return count_tokens(text)


def _counts(texts: list[str]) -> list[int]:
    """Token counts of many texts (one parallel batch when the tokenizer allows it)."""
    try:
        from repoctx.embed import _counting_tokenizer

        tok = _counting_tokenizer()
        short = [t for t in texts if len(t) <= 20_000]
        if len(short) == len(texts):
            return [len(e.ids) for e in tok.encode_batch(texts, add_special_tokens=False)]
    except Exception:  # noqa: BLE001 - fall back to the public counter
        pass
    return [_count(t) for t in texts]


def _fits(text: str, budget: int) -> bool:
    """A WordPiece token covers at least one character, so a text no longer than the budget always fits."""
    return len(text) <= budget or _count(text) <= budget


def _json(d: Any) -> str:
    return json.dumps(d, ensure_ascii=False, separators=(",", ":"), default=str)


def _clip(text: str, budget: int, note: str = "\n[... clipped to the token budget]") -> str:
    """The longest prefix of ``text`` (cut at a line end when possible) within ``budget`` tokens."""
    if _count(text) <= budget:
        return text
    room = max(budget - _count(note), 1)
    lo, hi = 0, len(text)
    while lo < hi:  # the longest prefix that fits
        mid = (lo + hi + 1) // 2
        if _count(text[:mid]) <= room:
            lo = mid
        else:
            hi = mid - 1
    cut = text[:lo]
    nl = cut.rfind("\n")
    if nl > len(cut) // 2:
        cut = cut[:nl]
    return cut + note


# ---------------------------------------------------------------------------------------------- cursors
def _args_hash(tool: str, args: dict) -> str:
    return hashlib.blake2b(_json([tool, args]).encode(), digest_size=6).hexdigest()


def _encode_cursor(tool: str, h: str, offset: int) -> str:
    raw = _json({"t": tool, "h": h, "o": offset}).encode()
    return base64.urlsafe_b64encode(raw).decode().rstrip("=")


def _decode_cursor(tool: str, h: str, cursor: str) -> int:
    cursor = (cursor or "").strip()
    if not cursor:
        return 0
    try:
        data = json.loads(base64.urlsafe_b64decode(cursor + "=" * (-len(cursor) % 4)))
        t, ch, off = data["t"], data["h"], int(data["o"])
    except (ValueError, KeyError, TypeError, binascii.Error):
        raise _Refusal(tool, "invalid_argument", "cursor is not a cursor this server issued: pass next_cursor "
                                                  "from the previous result unchanged, or leave it empty") from None
    if t != tool:
        raise _Refusal(tool, "invalid_argument", f"this cursor belongs to {t}, not {tool}")
    if ch != h or off < 0:
        raise _Refusal(tool, "invalid_argument", "this cursor belongs to a call with other arguments: repeat the "
                                                  "previous call's arguments with it, or leave cursor empty")
    return off


# ---------------------------------------------------------------------------------------------- rendering
def _render_search_item(i: int, r: dict) -> str:
    if "citation" not in r:  # file level
        lines = [f"[{i}] {r.get('repo') + ':' if r.get('repo') and r.get('_several') else ''}{r['path']}"
                 f"  (score {r.get('score')})"]
        lines += [f"    - {c}" for c in r.get("citations", [])]
        return "\n".join(lines)
    head = f"[{i}] {r['citation']}  ({r.get('kind')}, score {r.get('score')})"
    if r.get("_several") and r.get("repo"):
        head += f"  repo {r['repo']}"
    lines = [head]
    if r.get("signature"):
        lines.append(f"    {r['signature']}")
    if r.get("docstring"):
        lines.append("    " + r["docstring"].replace("\n", "\n    "))
    if r.get("snippet"):
        lines += ["    ```", *("    " + ln for ln in r["snippet"].split("\n")), "    ```"]
    if r.get("snippet_note"):
        lines.append(f"    ({r['snippet_note']})")
    return "\n".join(lines)


def _render_item(tool: str, i: int, item: Any) -> str:
    if tool == "search_code":
        return _render_search_item(i, item)
    if tool == "find_symbol":
        s = f"- {item['citation']}  ({item.get('kind')})"
        if item.get("signature"):
            s += f"\n    {item['signature']}"
        if item.get("docstring"):
            s += "\n    " + item["docstring"].split("\n")[0]
        return s
    if tool in ("callers", "callees"):
        if not item.get("resolved"):
            return f"- {item.get('name')}  (not defined in the indexed code; called from {item.get('of')})"
        rel = "calls" if tool == "callers" else "called by"
        return f"- {item['citation']}  ({item.get('kind')}; {rel} {item.get('of')})"
    return f"- {item}"


def _header(tool: str, d: dict, shown: tuple[int, int], total: int) -> str:
    a, b = shown
    rng = f"{a}-{b} of {total}" if total else "none"
    if tool == "search_code":
        lines = [f"search_code {d.get('query')!r}: results {rng} (level {d.get('level')}, mode {d.get('mode')}). "
                 "Cite as given: path:start-end :: qualname."]
    elif tool == "find_symbol":
        lines = [f"find_symbol {d.get('name')!r}: definitions {rng}."]
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


def _footer(tool: str, cursor: str | None) -> str:
    if not cursor:
        return ""
    return (f"next_cursor: {cursor}\n(more: call {tool} again with the same arguments and cursor=\"{cursor}\")")


def _render_plain(tool: str, d: dict) -> str:
    if tool == "get_context":
        lines = [f"get_context ({d.get('task')}, {d.get('tokens')}/{d.get('budget')} tokens):", "", d.get("text", "")]
        if d.get("citations"):
            lines += ["", "citations:", *(f"- {c}" for c in d["citations"])]
        if d.get("note"):
            lines.append(f"note: {d['note']}")
        return "\n".join(lines)
    if tool == "index_status":
        return "\n".join(_render_status(r) for r in d.get("repos", []))
    if tool == "reindex":
        return "\n".join(_render_report(r) for r in d.get("reports", []))
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


def _render_status(r: dict) -> str:
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
    if r.get("note"):
        lines.append(f"  note: {r['note']}")
    return "\n".join(lines)


def _render_report(r: dict) -> str:
    from repoctx.indexer import describe_no_change

    changes = _changes(r, '_paths')
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


def _render_error(d: dict) -> str:
    return f"{d.get('tool')} failed ({d.get('error')}): {d.get('detail')}"


# ---------------------------------------------------------------------------------------------- state
@dataclass
class _Repo:
    name: str
    index: Index | None  # the repository on this machine (status, update); None: only in the shared store
    unit: int  # which read view serves it
    lock: threading.Lock = field(default_factory=threading.Lock)
    building: bool = False  # first index in progress
    last_check: float | None = None
    last_fresh: bool | None = None
    last_update: dict | None = None
    error: str | None = None


class RepoctxMCP:
    """What the MCP tools do, independent of the protocol: repositories, views, scopes, pages, refreshes."""

    def __init__(self, repos: list[Path | str], settings: Settings | None = None, *,
                 max_tokens: int = DEFAULT_MAX_TOKENS, refresh: bool = True,
                 refresh_interval: float = REFRESH_INTERVAL):
        self.settings = settings or resolve_settings(r for r in repos if Path(r).is_dir())
        if max_tokens < MIN_MAX_TOKENS:
            raise ValueError(f"max_tokens must be at least {MIN_MAX_TOKENS}, not {max_tokens}")
        self.max_tokens = int(max_tokens)
        self.refresh_interval = refresh_interval
        self.repos: dict[str, _Repo] = {}
        self.views: list[Index] = []
        self._refresh_enabled = refresh
        self._refresh_lock = threading.Lock()
        self._refresh_thread: threading.Thread | None = None
        self._last_tick = 0.0
        self._open(list(repos) or [Path(".")])
        if refresh:
            self._start_refresh("start")

    # ---------------------------------------------------------------- opening
    def _open(self, specs: list[Path | str]) -> None:
        s = self.settings
        shared = bool(s.database_url or s.index_dir) and len(specs) > 1
        names_only = [p for p in specs if not Path(p).is_dir()]
        if names_only and not (s.database_url or s.index_dir):
            raise StoreError(f"{names_only[0]} is not a directory (a repository name needs a shared store: set "
                             "REPOCTX_INDEX_DIR or REPOCTX_DATABASE_URL)")
        store = None
        if shared or names_only:
            first = next((Path(p).resolve() for p in specs if Path(p).is_dir()), None)
            try:
                store = open_store(s, first, create=False, long_lived=True)
            except SchemaMismatch:
                raise
            except StoreError:
                if names_only:
                    raise StoreError(f"no index at {s.database_url and 'REPOCTX_DATABASE_URL' or s.index_dir}: "
                                     f"repository {names_only[0]!r} is not indexed there") from None
                store = open_store(s, first, create=True, long_lived=True)
        for spec in specs:
            if Path(spec).is_dir():
                ix = self._open_root(Path(spec).resolve(), store)
                name = ix.repo
            else:
                rec = store.repo(str(spec))
                if rec is None:
                    raise StoreError(f"no repository named {spec!r} in the store (`repoctx repos` lists them)")
                name, ix = rec.name, None
                if rec.root and Path(rec.root).is_dir():
                    ix = Index(Path(rec.root), s, store=store, create=False)
            if name in self.repos:
                continue
            self.repos[name] = _Repo(name, ix, 0)
        if store is not None:
            names = tuple(self.repos)
            only = next(iter(self.repos.values()))
            self.views = [only.index if len(names) == 1 and only.index is not None
                          else Index(settings=s, repos=names, store=store)]
        else:
            for i, r in enumerate(self.repos.values()):
                r.unit = i
                self.views.append(r.index)
        for r in self.repos.values():
            if r.index is not None and not r.index.indexed():
                r.building = True  # indexed by the first background refresh

    def _open_root(self, root: Path, store) -> Index:
        try:
            return Index(root, self.settings, store=store, create=False)
        except SchemaMismatch:
            raise
        except StoreError:  # no index yet: create it empty, the background refresh builds it
            return Index(root, self.settings, store=store, create=True)

    @property
    def several(self) -> bool:
        return len(self.repos) > 1

    def close(self) -> None:
        t = self._refresh_thread
        if t is not None:
            t.join(timeout=30)
        seen = set()
        for ix in [*self.views, *(r.index for r in self.repos.values() if r.index is not None)]:
            if id(ix.store) not in seen:
                seen.add(id(ix.store))
                try:
                    ix.store.close()
                except Exception:  # noqa: BLE001 - closing is best effort
                    pass

    # ---------------------------------------------------------------- freshness
    def tick(self) -> None:
        """Called by every tool: start a background freshness check when the last is a minute old."""
        if not self._refresh_enabled:
            return
        now = time.monotonic()
        if now - self._last_tick >= self.refresh_interval:
            self._start_refresh("tool call")

    def _start_refresh(self, reason: str) -> None:
        if not self._refresh_enabled:
            return
        with self._refresh_lock:
            if self._refresh_thread is not None and self._refresh_thread.is_alive():
                return
            self._last_tick = time.monotonic()
            self._refresh_thread = threading.Thread(target=self._refresh_all, args=(reason,), daemon=True,
                                                    name="repoctx-mcp-refresh")
            self._refresh_thread.start()

    def wait_refresh(self, timeout: float | None = None) -> None:
        t = self._refresh_thread
        if t is not None:
            t.join(timeout)

    def _model_loaded(self, r: _Repo) -> bool:
        for ix in (r.index, self.views[r.unit]):
            emb = getattr(ix, "_embedder", None)
            if emb is not None and getattr(emb, "loaded", True):
                if r.index is not None and r.index._embedder is None:
                    r.index._embedder = emb  # share the loaded model with the repository's writer
                return True
        return False

    def _refresh_all(self, reason: str) -> None:
        from repoctx.indexer import stale_files

        for r in list(self.repos.values()):
            ix = r.index
            if ix is None or not r.lock.acquire(blocking=False):
                continue
            try:
                if r.building or not ix.indexed():
                    fresh = False
                else:
                    st = stale_files(ix.root, ix.store.writer(ix.repo), self.settings)
                    fresh = bool(st["fresh"])
                r.last_check, r.last_fresh = time.time(), fresh
                if not fresh:
                    t0 = time.time()
                    first = r.building or not ix.indexed()
                    # vectors: on a first build, or once a search has loaded the model (never loaded just for this)
                    rep = ix.update(wait=False, embed=first or self._model_loaded(r), background=True,
                                    by="background refresh of the MCP server")
                    r.building = False
                    r.last_update = {"at": t0, "reason": reason, **_report_summary(rep, ix.repo, EVERYTHING)}
                    r.last_fresh = True
                r.error = None
            except IndexBusy:
                r.error = "another process is indexing this repository; the refresh will be retried"
            except Exception as e:  # noqa: BLE001 - reads keep working on the last index
                r.error = f"{type(e).__name__}: {e}"
                log.warning("refresh of %s failed: %s", r.name, r.error)
            finally:
                r.lock.release()

    # ---------------------------------------------------------------- scopes and targets
    def _visible(self, scope: Scope) -> list[str]:
        return [n for n in self.repos if scope.allows_repo(n)]

    def _resolve_repo(self, tool: str, repo: str, scope: Scope) -> str:
        repo = (repo or "").strip()
        visible = self._visible(scope)
        if repo in visible:
            return repo
        if repo and Path(repo).is_dir():  # a path names the repository indexed from it
            root = str(Path(repo).resolve())
            for n in visible:
                ix = self.repos[n].index
                if ix is not None and str(ix.root) == root:
                    return n
        raise _Refusal(tool, "unknown_repo", f"no repository {repo!r} here; repositories: "
                                             f"{', '.join(visible) or 'none visible to this key'}")

    def _targets(self, tool: str, repo: str, scope: Scope) -> list[tuple[Index, Scope, list[str]]]:
        """(view, narrowed scope, repository names) for each view a call reads."""
        if (repo or "").strip():
            name = self._resolve_repo(tool, repo, scope)
            self._check_ready(tool, [name])
            return [(self.views[self.repos[name].unit], replace(scope, repos=(name,)), [name])]
        visible = self._visible(scope)
        if not visible:
            raise _Refusal(tool, "unknown_repo", "no repository is visible to this key")
        self._check_ready(tool, visible)
        out = []
        for u, view in enumerate(self.views):
            names = [n for n in visible if self.repos[n].unit == u]
            if names:
                out.append((view, replace(scope, repos=tuple(names)), names))
        return out

    def _check_ready(self, tool: str, names: list[str]) -> None:
        building = [n for n in names if self.repos[n].building]
        if building and not self._refresh_enabled:
            raise _Refusal(tool, "not_indexed", f"{', '.join(building)} is not indexed: call reindex (or run "
                                                "`repoctx index` on it), then try again")
        if building:
            raise _Refusal(tool, "not_indexed", f"{', '.join(building)} is being indexed for the first time; "
                                                "call index_status to follow it, then try again")

    # ---------------------------------------------------------------- tools
    def call(self, tool: str, args: dict, scope: Scope | None = None) -> dict:
        """Run one tool under ``scope``: the (paged, budgeted) result dict, or an error dict."""
        scope = scope or EVERYTHING
        self.tick()
        try:
            if tool == "index_status":
                return self._fit_plain(tool, self._status(args.get("repo", ""), scope))
            if tool == "reindex":
                return self._fit_plain(tool, self._reindex(args.get("repo", ""), scope))
            args = dict(args)
            repo = args.pop("repo", "") or ""
            cursor = args.pop("cursor", "") or ""
            h = _args_hash(tool, {**args, "repo": repo})
            offset = _decode_cursor(tool, h, cursor)
            if tool == "read_file":
                return self._read_file(args, repo, scope, h, offset)
            if tool == "get_context":
                return self._get_context(args, repo, scope)
            if tool in PAGED:
                full = self._gather(tool, args, repo, scope)
                if _is_error(full):
                    return full
                return self._page(tool, full, PAGED[tool], offset, h)
            return {"error": "unknown_tool", "detail": f"no tool {tool!r}; tools: {', '.join(TOOLS)}", "tool": tool}
        except _Refusal as e:
            return e.result
        except Exception as e:  # noqa: BLE001 - a failure is a tool error with its reason, never a crash
            log.warning("%s failed: %s: %s", tool, type(e).__name__, e)
            return RepoTools(self.views[0])._error(tool, type(e).__name__, str(e) or type(e).__name__)

    def _gather(self, tool: str, args: dict, repo: str, scope: Scope) -> dict:
        """One RepoTools call per view, merged into one result (the full, unpaged list)."""
        targets = self._targets(tool, repo, scope)
        if tool in ("callers", "callees"):
            args = {**args, "limit": 0}  # every one of them: pages carry what one result cannot
        results = [getattr(RepoTools(view, sc), tool)(**args) for view, sc, _ in targets]
        if len(results) == 1:
            out = results[0]
            if tool == "list_files" and self.several and not _is_error(out) and len(targets[0][2]) == 1 \
                    and len(self.views) > 1:
                out["files"] = [f"{targets[0][2][0]}:{p}" for p in out["files"]]
            return out
        errors = [r for r in results if _is_error(r)]
        if errors and len(errors) == len(results):
            return errors[0]
        ok = [(r, t) for r, t in zip(results, targets) if not _is_error(r)]
        key = PAGED[tool]
        base = dict(ok[0][0])
        items: list = []
        for r, (_, _, names) in ok:
            got = r.get(key) or []
            if tool == "list_files" and len(names) == 1:
                got = [f"{names[0]}:{p}" for p in got]
            items += got
        if tool == "search_code":
            items.sort(key=lambda x: -float(x.get("score") or 0.0))
            items = items[:int(args.get("k", 10))]
            base["notes"] = list(dict.fromkeys(n for r, _ in ok for n in r.get("notes", [])))
            if items:
                base["notes"] = [n for n in base["notes"] if not n.startswith("nothing found")]
        if tool in ("callers", "callees"):
            base["resolved"] = [c for r, _ in ok for c in r.get("resolved", [])]
            base["ambiguous"] = len(base["resolved"]) > 1
        if tool in ("find_symbol", "list_files"):
            base["truncated"] = any(r.get("truncated") for r, _ in ok)
        if tool == "list_files":
            base["total"] = sum(r.get("total", 0) for r, _ in ok)
        if items:
            base.pop("note", None)
        base[key] = items
        base["count"] = len(items)
        return base

    def _page(self, tool: str, full: dict, key: str, offset: int, h: str) -> dict:
        items = list(full.get(key) or [])
        total = len(items)
        if offset and offset >= total:
            raise _Refusal(tool, "invalid_argument", f"the cursor points past the last of {total} results")
        several_views = self.several
        if tool == "search_code" and several_views:
            for it in items:
                it["_several"] = True
        base = {k: v for k, v in full.items() if k != key}
        budget = self.max_tokens
        foot = _footer(tool, _encode_cursor(tool, h, 10 ** 6))
        head_text = _header(tool, base, (offset + 1, total), total)
        rest = items[offset:]
        texts = [_render_item(tool, offset + j + 1, it) for j, it in enumerate(rest)]
        jsons = [_json(it) for it in rest]
        fixed = max(len(head_text), len(_json(base))) + len(foot) + 200
        if fixed + max(sum(map(len, texts)) + len(texts), sum(map(len, jsons)) + len(jsons)) <= budget:
            page = list(rest)  # characters bound tokens: everything fits, nothing to count
        else:
            head_cost = max(_counts([head_text, _json(base)])) + _count(foot) + 48
            room = budget - head_cost
            page, used, j = [], 0, 0
            while j < len(rest):  # count in batches, greedily fill the page
                chunk = range(j, min(j + 16, len(rest)))
                costs = [max(a, b) + 2 for a, b in zip(_counts([texts[i] for i in chunk]),
                                                       _counts([jsons[i] for i in chunk]))]
                full_page = False
                for i, cost in zip(chunk, costs):
                    if used + cost > room:
                        if not page:  # one item alone is over the budget: shorten its snippet
                            page.append(_shrink(rest[i], room))
                        full_page = True
                        break
                    page.append(rest[i])
                    used += cost
                if full_page:
                    break
                j += 16
        while True:
            end = offset + len(page)
            cursor = _encode_cursor(tool, h, end) if end < total else None
            out = self._assemble(tool, base, page, key, offset, total, cursor)
            text = self._text_of(tool, out, page, offset, total, cursor)
            if (_fits(text, budget) and _fits(_json(out), budget)) or len(page) <= 1:
                break
            page = page[:-1]
        if not _fits(text, budget):
            text = _clip(text, budget)
        out["_text"] = text
        return out

    def _assemble(self, tool, base, page, key, offset, total, cursor) -> dict:
        out = dict(base)
        out[key] = [{k: v for k, v in it.items() if not k.startswith("_")} if isinstance(it, dict) else it
                    for it in page]
        out["count"] = len(page)
        out["total"] = total if tool != "list_files" else base.get("total", total)
        out["offset"] = offset
        out["next_cursor"] = cursor
        return out

    def _text_of(self, tool, out, page, offset, total, cursor) -> str:
        parts = [_header(tool, out, (offset + 1, offset + len(page)), total)]
        parts += [_render_item(tool, offset + j + 1, it) for j, it in enumerate(page)]
        if tool == "list_files" and out.get("truncated"):
            parts.append(f"(the index holds {out.get('total')} matching files; only the first {total} are listed: "
                         "narrow the glob)")
        foot = _footer(tool, cursor)
        if foot:
            parts.append(foot)
        return "\n".join(parts)

    def _fit_plain(self, tool: str, d: dict) -> dict:
        if _is_error(d):
            return d
        text = _render_plain(tool, d)
        if not _fits(text, self.max_tokens):
            text = _clip(text, self.max_tokens)
        d["_text"] = text
        return d

    def _get_context(self, args: dict, repo: str, scope: Scope) -> dict:
        targets = self._targets("get_context", repo, scope)
        if len(targets) > 1:
            names = [n for _, _, ns in targets for n in ns]
            raise _Refusal("get_context", "ambiguous", f"several repositories are served ({', '.join(names)}): "
                                                       "pass repo to choose one")
        view, sc, _ = targets[0]
        asked = args.get("budget", 2000)
        room = max(self.max_tokens * 3 // 4 - 200, 100)  # the rest: header, citations, note
        lowered = isinstance(asked, int) and not isinstance(asked, bool) and room < asked <= 16000
        if lowered:
            args = {**args, "budget": room}
        d = RepoTools(view, sc).get_context(**args)
        if _is_error(d):
            return d
        if lowered:
            d["note"] = (d.get("note", "") + f" budget lowered from {asked} to {room} tokens to fit this server's "
                                              f"result limit ({self.max_tokens})").strip()
        text = _render_plain("get_context", d)
        if not _fits(text, self.max_tokens) or not _fits(_json(d), self.max_tokens):
            d["text"] = _clip(d["text"], room)
            text = _clip(_render_plain("get_context", d), self.max_tokens)
        d["_text"] = text
        return d

    def _read_file(self, args: dict, repo: str, scope: Scope, h: str, offset: int) -> dict:
        if offset:
            args = {**args, "start": offset}
        path = args.get("path")
        if not repo and isinstance(path, str) and ":" in path and path.split(":", 1)[0] in self.repos:
            repo, args = path.split(":", 1)[0], {**args, "path": path.split(":", 1)[1]}
        targets = self._targets("read_file", repo, scope)
        results = []
        for view, sc, names in targets:
            kw = dict(args)
            if len(names) == 1 and (repo or len(self.views) > 1):
                kw["repo"] = names[0]
            results.append(RepoTools(view, sc).read_file(**kw))
        ok = [r for r in results if not _is_error(r)]
        if len(ok) > 1:
            where = ", ".join(r["repo"] for r in ok)
            return {"error": "ambiguous", "detail": f"{args.get('path')!r} is in several repositories ({where}): "
                                                    "pass repo", "tool": "read_file"}
        if not ok:
            errs = sorted(results, key=lambda r: r["error"] == "not_served")
            return errs[0]
        d = ok[0]
        return self._page_lines(d, args, h)

    def _page_lines(self, d: dict, args: dict, h: str) -> dict:
        lines = d["text"].split("\n") if d.get("text") else []
        start = d["start"]
        want_end = int(args.get("end") or 0) or d["total_lines"]
        budget = self.max_tokens
        head = f"read_file {d['repo']}:{d['path']} lines {{a}}-{{b}} of {d['total_lines']}"
        reserve = _count(_footer("read_file", _encode_cursor("read_file", h, 10 ** 7))) + 40
        meta_cost = _count(_json({k: v for k, v in d.items() if k != "text"})) + _count(head) + 20
        room = budget - reserve - meta_cost
        keep: list[str] = []
        if sum(len(ln) + len(_json(ln)) + 2 for ln in lines) <= room:
            keep = lines
        else:
            used = 0
            for j in range(0, len(lines), 64):
                chunk = lines[j:j + 64]
                costs = [max(a, b) + 1 for a, b in zip(_counts(chunk), _counts([_json(ln) for ln in chunk]))]
                stop = False
                for ln, c in zip(chunk, costs):
                    if used + c > room:
                        if not keep:
                            keep.append(_clip(ln, max(room // 2, 20), note=" [... line clipped]"))
                        stop = True
                        break
                    keep.append(ln)
                    used += c
                if stop:
                    break
        last = start + len(keep) - 1
        more = last < min(want_end, d["total_lines"])
        cursor = _encode_cursor("read_file", h, last + 1) if more else None
        out = dict(d)
        out["text"] = "\n".join(keep)
        out["end"] = last
        out["truncated"] = more
        out["symbols"] = [c for c in d.get("symbols", []) if _overlaps(c, start, last)]
        out["note"] = (f"lines {start}-{last} of {d['total_lines']}, numbered 'N| '; cite as "
                       f"{d['path']}:{start}-{last} :: <symbol> (or a citation from 'symbols')")
        if d.get("redactions"):
            out["note"] += "; secrets are shown as [REDACTED]"
        out["next_cursor"] = cursor
        parts = [head.format(a=start, b=last), out["text"]]
        if out["symbols"]:
            parts += ["symbols in this range:", *(f"- {c}" for c in out["symbols"])]
        parts.append(f"note: {out['note']}")
        if cursor:
            parts.append(_footer("read_file", cursor))
        text = "\n".join(parts)
        if not _fits(text, budget):
            text = _clip(text, budget)
        out["_text"] = text
        return out

    def _status(self, repo: str, scope: Scope) -> dict:
        names = [self._resolve_repo("index_status", repo, scope)] if (repo or "").strip() else self._visible(scope)
        if not names:
            raise _Refusal("index_status", "unknown_repo", "no repository is visible to this key")
        out = []
        for n in names:
            r = self.repos[n]
            item: dict[str, Any] = {"repo": n}
            if r.building:
                item.update(indexed=False, fresh=False, building=True,
                            note="being indexed for the first time in the background")
            elif r.index is None:
                view = self.views[r.unit]
                item.update(indexed=True, fresh=None, counts=view.store.counts(replace(scope, repos=(n,))),
                            note="the files are not on this machine: freshness is not checked")
            else:
                st = r.index.status()
                for k in ("added", "modified", "deleted"):
                    paths = [p for p in st.get(k, []) if scope.allows(n, p)]
                    st[k] = paths[:LIST_PREVIEW]
                    st[f"{k}_count"] = len(paths)
                st["counts"] = r.index.store.counts(replace(scope, repos=(n,)))
                if not scope.unrestricted and isinstance(st.get("vectors"), dict):  # totals would count hidden units
                    st["vectors"] = {k: st["vectors"].get(k) for k in ("enabled", "model", "coverage", "current")}
                item.update(st)
                item["root"] = str(r.index.root) if scope.unrestricted else None
                if not st.get("fresh"):
                    item["note"] = ("changed since the last index: an incremental refresh runs in the background "
                                    "(at most once a minute); reindex refreshes now")
                    self._start_refresh("stale status")
            item["refresh"] = {"running": bool(self._refresh_thread and self._refresh_thread.is_alive()),
                               "last_check": r.last_check, "last_update": _scoped_update(r.last_update, n, scope),
                               "error": r.error}
            out.append(item)
        return {"repos": out, "max_tokens": self.max_tokens}

    def _reindex(self, repo: str, scope: Scope) -> dict:
        names = [self._resolve_repo("reindex", repo, scope)] if (repo or "").strip() else self._visible(scope)
        if not names:
            raise _Refusal("reindex", "unknown_repo", "no repository is visible to this key")
        reports = []
        for n in names:
            r = self.repos[n]
            if r.index is None:
                raise _Refusal("reindex", "unavailable", f"the files of {n!r} are not on this machine")
            with r.lock:  # waits for a background refresh of the same repository
                try:
                    rep = r.index.update(wait=False, embed=True, background=True, by="MCP reindex")
                except IndexBusy:
                    raise _Refusal("reindex", "busy", f"another process is indexing {n!r}; try again shortly") \
                        from None
                r.building = False
                r.last_check, r.last_fresh = time.time(), True
                summary = _report_summary(rep, n, EVERYTHING)
                r.last_update = {"at": time.time(), "reason": "reindex", **summary}
                r.error = None
            item = _report_summary(rep, n, scope)
            item["vectors"] = ("filling in the background" if r.index.embedder is not None else "off (lexical only)")
            reports.append(item)
        return {"reports": reports}


def _overlaps(citation: str, a: int, b: int) -> bool:
    try:
        rng = citation.split(" :: ", 1)[0].rsplit(":", 1)[1]
        s, e = (int(x) for x in rng.split("-"))
        return s <= b and e >= a
    except (IndexError, ValueError):
        return True


def _report_summary(rep, repo: str, scope: Scope) -> dict:
    out: dict[str, Any] = {"repo": repo}
    for k in ("added", "modified", "deleted"):
        paths = [p for p in getattr(rep, k) if scope.allows(repo, p)]
        out[k] = len(paths)
        out[f"{k}_paths"] = paths[:LIST_PREVIEW]
    out.update(files_seen=rep.files_seen, unchanged=rep.unchanged, capsules_written=rep.capsules_written,
               seconds=round(rep.seconds, 3), notes=list(rep.notes))
    prev = getattr(rep, "previous_change", None)
    if prev:
        out["previous_change"] = dict(prev)
    if not scope.unrestricted:  # counts over every file would tell a restricted key what it cannot see
        out.pop("files_seen")
        out.pop("unchanged")
        out.pop("capsules_written")
        if prev:
            out["previous_change"] = {k: prev.get(k) for k in ("at", "by")}
    return out


def _scoped_update(u: dict | None, repo: str, scope: Scope) -> dict | None:
    if u is None or scope.unrestricted:
        return u
    out = {k: v for k, v in u.items() if k not in ("files_seen", "unchanged", "capsules_written")}
    for k in ("added", "modified", "deleted"):
        paths = [p for p in u.get(f"{k}_paths", []) if scope.allows(repo, p)]
        out[f"{k}_paths"] = paths
        out[k] = len(paths)
    if u.get("previous_change"):  # its counts are over every file
        out["previous_change"] = {k: u["previous_change"].get(k) for k in ("at", "by")}
    return out


def _shrink(item: Any, room: int) -> Any:
    """One search result shortened to fit ``room`` tokens (its snippet cut)."""
    if not isinstance(item, dict) or not item.get("snippet"):
        return item
    item = dict(item)
    lines = item["snippet"].split("\n")
    while len(lines) > 1 and max(_count(_render_search_item(1, {**item, "snippet": "\n".join(lines)})),
                                 _count(_json({**item, "snippet": "\n".join(lines)}))) > room:
        lines = lines[: max(1, len(lines) * 2 // 3)]
    item["snippet"] = "\n".join(lines)
    item["snippet_note"] = (f"snippet cut to {len(lines)} lines to fit the token budget; read_file "
                            f"{item.get('path')} lines {item.get('start_line')}-{item.get('end_line')} for the rest")
    return item


# ---------------------------------------------------------------------------------------------- MCP
_READ = ToolAnnotations(read_only_hint=True, destructive_hint=False, idempotent_hint=True, open_world_hint=False)
_WRITE = ToolAnnotations(read_only_hint=False, destructive_hint=False, idempotent_hint=True, open_world_hint=False)

Repo = Annotated[str, Field(description="Repository name (index_status lists them); empty: all of them.")]
Cursor = Annotated[str, Field(description="next_cursor from the previous page of the same call; empty for the "
                                          "first page.")]


def _to_result(d: dict) -> CallToolResult:
    if _is_error(d):
        return CallToolResult(content=[TextContent(type="text", text=_render_error(d))], structured_content=d,
                              is_error=True)
    text = d.pop("_text", None) or _render_plain("result", d)
    return CallToolResult(content=[TextContent(type="text", text=text)], structured_content=d)


def _principal_scope(ctx: Context | None, scope_for_key: ScopeForKey | None, scopes: dict) -> Scope:
    """The caller's scope: everything over stdio; over HTTP the scope of the key the request was
    authenticated with (the bearer middleware has already refused requests without a valid key)."""
    if scope_for_key is None:
        return EVERYTHING
    req = None
    try:
        req = ctx.request_context.request if ctx is not None else None
    except Exception:  # noqa: BLE001 - outside a request: no principal
        req = None
    user = req.scope.get("user") if req is not None and hasattr(req, "scope") else None
    token = getattr(user, "access_token", None)
    scope = scopes.get(token.client_id) if token is not None else None
    if scope is None:
        raise PermissionError("this request carries no authenticated key")
    return scope


def build_server(repos: list[Path], settings: Settings | None = None, scope_for_key: ScopeForKey | None = None, *,
                 max_tokens: int | None = None, refresh: bool = True, name: str = "repoctx") -> MCPServer:
    """The MCP server for ``repos`` (paths, or names in a shared store). With ``scope_for_key`` the server
    requires a bearer key over HTTP and reads through that key's Scope; without it, it serves everything (stdio).
    The repoctx state is ``server.repoctx`` (a ``RepoctxMCP``)."""
    settings = settings or resolve_settings(r for r in repos if Path(r).is_dir())
    if max_tokens is None:
        env = os.environ.get("REPOCTX_MCP_MAX_TOKENS", "").strip()
        max_tokens = int(env) if env else DEFAULT_MAX_TOKENS
    state = RepoctxMCP([Path(r) if not isinstance(r, Path) else r for r in repos], settings,
                       max_tokens=max_tokens, refresh=refresh)
    scopes: dict[str, Scope] = {}
    kw: dict[str, Any] = {}
    if scope_for_key is not None:
        from mcp.server.auth.settings import AuthSettings

        # bearer keys checked by the SDK's middleware (401 before MCP handling); no OAuth endpoints are served
        kw = dict(auth=AuthSettings(issuer_url="http://127.0.0.1", resource_server_url=None),
                  token_verifier=_KeyVerifier(scope_for_key, scopes))
    names = "the indexed repositories" if scope_for_key is not None else ", ".join(state.repos)
    server = _Server(name, instructions=(
        f"repoctx: indexed code search over {names}. Start with search_code (or find_symbol for a known name), "
        "follow callers/callees, read_file to check details, get_context for compact context. Every result cites "
        "code as 'path:start-end :: qualname': quote those citations. Results are paged: pass next_cursor back "
        "as cursor for more."), log_level="WARNING", **kw)
    server.repoctx = state  # type: ignore[attr-defined]
    server.repoctx_auth = scope_for_key is not None  # type: ignore[attr-defined]
    several = state.several

    def run(tool: str, ctx: Context | None, **args) -> CallToolResult:
        try:
            scope = _principal_scope(ctx, scope_for_key, scopes)
        except PermissionError as e:
            return _to_result({"error": "unauthorized", "detail": str(e), "tool": tool})
        return _to_result(state.call(tool, args, scope))

    def search_code(query: Annotated[str, Field(description="What to look for, in words or identifiers, e.g. "
                                                            "'where is the CSRF token verified'.")],
                    k: Annotated[int, Field(description=f"How many results in all, 1 to {MAX_K}.")] = 10,
                    level: Annotated[Literal["symbol", "file"], Field(
                        description="'symbol': functions/classes; 'file': the best files with their units.")] = "symbol",
                    mode: Annotated[Literal["auto", "standard", "agentic"], Field(
                        description="'auto' lets the router decide; 'agentic' plans sub-queries for multi-part "
                                    "questions.")] = "auto",
                    repo: Repo = "", cursor: Cursor = "", ctx: Context = None) -> CallToolResult:
        """Search the indexed code for a question or a name; call it first. Returns the best functions, methods and
        classes with their citations 'path:start-end :: qualname', signatures, docstrings and first lines of code.
        Quote citations exactly as given. More results than fit the output budget come in pages (next_cursor)."""
        return run("search_code", ctx, query=query, k=k, level=level, mode=mode, repo=repo, cursor=cursor)

    def get_context(query: Annotated[str, Field(description="The question or task in words.")],
                    task: Annotated[Literal["", "code_query", "refactor", "code_gen", "search"], Field(
                        description="What the context is for; empty lets repoctx pick.")] = "",
                    budget: Annotated[int, Field(description="Maximum tokens of context, 100 to 16000.")] = 2000,
                    repo: Repo = "", ctx: Context = None) -> CallToolResult:
        """Compact, ready-to-read context for a question: the relevant code with its callers, callees and layout,
        compressed to a token budget, with the citations it contains. Use it when search snippets are not enough."""
        return run("get_context", ctx, query=query, task=task, budget=budget, repo=repo)

    def find_symbol(name: Annotated[str, Field(description="A function, method or class name, plain or qualified "
                                                           "(e.g. 'connect' or 'app.db.Pool.connect').")],
                    repo: Repo = "", cursor: Cursor = "", ctx: Context = None) -> CallToolResult:
        """Where a symbol is defined: every definition with its citation, kind, signature and docstring."""
        return run("find_symbol", ctx, name=name, repo=repo, cursor=cursor)

    def callers(symbol: Annotated[str, Field(description="A qualified name, a plain name, or a capsule id from an "
                                                         "earlier result.")],
                repo: Repo = "", cursor: Cursor = "", ctx: Context = None) -> CallToolResult:
        """The functions and methods that call a symbol, each with its citation and the definition it calls."""
        return run("callers", ctx, symbol=symbol, repo=repo, cursor=cursor)

    def callees(symbol: Annotated[str, Field(description="A qualified name, a plain name, or a capsule id from an "
                                                         "earlier result.")],
                repo: Repo = "", cursor: Cursor = "", ctx: Context = None) -> CallToolResult:
        """What a function or method calls: citations of callees defined in the repository, names of the others."""
        return run("callees", ctx, symbol=symbol, repo=repo, cursor=cursor)

    def read_file(path: Annotated[str, Field(description="Repository-relative path, e.g. 'src/app/db.py' (no "
                                                         "absolute paths, no '..').")],
                  start: Annotated[int, Field(description="First line, from 1.")] = 1,
                  end: Annotated[int, Field(description="Last line; 0 means to the end of the file.")] = 0,
                  repo: Repo = "", cursor: Cursor = "", ctx: Context = None) -> CallToolResult:
        """Read numbered lines of an indexed file (secrets shown as [REDACTED]) with the citations of the symbols in
        that range. Only files the index serves in your scope can be read. Long ranges come in pages
        (next_cursor)."""
        return run("read_file", ctx, path=path, start=start, end=end, repo=repo, cursor=cursor)

    def list_files(glob: Annotated[str, Field(description="A path pattern; '*' also matches '/', so '*.py' finds "
                                                          "Python files at any depth.")] = "*",
                   repo: Repo = "", cursor: Cursor = "", ctx: Context = None) -> CallToolResult:
        """List the indexed files in your scope whose path matches a glob."""
        return run("list_files", ctx, glob=glob, repo=repo, cursor=cursor)

    def index_status(repo: Repo = "", ctx: Context = None) -> CallToolResult:
        """The state of each repository's index: fresh or stale (files changed since it was built), counts, dense
        vector coverage, and the background refresh."""
        return run("index_status", ctx, repo=repo)

    def reindex(repo: Repo = "", ctx: Context = None) -> CallToolResult:
        """Refresh the index now, incrementally (only changed files); vectors fill in the background. Returns what
        changed."""
        return run("reindex", ctx, repo=repo)

    fns = [search_code, get_context, find_symbol, callers, callees, read_file, list_files, index_status, reindex]
    for fn in fns:
        tool = _without_repo(fn) if not several else fn
        server.add_tool(tool, description=inspect.cleandoc(fn.__doc__ or ""),
                        annotations=_WRITE if fn.__name__ == "reindex" else _READ)
        server.repoctx_params[fn.__name__] = tuple(n for n in inspect.signature(tool).parameters if n != "ctx")
    return server


class _Server(MCPServer):
    """The SDK's server, refusing arguments a tool does not take: the SDK drops them silently, so
    ``repo="nope"`` sent to a one-repository server would answer from that repository as if asked."""

    def __init__(self, *args, **kwargs):
        super().__init__(*args, **kwargs)
        self.repoctx_params: dict[str, tuple[str, ...]] = {}

    async def call_tool(self, name: str, arguments: dict[str, Any], context: Context | None = None):
        known = self.repoctx_params.get(name)
        unknown = sorted(set(arguments or {}) - set(known)) if known is not None else []
        if unknown:
            return _to_result(_unknown_arguments(name, unknown, known, self.repoctx))
        return await super().call_tool(name, arguments, context)


def _unknown_arguments(tool: str, unknown: list[str], known: tuple[str, ...], state: RepoctxMCP) -> dict:
    names = ", ".join(repr(a) for a in unknown)
    detail = f"{tool} takes no argument {names}; its arguments: {', '.join(known) or 'none'}"
    if "repo" in unknown and not state.several:
        detail += f" (this server serves one repository, {next(iter(state.repos))!r}: leave repo out)"
    return {"error": "invalid_argument", "detail": detail, "tool": tool, "arguments": unknown}


def _without_repo(fn: Callable) -> Callable:
    """``fn`` as a tool without its ``repo`` parameter (one repository: nothing to choose)."""
    sig = inspect.signature(fn, eval_str=True)
    params = [p for n, p in sig.parameters.items() if n != "repo"]

    def tool(**kwargs):
        return fn(**kwargs)

    tool.__name__ = fn.__name__
    tool.__qualname__ = fn.__qualname__
    tool.__doc__ = fn.__doc__
    tool.__signature__ = sig.replace(parameters=params)  # type: ignore[attr-defined]
    tool.__annotations__ = {p.name: p.annotation for p in params} | {"return": sig.return_annotation}
    return tool


class _KeyVerifier:
    """The SDK's TokenVerifier over ``scope_for_key``: a known key becomes an AccessToken whose client id is a
    hash of the key (the SDK binds each HTTP session to it), and its Scope is kept for the tools."""

    def __init__(self, scope_for_key: ScopeForKey, scopes: dict[str, Scope]):
        self.scope_for_key = scope_for_key
        self.scopes = scopes

    async def verify_token(self, token: str):
        import anyio
        from mcp.server.auth.provider import AccessToken

        if not token:
            return None
        try:
            scope = await anyio.to_thread.run_sync(self.scope_for_key, token)
        except Exception as e:  # noqa: BLE001 - an auth backend failure refuses the request
            log.warning("key check failed: %s", type(e).__name__)
            return None
        if scope is None:
            return None
        if not isinstance(scope, Scope):  # a Principal (repoctx.service.auth) carries its scope
            scope = getattr(scope, "scope", None)
            if not isinstance(scope, Scope):
                return None
        client_id = hashlib.sha256(token.encode()).hexdigest()[:24]
        self.scopes[client_id] = scope
        return AccessToken(token=token, client_id=client_id, scopes=[])


def http_app(server: MCPServer, host: str = "127.0.0.1", path: str = "/mcp"):
    """The streamable HTTP ASGI app (Starlette) of a server built with ``scope_for_key``; serve it with uvicorn.
    Its lifespan runs the SDK's session manager."""
    if not getattr(server, "repoctx_auth", False):
        raise ValueError("HTTP needs API keys: build the server with scope_for_key")
    return server.streamable_http_app(host=host, streamable_http_path=path)


# ---------------------------------------------------------------------------------------------- keys
def keys_file_scope_for_key(path: str | Path) -> ScopeForKey:
    """Keys from a JSON file ``{"KEY": null | "admin" | {"repos": [...], "include": [...], "exclude": [...],
    "grants": [{"repo", "include", "exclude"}, ...]}}``; compared in constant time."""
    from repoctx.store.base import Grant
    from repoctx.store.globs import GlobError

    data = json.loads(Path(path).read_text(encoding="utf-8"))
    if not isinstance(data, dict):
        raise ConfigError(f"{path}: expected an object of key -> scope")
    table: list[tuple[bytes, Scope]] = []

    def listed(v) -> tuple:
        # one string is one entry: tuple("secret/*") would be eight one-character patterns, an exclude of nothing
        return (v,) if isinstance(v, str) else tuple(v or ())

    for n, (key, spec) in enumerate(data.items(), 1):
        if not spec or spec == "admin":
            sc = EVERYTHING
        else:
            grants = spec.get("grants")
            try:
                sc = Scope(repos=listed(spec.get("repos")), include=listed(spec.get("include")),
                           exclude=listed(spec.get("exclude")),
                           grants=None if grants is None else tuple(
                               Grant(g.get("repo", "*"), listed(g.get("include")), listed(g.get("exclude")))
                               for g in grants))
            except GlobError as e:  # (the key itself is a secret: named by its place in the file)
                raise ConfigError(f"{path}: key #{n}: {e}") from None
        table.append((hashlib.sha256(key.encode()).digest(), sc))

    def scope_for_key(key: str) -> Scope | None:
        d = hashlib.sha256((key or "").encode()).digest()
        found = None
        for h, sc in table:
            if hmac.compare_digest(h, d):
                found = sc
        return found

    return scope_for_key


def service_scope_for_key(settings: Settings, root: Path | None = None) -> ScopeForKey:
    """The HTTP service's keys (``repoctx keys add``): ``KeyStore.authenticate(key).scope``, from the service
    database beside the index (``REPOCTX_DATABASE_URL`` or ``<index dir>/service.sqlite``)."""
    from repoctx.service.auth import KeyStore

    try:
        from repoctx.service.db import service_db_target
    except ImportError:  # an older service module: the same rule, spelled here
        service_db_target = None
    if service_db_target is not None:
        target = service_db_target(settings)
    else:
        target = settings.database_url or str(settings.index_dir_for(root or Path(".").resolve()) / "service.sqlite")
    ks = KeyStore(target, roles_file=os.environ.get("REPOCTX_ROLES") or None)

    def scope_for_key(key: str) -> Scope | None:
        p = ks.authenticate(key)
        return p.scope if p is not None else None

    return scope_for_key


# ---------------------------------------------------------------------------------------------- CLI
def mcp_command(
        transport: str = typer.Option("stdio", "--transport", help="stdio (local agents) | http (streamable HTTP)"),
        repo: list[str] = typer.Option([], "--repo", "-r", help="Repository path, or a name in a shared store "
                                                                 "(repeatable; default .)"),
        host: str = typer.Option("127.0.0.1", "--host", help="HTTP: interface to listen on."),
        port: int = typer.Option(8765, "--port", help="HTTP: port."),
        max_tokens: Optional[int] = typer.Option(None, "--max-tokens", min=MIN_MAX_TOKENS,
                                                 help=f"Token budget of one result (default {DEFAULT_MAX_TOKENS}, "
                                                      "or REPOCTX_MCP_MAX_TOKENS)."),
        keys: Optional[Path] = typer.Option(None, "--keys", help="HTTP: a JSON file of API keys -> scopes (default: "
                                                                 "the service's keys, `repoctx keys add`)."),
        no_refresh: bool = typer.Option(False, "--no-refresh", help="Never refresh the index in the background."),
):
    """Serve repoctx's tools over MCP (Claude Code, Cursor, any MCP client)."""
    err = lambda m: typer.echo(f"error: {m}", err=True)  # noqa: E731 - stdout belongs to the protocol
    if transport not in ("stdio", "http"):
        err("--transport must be stdio or http")
        raise typer.Exit(2)
    paths: list[Path | str] = [Path(r) if Path(r).is_dir() else r for r in (repo or ["."])]
    try:  # the store and embedder `repoctx index` and `repoctx search` would use for these repositories
        settings = resolve_settings(p for p in paths if isinstance(p, Path))
    except ConfigError as e:
        err(str(e))
        raise typer.Exit(2)
    scope_for_key = None
    if transport == "http":
        try:
            if keys is not None or os.environ.get("REPOCTX_MCP_KEYS"):
                scope_for_key = keys_file_scope_for_key(keys or os.environ["REPOCTX_MCP_KEYS"])
            else:
                first = next((Path(p).resolve() for p in paths if isinstance(p, Path)), None)
                scope_for_key = service_scope_for_key(settings, first)
        except (OSError, ValueError, ImportError, RuntimeError) as e:
            err(f"cannot load API keys: {e} (or pass --keys FILE)")
            raise typer.Exit(2)
    try:
        server = build_server(paths, settings, scope_for_key, max_tokens=max_tokens, refresh=not no_refresh)
    except SchemaMismatch as e:
        err(str(e))
        raise typer.Exit(1)
    except (StoreError, FileNotFoundError, ValueError) as e:
        err(str(e))
        raise typer.Exit(1)
    if transport == "stdio":
        server.run("stdio")
        return
    import uvicorn

    typer.echo(f"repoctx MCP on http://{host}:{port}/mcp (Authorization: Bearer KEY)", err=True)
    uvicorn.run(http_app(server, host=host), host=host, port=port, log_level="warning")


def register(app: typer.Typer) -> None:
    """Add ``mcp`` to a Typer app (the repoctx CLI calls this)."""
    app.command("mcp")(mcp_command)


def main() -> None:
    app = typer.Typer(add_completion=False)
    app.command()(mcp_command)
    app()


if __name__ == "__main__":
    main()
