"""The MCP server, driven by the official SDK's own client: over stdio (a spawned ``python -m
repoctx.mcp``) and over streamable HTTP (uvicorn in a thread, bearer keys with scopes)."""
from __future__ import annotations

import asyncio
import json
import sys
import time
from pathlib import Path

import pytest

from repoctx import Index, Settings
from repoctx.providers.embedding import count_tokens
from repoctx.store.base import Grant, Scope

mcp = pytest.importorskip("mcp")
from mcp import Client, StdioServerParameters  # noqa: E402
from tests.mcp_http import http_client, serve_http  # noqa: E402

EXPECTED_TOOLS = {"search_code", "get_context", "symbol", "grep", "outline", "callers", "callees", "read_file",
                  "list_files",
                  "index_status", "reindex"}

DB = '''"""Database helpers."""


def connect_database(url, timeout=5):
    """Open a connection to the database at url."""
    return {"url": url, "timeout": timeout}


def run_query(url, sql):
    """Run one SQL query against the database."""
    conn = connect_database(url)
    return conn, sql
'''

LAUNCH = '''from app.db import connect_database


def launch_codes():
    """The classified launch codes, kept in the reactor vault."""
    conn = connect_database("vault://reactor")
    return conn, "0000"
'''


def _handlers(n: int = 60) -> str:
    out = ['"""Webhook handlers."""\n']
    for i in range(n):
        out.append(f'''

def handle_webhook_event_{i}(payload, retries={i}):
    """Handle webhook event number {i}: validate the payload, then dispatch the webhook event."""
    if not payload:
        raise ValueError("empty webhook payload {i}")
    value = payload.get("event_{i}")
    return dispatch_webhook(value, retries)
''')
    out.append('''

def dispatch_webhook(value, retries):
    """Send a webhook event on."""
    return value, retries
''')
    return "".join(out)


@pytest.fixture(scope="module")
def indexed(tmp_path_factory):
    base = tmp_path_factory.mktemp("mcp")
    root = base / "shop"
    for rel, text in {"app/__init__.py": "", "app/db.py": DB, "app/handlers.py": _handlers(),
                      "internal/launch.py": LAUNCH, "README.md": "# shop\n\nA tiny shop.\n"}.items():
        p = root / rel
        p.parent.mkdir(parents=True, exist_ok=True)
        p.write_text(text)
    (base / "outside.txt").write_text("outside the repository\n")
    idx = base / "idx"
    with Index(root, Settings(index_dir=idx, embedder="none")) as ix:
        ix.update()
    return root, idx


def _env(idx: Path) -> dict:
    return {"REPOCTX_INDEX_DIR": str(idx), "REPOCTX_EMBEDDER": "none"}


def _stdio(root: Path, idx: Path, *extra: str) -> Client:
    params = StdioServerParameters(command=sys.executable,
                                   args=["-m", "repoctx.mcp", "--repo", str(root), *extra], env=_env(idx))
    return Client(params, read_timeout_seconds=60)


def _text(result) -> str:
    return "\n".join(c.text for c in result.content if getattr(c, "type", "") == "text")


def _tokens_ok(result, budget: int) -> None:
    assert count_tokens(_text(result)) <= budget
    if result.structured_content is not None:
        assert count_tokens(json.dumps(result.structured_content, ensure_ascii=False,
                                       separators=(",", ":"))) <= budget


