"""Index jobs on a real PostgreSQL, on procrastinate: workers share the queue and each repository is indexed
exactly once; one repository never indexes in two places at once (procrastinate's lock, the store's lock behind
it); a worker killed mid-job (SIGKILL) or gone silent has its job given to another worker, which finishes it; a job
whose workers keep dying fails after its tries; limits, missing folders and cancellation end a job without
retrying it; a burst of requests is one job. SQLite runs jobs in-process on the embedded queue."""
from __future__ import annotations

import asyncio
import os
import signal
import subprocess
import sys
import threading
from pathlib import Path

import httpx
import pytest

from repoctx import Settings
from repoctx.service.app import create_app
from repoctx.service.config import ServiceSettings
from repoctx.service.db import ServiceDB
from repoctx.service.sources import Sources
from repoctx.service.tasks import JobRuntime, PgJobs, WorkerRunner
from repoctx.store.base import Scope
from repoctx.store.postgres import PostgresStore

from test_service_support import migrate_all, wait_for, write_tree

ROOT = Path(__file__).resolve().parents[1]


def make_repo(base: Path, name: str, files: int, funcs: int = 2) -> Path:
    body = {}
    for i in range(files):
        defs = "\n\n".join(f"def {name.replace('-', '_')}_f{i}_{j}(x):\n    \"\"\"Step {j} of {i}.\"\"\"\n"
                           f"    return helper_{i}_{j}(x) + {j}\n\n\ndef helper_{i}_{j}(y):\n    return y * {j}\n"
                           for j in range(funcs))
        body[f"pkg/mod_{i}.py"] = defs
    return write_tree(base / name, body)


@pytest.fixture
def pg(pg_url):
    migrate_all(pg_url)
    return pg_url


def conf(**kw) -> ServiceSettings:
    return ServiceSettings(**{"job_lease": 3.0, "job_poll": 0.1, "git_poll": 0, "repo_roots": ("/",), **kw})


class Workers:
    """procrastinate workers in threads of this process, each with its own runtime and store."""

    def __init__(self, pg: str, names: list[str], on_job=None, **kw):
        self.conf = conf(**kw)
        self.settings = Settings(database_url=pg, embedder="none")
        self.runners = []
        for name in names:
            rt = JobRuntime(self.settings, self.conf, ServiceDB(pg), name, store=PostgresStore(pg), on_job=on_job)
            rt._owns_store = True
            self.runners.append(WorkerRunner(rt, lease=self.conf.job_lease, poll=self.conf.job_poll))
        self.threads = [threading.Thread(target=r.run, daemon=True) for r in self.runners]

    def __enter__(self) -> "Workers":
        for t in self.threads:
            t.start()
        return self

    def __exit__(self, *exc) -> None:
        for r in self.runners:
            r.stop()
        for t, r in zip(self.threads, self.runners):
            t.join(30)
            r.runtime.close()
            r.runtime.db.close()


def queue(pg: str, **kw) -> tuple[PgJobs, Sources]:
    db = ServiceDB(pg)
    return PgJobs(db, conf(**kw)), Sources(db)


def enqueue_path(jobs: PgJobs, sources: Sources, name: str, root: Path):
    sources.put_path(name, str(root))
    return jobs.enqueue(name, str(root))


def runs(pg: str, repo: str | None = None) -> list[tuple]:
    db = ServiceDB(pg)
    try:
        sql = "SELECT job_id, attempt, repo, worker, started, finished, status, error FROM repoctx_job_runs"
        return db.q(sql + (" WHERE repo = ?" if repo else "") + " ORDER BY started", (repo,) if repo else ())
    finally:
        db.close()


