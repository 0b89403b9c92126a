"""`repoctx keys` / `repoctx roles` / `repoctx serve` (SQLite beside the index, and PostgreSQL), and roles
from a REPOCTX_ROLES file."""
from __future__ import annotations

import json
import os
import socket
import subprocess
import sys
import time
from pathlib import Path

import httpx
import pytest
import typer
from typer.testing import CliRunner

from repoctx.service.auth import KeyStore
from repoctx.cli.service import register, service_app
from repoctx.service.db import ServiceDB
from repoctx.store.base import Grant

from test_service_support import migrate_all

ROOT = Path(__file__).resolve().parents[1]


@pytest.fixture(params=["sqlite", "postgres"])
def target(request, tmp_path, monkeypatch):
    monkeypatch.delenv("REPOCTX_ROLES", raising=False)
    if request.param == "sqlite":
        monkeypatch.delenv("REPOCTX_DATABASE_URL", raising=False)
        monkeypatch.setenv("REPOCTX_INDEX_DIR", str(tmp_path / "ix"))
        return str(tmp_path / "ix" / "service.sqlite")
    url = request.getfixturevalue("pg_url")
    migrate_all(url)
    monkeypatch.setenv("REPOCTX_DATABASE_URL", url)
    return url


def test_roles_and_keys_commands(target):
    run = CliRunner().invoke
    r = run(service_app, ["roles", "add", "dev", "--repo", "shop", "--include", "src/*", "--exclude", "src/secret*"])
    assert r.exit_code == 0, r.output
    assert run(service_app, ["roles", "add", "dev", "--repo", "docs"]).exit_code == 0
    r = run(service_app, ["roles", "list", "--json"])
    roles = {x["name"]: x for x in json.loads(r.stdout)}
    assert roles["admin"]["admin"] is True
    assert roles["dev"]["grants"] == [{"repo": "shop", "include": ["src/*"], "exclude": ["src/secret*"]},
                                      {"repo": "docs", "include": [], "exclude": []}]
    assert run(service_app, ["roles", "add", "empty"]).exit_code == 2  # nothing to grant
    r = run(service_app, ["keys", "add", "alice", "--role", "dev"])
    assert r.exit_code == 0, r.output
    key = r.stdout.strip().splitlines()[-1]
    assert key.startswith("rcx_") and len(key) > 40
    assert run(service_app, ["keys", "add", "bob", "--role", "nope"]).exit_code == 2
    assert run(service_app, ["keys", "add", "bad name", "--role", "dev"]).exit_code == 2
    listed = json.loads(run(service_app, ["keys", "list", "--json"]).stdout)
    assert [(k["name"], k["role"]) for k in listed] == [("alice", "dev")]
    assert key not in json.dumps(listed)

    ks = KeyStore(ServiceDB(target), cache_seconds=0, owns_db=True)
    try:
        p = ks.authenticate(key)
        assert (p.name, p.role, p.admin) == ("alice", "dev", False)
        assert p.scope.grants == (Grant("shop", ("src/*",), ("src/secret*",)), Grant("docs", (), ()))
        assert p.scope.allows("shop", "src/a.py") and not p.scope.allows("shop", "src/secret_x.py")
        assert not p.scope.allows_repo("other")
        assert ks.authenticate(key[:-1] + ("A" if key[-1] != "A" else "B")) is None
        # only the hash is stored
        rows = ks.db.q("SELECT hash FROM repoctx_api_keys")
        assert key not in json.dumps(rows) and len(rows[0][0]) == 64
        assert run(service_app, ["keys", "revoke", "alice"]).exit_code == 0
        assert ks.authenticate(key) is None
        assert run(service_app, ["keys", "revoke", "alice"]).exit_code == 1
        assert run(service_app, ["roles", "remove", "dev"]).exit_code == 0
    finally:
        ks.close()


