"""A reindex that finds nothing left to do says which update applied the changes and when: a long-lived
process (the MCP server, the service) may have refreshed the index in the background first, and a bare
"no changes" then reads as if the edits were never seen."""
from __future__ import annotations

import calendar
import json
import re
import time

from typer.testing import CliRunner

from repoctx import Index, Settings
from repoctx.cli import app
from repoctx.indexer import describe_no_change
from tests.conftest import write_tree

FILES = {
    "pkg/dates.py": 'def parse_http_date(value):\n    """Parse an HTTP date header."""\n    return value\n',
    "pkg/cache.py": 'def expire(entries):\n    """Drop stale entries."""\n    return entries\n',
    "pkg/keep.py": "def keep():\n    return 1\n",
}
APPLIED = re.compile(r"no changes since the background refresh of the MCP server at (\d\d:\d\d:\d\d) UTC, "
                     r"which applied 3 files \(2 changed, 1 added\)")


def _edit(root) -> None:
    time.sleep(0.01)
    (root / "pkg/dates.py").write_text('def parse_http_date(value, strict=True):\n    """Parse it."""\n    return value\n')
    (root / "pkg/cache.py").write_text('def expire(entries, now):\n    """Drop old entries."""\n    return entries\n')
    (root / "pkg/new.py").write_text('def brand_new():\n    """New."""\n    return 2\n')


def _refreshed_by_a_server(root, settings):
    """A long-lived MCP server notices the edits and refreshes the index in its background thread."""
    from repoctx.mcp import RepoctxMCP

    state = RepoctxMCP([root], settings)
    state.wait_refresh(60)
    status = state.call("index_status", {})["repos"][0]
    assert status["fresh"] and status["refresh"]["last_update"]["added"] == 1
    return state


def test_mcp_reindex_after_a_background_refresh_says_what_it_applied(tmp_path):
    root = write_tree(tmp_path / "r", FILES)
    settings = Settings(index_dir=tmp_path / "idx", embedder="none")
    with Index(root, settings) as ix:
        ix.update()
    _edit(root)
    t0 = time.time()
    state = _refreshed_by_a_server(root, settings)
    try:
        r = state.call("reindex", {})
        rep = r["reports"][0]
        assert rep["added"] == rep["modified"] == rep["deleted"] == 0
        prev = rep["previous_change"]
        assert prev["by"] == "background refresh of the MCP server" and (prev["modified"], prev["added"]) == (2, 1)
        assert t0 - 1 <= prev["at"] <= time.time()
        m = APPLIED.search(r["_text"])
        assert m, r["_text"]
        assert m.group(1) == time.strftime("%H:%M:%S", time.gmtime(prev["at"]))
    finally:
        state.close()


def test_cli_index_after_a_background_refresh_says_what_it_applied(tmp_path, monkeypatch):
    monkeypatch.setenv("REPOCTX_EMBEDDER", "none")
    monkeypatch.setenv("REPOCTX_INDEX_DIR", str(tmp_path / "idx"))
    root = write_tree(tmp_path / "r", FILES)
    runner = CliRunner()
    assert runner.invoke(app, ["index", str(root)]).exit_code == 0
    _edit(root)
    _refreshed_by_a_server(root, Settings.from_env()).close()
    res = runner.invoke(app, ["index", str(root)])
    assert res.exit_code == 0 and "0 added, 0 modified, 0 deleted" in res.output
    assert APPLIED.search(res.output), res.output
    out = json.loads(runner.invoke(app, ["index", str(root), "--json"]).output)
    assert out["previous_change"]["by"] == "background refresh of the MCP server"
    # a change made by `repoctx index` itself is named so the next run can say it
    (root / "pkg/keep.py").unlink()
    assert runner.invoke(app, ["index", str(root)]).exit_code == 0
    res = runner.invoke(app, ["index", str(root)])
    assert re.search(r"no changes since the `repoctx index` run at \d\d:\d\d:\d\d UTC, which applied 1 file "
                     r"\(1 deleted\)", res.output), res.output


def test_describe_no_change():
    at = calendar.timegm((2026, 12, 5, 10, 42, 3, 0, 0, 0))  # 10:42:03 UTC
    prev = {"at": at, "by": "background refresh of the MCP server", "added": 1, "modified": 2, "deleted": 0}
    assert describe_no_change(prev, now=at + 60) == ("no changes since the background refresh of the MCP server at "
                                                     "10:42:03 UTC, which applied 3 files (2 changed, 1 added)")
    assert describe_no_change(prev, now=at + 3 * 86400).startswith(
        "no changes since the background refresh of the MCP server at 2026-12-05 10:42:03 UTC")
    assert describe_no_change(prev, counts=False, now=at) == ("no changes since the background refresh of the MCP "
                                                              "server at 10:42:03 UTC")
    assert describe_no_change(None) == "no changes"