def test_two_workers_share_five_repositories_and_index_each_exactly_once(pg, tmp_path):
    jobs, sources = queue(pg)
    roots = {f"repo{i}": make_repo(tmp_path, f"repo{i}", 60) for i in range(5)}
    ids = {name: enqueue_path(jobs, sources, name, root).id for name, root in roots.items()}
    assert jobs.enqueue("repo0", str(roots["repo0"])).id == ids["repo0"]  # a waiting job absorbs a repeat
    assert jobs.depth() == 5
    ran: list[tuple[str, str, str]] = []
    lock = threading.Lock()

    def on_job(job, outcome, seconds):
        with lock:
            ran.append((job.repo, outcome, job.worker or ""))

    with Workers(pg, ["w0", "w1"], on_job=on_job):
        assert wait_for(lambda: jobs.counts().get("done", 0) == 5, 90), jobs.all()
    done = jobs.all()
    assert len(done) == 5 and all(j.status == "done" and j.attempts == 1 for j in done), done
    assert sorted(r for r, _, _ in ran) == sorted(roots) and all(o == "done" for _, o, _ in ran)
    assert {j.worker for j in done} == {"w0", "w1"}  # both took part
    assert len(runs(pg)) == 5
    store = PostgresStore(pg)
    try:
        for name in roots:
            assert store.repo(name).meta["complete"] == "1"
            assert store.counts(Scope(repos=(name,)))["files"] == 60
    finally:
        store.close()
    jobs.close()


def test_one_repository_never_indexes_twice_at_once(pg, tmp_path):
    """A request while the repository indexes queues one more job; it waits for the first (procrastinate's lock)
    even with two idle workers, and a burst of requests meanwhile is that one job."""
    jobs, sources = queue(pg)
    root = make_repo(tmp_path, "busy", 500, funcs=2)
    first = enqueue_path(jobs, sources, "busy", root)
    with Workers(pg, ["a", "b"]):
        assert wait_for(lambda: jobs.get(first.id).status == "running", 30, 0.02)
        second = [jobs.enqueue("busy", str(root)).id for _ in range(5)]
        assert len(set(second)) == 1 and second[0] != first.id
        assert jobs.get(second[0]).status == "queued"
        assert wait_for(lambda: jobs.get(second[0]).status == "done", 90), jobs.all()
    spans = [(r[4], r[5]) for r in runs(pg, "busy")]
    assert len(spans) == 2 and spans[0][1] <= spans[1][0], spans  # one after the other
    assert jobs.get(first.id).status == "done"
    jobs.close()


