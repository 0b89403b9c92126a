"""procrastinate's tables and functions in the service's PostgreSQL database, applied by ``repoctx db migrate``.

The first migration applies procrastinate's whole schema; the version applied is recorded in
``repoctx_queue_schema``, and a later ``repoctx db migrate`` under a newer procrastinate applies the migration
files procrastinate ships for the versions in between (pre- and post-migrations together: the service's
processes are stopped for an upgrade). Everything runs in the caller's transaction, under its advisory lock."""

from __future__ import annotations

import re
from importlib import metadata

__all__ = ["migrate_procrastinate", "procrastinate_version"]

_VERSION_FILE = re.compile(r"^(\d+)\.(\d+)\.(\d+)_(\d+)_.*\.sql$")


def procrastinate_version() -> tuple[int, int, int]:
    parts = re.findall(r"\d+", metadata.version("procrastinate"))[:3]
    return tuple(int(p) for p in parts) + (0,) * (3 - len(parts))  # type: ignore[return-value]


def _migrations(after: tuple[int, int, int], upto: tuple[int, int, int]) -> list[str]:
    from procrastinate.schema import migrations_path

    found = []
    for f in migrations_path.iterdir():
        m = _VERSION_FILE.match(f.name)
        if not m:
            continue
        version = (int(m[1]), int(m[2]), int(m[3]))
        if after < version <= upto:
            found.append((version, int(m[4]), f))
    return [f.read_text(encoding="utf-8") for _, _, f in sorted(found)]


def migrate_procrastinate(conn) -> str:
    """Apply or upgrade procrastinate's schema on ``conn`` (a psycopg connection in a transaction)."""
    from procrastinate.schema import SchemaManager

    conn.execute(
        "CREATE TABLE IF NOT EXISTS repoctx_queue_schema(component TEXT PRIMARY KEY, version TEXT NOT NULL, "
        "applied DOUBLE PRECISION NOT NULL)"
    )
    current = procrastinate_version()
    row = conn.execute("SELECT version FROM repoctx_queue_schema WHERE component='procrastinate'").fetchone()
    present = conn.execute("SELECT to_regclass('procrastinate_jobs')").fetchone()[0] is not None
    if row is None and not present:
        conn.execute(SchemaManager.get_schema())
    elif row is not None:
        applied = tuple(int(p) for p in row[0].split(".")[:3])
        for sql in _migrations(applied, current):  # type: ignore[arg-type]
            conn.execute(sql)
    # (procrastinate tables without a record: applied by hand or by `procrastinate schema --apply`; kept as they are)
    version = ".".join(str(p) for p in current)
    conn.execute(
        "INSERT INTO repoctx_queue_schema(component, version, applied) VALUES('procrastinate', %s, "
        "extract(epoch from now())) ON CONFLICT (component) DO UPDATE SET version = excluded.version, "
        "applied = excluded.applied",
        (version,),
    )
    return version
