"""The MCP tools: their arguments and the descriptions an agent reads to decide which one to call.

Each tool is one call of ``run(tool, ctx, **arguments)`` (``repoctx.mcp.server``), which takes the caller's
scope from the request and answers through ``RepoctxMCP.call``."""

from __future__ import annotations

from collections.abc import Callable
from typing import Annotated, Literal

from mcp.server.mcpserver import Context
from mcp_types import CallToolResult, ToolAnnotations
from pydantic import Field

from repoctx.copilot.tools import MAX_K

READ = ToolAnnotations(read_only_hint=True, destructive_hint=False, idempotent_hint=True, open_world_hint=False)
WRITE = ToolAnnotations(read_only_hint=False, destructive_hint=False, idempotent_hint=True, open_world_hint=False)

Repo = Annotated[str, Field(description="Repository name (index_status lists them); empty: all of them.")]
SymbolRef = Annotated[str, Field(description="A qualified name, a plain name, or a capsule id from an earlier result.")]
Cursor = Annotated[
    str, Field(description="next_cursor from the previous page of the same call; empty for the first page.")
]
Detail = Annotated[
    Literal["brief", "signatures", "full"],
    Field(
        description="'brief': one line per result (citation, short signature, why); 'signatures': + whole signature, "
        "docstring line, caller/callee counts; 'full': + the first 30 lines of code (many tokens)."
    ),
]

WRITES = ("reindex",)


