"""Index jobs of the embedded service (SQLite): a queue in the service database and the workers that run it,
and what every kind of index job shares (``JobLimits``, ``Job`` as the API shows it). With PostgreSQL, index jobs
run on procrastinate instead (``tasks.py``).

* ``Jobs.enqueue(repo, root)`` queues a repository (one queued job per repository: a second request
  while one waits joins it).
* A worker claims the oldest runnable job, never one of a repository another worker holds a live lease on. The
  claim is a lease (``job_lease`` seconds) that a heartbeat renews while the job runs; a worker that dies stops
  renewing, and once the lease has expired another worker claims the job again (up to ``max_attempts`` claims,
  then it is marked failed). A worker whose lease was taken from it, or whose job was cancelled, stops at its next
  progress event.
* Running a job takes the store's writer lock without waiting (``store.writer(repo).lock("index",
  wait=False)``): if another process indexes the repository right now, the job goes back to the queue for a
  moment. So one repository is never indexed by two workers at once.
* The API server runs ``Worker`` threads (``InProcessWorkers``); ``repoctx worker`` runs one in a process.
* What a job indexes comes from ``checkout.py``: a path entry's folder, or a git entry's branch fetched and checked
  out in the worker's cache.
* Every job runs under ``JobLimits``: a time limit (``REPOCTX_JOB_TIMEOUT``) and size limits (``REPOCTX_JOB_MAX_FILES``,
  ``REPOCTX_JOB_MAX_BYTES``). The sizes are surveyed (a walk that only stats files) before anything is read; the
  time is checked during that walk and at each of the indexer's progress events (each stage, every 50 parsed
  files, each batch of vectors), where ``JobLimit`` is raised from the progress callback. A job past a limit
  fails at once (no retry: it would fail again) with the reason in its ``detail``, the indexer's transaction rolls
  back (the last complete index stays as it was) and the worker takes the next job. Between two checks a stage
  runs to its end (reading the changed files, linking them), so a job may overrun its time by that much.
"""

from __future__ import annotations

import json
import logging
import os
import socket
import threading
import time
import uuid
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from repoctx.service.db import ServiceDB
from repoctx.service.git import GitError
from repoctx.store.base import IndexBusy

log = logging.getLogger("repoctx.service.jobs")

__all__ = ["Job", "Jobs", "Worker", "JobLimit", "JobLimits", "worker_id"]

_COLS = (
    "id, repo, root, status, attempts, max_attempts, worker, created, started, heartbeat, lease_until, "
    "finished, progress, result, error, detail"
)


def worker_id() -> str:
    return f"{socket.gethostname()}:{os.getpid()}:{uuid.uuid4().hex[:6]}"


@dataclass
class Job:
    id: int
    repo: str
    root: str
    status: str  # queued | running | cancelling | done | failed | cancelled | superseded
    attempts: int
    max_attempts: int
    worker: str | None = None
    created: float | None = None
    started: float | None = None
    heartbeat: float | None = None
    lease_until: float | None = None
    finished: float | None = None
    progress: dict | None = None
    result: dict | None = None
    error: str | None = None  # the failure's type
    detail: str | None = None  # its first line (shown to administrators only)

    @classmethod
    def from_row(cls, r) -> Job:
        return cls(
            r[0],
            r[1],
            r[2],
            r[3],
            r[4],
            r[5],
            r[6],
            r[7],
            r[8],
            r[9],
            r[10],
            r[11],
            json.loads(r[12]) if r[12] else None,
            json.loads(r[13]) if r[13] else None,
            r[14],
            r[15],
        )

    def to_dict(self, admin: bool = False) -> dict[str, Any]:
        """Everyone who sees the repository sees the job's state and times (and the failure's type). Its progress
        and result count every file of the repository, those a principal's grant hides too: administrators only."""
        out = {
            "id": self.id,
            "repo": self.repo,
            "status": self.status,
            "attempts": self.attempts,
            "created": self.created,
            "started": self.started,
            "finished": self.finished,
            "error": self.error,
        }
        if admin:
            out.update(
                progress=self.progress,
                result=self.result,
                worker=self.worker,
                detail=self.detail,
                lease_until=self.lease_until,
                root=self.root,
            )
        return out


