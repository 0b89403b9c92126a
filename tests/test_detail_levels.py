"""What a search returns at each ``detail`` level (issue 40): compact by default, and the same answer on every
surface. ``brief`` at k=10 on a real tree (repoctx's own ``src/``) stays within 600 tokens; the CLI's
``--json``, the MCP server's structured content and the service's ``POST /search`` give the same hits with the
same fields at each level."""
from __future__ import annotations

import asyncio
import json
import shutil
from pathlib import Path

import httpx
import pytest
from typer.testing import CliRunner

from repoctx import Index, Settings, render
from repoctx.providers.embedding import count_tokens

SRC = Path(__file__).resolve().parents[1] / "src"
QUERIES = [
    "where is the cursor of a paged MCP result decoded",
    "Index.search",
    "how is an API key checked before a request is served",
    "RepoTools.read_file",
    "token budget of a compressed context",
    "incremental reindex of changed files",
    "repoctx/store/globs.py",
]
BRIEF_BUDGET = 600


@pytest.fixture(scope="module")
def src_index(tmp_path_factory):
    """repoctx's own source, indexed lexically (a snapshot: the tree may change under a running test)."""
    base = tmp_path_factory.mktemp("own-src")
    root = base / "src"
    shutil.copytree(SRC, root, ignore=shutil.ignore_patterns("__pycache__", "*.egg-info", "*.onnx", "*.bin"))
    settings = Settings(index_dir=base / "idx", embedder="none", memory_lexical=False)
    with Index(root, settings) as ix:
        ix.update()
    return root, settings


def test_brief_at_k10_on_a_real_tree_is_within_600_tokens(src_index):
    root, settings = src_index
    with Index(root, settings, create=False) as ix:
        sizes = {}
        for q in QUERIES:
            r = ix.retrieve(q, k=10)
            assert len(r.hits) == 10
            sizes[q] = {d: count_tokens(render.retrieval_text(r, d, index=ix)) for d in render.DETAILS}
    for q, size in sizes.items():
        assert size["brief"] <= BRIEF_BUDGET, (q, size)
        assert size["brief"] < size["signatures"] < size["full"], (q, size)
    # and it is a fraction of what the full answer costs
    assert sum(s["brief"] for s in sizes.values()) * 4 < sum(s["full"] for s in sizes.values())


def test_brief_lines_say_where_what_and_why(src_index):
    root, settings = src_index
    with Index(root, settings, create=False) as ix:
        r = ix.retrieve("RepoTools.read_file", k=10, mode="standard")
        text = render.retrieval_text(r, "brief")
        first = render.result_dicts(r, "brief")[0]
    assert first["citation"].endswith(":: RepoTools.read_file") and first["why"].startswith("exact name")
    assert first["sig"].startswith("(path, start, end, repo)")  # names only, no self
    line = text.splitlines()[1]
    assert line == f"{first['citation']}{first['sig']} — {first['why']}"


def _cli_json(root: Path, settings: Settings, query: str, detail: str, monkeypatch) -> dict:
    from repoctx.cli import app

    monkeypatch.setenv("REPOCTX_INDEX_DIR", str(settings.index_dir))
    monkeypatch.setenv("REPOCTX_EMBEDDER", "none")
    monkeypatch.setenv("REPOCTX_MEMORY_LEXICAL", "0")
    res = CliRunner().invoke(app, ["search", query, "--repo", str(root), "-k", "10", "--mode", "standard",
                                   "--detail", detail, "--json"])
    assert res.exit_code == 0, res.output
    return json.loads(res.stdout)


def _mcp_results(root: Path, settings: Settings, query: str) -> dict:
    from mcp import Client

    from repoctx.mcp import build_server

    server = build_server([root], settings, refresh=False)

    async def go():
        out = {}
        async with Client(server) as client:
            for d in render.DETAILS:
                r = await client.call_tool("search_code", {"query": query, "k": 10, "mode": "standard", "detail": d})
                assert not r.is_error
                out[d] = r.structured_content
            r = await client.call_tool("search_code", {"query": query, "k": 10, "mode": "standard"})
            out["default"] = r.structured_content
            out["default_text"] = "\n".join(c.text for c in r.content)
        return out

    try:
        return asyncio.run(go())
    finally:
        server.repoctx.close()


def _service_results(settings: Settings, query: str) -> dict:
    from repoctx.service.app import create_app
    from repoctx.service.config import ServiceSettings

    app = create_app(settings, service=ServiceSettings(key_cache_seconds=0), inprocess_workers=0)
    svc = app.state.service
    _, key = svc.keys.add_key("root", "admin")
    h = {"Authorization": f"Bearer {key}"}

    async def go():
        out = {}
        async with httpx.AsyncClient(transport=httpx.ASGITransport(app=app), base_url="http://t") as c:
            body = {"query": query, "k": 10, "mode": "standard"}
            for d in render.DETAILS:
                r = await c.post("/search", json={**body, "detail": d}, headers=h)
                assert r.status_code == 200, r.text
                out[d] = r.json()
            out["default"] = (await c.post("/search", json=body, headers=h)).json()
            for bad in ("everything", 1, None, ["brief"]):
                r = await c.post("/search", json={**body, "detail": bad}, headers=h)
                assert r.status_code == 422 and r.json()["error"] == "invalid_request", (bad, r.text)
                assert r.json()["fields"][0]["field"] == "detail"
        return out

    try:
        return asyncio.run(go())
    finally:
        svc.close()


def test_each_level_means_the_same_on_the_cli_mcp_and_the_service(src_index, monkeypatch):
    root, settings = src_index
    query = "where is the cursor of a paged MCP result decoded"
    mcp = _mcp_results(root, settings, query)
    service = _service_results(settings, query)
    fields = {"brief": {"citation", "repo", "sig", "why"}}  # the dict a brief line is made of
    fields["signatures"] = fields["brief"] | {"path", "start_line", "end_line", "symbol", "kind", "score",
                                              "signature", "docstring", "callers", "callees"}
    fields["full"] = fields["signatures"] | {"snippet"}
    for d in render.DETAILS:
        cli = _cli_json(root, settings, query, d, monkeypatch)
        assert cli["detail"] == mcp[d]["detail"] == service[d]["detail"] == d
        assert len(cli["results"]) == 10
        assert cli["results"] == mcp[d]["results"] == service[d]["results"], d  # same hits, same fields, same values
        if d == "brief":  # sent as the one line per hit the text shows, with its citation first
            assert all(isinstance(x, str) and " :: " in x and " — " in x for x in cli["results"]), cli["results"]
            assert "route" not in cli and "seconds" not in cli
            assert count_tokens(json.dumps(cli, ensure_ascii=False)) <= BRIEF_BUDGET
            continue
        for item in cli["results"]:
            assert fields[d] <= set(item) <= fields[d] | {"snippet_note"}, (d, sorted(item))
    # brief is the default everywhere
    assert mcp["default"]["results"] == service["default"]["results"] == mcp["brief"]["results"]
    assert count_tokens(mcp["default_text"]) <= BRIEF_BUDGET
    assert mcp["default_text"].splitlines()[1] == mcp["brief"]["results"][0]
