"""Index jobs on procrastinate (PostgreSQL): the tasks, the queue the API sees, and the workers that run it.

* ``repoctx.index(repo)`` indexes one registered entry: a git entry's branch is fetched and checked out first
  (``checkout.py``). Each job carries the procrastinate ``lock`` ``repoctx:index:<repo>``, so one repository never
  indexes in two places at once (procrastinate runs jobs of one lock one after the other, across every worker);
  the store's own advisory lock stays the second line (a job that finds it held is retried in 2 s).
* ``PgJobs.enqueue`` dedupes against a *waiting* job of the entry under a per-repository advisory lock (a burst of
  pushes is one job; a push while the entry indexes queues one more, which runs after). Not procrastinate's
  ``queueing_lock``: procrastinate retries a failed (or stalled) job by putting it back to ``todo``, which violates
  that unique index when another job of the lock waits, and leaves the job ``doing`` for good (procrastinate issues
  #1446 and #1543).
* Retries with exponential backoff (2, 4, 8 ... s) up to ``REPOCTX_JOB_ATTEMPTS`` tries in all; a job past its
  ``JobLimits``, a git remote that refuses us (bad credential, no such branch) or a missing folder fails at once.
* Cancellation (``POST /jobs/{id}/cancel``): a waiting job is cancelled; a running one is asked to abort and stops at
  the indexer's next progress event (its transaction rolls back, the last complete index stays).
* A worker that dies (``kill -9``, a lost machine) stops its procrastinate heartbeat. Every worker process sweeps for
  jobs whose worker has been silent for ``REPOCTX_JOB_LEASE`` seconds (one sweeper at a time, in one transaction
  that locks the rows it changes) and puts them back in the queue, so another worker finishes them; after
  ``REPOCTX_JOB_ATTEMPTS`` tries the job fails (``WorkerLost``).
* ``repoctx.poll`` is a procrastinate periodic task (every ``REPOCTX_GIT_POLL`` seconds, rounded to a period that
  divides a minute, an hour or a day) that asks each git remote for its branch heads (``git ls-remote``) and queues
  the entries whose head is not the indexed commit: the fallback for hosts that cannot send webhooks.
* Each try of a job is a row of ``repoctx_job_runs`` (worker, start, end, outcome, progress, counts, the failure's
  type and one scrubbed line): what ``GET /jobs`` and ``GET /repos/{name}`` show beside procrastinate's state, and
  the record that shows a job never ran twice at once.

The API opens procrastinate with a synchronous connector on a small pool of its own (it only defers and cancels);
workers run procrastinate's asynchronous worker, restarted after a database outage, with index tasks in threads."""

from __future__ import annotations

import asyncio
import builtins
import json
import logging
import os
import socket
import threading
import time
import uuid
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from repoctx.service.db import ServiceDB
from repoctx.service.jobs import Job, JobLimit, JobLimits, _JobGuard, _resolve_embedder, _summary

log = logging.getLogger("repoctx.service.tasks")

__all__ = [
    "PgJobs",
    "JobRuntime",
    "WorkerRunner",
    "InProcessProcrastinate",
    "make_app",
    "job_queue",
    "poll_cron",
    "start_workers",
    "index_retry",
    "INDEX_TASK",
    "POLL_TASK",
]

INDEX_TASK = "repoctx.index"
POLL_TASK = "repoctx.poll"
INDEX_QUEUE = "repoctx-index"
POLL_QUEUE = "repoctx-poll"

# procrastinate status → the service's job vocabulary (unchanged from the embedded queue's)
_STATUS = {
    "todo": "queued",
    "doing": "running",
    "succeeded": "done",
    "failed": "failed",
    "cancelled": "cancelled",
    "aborted": "cancelled",
}
_FROM_STATUS = {
    "queued": ("todo",),
    "running": ("doing",),
    "cancelling": ("doing",),
    "done": ("succeeded",),
    "failed": ("failed",),
    "cancelled": ("cancelled", "aborted"),
}


def index_lock(repo: str) -> str:
    return f"repoctx:index:{repo}"


def worker_name() -> str:
    return f"{socket.gethostname()}:{os.getpid()}:{uuid.uuid4().hex[:6]}"


