"""The MCP tools agents reach for by habit (issue 40) -- ``grep``, ``outline`` and ``symbol`` -- driven by the
official SDK's client: in process, and over streamable HTTP with bearer keys whose scopes the tools must keep.
Paging with the cursor, a bad regex as a tool error naming the problem, and grep's lines checked against the
files themselves (what ``git grep -n`` would print)."""
from __future__ import annotations

import asyncio
import json
import re
import shutil
from pathlib import Path

import pytest

from repoctx import Index, Settings
from repoctx.providers.embedding import count_tokens
from repoctx.store.base import Scope

mcp = pytest.importorskip("mcp")
from mcp import Client  # noqa: E402
from tests.mcp_http import http_client, serve_http  # noqa: E402

DB = '''"""Database helpers."""


def connect_database(url, timeout=5):
    """Open a connection to the database at url."""
    return {"url": url, "timeout": timeout}


class Pool:
    """A pool of connections."""

    def connect(self, url):
        """A connection from the pool."""
        return connect_database(url)

    def close(self):
        return None
'''

LAUNCH = '''from app.db import connect_database


def launch_codes():
    """The classified launch codes, kept in the reactor vault."""
    conn = connect_database("vault://reactor")
    return conn, "0000"


def close():
    """Close the vault."""
    return None
'''


def _handlers(n: int = 60) -> str:
    out = ['"""Webhook handlers."""\n']
    for i in range(n):
        out.append(f'''

def handle_webhook_event_{i}(payload, retries={i}):
    """Handle webhook event number {i}: validate the payload, then dispatch the webhook event."""
    if not payload:
        raise ValueError("empty webhook payload {i}")
    return dispatch_webhook(payload.get("event_{i}"), retries)
''')
    out.append('''

def dispatch_webhook(value, retries):
    """Send a webhook event on."""
    return value, retries
''')
    return "".join(out)


FILES = {"app/__init__.py": "", "app/db.py": DB, "app/handlers.py": _handlers(), "internal/launch.py": LAUNCH,
         "README.md": "# shop\n\nA tiny shop that connects to a database.\n"}


@pytest.fixture(scope="module")
def shop(tmp_path_factory):
    base = tmp_path_factory.mktemp("mcp-code")
    root = base / "shop"
    for rel, text in FILES.items():
        p = root / rel
        p.parent.mkdir(parents=True, exist_ok=True)
        p.write_text(text)
    idx = base / "idx"
    with Index(root, Settings(index_dir=idx, embedder="none")) as ix:
        ix.update()
    return root, idx


def _run(server, go) -> None:
    """Runs the coroutine function `go` to its end, then closes the server's repositories whatever happened."""
    try:
        asyncio.run(go())
    finally:
        server.repoctx.close()


def _text(result) -> str:
    return "\n".join(c.text for c in result.content if getattr(c, "type", "") == "text")


def _within(result, budget: int) -> None:
    assert count_tokens(_text(result)) <= budget
    assert count_tokens(json.dumps(result.structured_content, ensure_ascii=False, separators=(",", ":"))) <= budget


def _reference(root: Path, pattern: str, flags: int = 0, paths: tuple[str, ...] = ()) -> list[tuple[str, int, str]]:
    """What `git grep -n` prints for the files of the fixture: (path, line, text), by path then line."""
    rx = re.compile(pattern, flags)
    out = []
    for rel in sorted(FILES):
        if paths and not any(Path(rel).match(p) for p in paths):
            continue
        for n, line in enumerate((root / rel).read_text().split("\n")[:-1] if FILES[rel] else [], 1):
            if rx.search(line):
                out.append((rel, n, line))
    return out