# ---------------------------------------------------------------------------------------------- stdio
def test_stdio_tools_search_and_errors(indexed):
    root, idx = indexed

    async def go():
        async with _stdio(root, idx) as client:
            tools = {t.name: t for t in (await client.list_tools()).tools}
            assert set(tools) == EXPECTED_TOOLS
            search = tools["search_code"].input_schema
            assert search["required"] == ["query"]
            assert {"query", "k", "level", "mode", "cursor"} <= set(search["properties"])
            assert "repo" not in search["properties"]  # one repository: nothing to choose
            assert search["properties"]["level"]["enum"] == ["symbol", "file"]
            assert tools["read_file"].input_schema["required"] == ["path"]
            assert tools["search_code"].annotations.read_only_hint is True
            assert tools["reindex"].annotations.read_only_hint is False

            r = await client.call_tool("search_code", {"query": "open a connection to the database", "k": 3})
            assert not r.is_error
            lines = r.structured_content["results"]  # brief: one line per hit, its citation first
            assert any(x.startswith("app/db.py:4-6 :: connect_database(") for x in lines), lines
            assert "app/db.py:4-6 :: connect_database" in _text(r)

            r = await client.call_tool("symbol", {"name": "run_query"})
            assert r.structured_content["matches"][0]["citation"] == "app/db.py:9-12 :: run_query"

            r = await client.call_tool("callers", {"symbol": "connect_database"})
            assert {c["citation"] for c in r.structured_content["callers"]} == {
                "app/db.py:9-12 :: run_query", "internal/launch.py:4-7 :: launch_codes"}

            r = await client.call_tool("get_context", {"query": "how is a query run against the database"})
            assert not r.is_error and "connect_database" in _text(r)

            # bad arguments: a tool error (isError) that names the reason
            r = await client.call_tool("search_code", {"query": "database", "k": 0})
            assert r.is_error and "k must be in 1..50" in _text(r)
            assert r.structured_content["error"] == "invalid_argument"
            r = await client.call_tool("search_code", {"query": "database", "k": "many"})
            assert r.is_error and "k" in _text(r) and "integer" in _text(r)
            r = await client.call_tool("search_code", {"query": "database", "level": "galaxy"})
            assert r.is_error and "level" in _text(r)
            r = await client.call_tool("search_code", {"query": "   "})
            assert r.is_error and "query is empty" in _text(r)
            r = await client.call_tool("search_code", {"query": "database", "cursor": "not-a-cursor"})
            assert r.is_error and "cursor" in _text(r)

            # reads outside the root are refused
            for bad in ("../outside.txt", "/etc/passwd", "app/../../outside.txt", "~/.ssh/id_rsa"):
                r = await client.call_tool("read_file", {"path": bad})
                assert r.is_error, bad
                assert r.structured_content["error"] == "refused", (bad, r.structured_content)
            r = await client.call_tool("read_file", {"path": "app/nope.py"})
            assert r.is_error and r.structured_content["error"] == "not_served"

            r = await client.call_tool("read_file", {"path": "app/db.py", "start": 4, "end": 6})
            assert not r.is_error
            assert "4| def connect_database" in _text(r)
            assert r.structured_content["symbols"] == ["app/db.py:4-6 :: connect_database"]

            r = await client.call_tool("index_status", {})
            st = r.structured_content["repos"][0]
            assert st["repo"] == "shop" and st["indexed"] and st["counts"]["files"] == 5
            assert st["vectors"]["enabled"] is False
            assert "shop: fresh" in _text(r)

    asyncio.run(go())


def test_stdio_paging_and_budget(indexed):
    root, idx = indexed
    budget = 1500

    async def go():
        async with _stdio(root, idx, "--max-tokens", str(budget)) as client:
            args = {"query": "handle webhook event payload", "k": 50, "mode": "standard", "detail": "signatures"}
            seen: list[str] = []
            scores: list[float] = []
            cursor, pages = "", 0
            while True:
                r = await client.call_tool("search_code", {**args, "cursor": cursor} if cursor else args)
                assert not r.is_error, _text(r)
                _tokens_ok(r, budget)
                sc = r.structured_content
                assert sc["total"] == 50 and sc["offset"] == len(seen)
                seen += [x["citation"] for x in sc["results"]]
                scores += [x["score"] for x in sc["results"]]
                pages += 1
                cursor = sc["next_cursor"]
                if not cursor:
                    break
                assert cursor in _text(r)
            assert pages >= 3
            assert len(seen) == 50 and len(set(seen)) == 50  # every result once, none skipped
            assert scores == sorted(scores, reverse=True)  # the second page continues the first's ranking

            # a cursor belongs to its call
            first = await client.call_tool("search_code", args)
            other = await client.call_tool("search_code", {**args, "query": "database",
                                                           "cursor": first.structured_content["next_cursor"]})
            assert other.is_error and "other arguments" in _text(other)

            # a long file comes in pages of lines that continue each other
            lines, cursor = [], ""
            while True:
                a = {"path": "app/handlers.py"}
                r = await client.call_tool("read_file", {**a, "cursor": cursor} if cursor else a)
                assert not r.is_error, _text(r)
                _tokens_ok(r, budget)
                sc = r.structured_content
                got = sc["text"].split("\n")
                assert int(got[0].split("|")[0]) == len(lines) + 1
                lines += got
                cursor = sc["next_cursor"]
                if not cursor:
                    break
            assert len(lines) == (root / "app/handlers.py").read_text().count("\n")

            # every other tool holds the budget too
            for name, a in [("list_files", {}), ("get_context", {"query": "webhook dispatch", "budget": 16000}),
                            ("callees", {"symbol": "handle_webhook_event_3"}), ("index_status", {}),
                            ("symbol", {"name": "dispatch_webhook"}), ("callers", {"symbol": "dispatch_webhook"})]:
                r = await client.call_tool(name, a)
                assert not r.is_error, (name, _text(r))
                _tokens_ok(r, budget)
            r = await client.call_tool("callers", {"symbol": "dispatch_webhook"})
            assert r.structured_content["total"] == 60  # every caller, paged under the budget
            assert r.structured_content["next_cursor"]

    asyncio.run(go())