# ------------------------------------------------------------------------------------ the retry policy
def index_retry(attempts: int):
    """procrastinate's retry decision for index jobs (see the module docstring)."""
    from procrastinate import BaseRetryStrategy, RetryDecision

    from repoctx.service.git import GitError
    from repoctx.store.base import IndexBusy

    class IndexRetry(BaseRetryStrategy):
        def get_retry_decision(self, *, exception, job):
            if isinstance(exception, IndexBusy):  # another process indexes it right now: soon again
                return RetryDecision(retry_in={"seconds": 2}) if job.attempts < attempts + 1000 else None
            if isinstance(exception, (JobLimit, FileNotFoundError)) or (
                isinstance(exception, GitError) and not exception.retry
            ):
                return None  # it would fail again
            if job.attempts + 1 >= attempts:
                return None
            return RetryDecision(retry_in={"seconds": 2 ** (job.attempts + 1)})

    return IndexRetry()


def poll_cron(seconds: float) -> str:
    """A cron expression (croniter's, seconds as a sixth field) for the period nearest ``seconds`` that divides a
    minute, an hour or a day."""
    periods = (
        [1, 2, 3, 4, 5, 6, 10, 12, 15, 20, 30]
        + [60 * m for m in (1, 2, 3, 4, 5, 6, 10, 12, 15, 20, 30)]
        + [3600 * h for h in (1, 2, 3, 4, 6, 8, 12, 24)]
    )
    p = min(periods, key=lambda x: abs(x - max(1.0, seconds)))
    if p < 60:
        return f"* * * * * */{p}"
    if p < 3600:
        return f"*/{p // 60} * * * *"
    if p < 86400:
        return f"0 */{p // 3600} * * *"
    return "0 0 * * *"


# ------------------------------------------------------------------------------------ the app
def make_app(connector, runtime: JobRuntime | None = None, *, poll_seconds: float = 0.0, attempts: int = 3):
    """A procrastinate App with the service's tasks; ``runtime`` runs them (a worker), None only defers (the API)."""
    from procrastinate import App

    app = App(connector=connector)

    @app.task(name=INDEX_TASK, queue=INDEX_QUEUE, pass_context=True, retry=index_retry(attempts))
    def index(context, repo: str) -> dict:
        if runtime is None:
            raise RuntimeError("this process only queues jobs")
        return runtime.index(context, repo)

    def poll(timestamp: int) -> None:
        if runtime is not None:
            runtime.poll()

    task = app.task(name=POLL_TASK, queue=POLL_QUEUE, lock="repoctx:poll")(poll)
    if poll_seconds and poll_seconds > 0:
        app.periodic(cron=poll_cron(poll_seconds), periodic_id="repoctx-poll")(task)
    return app


# ------------------------------------------------------------------------------------ the queue the API sees
_JOB_SQL = """
SELECT j.id, COALESCE(q.repo, j.args->>'repo'), j.status::text, j.abort_requested, j.attempts,
       COALESCE(q.created, (SELECT extract(epoch from min(e.at)) FROM procrastinate_events e WHERE e.job_id = j.id)),
       r.attempt, r.worker, r.started, r.heartbeat, r.finished, r.status, r.progress, r.result, r.error, r.detail,
       extract(epoch from j.scheduled_at)
  FROM procrastinate_jobs j
  LEFT JOIN repoctx_job_requests q ON q.job_id = j.id
  LEFT JOIN LATERAL (SELECT * FROM repoctx_job_runs x WHERE x.job_id = j.id ORDER BY x.attempt DESC LIMIT 1) r
         ON true
 WHERE j.task_name = %s"""


def _job(row, max_attempts: int) -> Job:
    (
        jid,
        repo,
        status,
        abort,
        _attempts,
        created,
        attempt,
        worker,
        started,
        heartbeat,
        finished,
        _run_status,
        progress,
        result,
        error,
        detail,
        _scheduled,
    ) = row
    state = _STATUS.get(status, status)
    if state == "running" and abort:
        state = "cancelling"
    if state == "done":
        error = detail = None
    elif state == "cancelled" and not error:
        error, detail = "Cancelled", "cancelled by an administrator"
    ended = state in ("done", "failed", "cancelled")
    return Job(
        int(jid),
        repo or "",
        "",
        state,
        int(attempt or 0),
        max_attempts,
        worker,
        created,
        started,
        heartbeat,
        None,
        finished if ended else None,
        json.loads(progress) if progress else None,
        json.loads(result) if result else None,
        error,
        detail,
    )