class Jobs:
    """The embedded queue's job table (see the module docstring). Times are the database's clock, in epoch
    seconds."""

    def __init__(self, db: ServiceDB, max_attempts: int = 3):
        self.db = db
        self.max_attempts = max_attempts
        self._wake = threading.Event()  # in-process workers wake up as soon as a job is queued here

    # ---------------------------------------------------------------- producers
    def enqueue(self, repo: str, root: str) -> Job:
        rows = self.db.q(
            "INSERT INTO repoctx_jobs(repo, root, status, attempts, max_attempts, created, run_after) "
            "VALUES(?, ?, 'queued', 0, ?, {now}, {now}) "
            "ON CONFLICT (repo) WHERE status = 'queued' DO UPDATE SET root = excluded.root "
            f"RETURNING {_COLS}",
            (repo, root, self.max_attempts),
        )
        self._wake.set()
        return Job.from_row(rows[0])

    def latest(self, repo: str) -> Job | None:
        rows = self.db.q(f"SELECT {_COLS} FROM repoctx_jobs WHERE repo=? ORDER BY id DESC LIMIT 1", (repo,))
        return Job.from_row(rows[0]) if rows else None

    def get(self, job_id: int) -> Job | None:
        rows = self.db.q(f"SELECT {_COLS} FROM repoctx_jobs WHERE id=?", (job_id,))
        return Job.from_row(rows[0]) if rows else None

    def all(self) -> list[Job]:
        return [Job.from_row(r) for r in self.db.q(f"SELECT {_COLS} FROM repoctx_jobs ORDER BY id")]

    def list(self, repo: str | None = None, status: str | None = None, limit: int = 100) -> list[Job]:
        """Newest first."""
        where, args = [], []
        if repo:
            where.append("repo=?")
            args.append(repo)
        if status:
            where.append("status=?")
            args.append(status)
        sql = f"SELECT {_COLS} FROM repoctx_jobs" + (f" WHERE {' AND '.join(where)}" if where else "")
        return [Job.from_row(r) for r in self.db.q(sql + " ORDER BY id DESC LIMIT ?", (*args, int(limit)))]

    def cancel(self, job_id: int) -> bool:
        """A queued job is cancelled at once; a running one is asked to stop (its worker sees it at its next
        heartbeat and stops at the next progress event). False when the job has already ended."""
        with self.db.transaction() as run:
            if run(
                "UPDATE repoctx_jobs SET status='cancelled', finished={now} WHERE id=? AND status='queued' "
                "RETURNING id",
                (job_id,),
            ):
                return True
            return bool(
                run(
                    "UPDATE repoctx_jobs SET status='cancelling' WHERE id=? AND status='running' RETURNING id",
                    (job_id,),
                )
            )

    def cancelled(self, job: Job, worker: str) -> bool:
        rows = self.db.q(
            "UPDATE repoctx_jobs SET status='cancelled', finished={now}, lease_until=NULL, "
            "error='Cancelled', detail='cancelled by an administrator' "
            "WHERE id=? AND worker=? AND status='cancelling' RETURNING id",
            (job.id, worker),
        )
        return bool(rows)

    def depth(self) -> int:
        return int(self.db.q("SELECT count(*) FROM repoctx_jobs WHERE status='queued'")[0][0])

    def counts(self) -> dict[str, int]:
        return {r[0]: int(r[1]) for r in self.db.q("SELECT status, count(*) FROM repoctx_jobs GROUP BY status")}

    # ---------------------------------------------------------------- workers
    def claim(self, worker: str, lease: float) -> Job | None:
        """The oldest runnable job, now leased to ``worker``; None when there is none."""
        skip_locked = " FOR UPDATE SKIP LOCKED" if self.db.backend == "postgres" else ""
        with self.db.transaction() as run:
            run(
                "UPDATE repoctx_jobs SET status='failed', finished={now}, error='WorkerLost', "
                "detail='the workers that claimed this job stopped before finishing it' "
                "WHERE status='running' AND lease_until < {now} AND attempts >= max_attempts"
            )
            run(
                "UPDATE repoctx_jobs SET status='cancelled', finished={now}, error='Cancelled', "
                "detail='cancelled by an administrator' WHERE status='cancelling' AND lease_until < {now}"
            )
            rows = run(
                "UPDATE repoctx_jobs SET status='running', worker=?, attempts=attempts+1, started={now}, "
                "heartbeat={now}, lease_until={now} + ?, error=NULL, detail=NULL "
                "WHERE id = (SELECT j.id FROM repoctx_jobs j "
                "  WHERE ((j.status='queued' AND j.run_after <= {now}) "
                "OR (j.status='running' AND j.lease_until < {now}))"
                "  AND NOT EXISTS (SELECT 1 FROM repoctx_jobs r WHERE r.repo = j.repo AND r.id <> j.id"
                "                  AND r.status='running' AND r.lease_until >= {now})"
                f"  ORDER BY j.id LIMIT 1{skip_locked}) "
                f"RETURNING {_COLS}",
                (worker, float(lease)),
            )
        return Job.from_row(rows[0]) if rows else None

    def heartbeat(self, job: Job, worker: str, lease: float, progress: dict | None = None) -> bool:
        """Renew the lease (and record progress); False when the job is no longer this worker's."""
        rows = self.db.q(
            "UPDATE repoctx_jobs SET heartbeat={now}, lease_until={now} + ?, "
            "progress=COALESCE(?, progress) WHERE id=? AND worker=? AND status='running' RETURNING id",
            (float(lease), json.dumps(progress) if progress is not None else None, job.id, worker),
        )
        return bool(rows)

    def finish(self, job: Job, worker: str, result: dict, progress: dict | None = None) -> bool:
        rows = self.db.q(
            "UPDATE repoctx_jobs SET status='done', finished={now}, lease_until=NULL, result=?, "
            "progress=COALESCE(?, progress) WHERE id=? AND worker=? AND status='running' RETURNING id",
            (json.dumps(result), json.dumps(progress) if progress is not None else None, job.id, worker),
        )
        return bool(rows)

    def fail(self, job: Job, worker: str, error: str, detail: str, retry: bool = True, delay: float = 5.0) -> str:
        """Record a failure; the job is queued again (after ``delay``) while it has attempts left."""
        with self.db.transaction() as run:
            row = run(
                "SELECT attempts, max_attempts FROM repoctx_jobs WHERE id=? AND worker=? AND status='running'",
                (job.id, worker),
            )
            if not row:
                return "lost"
            if retry and row[0][0] < row[0][1]:
                return self._requeue(run, job.id, delay, undo_attempt=False, error=error, detail=detail)
            run(
                "UPDATE repoctx_jobs SET status='failed', finished={now}, lease_until=NULL, error=?, detail=? "
                "WHERE id=?",
                (error, detail, job.id),
            )
            return "failed"

    def release(self, job: Job, worker: str, delay: float = 2.0) -> str:
        """Give a job back without counting the attempt (the repository is being indexed elsewhere)."""
        with self.db.transaction() as run:
            if not run("SELECT 1 FROM repoctx_jobs WHERE id=? AND worker=? AND status='running'", (job.id, worker)):
                return "lost"
            return self._requeue(run, job.id, delay, undo_attempt=True, error=None, detail=None)

    @staticmethod
    def _requeue(run, job_id: int, delay: float, undo_attempt: bool, error: str | None, detail: str | None) -> str:
        if run(
            "SELECT 1 FROM repoctx_jobs WHERE repo = (SELECT repo FROM repoctx_jobs WHERE id=?) AND status='queued'",
            (job_id,),
        ):
            run("UPDATE repoctx_jobs SET status='superseded', finished={now}, lease_until=NULL WHERE id=?", (job_id,))
            return "superseded"  # a newer request for the repository is queued: it will do the work
        run(
            "UPDATE repoctx_jobs SET status='queued', worker=NULL, lease_until=NULL, run_after={now} + ?, "
            f"attempts=attempts{' - 1' if undo_attempt else ''}, error=?, detail=? WHERE id=?",
            (float(delay), error, detail, job_id),
        )
        return "queued"