async def _grep_all(client, args: dict, budget: int) -> tuple[list[tuple[str, int, str]], int, dict]:
    """Every page of one grep call: the matches in order, how many pages, the first page's result."""
    got, cursor, pages, first = [], "", 0, None
    while True:
        r = await client.call_tool("grep", {**args, "cursor": cursor} if cursor else args)
        assert not r.is_error, _text(r)
        _within(r, budget)
        sc = r.structured_content
        first = first or sc
        assert sc["offset"] == len(got)
        got += [(m["path"], m["line"], m["text"]) for m in sc["matches"]]
        for m in sc["matches"]:
            assert f"{m['path']}:{m['line']}: {m['text']}" in _text(r)  # the text is git grep's
        pages += 1
        cursor = sc["next_cursor"]
        if not cursor:
            break
        assert cursor in _text(r)
    return got, pages, first


# ---------------------------------------------------------------------------------------------- in process
def test_the_tools_are_listed_with_what_they_take(shop):
    from repoctx.mcp import build_server

    root, idx = shop
    server = build_server([root], Settings(index_dir=idx, embedder="none"), refresh=False)

    async def go():
        async with Client(server) as client:
            tools = {t.name: t for t in (await client.list_tools()).tools}
            assert {"grep", "outline", "symbol"} <= set(tools) and "find_symbol" not in tools
            g = tools["grep"].input_schema
            assert g["required"] == ["pattern"] and g["properties"]["paths"]["type"] == "array"
            assert {"fixed", "ignore_case", "paths", "context", "cursor"} <= set(g["properties"])
            assert tools["outline"].input_schema["required"] == ["path"]
            assert tools["symbol"].input_schema["required"] == ["name"]
            for name in ("grep", "outline", "symbol"):
                assert tools[name].annotations.read_only_hint is True
            # the descriptions tell an agent which to reach for
            assert "search_code" in tools["grep"].description and "exact" in tools["grep"].description
            assert "name" in tools["symbol"].description and "search_code" in tools["symbol"].description
            assert "before reading" in tools["outline"].description

    _run(server, go)


def test_grep_pages_every_matching_line_once_as_git_grep_would(shop):
    from repoctx.mcp import build_server

    root, idx = shop
    budget = 700
    server = build_server([root], Settings(index_dir=idx, embedder="none"), refresh=False, max_tokens=budget)

    async def go():
        async with Client(server) as client:
            got, pages, first = await _grep_all(client, {"pattern": r"webhook (event|payload)"}, budget)
            want = _reference(root, r"webhook (event|payload)")
            assert got == want and len(want) == 121 and pages >= 3
            assert first["total"] == 121 and first["total_exact"] and first["files_matched"] == 1

            # literal, case, path globs
            got, _, _ = await _grep_all(client, {"pattern": "CONNECT", "fixed": True, "ignore_case": True,
                                                 "paths": ["app/*"]}, budget)
            assert got == _reference(root, "connect", re.I, ("app/*",)) and len(got) == 6
            got, _, _ = await _grep_all(client, {"pattern": "connect(", "fixed": True}, budget)
            assert got == _reference(root, re.escape("connect("))

            # context lines, as git grep -C prints them
            r = await client.call_tool("grep", {"pattern": "^class Pool", "context": 1})
            m = r.structured_content["matches"]
            assert [(x["path"], x["line"]) for x in m] == [("app/db.py", 9)]
            assert m[0]["before"] == [""] and m[0]["after"] == ['    """A pool of connections."""']
            assert 'app/db.py-10-     """A pool of connections."""' in _text(r)

            # nothing found is an answer, not an error
            r = await client.call_tool("grep", {"pattern": "no_such_text_anywhere"})
            assert not r.is_error and r.structured_content["total"] == 0 and "no matching line" in _text(r)

            # a cursor belongs to its call
            first = await client.call_tool("grep", {"pattern": "webhook"})
            other = await client.call_tool("grep", {"pattern": "payload", "cursor": first.structured_content["next_cursor"]})
            assert other.is_error and "other arguments" in _text(other)

    _run(server, go)