class PgJobs:
    """The index jobs of procrastinate's queue, as the API shows them (``jobs.Job``), and their producers."""

    def __init__(self, db: ServiceDB, conf):
        self.db = db
        self.conf = conf
        self.max_attempts = int(conf.job_attempts)
        self._app = None
        self._pool = None
        self._lock = threading.Lock()

    def app(self):
        """procrastinate, synchronous, on a small pool of its own (opened at first use)."""
        with self._lock:
            if self._app is None:
                from procrastinate import SyncPsycopgConnector

                from repoctx.store.availability import connection_pool

                self._pool = connection_pool(
                    self.db.target,
                    timeout=self.conf.store_timeout,
                    min_size=1,
                    max_size=4,
                    kwargs={"autocommit": True},
                    name="repoctx-queue",
                )
                app = make_app(SyncPsycopgConnector(), attempts=self.max_attempts)
                app.open(self._pool)
                self._app = app
            return self._app

    def enqueue(self, repo: str, root: str = "", reason: str = "api") -> Job:
        """Queue an index job for ``repo``; a job of the entry already waiting absorbs the request."""
        lock = index_lock(repo)
        fresh = False
        with self.db.transaction() as run:
            run("SELECT pg_advisory_xact_lock(hashtext(?))", (f"repoctx:enqueue:{repo}",))
            rows = run(
                "SELECT id FROM procrastinate_jobs WHERE lock = ? AND status = 'todo' AND task_name = ? "
                "ORDER BY id LIMIT 1",
                (lock, INDEX_TASK),
            )
            if rows:
                job_id = int(rows[0][0])
            else:  # deferred on the queue's own pool: committed before this transaction lets the next request look
                job_id = self.app().configure_task(INDEX_TASK, lock=lock).defer(repo=repo)
                run(
                    "INSERT INTO repoctx_job_requests(job_id, repo, created, reason) VALUES(?, ?, {now}, ?) "
                    "ON CONFLICT (job_id) DO NOTHING",
                    (job_id, repo, reason),
                )
                fresh = True
        job = self.get(job_id)
        if job is None:  # a worker took it and the queue let it go already: it was queued
            return Job(job_id, repo, "", "queued", 0, self.max_attempts)
        if fresh and job.status != "queued":  # a worker took it already: it was queued
            job = Job(job.id, job.repo, "", "queued", 0, job.max_attempts, created=job.created)
        return job

    def _connection(self):
        """A connection of the service database's pool (this queue runs on PostgreSQL, which has one)."""
        pool = self.db.pool
        if pool is None:
            raise RuntimeError("the PostgreSQL job queue needs a PostgreSQL service database")
        return pool.connection()

    def get(self, job_id: int) -> Job | None:
        with self._connection() as conn:
            row = conn.execute(_JOB_SQL + " AND j.id = %s", (INDEX_TASK, int(job_id))).fetchone()
        return _job(row, self.max_attempts) if row else None

    def latest(self, repo: str) -> Job | None:
        rows = self.db.q("SELECT max(job_id) FROM repoctx_job_requests WHERE repo = ?", (repo,))
        return self.get(rows[0][0]) if rows and rows[0][0] is not None else None

    def list(self, repo: str | None = None, status: str | None = None, limit: int = 100) -> list[Job]:
        sql = _JOB_SQL
        args: list[Any] = [INDEX_TASK]
        if repo:
            sql += " AND j.lock = %s"
            args.append(index_lock(repo))
        if status:
            sql += " AND j.status::text = ANY(%s)"
            args.append(list(_FROM_STATUS.get(status, (status,))))
            if status in ("running", "cancelling"):
                sql += " AND j.abort_requested = %s"
                args.append(status == "cancelling")
        sql += " ORDER BY j.id DESC LIMIT %s"
        args.append(int(limit))
        with self._connection() as conn:
            rows = conn.execute(sql, args).fetchall()
        return [_job(r, self.max_attempts) for r in rows]

    def all(self) -> builtins.list[Job]:  # builtins: `list` here is the method above
        return list(reversed(self.list(limit=1_000_000)))

    def cancel(self, job_id: int) -> bool:
        """A waiting job is cancelled; a running one is asked to abort. False when it has already ended."""
        return bool(self.app().job_manager.cancel_job_by_id(int(job_id), abort=True))

    def counts(self) -> dict[str, int]:
        out: dict[str, int] = {}
        for status, n in self.db.q(
            "SELECT status::text, count(*) FROM procrastinate_jobs WHERE task_name = ? GROUP BY status", (INDEX_TASK,)
        ):
            key = _STATUS.get(status, status)
            out[key] = out.get(key, 0) + int(n)
        return out

    def depth(self) -> int:
        return self.counts().get("queued", 0)

    def close(self) -> None:
        if self._app is not None:
            self._app.close()
        if self._pool is not None:
            self._pool.close()


