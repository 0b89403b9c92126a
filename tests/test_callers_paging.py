"""callers/callees count every edge and page to the end (click's ``echo`` has 216 callers; the tools used
to stop at 50 with no cursor and a total of 50)."""
from __future__ import annotations

import asyncio

import pytest

from repoctx import Index, Settings
from repoctx.copilot.tools import MAX_EDGES, RepoTools
from tests.conftest import write_tree

N_CALLERS = 130
N_CALLEES = 70


def _repo(root):
    files = {"lib/__init__.py": "", "app/__init__.py": "",
             "lib/core.py": 'def echo(message):\n    """Print a message."""\n    return message\n'}
    for f in range(13):
        body = ["from lib.core import echo\n"]
        for i in range(10):
            body.append(f"\ndef command_{f}_{i}(ctx):\n    echo('command {f} {i}')\n    return ctx\n")
        files[f"app/cmd_{f}.py"] = "".join(body)
    helpers = "".join(f"\ndef helper_{i}(x):\n    return x + {i}\n" for i in range(N_CALLEES))
    calls = "".join(f"    x = helper_{i}(x)\n" for i in range(N_CALLEES))
    files["lib/pipeline.py"] = helpers + f"\n\ndef run_all(x):\n{calls}    return x\n"
    return write_tree(root, files)


@pytest.fixture(scope="module")
def indexed(tmp_path_factory):
    base = tmp_path_factory.mktemp("callers")
    root = _repo(base / "cli")
    settings = Settings(index_dir=base / "idx", embedder="none")
    with Index(root, settings) as ix:
        ix.update()
    return root, settings


def test_the_library_and_the_copilot_tool_report_the_true_total(indexed):
    root, settings = indexed
    with Index(root, settings, create=False) as ix:
        echo = ix.find("echo")[0]
        assert len({e.src for e in ix.callers(echo.id)}) == N_CALLERS
        rt = RepoTools(ix)
        out = rt.callers("echo")
        assert out["total"] == N_CALLERS and out["count"] == MAX_EDGES and out["truncated"] is True
        assert len(out["callers"]) == MAX_EDGES and f"of {N_CALLERS} callers" in out["note"]
        everything = rt.callers("echo", limit=0)
        assert everything["total"] == everything["count"] == N_CALLERS and not everything["truncated"]
        assert len({c["citation"] for c in everything["callers"]}) == N_CALLERS
        down = rt.callees("run_all")
        assert down["total"] == N_CALLEES and down["count"] == MAX_EDGES and down["truncated"] is True
        small = rt.callers("helper_3")
        assert small["total"] == small["count"] == 1 and small["truncated"] is False


@pytest.mark.parametrize("tool,symbol,total", [("callers", "echo", N_CALLERS), ("callees", "run_all", N_CALLEES)])
def test_mcp_pages_every_caller_exactly_once(indexed, tool, symbol, total):
    from repoctx.mcp import RepoctxMCP

    root, settings = indexed
    state = RepoctxMCP([root], settings, max_tokens=1500, refresh=False)
    try:
        seen: list[str] = []
        cursor, pages = "", 0
        while True:
            r = state.call(tool, {"symbol": symbol, "cursor": cursor})
            assert "error" not in r, r
            assert r["total"] == total and r["offset"] == len(seen)
            seen += [c["citation"] for c in r[tool]]
            pages += 1
            cursor = r["next_cursor"]
            if not cursor:
                break
            assert f"of {total}" in r["_text"]
        assert pages >= 3  # the budget forces pages: the cursor carried them, none was dropped
        assert len(seen) == total and len(set(seen)) == total
    finally:
        state.close()


def test_mcp_protocol_reports_the_total(indexed):
    from mcp import Client

    from repoctx.mcp import build_server

    root, settings = indexed
    server = build_server([root], settings, refresh=False)

    async def go():
        async with Client(server) as client:
            r = await client.call_tool("callers", {"symbol": "echo"})
            assert not r.is_error
            assert r.structured_content["total"] == N_CALLERS
            assert r.structured_content["count"] == N_CALLERS  # 130 short lines fit one 20,000-token result
            assert r.structured_content["next_cursor"] is None

    asyncio.run(go())
    server.repoctx.close()
