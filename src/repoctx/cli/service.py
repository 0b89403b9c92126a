"""``repoctx serve``, ``repoctx worker``, ``repoctx keys ...`` and ``repoctx roles ...``.

``service_app`` is a standalone Typer app (``python -m repoctx.cli.service``); ``register(app)`` adds the
same commands to another one (the main ``repoctx`` CLI)."""

from __future__ import annotations

import json
import logging
import signal
import threading
from contextlib import closing
from typing import Any

import typer
from rich.console import Console
from rich.text import Text

service_app = typer.Typer(add_completion=False, no_args_is_help=True, help="The repoctx HTTP service.")
keys_app = typer.Typer(
    add_completion=False, no_args_is_help=True, help="API keys: each belongs to a principal and names a role."
)
roles_app = typer.Typer(
    add_completion=False, no_args_is_help=True, help="Roles: which repositories and paths a key may read."
)


def _consoles() -> tuple[Console, Console]:
    return Console(soft_wrap=True, highlight=False), Console(stderr=True, soft_wrap=True, highlight=False)


def _fail(message: str, code: int = 2) -> typer.Exit:
    # plain text: markup would eat a glob's backslash
    _consoles()[1].print(Text.assemble(("error:", "red"), " ", message), highlight=False)
    return typer.Exit(code)


def _settings():
    from repoctx.config import ConfigError, Settings
    from repoctx.service.config import ServiceSettings

    try:
        return Settings.from_env(), ServiceSettings.from_env()
    except ConfigError as e:
        raise _fail(str(e)) from None


def _key_store():
    """The service's key store (callers close it: `with closing(_key_store()) as ks`)."""
    from repoctx.service.auth import KeyStore
    from repoctx.service.db import NotMigrated, ServiceDB, service_db_target

    settings, conf = _settings()
    try:
        return KeyStore(
            ServiceDB(service_db_target(settings)), roles_file=conf.roles_file, cache_seconds=0, owns_db=True
        )
    except (NotMigrated, ValueError, OSError) as e:
        raise _fail(str(e), 1) from None


# ------------------------------------------------------------------------------------ serve / worker
def serve(
    host: str = typer.Option("127.0.0.1", "--host", help="Address to listen on."),
    port: int = typer.Option(8000, "--port", help="Port to listen on."),
    jobs: int | None = typer.Option(
        None,
        "--jobs",
        min=0,
        help="Index-job threads in this process (default: 1 with SQLite, "
        "0 with PostgreSQL, where `repoctx worker` runs them).",
    ),
    workers: int = typer.Option(
        1, "--workers", min=1, max=64, help="uvicorn processes (each with its own app and connection pools)."
    ),
    worker_healthcheck: int = typer.Option(
        120,
        "--worker-healthcheck",
        min=5,
        max=3600,
        help="With --workers: seconds a process may take to answer uvicorn's health ping. Each process builds "
        "BM25 for the whole store in memory as it starts (a 500k-unit store: about a minute of CPU that "
        "starves the ping); at uvicorn's 5 s every process was killed and restarted, none ever ready.",
    ),
    log_level: str = typer.Option("info", "--log-level", help="debug | info (with access log) | warning | error"),
):
    """Serve the HTTP API (uvicorn) over the store named by REPOCTX_DATABASE_URL or REPOCTX_INDEX_DIR."""
    import os

    import uvicorn

    from repoctx.service.app import create_app
    from repoctx.service.db import NotMigrated
    from repoctx.store.base import StoreError

    settings, conf = _settings()
    opts: dict[str, Any] = dict(
        host=host,
        port=port,
        log_level=log_level,
        access_log=log_level in ("debug", "info"),
        timeout_graceful_shutdown=10,
    )
    if workers > 1:  # each process builds its app from the environment; job claims keep their threads apart
        if jobs is not None:
            os.environ["REPOCTX_SERVE_JOBS"] = str(jobs)
        uvicorn.run(
            "repoctx.service.app:app_from_env",
            factory=True,
            workers=workers,
            timeout_worker_healthcheck=worker_healthcheck,
            **opts,
        )
        return
    try:
        app = create_app(settings, service=conf, inprocess_workers=jobs)
    except (NotMigrated, StoreError, ValueError) as e:
        raise _fail(str(e), 1) from None
    uvicorn.run(app, **opts)