class JobLimit(Exception):
    """An index job went past one of its ``JobLimits``; the message is the reason its record shows."""


class JobStopped(Exception):
    """An index job was cancelled (or, with the embedded queue, its lease went to another worker) while it ran."""


@dataclass(frozen=True)
class JobLimits:
    timeout: float = 3600.0  # REPOCTX_JOB_TIMEOUT
    max_files: int = 200_000  # REPOCTX_JOB_MAX_FILES
    max_bytes: int = 4 << 30  # REPOCTX_JOB_MAX_BYTES

    @classmethod
    def from_settings(cls, conf) -> JobLimits:
        return cls(float(conf.job_timeout), int(conf.job_max_files), int(conf.job_max_bytes))


class _JobGuard:
    """One job's limits, checked by its worker thread (see the module docstring)."""

    def __init__(self, limits: JobLimits):
        self.limits = limits
        self.t0 = time.monotonic()

    def check_time(self) -> None:
        if time.monotonic() - self.t0 > self.limits.timeout:
            raise JobLimit(f"ran over {self.limits.timeout:g} s (REPOCTX_JOB_TIMEOUT)")

    def check_files(self, n: int) -> None:
        if n > self.limits.max_files:
            raise JobLimit(f"more than {self.limits.max_files} files (REPOCTX_JOB_MAX_FILES)")

    def check_bytes(self, n: int) -> None:
        if n > self.limits.max_bytes:
            raise JobLimit(f"more than {self.limits.max_bytes} bytes of source (REPOCTX_JOB_MAX_BYTES)")

    def survey(self, root: Path, settings) -> None:
        """Count the files the indexer would take in (and their bytes) before it reads any of them: the indexer
        reads every changed file before its first progress event, so a limit found there would come too late."""
        from repoctx.ingest.walk import WalkReport, walk

        files = size = 0
        for files, sf in enumerate(walk(root, settings, WalkReport()), 1):
            size += sf.size
            self.check_files(files)
            self.check_bytes(size)
            if files % 256 == 0:
                self.check_time()
        self.check_time()

    def on_event(self, ev: dict) -> None:
        if ev.get("event") == "done":  # committed: the work is kept whatever the clock says
            return
        if ev.get("event") == "plan" and isinstance(ev.get("files"), int):
            self.check_files(ev["files"])  # the files may have grown since the survey
        self.check_time()