def test_a_bad_regex_is_a_tool_error_naming_the_problem(shop):
    from repoctx.mcp import build_server

    root, idx = shop
    server = build_server([root], Settings(index_dir=idx, embedder="none"), refresh=False)

    async def go():
        async with Client(server) as client:
            for pattern, problem in (("def (connect", "missing ), unterminated subpattern at position 4"),
                                     ("[a-", "unterminated character set at position 0"),
                                     ("*webhook", "nothing to repeat at position 0")):
                r = await client.call_tool("grep", {"pattern": pattern})
                assert r.is_error, pattern
                assert r.structured_content["error"] == "invalid_argument"
                assert problem in r.structured_content["detail"] and problem in _text(r), _text(r)
                assert _text(r).startswith("grep failed (invalid_argument): bad pattern")
            r = await client.call_tool("grep", {"pattern": "x", "paths": ["src/[z-a]*"]})
            assert r.is_error and "src/[z-a]*" in _text(r)
            r = await client.call_tool("grep", {"pattern": ""})
            assert r.is_error and "pattern is empty" in _text(r)
            r = await client.call_tool("grep", {"pattern": "x", "context": 99})
            assert r.is_error and "context" in _text(r)

    _run(server, go)


def test_outline_lists_units_with_signatures_spans_and_callers_in_pages(shop):
    from repoctx.mcp import build_server

    root, idx = shop
    budget = 800
    server = build_server([root], Settings(index_dir=idx, embedder="none"), refresh=False, max_tokens=budget)

    async def go():
        async with Client(server) as client:
            r = await client.call_tool("outline", {"path": "app/db.py"})
            assert not r.is_error, _text(r)
            units = {u["qualname"]: u for u in r.structured_content["units"]}
            assert list(units) == ["connect_database", "Pool", "Pool.connect", "Pool.close"]
            assert units["connect_database"]["callers"] == 2  # Pool.connect and launch_codes
            assert (units["Pool.connect"]["depth"], units["Pool.connect"]["parent"]) == (1, "Pool")
            assert units["Pool.connect"]["citation"] == "app/db.py:12-14 :: Pool.connect"
            text = _text(r)
            assert "4-6 connect_database: def connect_database(url, timeout=5) · 2 callers" in text
            assert "  12-14 Pool.connect: def connect(self, url) · 0 callers" in text

            seen, cursor = [], ""
            while True:  # a long file comes in pages that continue each other
                a = {"path": "app/handlers.py"}
                r = await client.call_tool("outline", {**a, "cursor": cursor} if cursor else a)
                assert not r.is_error, _text(r)
                _within(r, budget)
                seen += [u["qualname"] for u in r.structured_content["units"]]
                cursor = r.structured_content["next_cursor"]
                if not cursor:
                    break
            assert seen == [f"handle_webhook_event_{i}" for i in range(60)] + ["dispatch_webhook"]

            r = await client.call_tool("outline", {"path": "app/nope.py"})
            assert not r.is_error and r.structured_content["units"] == [] and "not an indexed file" in _text(r)

    _run(server, go)


def test_symbol_returns_whole_bodies_and_lists_every_match(shop):
    from repoctx.mcp import build_server

    root, idx = shop
    server = build_server([root], Settings(index_dir=idx, embedder="none"), refresh=False)

    async def go():
        async with Client(server) as client:
            r = await client.call_tool("symbol", {"name": "Pool.connect"})
            m = r.structured_content["matches"]
            assert [x["citation"] for x in m] == ["app/db.py:12-14 :: Pool.connect"]
            assert m[0]["text"].lstrip().startswith("def connect(self, url):")
            assert m[0]["text"].rstrip().endswith("return connect_database(url)")  # the whole body
            assert "return connect_database(url)" in _text(r)

            # several definitions: all listed, none guessed
            r = await client.call_tool("symbol", {"name": "close"})
            cites = [x["citation"] for x in r.structured_content["matches"]]
            assert sorted(cites) == ["app/db.py:16-17 :: Pool.close", "internal/launch.py:10-12 :: close"]
            assert r.structured_content["total"] == 2 and all(c in _text(r) for c in cites)
            r = await client.call_tool("symbol", {"name": "close", "body": False})
            assert all("text" not in x for x in r.structured_content["matches"])
            assert "Close the vault" not in _text(r) and "def close()" in _text(r)

            # no match: a hint and what it may have meant
            r = await client.call_tool("symbol", {"name": "Pool.disconnect"})
            assert not r.is_error and r.structured_content["matches"] == []
            assert "no definition" in _text(r)
            r = await client.call_tool("symbol", {"name": "Vault.close"})
            assert set(r.structured_content["did_you_mean"]) == {"Pool.close", "close"}

    _run(server, go)


