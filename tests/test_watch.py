"""Watching indexed trees (issue 39): a save is searchable from the running MCP server within seconds, a
deleted file leaves the results, and a tree too big to watch says so and keeps the once-a-minute check.
Times are bounds a user would notice (5 s), polled, never slept through."""
from __future__ import annotations

import asyncio
import threading
import time
from pathlib import Path

import pytest

from repoctx import Index, Settings
from repoctx.config import ConfigError
from repoctx.watch import TreeWatcher

mcp = pytest.importorskip("mcp")
from mcp import Client  # noqa: E402
from tests.conftest import write_tree  # noqa: E402

SEEN_WITHIN = 5.0

DB = '''def connect_database(url):
    """Open a connection to the database at url."""
    return url
'''
FRESH = '''def reconcile_ledger_entries(ledger, statement):
    """Match each bank statement line to a ledger entry."""
    return [line for line in statement if line in ledger]
'''


def _indexed(tmp_path: Path, **settings) -> tuple[Path, Settings]:
    root = write_tree(tmp_path / "shop", {"app/__init__.py": "", "app/db.py": DB, ".gitignore": "scratch/\n",
                                     "scratch/notes.py": "x = 1\n", "README.md": "# shop\n"})
    s = Settings(index_dir=tmp_path / "idx", embedder="none", **settings)
    with Index(root, s) as ix:
        ix.update()
    return root, s


def _text(result) -> str:
    return "\n".join(c.text for c in result.content if getattr(c, "type", "") == "text")


async def _until(fn, what: str, within: float = SEEN_WITHIN):
    """Poll ``fn`` (async, returns truthy when done) until it holds; fail naming ``what`` after ``within``."""
    deadline = time.monotonic() + within
    while True:
        out = await fn()
        if out:
            return out
        assert time.monotonic() < deadline, f"not within {within} s: {what}"
        await asyncio.sleep(0.1)


def test_saved_file_is_found_and_deleted_file_leaves(tmp_path):
    from repoctx.mcp import build_server

    root, settings = _indexed(tmp_path)
    server = build_server([root], settings)  # refreshes, so it watches

    async def go():
        async with Client(server) as client:
            async def watching():
                r = await client.call_tool("index_status", {})
                return r.structured_content["repos"][0]["watch"]["watching"]
            await _until(watching, "the tree is watched")

            async def found():
                r = await client.call_tool("search_code", {"query": "reconcile ledger entries bank statement"})
                return "app/ledger.py" in _text(r)
            assert not await found()

            (root / "app" / "ledger.py").write_text(FRESH)
            saved = time.monotonic()
            await _until(found, "a saved file is found by search_code")
            seen_after = time.monotonic() - saved

            r = await client.call_tool("index_status", {})
            st = r.structured_content["repos"][0]
            assert st["fresh"] and st["refresh"]["last_update"]["reason"] == "watch"
            assert st["refresh"]["last_update"]["added_paths"] == ["app/ledger.py"]

            (root / "app" / "ledger.py").unlink()

            async def gone():
                return not await found()
            await _until(gone, "a deleted file leaves the results")
            r = await client.call_tool("symbol", {"name": "reconcile_ledger_entries"})
            assert r.structured_content["count"] == 0
            return seen_after

    seen_after = asyncio.run(go())
    assert seen_after < SEEN_WITHIN
    server.repoctx.close()


def test_ignored_and_unindexed_files_cause_no_refresh(tmp_path):
    """Writes the walk would never index (an ignored folder, .git, a compiled file) wake nothing; a file in a
    folder created after the watch began is seen."""
    root, settings = _indexed(tmp_path)
    (root / ".git").mkdir()
    seen: list[list[str]] = []
    changed = threading.Event()

    def on_change(paths):
        seen.append(paths)
        changed.set()

    w = TreeWatcher(root, settings, on_change).start()
    try:
        assert w.wait_ready(10) and w.status()["folders"] == 2  # the root and app/: not scratch/, not .git
        (root / "scratch" / "more.py").write_text("y = 2\n")  # .gitignore'd
        (root / ".git" / "index").write_text("x")
        (root / "app" / "db.cpython-311.pyc").write_bytes(b"\0")
        assert not changed.wait(1.0), seen  # a batch closes within ~0.1 s of its last change

        (root / "pkg" / "sub").mkdir(parents=True)  # a new folder: watched, then reported
        deadline = time.monotonic() + SEEN_WITHIN
        while not (changed.is_set() and w.status()["folders"] == 4):
            assert time.monotonic() < deadline, (seen, w.status())
            time.sleep(0.05)
        changed.clear()
        (root / "pkg" / "sub" / "mod.py").write_text("def f():\n    return 1\n")
        assert changed.wait(SEEN_WITHIN) and seen[-1] == ["pkg/sub/mod.py"]
    finally:
        w.stop()
    assert w.status()["state"] == "stopped"


