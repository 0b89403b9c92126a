"""``repoctx mcp``: serve repoctx's tools over MCP (stdio for local agents, streamable HTTP with API keys).

The command's glue lives with the CLI; the server itself is ``repoctx.mcp`` (``build_server``, ``http_app``)."""

from __future__ import annotations

import os
from pathlib import Path

import typer

from repoctx.config import ConfigError
from repoctx.index import resolve_settings
from repoctx.mcp.server import build_server, http_app, keys_file_scope_for_key, service_scope_for_key
from repoctx.mcp.state import DEFAULT_MAX_TOKENS, MIN_MAX_TOKENS
from repoctx.store.base import SchemaMismatch, StoreError


def mcp_command(
    transport: str = typer.Option("stdio", "--transport", help="stdio (local agents) | http (streamable HTTP)"),
    repo: list[str] = typer.Option(
        [], "--repo", "-r", help="Repository path, or a name in a shared store (repeatable; default .)"
    ),
    host: str = typer.Option("127.0.0.1", "--host", help="HTTP: interface to listen on."),
    port: int = typer.Option(8765, "--port", help="HTTP: port."),
    max_tokens: int | None = typer.Option(
        None,
        "--max-tokens",
        min=MIN_MAX_TOKENS,
        help=f"Token budget of one result (default {DEFAULT_MAX_TOKENS}, or REPOCTX_MCP_MAX_TOKENS).",
    ),
    keys: Path | None = typer.Option(
        None,
        "--keys",
        help="HTTP: a JSON file of API keys -> scopes (default: the service's keys, `repoctx keys add`).",
    ),
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
        raise typer.Exit(2) from None
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
            raise typer.Exit(2) from None
    try:
        server = build_server(paths, settings, scope_for_key, max_tokens=max_tokens, refresh=not no_refresh)
    except SchemaMismatch as e:
        err(str(e))
        raise typer.Exit(1) from None
    except (StoreError, FileNotFoundError, ValueError) as e:
        err(str(e))
        raise typer.Exit(1) from None
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