def _resolve_embedder(embedder, settings):
    """The embedder to use: `embedder` itself, what it makes when it is a factory (callable, no ``encode``), or
    when None the one ``settings.embedder`` names (None when that is "none")."""
    if callable(embedder) and not hasattr(embedder, "encode"):
        embedder = embedder()
    if embedder is None and settings.embedder not in ("none", "", None):
        from repoctx.providers.embedding import get_embedder

        embedder = get_embedder(settings.embedder)
    return embedder


def _summary(report) -> dict:
    """Counts only: a job's result is shown to principals whose scope may hide some paths."""
    return {
        "files_seen": report.files_seen,
        "added": len(report.added),
        "modified": len(report.modified),
        "deleted": len(report.deleted),
        "unchanged": report.unchanged,
        "capsules_written": report.capsules_written,
        "seconds": round(report.seconds, 3),
    }


class Worker:
    """Claims jobs and indexes their repositories into ``store`` (see the module docstring)."""

    def __init__(
        self,
        settings,
        jobs: Jobs,
        store=None,
        *,
        worker: str | None = None,
        lease: float = 30.0,
        poll: float = 1.0,
        on_job: Callable[[Job, str, float], None] | None = None,
        embedder=None,
        limits: JobLimits | None = None,
        checkouts=None,
    ):
        self.settings = settings
        self.limits = limits or JobLimits()
        if checkouts is None:
            from repoctx.service.checkout import Checkouts
            from repoctx.service.config import ServiceSettings

            checkouts = Checkouts(jobs.db, ServiceSettings())
        self.checkouts = checkouts  # what a job indexes: a path, or a git entry's branch checked out
        self.jobs = jobs
        self._store = store
        self._owns_store = store is None
        self.id = worker or worker_id()
        self.lease = lease
        self.poll = poll
        self.on_job = on_job  # (job, outcome, seconds): metrics
        self._embedder = embedder  # an embedder, or a callable returning one (shared with the API's reads)
        self.current: Job | None = None

    @property
    def store(self):
        if self._store is None:
            from repoctx.index import open_store

            self._store = open_store(self.settings)
        return self._store

    def close(self) -> None:
        if self._owns_store and self._store is not None:
            self._store.close()
            self._store = None

    def run(self, stop: threading.Event | None = None, max_jobs: int | None = None) -> int:
        """Work until ``stop`` is set (or ``max_jobs`` are done); returns how many jobs ran."""
        stop = stop or threading.Event()
        done = 0
        while not stop.is_set() and (max_jobs is None or done < max_jobs):
            try:
                ran = self.run_once()
            except Exception as e:  # noqa: BLE001 - the database went away for a moment: wait and try again
                log.warning("worker %s: %s", self.id, type(e).__name__)
                ran = False
            if ran:
                done += 1
                continue
            self.jobs._wake.wait(self.poll)
            self.jobs._wake.clear()
        return done

    def run_once(self) -> bool:
        job = self.jobs.claim(self.id, self.lease)
        if job is None:
            return False
        self.current = job
        t0 = time.perf_counter()
        outcome = self._run(job)
        self.current = None
        if self.on_job is not None:
            try:
                self.on_job(job, outcome, time.perf_counter() - t0)
            except Exception:  # noqa: BLE001 - a failing observer must not fail the job
                pass
        return True

    def _embedder_for(self):
        self._embedder = _resolve_embedder(self._embedder, self.settings)
        return self._embedder

    def _run(self, job: Job) -> str:
        from repoctx.index import Index

        progress: dict = {"event": "claimed"}
        guard = _JobGuard(self.limits)
        stop = threading.Event()
        lost = threading.Event()

        def beat() -> None:
            while not stop.wait(self.lease / 3):
                try:
                    if not self.jobs.heartbeat(job, self.id, self.lease, dict(progress)):
                        lost.set()
                except Exception:  # noqa: BLE001 - a missed beat is retried; the lease is three beats long
                    pass

        def on_progress(ev: dict) -> None:
            if lost.is_set():  # cancelled, or the lease went to another worker: stop (the transaction rolls back)
                raise JobStopped("the job was cancelled or its lease was lost")
            guard.on_event(ev)  # raises JobLimit: the indexer stops there and its transaction rolls back
            progress.clear()
            progress.update({k: v for k, v in ev.items() if isinstance(v, (int, float, str)) and k != "path"})

        hb = threading.Thread(target=beat, name=f"repoctx-job-{job.id}-heartbeat", daemon=True)
        hb.start()
        try:
            try:
                prepared = self.checkouts.prepare(job.repo, job.root)
            except FileNotFoundError:
                return self.jobs.fail(
                    job, self.id, "FileNotFoundError", f"{job.root} is not a directory on worker {self.id}", retry=False
                )
            guard.check_time()
            guard.survey(prepared.root, self.settings)
            ix = Index(prepared.root, self.settings, self._embedder_for(), name=job.repo, store=self.store)
            report = ix.update(progress=on_progress, wait=False, by=f"index job {job.id}")
            self.checkouts.indexed(prepared)
            if lost.is_set():
                log.warning("job %s: the lease was lost while indexing %s", job.id, job.repo)
            result = _summary(report)
            if prepared.commit:
                result["commit"] = prepared.commit
            self.jobs.finish(job, self.id, result, dict(progress))
            return "done"
        except JobStopped:
            if self.jobs.cancelled(job, self.id):
                log.warning("job %s (%s) cancelled", job.id, job.repo)
                return "cancelled"
            log.warning("job %s (%s): the lease was lost; another worker has it", job.id, job.repo)
            return "lost"
        except GitError as e:  # scrubbed: no credential, no URL userinfo
            log.warning("job %s (%s) failed: %s", job.id, job.repo, e)
            return "error:" + self.jobs.fail(job, self.id, type(e).__name__, str(e)[:300], retry=e.retry)
        except IndexBusy:
            return "busy:" + self.jobs.release(job, self.id)
        except JobLimit as e:
            log.warning("job %s (%s) stopped: %s", job.id, job.repo, e)
            return "limit:" + self.jobs.fail(job, self.id, "JobLimit", str(e), retry=False)
        except Exception as e:  # noqa: BLE001 - any other failure is the job's: recorded, retried by the queue
            detail = (str(e).strip().splitlines() or [""])[0][:300]
            log.warning("job %s (%s) failed: %s: %s", job.id, job.repo, type(e).__name__, detail)
            return "error:" + self.jobs.fail(job, self.id, type(e).__name__, detail)
        finally:
            stop.set()
            hb.join(timeout=5)


