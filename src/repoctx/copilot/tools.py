"""The copilot's tools over one ``repoctx.Index`` and one ``Scope``.

``RepoTools(index, scope)`` is the single implementation: each method takes plain arguments and returns a
plain dict (JSON-ready), never raises, and answers a failure with
``{"error": <code or exception type>, "detail": <the message, bounded>, "tool": <name>}``. The HTTP service and the MCP
server call those methods directly; ``make_tools(index, scope)`` wraps the same methods as Strands tools for
the agent (an error dict becomes a tool result with status ``error``, so the turn goes on).

Every read passes the tools' scope to the index, which applies it inside the store's queries. ``read_file``
serves a file only when ``(repo, path)`` is in ``index.files(scope)`` -- the one rule that leaves out ignored,
vendored, secret-named, unindexed and out-of-scope files alike -- and only through ``load_text`` with secret
redaction, after refusing absolute paths, ``..`` components and anything that resolves outside the root.

Error codes: ``invalid_argument`` (bad k/level/mode/task/budget/range, empty query), ``refused`` (absolute
path, ``..``, symlink out of the root), ``not_served`` (not a file the index serves in this scope),
``ambiguous`` (a path in several repositories), ``binary``, ``too_large``, ``unavailable`` (the repository's
files are not on this machine); any other failure is named by its exception type.
"""

from __future__ import annotations

import functools
import inspect
import os
import re
from collections.abc import Callable
from pathlib import Path, PurePosixPath
from typing import Any

from repoctx.render import DEFAULT_DETAIL, DETAILS, retrieval_dict, wire
from repoctx.store.base import Scope
from repoctx.store.globs import GlobError, parse as parse_glob

__all__ = [
    "RepoTools",
    "make_tools",
    "TOOL_NAMES",
    "ToolError",
    "error_detail",
    "MAX_K",
    "MAX_READ_LINES",
    "MAX_LIST_FILES",
    "MIN_BUDGET",
    "MAX_BUDGET",
    "MAX_DETAIL",
]

TOOL_NAMES = (
    "search_code",
    "get_context",
    "symbol",
    "callers",
    "callees",
    "outline",
    "grep",
    "read_file",
    "list_files",
)
LEVELS = ("symbol", "file")
MODES = ("auto", "standard", "agentic")
TASKS = ("code_query", "refactor", "code_gen", "search")
MAX_K = 50
MAX_READ_LINES = 400
MAX_LIST_FILES = 200
MAX_SYMBOLS = 25  # definitions listed by symbol at most, candidates resolved by callers/callees
MAX_BODIES = 10  # definitions symbol lists by default
GREP_LIMIT = 50  # matching lines grep lists by default
MAX_GREP = 200
MAX_GREP_CONTEXT = 5
MAX_EDGES = 50
MIN_BUDGET, MAX_BUDGET = 100, 16000
MAX_DETAIL = 1000  # characters of an error's message the model reads


class ToolError(Exception):
    """A refusal or bad argument, reported to the caller as ``{"error": code, "detail": message}``."""

    def __init__(self, code: str, detail: str):
        super().__init__(detail)
        self.code = code
        self.detail = detail


def error_detail(message: str, limit: int = MAX_DETAIL) -> str:
    """An exception's whole message for the model, bounded: every line (a validation error names the field on
    its second line), without a traceback or pydantic's documentation links."""
    lines = []
    for ln in str(message).splitlines():
        ln = ln.rstrip()
        if ln.lstrip().startswith("Traceback (most recent call last)"):
            break
        if ln.strip() and not ln.lstrip().startswith("For further information visit"):
            lines.append(ln)
    out = "\n".join(lines).strip()
    return out if len(out) <= limit else out[: limit - 1] + "…"


def _redact_line(text: str) -> str:
    try:
        from repoctx.ingest.walk import redact

        return redact(text)[0]
    except Exception:  # noqa: BLE001 - the redactor must never turn an error report into a crash
        return text