def test_a_worker_killed_mid_job_loses_it_and_another_finishes_it(pg, tmp_path):
    root = make_repo(tmp_path, "big", 800, funcs=3)
    jobs, sources = queue(pg)
    job = enqueue_path(jobs, sources, "big", root)
    env = {**os.environ, "REPOCTX_DATABASE_URL": pg, "REPOCTX_EMBEDDER": "none", "PYTHONPATH": str(ROOT / "src"),
           "REPOCTX_GIT_POLL": "0"}
    proc = subprocess.Popen([sys.executable, "-m", "repoctx.cli.service", "worker", "--id", "doomed",
                             "--lease", "1.5", "--poll", "0.05"], env=env, cwd=str(tmp_path),
                            stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
    try:
        # killed mid-job: the job runs there and its record shows indexing progress
        mid = wait_for(lambda: (j := jobs.get(job.id)).worker == "doomed" and j.status == "running"
                       and (j.progress or {}).get("event") not in (None, "claimed", "done") and j, 90, 0.02)
        assert mid and mid.status == "running", (jobs.get(job.id), proc.poll())
        os.kill(proc.pid, signal.SIGKILL)
        proc.wait(10)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait(10)
    killed = jobs.get(job.id)
    assert killed.status == "running" and killed.worker == "doomed" and killed.attempts == 1, \
        "the job finished before the worker was killed: make the repository bigger"

    with Workers(pg, ["survivor"], job_lease=1.5):
        finished = wait_for(lambda: jobs.get(job.id).status in ("done", "failed") and jobs.get(job.id), 120, 0.1)
    assert finished and finished.status == "done", jobs.get(job.id)
    assert finished.worker == "survivor" and finished.attempts == 2
    assert finished.result["files_seen"] == 800 and finished.result["added"] == 800
    record = runs(pg, "big")
    assert [(r[3], r[6]) for r in record] == [("doomed", "lost"), ("survivor", "done")], record
    store = PostgresStore(pg)
    try:
        assert store.counts(Scope(repos=("big",)))["files"] == 800  # nothing half-written by the dead worker
    finally:
        store.close()
    jobs.close()


def _ghost_claim(pg: str, job_id: int) -> None:
    """A worker that takes the job and is never heard from again (its heartbeat a minute old)."""
    import psycopg

    with psycopg.connect(pg, autocommit=True) as conn:
        wid = conn.execute("INSERT INTO procrastinate_workers(last_heartbeat) VALUES (now() - interval '1 minute') "
                           "RETURNING id").fetchone()[0]
        n = conn.execute("UPDATE procrastinate_jobs SET status = 'doing', worker_id = %s WHERE id = %s "
                         "AND status = 'todo'", (wid, job_id)).rowcount
        assert n == 1


def _sweep(pg: str, **kw) -> list[int]:
    """One sweep, as a worker process does every REPOCTX_JOB_LEASE / 3 seconds (no worker running)."""
    c = conf(**kw)
    rt = JobRuntime(Settings(database_url=pg, embedder="none"), c, ServiceDB(pg), "sweeper")
    runner = WorkerRunner(rt, lease=c.job_lease)

    async def go():
        async with runner.app.open_async():
            return await runner.sweep()
    try:
        return asyncio.run(go())
    finally:
        rt.close()
        rt.db.close()


def test_a_silent_worker_loses_its_job_and_a_held_repository_waits(pg, tmp_path):
    jobs, sources = queue(pg)
    root = make_repo(tmp_path, "small", 5)
    job = enqueue_path(jobs, sources, "small", root)
    _ghost_claim(pg, job.id)
    assert jobs.get(job.id).status == "running"
    store = PostgresStore(pg)
    held = store.writer("small").lock("index", wait=False)
    held.__enter__()  # meanwhile another process indexes the repository
    try:
        with Workers(pg, ["live"]):
            # the ghost's job comes back, the live worker takes it, finds the repository held, tries again soon
            assert wait_for(lambda: any(r[6] == "busy" for r in runs(pg, "small")), 30), runs(pg, "small")
            assert jobs.get(job.id).status in ("queued", "running")
            held.__exit__(None, None, None)
            held = None
            final = wait_for(lambda: jobs.get(job.id).status == "done" and jobs.get(job.id), 30)
    finally:
        if held is not None:
            held.__exit__(None, None, None)
        store.close()
    assert final and final.worker == "live", jobs.get(job.id)
    record = [(r[3], r[6]) for r in runs(pg, "small")]
    assert record[0] == (None, "lost") and record[-1] == ("live", "done") and ("live", "busy") in record, record
    jobs.close()


def test_a_job_whose_workers_keep_dying_fails_and_a_missing_folder_fails_at_once(pg, tmp_path):
    jobs, sources = queue(pg, job_attempts=2)
    lost = enqueue_path(jobs, sources, "lost", make_repo(tmp_path, "lost", 3))
    _ghost_claim(pg, lost.id)
    assert _sweep(pg, job_attempts=2) == [lost.id] and jobs.get(lost.id).status == "queued"
    _ghost_claim(pg, lost.id)
    assert _sweep(pg, job_attempts=2) == [lost.id]
    j = jobs.get(lost.id)
    assert (j.status, j.error, j.attempts) == ("failed", "WorkerLost", 2), j
    assert _sweep(pg, job_attempts=2) == []
    gone = enqueue_path(jobs, sources, "gone", tmp_path / "nowhere")
    with Workers(pg, ["w"], job_attempts=2):
        assert wait_for(lambda: jobs.get(gone.id).status == "failed", 30), jobs.get(gone.id)
    g = jobs.get(gone.id)
    assert (g.status, g.error, g.attempts) == ("failed", "FileNotFoundError", 1), g
    jobs.close()


def test_limits_and_cancellation_end_a_job_without_retrying_it(pg, tmp_path):
    jobs, sources = queue(pg)
    big = make_repo(tmp_path, "toolarge", 40)
    job = enqueue_path(jobs, sources, "toolarge", big)
    with Workers(pg, ["w"], job_max_files=10):
        assert wait_for(lambda: jobs.get(job.id).status == "failed", 30), jobs.get(job.id)
    j = jobs.get(job.id)
    assert j.error == "JobLimit" and "REPOCTX_JOB_MAX_FILES" in j.detail and j.attempts == 1
    # a queued job is cancelled at once; a running one stops at its next progress event
    slow = make_repo(tmp_path, "slow", 800, funcs=3)
    queued = enqueue_path(jobs, sources, "slow", slow)
    assert jobs.cancel(queued.id) and jobs.get(queued.id).status == "cancelled"
    assert not jobs.cancel(queued.id)
    running = jobs.enqueue("slow", str(slow))
    with Workers(pg, ["w"]):
        assert wait_for(lambda: (j := jobs.get(running.id)).status == "running"
                        and (j.progress or {}).get("event") not in (None, "claimed"), 60, 0.02), jobs.get(running.id)
        assert jobs.cancel(running.id)
        assert jobs.get(running.id).status in ("cancelling", "cancelled")
        assert wait_for(lambda: jobs.get(running.id).status == "cancelled", 60), jobs.get(running.id)
    store = PostgresStore(pg)
    try:
        assert store.repo("slow").meta.get("complete") != "1"  # rolled back: nothing half-written
    finally:
        store.close()
    assert jobs.get(running.id).attempts == 1
    jobs.close()


def test_a_repository_registered_before_sources_were_kept_still_indexes(pg, tmp_path):
    jobs, _ = queue(pg)
    root = make_repo(tmp_path, "legacy", 4)
    store = PostgresStore(pg)
    store.register_repo("legacy", str(root))  # as POST /repos did before issue 41: no row in repoctx_repo_sources
    store.close()
    job = jobs.enqueue("legacy", str(root))
    with Workers(pg, ["w"]):
        assert wait_for(lambda: jobs.get(job.id).status == "done", 30), jobs.get(job.id)
    assert jobs.get(job.id).result["files_seen"] == 4
    jobs.close()


def test_the_periodic_poll_follows_a_branch_without_webhooks(pg, tmp_path):
    """procrastinate's periodic task asks the remote for its branch head and queues what moved."""
    from gitserver import Remote

    remote = Remote(tmp_path / "remotes", "polled", {"pkg/a.py": "def first_version():\n    return 1\n"})
    jobs, sources = queue(pg)
    sources.put_git("polled", str(remote.bare), f"local:{remote.bare.resolve()}", "main", None)
    kw = {"git_poll": 1.0, "git_cache": str(tmp_path / "cache")}
    with Workers(pg, ["poller"], **kw):
        assert wait_for(lambda: sources.get("polled").indexed_commit == remote.head(), 30), sources.get("polled")
        head = remote.commit({"pkg/b.py": "def second_version():\n    return 2\n"}, "second")
        assert wait_for(lambda: sources.get("polled").indexed_commit == head, 30), sources.get("polled")
    polls = ServiceDB(pg).q("SELECT count(*) FROM procrastinate_jobs WHERE task_name = 'repoctx.poll' "
                            "AND status = 'succeeded'")[0][0]
    assert polls >= 2
    assert [j.status for j in jobs.list(repo="polled")] == ["done", "done"]  # one job per moved head
    jobs.close()


def test_with_sqlite_the_server_runs_jobs_in_process(tmp_path):
    root = make_repo(tmp_path, "local", 8)
    app = create_app(Settings(index_dir=tmp_path / "ix", embedder="none"),
                     service=ServiceSettings(job_poll=0.05, key_cache_seconds=0, repo_roots=(str(tmp_path),)))
    svc = app.state.service
    assert svc.runs_jobs and svc.db.backend == "sqlite" and svc.store.backend == "sqlite"
    _, key = svc.keys.add_key("root", "admin")

    async def go():
        h = {"Authorization": f"Bearer {key}"}
        async with httpx.AsyncClient(transport=httpx.ASGITransport(app=app), base_url="http://t") as c:
            r = await c.post("/repos", json={"name": "local", "path": str(root)}, headers=h)
            assert r.status_code == 202
            for _ in range(200):
                st = (await c.get("/repos/local", headers=h)).json()
                if st["job"]["status"] == "done":
                    break
                await asyncio.sleep(0.05)
            assert st["job"]["status"] == "done" and st["counts"]["files"] == 8
            hits = (await c.post("/search", json={"query": "helper step", "detail": "signatures"}, headers=h)).json()
            assert hits["count"] > 0 and hits["results"][0]["repo"] == "local"
            metrics = (await c.get("/metrics", headers=h)).text
            assert 'repoctx_index_job_seconds_count{outcome="done"} 1.0' in metrics
            assert 'repoctx_index_jobs{status="done"} 1.0' in metrics

    try:
        asyncio.run(go())
    finally:
        svc.close()
    assert (tmp_path / "ix" / "service.sqlite").is_file()
