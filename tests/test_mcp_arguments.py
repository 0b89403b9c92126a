"""Arguments a tool does not take are refused with an error that names them, rather than dropped: a client
asking a one-repository server for ``repo="nope"`` used to get that repository's answer as if it were nope's."""
from __future__ import annotations

import asyncio

import pytest

from repoctx import Index, Settings
from tests.conftest import write_tree

pytest.importorskip("mcp")
from mcp import Client  # noqa: E402

DB = 'def connect_database(url):\n    """Open a connection to the database."""\n    return url\n'


def _indexed(root, idx=None):
    write_tree(root, {"app/db.py": DB})
    with Index(root, Settings(index_dir=idx, embedder="none")) as ix:
        ix.update()
    return root


def test_one_repository_refuses_repo_and_other_unknown_arguments(tmp_path):
    from repoctx.mcp import build_server

    root = _indexed(tmp_path / "shop", tmp_path / "idx")
    server = build_server([root], Settings(index_dir=tmp_path / "idx", embedder="none"), refresh=False)

    async def go():
        async with Client(server) as client:
            r = await client.call_tool("search_code", {"query": "connect database"})
            assert not r.is_error and r.structured_content["results"]
            for tool, args in [("search_code", {"query": "connect database", "repo": "nope"}),
                               ("symbol", {"name": "connect_database", "repo": "shop"}),
                               ("index_status", {"repo": "nope"}), ("reindex", {"repo": "nope"})]:
                r = await client.call_tool(tool, args)
                assert r.is_error, (tool, r)
                sc = r.structured_content
                assert sc["error"] == "invalid_argument" and sc["tool"] == tool and sc["arguments"] == ["repo"]
                assert "'repo'" in r.content[0].text and "one repository" in r.content[0].text
            r = await client.call_tool("callers", {"symbol": "connect_database", "limit": 5, "depth": 2})
            assert r.is_error and r.structured_content["arguments"] == ["depth", "limit"]
            assert "symbol" in r.structured_content["detail"]  # what it does take

    asyncio.run(go())
    server.repoctx.close()


def test_several_repositories_refuse_an_unknown_repo_and_unknown_arguments(tmp_path):
    from repoctx.mcp import build_server

    a = _indexed(tmp_path / "shop")
    b = _indexed(tmp_path / "billing")
    server = build_server([a, b], Settings(embedder="none"), refresh=False)

    async def go():
        async with Client(server) as client:
            r = await client.call_tool("search_code", {"query": "connect database", "repo": "billing",
                                                       "detail": "signatures"})
            assert not r.is_error and {x["repo"] for x in r.structured_content["results"]} == {"billing"}
            r = await client.call_tool("search_code", {"query": "connect database", "repo": "nope"})
            assert r.is_error and r.structured_content["error"] == "unknown_repo"
            assert "shop" in r.structured_content["detail"] and "billing" in r.structured_content["detail"]
            r = await client.call_tool("list_files", {"glob": "*.py", "repository": "billing"})
            assert r.is_error and r.structured_content["arguments"] == ["repository"]

    asyncio.run(go())
    server.repoctx.close()
