"""Copilot conversations persisted through Strands' ``SessionRepository``.

Two backends store the SDK's own serialised forms (``Session.to_dict()``, ``SessionAgent.to_dict()``,
``SessionMessage.to_dict()``) keyed ``(principal, session_id, agent_id, message_id)``:

* ``SQLiteSessionRepository(path)`` -- the embedded default (``<index_dir>/sessions.sqlite``), WAL,
  one connection per thread;
* ``PostgresSessionRepository(url_or_pool)`` -- psycopg 3 with a psycopg_pool connection pool.

The schema is created only by ``migrate(target)`` (``repoctx db migrate``), never on a request path:
constructing a repository against an unmigrated database raises ``SessionStoreNotMigrated``.

Every row belongs to a principal: a repository constructed for principal ``"alice"`` never reads,
lists, resumes or prunes ``"bob"``'s sessions (to it they do not exist).
"""

from __future__ import annotations

import json
import os
import re
import sqlite3
import threading
import time
from datetime import UTC, datetime
from pathlib import Path
from typing import TYPE_CHECKING, Any

from strands.session.session_repository import SessionRepository
from strands.types.exceptions import SessionException
from strands.types.session import Session, SessionAgent, SessionMessage

from repoctx.config import default_cache_dir, is_postgres_url

if TYPE_CHECKING:
    from psycopg_pool import ConnectionPool

SCHEMA_VERSION = 1
VERSION_TABLE = "copilot_schema_version"
_SESSION_ID = re.compile(r"[A-Za-z0-9_-]{1,128}")
_PRINCIPAL = re.compile(r"[A-Za-z0-9_.@:-]{1,256}")

__all__ = [
    "SCHEMA_VERSION",
    "SessionStoreNotMigrated",
    "SQLiteSessionRepository",
    "PostgresSessionRepository",
    "validate_session_id",
    "migrate",
    "migrate_sqlite",
    "migrate_postgres",
    "open_session_repository",
    "sessions_target",
    "list_sessions",
    "prune_sessions",
]


class SessionStoreNotMigrated(RuntimeError):
    """The session database has no (or an older) copilot schema: ``repoctx db migrate`` creates it."""


def validate_session_id(session_id: str) -> str:
    if not isinstance(session_id, str) or not _SESSION_ID.fullmatch(session_id):
        raise ValueError(f"invalid session id {session_id!r}: use 1-128 characters of A-Z a-z 0-9 _ -")
    return session_id


def _validate_principal(principal: str) -> str:
    if not isinstance(principal, str) or not _PRINCIPAL.fullmatch(principal):
        raise ValueError(f"invalid principal {principal!r}")
    return principal


def _validate_agent_id(agent_id: str) -> str:
    if not isinstance(agent_id, str) or not agent_id or len(agent_id) > 256:
        raise ValueError(f"invalid agent id {agent_id!r}")
    return agent_id


def _iso(ts: float) -> str:
    return datetime.fromtimestamp(ts, UTC).isoformat()


def _is_postgres(target: str) -> bool:
    return is_postgres_url(target)


def _not_migrated(where: str, found: int | None) -> SessionStoreNotMigrated:
    have = "no copilot schema" if found is None else f"copilot schema version {found}"
    return SessionStoreNotMigrated(
        f"the session store {where} has {have} (need version {SCHEMA_VERSION}): run `repoctx db migrate`"
    )


# --------------------------------------------------------------------------------------------- SQLite
_SQLITE_SCHEMA = [
    f"CREATE TABLE IF NOT EXISTS {VERSION_TABLE} (version INTEGER NOT NULL, applied_at REAL NOT NULL)",
    """CREATE TABLE IF NOT EXISTS copilot_sessions (
        principal TEXT NOT NULL, session_id TEXT NOT NULL, data TEXT NOT NULL,
        created_at REAL NOT NULL, updated_at REAL NOT NULL,
        PRIMARY KEY (principal, session_id))""",
    """CREATE TABLE IF NOT EXISTS copilot_agents (
        principal TEXT NOT NULL, session_id TEXT NOT NULL, agent_id TEXT NOT NULL, data TEXT NOT NULL,
        created_at REAL NOT NULL, updated_at REAL NOT NULL,
        PRIMARY KEY (principal, session_id, agent_id))""",
    """CREATE TABLE IF NOT EXISTS copilot_messages (
        principal TEXT NOT NULL, session_id TEXT NOT NULL, agent_id TEXT NOT NULL, message_id INTEGER NOT NULL,
        data TEXT NOT NULL, created_at REAL NOT NULL, updated_at REAL NOT NULL,
        PRIMARY KEY (principal, session_id, agent_id, message_id))""",
    "CREATE INDEX IF NOT EXISTS copilot_sessions_updated ON copilot_sessions (updated_at)",
]


