"""How fast procrastinate serves the service's index jobs (issue 41): enqueueing (a new job, a request a waiting job
absorbs), and from enqueue to a worker starting the job and finishing it, with two idle workers in this process
and one-file repositories (so the index work itself is small). A real PostgreSQL from tests/pg.py.

    python bench/queue_latency.py [--jobs 100]
"""
from __future__ import annotations

import argparse
import statistics
import sys
import tempfile
import threading
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path[:0] = [str(ROOT / "tests"), str(ROOT / "src")]


def pct(xs: list[float], p: float) -> float:
    xs = sorted(xs)
    return xs[min(len(xs) - 1, int(round(p / 100 * (len(xs) - 1))))]


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--jobs", type=int, default=100)
    args = ap.parse_args()

    from pg import fresh_database
    from repoctx import Settings
    from repoctx.service.config import ServiceSettings
    from repoctx.service.db import ServiceDB, migrate_postgres
    from repoctx.service.sources import Sources
    from repoctx.service.tasks import JobRuntime, PgJobs, WorkerRunner
    from repoctx.store.postgres import PostgresStore, migrate

    url = fresh_database()
    migrate(url)
    migrate_postgres(url)
    conf = ServiceSettings(job_lease=5, job_poll=1.0, git_poll=0, repo_roots=("/",))
    db = ServiceDB(url)
    jobs, sources = PgJobs(db, conf), Sources(db)
    base = Path(tempfile.mkdtemp())
    names = [f"r{i}" for i in range(args.jobs)]
    for n in names:
        (base / n).mkdir()
        (base / n / "m.py").write_text(f"def f_{n}():\n    return 1\n")
        sources.put_path(n, str(base / n))

    # enqueue with no worker: a new job each, then a repeat each (absorbed by the waiting job)
    t_new, t_dup = [], []
    for n in names:
        t0 = time.perf_counter()
        jobs.enqueue(n, str(base / n))
        t_new.append(time.perf_counter() - t0)
    for n in names:
        t0 = time.perf_counter()
        jobs.enqueue(n, str(base / n))
        t_dup.append(time.perf_counter() - t0)
    ServiceDB(url).q("DELETE FROM procrastinate_jobs")

    settings = Settings(database_url=url, embedder="none")
    runners = []
    for k in range(2):
        rt = JobRuntime(settings, conf, ServiceDB(url), f"w{k}", store=PostgresStore(url))
        runners.append(WorkerRunner(rt, lease=conf.job_lease, poll=conf.job_poll))
    threads = [threading.Thread(target=r.run, daemon=True) for r in runners]
    for t in threads:
        t.start()
    time.sleep(2.0)  # the workers are up and listening
    ids = {}
    t_start = time.time()
    for n in names:
        t0 = time.time()  # before the request: the database's clock stamps the start, on this machine
        ids[n] = (jobs.enqueue(n, str(base / n)).id, t0)
        time.sleep(0.05)  # one request every 50 ms: latency, not a backlog
    deadline = time.time() + 300
    while jobs.counts().get("done", 0) < len(names) and time.time() < deadline:
        time.sleep(0.2)
    wall = time.time() - t_start
    rows = dict((r[0], (r[1], r[2])) for r in db.q("SELECT job_id, started, finished FROM repoctx_job_runs"))
    to_start = [rows[i][0] - t for i, t in ids.values() if i in rows]
    to_done = [rows[i][1] - t for i, t in ids.values() if i in rows and rows[i][1]]
    for r in runners:
        r.stop()
    for t in threads:
        t.join(30)

    print(f"| measure ({len(names)} jobs, PostgreSQL 18, 2 workers) | p50 ms | p95 ms |")
    print("|---|---|---|")
    print(f"| enqueue, a new job | {1000 * statistics.median(t_new):.1f} | {1000 * pct(t_new, 95):.1f} |")
    print(f"| enqueue, absorbed by a waiting job | {1000 * statistics.median(t_dup):.1f} | {1000 * pct(t_dup, 95):.1f} |")
    print(f"| enqueue → a worker starts it | {1000 * statistics.median(to_start):.1f} | {1000 * pct(to_start, 95):.1f} |")
    print(f"| enqueue → indexed (1-file repository) | {1000 * statistics.median(to_done):.1f} | "
          f"{1000 * pct(to_done, 95):.1f} |")
    print(f"\n{len(to_done)}/{len(names)} done in {wall:.1f} s")


if __name__ == "__main__":
    main()
