"""The MCP server: the official SDK's ``MCPServer`` over ``RepoctxMCP``, API keys for HTTP, and the
``repoctx mcp`` command."""

from __future__ import annotations

import hashlib
import hmac
import inspect
import json
import logging
import os
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

from mcp.server.mcpserver import Context, MCPServer
from mcp_types import CallToolResult, TextContent

from repoctx.config import ConfigError, Settings
from repoctx.index import resolve_settings
from repoctx.mcp import render as mr
from repoctx.mcp.state import DEFAULT_MAX_TOKENS, RepoctxMCP, is_error
from repoctx.mcp.tools import READ, WRITE, WRITES, tool_functions
from repoctx.render import wire
from repoctx.store.base import EVERYTHING, Scope

log = logging.getLogger("repoctx.mcp")

ScopeForKey = Callable[[str], Scope | None]
"""An API key -> the Scope its principal may read, or None for an unknown (or revoked) key."""


def _to_result(d: dict) -> CallToolResult:
    if is_error(d):
        return CallToolResult(
            content=[TextContent(type="text", text=mr.render_error(d))], structured_content=d, is_error=True
        )
    text = d.pop("_text", None) or mr.render_plain("result", d)
    return CallToolResult(content=[TextContent(type="text", text=text)], structured_content=wire(d))


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


def build_server(
    repos: Sequence[Path | str],
    settings: Settings | None = None,
    scope_for_key: ScopeForKey | None = None,
    *,
    max_tokens: int | None = None,
    refresh: bool = True,
    name: str = "repoctx",
) -> _Server:
    """The MCP server for ``repos`` (paths, or names in a shared store). With ``scope_for_key`` the server
    requires a bearer key over HTTP and reads through that key's Scope; without it, it serves everything (stdio).
    The repoctx state is ``server.repoctx`` (a ``RepoctxMCP``)."""
    settings = settings or resolve_settings(r for r in repos if Path(r).is_dir())
    if max_tokens is None:
        env = os.environ.get("REPOCTX_MCP_MAX_TOKENS", "").strip()
        max_tokens = int(env) if env else DEFAULT_MAX_TOKENS
    state = RepoctxMCP(
        [Path(r) if not isinstance(r, Path) else r for r in repos], settings, max_tokens=max_tokens, refresh=refresh
    )
    scopes: dict[str, Scope] = {}
    kw: dict[str, Any] = {}
    if scope_for_key is not None:
        from mcp.server.auth.settings import AuthSettings
        from pydantic import AnyHttpUrl

        # bearer keys checked by the SDK's middleware (401 before MCP handling); no OAuth endpoints are served
        kw = dict(
            auth=AuthSettings(issuer_url=AnyHttpUrl("http://127.0.0.1"), resource_server_url=None),
            token_verifier=_KeyVerifier(scope_for_key, scopes),
        )
    names = "the indexed repositories" if scope_for_key is not None else ", ".join(state.repos)
    server = _Server(
        name,
        instructions=(
            f"repoctx: indexed code search over {names}. Start with search_code for a question (symbol for a name you "
            "know, grep for exact text, outline for what a file holds), follow callers/callees, read_file to check "
            "details, get_context for compact context. Every result cites "
            "code as 'path:start-end :: qualname': quote those citations. Results are paged: pass next_cursor back "
            "as cursor for more."
        ),
        log_level="WARNING",
        **kw,
    )
    server.repoctx = state
    server.repoctx_auth = scope_for_key is not None
    several = state.several

    def run(tool: str, ctx: Context | None, **args) -> CallToolResult:
        try:
            scope = _principal_scope(ctx, scope_for_key, scopes)
        except PermissionError as e:
            return _to_result({"error": "unauthorized", "detail": str(e), "tool": tool})
        return _to_result(state.call(tool, args, scope))

    fns = tool_functions(run)
    for fn in fns:
        tool = _without_repo(fn) if not several else fn
        server.add_tool(
            tool, description=inspect.cleandoc(fn.__doc__ or ""), annotations=WRITE if fn.__name__ in WRITES else READ
        )
        server.repoctx_params[fn.__name__] = tuple(n for n in inspect.signature(tool).parameters if n != "ctx")
    return server


class _Server(MCPServer):
    """The SDK's server, refusing arguments a tool does not take: the SDK drops them silently, so
    ``repo="nope"`` sent to a one-repository server would answer from that repository as if asked."""

    repoctx: RepoctxMCP  # the repoctx state (set by build_server)
    repoctx_auth: bool = False  # whether bearer keys are required (HTTP)

    def __init__(self, *args, **kwargs):
        super().__init__(*args, **kwargs)
        self.repoctx_params: dict[str, tuple[str, ...]] = {}

    async def call_tool(self, name: str, arguments: dict[str, Any], context: Context | None = None):
        known = self.repoctx_params.get(name)
        if known is not None:
            unknown = sorted(set(arguments or {}) - set(known))
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
                sc = Scope(
                    repos=listed(spec.get("repos")),
                    include=listed(spec.get("include")),
                    exclude=listed(spec.get("exclude")),
                    grants=None
                    if grants is None
                    else tuple(
                        Grant(g.get("repo", "*"), listed(g.get("include")), listed(g.get("exclude"))) for g in grants
                    ),
                )
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
        target = settings.database_url or str(settings.index_dir_for(root or Path(".").resolve()) / "service.sqlite")
    else:
        target = service_db_target(settings)
    ks = KeyStore(target, roles_file=os.environ.get("REPOCTX_ROLES") or None)

    def scope_for_key(key: str) -> Scope | None:
        p = ks.authenticate(key)
        return p.scope if p is not None else None

    return scope_for_key
