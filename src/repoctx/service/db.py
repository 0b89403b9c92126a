"""The service's own tables (API keys, roles, repository sources, job records, webhook deliveries; the embedded
queue of index jobs with SQLite, procrastinate's with PostgreSQL) beside the index: a SQLite file next to the
embedded index, or tables in the PostgreSQL database the store uses. One small wrapper speaks both:
SQL is written once with ``?`` placeholders and ``{now}`` for the database's clock in epoch seconds."""

from __future__ import annotations

import sqlite3
import threading
import zlib
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

from repoctx.config import is_postgres_url  # the service's modules import it from here too

SERVICE_SCHEMA_VERSION = 2  # 2: repository sources (git URLs), job runs and requests, webhook deliveries;
# index jobs on PostgreSQL moved to procrastinate (its schema is applied beside these tables)

_TABLES = """
CREATE TABLE IF NOT EXISTS repoctx_service_schema(version INTEGER PRIMARY KEY, applied DOUBLE PRECISION);
CREATE TABLE IF NOT EXISTS repoctx_api_keys(key_id TEXT PRIMARY KEY, name TEXT NOT NULL, role TEXT NOT NULL,
  hash TEXT NOT NULL, created DOUBLE PRECISION NOT NULL, revoked DOUBLE PRECISION);
CREATE INDEX IF NOT EXISTS repoctx_api_keys_name ON repoctx_api_keys(name);
CREATE TABLE IF NOT EXISTS repoctx_roles(name TEXT PRIMARY KEY, admin INTEGER NOT NULL DEFAULT 0,
  grants TEXT NOT NULL DEFAULT '[]', created DOUBLE PRECISION NOT NULL);
CREATE TABLE IF NOT EXISTS repoctx_repo_sources(name TEXT PRIMARY KEY, kind TEXT NOT NULL, url TEXT, url_key TEXT,
  branch TEXT, credential TEXT, path TEXT, created DOUBLE PRECISION NOT NULL, updated DOUBLE PRECISION NOT NULL,
  head_commit TEXT, head_seen DOUBLE PRECISION, behind INTEGER, fetched_at DOUBLE PRECISION,
  indexed_commit TEXT, indexed_at DOUBLE PRECISION, last_error TEXT);
CREATE INDEX IF NOT EXISTS repoctx_repo_sources_url ON repoctx_repo_sources(url_key);
CREATE TABLE IF NOT EXISTS repoctx_job_requests(job_id BIGINT PRIMARY KEY, repo TEXT NOT NULL,
  created DOUBLE PRECISION NOT NULL, reason TEXT);
CREATE INDEX IF NOT EXISTS repoctx_job_requests_repo ON repoctx_job_requests(repo, job_id);
CREATE TABLE IF NOT EXISTS repoctx_job_runs(job_id BIGINT NOT NULL, attempt INTEGER NOT NULL, repo TEXT NOT NULL,
  worker TEXT, started DOUBLE PRECISION NOT NULL, heartbeat DOUBLE PRECISION, finished DOUBLE PRECISION,
  status TEXT NOT NULL, commit_id TEXT, progress TEXT, result TEXT, error TEXT, detail TEXT,
  PRIMARY KEY (job_id, attempt));
CREATE INDEX IF NOT EXISTS repoctx_job_runs_repo ON repoctx_job_runs(repo, started);
CREATE TABLE IF NOT EXISTS repoctx_hook_deliveries(provider TEXT NOT NULL, delivery TEXT NOT NULL,
  received DOUBLE PRECISION NOT NULL, PRIMARY KEY (provider, delivery));
CREATE INDEX IF NOT EXISTS repoctx_hook_deliveries_received ON repoctx_hook_deliveries(received);
"""