def test_roles_file_takes_precedence(tmp_path, monkeypatch):
    roles = tmp_path / "roles.toml"
    roles.write_text('[roles.frontend]\ngrants = [{repo = "web", include = ["src/*"]}]\n'
                     '[roles.ops]\nadmin = true\n')
    monkeypatch.setenv("REPOCTX_INDEX_DIR", str(tmp_path / "ix"))
    monkeypatch.delenv("REPOCTX_DATABASE_URL", raising=False)
    monkeypatch.setenv("REPOCTX_ROLES", str(roles))
    run = CliRunner().invoke
    r = run(service_app, ["keys", "add", "carol", "--role", "frontend"])
    assert r.exit_code == 0, r.output
    key = r.stdout.strip().splitlines()[-1]
    assert run(service_app, ["roles", "add", "frontend", "--repo", "x"]).exit_code == 2  # edit the file instead
    ks = KeyStore(ServiceDB(tmp_path / "ix" / "service.sqlite"), roles_file=roles, cache_seconds=0, owns_db=True)
    try:
        p = ks.authenticate(key)
        assert p.scope.grants == (Grant("web", ("src/*",), ()),) and not p.admin
        assert ks.role("ops").admin
    finally:
        ks.close()


def test_register_adds_the_commands_to_another_app():
    app = typer.Typer()

    @app.command()
    def other():  # pragma: no cover
        pass

    register(app)
    r = CliRunner().invoke(app, ["--help"])
    for name in ("serve", "worker", "keys", "roles"):
        assert name in r.output


def test_serve_starts_uvicorn_on_loopback(tmp_path):
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    env = {**os.environ, "REPOCTX_INDEX_DIR": str(tmp_path / "ix"), "REPOCTX_EMBEDDER": "none",
           "PYTHONPATH": str(ROOT / "src")}
    env.pop("REPOCTX_DATABASE_URL", None)
    proc = subprocess.Popen([sys.executable, "-m", "repoctx.cli.service", "serve", "--port", str(port),
                             "--log-level", "warning"], env=env, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
    try:
        deadline = time.time() + 30
        while True:
            try:
                r = httpx.get(f"http://127.0.0.1:{port}/health", timeout=1)
                break
            except httpx.TransportError:
                assert proc.poll() is None, proc.stderr.read().decode()
                assert time.time() < deadline
                time.sleep(0.1)
        body = r.json()
        assert body.pop("lexical") in ("memory", "building")  # BM25 in memory, built in the background
        assert body == {"status": "ok", "backend": "sqlite", "jobs": "in-process",
                        "components": {"store": "ok", "service_db": "ok"}, "failing": []}
        assert httpx.post(f"http://127.0.0.1:{port}/search", json={"query": "x"}).status_code == 401
    finally:
        proc.terminate()
        proc.wait(15)
    # uvicorn shuts down gracefully, then re-raises SIGTERM so the exit status tells the signal
    assert proc.returncode in (0, -15) and b"Traceback" not in proc.stderr.read()


def test_serve_with_workers_gives_each_process_time_to_build_its_memory(tmp_path, monkeypatch):
    """uvicorn kills a worker that does not answer its health ping within 5 s; a process building BM25 for a
    500k-unit store did not, and `serve --workers 2` restarted 22 processes without one becoming ready
    (bench/results/scale_search.md). serve hands uvicorn a longer limit, --worker-healthcheck to change it."""
    import uvicorn
    from typer.testing import CliRunner

    from repoctx.cli.service import service_app

    seen = {}
    monkeypatch.setattr(uvicorn, "run", lambda *a, **kw: seen.update(kw))
    monkeypatch.setenv("REPOCTX_INDEX_DIR", str(tmp_path / "ix"))
    monkeypatch.delenv("REPOCTX_DATABASE_URL", raising=False)
    r = CliRunner().invoke(service_app, ["serve", "--workers", "2"])
    assert r.exit_code == 0, r.output
    assert seen["workers"] == 2 and seen["timeout_worker_healthcheck"] == 120
    r = CliRunner().invoke(service_app, ["serve", "--workers", "2", "--worker-healthcheck", "300"])
    assert r.exit_code == 0 and seen["timeout_worker_healthcheck"] == 300