def job_queue(db: ServiceDB, conf):
    """The service's queue for its database: procrastinate on PostgreSQL, the embedded table on SQLite."""
    if db.backend == "postgres":
        return PgJobs(db, conf)
    from repoctx.service.jobs import Jobs

    return Jobs(db, max_attempts=conf.job_attempts)


# ------------------------------------------------------------------------------------ running jobs
class JobStoppedByRequest(Exception):
    pass


@dataclass
class JobRuntime:
    """What a worker process's tasks share: settings, the store, the git cache, the job records."""

    settings: Any
    conf: Any
    db: ServiceDB
    name: str
    store: Any = None
    embedder: Any = None  # an embedder, or a callable returning one
    on_job: Callable[[Job, str, float], None] | None = None

    def __post_init__(self):
        from repoctx.service.checkout import Checkouts

        self.checkouts = Checkouts(self.db, self.conf)
        self.limits = JobLimits.from_settings(self.conf)
        self.jobs = PgJobs(self.db, self.conf)
        self._owns_store = self.store is None
        self._store_lock = threading.Lock()

    def the_store(self):
        with self._store_lock:
            if self.store is None:
                from repoctx.index import open_store

                self.store = open_store(self.settings)
            return self.store

    def the_embedder(self):
        self.embedder = _resolve_embedder(self.embedder, self.settings)
        return self.embedder

    def close(self) -> None:
        self.jobs.close()
        if self._owns_store and self.store is not None:
            self.store.close()
            self.store = None

    # ---- the job records
    def _run_started(self, job_id: int, repo: str) -> int:
        rows = self.db.q(
            "INSERT INTO repoctx_job_runs(job_id, attempt, repo, worker, started, heartbeat, status) "
            "SELECT ?, COALESCE(max(attempt), 0) + 1, ?, ?, {now}, {now}, 'running' "
            "FROM repoctx_job_runs WHERE job_id = ? RETURNING attempt",
            (job_id, repo, self.name, job_id),
        )
        return int(rows[0][0])

    def _run_progress(self, job_id: int, attempt: int, progress: dict) -> None:
        self.db.q(
            "UPDATE repoctx_job_runs SET progress = ?, heartbeat = {now} WHERE job_id = ? AND attempt = ?",
            (json.dumps(progress), job_id, attempt),
        )

    def _run_ended(
        self,
        job_id: int,
        attempt: int,
        status: str,
        *,
        commit: str | None = None,
        progress: dict | None = None,
        result: dict | None = None,
        error: str | None = None,
        detail: str | None = None,
    ) -> None:
        self.db.q(
            "UPDATE repoctx_job_runs SET status = ?, finished = {now}, heartbeat = {now}, commit_id = ?, "
            "progress = COALESCE(?, progress), result = ?, error = ?, detail = ? "
            "WHERE job_id = ? AND attempt = ?",
            (
                status,
                commit,
                json.dumps(progress) if progress is not None else None,
                json.dumps(result) if result is not None else None,
                error,
                detail,
                job_id,
                attempt,
            ),
        )

    # ---- the index task
    def index(self, context, repo: str) -> dict:
        from procrastinate.exceptions import JobAborted

        from repoctx.index import Index
        from repoctx.service.git import GitError
        from repoctx.store.base import IndexBusy

        job_id = int(context.job.id)
        t0 = time.perf_counter()
        attempt = self._run_started(job_id, repo)
        log.info("job %s (%s): started (try %d) on %s", job_id, repo, attempt, self.name)
        guard = _JobGuard(self.limits)
        progress: dict = {"event": "claimed"}
        last = [0.0]

        def on_progress(ev: dict) -> None:
            if context.should_abort():
                raise JobStoppedByRequest("cancelled by an administrator")
            guard.on_event(ev)  # raises JobLimit: the indexer stops there and its transaction rolls back
            progress.clear()
            progress.update({k: v for k, v in ev.items() if isinstance(v, (int, float, str)) and k != "path"})
            now = time.monotonic()
            if now - last[0] >= 1.0:
                last[0] = now
                try:
                    self._run_progress(job_id, attempt, dict(progress))
                except Exception:  # noqa: BLE001 - a record, not the work: the next event tries again
                    pass

        outcome, commit = "error", None
        try:
            rec = self.the_store().repo(repo)  # a path entry registered before sources were kept: its root
            prepared = self.checkouts.prepare(repo, rec.root if rec is not None else None)
            commit = prepared.commit
            if context.should_abort():
                raise JobStoppedByRequest("cancelled by an administrator")
            guard.check_time()
            guard.survey(prepared.root, self.settings)
            ix = Index(prepared.root, self.settings, self.the_embedder(), name=repo, store=self.the_store())
            report = ix.update(progress=on_progress, wait=False, by=f"index job {job_id}")
            self.checkouts.indexed(prepared)
            result = _summary(report)
            if commit:
                result["commit"] = commit
            self._run_ended(job_id, attempt, "done", commit=commit, progress=dict(progress), result=result)
            outcome = "done"
            log.info(
                "job %s (%s): done in %.1fs%s",
                job_id,
                repo,
                time.perf_counter() - t0,
                f" at {commit[:12]}" if commit else "",
            )
            return result
        except JobStoppedByRequest as e:
            outcome = "cancelled"
            self._record_failure(job_id, attempt, repo, "Cancelled", str(e), commit, progress, "cancelled")
            raise JobAborted(str(e)) from None
        except IndexBusy:
            outcome = "busy"
            self._record_failure(
                job_id,
                attempt,
                repo,
                "IndexBusy",
                "another process is indexing the repository; tried again in 2 s",
                commit,
                progress,
                "busy",
            )
            raise
        except JobLimit as e:
            outcome = "limit"
            self._record_failure(job_id, attempt, repo, "JobLimit", str(e), commit, progress)
            raise
        except GitError as e:  # already scrubbed
            self._record_failure(job_id, attempt, repo, type(e).__name__, str(e)[:300], commit, progress)
            raise
        except FileNotFoundError:
            self._record_failure(
                job_id,
                attempt,
                repo,
                "FileNotFoundError",
                f"the repository's folder is not on worker {self.name}",
                commit,
                progress,
            )
            raise
        except Exception as e:
            from repoctx.service.git import scrub

            detail = scrub((str(e).strip().splitlines() or [""])[0], self.checkouts.credentials.all_secrets())
            self._record_failure(job_id, attempt, repo, type(e).__name__, detail, commit, progress)
            raise
        finally:
            if self.on_job is not None:
                try:
                    job = Job(job_id, repo, "", outcome, attempt, self.jobs.max_attempts, self.name)
                    self.on_job(job, outcome, time.perf_counter() - t0)
                except Exception:  # noqa: BLE001 - a failing observer must not fail the job
                    pass

    def _record_failure(self, job_id, attempt, repo, error, detail, commit, progress, status="failed") -> None:
        log.warning("job %s (%s): %s: %s", job_id, repo, error, detail)
        try:
            self._run_ended(job_id, attempt, status, commit=commit, progress=dict(progress), error=error, detail=detail)
        except Exception as e:  # noqa: BLE001 - the database may be what failed
            log.warning("job %s: its record could not be written (%s)", job_id, type(e).__name__)

    # ---- the poll
    def poll(self) -> int:
        """Queue the git entries whose branch head moved (``Checkouts.poll``); how many were queued. The records of
        polls that ended more than an hour ago go (one every REPOCTX_GIT_POLL seconds would pile up)."""
        try:
            self.db.q(
                "DELETE FROM procrastinate_jobs WHERE task_name = ? AND status IN ('succeeded', 'failed') "
                "AND id IN (SELECT job_id FROM procrastinate_events WHERE type IN ('succeeded', 'failed') "
                "AND at < now() - interval '1 hour')",
                (POLL_TASK,),
            )
        except Exception as e:  # noqa: BLE001 - housekeeping only
            log.debug("poll: pruning old polls: %s", type(e).__name__)
        return self.checkouts.poll(lambda name: self.jobs.enqueue(name, "", reason="poll"))


