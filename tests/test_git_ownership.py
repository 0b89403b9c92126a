"""A checkout another user owns: git refuses it ('dubious ownership', safe.directory) unless told to trust it.
The index still records the commit it was built from, and the refusal is reported once per process and
repository, not at every git call."""
from __future__ import annotations

import logging
import os
import shutil
import subprocess

import pytest

from repoctx import Index, Settings
from repoctx.indexer import read_git_head
from tests.conftest import write_tree

pytestmark = [pytest.mark.skipif(shutil.which("git") is None, reason="needs git"),
              pytest.mark.skipif(not hasattr(os, "geteuid") or os.geteuid() != 0,
                                 reason="needs root, to give the tree to another user")]


def _git(root, *args):
    return subprocess.run(["git", "-c", "safe.directory=*", "-C", str(root), *args], check=True,
                          capture_output=True, text=True).stdout.strip()


def _foreign_checkout(root, layout: str) -> str:
    write_tree(root, {"pkg/dates.py": 'def parse_http_date(value):\n    """Parse an HTTP date."""\n    return value\n'})
    _git(root, "init", "-q", "-b", "main")
    _git(root, "add", ".")
    _git(root, "-c", "user.email=a@b.c", "-c", "user.name=A", "commit", "-qm", "first")
    (root / "pkg/more.py").write_text("def more():\n    return 1\n")
    _git(root, "add", ".")
    _git(root, "-c", "user.email=a@b.c", "-c", "user.name=A", "commit", "-qm", "second")
    head = _git(root, "rev-parse", "HEAD")
    if layout == "packed":
        _git(root, "pack-refs", "--all")
        assert not (root / ".git/refs/heads/main").exists()
    elif layout == "detached":
        _git(root, "checkout", "-q", "--detach", "HEAD~1")
        head = _git(root, "rev-parse", "HEAD")
    for dirpath, dirnames, filenames in os.walk(root):
        for name in [*dirnames, *filenames, "."]:
            os.chown(os.path.join(dirpath, name), 1234, 1234)
    refused = subprocess.run(["git", "-C", str(root), "rev-parse", "HEAD"], capture_output=True, text=True,
                             env={**os.environ, "LC_ALL": "C"})
    assert refused.returncode != 0 and "dubious ownership" in refused.stderr  # the situation under test
    return head


@pytest.mark.parametrize("layout", ["loose", "packed", "detached"])
def test_a_checkout_owned_by_another_user_records_its_head_and_warns_once(tmp_path, caplog, layout):
    root = tmp_path / f"foreign-{layout}"
    head = _foreign_checkout(root, layout)
    assert read_git_head(root) == head
    assert read_git_head(root / "pkg") == head  # a folder inside the checkout: the .git above it
    caplog.set_level(logging.WARNING)
    ix = Index(root, Settings(index_dir=tmp_path / "idx", embedder="none"))
    report = ix.update()
    assert report.git_head == head and report.git_dirty is None
    assert ix.meta("git_head") == head
    st = ix.status()
    assert st["git_head"] == head and st["indexed_git_head"] == head and st["fresh"]
    (root / "pkg/new.py").write_text("def new():\n    return 2\n")
    ix.update()
    ix.status()
    ix.close()
    warned = [r for r in caplog.records if "safe.directory" in r.getMessage()]
    assert len(warned) == 1, [r.getMessage() for r in warned]
    assert str(root) in warned[0].getMessage() and "git config --global --add safe.directory" in warned[0].getMessage()


def test_cli_status_shows_the_head_of_a_foreign_checkout(tmp_path, monkeypatch):
    from typer.testing import CliRunner

    from repoctx.cli import app

    root = tmp_path / "foreign"
    head = _foreign_checkout(root, "loose")
    monkeypatch.setenv("REPOCTX_INDEX_DIR", str(tmp_path / "idx"))
    monkeypatch.setenv("REPOCTX_EMBEDDER", "none")
    runner = CliRunner()
    assert runner.invoke(app, ["index", str(root)]).exit_code == 0
    res = runner.invoke(app, ["status", str(root)])
    assert res.exit_code == 0 and f"indexed at git {head[:12]}, now {head[:12]}" in res.output


def test_a_folder_outside_git_has_no_head(tmp_path):
    root = write_tree(tmp_path / "plain", {"a.py": "def a():\n    return 1\n"})
    if any((d / ".git").exists() for d in (root, *root.parents)):
        pytest.skip("the temporary folder is inside a git checkout")
    ix = Index(root, Settings(index_dir=tmp_path / "idx", embedder="none"))
    assert ix.update().git_head is None and read_git_head(root) is None
    ix.close()
