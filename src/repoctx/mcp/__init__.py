"""repoctx as an MCP server: the copilot's tools for Claude Code, Cursor and any MCP client.

``build_server(repos, settings, scope_for_key=None)`` returns the official SDK's ``MCPServer`` with the tools
``search_code``, ``get_context``, ``symbol``, ``grep``, ``outline``, ``callers``, ``callees``, ``read_file``,
``list_files``, ``index_status`` and ``reindex``. Each read calls the one implementation,
``repoctx.copilot.tools.RepoTools``, under the caller's ``Scope``, and search hits are shaped by ``repoctx.render``
at the ``detail`` asked (``brief`` by default: one line per hit). The package adds what a protocol server needs on
top:

* ``server.py``: the SDK's server, bearer keys over HTTP, the ``repoctx mcp`` command;
* ``tools.py``: the tools' arguments and the descriptions an agent chooses them by;
* ``state.py``: ``RepoctxMCP``, repositories, views, scopes, paging and the background refresh;
* ``render.py``: the text of each result and the token counting that keeps it in budget.

What a client gets:

* **Bounded outputs.** A result's text rendering and its structured content each stay within a token budget
  (``max_tokens``, default 20,000, counted with ``providers.embedding.count_tokens``; some clients refuse results
  over 25,000). Long lists (search results, definitions, outlines, callers, files), grep's lines and file
  lines are split into pages:
  the result carries ``next_cursor``, and the same call with ``cursor=<next_cursor>`` returns the next page.
  A cursor is opaque (tool, a hash of the arguments, an offset): it is stateless, so it survives restarts,
  and a cursor used with other arguments is refused rather than misapplied.
* **Starts fast.** Opening an existing index does no indexing and loads no embedding model; a freshness check
  runs in a background thread on start. A stale index is refreshed incrementally in that thread (lexical
  index and graph; vectors too once the model is loaded, or by ``reindex``); ``index_status`` reports
  freshness and the refresh's state. An unindexed repository is indexed in the background and the tools say
  so until it is ready.
* **Sees saves within seconds.** Each tree on this machine is watched (``repoctx.watch``, the folders the walk
  enters, by its ignore rules): a change to a file the index holds is applied by an incremental refresh
  within ~2 s, and nothing runs while nothing changes. A tree with more folders than
  ``REPOCTX_WATCH_MAX_DIRS`` (default 10,000), or every tree with ``REPOCTX_WATCH=0``, is not watched:
  ``index_status`` and the server log say so, and a freshness check runs at most once a minute when a tool
  is called.
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

Entry points: ``build_server``, ``http_app`` and ``python -m repoctx.mcp``; the ``repoctx mcp`` command's glue
is ``repoctx.cli.mcp``.
"""

from __future__ import annotations

from repoctx.mcp.server import (
    ScopeForKey,
    build_server,
    http_app,
    keys_file_scope_for_key,
    service_scope_for_key,
)
from repoctx.mcp.state import DEFAULT_MAX_TOKENS, TOOLS, RepoctxMCP

__all__ = [
    "build_server",
    "http_app",
    "RepoctxMCP",
    "ScopeForKey",
    "keys_file_scope_for_key",
    "service_scope_for_key",
    "DEFAULT_MAX_TOKENS",
    "TOOLS",
]