def migrate_sqlite(path: str | Path) -> int:
    """Create or upgrade the copilot session schema in a SQLite file (created if missing). Idempotent."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    db = sqlite3.connect(str(path), timeout=30)
    try:
        db.execute("PRAGMA journal_mode=WAL")
        with db:
            for stmt in _SQLITE_SCHEMA:
                db.execute(stmt)
            row = db.execute(f"SELECT MAX(version) FROM {VERSION_TABLE}").fetchone()
            if row[0] is None or row[0] < SCHEMA_VERSION:
                db.execute(f"INSERT INTO {VERSION_TABLE} VALUES (?, ?)", (SCHEMA_VERSION, time.time()))
    finally:
        db.close()
    return SCHEMA_VERSION


class _Base(SessionRepository):
    """Shared by both backends. (Strands' multi-agent methods keep the SDK's NotImplementedError: the
    copilot is one agent.)"""

    principal: str

    def _session_row(self, session_id: str) -> Any:  # pragma: no cover - overridden
        raise NotImplementedError

    def _require_session(self, session_id: str) -> None:
        if self._session_row(session_id) is None:
            raise SessionException(f"session {session_id} does not exist")


class SQLiteSessionRepository(_Base):
    """Sessions in one SQLite file (WAL; a connection per thread). ``migrate_sqlite(path)`` first."""

    def __init__(self, path: str | Path, principal: str = "local"):
        self.path = Path(path)
        self.principal = _validate_principal(principal)
        self._local = threading.local()
        if not self.path.exists():
            raise _not_migrated(f"at {self.path}", None)
        found = self._version()
        if found != SCHEMA_VERSION:
            raise _not_migrated(f"at {self.path}", found)

    # ---- plumbing
    @property
    def _db(self) -> sqlite3.Connection:
        db = getattr(self._local, "db", None)
        if db is None:
            # mode=rw: never create the file (and so never a schema) from a request
            db = sqlite3.connect(f"file:{self.path}?mode=rw", uri=True, timeout=30, check_same_thread=True)
            db.execute("PRAGMA journal_mode=WAL")
            db.execute("PRAGMA busy_timeout=30000")
            self._local.db = db
        return db

    def _version(self) -> int | None:
        try:
            row = self._db.execute(f"SELECT MAX(version) FROM {VERSION_TABLE}").fetchone()
        except sqlite3.OperationalError:
            return None
        return row[0]

    def close(self) -> None:
        db = getattr(self._local, "db", None)
        if db is not None:
            db.close()
            self._local.db = None

    def _session_row(self, session_id: str):
        return self._db.execute(
            "SELECT data FROM copilot_sessions WHERE principal=? AND session_id=?",
            (self.principal, validate_session_id(session_id)),
        ).fetchone()

    def _touch(self, session_id: str, now: float) -> None:
        self._db.execute(
            "UPDATE copilot_sessions SET updated_at=? WHERE principal=? AND session_id=?",
            (now, self.principal, session_id),
        )

    # ---- SessionRepository
    def create_session(self, session: Session, **kwargs: Any) -> Session:
        sid = validate_session_id(session.session_id)
        now = time.time()
        try:
            with self._db:
                self._db.execute(
                    "INSERT INTO copilot_sessions VALUES (?, ?, ?, ?, ?)",
                    (self.principal, sid, json.dumps(session.to_dict()), now, now),
                )
        except sqlite3.IntegrityError:
            raise SessionException(f"session {sid} already exists") from None
        return session

    def read_session(self, session_id: str, **kwargs: Any) -> Session | None:
        row = self._session_row(session_id)
        return Session.from_dict(json.loads(row[0])) if row else None

    def create_agent(self, session_id: str, session_agent: SessionAgent, **kwargs: Any) -> None:
        sid = validate_session_id(session_id)
        aid = _validate_agent_id(session_agent.agent_id)
        now = time.time()
        with self._db:
            self._require_session(sid)
            self._db.execute(
                "INSERT INTO copilot_agents VALUES (?, ?, ?, ?, ?, ?) ON CONFLICT (principal, session_id, agent_id)"
                " DO UPDATE SET data=excluded.data, updated_at=excluded.updated_at",
                (self.principal, sid, aid, json.dumps(session_agent.to_dict()), now, now),
            )
            self._touch(sid, now)

    def read_agent(self, session_id: str, agent_id: str, **kwargs: Any) -> SessionAgent | None:
        row = self._db.execute(
            "SELECT data FROM copilot_agents WHERE principal=? AND session_id=? AND agent_id=?",
            (self.principal, validate_session_id(session_id), _validate_agent_id(agent_id)),
        ).fetchone()
        return SessionAgent.from_dict(json.loads(row[0])) if row else None

    def update_agent(self, session_id: str, session_agent: SessionAgent, **kwargs: Any) -> None:
        sid = validate_session_id(session_id)
        aid = _validate_agent_id(session_agent.agent_id)
        previous = self.read_agent(sid, aid)
        if previous is None:
            raise SessionException(f"agent {aid} in session {sid} does not exist")
        session_agent.created_at = previous.created_at
        now = time.time()
        with self._db:
            self._db.execute(
                "UPDATE copilot_agents SET data=?, updated_at=? WHERE principal=? AND session_id=? AND agent_id=?",
                (json.dumps(session_agent.to_dict()), now, self.principal, sid, aid),
            )
            self._touch(sid, now)

    def create_message(self, session_id: str, agent_id: str, session_message: SessionMessage, **kwargs: Any) -> None:
        sid = validate_session_id(session_id)
        aid = _validate_agent_id(agent_id)
        mid = int(session_message.message_id)
        now = time.time()
        with self._db:
            if (
                self._db.execute(
                    "SELECT 1 FROM copilot_agents WHERE principal=? AND session_id=? AND agent_id=?",
                    (self.principal, sid, aid),
                ).fetchone()
                is None
            ):
                raise SessionException(f"agent {aid} in session {sid} does not exist")
            self._db.execute(
                "INSERT INTO copilot_messages VALUES (?, ?, ?, ?, ?, ?, ?)"
                " ON CONFLICT (principal, session_id, agent_id, message_id)"
                " DO UPDATE SET data=excluded.data, updated_at=excluded.updated_at",
                (self.principal, sid, aid, mid, json.dumps(session_message.to_dict()), now, now),
            )
            self._touch(sid, now)

    def read_message(self, session_id: str, agent_id: str, message_id: int, **kwargs: Any) -> SessionMessage | None:
        row = self._db.execute(
            "SELECT data FROM copilot_messages WHERE principal=? AND session_id=? AND agent_id=? AND message_id=?",
            (self.principal, validate_session_id(session_id), _validate_agent_id(agent_id), int(message_id)),
        ).fetchone()
        return SessionMessage.from_dict(json.loads(row[0])) if row else None

    def update_message(self, session_id: str, agent_id: str, session_message: SessionMessage, **kwargs: Any) -> None:
        sid = validate_session_id(session_id)
        aid = _validate_agent_id(agent_id)
        previous = self.read_message(sid, aid, session_message.message_id)
        if previous is None:
            raise SessionException(f"message {session_message.message_id} does not exist")
        session_message.created_at = previous.created_at
        now = time.time()
        with self._db:
            self._db.execute(
                "UPDATE copilot_messages SET data=?, updated_at=?"
                " WHERE principal=? AND session_id=? AND agent_id=? AND message_id=?",
                (json.dumps(session_message.to_dict()), now, self.principal, sid, aid, int(session_message.message_id)),
            )
            self._touch(sid, now)

    def list_messages(
        self, session_id: str, agent_id: str, limit: int | None = None, offset: int = 0, **kwargs: Any
    ) -> list[SessionMessage]:
        rows = self._db.execute(
            "SELECT data FROM copilot_messages WHERE principal=? AND session_id=? AND agent_id=?"
            " ORDER BY message_id LIMIT ? OFFSET ?",
            (
                self.principal,
                validate_session_id(session_id),
                _validate_agent_id(agent_id),
                -1 if limit is None else int(limit),
                int(offset),
            ),
        ).fetchall()
        return [SessionMessage.from_dict(json.loads(r[0])) for r in rows]

    # ---- administration (this principal only, unless ``every_principal``)
    def delete_session(self, session_id: str) -> bool:
        sid = validate_session_id(session_id)
        with self._db:
            return self._delete(self._db, [(self.principal, sid)]) > 0

    @staticmethod
    def _delete(db: sqlite3.Connection, keys: list[tuple[str, str]]) -> int:
        for table in ("copilot_messages", "copilot_agents"):
            db.executemany(f"DELETE FROM {table} WHERE principal=? AND session_id=?", keys)
        n = 0
        for key in keys:
            n += db.execute("DELETE FROM copilot_sessions WHERE principal=? AND session_id=?", key).rowcount
        return n

    def list_sessions(self, every_principal: bool = False) -> list[dict]:
        where, args = ("", ()) if every_principal else ("WHERE s.principal=?", (self.principal,))
        rows = self._db.execute(
            "SELECT s.session_id, s.principal, s.created_at, s.updated_at,"
            " (SELECT COUNT(*) FROM copilot_messages m WHERE m.principal=s.principal AND m.session_id=s.session_id)"
            f" FROM copilot_sessions s {where} ORDER BY s.updated_at DESC",
            args,
        ).fetchall()
        return [
            {"id": r[0], "principal": r[1], "created": _iso(r[2]), "updated": _iso(r[3]), "messages": r[4]}
            for r in rows
        ]

    def prune(self, older_than_seconds: float, every_principal: bool = False, now: float | None = None) -> int:
        # no session predates the epoch: an older cutoff means the same (and stays a number)
        cutoff = max((time.time() if now is None else now) - float(older_than_seconds), 0.0)
        where, args = ("", ()) if every_principal else (" AND principal=?", (self.principal,))
        with self._db:
            keys = [
                tuple(r)
                for r in self._db.execute(
                    f"SELECT principal, session_id FROM copilot_sessions WHERE updated_at < ?{where}", (cutoff, *args)
                ).fetchall()
            ]
            return self._delete(self._db, keys)


# ----------------------------------------------------------------------------------------- PostgreSQL
_PG_SCHEMA = [
    f"CREATE TABLE IF NOT EXISTS {VERSION_TABLE} (version integer NOT NULL, applied_at timestamptz NOT NULL"
    " DEFAULT now())",
    """CREATE TABLE IF NOT EXISTS copilot_sessions (
        principal text NOT NULL, session_id text NOT NULL, data jsonb NOT NULL,
        created_at timestamptz NOT NULL DEFAULT now(), updated_at timestamptz NOT NULL DEFAULT now(),
        PRIMARY KEY (principal, session_id))""",
    """CREATE TABLE IF NOT EXISTS copilot_agents (
        principal text NOT NULL, session_id text NOT NULL, agent_id text NOT NULL, data jsonb NOT NULL,
        created_at timestamptz NOT NULL DEFAULT now(), updated_at timestamptz NOT NULL DEFAULT now(),
        PRIMARY KEY (principal, session_id, agent_id),
        FOREIGN KEY (principal, session_id) REFERENCES copilot_sessions ON DELETE CASCADE)""",
    """CREATE TABLE IF NOT EXISTS copilot_messages (
        principal text NOT NULL, session_id text NOT NULL, agent_id text NOT NULL, message_id integer NOT NULL,
        data jsonb NOT NULL,
        created_at timestamptz NOT NULL DEFAULT now(), updated_at timestamptz NOT NULL DEFAULT now(),
        PRIMARY KEY (principal, session_id, agent_id, message_id),
        FOREIGN KEY (principal, session_id, agent_id) REFERENCES copilot_agents ON DELETE CASCADE)""",
    "CREATE INDEX IF NOT EXISTS copilot_sessions_updated ON copilot_sessions (updated_at)",
]


def _psycopg():
    try:
        import psycopg
        from psycopg.types.json import Jsonb
    except ImportError:  # pragma: no cover - a pinned dependency
        raise RuntimeError("PostgreSQL sessions need psycopg: pip install 'repoctx[postgres]'") from None
    return psycopg, Jsonb


def migrate_postgres(url: str) -> int:
    """Create or upgrade the copilot session schema in a PostgreSQL database. Idempotent."""
    psycopg, _ = _psycopg()
    with psycopg.connect(url) as conn, conn.transaction():
        conn.execute("SELECT pg_advisory_xact_lock(hashtext('repoctx.copilot.sessions'))")
        for stmt in _PG_SCHEMA:
            conn.execute(stmt)
        row = conn.execute(f"SELECT MAX(version) FROM {VERSION_TABLE}").fetchone()
        if row[0] is None or row[0] < SCHEMA_VERSION:
            conn.execute(f"INSERT INTO {VERSION_TABLE} (version) VALUES (%s)", (SCHEMA_VERSION,))
    return SCHEMA_VERSION


class PostgresSessionRepository(_Base):
    """Sessions in PostgreSQL through a psycopg_pool ``ConnectionPool`` (given, or opened from a URL and
    then owned: ``close()`` closes it). ``migrate_postgres(url)`` first."""

    def __init__(
        self, url_or_pool: str | ConnectionPool, principal: str = "local", *, min_size: int = 1, max_size: int = 4
    ):
        psycopg, self._Jsonb = _psycopg()
        self.principal = _validate_principal(principal)
        if isinstance(url_or_pool, str):
            from psycopg_pool import ConnectionPool

            self.pool = ConnectionPool(
                url_or_pool,
                min_size=min_size,
                max_size=max_size,
                open=True,
                timeout=15.0,
                name="repoctx-copilot-sessions",
            )
            self._owns_pool = True
        else:
            self.pool = url_or_pool
            self._owns_pool = False
        try:
            found = self._version(psycopg)
            if found != SCHEMA_VERSION:
                raise _not_migrated("in PostgreSQL", found)
        except BaseException:
            self.close()
            raise

    def _version(self, psycopg) -> int | None:
        with self.pool.connection() as conn:
            reg = conn.execute("SELECT to_regclass(%s)", (VERSION_TABLE,)).fetchone()
            if reg is None or reg[0] is None:
                return None
            row = conn.execute(f"SELECT MAX(version) FROM {VERSION_TABLE}").fetchone()
            return row[0] if row else None

    def close(self) -> None:
        if self._owns_pool:
            self.pool.close()

    def _one(self, sql: str, args: tuple) -> Any:
        with self.pool.connection() as conn:
            return conn.execute(sql, args).fetchone()

    def _session_row(self, session_id: str):
        return self._one(
            "SELECT data FROM copilot_sessions WHERE principal=%s AND session_id=%s",
            (self.principal, validate_session_id(session_id)),
        )

    @staticmethod
    def _touch(conn, principal: str, session_id: str) -> None:
        conn.execute(
            "UPDATE copilot_sessions SET updated_at=now() WHERE principal=%s AND session_id=%s", (principal, session_id)
        )

    # ---- SessionRepository
    def create_session(self, session: Session, **kwargs: Any) -> Session:
        sid = validate_session_id(session.session_id)
        with self.pool.connection() as conn:
            row = conn.execute(
                "INSERT INTO copilot_sessions (principal, session_id, data) VALUES (%s, %s, %s)"
                " ON CONFLICT DO NOTHING RETURNING 1",
                (self.principal, sid, self._Jsonb(session.to_dict())),
            ).fetchone()
        if row is None:
            raise SessionException(f"session {sid} already exists")
        return session

    def read_session(self, session_id: str, **kwargs: Any) -> Session | None:
        row = self._session_row(session_id)
        return Session.from_dict(row[0]) if row else None

    def create_agent(self, session_id: str, session_agent: SessionAgent, **kwargs: Any) -> None:
        sid = validate_session_id(session_id)
        aid = _validate_agent_id(session_agent.agent_id)
        with self.pool.connection() as conn:
            if (
                conn.execute(
                    "SELECT 1 FROM copilot_sessions WHERE principal=%s AND session_id=%s FOR UPDATE",
                    (self.principal, sid),
                ).fetchone()
                is None
            ):
                raise SessionException(f"session {sid} does not exist")
            conn.execute(
                "INSERT INTO copilot_agents (principal, session_id, agent_id, data) VALUES (%s, %s, %s, %s)"
                " ON CONFLICT (principal, session_id, agent_id) DO UPDATE SET data=excluded.data, updated_at=now()",
                (self.principal, sid, aid, self._Jsonb(session_agent.to_dict())),
            )
            self._touch(conn, self.principal, sid)

    def read_agent(self, session_id: str, agent_id: str, **kwargs: Any) -> SessionAgent | None:
        row = self._one(
            "SELECT data FROM copilot_agents WHERE principal=%s AND session_id=%s AND agent_id=%s",
            (self.principal, validate_session_id(session_id), _validate_agent_id(agent_id)),
        )
        return SessionAgent.from_dict(row[0]) if row else None

    def update_agent(self, session_id: str, session_agent: SessionAgent, **kwargs: Any) -> None:
        sid = validate_session_id(session_id)
        aid = _validate_agent_id(session_agent.agent_id)
        previous = self.read_agent(sid, aid)
        if previous is None:
            raise SessionException(f"agent {aid} in session {sid} does not exist")
        session_agent.created_at = previous.created_at
        with self.pool.connection() as conn:
            conn.execute(
                "UPDATE copilot_agents SET data=%s, updated_at=now()"
                " WHERE principal=%s AND session_id=%s AND agent_id=%s",
                (self._Jsonb(session_agent.to_dict()), self.principal, sid, aid),
            )
            self._touch(conn, self.principal, sid)

    def create_message(self, session_id: str, agent_id: str, session_message: SessionMessage, **kwargs: Any) -> None:
        sid = validate_session_id(session_id)
        aid = _validate_agent_id(agent_id)
        with self.pool.connection() as conn:
            if (
                conn.execute(
                    "SELECT 1 FROM copilot_agents WHERE principal=%s AND session_id=%s AND agent_id=%s",
                    (self.principal, sid, aid),
                ).fetchone()
                is None
            ):
                raise SessionException(f"agent {aid} in session {sid} does not exist")
            conn.execute(
                "INSERT INTO copilot_messages (principal, session_id, agent_id, message_id, data)"
                " VALUES (%s, %s, %s, %s, %s) ON CONFLICT (principal, session_id, agent_id, message_id)"
                " DO UPDATE SET data=excluded.data, updated_at=now()",
                (self.principal, sid, aid, int(session_message.message_id), self._Jsonb(session_message.to_dict())),
            )
            self._touch(conn, self.principal, sid)

    def read_message(self, session_id: str, agent_id: str, message_id: int, **kwargs: Any) -> SessionMessage | None:
        row = self._one(
            "SELECT data FROM copilot_messages WHERE principal=%s AND session_id=%s AND agent_id=%s AND message_id=%s",
            (self.principal, validate_session_id(session_id), _validate_agent_id(agent_id), int(message_id)),
        )
        return SessionMessage.from_dict(row[0]) if row else None

    def update_message(self, session_id: str, agent_id: str, session_message: SessionMessage, **kwargs: Any) -> None:
        sid = validate_session_id(session_id)
        aid = _validate_agent_id(agent_id)
        previous = self.read_message(sid, aid, session_message.message_id)
        if previous is None:
            raise SessionException(f"message {session_message.message_id} does not exist")
        session_message.created_at = previous.created_at
        with self.pool.connection() as conn:
            conn.execute(
                "UPDATE copilot_messages SET data=%s, updated_at=now()"
                " WHERE principal=%s AND session_id=%s AND agent_id=%s AND message_id=%s",
                (self._Jsonb(session_message.to_dict()), self.principal, sid, aid, int(session_message.message_id)),
            )
            self._touch(conn, self.principal, sid)

    def list_messages(
        self, session_id: str, agent_id: str, limit: int | None = None, offset: int = 0, **kwargs: Any
    ) -> list[SessionMessage]:
        with self.pool.connection() as conn:
            rows = conn.execute(
                "SELECT data FROM copilot_messages WHERE principal=%s AND session_id=%s AND agent_id=%s"
                " ORDER BY message_id LIMIT %s OFFSET %s",
                (
                    self.principal,
                    validate_session_id(session_id),
                    _validate_agent_id(agent_id),
                    None if limit is None else int(limit),
                    int(offset),
                ),
            ).fetchall()
        return [SessionMessage.from_dict(r[0]) for r in rows]

    # ---- administration
    def delete_session(self, session_id: str) -> bool:
        sid = validate_session_id(session_id)
        with self.pool.connection() as conn:
            return (
                conn.execute(
                    "DELETE FROM copilot_sessions WHERE principal=%s AND session_id=%s", (self.principal, sid)
                ).rowcount
                > 0
            )

    def list_sessions(self, every_principal: bool = False) -> list[dict]:
        where, args = ("", ()) if every_principal else ("WHERE s.principal=%s", (self.principal,))
        with self.pool.connection() as conn:
            rows = conn.execute(
                "SELECT s.session_id, s.principal, s.created_at, s.updated_at,"
                " (SELECT COUNT(*) FROM copilot_messages m"
                "  WHERE m.principal=s.principal AND m.session_id=s.session_id)"
                f" FROM copilot_sessions s {where} ORDER BY s.updated_at DESC",
                args,
            ).fetchall()
        return [
            {"id": r[0], "principal": r[1], "created": r[2].isoformat(), "updated": r[3].isoformat(), "messages": r[4]}
            for r in rows
        ]

    def prune(self, older_than_seconds: float, every_principal: bool = False, now: float | None = None) -> int:
        where, args = ("", ()) if every_principal else (" AND principal=%s", (self.principal,))
        ref = "now()" if now is None else "to_timestamp(%s)"
        ref_args = () if now is None else (float(now),)
        # the age is clamped to the time since the epoch: no session predates it, and an older cutoff is past
        # what a timestamp can hold (DatetimeFieldOverflow)
        with self.pool.connection() as conn:
            return conn.execute(
                f"DELETE FROM copilot_sessions WHERE updated_at < {ref} - make_interval(secs => "
                f"LEAST(%s::float8, EXTRACT(EPOCH FROM {ref})::float8)){where}",
                (*ref_args, float(older_than_seconds), *ref_args, *args),
            ).rowcount


# ------------------------------------------------------------------------------------------ targets
def sessions_target(index_dir: str | Path | None = None) -> str:
    """Where sessions live: ``REPOCTX_SESSIONS_URL`` (a postgresql:// URL or a SQLite path), else
    ``REPOCTX_DATABASE_URL``, else ``<index_dir>/sessions.sqlite``, else ``$REPOCTX_CACHE/sessions.sqlite``."""
    for var in ("REPOCTX_SESSIONS_URL", "REPOCTX_DATABASE_URL"):
        if os.environ.get(var):
            return os.environ[var]
    if index_dir is not None:
        return str(Path(index_dir) / "sessions.sqlite")
    return str(default_cache_dir() / "sessions.sqlite")


def migrate(target: str | Path) -> int:
    """``repoctx db migrate`` for sessions: a postgresql:// URL or a SQLite path. Returns the schema version."""
    return migrate_postgres(str(target)) if _is_postgres(str(target)) else migrate_sqlite(target)


def open_session_repository(
    target: str | Path, principal: str = "local"
) -> SQLiteSessionRepository | PostgresSessionRepository:
    """The repository for a target (see ``sessions_target``); raises SessionStoreNotMigrated when unmigrated."""
    if _is_postgres(str(target)):
        return PostgresSessionRepository(str(target), principal)
    return SQLiteSessionRepository(target, principal)


def _resolve(repo_or_url, principal: str | None):
    """(repository, owned, every_principal). A repository object is scoped to its own principal unless
    another is named; a path/URL with no principal is the operator's view over every principal."""
    if isinstance(repo_or_url, (SQLiteSessionRepository, PostgresSessionRepository)):
        if principal is None or principal == repo_or_url.principal:
            return repo_or_url, False, False
        pool = repo_or_url.pool if isinstance(repo_or_url, PostgresSessionRepository) else repo_or_url.path
        return _open_from(pool, principal), True, False
    repo = open_session_repository(repo_or_url, principal or "local")
    return repo, True, principal is None


def _open_from(pool_or_path, principal: str):
    if isinstance(pool_or_path, Path):
        return SQLiteSessionRepository(pool_or_path, principal)
    return PostgresSessionRepository(pool_or_path, principal)


def list_sessions(repo_or_url, principal: str | None = None) -> list[dict]:
    """Sessions as ``{id, principal, created, updated, messages}``, most recently updated first."""
    repo, owned, every = _resolve(repo_or_url, principal)
    try:
        return repo.list_sessions(every_principal=every)
    finally:
        if owned:
            repo.close()


def prune_sessions(
    repo_or_url, older_than_seconds: float, principal: str | None = None, now: float | None = None
) -> int:
    """Delete sessions not updated for ``older_than_seconds``; returns how many were deleted. Any age is
    accepted (an age beyond the epoch deletes nothing: no session is that old)."""
    if not older_than_seconds >= 0:  # negative, or NaN
        raise ValueError(f"older_than_seconds must be a number >= 0, not {older_than_seconds!r}")
    repo, owned, every = _resolve(repo_or_url, principal)
    try:
        return repo.prune(older_than_seconds, every_principal=every, now=now)
    finally:
        if owned:
            repo.close()