def worker(
    worker_id: str | None = typer.Option(None, "--id", help="This worker's name (default host:pid:random)."),
    lease: float | None = typer.Option(
        None,
        "--lease",
        min=0.5,
        help="Seconds of silence after which a worker's job is given to another (REPOCTX_JOB_LEASE, 30).",
    ),
    poll: float | None = typer.Option(None, "--poll", min=0.05, help="Seconds between looks at the queue."),
    concurrency: int = typer.Option(
        1, "--concurrency", min=1, max=64, help="Index jobs this process runs at once (PostgreSQL)."
    ),
    max_jobs: int | None = typer.Option(None, "--max-jobs", min=1, help="Stop after this many jobs."),
    metrics_port: int | None = typer.Option(
        None, "--metrics-port", help="Serve this worker's Prometheus metrics on this port."
    ),
):
    """Run index jobs from the shared queue (PostgreSQL: procrastinate; start as many as you like, on any machine)."""
    from repoctx.service.db import NotMigrated, ServiceDB, service_db_target
    from repoctx.service.metrics import ServiceMetrics
    from repoctx.service.tasks import job_queue
    from repoctx.store.base import StoreError

    err = _consoles()[1]
    settings, conf = _settings()
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(name)s %(message)s")
    logging.getLogger("procrastinate").setLevel(logging.WARNING)  # its per-job lines repeat ours
    try:
        db = ServiceDB(service_db_target(settings), connect_timeout=conf.store_timeout)
    except (NotMigrated, ValueError) as e:
        raise _fail(str(e), 1) from None
    jobs = job_queue(db, conf)
    metrics = ServiceMetrics(jobs.counts)
    if metrics_port:
        from prometheus_client import start_http_server

        start_http_server(metrics_port, addr="127.0.0.1", registry=metrics.registry)
    ran = [0]
    stop_now: list = []

    def on_job(job, outcome: str, seconds: float) -> None:
        metrics.record_job(job, outcome, seconds)
        err.print(f"job {job.id} {job.repo}: {outcome} in {seconds:.1f}s")
        ran[0] += 1
        if max_jobs is not None and ran[0] >= max_jobs and stop_now:
            stop_now[0]()

    try:
        if db.backend == "postgres":
            _procrastinate_worker(settings, conf, db, worker_id, lease, poll, concurrency, on_job, stop_now, err)
        else:
            _embedded_worker(settings, conf, jobs, worker_id, lease, poll, max_jobs, on_job, err)
    except StoreError as e:
        raise _fail(str(e), 1) from None
    finally:
        if hasattr(jobs, "close"):
            jobs.close()
        db.close()


def _procrastinate_worker(settings, conf, db, worker_id, lease, poll, concurrency, on_job, stop_now, err) -> None:
    from repoctx.service.tasks import JobRuntime, WorkerRunner, worker_name

    runtime = JobRuntime(settings, conf, db, worker_id or worker_name(), on_job=on_job)
    runner = WorkerRunner(runtime, concurrency=concurrency, lease=lease or conf.job_lease, poll=poll or conf.job_poll)
    stop_now.append(runner.stop)

    def on_signal(signum, frame) -> None:  # finish the jobs in hand, then stop
        err.print("stopping after the current job")
        runner.stop()

    signal.signal(signal.SIGTERM, on_signal)
    signal.signal(signal.SIGINT, on_signal)
    err.print(f"worker {runtime.name} waiting for index jobs (procrastinate)")
    try:
        runner.run()
    finally:
        runtime.close()


def _embedded_worker(settings, conf, jobs, worker_id, lease, poll, max_jobs, on_job, err) -> None:
    from repoctx.service.checkout import Checkouts
    from repoctx.service.jobs import JobLimits, Worker

    w = Worker(
        settings,
        jobs,
        worker=worker_id,
        lease=lease or conf.job_lease,
        poll=poll or conf.job_poll,
        on_job=on_job,
        limits=JobLimits.from_settings(conf),
        checkouts=Checkouts(jobs.db, conf),
    )
    stop = threading.Event()

    def on_signal(signum, frame) -> None:  # finish the job in hand, then stop
        err.print("stopping after the current job")
        stop.set()
        jobs._wake.set()

    signal.signal(signal.SIGTERM, on_signal)
    signal.signal(signal.SIGINT, on_signal)
    err.print(f"worker {w.id} waiting for index jobs")
    try:
        w.run(stop, max_jobs)
    finally:
        w.close()


