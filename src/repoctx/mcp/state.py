"""What the MCP tools do, independent of the protocol: ``RepoctxMCP`` holds the repositories, their read
views and scopes, the background refresh, and the paging of every list under the server's token budget.

Pages are cut with an opaque cursor (tool, a hash of the arguments, an offset): stateless, so it survives
restarts, and a cursor used with other arguments is refused rather than misapplied."""

from __future__ import annotations

import base64
import binascii
import hashlib
import json
import logging
import threading
import time
import weakref
from collections.abc import Set as AbstractSet
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

from repoctx import render as shared
from repoctx.config import Settings
from repoctx.copilot.tools import RepoTools
from repoctx.index import Index, open_store, resolve_settings
from repoctx.mcp import render as mr
from repoctx.store.base import EVERYTHING, IndexBusy, SchemaMismatch, Scope, StoreError
from repoctx.watch import TreeWatcher

log = logging.getLogger("repoctx.mcp")

DEFAULT_MAX_TOKENS = 20_000
MIN_MAX_TOKENS = 200
REFRESH_INTERVAL = 60.0  # seconds between freshness checks noticed by tool calls (trees not watched)
BUSY_RETRY = 2.0  # seconds before a watched change is applied again when another process was indexing
LIST_PREVIEW = 20  # changed paths shown by index_status / reindex
TOOLS = (
    "search_code",
    "get_context",
    "symbol",
    "grep",
    "outline",
    "callers",
    "callees",
    "read_file",
    "list_files",
    "index_status",
    "reindex",
)
PAGED = {
    "search_code": "results",
    "symbol": "matches",
    "outline": "units",
    "callers": "callers",
    "callees": "callees",
    "list_files": "files",
}
GREP_PAGE = 200  # matching lines asked of the library per grep call (then cut to the token budget)
SYMBOL_LIMIT = 25  # definitions symbol lists (in pages)


class Refusal(Exception):
    """An error result built before RepoTools is reached (unknown repo, bad cursor, not indexed yet)."""

    def __init__(self, tool: str, code: str, detail: str):
        super().__init__(detail)
        self.result = {"error": code, "detail": detail, "tool": tool}


def is_error(d: Any) -> bool:
    return isinstance(d, dict) and "error" in d and "detail" in d and "tool" in d


def _args_hash(tool: str, args: dict) -> str:
    return hashlib.blake2b(mr.to_json([tool, args]).encode(), digest_size=6).hexdigest()


def _encode_cursor(tool: str, h: str, offset: int) -> str:
    raw = mr.to_json({"t": tool, "h": h, "o": offset}).encode()
    return base64.urlsafe_b64encode(raw).decode().rstrip("=")


def _decode_cursor(tool: str, h: str, cursor: str) -> int:
    cursor = (cursor or "").strip()
    if not cursor:
        return 0
    try:
        data = json.loads(base64.urlsafe_b64decode(cursor + "=" * (-len(cursor) % 4)))
        t, ch, off = data["t"], data["h"], int(data["o"])
    except (ValueError, KeyError, TypeError, binascii.Error):
        raise Refusal(
            tool,
            "invalid_argument",
            "cursor is not a cursor this server issued: pass next_cursor "
            "from the previous result unchanged, or leave it empty",
        ) from None
    if t != tool:
        raise Refusal(tool, "invalid_argument", f"this cursor belongs to {t}, not {tool}")
    if ch != h or off < 0:
        raise Refusal(
            tool,
            "invalid_argument",
            "this cursor belongs to a call with other arguments: repeat the "
            "previous call's arguments with it, or leave cursor empty",
        )
    return off


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
    watcher: TreeWatcher | None = None  # the tree on this machine, watched while the server refreshes

    @property
    def watched(self) -> bool:
        return self.watcher is not None and self.watcher.watching