def test_a_body_longer_than_the_budget_is_cut_with_a_note(tmp_path):
    from repoctx.mcp import build_server

    root = tmp_path / "big"
    (root / "pkg").mkdir(parents=True)
    body = "\n".join(f"    total = total + {i}  # step {i} of a very long function" for i in range(600))
    (root / "pkg/long.py").write_text(f"def very_long(total):\n{body}\n    return total\n")
    with Index(root, Settings(index_dir=tmp_path / "idx", embedder="none")) as ix:
        ix.update()
    budget = 1000
    server = build_server([root], Settings(index_dir=tmp_path / "idx", embedder="none"), refresh=False,
                          max_tokens=budget)

    async def go():
        async with Client(server) as client:
            r = await client.call_tool("symbol", {"name": "very_long"})
            assert not r.is_error
            _within(r, budget)
            m = r.structured_content["matches"][0]
            assert m["text"].startswith("def very_long(total):") and "read_file pkg/long.py from line" in m["text_note"]

    _run(server, go)


def test_grep_pages_across_repositories_with_views_of_their_own(shop, tmp_path):
    from repoctx.mcp import build_server

    root, _ = shop
    a, b = tmp_path / "shop", tmp_path / "billing"
    shutil.copytree(root, a)
    (b / "billing").mkdir(parents=True)
    (b / "billing/invoice.py").write_text("".join(f"def webhook_invoice_{i}():\n    return 'webhook payload {i}'\n"
                                                  for i in range(30)))
    for r in (a, b):
        with Index(r, Settings(embedder="none")) as ix:
            ix.update()
    budget = 700
    server = build_server([a, b], Settings(embedder="none"), refresh=False, max_tokens=budget)

    async def go():
        async with Client(server) as client:
            got, cursor = [], ""
            while True:
                args = {"pattern": "webhook payload"}
                r = await client.call_tool("grep", {**args, "cursor": cursor} if cursor else args)
                assert not r.is_error, _text(r)
                _within(r, budget)
                got += [(m["repo"], m["path"], m["line"]) for m in r.structured_content["matches"]]
                cursor = r.structured_content["next_cursor"]
                if not cursor:
                    break
            want = [("shop", p, n) for p, n, _ in _reference(a, "webhook payload")] + \
                   [("billing", "billing/invoice.py", 2 * i + 2) for i in range(30)]
            assert got == want
            r = await client.call_tool("grep", {"pattern": "webhook payload", "repo": "billing"})
            assert {m["repo"] for m in r.structured_content["matches"]} == {"billing"}
            assert "billing:billing/invoice.py:2: " in _text(r)  # several repositories: named
            r = await client.call_tool("outline", {"path": "billing/invoice.py"})
            assert r.structured_content["repo"] == "billing" and r.structured_content["total"] == 30
            r = await client.call_tool("symbol", {"name": "connect_database"})
            assert [x["repo"] for x in r.structured_content["matches"]] == ["shop"]

    _run(server, go)


# ---------------------------------------------------------------------------------------------- HTTP, scopes
KEYS = {
    "admin-key-0123456789": Scope(),
    "no-internal-key-0123456789": Scope(exclude=("internal/*",)),
    "one-file-key-0123456789": Scope(include=("app/db.py",)),  # a key limited to one path
}


@pytest.fixture(scope="module")
def http_server(shop):
    from repoctx.mcp import build_server

    root, idx = shop
    server = build_server([root], Settings(index_dir=idx, embedder="none"), KEYS.get, refresh=False)
    with serve_http(server) as url:
        yield url
    server.repoctx.close()