# the embedded (SQLite) service's own queue of index jobs; PostgreSQL's jobs live in procrastinate's tables
_SQLITE_TABLES = """
CREATE TABLE IF NOT EXISTS repoctx_jobs(id {serial} PRIMARY KEY, repo TEXT NOT NULL, root TEXT NOT NULL,
  status TEXT NOT NULL, attempts INTEGER NOT NULL DEFAULT 0, max_attempts INTEGER NOT NULL DEFAULT 3,
  worker TEXT, created DOUBLE PRECISION NOT NULL, run_after DOUBLE PRECISION NOT NULL,
  started DOUBLE PRECISION, heartbeat DOUBLE PRECISION, lease_until DOUBLE PRECISION,
  finished DOUBLE PRECISION, progress TEXT, result TEXT, error TEXT, detail TEXT);
CREATE UNIQUE INDEX IF NOT EXISTS repoctx_jobs_one_queued ON repoctx_jobs(repo) WHERE status = 'queued';
CREATE INDEX IF NOT EXISTS repoctx_jobs_status ON repoctx_jobs(status, run_after);
CREATE INDEX IF NOT EXISTS repoctx_jobs_repo ON repoctx_jobs(repo, id);
"""

_PG_NOW = "extract(epoch from clock_timestamp())::double precision"
_SQLITE_NOW = "((julianday('now') - 2440587.5) * 86400.0)"


class NotMigrated(RuntimeError):
    """The PostgreSQL database lacks the service tables: ``repoctx db migrate`` creates them."""


def migrate_postgres(url: str) -> int:
    """Create or upgrade the service tables (API keys, roles, repository sources, job records, webhook
    deliveries) and procrastinate's job queue in PostgreSQL. Idempotent; concurrent callers wait on an
    advisory lock."""
    import time

    import psycopg

    from repoctx.service.queue_schema import migrate_procrastinate

    with psycopg.connect(url, autocommit=False) as conn:
        conn.execute("SELECT pg_advisory_xact_lock(%s)", (zlib.crc32(b"repoctx:service:migrate"),))
        for stmt in _statements("BIGSERIAL"):
            conn.execute(stmt)
        migrate_procrastinate(conn)  # index jobs: procrastinate's queue (service/tasks.py)
        row = conn.execute("SELECT max(version) FROM repoctx_service_schema").fetchall()[0]  # an aggregate: one row
        if row[0] is None or row[0] < SERVICE_SCHEMA_VERSION:
            conn.execute("INSERT INTO repoctx_service_schema VALUES(%s, %s)", (SERVICE_SCHEMA_VERSION, time.time()))
        conn.commit()
    return SERVICE_SCHEMA_VERSION


def migrate_sqlite(path: str | Path) -> int:
    import time

    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    db = sqlite3.connect(str(path), timeout=30, isolation_level=None)
    try:
        db.execute("PRAGMA journal_mode=WAL")
        db.execute("BEGIN IMMEDIATE")
        for stmt in _statements("INTEGER", _SQLITE_TABLES):
            db.execute(stmt)
        row = db.execute("SELECT max(version) FROM repoctx_service_schema").fetchone()
        if row[0] is None or row[0] < SERVICE_SCHEMA_VERSION:
            db.execute("INSERT INTO repoctx_service_schema VALUES(?, ?)", (SERVICE_SCHEMA_VERSION, time.time()))
        db.execute("COMMIT")
    finally:
        db.close()
    return SERVICE_SCHEMA_VERSION


def _statements(serial: str, extra: str = "") -> list[str]:
    return [s.strip() for s in (_TABLES + extra).format(serial=serial).split(";") if s.strip()]