_LOST = "the worker stopped (no heartbeat for REPOCTX_JOB_LEASE seconds) before finishing"

_STALLED_SQL = """
SELECT j.id, j.attempts, j.args->>'repo'
  FROM procrastinate_jobs j
  LEFT JOIN procrastinate_workers w ON w.id = j.worker_id
 WHERE j.status = 'doing' AND j.task_name = %s
   AND (j.worker_id IS NULL OR w.last_heartbeat < now() - make_interval(secs => %s))
   FOR UPDATE OF j SKIP LOCKED"""


class WorkerRunner:
    """procrastinate's worker for this process, restarted after a failure (a database outage stops it), and the
    sweeper that gives the jobs of dead workers back to the queue (see the module docstring)."""

    def __init__(self, runtime: JobRuntime, *, concurrency: int = 1, lease: float = 30.0, poll: float = 1.0):
        from procrastinate import PsycopgConnector

        from repoctx.store.availability import connect_kwargs

        self.runtime = runtime
        self.concurrency = max(1, int(concurrency))
        self.lease = max(1.0, float(lease))
        self.poll = max(0.05, float(poll))
        conf = runtime.conf
        self.app = make_app(
            PsycopgConnector(
                conninfo=runtime.db.target,
                min_size=1,
                max_size=self.concurrency + 4,
                kwargs=connect_kwargs(conf.store_timeout),
            ),
            runtime,
            poll_seconds=conf.git_poll,
            attempts=int(conf.job_attempts),
        )
        self._loop: asyncio.AbstractEventLoop | None = None
        self._task: asyncio.Task | None = None
        self._stopping = threading.Event()
        self.started = threading.Event()

    def stop(self) -> None:
        """Finish the jobs in hand, then stop (thread-safe)."""
        self._stopping.set()
        loop, task = self._loop, self._task
        if loop is not None and task is not None:
            try:
                loop.call_soon_threadsafe(task.cancel)
            except RuntimeError:
                pass

    def run(self) -> None:
        asyncio.run(self.main())

    async def main(self) -> None:
        self._loop = asyncio.get_running_loop()
        async with self.app.open_async():
            sweeper = asyncio.create_task(self._sweep_forever(), name="repoctx-sweeper")
            backoff = 0.5
            try:
                while not self._stopping.is_set():
                    self._task = asyncio.create_task(
                        self.app.run_worker_async(
                            name=self.runtime.name,
                            concurrency=self.concurrency,
                            queues=[INDEX_QUEUE, POLL_QUEUE],
                            install_signal_handlers=False,
                            update_heartbeat_interval=self.lease / 3,
                            stalled_worker_timeout=self.lease,
                            fetch_job_polling_interval=self.poll,
                            abort_job_polling_interval=max(self.poll, 1.0),
                            listen_notify=True,
                        )
                    )
                    self.started.set()
                    try:
                        await self._task
                        stopped = "it stopped"
                    except asyncio.CancelledError:
                        if self._stopping.is_set():
                            break
                        raise
                    except Exception as e:  # noqa: BLE001 - the database went away: start again when it is back
                        stopped = type(e).__name__
                    if self._stopping.is_set():
                        break
                    log.warning("worker %s: %s; starting again in %.1f s", self.runtime.name, stopped, backoff)
                    await asyncio.sleep(backoff)
                    backoff = min(backoff * 2, 5.0)
            finally:
                sweeper.cancel()
                try:
                    await sweeper
                except BaseException:  # noqa: BLE001 - the sweeper's own cancellation (or last error): the worker is stopping
                    pass

    async def _sweep_forever(self) -> None:
        while True:
            await asyncio.sleep(max(0.5, self.lease / 3))
            try:
                await self.sweep()
            except asyncio.CancelledError:
                raise
            except Exception as e:  # noqa: BLE001 - the next sweep tries again
                log.debug("sweep: %s", type(e).__name__)

    async def sweep(self) -> list[int]:
        """Give the jobs of workers silent for ``lease`` seconds back to the queue (or fail them after their last
        try); the ids handled."""
        attempts = int(self.runtime.conf.job_attempts)
        done: list[int] = []
        async with self.app.connector.pool.connection() as conn, conn.transaction():
            got = await (await conn.execute("SELECT pg_try_advisory_xact_lock(hashtext('repoctx:sweep'))")).fetchone()
            if not got or not got[0]:
                return done
            rows = await (await conn.execute(_STALLED_SQL, (INDEX_TASK, self.lease))).fetchall()
            for job_id, tries, repo in rows:
                lost = await (
                    await conn.execute(
                        "UPDATE repoctx_job_runs SET status = 'lost', "
                        "finished = extract(epoch from clock_timestamp()), "
                        "error = 'WorkerLost', detail = %s WHERE job_id = %s AND status = 'running' RETURNING attempt",
                        (_LOST, job_id),
                    )
                ).fetchall()
                if not lost:  # its worker died before it wrote a record: the try still counts, and shows
                    await conn.execute(
                        "INSERT INTO repoctx_job_runs(job_id, attempt, repo, started, finished, status, error, "
                        "detail) SELECT %s, COALESCE(max(attempt), 0) + 1, %s, extract(epoch from "
                        "clock_timestamp()), extract(epoch from clock_timestamp()), 'lost', 'WorkerLost', %s "
                        "FROM repoctx_job_runs WHERE job_id = %s",
                        (job_id, repo or "", _LOST, job_id),
                    )
                if tries + 1 >= attempts:
                    await conn.execute("SELECT procrastinate_finish_job_v1(%s, 'failed', false)", (job_id,))
                    log.warning("job %s (%s): its workers stopped %d times; failed", job_id, repo, tries + 1)
                else:
                    await conn.execute("SELECT procrastinate_retry_job_v2(%s, now(), NULL, NULL, NULL)", (job_id,))
                    log.warning("job %s (%s): its worker stopped; back in the queue", job_id, repo)
                done.append(int(job_id))
        return done


