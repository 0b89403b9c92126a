"""Index jobs on a real PostgreSQL: workers share the queue (FOR UPDATE SKIP LOCKED), each repository is
indexed exactly once, a worker killed mid-job (SIGKILL) or gone silent loses its lease and another
worker finishes the job, and a repository held by another indexer waits. SQLite runs jobs in-process."""
from __future__ import annotations

import asyncio
import os
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path

import httpx
import pytest

from repoctx import Settings
from repoctx.service.app import create_app
from repoctx.service.config import ServiceSettings
from repoctx.service.db import ServiceDB
from repoctx.service.jobs import Jobs, Worker
from repoctx.store.postgres import PostgresStore

from test_service_support import migrate_all, write_tree

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


def wait_for(cond, timeout: float, step: float = 0.05):
    deadline = time.time() + timeout
    while time.time() < deadline:
        value = cond()
        if value:
            return value
        time.sleep(step)
    return cond()


def test_two_workers_share_five_repositories_and_index_each_exactly_once(pg, tmp_path):
    settings = Settings(database_url=pg, embedder="none")
    jobs = Jobs(ServiceDB(pg))
    roots = {f"repo{i}": make_repo(tmp_path, f"repo{i}", 60) for i in range(5)}
    ids = {name: jobs.enqueue(name, str(root)).id for name, root in roots.items()}
    assert jobs.enqueue("repo0", str(roots["repo0"])).id == ids["repo0"]  # a waiting job absorbs a repeat
    assert jobs.depth() == 5
    ran: list[tuple[str, str, str]] = []
    lock = threading.Lock()

    def on_job(job, outcome, seconds):
        with lock:
            ran.append((job.repo, outcome, job.worker or ""))

    stop = threading.Event()
    workers = [Worker(settings, Jobs(ServiceDB(pg)), PostgresStore(pg), worker=f"w{k}", lease=5, poll=0.05,
                      on_job=on_job) for k in range(2)]
    threads = [threading.Thread(target=w.run, args=(stop,)) for w in workers]
    for t in threads:
        t.start()
    try:
        assert wait_for(lambda: jobs.counts().get("done", 0) == 5, 60), jobs.all()
    finally:
        stop.set()
        for w in workers:
            w.jobs._wake.set()
        for t in threads:
            t.join(10)
    done = jobs.all()
    assert len(done) == 5 and all(j.status == "done" and j.attempts == 1 for j in done), done
    assert sorted(r for r, _, _ in ran) == sorted(roots) and all(o == "done" for _, o, _ in ran)
    assert {j.worker for j in done} == {"w0", "w1"}  # both took part
    store = PostgresStore(pg)
    try:
        for name in roots:
            assert store.repo(name).meta["complete"] == "1"
            assert store.counts(store_scope(name))["files"] == 60
    finally:
        store.close()
        for w in workers:
            w.store.close()


def store_scope(name):
    from repoctx.store.base import Scope

    return Scope(repos=(name,))


def test_a_worker_killed_mid_job_loses_its_lease_and_another_finishes_the_job(pg, tmp_path):
    root = make_repo(tmp_path, "big", 800, funcs=3)
    jobs = Jobs(ServiceDB(pg))
    job = jobs.enqueue("big", str(root))
    env = {**os.environ, "REPOCTX_DATABASE_URL": pg, "REPOCTX_EMBEDDER": "none", "PYTHONPATH": str(ROOT / "src")}
    proc = subprocess.Popen([sys.executable, "-m", "repoctx.service.cli", "worker", "--id", "doomed",
                             "--lease", "0.9", "--poll", "0.05"], env=env, cwd=str(tmp_path),
                            stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
    try:
        # killed mid-job: the job is claimed and its heartbeat has reported indexing progress
        mid = wait_for(lambda: (j := jobs.get(job.id)).worker == "doomed" and j.status == "running"
                       and (j.progress or {}).get("event") not in (None, "claimed", "done") and j, 60, 0.02)
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

    settings = Settings(database_url=pg, embedder="none")
    survivor = Worker(settings, jobs, PostgresStore(pg), worker="survivor", lease=5, poll=0.1)
    stop = threading.Event()
    t = threading.Thread(target=survivor.run, args=(stop,))
    t.start()
    try:
        finished = wait_for(lambda: jobs.get(job.id).status == "done" and jobs.get(job.id), 90, 0.1)
    finally:
        stop.set()
        jobs._wake.set()
        t.join(30)
    assert finished, jobs.get(job.id)
    assert finished.worker == "survivor" and finished.attempts == 2
    assert finished.result["files_seen"] == 800 and finished.result["added"] == 800
    assert survivor.store.counts(store_scope("big"))["files"] == 800  # nothing half-written by the dead worker
    survivor.store.close()


def test_a_silent_claim_expires_and_a_held_repository_waits(pg, tmp_path):
    settings = Settings(database_url=pg, embedder="none")
    jobs = Jobs(ServiceDB(pg))
    root = make_repo(tmp_path, "small", 5)
    job = jobs.enqueue("small", str(root))
    ghost = jobs.claim("ghost", lease=0.6)  # a worker that claims and is never heard from again
    assert ghost.id == job.id and ghost.status == "running"
    store = PostgresStore(pg)
    w = Worker(settings, jobs, store, worker="live", lease=5, poll=0.05)
    assert w.run_once() is False  # the ghost's lease still holds
    time.sleep(0.7)
    # meanwhile another process indexes the repository: the job waits, its attempt not counted
    with store.writer("small").lock("index", wait=False):
        assert w.run_once() is True
        back = jobs.get(job.id)
        assert back.status == "queued" and back.attempts == 1 and back.worker is None
    time.sleep(2.1)  # the retry delay
    assert w.run_once() is True
    final = jobs.get(job.id)
    assert final.status == "done" and final.worker == "live" and final.attempts == 2
    # a job whose workers keep dying is marked failed after max_attempts; a missing root fails at once
    j2 = Jobs(ServiceDB(pg), max_attempts=2)
    lost = j2.enqueue("lost", str(root))
    assert j2.claim("a", 0.2).id == lost.id
    time.sleep(0.3)
    assert j2.claim("b", 0.2).id == lost.id
    time.sleep(0.3)
    assert j2.claim("c", 0.2) is None
    assert (j2.get(lost.id).status, j2.get(lost.id).error) == ("failed", "WorkerLost")
    gone = jobs.enqueue("gone", str(tmp_path / "nowhere"))
    assert w.run_once() is True
    assert (jobs.get(gone.id).status, jobs.get(gone.id).error, jobs.get(gone.id).attempts) == \
        ("failed", "FileNotFoundError", 1)
    store.close()


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
            hits = (await c.post("/search", json={"query": "helper step"}, headers=h)).json()
            assert hits["count"] > 0 and hits["results"][0]["repo"] == "local"
            metrics = (await c.get("/metrics", headers=h)).text
            assert 'repoctx_index_job_seconds_count{outcome="done"} 1.0' in metrics
            assert 'repoctx_index_jobs{status="done"} 1.0' in metrics

    try:
        asyncio.run(go())
    finally:
        svc.close()
    assert (tmp_path / "ix" / "service.sqlite").is_file()