class ServiceDB:
    """One connection per thread (SQLite) or a connection pool (PostgreSQL)."""

    def __init__(self, target: str | Path, *, max_size: int = 8, connect_timeout: float | None = None):
        self.target = str(target)
        self.backend = "postgres" if is_postgres_url(self.target) else "sqlite"
        self.now = _PG_NOW if self.backend == "postgres" else _SQLITE_NOW
        self._local = threading.local()
        self._conns: list[sqlite3.Connection] = []
        self._conns_lock = threading.Lock()
        self.pool = None
        if self.backend == "postgres":
            import psycopg

            from repoctx.store.availability import connect_kwargs, connection_pool

            try:
                with psycopg.connect(self.target, **connect_kwargs(connect_timeout)) as conn:
                    # one row each (a function, an aggregate)
                    reg = conn.execute("SELECT to_regclass('repoctx_service_schema')").fetchall()[0][0]
                    version = (
                        conn.execute("SELECT max(version) FROM repoctx_service_schema").fetchall()[0][0]
                        if reg
                        else None
                    )
            except psycopg.Error as e:
                raise NotMigrated(f"cannot reach the service database: {type(e).__name__}") from None
            if version is None or version < SERVICE_SCHEMA_VERSION:
                raise NotMigrated("the database has no (or an older) repoctx service schema: run `repoctx db migrate`")
            # connect_timeout: an outage fails within it (the service answers 503) and heals without a restart
            self.pool = connection_pool(
                self.target,
                timeout=connect_timeout,
                max_size=max_size,
                kwargs={"autocommit": True},
                name="repoctx-service",
            )
        else:
            migrate_sqlite(self.target)  # embedded: the file beside the index is created with its tables

    def _sqlite(self) -> sqlite3.Connection:
        conn = getattr(self._local, "conn", None)
        if conn is None:
            conn = sqlite3.connect(self.target, timeout=30, isolation_level=None, check_same_thread=False)
            conn.execute("PRAGMA journal_mode=WAL")
            conn.execute("PRAGMA busy_timeout=30000")
            self._local.conn = conn
            with self._conns_lock:
                self._conns.append(conn)
        return conn

    def _sql(self, sql: str) -> str:
        sql = sql.replace("{now}", self.now)
        return sql.replace("?", "%s") if self.backend == "postgres" else sql

    def q(self, sql: str, args: tuple | list = ()) -> list[tuple]:
        """One statement in its own transaction; the rows it returns (if any)."""
        if self.pool is not None:
            with self.pool.connection() as conn:
                cur = conn.execute(self._sql(sql), tuple(args))
                return cur.fetchall() if cur.description else []
        cur = self._sqlite().execute(self._sql(sql), tuple(args))
        return cur.fetchall() if cur.description else []

    @contextmanager
    def transaction(self) -> Iterator[Any]:
        """Several statements in one transaction: yields ``run(sql, args) -> rows``."""
        if self.pool is not None:
            with self.pool.connection() as conn, conn.transaction():

                def run(sql: str, args: tuple | list = ()) -> list[tuple]:
                    cur = conn.execute(self._sql(sql), tuple(args))
                    return cur.fetchall() if cur.description else []

                yield run
            return
        conn = self._sqlite()
        conn.execute("BEGIN IMMEDIATE")
        try:

            def run(sql: str, args: tuple | list = ()) -> list[tuple]:
                cur = conn.execute(self._sql(sql), tuple(args))
                return cur.fetchall() if cur.description else []

            yield run
        except BaseException:
            conn.execute("ROLLBACK")
            raise
        conn.execute("COMMIT")

    def close(self) -> None:
        if self.pool is not None:
            self.pool.close()
        with self._conns_lock:
            for conn in self._conns:
                try:
                    conn.close()
                except Exception:  # noqa: BLE001 - closing is best effort
                    pass
            self._conns.clear()
        self._local = threading.local()


def service_db_target(settings) -> str:
    """Where the service's tables live for these library settings."""
    if settings.database_url:
        return settings.database_url
    if settings.index_dir is None:
        raise ValueError(
            "the service needs a shared store: set REPOCTX_DATABASE_URL (PostgreSQL) or "
            "REPOCTX_INDEX_DIR (a folder for the embedded SQLite store)"
        )
    return str(Path(settings.index_dir) / "service.sqlite")