def test_stdio_refreshes_a_stale_index(indexed, tmp_path):
    """An index older than the files is reported, refreshed in the background, and then answers."""
    root, _ = indexed
    import shutil

    repo = tmp_path / "shop2"
    shutil.copytree(root, repo)
    idx = tmp_path / "idx2"
    with Index(repo, Settings(index_dir=idx, embedder="none")) as ix:
        ix.update()
    (repo / "app/payments.py").write_text('def refund_payment(order):\n    """Refund an order."""\n    return order\n')

    async def go():
        async with _stdio(repo, idx) as client:
            deadline = time.monotonic() + 30
            while True:
                r = await client.call_tool("index_status", {})
                st = r.structured_content["repos"][0]
                if st["fresh"]:
                    break
                assert "app/payments.py" in st["added"] and "STALE" in _text(r)
                assert time.monotonic() < deadline
                await asyncio.sleep(0.3)
            assert st["refresh"]["last_update"]["added_paths"] == ["app/payments.py"]
            r = await client.call_tool("symbol", {"name": "refund_payment"})
            assert r.structured_content["matches"][0]["citation"] == "app/payments.py:1-3 :: refund_payment"
            (repo / "app/payments.py").unlink()
            r = await client.call_tool("reindex", {})
            assert not r.is_error and r.structured_content["reports"][0]["deleted"] == 1
            r = await client.call_tool("symbol", {"name": "refund_payment"})
            assert r.structured_content["count"] == 0

    asyncio.run(go())


# ---------------------------------------------------------------------------------------------- HTTP
KEYS = {
    "admin-key-0123456789": Scope(),
    # a principal whose role grants everything but internal/ (as repoctx.service.auth builds it)
    "restricted-key-0123456789": Scope(grants=(Grant("*", (), ("internal/*",)),)),
}


@pytest.fixture(scope="module")
def http_server(indexed):
    from repoctx.mcp import build_server

    root, idx = indexed
    server = build_server([root], Settings(index_dir=idx, embedder="none"), KEYS.get, refresh=False)
    with serve_http(server) as url:
        yield url


def _path(result: dict | str) -> str:
    """The file of a search result: a brief one is a line that starts with its citation,
    'path:start-end :: qualname...'; a file's brief line starts with its path."""
    if isinstance(result, str):
        return result.split(" :: ", 1)[0].rsplit(":", 1)[0] if " :: " in result.split(" — ", 1)[0] \
            else result.split(" — ", 1)[0]
    return result.get("path") or result["citation"].split(" :: ", 1)[0].rsplit(":", 1)[0]


async def _see(url: str, key: str) -> dict:
    async with http_client(url, key) as client:
        out = {}
        r = await client.call_tool("search_code", {"query": "classified launch codes and the database connection", "k": 20})
        out["search"] = {_path(x) for x in r.structured_content["results"]}
        r = await client.call_tool("search_code", {"query": "classified launch codes and the database connection",
                                                   "k": 20, "detail": "full"})
        out["search"] |= {_path(x) for x in r.structured_content["results"]}
        r = await client.call_tool("search_code", {"query": "launch codes vault", "k": 20, "level": "file"})
        out["search_files"] = {_path(x) for x in r.structured_content["results"]}
        r = await client.call_tool("search_code", {"query": "launch codes vault", "k": 20, "level": "file",
                                                   "detail": "signatures"})
        out["search_files"] |= {x["path"] for x in r.structured_content["results"]}
        r = await client.call_tool("list_files", {})
        out["files"] = set(r.structured_content["files"])
        r = await client.call_tool("symbol", {"name": "launch_codes"})
        out["find"] = r.structured_content["count"]
        r = await client.call_tool("callers", {"symbol": "connect_database"})
        out["callers"] = {c["path"] for c in r.structured_content["callers"]}
        r = await client.call_tool("read_file", {"path": "internal/launch.py"})
        out["read"] = r.structured_content.get("error") or "ok"
        r = await client.call_tool("get_context", {"query": "launch codes reactor vault", "budget": 1500})
        out["context"] = _text(r)
        r = await client.call_tool("index_status", {})
        out["status"] = r.structured_content["repos"][0]["counts"]["files"]
        return out