async def _see(url: str, key: str) -> dict:
    async with http_client(url, key) as client:
        out = {}
        r = await client.call_tool("grep", {"pattern": "vault|connect|dispatch_webhook\\(", "ignore_case": True})
        assert not r.is_error, _text(r)
        out["grep"] = {m["path"] for m in r.structured_content["matches"]}
        out["grep_text"] = _text(r)
        r = await client.call_tool("grep", {"pattern": "launch_codes", "paths": ["internal/*"]})
        out["grep_internal"] = r.structured_content["total"]
        out["outline"] = {}
        for path in ("internal/launch.py", "app/db.py", "app/handlers.py", "internal/missing.py"):
            r = await client.call_tool("outline", {"path": path})
            assert not r.is_error, _text(r)
            out["outline"][path] = ([u["qualname"] for u in r.structured_content["units"]],
                                    r.structured_content.get("hint"))
        r = await client.call_tool("outline", {"path": "app/db.py"})
        out["db_callers"] = {u["qualname"]: u["callers"] for u in r.structured_content["units"]}
        out["symbol"] = {}
        for name in ("launch_codes", "close", "connect_database", "dispatch_webhook"):
            r = await client.call_tool("symbol", {"name": name})
            out["symbol"][name] = sorted(x["path"] for x in r.structured_content["matches"])
            out["symbol_text_" + name] = _text(r)
        r = await client.call_tool("grep", {"pattern": "(unclosed"})
        out["bad"] = (r.is_error, r.structured_content["error"], _text(r))
        return out


def test_a_key_never_sees_what_its_scope_hides_through_grep_outline_or_symbol(http_server):
    admin = asyncio.run(_see(http_server, "admin-key-0123456789"))
    assert admin["grep"] == {"app/db.py", "app/handlers.py", "internal/launch.py", "README.md"}
    assert admin["grep_internal"] == 1
    assert admin["outline"]["internal/launch.py"][0] == ["launch_codes", "close"]
    assert admin["db_callers"]["connect_database"] == 2
    assert admin["symbol"]["launch_codes"] == ["internal/launch.py"]
    assert admin["symbol"]["close"] == ["app/db.py", "internal/launch.py"]

    hidden = asyncio.run(_see(http_server, "no-internal-key-0123456789"))
    assert hidden["grep"] == {"app/db.py", "app/handlers.py", "README.md"} and "reactor" not in hidden["grep_text"]
    assert hidden["grep_internal"] == 0
    # a hidden file answers exactly as a file that does not exist
    assert hidden["outline"]["internal/launch.py"][0] == []
    assert hidden["outline"]["internal/launch.py"][1].replace("launch.py", "X") == \
        hidden["outline"]["internal/missing.py"][1].replace("missing.py", "X")
    assert hidden["db_callers"]["connect_database"] == 1  # launch_codes' call is not counted
    assert hidden["symbol"]["launch_codes"] == [] and hidden["symbol"]["close"] == ["app/db.py"]
    assert "reactor" not in hidden["symbol_text_launch_codes"].lower()

    one = asyncio.run(_see(http_server, "one-file-key-0123456789"))  # limited to app/db.py
    assert one["grep"] == {"app/db.py"}
    assert one["outline"]["app/db.py"][0] == ["connect_database", "Pool", "Pool.connect", "Pool.close"]
    assert one["outline"]["app/handlers.py"][0] == [] and one["outline"]["internal/launch.py"][0] == []
    assert one["db_callers"]["connect_database"] == 1  # only Pool.connect, in the one file it sees
    assert one["symbol"] == {"launch_codes": [], "close": ["app/db.py"], "connect_database": ["app/db.py"],
                             "dispatch_webhook": []}
    assert "retries" not in one["grep_text"] and "reactor" not in one["grep_text"]

    for seen in (admin, hidden, one):  # a bad regex is an error for every key, naming the problem
        is_error, code, text = seen["bad"]
        assert is_error and code == "invalid_argument" and "missing ), unterminated subpattern" in text
