"""`repoctx mcp --repo PATH` reads the index `repoctx index PATH` wrote, wherever that was, and says nothing
about vectors it is not filling.

An MCP client starts its server with a small environment of its own (the SDK's default passes HOME, PATH,
SHELL, TERM, USER and LOGNAME): REPOCTX_INDEX_DIR and REPOCTX_EMBEDDER set in the user's shell do not reach it.
The server used to miss the index, build a second one inside the repository (`PATH/.repoctx`) with the default
embedder, answer `not_indexed` until it was done, and then say on every search that vectors were "still being
filled"."""
from __future__ import annotations

import asyncio
import threading

import pytest
from typer.testing import CliRunner

from repoctx import Index, Settings
from repoctx.cli import app
from repoctx.index import resolve_settings
from tests.conftest import write_tree

pytest.importorskip("mcp")
from mcp import Client  # noqa: E402

FILES = {
    "app/__init__.py": "",
    "app/dates.py": 'def parse_http_date(value):\n    """Parse an HTTP date header."""\n    return value\n',
    "app/cache.py": 'def expire_entries(cache):\n    """Drop stale cache entries."""\n    return parse_http_date(cache)\n',
}
CLIENT_ENV = ("HOME", "PATH", "SHELL", "TERM", "USER", "LOGNAME")  # mcp.client.stdio's default environment


@pytest.fixture
def shell(tmp_path, monkeypatch):
    """A user's shell: a home of its own, REPOCTX_* as a user would export them, and a repository."""
    monkeypatch.setenv("HOME", str(tmp_path / "home"))
    from repoctx import config

    # the real rule: under HOME
    monkeypatch.setattr("repoctx.config.records_dir", lambda: config.default_cache_dir() / "locations")
    for var in ("REPOCTX_CACHE", "REPOCTX_DATABASE_URL", "REPOCTX_INDEX_DIR", "REPOCTX_EMBEDDER"):
        monkeypatch.delenv(var, raising=False)
    monkeypatch.setenv("REPOCTX_INDEX_DIR", str(tmp_path / "store"))
    monkeypatch.setenv("REPOCTX_EMBEDDER", "none")
    root = write_tree(tmp_path / "shop", FILES)
    res = CliRunner().invoke(app, ["index", str(root)])
    assert res.exit_code == 0, res.output
    assert (tmp_path / "store" / "index.sqlite").exists() and not (root / ".repoctx").exists()
    return root


def _as_mcp_client_starts_it(monkeypatch) -> None:
    import os

    for var in list(os.environ):
        if var.startswith("REPOCTX_") and var not in CLIENT_ENV:
            monkeypatch.delenv(var)


def _search_and_status(server) -> tuple[dict, dict]:
    async def go():
        async with Client(server) as client:
            r = await client.call_tool("search_code", {"query": "parse an http date header", "k": 3})
            assert not r.is_error, r.content[0].text
            s = await client.call_tool("index_status", {})
            return r.structured_content, s.structured_content["repos"][0]

    return asyncio.run(go())


@pytest.mark.parametrize("environment", ["the shell's", "an MCP client's"])
def test_mcp_answers_from_the_index_repoctx_index_wrote(shell, monkeypatch, environment):
    from repoctx.mcp import build_server

    root = shell
    if environment == "an MCP client's":
        _as_mcp_client_starts_it(monkeypatch)
    server = build_server([root])  # settings as `repoctx mcp --repo PATH` resolves them
    state = server.repoctx
    try:
        assert not state.repos["shop"].building  # found: nothing to build, no not_indexed answers
        assert state.settings.index_dir == root.parent / "store" and state.settings.embedder == "none"
        found, status = _search_and_status(server)
        assert found["results"][0].startswith("app/dates.py:1-3 :: parse_http_date(")  # brief: one line per hit
        assert not any("vector" in n for n in found.get("notes", [])), found  # no embedder: nothing to say  # no embedder: nothing to say
        assert status["indexed"] and status["vectors"]["enabled"] is False
        state.wait_refresh(30)
        assert not (root / ".repoctx").exists()  # no second index inside the user's tree
    finally:
        state.close()


def test_mcp_command_and_cli_search_resolve_the_store_alike(shell, monkeypatch):
    """`repoctx search` in a shell without the variables finds the index too: one rule for every command."""
    root = shell
    _as_mcp_client_starts_it(monkeypatch)
    res = CliRunner().invoke(app, ["search", "parse_http_date", "--repo", str(root), "-k", "1"])
    assert res.exit_code == 0 and "app/dates.py:1-3 :: parse_http_date" in res.output
    assert "vector" not in res.output
    res = CliRunner().invoke(app, ["status", str(root)])
    assert res.exit_code == 0 and res.output.startswith("fresh")
    assert not (root / ".repoctx").exists()


def test_the_environment_wins_over_the_record(shell, monkeypatch, tmp_path):
    root = shell
    monkeypatch.setenv("REPOCTX_INDEX_DIR", str(tmp_path / "elsewhere"))
    monkeypatch.setenv("REPOCTX_EMBEDDER", "local")
    s = resolve_settings([root])
    assert s.index_dir == tmp_path / "elsewhere" and s.embedder == "local"
    # a record whose index was removed is not followed
    _as_mcp_client_starts_it(monkeypatch)
    import shutil

    shutil.rmtree(tmp_path / "store")
    s = resolve_settings([root])
    assert s.index_dir is None and s.embedder == "local"


class _Embedder:
    model_id, dim = "test:flat-8", 8

    def encode(self, texts):
        import numpy as np

        return np.ones((len(texts), self.dim), dtype=np.float32) / np.sqrt(self.dim)


def test_vector_notes_say_only_what_is_true(tmp_path):
    """'still being filled' only while a fill runs; nothing at all when no embedder is configured."""
    root = write_tree(tmp_path / "r", FILES)
    lexical = Settings(index_dir=tmp_path / "idx", embedder="none")
    with Index(root, lexical) as ix:
        ix.update()
        assert ix.retrieve("parse http date", mode="standard").notes == []
    with Index(root, lexical, embedder=_Embedder(), create=False) as ix:  # a model, but no vectors built
        notes = ix.retrieve("parse http date", mode="standard").notes
        assert len(notes) == 1 and "still being filled" not in notes[0] and "dense search is off" in notes[0]
        writer = ix.store.writer(ix.repo)
        held, release = threading.Event(), threading.Event()

        def fill():  # another process filling: it holds the repository's vectors lock
            with writer.lock("vectors"):
                held.set()
                release.wait(30)

        t = threading.Thread(target=fill)
        t.start()
        try:
            held.wait(10)
            notes = ix.retrieve("parse http date", mode="standard").notes
            assert len(notes) == 1 and "still being filled" in notes[0]
        finally:
            release.set()
            t.join(10)