def test_too_big_tree_is_not_watched_and_says_so(tmp_path, caplog):
    from repoctx.mcp import RepoctxMCP

    root, settings = _indexed(tmp_path, watch_max_dirs=1)  # the root and app/: two folders
    state = RepoctxMCP([root], settings)
    try:
        w = state.repos["shop"].watcher
        assert not w.wait_ready(10)
        st = state.call("index_status", {})["repos"][0]
        assert st["watch"]["watching"] is False
        assert "more than 1 folders" in st["watch"]["note"] and "REPOCTX_WATCH_MAX_DIRS" in st["watch"]["note"]
        assert "not watching" in state.call("index_status", {})["_text"]
        assert any("REPOCTX_WATCH_MAX_DIRS" in m for m in caplog.messages)  # the server log says it too
        (root / "app" / "ledger.py").write_text(FRESH)
        st = state.call("index_status", {})["repos"][0]
        assert not st["fresh"] and "at most once a minute" in st["note"]  # the fallback check
    finally:
        state.close()


def test_watch_turned_off_by_environment(tmp_path, monkeypatch):
    from repoctx.mcp import RepoctxMCP

    monkeypatch.setenv("REPOCTX_WATCH", "0")
    monkeypatch.setenv("REPOCTX_WATCH_MAX_DIRS", "50")
    s = Settings.from_env()
    assert s.watch is False and s.watch_max_dirs == 50
    monkeypatch.setenv("REPOCTX_WATCH_MAX_DIRS", "many")
    with pytest.raises(ConfigError, match="REPOCTX_WATCH_MAX_DIRS"):
        Settings.from_env()

    root, settings = _indexed(tmp_path, watch=False)
    state = RepoctxMCP([root], settings)
    try:
        st = state.call("index_status", {})["repos"][0]["watch"]
        assert st["watching"] is False and "REPOCTX_WATCH=0" in st["note"]
    finally:
        state.close()


def test_a_forgotten_server_stops_its_watcher(tmp_path):
    """Watcher threads hold no reference to the server: one dropped without close() stops watching."""
    import gc

    from repoctx.mcp import RepoctxMCP

    root, settings = _indexed(tmp_path)
    state = RepoctxMCP([root], settings)
    w = state.repos["shop"].watcher
    assert w.wait_ready(10)
    state.wait_refresh(30)
    del state
    gc.collect()
    w._thread.join(SEEN_WITHIN)  # the watch looks at its stop flag every step (0.1 s)
    assert not w._thread.is_alive() and w.status()["state"] == "stopped"


def test_service_in_process_indexes_a_save_under_a_registered_path(tmp_path):
    """The embedded service (SQLite, jobs in the API process) watches a repository registered by path: a saved
    file is found by /search within seconds, a deleted one leaves it."""
    import httpx

    from repoctx.service.app import create_app
    from repoctx.service.config import ServiceSettings

    root = write_tree(tmp_path / "local", {"app/__init__.py": "", "app/db.py": DB})
    app = create_app(Settings(index_dir=tmp_path / "ix", embedder="none"),
                     service=ServiceSettings(job_poll=0.05, key_cache_seconds=0, repo_roots=(str(tmp_path),)))
    svc = app.state.service
    _, key = svc.keys.add_key("root", "admin")

    async def go():
        h = {"Authorization": f"Bearer {key}"}
        async with httpx.AsyncClient(transport=httpx.ASGITransport(app=app), base_url="http://t") as c:
            assert (await c.post("/repos", json={"name": "local", "path": str(root)}, headers=h)).status_code == 202

            async def indexed():
                return (await c.get("/repos/local", headers=h)).json()["job"]["status"] == "done"
            await _until(indexed, "the first index job", within=30)
            # (the job shows done a moment before its end callback asks for the watch: no status yet, not watched)
            await _until(lambda: asyncio.sleep(0, (svc.watchers.status("local") or {}).get("watching")),
                         "the tree is watched")

            async def found():
                r = await c.post("/search", json={"query": "reconcile ledger entries", "detail": "signatures"},
                                 headers=h)
                return any(x["path"] == "app/ledger.py" for x in r.json()["results"])
            (root / "app" / "ledger.py").write_text(FRESH)
            await _until(found, "a saved file is found by /search")
            (root / "app" / "ledger.py").unlink()

            async def gone():
                return not await found()
            await _until(gone, "a deleted file leaves /search")

    try:
        asyncio.run(go())
    finally:
        svc.close()
    assert svc.watchers.status("local") is None  # closed with the service


def test_closed_watchers_start_no_watch(tmp_path):
    """A job that ends after the service closed asks to watch the registered paths again: once closed, the
    watchers start nothing (a watcher started then would run on, stopped by no one)."""
    from repoctx.watch import Watchers

    root = write_tree(tmp_path / "local", {"app/__init__.py": ""})
    watchers = Watchers(Settings(index_dir=tmp_path / "ix", embedder="none"), lambda name, root: None)
    assert watchers.watch("local", root) is not None and watchers.status("local") is not None
    watchers.close()
    assert watchers.status("local") is None
    assert watchers.watch("local", root) is None and watchers.status("local") is None