class RepoctxMCP:
    """What the MCP tools do, independent of the protocol: repositories, views, scopes, pages, refreshes."""

    def __init__(
        self,
        repos: list[Path | str],
        settings: Settings | None = None,
        *,
        max_tokens: int = DEFAULT_MAX_TOKENS,
        refresh: bool = True,
        refresh_interval: float = REFRESH_INTERVAL,
    ):
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
        self._refreshing = False  # a refresh thread is running, or about to (under _refresh_lock)
        self._changed: set[str] = set()  # repositories a watcher saw change, for the running or next refresh
        self._again: str | None = None  # a refresh asked while one ran: why (it runs again when done)
        self._last_tick = 0.0
        self._open(list(repos) or [Path(".")])
        if refresh:
            self._watch()
            self._start_refresh("start")  # checks each tree once its watch is on: no change falls between them

    # ---------------------------------------------------------------- opening
    def _open(self, specs: list[Path | str]) -> None:
        s = self.settings
        shared = bool(s.database_url or s.index_dir) and len(specs) > 1
        names_only = [p for p in specs if not Path(p).is_dir()]
        if names_only and not (s.database_url or s.index_dir):
            raise StoreError(
                f"{names_only[0]} is not a directory (a repository name needs a shared store: set "
                "REPOCTX_INDEX_DIR or REPOCTX_DATABASE_URL)"
            )
        store = None
        if shared or names_only:
            first = next((Path(p).resolve() for p in specs if Path(p).is_dir()), None)
            try:
                store = open_store(s, first, create=False, long_lived=True)
            except SchemaMismatch:
                raise
            except StoreError:
                if names_only:
                    raise StoreError(
                        f"no index at {(s.database_url and 'REPOCTX_DATABASE_URL') or s.index_dir}: "
                        f"repository {names_only[0]!r} is not indexed there"
                    ) from None
                store = open_store(s, first, create=True, long_lived=True)
        for spec in specs:
            if Path(spec).is_dir():
                ix = self._open_root(Path(spec).resolve(), store)
                name = ix.repo
            else:
                assert store is not None  # a name: the shared store was opened above
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
            self.views = [
                only.index
                if len(names) == 1 and only.index is not None
                else Index(settings=s, repos=names, store=store)
            ]
        else:
            for i, r in enumerate(self.repos.values()):
                assert r.index is not None  # every spec is a directory here: opened above
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
        for r in self.repos.values():
            if r.watcher is not None:
                r.watcher.stop()
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
    def _watch(self) -> None:
        """Watch each tree on this machine (repoctx.watch): a save is applied within seconds, and a watched tree
        needs no freshness check. A tree too big to watch (or REPOCTX_WATCH=0) keeps the check tool calls start."""
        ref = weakref.ref(self)  # the watcher threads must not keep a forgotten server alive

        for r in self.repos.values():
            if r.index is None or r.index.root is None:
                continue

            def changed(paths: list[str], name: str = r.name) -> None:
                state = ref()
                if state is not None:
                    state._start_refresh("watch", changed={name})

            r.watcher = TreeWatcher(r.index.root, self.settings, changed, name=r.name).start()
            weakref.finalize(self, r.watcher.stop, 0)

    def tick(self) -> None:
        """Called by every tool: start a background freshness check of the trees not watched when the last is a
        minute old (a watched tree is refreshed when it changes)."""
        if not self._refresh_enabled:
            return
        now = time.monotonic()
        if now - self._last_tick >= self.refresh_interval and not all(
            r.watched for r in self.repos.values() if r.index is not None
        ):
            self._start_refresh("tool call")

    def _start_refresh(self, reason: str, changed: set[str] | None = None) -> None:
        """Refresh in the background: the repositories in ``changed`` (seen changing by their watcher) are
        updated without a freshness check; the others are checked first, unless watched. A refresh asked while
        one runs runs again when it ends, so no change seen is left unapplied."""
        if not self._refresh_enabled:
            return
        with self._refresh_lock:
            self._changed |= changed or set()
            if self._refreshing:
                self._again = self._again or reason
                return
            self._refreshing = True
            self._last_tick = time.monotonic()
            self._refresh_thread = threading.Thread(
                target=self._refresh_loop, args=(reason,), daemon=True, name="repoctx-mcp-refresh"
            )
            self._refresh_thread.start()

    def _refresh_loop(self, reason: str) -> None:
        try:
            while True:
                with self._refresh_lock:
                    changed, self._changed, self._again = self._changed, set(), None
                self._refresh_all(reason, changed)
                with self._refresh_lock:
                    if self._again is None and not self._changed:
                        self._refreshing = False
                        return
                    reason = self._again or "watch"
        except BaseException:
            with self._refresh_lock:
                self._refreshing = False
            raise

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

    def _refresh_all(self, reason: str, changed: AbstractSet[str] = frozenset()) -> None:
        from repoctx.indexer import stale_files

        for r in list(self.repos.values()):
            ix = r.index
            seen = r.name in changed  # its watcher saw a change: apply it, waiting for a reindex that holds the lock
            if ix is None or ix.root is None or (not seen and r.watched and reason == "tool call"):
                continue
            if reason == "start" and r.watcher is not None:
                r.watcher.wait_ready(30)
            if not r.lock.acquire(blocking=seen):
                continue
            try:
                if r.building or not ix.indexed() or seen:
                    fresh = False
                else:
                    st = stale_files(ix.root, ix.store.writer(ix.repo), self.settings)
                    fresh = bool(st["fresh"])
                r.last_check, r.last_fresh = time.time(), fresh
                if not fresh:
                    t0 = time.time()
                    first = r.building or not ix.indexed()
                    # vectors: on a first build, or once a search has loaded the model (never loaded just for this)
                    rep = ix.update(
                        wait=False,
                        embed=first or self._model_loaded(r),
                        background=True,
                        by="background refresh of the MCP server",
                        # a cut git history goes further back at the server's start, not on a save's refresh
                        history_backfill=first or reason == "start",
                    )
                    r.building = False
                    if rep.changed or first:  # a save that changed no content keeps the last update's record
                        r.last_update = {"at": t0, "reason": reason, **_report_summary(rep, ix.repo, EVERYTHING)}
                    r.last_fresh = True
                r.error = None
            except IndexBusy:
                r.error = "another process is indexing this repository; the refresh will be retried"
                if seen:  # the change is not applied yet: try again shortly
                    threading.Timer(BUSY_RETRY, self._start_refresh, args=("watch", {r.name})).start()
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
        raise Refusal(
            tool,
            "unknown_repo",
            f"no repository {repo!r} here; repositories: {', '.join(visible) or 'none visible to this key'}",
        )

    def _named_or_visible(self, tool: str, repo: str, scope: Scope) -> list[str]:
        """The repository a call names, else every one visible to the key; refused when that is none."""
        names = [self._resolve_repo(tool, repo, scope)] if (repo or "").strip() else self._visible(scope)
        if not names:
            raise Refusal(tool, "unknown_repo", "no repository is visible to this key")
        return names

    def _targets(self, tool: str, repo: str, scope: Scope) -> list[tuple[Index, Scope, list[str]]]:
        """(view, narrowed scope, repository names) for each view a call reads."""
        if (repo or "").strip():
            name = self._resolve_repo(tool, repo, scope)
            self._check_ready(tool, [name])
            return [(self.views[self.repos[name].unit], replace(scope, repos=(name,)), [name])]
        visible = self._visible(scope)
        if not visible:
            raise Refusal(tool, "unknown_repo", "no repository is visible to this key")
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
            raise Refusal(
                tool,
                "not_indexed",
                f"{', '.join(building)} is not indexed: call reindex (or run `repoctx index` on it), then try again",
            )
        if building:
            raise Refusal(
                tool,
                "not_indexed",
                f"{', '.join(building)} is being indexed for the first time; "
                "call index_status to follow it, then try again",
            )

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
            if tool == "grep":
                return self._grep(args, repo, scope, h, offset)
            if tool == "get_context":
                return self._get_context(args, repo, scope)
            if tool in PAGED:
                full = self._gather(tool, args, repo, scope)
                if is_error(full):
                    return full
                return self._page(tool, full, PAGED[tool], offset, h)
            return {"error": "unknown_tool", "detail": f"no tool {tool!r}; tools: {', '.join(TOOLS)}", "tool": tool}
        except Refusal as e:
            return e.result
        except Exception as e:  # noqa: BLE001 - a failure is a tool error with its reason, never a crash
            log.warning("%s failed: %s: %s", tool, type(e).__name__, e)
            return RepoTools(self.views[0])._error(tool, type(e).__name__, str(e) or type(e).__name__)

    def _gather(self, tool: str, args: dict, repo: str, scope: Scope) -> dict:
        """One RepoTools call per view, merged into one result (the full, unpaged list)."""
        targets = self._targets(tool, repo, scope)
        if tool in ("callers", "callees"):
            args = {**args, "limit": 0}  # every one of them: pages carry what one result cannot
        if tool == "symbol":
            args = {**args, "limit": SYMBOL_LIMIT}
        if tool == "search_code" and len(targets) > 1:
            return self._search_views(args, targets)
        if tool == "outline" and len(targets) > 1:
            return self._outline_views(args, targets)
        results = [getattr(RepoTools(view, sc), tool)(**args) for view, sc, _ in targets]
        if len(results) == 1:
            out = results[0]
            if (
                tool == "list_files"
                and self.several
                and not is_error(out)
                and len(targets[0][2]) == 1
                and len(self.views) > 1
            ):
                out["files"] = [f"{targets[0][2][0]}:{p}" for p in out["files"]]
            return out
        errors = [r for r in results if is_error(r)]
        if errors and len(errors) == len(results):
            return errors[0]
        ok = [(r, t) for r, t in zip(results, targets, strict=True) if not is_error(r)]
        key = PAGED[tool]
        base = dict(ok[0][0])
        items: list = []
        for r, (_, _, names) in ok:
            got = r.get(key) or []
            if tool == "list_files" and len(names) == 1:
                got = [f"{names[0]}:{p}" for p in got]
            items += got
        if tool in ("callers", "callees"):
            base["resolved"] = [c for r, _ in ok for c in r.get("resolved", [])]
            base["ambiguous"] = len(base["resolved"]) > 1
        if tool == "symbol":
            base["total"] = sum(r.get("total", 0) for r, _ in ok)
            base["did_you_mean"] = sorted({n for r, _ in ok for n in r.get("did_you_mean") or []})[:10]
            base["hint"] = None if items else next((r["hint"] for r, _ in ok if r.get("hint")), None)
        if tool in ("symbol", "list_files"):
            base["truncated"] = any(r.get("truncated") for r, _ in ok)
        if tool == "list_files":
            base["total"] = sum(r.get("total", 0) for r, _ in ok)
        if items:
            base.pop("note", None)
        base[key] = items
        base["count"] = len(items)
        return base

    def _search_views(self, args: dict, targets: list) -> dict:
        """One search over several read views: each view's hits rendered with its own index (counts in its
        scope), merged by score, the best ``k`` kept."""
        scored: list[tuple[float, dict]] = []
        answers, errors = [], []
        for view, sc, _ in targets:
            rt = RepoTools(view, sc)
            got = rt.search_retrieval(**args)
            if is_error(got):
                errors.append(got)
                continue
            r, detail = got
            answer = rt.search_answer(r, detail)  # rendered once, with this view's index (counts in its scope)
            items = r.files if r.level == "file" else r.hits
            scored += zip((float(x.score) for x in items), answer["results"], strict=False)
            answers.append(answer)
        if not answers:
            return errors[0]
        scored.sort(key=lambda x: -x[0])
        out = answers[0]
        out["results"] = [d for _, d in scored[: out["k"]]]
        out["count"] = len(out["results"])
        out["notes"] = list(dict.fromkeys(n for a in answers for n in a.get("notes", [])))
        if out["results"]:
            out["notes"] = [n for n in out["notes"] if not n.startswith("nothing found")]
        return out

    def _outline_views(self, args: dict, targets: list) -> dict:
        """A file's outline when each repository has its own view: the one repository that holds the path."""
        results = [RepoTools(view, sc).outline(**args) for view, sc, _ in targets]
        ok = [r for r in results if not is_error(r)]
        held = [r for r in ok if r.get("units") or r.get("language")]
        if len(held) > 1:
            where = ", ".join(r["repo"] for r in held)
            return {
                "error": "ambiguous",
                "detail": f"{args.get('path')!r} is in several repositories ({where}): pass repo",
                "tool": "outline",
            }
        return held[0] if held else (ok[0] if ok else results[0])

    def _grep(self, args: dict, repo: str, scope: Scope, h: str, offset: int) -> dict:
        """Matching lines from ``offset`` on, as many as the token budget holds; the library pages (its offset),
        each view in turn when repositories have views of their own. The cursor carries the next offset."""
        targets = self._targets("grep", repo, scope)
        skip, room = offset, GREP_PAGE
        base: dict | None = None
        matches: list[dict] = []
        errors: list[dict] = []
        total, exact, scanned, matched, cut = 0, True, 0, 0, []
        for view, sc, _ in targets:
            d = RepoTools(view, sc).grep(**args, limit=max(room, 1), offset=skip)
            if is_error(d):
                errors.append(d)
                continue
            base = base or d
            if room > 0:
                take = d["matches"][:room]
                matches += take
                room -= len(take)
            skip = max(skip - d["total"], 0)
            total += d["total"]
            exact = exact and d["total_exact"]
            scanned += d["files_scanned"]
            matched += d["files_matched"]
            cut += d["cut"]
        if base is None:
            return errors[0]
        if offset and offset >= total and total:
            raise Refusal("grep", "invalid_argument", f"the cursor points past the last of {total} matching lines")
        out = {k: v for k, v in base.items() if k not in ("limit", "next_offset")}
        out.update(total=total, total_exact=exact, files_scanned=scanned, files_matched=matched, cut=cut, offset=offset)
        budget = self.max_tokens
        reserve = mr.count(mr.footer("grep", _encode_cursor("grep", h, 10**7))) + 60
        head_cost = (
            mr.count(mr.to_json({**out, "matches": []}))
            + mr.count(shared.grep_head(out))
            + sum(mr.count(f"note: {c}") for c in cut)
        )
        room_tokens = budget - reserve - head_cost
        several = self.several
        keep: list[dict] = []
        if (
            sum(len(shared.grep_match_text(m, with_repo=several)) + len(mr.to_json(m)) + 2 for m in matches)
            > room_tokens
        ):
            used = 0
            for j in range(0, len(matches), 32):
                chunk = matches[j : j + 32]
                costs = [
                    max(a, b) + 2
                    for a, b in zip(
                        mr.counts([shared.grep_match_text(m, with_repo=several) for m in chunk]),
                        mr.counts([mr.to_json(m) for m in chunk]),
                        strict=True,
                    )
                ]
                full = False
                for m, c in zip(chunk, costs, strict=True):
                    if used + c > room_tokens and keep:
                        full = True
                        break
                    keep.append(m)
                    used += c
                if full:
                    break
        else:
            keep = matches
        end = offset + len(keep)
        more = end < total
        cursor = _encode_cursor("grep", h, end) if more else None
        out["matches"] = keep
        out["count"] = len(keep)
        out["truncated"] = more or bool(cut)
        out["next_cursor"] = cursor
        text = shared.grep_text({**out, "next_offset": None}, with_repo=several)
        if cursor:
            text += "\n" + mr.footer("grep", cursor)
        if not mr.fits(text, budget):
            text = mr.clip(text, budget)
        out["_text"] = text
        return out

    def _page(self, tool: str, full: dict, key: str, offset: int, h: str) -> dict:
        items = list(full.get(key) or [])
        total = len(items)
        if offset and offset >= total:
            raise Refusal(tool, "invalid_argument", f"the cursor points past the last of {total} results")
        base = {k: v for k, v in full.items() if k != key}
        budget = self.max_tokens
        foot = mr.footer(tool, _encode_cursor(tool, h, 10**6))
        head_text = mr.header(tool, base, (offset + 1, total), total)
        rest = items[offset:]
        detail = base.get("detail") or shared.DEFAULT_DETAIL
        texts = [mr.render_item(tool, it, detail, self.several) for it in rest]
        jsons = [mr.to_json(it) for it in rest]
        fixed = max(len(head_text), len(mr.to_json(base))) + len(foot) + 200
        if fixed + max(sum(map(len, texts)) + len(texts), sum(map(len, jsons)) + len(jsons)) <= budget:
            page = list(rest)  # characters bound tokens: everything fits, nothing to count
        else:
            head_cost = max(mr.counts([head_text, mr.to_json(base)])) + mr.count(foot) + 48
            room = budget - head_cost
            page, used, j = [], 0, 0
            while j < len(rest):  # count in batches, greedily fill the page
                chunk = range(j, min(j + 16, len(rest)))
                costs = [
                    max(a, b) + 2
                    for a, b in zip(
                        mr.counts([texts[i] for i in chunk]), mr.counts([jsons[i] for i in chunk]), strict=True
                    )
                ]
                full_page = False
                for i, cost in zip(chunk, costs, strict=True):
                    if used + cost > room:
                        if not page:  # one item alone is over the budget: shorten its snippet
                            page.append(mr.shrink(rest[i], room))
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
            if (mr.fits(text, budget) and mr.fits(mr.to_json(out), budget)) or len(page) <= 1:
                break
            page = page[:-1]
        if not mr.fits(text, budget):
            text = mr.clip(text, budget)
        out["_text"] = text
        return out

    def _assemble(self, tool, base, page, key, offset, total, cursor) -> dict:
        out = dict(base)
        out[key] = [
            {k: v for k, v in it.items() if not k.startswith("_")} if isinstance(it, dict) else it for it in page
        ]
        out["count"] = len(page)
        out["total"] = total if tool not in ("list_files", "symbol") else base.get("total", total)
        out["offset"] = offset
        out["next_cursor"] = cursor
        return out

    def _text_of(self, tool, out, page, offset, total, cursor) -> str:
        parts = [mr.header(tool, out, (offset + 1, offset + len(page)), total)]
        parts += [mr.render_item(tool, it, out.get("detail") or shared.DEFAULT_DETAIL, self.several) for it in page]
        if tool == "symbol" and any(
            isinstance(it, dict) and "text" in it for it in page
        ):  # a blank line between bodies
            parts = [parts[0], "\n\n".join(parts[1:])] if len(parts) > 1 else parts
        if tool == "list_files" and out.get("truncated"):
            parts.append(
                f"(the index holds {out.get('total')} matching files; only the first {total} are listed: "
                "narrow the glob)"
            )
        foot = mr.footer(tool, cursor)
        if foot:
            parts.append(foot)
        return "\n".join(parts)

    def _fit_plain(self, tool: str, d: dict) -> dict:
        if is_error(d):
            return d
        text = mr.render_plain(tool, d)
        if not mr.fits(text, self.max_tokens):
            text = mr.clip(text, self.max_tokens)
        d["_text"] = text
        return d

    def _get_context(self, args: dict, repo: str, scope: Scope) -> dict:
        targets = self._targets("get_context", repo, scope)
        if len(targets) > 1:
            names = [n for _, _, ns in targets for n in ns]
            raise Refusal(
                "get_context",
                "ambiguous",
                f"several repositories are served ({', '.join(names)}): pass repo to choose one",
            )
        view, sc, _ = targets[0]
        asked = args.get("budget", 2000)
        room = max(self.max_tokens * 3 // 4 - 200, 100)  # the rest: header, citations, note
        lowered = isinstance(asked, int) and not isinstance(asked, bool) and room < asked <= 16000
        if lowered:
            args = {**args, "budget": room}
        d = RepoTools(view, sc).get_context(**args)
        if is_error(d):
            return d
        if lowered:
            d["note"] = (
                d.get("note", "") + f" budget lowered from {asked} to {room} tokens to fit this server's "
                f"result limit ({self.max_tokens})"
            ).strip()
        text = mr.render_plain("get_context", d)
        if not mr.fits(text, self.max_tokens) or not mr.fits(mr.to_json(d), self.max_tokens):
            d["text"] = mr.clip(d["text"], room)
            text = mr.clip(mr.render_plain("get_context", d), self.max_tokens)
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
        ok = [r for r in results if not is_error(r)]
        if len(ok) > 1:
            where = ", ".join(r["repo"] for r in ok)
            return {
                "error": "ambiguous",
                "detail": f"{args.get('path')!r} is in several repositories ({where}): pass repo",
                "tool": "read_file",
            }
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
        reserve = mr.count(mr.footer("read_file", _encode_cursor("read_file", h, 10**7))) + 40
        meta_cost = mr.count(mr.to_json({k: v for k, v in d.items() if k != "text"})) + mr.count(head) + 20
        room = budget - reserve - meta_cost
        keep: list[str] = []
        if sum(len(ln) + len(mr.to_json(ln)) + 2 for ln in lines) <= room:
            keep = lines
        else:
            used = 0
            for j in range(0, len(lines), 64):
                chunk = lines[j : j + 64]
                costs = [
                    max(a, b) + 1
                    for a, b in zip(mr.counts(chunk), mr.counts([mr.to_json(ln) for ln in chunk]), strict=True)
                ]
                stop = False
                for ln, c in zip(chunk, costs, strict=True):
                    if used + c > room:
                        if not keep:
                            keep.append(mr.clip(ln, max(room // 2, 20), note=" [... line clipped]"))
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
        out["note"] = (
            f"lines {start}-{last} of {d['total_lines']}, numbered 'N| '; cite as "
            f"{d['path']}:{start}-{last} :: <symbol> (or a citation from 'symbols')"
        )
        if d.get("redactions"):
            out["note"] += "; secrets are shown as [REDACTED]"
        out["next_cursor"] = cursor
        parts = [head.format(a=start, b=last), out["text"]]
        if out["symbols"]:
            parts += ["symbols in this range:", *(f"- {c}" for c in out["symbols"])]
        parts.append(f"note: {out['note']}")
        if cursor:
            parts.append(mr.footer("read_file", cursor))
        text = "\n".join(parts)
        if not mr.fits(text, budget):
            text = mr.clip(text, budget)
        out["_text"] = text
        return out

    def _status(self, repo: str, scope: Scope) -> dict:
        names = self._named_or_visible("index_status", repo, scope)
        out = []
        for n in names:
            r = self.repos[n]
            item: dict[str, Any] = {"repo": n}
            if r.building:
                item.update(
                    indexed=False, fresh=False, building=True, note="being indexed for the first time in the background"
                )
            elif r.index is None:
                view = self.views[r.unit]
                item.update(
                    indexed=True,
                    fresh=None,
                    counts=view.store.counts(replace(scope, repos=(n,))),
                    note="the files are not on this machine: freshness is not checked",
                )
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
                    item["note"] = (
                        "changed since the last index: an incremental refresh runs in the background "
                        + (
                            "(the tree is watched: within seconds of a change)"
                            if r.watched
                            else "(at most once a minute)"
                        )
                        + "; reindex refreshes now"
                    )
                    self._start_refresh("stale status")
            item["refresh"] = {
                "running": bool(self._refresh_thread and self._refresh_thread.is_alive()),
                "last_check": r.last_check,
                "last_update": _scoped_update(r.last_update, n, scope),
                "error": r.error,
            }
            item["watch"] = self._watch_status(r)
            out.append(item)
        return {"repos": out, "max_tokens": self.max_tokens}

    def _watch_status(self, r: _Repo) -> dict:
        if r.watcher is not None:
            return r.watcher.status()
        if r.index is None:
            note = "not watching: the files are not on this machine"
        elif not self._refresh_enabled:
            note = "not watching: this server does not refresh its index (--no-refresh)"
        else:
            note = "not watching"
        return {"watching": False, "state": "off", "note": note}

    def _reindex(self, repo: str, scope: Scope) -> dict:
        names = self._named_or_visible("reindex", repo, scope)
        reports = []
        for n in names:
            r = self.repos[n]
            if r.index is None:
                raise Refusal("reindex", "unavailable", f"the files of {n!r} are not on this machine")
            with r.lock:  # waits for a background refresh of the same repository
                try:
                    rep = r.index.update(wait=False, embed=True, background=True, by="MCP reindex")
                except IndexBusy:
                    raise Refusal("reindex", "busy", f"another process is indexing {n!r}; try again shortly") from None
                r.building = False
                r.last_check, r.last_fresh = time.time(), True
                summary = _report_summary(rep, n, EVERYTHING)
                r.last_update = {"at": time.time(), "reason": "reindex", **summary}
                r.error = None
            item = _report_summary(rep, n, scope)
            item["vectors"] = "filling in the background" if r.index.embedder is not None else "off (lexical only)"
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
    out.update(
        files_seen=rep.files_seen,
        unchanged=rep.unchanged,
        capsules_written=rep.capsules_written,
        seconds=round(rep.seconds, 3),
        notes=list(rep.notes),
    )
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