def test_http_restricted_key_never_sees_restricted_paths(http_server):
    admin = asyncio.run(_see(http_server, "admin-key-0123456789"))
    assert "internal/launch.py" in admin["search"] and "internal/launch.py" in admin["search_files"]
    assert "internal/launch.py" in admin["files"] and admin["find"] == 1 and admin["read"] == "ok"
    assert "internal/launch.py" in admin["callers"] and "launch_codes" in admin["context"]
    assert admin["status"] == 5

    seen = asyncio.run(_see(http_server, "restricted-key-0123456789"))
    assert not any(p.startswith("internal/") for p in seen["search"] | seen["search_files"] | seen["files"])
    assert seen["files"] and seen["search"]  # it still sees the rest
    assert seen["find"] == 0
    assert seen["callers"] == {"app/db.py"}
    assert seen["read"] == "not_served"
    assert "launch_codes" not in seen["context"] and "internal/" not in seen["context"]
    assert seen["status"] == 4


def test_http_missing_or_wrong_key_is_401(http_server):
    import httpx

    body = {"jsonrpc": "2.0", "id": 1, "method": "tools/list", "params": {}}
    hdrs = {"Accept": "application/json, text/event-stream", "Content-Type": "application/json"}
    assert httpx.post(http_server, json=body, headers=hdrs).status_code == 401
    for bad in ("Bearer wrong-key", "Bearer x", "Basic YWRtaW46YWRtaW4=", "admin-key-0123456789"):
        r = httpx.post(http_server, json=body, headers={**hdrs, "Authorization": bad})
        assert r.status_code == 401, bad
        assert "invalid_token" in r.text

    async def wrong():
        async with http_client(http_server, "wrong-key") as client:
            await client.list_tools()

    with pytest.raises(BaseException):
        asyncio.run(wrong())


def test_http_a_session_stays_with_its_key(http_server):
    """A restricted key cannot ride on a session an admin key opened."""
    import httpx

    hdrs = {"Accept": "application/json, text/event-stream", "Content-Type": "application/json"}
    init = {"jsonrpc": "2.0", "id": 1, "method": "initialize",
            "params": {"protocolVersion": "2025-06-18", "capabilities": {},
                       "clientInfo": {"name": "t", "version": "0"}}}
    r = httpx.post(http_server, json=init, headers={**hdrs, "Authorization": "Bearer admin-key-0123456789"})
    assert r.status_code == 200
    sid = r.headers["mcp-session-id"]
    call = {"jsonrpc": "2.0", "id": 2, "method": "tools/call",
            "params": {"name": "read_file", "arguments": {"path": "internal/launch.py"}}}
    r = httpx.post(http_server, json=call, headers={**hdrs, "Authorization": "Bearer restricted-key-0123456789",
                                                    "mcp-session-id": sid})
    assert r.status_code == 404 and "launch" not in r.text


# ---------------------------------------------------------------------------------------------- in process
def test_in_process_several_repositories(indexed, tmp_path):
    """Two repositories, each with its own index: tools take ``repo``; search merges, get_context asks."""
    from repoctx.mcp import build_server

    root, _ = indexed
    other = tmp_path / "billing"
    (other / "billing").mkdir(parents=True)
    (other / "billing/invoice.py").write_text('def connect_database_for_invoices():\n    """Billing db."""\n'
                                              '    return 1\n')
    with Index(other, Settings(embedder="none")) as ix:
        ix.update()
    copy = tmp_path / "shop"
    import shutil

    shutil.copytree(root, copy)
    with Index(copy, Settings(embedder="none")) as ix:
        ix.update()
    server = build_server([copy, other], Settings(embedder="none"), refresh=False)

    async def go():
        async with Client(server) as client:
            tools = {t.name: t for t in (await client.list_tools()).tools}
            assert "repo" in tools["search_code"].input_schema["properties"]
            r = await client.call_tool("search_code", {"query": "connect database", "k": 10})
            assert {x.split(":", 1)[0] for x in r.structured_content["results"]} == {"shop", "billing"}  # brief lines
            r = await client.call_tool("search_code", {"query": "connect database", "k": 10, "detail": "signatures"})
            repos = {x["repo"] for x in r.structured_content["results"]}
            assert repos == {"shop", "billing"}
            r = await client.call_tool("search_code", {"query": "connect database", "repo": "billing",
                                                       "detail": "signatures"})
            assert {x["repo"] for x in r.structured_content["results"]} == {"billing"}
            r = await client.call_tool("search_code", {"query": "x", "repo": "nope"})
            assert r.is_error and r.structured_content["error"] == "unknown_repo"
            r = await client.call_tool("get_context", {"query": "connect database"})
            assert r.is_error and r.structured_content["error"] == "ambiguous"
            r = await client.call_tool("get_context", {"query": "connect database", "repo": "billing"})
            assert not r.is_error and "billing/invoice.py" in _text(r)
            r = await client.call_tool("read_file", {"path": "billing/invoice.py"})
            assert not r.is_error and r.structured_content["repo"] == "billing"
            r = await client.call_tool("read_file", {"path": "shop:app/db.py", "start": 4, "end": 4})
            assert not r.is_error and "connect_database" in _text(r)
            r = await client.call_tool("list_files", {"glob": "*.py"})
            assert "billing:billing/invoice.py" in r.structured_content["files"]
            assert "shop:app/db.py" in r.structured_content["files"]
            r = await client.call_tool("index_status", {})
            assert [x["repo"] for x in r.structured_content["repos"]] == ["shop", "billing"]

    asyncio.run(go())


