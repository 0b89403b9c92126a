"""The test PostgreSQL harness cleans up after itself: a killed run's data folder (hundreds of MB)
is swept by the next run, while a running server's folder and a folder still being set up stay."""
from __future__ import annotations

import os
import subprocess
import sys
import time

from tests import pg


def _folder(tmp_path, name, *, age, pid=None):
    folder = tmp_path / f"{pg._PREFIX}{name}"
    folder.mkdir()
    (folder / "PG_VERSION").write_text("18\n")
    if pid is not None:
        (folder / "postmaster.pid").write_text(f"{pid}\n{folder}\n")
    old = time.time() - age
    os.utime(folder, (old, old))
    return folder


def test_sweep_removes_only_dead_old_folders(tmp_path, monkeypatch):
    monkeypatch.setattr(pg.tempfile, "gettempdir", lambda: str(tmp_path))
    dead = subprocess.Popen([sys.executable, "-c", "pass"])
    dead.wait()
    killed = _folder(tmp_path, "killed", age=2 * pg._STALE_AFTER, pid=dead.pid)
    never_started = _folder(tmp_path, "nopid", age=2 * pg._STALE_AFTER)
    running = _folder(tmp_path, "running", age=2 * pg._STALE_AFTER, pid=os.getpid())
    starting = _folder(tmp_path, "starting", age=10)
    other = tmp_path / "someone-elses"
    other.mkdir()
    os.utime(other, (0, 0))

    pg._sweep_stale()

    assert not killed.exists() and not never_started.exists()
    assert running.exists() and starting.exists() and other.exists()


def test_server_is_started_to_delete_its_folder():
    if os.environ.get("REPOCTX_DATABASE_URL"):
        return  # a server the user gave is theirs to keep
    pg.server_url()
    assert pg._server.cleanup_mode == "delete"
