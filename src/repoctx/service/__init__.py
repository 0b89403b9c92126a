"""The HTTP service a team shares (``create_app``), its API keys and roles (``auth``), index jobs and
workers (``jobs``), Prometheus metrics (``metrics``) and commands (``cli.register``).

Light on import: FastAPI and friends load only when ``create_app`` is asked for."""

from __future__ import annotations

__all__ = ["create_app", "migrate_postgres"]


def __getattr__(name: str):
    if name == "create_app":
        from repoctx.service.app import create_app

        return create_app
    if name == "migrate_postgres":
        from repoctx.service.auth import migrate_postgres

        return migrate_postgres
    raise AttributeError(name)