def _guarded(name: str) -> Callable:
    """Run a tool method; any exception becomes the structured error dict for that tool."""

    def deco(fn: Callable[..., dict]) -> Callable[..., dict]:
        @functools.wraps(fn)
        def wrapper(self: RepoTools, *args, **kwargs) -> dict:
            try:
                return fn(self, *args, **kwargs)
            except ToolError as e:
                return self._error(name, e.code, e.detail)
            except Exception as e:  # noqa: BLE001 - the turn goes on, the model reads the reason
                return self._error(name, type(e).__name__, str(e) or type(e).__name__)

        wrapper.tool_name = name  # type: ignore[attr-defined]
        return wrapper

    return deco


def _int_arg(name: str, value: Any, lo: int | None = None, hi: int | None = None) -> int:
    if isinstance(value, bool):
        raise ToolError("invalid_argument", f"{name} must be an integer, not {value!r}")
    try:
        n = int(value)
    except (TypeError, ValueError):
        raise ToolError("invalid_argument", f"{name} must be an integer, not {value!r}") from None
    if (lo is not None and n < lo) or (hi is not None and n > hi):
        rng = f"{lo}..{hi}" if hi is not None else f">= {lo}"
        raise ToolError("invalid_argument", f"{name} must be in {rng}, not {n}")
    return n


def _text_arg(name: str, value: Any) -> str:
    if not isinstance(value, str) or not value.strip():
        raise ToolError("invalid_argument", f"{name} is empty: give a non-empty string")
    return value.strip()


def _choice(name: str, value: Any, choices: tuple[str, ...]) -> str:
    v = (value or "").strip().lower() if isinstance(value, str) else value
    if v not in choices:
        raise ToolError("invalid_argument", f"{name} must be one of {', '.join(choices)}, not {value!r}")
    return v


def _module_of(path: str) -> str:
    stem = path.rsplit(".", 1)[0] if "." in path.rsplit("/", 1)[-1] else path
    return stem.replace("/", ".")


_WIN_DRIVE = re.compile(r"^[A-Za-z]:[\\/]")