def start_workers(settings, conf, db: ServiceDB, jobs, store, n: int, *, on_job=None, embedder=None):
    """``n`` index-job threads in the API process: procrastinate's worker on PostgreSQL, the embedded queue's
    workers on SQLite."""
    if db.backend == "postgres":
        return InProcessProcrastinate(settings, conf, db, store, n, on_job=on_job, embedder=embedder).start()
    from repoctx.service.checkout import Checkouts
    from repoctx.service.jobs import InProcessWorkers

    return InProcessWorkers(
        settings,
        jobs,
        store,
        n,
        lease=conf.job_lease,
        poll=conf.job_poll,
        on_job=on_job,
        embedder=embedder,
        limits=JobLimits.from_settings(conf),
        checkouts=Checkouts(db, conf),
        git_poll=conf.git_poll,
    ).start()


class InProcessProcrastinate:
    """A procrastinate worker in a thread of the API process (``serve --jobs N`` with PostgreSQL)."""

    def __init__(self, settings, conf, db: ServiceDB, store, n: int = 1, *, on_job=None, embedder=None):
        self.runtime = JobRuntime(settings, conf, db, worker_name(), store=store, embedder=embedder, on_job=on_job)
        self.runner = WorkerRunner(self.runtime, concurrency=n, lease=conf.job_lease, poll=conf.job_poll)
        self.thread = threading.Thread(target=self._run, name="repoctx-procrastinate", daemon=True)

    def _run(self) -> None:
        try:
            self.runner.run()
        except Exception as e:  # logged; the API keeps serving
            log.error("in-process worker stopped: %s", type(e).__name__, exc_info=e)

    def start(self) -> InProcessProcrastinate:
        self.thread.start()
        return self

    def close(self, timeout: float = 10.0) -> None:
        self.runner.stop()
        self.thread.join(timeout)
        self.runtime.close()
