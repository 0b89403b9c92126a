"""Whether the store can be reached right now, decided in one place.

* ``store_unavailable(exc)`` tells an outage -- the database stopped, restarting, unreachable, out of
  connections, or an SQLite file locked past its busy timeout -- from every other failure. An outage is
  worth retrying: the HTTP service answers it 503 with ``Retry-After`` (never 401 or 500), streams end
  with an ``error`` event named ``store_unavailable``, and the agentic loop stops instead of answering
  an empty result. A wrong query, a missing table or a corrupt file is not an outage: retrying cannot help.
* ``connection_pool(...)`` opens a psycopg_pool ``ConnectionPool`` that fails within ``timeout`` while the
  database is away and heals by itself once it is back: every connection is checked as it leaves the pool,
  the first dead one drains the whole pool (a restarted server killed them all), and reconnection attempts
  give up after ``timeout`` so a fresh one starts (at once if callers wait) instead of a long backoff.
"""

from __future__ import annotations

import sqlite3
from collections.abc import Callable
from typing import Any

from repoctx.store.base import StoreError

__all__ = ["StoreUnavailable", "store_unavailable", "connection_pool", "connect_kwargs"]

# sqlite3.OperationalError texts that mean "not now" rather than "never"
_SQLITE_TRANSIENT = ("database is locked", "database table is locked", "unable to open database file", "disk i/o error")


class StoreUnavailable(StoreError):
    """The store cannot be reached right now; the same request may succeed in a moment."""


def _one_unavailable(exc: BaseException) -> bool:
    if isinstance(exc, StoreUnavailable):
        return True
    if isinstance(exc, sqlite3.OperationalError):
        text = str(exc).lower()
        return any(t in text for t in _SQLITE_TRANSIENT)
    try:
        import psycopg
    except ImportError:  # the embedded default needs no PostgreSQL driver
        return False
    # OperationalError: the connection failed or was lost (refused, AdminShutdown, CannotConnectNow,
    # ConnectionTimeout, TooManyConnections, ...); psycopg_pool's PoolTimeout, PoolClosed and TooManyRequests
    # derive from it. (A bare ConnectionError is not the store's: psycopg wraps its own, and a model provider
    # that cannot be reached raises one.)
    return isinstance(exc, psycopg.OperationalError)


def store_unavailable(exc: BaseException | None) -> bool:
    """Whether ``exc`` (or an exception it was raised from) says the store is unavailable right now."""
    seen: set[int] = set()
    while exc is not None and id(exc) not in seen and len(seen) < 16:
        seen.add(id(exc))
        if _one_unavailable(exc):
            return True
        exc = exc.__cause__ or exc.__context__
    return False


def connect_kwargs(timeout: float | None) -> dict[str, Any]:
    """``psycopg.connect`` keyword arguments for a connection attempt that gives up after ``timeout`` s, and
    (over TCP) a connection whose sent data goes unacknowledged that long is dropped: a database behind a
    network that went silent fails the check of a pooled connection instead of hanging it for minutes."""
    if not timeout:
        return {}
    return {"connect_timeout": max(1, round(timeout)), "tcp_user_timeout": max(1000, int(timeout * 1000))}


def connection_pool(
    conninfo: str,
    *,
    timeout: float | None = None,
    min_size: int = 1,
    max_size: int = 8,
    kwargs: dict[str, Any] | None = None,
    configure: Callable | None = None,
    name: str | None = None,
):
    """An open psycopg_pool ``ConnectionPool`` that survives an outage (see the module docstring).
    ``timeout``: seconds a caller waits for a connection (and a connection attempt may take) before the pool
    raises ``PoolTimeout``; None keeps psycopg_pool's defaults (30 s, no connect timeout, 5 min of retries)."""
    from psycopg_pool import ConnectionPool

    pool: ConnectionPool | None = None

    def check(conn) -> None:
        try:
            ConnectionPool.check_connection(conn)
        except Exception:
            if pool is not None:
                pool.drain()  # its siblings died with it: replace them all now, not one failed request each
            raise

    def reconnect_failed(p) -> None:
        if p.get_stats().get("requests_waiting"):
            p.check()  # callers are waiting: a fresh attempt now (check() grows an empty pool), not at their deadline

    options: dict[str, Any] = {}
    if timeout:
        # a reconnection loop gives up after a short while: the next attempt starts afresh, for the next request
        # (or at once, for the ones waiting), so a store that is back is found within about a second rather than
        # after a backoff grown through a long outage
        options = {
            "timeout": float(timeout),
            "reconnect_timeout": max(float(timeout), 2.0),
            "reconnect_failed": reconnect_failed,
        }
    pool = ConnectionPool(
        conninfo,
        min_size=min_size,
        max_size=max_size,
        open=True,
        check=check,
        kwargs={**(kwargs or {}), **connect_kwargs(timeout)},
        configure=configure,
        name=name,
        **options,
    )
    return pool