def test_start_is_fast_and_loads_no_model(indexed):
    """Opening an indexed repository does no indexing and never builds the embedder (REPOCTX_EMBEDDER=local)."""
    from repoctx.mcp import RepoctxMCP

    root, idx = indexed
    t0 = time.perf_counter()
    state = RepoctxMCP([root], Settings(index_dir=idx, embedder="local"), refresh=False)
    assert time.perf_counter() - t0 < 2.0
    ix = state.repos["shop"].index
    assert ix._embedder is None and ix._dense is None
    r = state.call("symbol", {"name": "run_query"})
    assert r["count"] == 1 and ix._embedder is None  # a lexical tool still loads nothing
    state.close()


def test_service_keys(indexed, tmp_path):
    """The HTTP service's keys (repoctx.service.auth) give the scope, when that module is installed."""
    auth = pytest.importorskip("repoctx.service.auth")
    from repoctx.mcp import service_scope_for_key

    root, idx = indexed
    ks = auth.KeyStore(tmp_path / "service.sqlite")
    ks.add_role("outside", repo="*", exclude=["internal/*"])
    _, key = ks.add_key("ann", "outside")
    ks.close()
    fn = service_scope_for_key(Settings(index_dir=tmp_path, embedder="none"))
    scope = fn(key)
    assert scope is not None and not scope.allows("shop", "internal/launch.py") and scope.allows("shop", "app/db.py")
    assert fn("rcx_000000000000_" + "x" * 40) is None


def test_unindexed_repository_is_built_in_the_background(tmp_path):
    from repoctx.mcp import RepoctxMCP

    repo = tmp_path / "fresh"
    (repo / "pkg").mkdir(parents=True)
    (repo / "pkg/mod.py").write_text('def brand_new():\n    """Never indexed before."""\n    return 1\n')
    state = RepoctxMCP([repo], Settings(index_dir=tmp_path / "idx", embedder="none"))
    r = state.call("symbol", {"name": "brand_new"})
    if "error" in r:  # the first build may already be done on a fast machine
        assert r["error"] == "not_indexed" and "index_status" in r["detail"]
    state.wait_refresh(30)
    r = state.call("symbol", {"name": "brand_new"})
    assert r["matches"][0]["citation"] == "pkg/mod.py:1-3 :: brand_new"
    assert "fresh" in state.call("index_status", {})["_text"]
    state.close()


def test_keys_file_and_register(tmp_path):
    import typer
    from typer.testing import CliRunner

    from repoctx.cli.mcp import register
    from repoctx.mcp import keys_file_scope_for_key

    keys = tmp_path / "keys.json"
    keys.write_text(json.dumps({"root-key": "admin", "ops-key": {"grants": [{"repo": "*", "exclude": ["internal/*"]}]},
                                "web-key": {"include": ["app/*"]}}))
    fn = keys_file_scope_for_key(keys)
    assert fn("root-key").unrestricted
    assert not fn("ops-key").allows("shop", "internal/launch.py") and fn("ops-key").allows("shop", "app/db.py")
    assert fn("web-key").allows("shop", "app/db.py") and not fn("web-key").allows("shop", "README.md")
    assert fn("nope") is None and fn("") is None

    app = typer.Typer()

    @app.command()
    def other():  # a second command, so `mcp` is a subcommand as in the repoctx CLI
        pass

    register(app)
    out = CliRunner().invoke(app, ["mcp", "--help"])
    assert out.exit_code == 0 and "--transport" in out.output and "--repo" in out.output
    out = CliRunner().invoke(app, ["mcp", "--transport", "pigeon"])
    assert out.exit_code == 2