class InProcessWorkers:
    """``n`` worker threads inside the API process (the SQLite default; optional with PostgreSQL)."""

    def __init__(
        self,
        settings,
        jobs: Jobs,
        store,
        n: int = 1,
        *,
        lease: float = 30.0,
        poll: float = 1.0,
        on_job=None,
        embedder=None,
        limits: JobLimits | None = None,
        checkouts=None,
        git_poll: float = 0.0,
    ):
        self.stop = threading.Event()
        self.workers = [
            Worker(
                settings,
                jobs,
                store,
                lease=lease,
                poll=poll,
                on_job=on_job,
                embedder=embedder,
                limits=limits,
                checkouts=checkouts,
            )
            for _ in range(n)
        ]
        self.threads: list[threading.Thread] = []
        self.jobs = jobs
        self.git_poll = float(git_poll or 0.0)  # seconds between polls of the git entries' branch heads; 0: never

    def start(self) -> InProcessWorkers:
        for w in self.workers:
            t = threading.Thread(target=w.run, args=(self.stop,), name=f"repoctx-worker-{w.id}", daemon=True)
            t.start()
            self.threads.append(t)
        if self.git_poll > 0 and self.workers:
            t = threading.Thread(target=self._poll, name="repoctx-git-poll", daemon=True)
            t.start()
            self.threads.append(t)
        return self

    def _poll(self) -> None:
        checkouts = self.workers[0].checkouts
        while not self.stop.wait(self.git_poll):
            try:
                checkouts.poll(lambda name: self.jobs.enqueue(name, ""))
            except Exception as e:  # noqa: BLE001 - the next poll tries again
                log.warning("poll: %s", type(e).__name__)

    def close(self, timeout: float = 10.0) -> None:
        self.stop.set()
        for w in self.workers:
            w.jobs._wake.set()
        for t in self.threads:
            t.join(timeout)