class RepoTools:
    """The copilot's operations over ``index`` seen through ``scope``; each returns a JSON-ready dict.

    ``search_code(query, k=8, level="symbol", mode="auto", detail="brief")``
        -> ``repoctx.render.retrieval_dict``: {"query", "mode", "route", "level", "k", "detail", "notes",
        "seconds", "count", "results": [...]}; a symbol level result at ``brief`` is {"citation", "repo", "sig",
        "why"}, ``signatures`` adds "path", "start_line", "end_line", "symbol", "kind", "score", "signature",
        "docstring", "callers", "callees", ``full`` the "snippet"; file level results are {"repo", "path",
        "score", "units", "citations"} (+ "symbols" past brief).
    ``get_context(query, task="", budget=2000)`` -> {"task", "text", "citations", "tokens", "budget", "left_out"}.
    ``symbol(name, body=True, limit=10)`` -> ``Index.symbol``: {"name", "matches": [{"repo", "path", "qualname",
        "kind", "signature", "start_line", "end_line", "citation", "text"}], "total", "truncated", "hint",
        "did_you_mean"}; every definition listed, none guessed; ``body=False`` leaves "text" out; a body past 400
        lines is cut (``text_note``).
    ``grep(pattern, fixed=False, ignore_case=False, paths=(), limit=50, offset=0, context=0)`` -> ``Index.grep``:
        {"pattern", "matches": [{"repo", "path", "line", "text"}], "total", "next_offset", "truncated", "cut", ...}
        over the indexed snapshot; a bad regex is ``invalid_argument`` naming the problem.
    ``outline(path, repo="")`` -> ``Index.outline``: {"repo", "path", "language", "units": [{"qualname", "kind",
        "signature", "start_line", "end_line", "depth", "parent", "callers", "citation"}], "hint"}.
    ``callers(symbol, limit=50)`` / ``callees(symbol, limit=50)`` -> {"symbol", "resolved": [citations], "ambiguous",
        "count" (listed), "total" (all in scope), "truncated", "callers" | "callees": [{"citation", "repo", "path",
        "symbol", "signature", "of", "resolved"}]} (the first ``limit`` listed; ``limit=0``: all of them)
        (an unresolved callee has ``citation: None``, ``resolved: False`` and its ``name`` as written).
    ``read_file(path, start=1, end=0, repo="")`` -> {"repo", "path", "start", "end", "total_lines",
        "truncated", "text" (numbered lines), "symbols" (citations of units overlapping the range), "note"}.
    ``list_files(glob="*")`` -> {"glob", "count", "total", "truncated", "files"}.
    """

    def __init__(self, index, scope: Scope | None = None):
        self.index = index
        self.scope: Scope = index.scope(scope)  # the same narrowing the index applies: pass it everywhere

    # ------------------------------------------------------------------ helpers
    def _error(self, tool: str, error: str, detail: str) -> dict:
        text = error_detail(detail, limit=4 * MAX_DETAIL) or error
        root = getattr(self.index, "root", None)
        if root is not None:
            text = text.replace(str(root) + os.sep, "").replace(str(root), "<repository root>")
        return {"error": error, "detail": error_detail(_redact_line(text)) or error, "tool": tool}

    def _resolve(self, symbol: str) -> list:
        """Capsules a symbol names: a capsule id, a qualname or a name (then the last dotted part)."""
        symbol = symbol.strip()
        found = []
        if "#" in symbol:  # repo:path#qualname
            c = self.index.capsule(symbol, self.scope)
            if c is not None:
                found = [c]
        if not found:
            found = self.index.find(symbol, self.scope)
        if not found and "." in symbol:  # a module-qualified name: match on the last part, keep the module's
            found = self.index.find(symbol.rsplit(".", 1)[1], self.scope)
            exact = [c for c in found if f"{_module_of(c.path)}.{c.qualname}".endswith(symbol)]
            found = exact or found
        seen: dict[str, Any] = {}
        for c in found:
            seen.setdefault(c.id, c)
        return list(seen.values())

    def _load(self, data: bytes, path: str):
        """The file's text as the index holds it: secrets redacted by the same code, line numbers kept."""
        from repoctx.ingest.walk import load_text

        return load_text(data, redact_secrets=True, path=path)

    def _repo_root(self, repo: str) -> Path:
        ix = self.index
        if ix.root is not None and repo == ix.repo:
            return Path(ix.root).resolve()
        rec = ix.store.repo(repo)
        if rec is None or not rec.root or not Path(rec.root).is_dir():
            raise ToolError("unavailable", f"the files of repository {repo!r} are not on this machine")
        return Path(rec.root).resolve()

    # ------------------------------------------------------------------ tools
    def _retrieve(self, query: str, k: int, level: str, mode: str, detail: str):
        query = _text_arg("query", query)
        k = _int_arg("k", k, 1, MAX_K)
        level = _choice("level", level, LEVELS)
        mode = _choice("mode", mode, MODES)
        detail = _choice("detail", detail, DETAILS)
        return self.index.retrieve(query, k=k, level=level, mode=mode, scope=self.scope), detail

    @_guarded("search_code")
    def search_retrieval(
        self, query: str, k: int = 8, level: str = "symbol", mode: str = "auto", detail: str = DEFAULT_DETAIL
    ):
        """``search_code``'s arguments checked and its ``(Retrieval, detail)``, or the same error dict: for a
        server that merges several views' hits by score before rendering them (``search_answer``)."""
        return self._retrieve(query, k, level, mode, detail)

    def search_answer(self, r, detail: str = DEFAULT_DETAIL) -> dict:
        """A ``Retrieval`` as ``search_code`` answers it (``repoctx.render.retrieval_dict`` at ``detail``)."""
        out = retrieval_dict(r, detail, index=self.index, scope=self.scope)
        if not out["results"]:
            out["notes"].append("nothing found in scope for this query: say so rather than guess, or try other words")
        return out

    @_guarded("search_code")
    def search_code(
        self, query: str, k: int = 8, level: str = "symbol", mode: str = "auto", detail: str = DEFAULT_DETAIL
    ) -> dict:
        r, detail = self._retrieve(query, k, level, mode, detail)
        return self.search_answer(r, detail)

    @_guarded("get_context")
    def get_context(self, query: str, task: str = "", budget: int = 2000) -> dict:
        query = _text_arg("query", query)
        task_arg = _choice("task", task, TASKS) if (task or "").strip() else None
        budget = _int_arg("budget", budget, MIN_BUDGET, MAX_BUDGET)
        ctx = self.index.context(query, task=task_arg, budget=budget, mode="standard", scope=self.scope)
        out = ctx.to_dict()
        if not out.get("citations"):
            out["note"] = "nothing relevant found in scope: say so rather than guess"
        return out

    @_guarded("symbol")
    def symbol(self, name: str, body: bool = True, limit: int = MAX_BODIES) -> dict:
        if not isinstance(body, bool):
            raise ToolError("invalid_argument", f"body must be true or false, not {body!r}")
        limit = _int_arg("limit", limit, 1, MAX_SYMBOLS)
        try:
            out = self.index.symbol(_text_arg("name", name), scope=self.scope, limit=limit)
        except ValueError as e:
            raise ToolError("invalid_argument", str(e)) from None
        for m in out["matches"]:
            if not body:
                m.pop("text", None)
                continue
            lines = (m.get("text") or "").split("\n")
            if len(lines) > MAX_READ_LINES:
                m["text"] = "\n".join(lines[:MAX_READ_LINES])
                m["text_note"] = (
                    f"first {MAX_READ_LINES} of {len(lines)} lines; read_file {m['path']} from line "
                    f"{m['start_line'] + MAX_READ_LINES} for the rest"
                )
        return out

    @_guarded("grep")
    def grep(
        self,
        pattern: str,
        fixed: bool = False,
        ignore_case: bool = False,
        paths: list[str] | str | None = None,
        limit: int = GREP_LIMIT,
        offset: int = 0,
        context: int = 0,
    ) -> dict:
        if not isinstance(pattern, str) or not pattern:
            raise ToolError("invalid_argument", "pattern is empty: give a regular expression or, with fixed, a string")
        for flag, v in (("fixed", fixed), ("ignore_case", ignore_case)):
            if not isinstance(v, bool):
                raise ToolError("invalid_argument", f"{flag} must be true or false, not {v!r}")
        globs: tuple[str, ...]
        if paths is None or paths == "":
            globs = ()
        elif isinstance(paths, str):
            globs = (paths,)
        elif isinstance(paths, (list, tuple)) and all(isinstance(x, str) and x for x in paths):
            globs = tuple(paths)
        else:
            raise ToolError("invalid_argument", f"paths must be a list of path globs, not {paths!r}")
        limit = _int_arg("limit", limit, 1, MAX_GREP)
        offset = _int_arg("offset", offset, 0)
        context = _int_arg("context", context, 0, MAX_GREP_CONTEXT)
        try:  # a bad regex or path glob: the library's message names the problem and where
            return self.index.grep(
                pattern,
                fixed=fixed,
                ignore_case=ignore_case,
                paths=globs,
                scope=self.scope,
                limit=limit,
                offset=offset,
                context=context,
            )
        except ValueError as e:
            raise ToolError("invalid_argument", str(e)) from None

    @_guarded("outline")
    def outline(self, path: str, repo: str = "") -> dict:
        path = _text_arg("path", path)
        repo = (repo or "").strip() if isinstance(repo, str) else repo
        if not isinstance(repo, str):
            raise ToolError("invalid_argument", f"repo must be a repository name, not {repo!r}")
        if not repo and ":" in path and not _WIN_DRIVE.match(path):
            head, _, rest = path.partition(":")
            if head in {r for r, _ in self.index.files(self.scope)}:
                repo, path = head, rest
        try:
            return self.index.outline(path, repo=repo or None, scope=self.scope)
        except ValueError as e:
            raise ToolError("ambiguous" if "several repositories" in str(e) else "invalid_argument", str(e)) from None

    def _edges(self, tool: str, symbol: str, incoming: bool, limit: int = MAX_EDGES) -> dict:
        """Every caller (callee) in scope is counted in ``total``; the first ``limit`` are listed (0: all)."""
        symbol = _text_arg("symbol", symbol)
        targets = self._resolve(symbol)
        key = "callers" if incoming else "callees"
        out: dict[str, Any] = {
            "symbol": symbol,
            "resolved": [c.citation for c in targets[:MAX_SYMBOLS]],
            "ambiguous": len(targets) > 1,
            "count": 0,
            "total": 0,
            key: [],
        }
        if not targets:
            out["note"] = f"no symbol {symbol!r} in scope; find it with symbol or search_code first"
            return out
        if len(targets) > 1:
            out["note"] = (
                f"{len(targets)} definitions are named {symbol!r}: the {key} of all of them are listed "
                "(field 'of'); pass a qualname or capsule id to narrow"
            )
        rows: list[tuple[str | None, str, Any]] = []  # (the other end's id, the name called, target), in graph order
        seen: set = set()
        for target in targets[:MAX_SYMBOLS]:
            edges = self.index.callers(target.id, self.scope) if incoming else self.index.callees(target.id, self.scope)
            for e in edges:
                other_id = e.src if incoming else e.dst
                k = (other_id, target.id) if other_id is not None else ("name", e.dst_name, target.id)
                if k not in seen:
                    seen.add(k)
                    rows.append((other_id, e.dst_name, target))
        ids = list(dict.fromkeys(r[0] for r in rows if r[0] is not None))
        found = {c.id: c for c in self.index.store.capsules(ids, self.index.scope(self.scope))}  # one read
        listed: list[dict] = []
        for other_id, name, target in rows:
            if other_id is None:  # a callee known by name only
                listed.append({"citation": None, "name": name, "resolved": False, "of": target.citation})
            elif other_id in found:  # (absent: outside the scope, not shown)
                other = found[other_id]
                listed.append(
                    {
                        "citation": other.citation,
                        "repo": other.repo,
                        "path": other.path,
                        "symbol": other.qualname,
                        "kind": other.kind,
                        "signature": other.signature,
                        "name": name,
                        "resolved": True,
                        "of": target.citation,
                    }
                )
        shown = listed[:limit] if limit else listed
        out[key] = shown
        out["count"] = len(shown)
        out["total"] = len(listed)
        out["truncated"] = len(shown) < len(listed)
        if out["truncated"]:
            out["note"] = (out.get("note", "") + f" showing the first {len(shown)} of {len(listed)} {key}.").strip()
        if not listed:
            out["note"] = (out.get("note", "") + f" no {key} found in scope.").strip()
        return out

    @_guarded("callers")
    def callers(self, symbol: str, limit: int = MAX_EDGES) -> dict:
        return self._edges("callers", symbol, incoming=True, limit=_int_arg("limit", limit, 0))

    @_guarded("callees")
    def callees(self, symbol: str, limit: int = MAX_EDGES) -> dict:
        return self._edges("callees", symbol, incoming=False, limit=_int_arg("limit", limit, 0))

    @_guarded("read_file")
    def read_file(self, path: str, start: int = 1, end: int = 0, repo: str = "") -> dict:
        raw = _text_arg("path", path)
        start = _int_arg("start", start, 1)
        end = _int_arg("end", end, 0)
        if end and end < start:
            raise ToolError("invalid_argument", f"end ({end}) is before start ({start}); use end=0 for 'to the end'")
        repo = (repo or "").strip()
        served = self.index.files(self.scope)
        repos_served = {r for r, _ in served}
        if not repo and ":" in raw and not _WIN_DRIVE.match(raw):
            head, _, rest = raw.partition(":")
            if head in repos_served or head in (self.scope.repos or ()):
                repo, raw = head, rest
        rel = raw.replace("\\", "/")
        if rel.startswith("/") or _WIN_DRIVE.match(raw) or rel.startswith("~"):
            raise ToolError("refused", "absolute paths are refused: give a path relative to the repository root")
        parts = [p for p in PurePosixPath(rel).parts if p not in ("", ".")]
        if any(p == ".." for p in parts):
            raise ToolError("refused", "'..' path components are refused: give a path inside the repository")
        if not parts:
            raise ToolError("invalid_argument", "path names no file")
        rel = "/".join(parts)
        candidates = sorted(r for r, p in served if p == rel and (not repo or r == repo))
        if not candidates:
            raise ToolError(
                "not_served",
                f"{rel!r} is not a file the index serves in this scope (ignored, secret, "
                "excluded or not indexed); use list_files to see what is",
            )
        if len(candidates) > 1:
            raise ToolError(
                "ambiguous",
                f"{rel!r} is in several repositories ({', '.join(candidates)}): pass repo or write 'repo:path'",
            )
        repo = candidates[0]
        root = self._repo_root(repo)
        try:
            full = (root / rel).resolve(strict=True)
        except (OSError, RuntimeError):
            raise ToolError("not_served", f"{rel!r} is indexed but no longer readable on disk") from None
        if full != root and root not in full.parents:
            raise ToolError("refused", f"{rel!r} resolves outside the repository root (symlink)")
        if not full.is_file():
            raise ToolError("not_served", f"{rel!r} is not a regular file")
        cap = int(getattr(self.index.settings, "max_file_bytes", 1024 * 1024) or 1024 * 1024)
        with open(full, "rb") as fh:
            data = fh.read(cap + 1)
        if len(data) > cap:
            raise ToolError("too_large", f"{rel!r} is larger than {cap} bytes")
        loaded = self._load(data, rel)
        if loaded is None:
            raise ToolError("binary", f"{rel!r} is a binary file")
        lines = loaded.text.split("\n")
        if lines and lines[-1] == "" and len(lines) > 1:
            lines.pop()
        total = len(lines)
        if start > max(total, 1):
            raise ToolError("invalid_argument", f"start ({start}) is past the end of {rel!r} ({total} lines)")
        want_end = min(end or total, total)
        last = min(want_end, start + MAX_READ_LINES - 1)
        width = len(str(max(last, 1)))
        text = "\n".join(f"{n:>{width}}| {lines[n - 1]}" for n in range(start, last + 1))
        symbols = [
            c.citation
            for c in self.index.store.file_capsules(repo, rel, self.scope)
            if c.kind != "module" and c.start_line <= last and c.end_line >= start
        ][:40]
        out: dict[str, Any] = {
            "repo": repo,
            "path": rel,
            "start": start,
            "end": last,
            "total_lines": total,
            "truncated": last < want_end,
            "text": text,
            "symbols": symbols,
            "note": f"lines {start}-{last} of {total}, numbered 'N| '; cite as {rel}:{start}-{last} :: <symbol> "
            f"(or a citation from 'symbols')",
        }
        if last < want_end:
            out["note"] += f"; at most {MAX_READ_LINES} lines per call: call again with start={last + 1}"
        if loaded.redactions:
            out["redactions"] = loaded.redactions
            out["note"] += "; secrets are shown as [REDACTED]"
        return out

    @_guarded("list_files")
    def list_files(self, glob: str = "*") -> dict:
        pattern = (glob or "*").strip() if isinstance(glob, str) else None
        if pattern is None:
            raise ToolError("invalid_argument", f"glob must be a string, not {glob!r}")
        pattern = pattern or "*"
        if pattern.endswith("/"):
            pattern += "*"
        try:  # the grammar of access rules ('*' crosses '/', [!a] and [^a] negate, '\\' escapes)
            glob_ = parse_glob(pattern)
        except GlobError as e:
            raise ToolError("invalid_argument", str(e)) from None
        served = self.index.files(self.scope)
        several = len({r for r, _ in served}) > 1
        matched = [f"{r}:{p}" if several else p for r, p in served if glob_.matches(p) or glob_.matches(f"{r}:{p}")]
        out = {
            "glob": pattern,
            "count": min(len(matched), MAX_LIST_FILES),
            "total": len(matched),
            "truncated": len(matched) > MAX_LIST_FILES,
            "files": matched[:MAX_LIST_FILES],
        }
        if out["truncated"]:
            out["note"] = f"showing {MAX_LIST_FILES} of {len(matched)}: narrow the glob (e.g. 'src/api/*')"
        elif not matched:
            out["note"] = "no indexed file in scope matches; '*' matches across '/', e.g. '*.py' or 'src/*'"
        return out

    def call(self, name: str, arguments: dict | None = None) -> dict:
        """Dispatch by tool name (for servers): unknown names and bad argument names are error dicts too."""
        if name not in TOOL_NAMES:
            return self._error(str(name), "unknown_tool", f"no tool {name!r}; tools: {', '.join(TOOL_NAMES)}")
        fn = getattr(self, name)
        try:
            inspect.signature(fn).bind(**(arguments or {}))
        except TypeError as e:
            return self._error(name, "invalid_argument", str(e))
        return fn(**(arguments or {}))