# ------------------------------------------------------------------------------------ keys
@keys_app.command("add")
def keys_add(
    name: str = typer.Argument(..., help="The principal the key belongs to (e.g. alice or ci-bot)."),
    role: str = typer.Option(..., "--role", help="A role from `repoctx roles list` (admin always exists)."),
):
    """Create a key and print it once: only its hash is stored."""
    err = _consoles()[1]
    with closing(_key_store()) as ks:
        try:
            key_id, key = ks.add_key(name, role)
        except ValueError as e:
            raise _fail(str(e)) from None
    print(key)
    err.print(f"key {key_id} for {name} ({role}): keep it now, it is not shown again")


@keys_app.command("list")
def keys_list(
    as_json: bool = typer.Option(False, "--json"),
    revoked: bool = typer.Option(False, "--revoked", help="Include revoked keys."),
):
    """Keys by id, principal and role (never the keys themselves)."""
    out, _ = _consoles()
    with closing(_key_store()) as ks:
        rows = ks.keys(include_revoked=revoked)
    if as_json:
        print(json.dumps(rows, indent=2))
        return
    for r in rows:
        out.print(f"{r['id']}  {r['name']}  {r['role']}" + ("  [dim]revoked[/]" if r["revoked"] else ""))


@keys_app.command("revoke")
def keys_revoke(name_or_id: str = typer.Argument(..., help="A key id, or a principal (revokes all its keys).")):
    """Revoke keys (a server trusts a checked key for REPOCTX_KEY_CACHE seconds, default 5)."""
    out, _ = _consoles()
    with closing(_key_store()) as ks:
        n = ks.revoke(name_or_id)
    if not n:
        raise _fail(f"no active key {name_or_id!r}", 1)
    out.print(f"revoked {n} key{'s' if n != 1 else ''}")


# ------------------------------------------------------------------------------------ roles
@roles_app.command("add")
def roles_add(
    name: str = typer.Argument(..., help="The role's name."),
    repo: str | None = typer.Option(None, "--repo", help="A repository this role may read ('*': any)."),
    include: list[str] = typer.Option(
        [], "--include", help="Path glob it may read there (repeatable; default: every path). '*' crosses '/'."
    ),
    exclude: list[str] = typer.Option([], "--exclude", help="Path glob it may not read (repeatable)."),
    admin: bool = typer.Option(False, "--admin", help="Every repository, and may register repositories."),
):
    """Create a role or add a grant to it (grants add up: run again for another repository)."""
    out, _ = _consoles()
    if repo is None and not include and not exclude and not admin:
        raise _fail("give --repo (with --include/--exclude) or --admin")
    with closing(_key_store()) as ks:
        try:
            role = ks.add_role(name, repo=repo, include=include, exclude=exclude, admin=admin)
        except ValueError as e:
            raise _fail(str(e)) from None
    out.print(json.dumps(role.to_dict()))


@roles_app.command("list")
def roles_list(as_json: bool = typer.Option(False, "--json")):
    """Every role with its grants."""
    out, _ = _consoles()
    with closing(_key_store()) as ks:
        roles = [r.to_dict() for r in ks.roles()]
    if as_json:
        print(json.dumps(roles, indent=2))
        return
    for r in roles:
        if r["admin"]:
            out.print(f"{r['name']}: admin (every repository)")
            continue
        grants = "; ".join(
            f"{g['repo']}"
            + (f" include {','.join(g['include'])}" if g["include"] else "")
            + (f" exclude {','.join(g['exclude'])}" if g["exclude"] else "")
            for g in r["grants"]
        )
        out.print(f"{r['name']}: {grants or 'nothing'}")


@roles_app.command("remove")
def roles_remove(name: str = typer.Argument(...)):
    """Delete a role: its keys then read nothing."""
    out, _ = _consoles()
    with closing(_key_store()) as ks:
        ok = ks.remove_role(name)
    if not ok:
        raise _fail(f"no stored role {name!r}", 1)
    out.print(f"removed role {name}")


def register(app: typer.Typer) -> None:
    """Add ``serve``, ``worker`` and the ``keys`` and ``roles`` groups to ``app``."""
    app.command("serve")(serve)
    app.command("worker")(worker)
    app.add_typer(keys_app, name="keys")
    app.add_typer(roles_app, name="roles")


register(service_app)

if __name__ == "__main__":  # pragma: no cover
    service_app()