def tool_functions(run: Callable[..., CallToolResult]) -> list[Callable]:
    """The tool functions, in the order clients list them, each answering through ``run``."""

    def search_code(
        query: Annotated[
            str,
            Field(description="What to look for, in words or identifiers, e.g. 'where is the CSRF token verified'."),
        ],
        k: Annotated[int, Field(description=f"How many results in all, 1 to {MAX_K}.")] = 10,
        level: Annotated[
            Literal["symbol", "file"],
            Field(
                description="'symbol': functions/classes; 'file': the best files with their units (in a git checkout, "
                "with the past commits like the question that changed them)."
            ),
        ] = "symbol",
        mode: Annotated[
            Literal["auto", "standard", "agentic"],
            Field(description="'auto' lets the router decide; 'agentic' plans sub-queries for multi-part questions."),
        ] = "auto",
        detail: Detail = "brief",
        repo: Repo = "",
        cursor: Cursor = "",
        ctx: Context | None = None,
    ) -> CallToolResult:
        """Search the indexed code by meaning or by name; call it first for a question about the code. Returns the
        best functions, methods and classes, best first, one line each: the citation 'path:start-end :: qualname',
        a short signature and why it was found (exact name, lexical or dense rank, caller/callee of a better hit).
        Ask detail='signatures' for whole signatures, docstrings and caller counts, 'full' for the first lines of
        code. Quote citations exactly as given. More results than fit the output budget come in pages
        (next_cursor)."""
        return run(
            "search_code", ctx, query=query, k=k, level=level, mode=mode, detail=detail, repo=repo, cursor=cursor
        )

    def get_context(
        query: Annotated[str, Field(description="The question or task in words.")],
        task: Annotated[
            Literal["", "code_query", "refactor", "code_gen", "search"],
            Field(description="What the context is for; empty lets repoctx pick."),
        ] = "",
        budget: Annotated[int, Field(description="Maximum tokens of context, 100 to 16000.")] = 2000,
        repo: Repo = "",
        ctx: Context | None = None,
    ) -> CallToolResult:
        """Compact, ready-to-read context for a question: the relevant code with its callers, callees and layout,
        compressed to a token budget, with the citations it contains. Use it when search snippets are not enough."""
        return run("get_context", ctx, query=query, task=task, budget=budget, repo=repo)

    def symbol(
        name: Annotated[
            str,
            Field(
                description="A function, method or class name: plain ('connect'), qualified "
                "('Pool.connect'), module-qualified ('app.db.Pool.connect') or "
                "with its file ('src/app/db.py:Pool.connect')."
            ),
        ],
        body: Annotated[
            bool,
            Field(
                description="Include each definition's code; false: only where each one is (citation, kind, signature)."
            ),
        ] = True,
        repo: Repo = "",
        cursor: Cursor = "",
        ctx: Context | None = None,
    ) -> CallToolResult:
        """Fetch a symbol you know by name: every definition of that name, each with its citation and its whole code.
        Use it instead of search_code when you know the name; several definitions are all listed, none guessed
        (give a qualified name to pick one); with body=false only where each is, cheap for a common name."""
        return run("symbol", ctx, name=name, body=body, repo=repo, cursor=cursor)

    def grep(
        pattern: Annotated[
            str,
            Field(
                description="A Python regular expression matched against each line (e.g. "
                "'def get_search_results\\b'), or the exact text with "
                "fixed=true."
            ),
        ],
        fixed: Annotated[bool, Field(description="Treat the pattern as a literal string.")] = False,
        ignore_case: Annotated[bool, Field(description="Match regardless of case.")] = False,
        paths: Annotated[
            list[str],
            Field(
                description="Path globs a file must match, e.g. ['*.py'] or "
                "['src/api/*'] ('*' also matches '/'); empty: every "
                "file."
            ),
        ] = [],  # noqa: B006 - never mutated
        context: Annotated[int, Field(description="Lines of context shown before and after each match, 0 to 5.")] = 0,
        repo: Repo = "",
        cursor: Cursor = "",
        ctx: Context | None = None,
    ) -> CallToolResult:
        """Every line of the indexed code matching a regular expression (or an exact string), as `git grep -n` prints
        it: path:line: text. Use it for exact text: all the usages of a name, a string literal, an error message,
        a setting. Complete and unranked, unlike search_code; it finds nothing by meaning. Long answers come in
        pages (next_cursor); a bad regex is an error naming the problem."""
        return run(
            "grep",
            ctx,
            pattern=pattern,
            fixed=fixed,
            ignore_case=ignore_case,
            paths=paths,
            context=context,
            repo=repo,
            cursor=cursor,
        )

    def outline(
        path: Annotated[str, Field(description="Repository-relative path of an indexed file, e.g. 'src/app/db.py'.")],
        repo: Repo = "",
        cursor: Cursor = "",
        ctx: Context | None = None,
    ) -> CallToolResult:
        """A file's classes, functions and methods in line order, with signatures, line spans, nesting and how many
        units call each. Use it to see what a file holds before reading it (then read_file the lines you need)."""
        return run("outline", ctx, path=path, repo=repo, cursor=cursor)

    def callers(
        symbol: SymbolRef,
        repo: Repo = "",
        cursor: Cursor = "",
        ctx: Context | None = None,
    ) -> CallToolResult:
        """The functions and methods that call a symbol, each with its citation and the definition it calls."""
        return run("callers", ctx, symbol=symbol, repo=repo, cursor=cursor)

    def callees(
        symbol: SymbolRef,
        repo: Repo = "",
        cursor: Cursor = "",
        ctx: Context | None = None,
    ) -> CallToolResult:
        """What a function or method calls: citations of callees defined in the repository, names of the others."""
        return run("callees", ctx, symbol=symbol, repo=repo, cursor=cursor)

    def read_file(
        path: Annotated[
            str, Field(description="Repository-relative path, e.g. 'src/app/db.py' (no absolute paths, no '..').")
        ],
        start: Annotated[int, Field(description="First line, from 1.")] = 1,
        end: Annotated[int, Field(description="Last line; 0 means to the end of the file.")] = 0,
        repo: Repo = "",
        cursor: Cursor = "",
        ctx: Context | None = None,
    ) -> CallToolResult:
        """Read numbered lines of an indexed file (secrets shown as [REDACTED]) with the citations of the symbols in
        that range. Only files the index serves in your scope can be read. Long ranges come in pages
        (next_cursor)."""
        return run("read_file", ctx, path=path, start=start, end=end, repo=repo, cursor=cursor)

    def list_files(
        glob: Annotated[
            str, Field(description="A path pattern; '*' also matches '/', so '*.py' finds Python files at any depth.")
        ] = "*",
        repo: Repo = "",
        cursor: Cursor = "",
        ctx: Context | None = None,
    ) -> CallToolResult:
        """List the indexed files in your scope whose path matches a glob."""
        return run("list_files", ctx, glob=glob, repo=repo, cursor=cursor)

    def index_status(repo: Repo = "", ctx: Context | None = None) -> CallToolResult:
        """The state of each repository's index: fresh or stale (files changed since it was built), counts, dense
        vector coverage, and the background refresh."""
        return run("index_status", ctx, repo=repo)

    def reindex(repo: Repo = "", ctx: Context | None = None) -> CallToolResult:
        """Refresh the index now, incrementally (only changed files); vectors fill in the background. Returns what
        changed."""
        return run("reindex", ctx, repo=repo)

    return [
        search_code,
        get_context,
        symbol,
        grep,
        outline,
        callers,
        callees,
        read_file,
        list_files,
        index_status,
        reindex,
    ]