# ---------------------------------------------------------------------------- Strands tools
def _as_tool_result(result: dict) -> Any:
    """A success is the dict itself (Strands sends it as JSON text); an error dict becomes a tool result with
    status ``error`` and the dict as its JSON content, so the agent counts it and the model reads the reason."""
    if isinstance(result, dict) and "error" in result and "tool" in result and "detail" in result:
        return {"status": "error", "content": [{"json": result}]}
    return result


def make_tools(index, scope: Scope | None = None) -> list:
    """The copilot's tools (``TOOL_NAMES``) as Strands tools bound to ``index`` and ``scope`` (no globals)."""
    from strands import tool

    rt = index if isinstance(index, RepoTools) else RepoTools(index, scope)

    @tool
    def search_code(query: str, k: int = 8, level: str = "symbol", mode: str = "auto", detail: str = "brief") -> dict:
        """Search the indexed repository for code relevant to a question or a name. Call this first for any
        question about the code. Returns the best functions, methods and classes, best first, each with its
        citation 'path:start-end :: qualname', a short signature and why it was found. Quote the citations
        exactly as given when you rely on a result; never invent one.

        Args:
            query: what to look for, in words or identifiers (e.g. "where is the CSRF token verified").
            k: how many results, 1 to 50 (default 8).
            level: "symbol" for functions/classes, or "file" for the best files with their units' citations (in
                a git checkout, with the past commits like the question that changed them).
            mode: "auto" (let the router decide), "standard" (one hybrid search) or "agentic" (multi-step).
            detail: "brief" (default: one line each), "signatures" (adds whole signatures, the docstring's first
                line, caller/callee counts) or "full" (adds the first 30 lines of code; costs many tokens).
        """
        return _as_tool_result(wire(rt.search_code(query, k=k, level=level, mode=mode, detail=detail)))

    @tool
    def get_context(query: str, task: str = "", budget: int = 2000) -> dict:
        """Get compact, ready-to-read context for a question: the relevant code, its callers/callees and
        layout, compressed to a token budget. Use it when you need more than search snippets to explain or
        change code. Returns the text and the list of citations it contains; quote those citations exactly.

        Args:
            query: the question or task in words.
            task: "code_query", "refactor", "code_gen" or "search"; empty to let repoctx pick.
            budget: maximum tokens of context, 100 to 16000 (default 2000).
        """
        return _as_tool_result(rt.get_context(query, task=task, budget=budget))

    @tool
    def symbol(name: str, body: bool = True) -> dict:
        """Fetch a function, method or class you know by name: every definition of that name, each with its
        citation 'path:start-end :: qualname' and its whole code. Use it instead of search_code when you know the
        name (e.g. "connect", "Pool.connect", "app.db.Pool.connect" or "src/app/db.py:Pool.connect"). Several
        definitions are all listed, none guessed: pass a qualified name to pick one. With body=false you get only
        where each one is (citation, kind, signature), cheap for a common name.

        Args:
            name: the symbol's name, qualified name, module-qualified name or path:qualname.
            body: include each definition's code (default true).
        """
        return _as_tool_result(rt.symbol(name, body=body))

    @tool
    def grep(
        pattern: str, fixed: bool = False, ignore_case: bool = False, paths: list[str] | None = None, offset: int = 0
    ) -> dict:
        """Find every line of the indexed code that matches a regular expression (or, with fixed=true, an exact
        string), like `git grep -n`: each match with its path and line number. Use it for exact text: all the
        usages of a name, a string literal, an error message, a setting, an import. Unlike search_code it is
        complete and unranked, and finds nothing by meaning. 50 lines per call; 'total' counts them all and
        'next_offset' asks for the next ones. A line is not a citation: cite the unit around it, whose citation
        outline or symbol gives.

        Args:
            pattern: a Python regular expression matched against each line (e.g. "def get_search_results\\b",
                "raise \\w+Error"), or the exact text with fixed=true.
            fixed: treat the pattern as a literal string.
            ignore_case: match regardless of case.
            paths: path globs a file must match, e.g. ["*.py"] or ["src/api/*"] ('*' also matches '/').
            offset: how many matching lines to skip (next_offset of the previous call).
        """
        return _as_tool_result(rt.grep(pattern, fixed=fixed, ignore_case=ignore_case, paths=paths, offset=offset))

    @tool
    def outline(path: str) -> dict:
        """The outline of one indexed file: its classes, functions and methods in line order, each with its
        signature, line span, nesting, how many units call it and its citation 'path:start-end :: qualname'
        (quote it exactly). Use it to see what a file holds before reading it, then read_file the lines you need.

        Args:
            path: repository-relative path, e.g. "src/app/db.py" (or "repo:path" when several repositories).
        """
        return _as_tool_result(rt.outline(path))

    @tool
    def callers(symbol: str) -> dict:
        """List the functions and methods that call a symbol (who uses it). Returns the resolved definitions
        ('resolved'; several when the name is ambiguous) and each caller's citation 'path:start-end :: qualname'
        with the definition it calls ('of'). At most 50 are listed; 'total' counts them all. Quote the citations
        exactly.

        Args:
            symbol: a qualified name, a plain name, or a capsule id from an earlier result.
        """
        return _as_tool_result(rt.callers(symbol))

    @tool
    def callees(symbol: str) -> dict:
        """List what a function or method calls. Returns each callee's citation 'path:start-end :: qualname'
        when it is defined in the repository, or just its name (citation null) for library or unresolved calls.
        At most 50 are listed; 'total' counts them all. Quote the citations exactly.

        Args:
            symbol: a qualified name, a plain name, or a capsule id from an earlier result.
        """
        return _as_tool_result(rt.callees(symbol))

    @tool
    def read_file(path: str, start: int = 1, end: int = 0, repo: str = "") -> dict:
        """Read lines of an indexed file, numbered, to check details the other tools summarised. At most 400
        lines per call (call again with a later start for more). Only files the index holds in your scope can
        be read; paths are relative to the repository root (no absolute paths, no '..'). Secrets appear as
        [REDACTED]. Returns the numbered text, the range, the total line count and the citations of the
        symbols in that range; cite as 'path:start-end :: qualname'.

        Args:
            path: repository-relative path, e.g. "src/app/db.py" (or "repo:path" when several repositories).
            start: first line, from 1.
            end: last line; 0 means to the end of the file (still capped at 400 lines).
            repo: the repository name, only needed when several repositories are indexed.
        """
        return _as_tool_result(rt.read_file(path, start=start, end=end, repo=repo))

    @tool
    def list_files(glob: str = "*") -> dict:
        """List the indexed files in your scope whose path matches a glob ('*' also matches '/', so '*.py' finds
        Python files at any depth and 'src/api/*' everything under src/api). Use it to see the layout or find a
        file to read. At most 200 paths; the result says when it was truncated.

        Args:
            glob: a path pattern such as "*.py", "src/*" or "*test*" (default "*": everything).
        """
        return _as_tool_result(rt.list_files(glob))

    return [search_code, get_context, symbol, callers, callees, outline, grep, read_file, list_files]
