"""Acceptance of issue 41 on a real PostgreSQL: two `repoctx serve` processes and two `repoctx worker` processes
share one database; three repositories registered by URL (local bare repositories) follow pushes announced by
signed webhooks sent to either API; every search through either API sees each new commit within 30 s; no job runs
twice (the job records); a worker killed with SIGKILL in the middle of a job leaves it to the other worker, which
finishes it; forged, unsigned, stale and replayed deliveries change nothing; and a credential, whether placed in a
repository URL or configured on the server, appears in no log, API answer, job error or database row."""
from __future__ import annotations

import json
import os
import signal
import socket
import subprocess
import sys
import time
import uuid
from pathlib import Path

import httpx
import psycopg

from repoctx.service.auth import KeyStore
from repoctx.service.db import ServiceDB
from repoctx.service.hooks import sign_generic, sign_github

from gitserver import Remote
from test_service_support import migrate_all, wait_for

SECRET = "acceptance-hook-secret-41"
URL_TOKEN = "ghp_URLCANARY41zzzzzzzzzzzzzzzz"  # typed into a repository URL by a careless admin
CONF_TOKEN = "glpat-CONFCANARY41yyyyyyyyyyyy"  # a configured credential git is handed (and that fails)
VISIBLE_WITHIN = 30.0


def _port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _files(repo: str, n: int, version: int = 0) -> dict[str, str]:
    return {f"pkg/{repo}_mod{i}.py": f"def {repo}_step_{i}(x):\n    \"\"\"Step {i} of {repo}, version {version}.\"\"\"\n"
                                     f"    return x + {i} + {version}\n\n\nclass {repo.title()}Part{i}:\n"
                                     f"    def run(self):\n        return {repo}_step_{i}({version})\n"
            for i in range(n)}


class Proc:
    def __init__(self, name: str, args: list[str], env: dict, logs: Path):
        self.name = name
        self.log = logs / f"{name}.log"
        self.file = open(self.log, "wb")
        self.p = subprocess.Popen([sys.executable, "-m", "repoctx.cli.service", *args], env=env, stdout=self.file,
                                  stderr=subprocess.STDOUT, cwd=str(logs), start_new_session=True)

    def kill9(self) -> None:
        os.kill(self.p.pid, signal.SIGKILL)
        self.p.wait(10)

    def stop(self) -> None:
        if self.p.poll() is None:
            self.p.send_signal(signal.SIGTERM)
            try:
                self.p.wait(15)
            except subprocess.TimeoutExpired:
                self.p.kill()
                self.p.wait(10)
        self.file.close()


class Cluster:
    def __init__(self, url: str, tmp: Path):
        self.url, self.tmp = url, tmp
        self.logs = tmp / "logs"
        self.logs.mkdir()
        self.answers: list[str] = []  # every API answer's text, grepped at the end
        base = {k: v for k, v in os.environ.items() if not k.startswith("REPOCTX_")}
        creds = json.dumps({"ci": {"username": "ci-bot", "password": CONF_TOKEN}})
        self.env = {**base, "REPOCTX_DATABASE_URL": url, "REPOCTX_EMBEDDER": "none",
                    "REPOCTX_REPO_ROOTS": str(tmp / "remotes"), "REPOCTX_HOOK_SECRET": SECRET,
                    "REPOCTX_GIT_CREDENTIALS": creds, "REPOCTX_GIT_POLL": "0", "REPOCTX_RATE_LIMIT": "",
                    "REPOCTX_JOB_LEASE": "2", "REPOCTX_JOB_POLL": "0.2", "REPOCTX_GIT_TIMEOUT": "30",
                    "REPOCTX_CACHE": str(tmp / "cache"), "REPOCTX_KEY_CACHE": "5", "PYTHONUNBUFFERED": "1"}
        self.procs: list[Proc] = []
        self.apis: list[str] = []
        self.workers: dict[str, Proc] = {}

    def serve(self, n: int) -> None:
        for i in range(n):
            port = _port()
            self.procs.append(Proc(f"api{i}", ["serve", "--host", "127.0.0.1", "--port", str(port), "--log-level",
                                               "info"], self.env, self.logs))
            self.apis.append(f"http://127.0.0.1:{port}")

    def worker(self, name: str) -> Proc:
        env = {**self.env, "REPOCTX_GIT_CACHE": str(self.tmp / f"gitcache-{name}")}  # one machine each
        proc = Proc(name, ["worker", "--id", name], env, self.logs)
        self.procs.append(proc)
        self.workers[name] = proc
        return proc

    def wait_healthy(self, timeout: float = 60) -> None:
        deadline = time.time() + timeout
        for api in self.apis:
            while True:
                try:
                    if httpx.head(api + "/health", timeout=5).status_code == 200:
                        break
                except httpx.HTTPError:
                    pass
                assert time.time() < deadline, [p.log.read_text()[-2000:] for p in self.procs]
                time.sleep(0.2)

    def call(self, method: str, api: int, path: str, key: str | None = None, **kw) -> httpx.Response:
        headers = dict(kw.pop("headers", {}))
        if key:
            headers["Authorization"] = f"Bearer {key}"
        r = httpx.request(method, self.apis[api] + path, headers=headers, timeout=30, **kw)
        self.answers.append(r.text)
        return r

    def close(self) -> None:
        for p in self.procs:
            p.stop()


def _hook(remote: Remote, after: str, secret: str = SECRET, delivery: str | None = None):
    body = json.dumps({"ref": "refs/heads/main", "after": after,
                       "repository": {"full_name": f"acme/{remote.bare.stem}", "clone_url": str(remote.bare)}})
    body = body.encode()
    return body, {"X-GitHub-Event": "push", "X-GitHub-Delivery": delivery or str(uuid.uuid4()),
                  "X-Hub-Signature-256": sign_github(secret, body), "content-type": "application/json"}


def _sees(c: Cluster, key: str, api: int, repo: str, symbol: str) -> bool:
    r = c.call("POST", api, "/search", key, json={"query": symbol, "repos": [repo], "mode": "standard", "k": 5,
                                                     "detail": "signatures"})
    return r.status_code == 200 and any(symbol in h["citation"] for h in r.json()["results"])


def _job_of(c: Cluster, key: str, repo: str) -> dict:
    return c.call("GET", 0, f"/repos/{repo}", key).json()["job"] or {}


def _dump(url: str) -> str:
    """Every row of every table of the database, as text."""
    out = []
    with psycopg.connect(url) as conn:
        tables = [r[0] for r in conn.execute("SELECT quote_ident(table_name) FROM information_schema.tables "
                                             "WHERE table_schema = 'public' AND table_type = 'BASE TABLE'")]
        for t in tables:
            out.extend(str(r[0]) for r in conn.execute(f"SELECT t::text FROM {t} t"))
    return "\n".join(out)


def test_two_apis_two_workers_three_repositories_follow_their_pushes(pg_url, tmp_path):
    t_start = time.monotonic()
    migrate_all(pg_url)
    db = ServiceDB(pg_url)
    ks = KeyStore(db, cache_seconds=0)
    key = ks.add_key("ops", "admin")[1]
    remotes = {"alpha": Remote(tmp_path / "remotes", "alpha", _files("alpha", 6)),
               "beta": Remote(tmp_path / "remotes", "beta", _files("beta", 6)),
               "gamma": Remote(tmp_path / "remotes", "gamma", _files("gamma", 300))}
    c = Cluster(pg_url, tmp_path)
    try:
        c.serve(2)
        c.worker("wA")
        c.worker("wB")
        c.wait_healthy()

        # a credential in the URL is refused without being repeated; a configured one is used by name only
        r = c.call("POST", 0, "/repos", key, json={"name": "leaky", "branch": "main",
                                                   "url": f"https://ci-bot:{URL_TOKEN}@127.0.0.1:9/acme/leaky.git"})
        assert r.status_code == 400 and "credential" in r.json()["detail"], r.text
        r = c.call("POST", 1, "/repos", key, json={"name": "closed", "branch": "main", "credential": "ci",
                                                   "url": "https://127.0.0.1:9/acme/closed.git"})
        assert r.status_code == 202, r.text

        # three repositories by URL, through either API; each is indexed at its branch head
        for i, (name, remote) in enumerate(remotes.items()):
            r = c.call("POST", i % 2, "/repos", key, json={"name": name, "url": str(remote.bare), "branch": "main"})
            assert r.status_code == 202, r.text
        for name, remote in remotes.items():
            st = wait_for(lambda: (s := c.call("GET", 1, f"/repos/{name}", key).json())["job"]["status"]
                       in ("done", "failed") and s, 60, 0.1)
            assert st and st["job"]["status"] == "done" and st["commits"]["indexed"] == remote.head(), st

        # pushes announced by signed hooks to either API: both APIs see every new commit within 30 s
        seen_in: dict[str, float] = {}
        for i, (name, remote) in enumerate(remotes.items()):
            symbol = f"{name}_pushed_change_{i}"
            head = remote.commit({f"pkg/{name}_new.py": f"def {symbol}(x):\n    return x\n"}, f"push {i}")
            body, headers = _hook(remote, head)
            t0 = time.monotonic()
            r = c.call("POST", i % 2, "/hooks/github", content=body, headers=headers)
            assert r.status_code == 202 and [q["repo"] for q in r.json()["queued"]] == [name], r.text
            assert wait_for(lambda: all(_sees(c, key, api, name, symbol) for api in (0, 1)), VISIBLE_WITHIN, 0.2), \
                (name, _job_of(c, key, name))
            seen_in[name] = time.monotonic() - t0
            st = c.call("GET", (i + 1) % 2, f"/repos/{name}", key).json()
            assert st["commits"]["indexed"] == st["commits"]["head"] == head, st
            assert st["commits"]["lag"]["behind"] is False
        assert max(seen_in.values()) <= VISIBLE_WITHIN, seen_in

        # each worker mined its checkout's git history (a worktree of a partial clone) into the store, where both
        # APIs' file-level searches read it: its head is the indexed commit
        def kept_heads() -> dict[str, str]:
            with psycopg.connect(pg_url) as conn:
                rows = conn.execute("SELECT repo, stamp FROM repoctx_history").fetchall()
            return {repo: json.loads(stamp)["head"] for repo, stamp in rows}

        assert wait_for(lambda: all(kept_heads().get(n) == r.head() for n, r in remotes.items()), 30, 0.2), (
            kept_heads())

        # kill -9 of the worker in the middle of a long job: the other worker finishes it
        gamma = remotes["gamma"]
        more = {f"more/{k}": v for k, v in _files("gamma", 3000, version=1).items()}  # a job long enough to kill
        head = gamma.commit({**more, "pkg/gamma_after_kill.py": "def gamma_after_kill_marker():\n    return 1\n"},
                            "add a lot")
        body, headers = _hook(gamma, head)
        assert c.call("POST", 0, "/hooks/github", content=body, headers=headers).status_code == 202
        running = wait_for(lambda: (j := _job_of(c, key, "gamma")).get("status") == "running" and
                        (j.get("progress") or {}).get("event") not in (None, "claimed") and j, 60, 0.05)
        assert running, _job_of(c, key, "gamma")
        doomed = running["worker"]
        survivor = ({"wA", "wB"} - {doomed}).pop()
        c.workers[doomed].kill9()
        t_kill = time.monotonic()
        done = wait_for(lambda: (j := _job_of(c, key, "gamma")).get("status") in ("done", "failed") and j, 60, 0.2)
        assert done and done["status"] == "done" and done["id"] == running["id"], done
        assert done["worker"] == survivor and done["attempts"] == 2, done
        assert done["result"]["commit"] == head and done["result"]["added"] == 3001, done["result"]
        assert wait_for(lambda: all(_sees(c, key, api, "gamma", "gamma_after_kill_marker") for api in (0, 1)), 10, 0.1)
        st = c.call("GET", 1, "/repos/gamma", key).json()
        assert st["commits"]["indexed"] == head, st
        recovered_in = time.monotonic() - t_kill
        c.worker("wC")  # the team restarts a worker

        # forged, unsigned, stale and replayed deliveries change nothing
        with psycopg.connect(pg_url) as conn:
            before = conn.execute("SELECT count(*), max(id) FROM procrastinate_jobs").fetchone()
            deliveries = conn.execute("SELECT count(*) FROM repoctx_hook_deliveries").fetchone()[0]
        heads = {n: c.call("GET", 0, f"/repos/{n}", key).json()["commits"]["head"] for n in remotes}
        alpha = remotes["alpha"]
        later = alpha.commit({"pkg/alpha_forged.py": "def alpha_forged_change():\n    return 0\n"}, "unannounced")
        forged_body, forged = _hook(alpha, later, secret="a-guess")
        assert c.call("POST", 0, "/hooks/github", content=forged_body, headers=forged).status_code == 403
        del forged["X-Hub-Signature-256"]
        assert c.call("POST", 1, "/hooks/github", content=forged_body, headers=forged).status_code == 401
        replay_body, replay = body, headers  # the gamma delivery above, sent again to both APIs
        for api in (0, 1):
            r = c.call("POST", api, "/hooks/github", content=replay_body, headers=replay)
            assert r.status_code == 403 and r.json()["error"] == "replayed", r.text
        gbody = json.dumps({"url": str(alpha.bare), "branch": "main", "after": later}).encode()
        stamp = str(int(time.time()) - 3600)
        r = c.call("POST", 1, "/hooks/generic", content=gbody, headers={
            "X-Repoctx-Timestamp": stamp, "X-Repoctx-Signature": sign_generic(SECRET, stamp, gbody),
            "X-Repoctx-Delivery": "late-1"})
        assert r.status_code == 403 and r.json()["error"] == "stale"
        r = c.call("POST", 0, "/hooks/gitlab", content=gbody, headers={"X-Gitlab-Token": "a-guess",
                                                                          "X-Gitlab-Event-UUID": "x1"})
        assert r.status_code == 403
        with psycopg.connect(pg_url) as conn:
            assert conn.execute("SELECT count(*), max(id) FROM procrastinate_jobs").fetchone() == before
            assert conn.execute("SELECT count(*) FROM repoctx_hook_deliveries").fetchone()[0] == deliveries
        assert {n: c.call("GET", 1, f"/repos/{n}", key).json()["commits"]["head"] for n in remotes} == heads
        assert not _sees(c, key, 0, "alpha", "alpha_forged_change")

        # the job records: every index job ended; no job ran twice, and no repository indexed twice at once
        closed = wait_for(lambda: (j := _job_of(c, key, "closed")).get("status") == "failed" and j, 30, 0.2)
        assert closed and closed["error"] == "GitError" and closed["attempts"] == 3, closed  # retried, backing off
        jobs = c.call("GET", 1, "/jobs?limit=500", key).json()["jobs"]
        assert jobs and all(j["status"] in ("done", "failed") for j in jobs), jobs
        with psycopg.connect(pg_url) as conn:
            rows = conn.execute("SELECT job_id, repo, worker, started, finished, status FROM repoctx_job_runs "
                                "ORDER BY repo, started").fetchall()
            assert conn.execute("SELECT count(*) FROM procrastinate_jobs WHERE status IN ('todo', 'doing')")\
                .fetchone()[0] == 0
        done_runs: dict[int, int] = {}
        for job_id, repo, worker, started, finished, status in rows:
            assert finished is not None and status in ("done", "failed", "lost"), (job_id, repo, status)
            done_runs[job_id] = done_runs.get(job_id, 0) + (status == "done")
        assert all(n <= 1 for n in done_runs.values()), done_runs
        for repo in remotes:
            spans = [(r[3], r[4]) for r in rows if r[1] == repo]
            assert all(a[1] <= b[0] for a, b in zip(spans, spans[1:])), (repo, spans)
        gamma_runs = [(r[2], r[5]) for r in rows if r[0] == running["id"]]
        assert gamma_runs == [(doomed, "lost"), (survivor, "done")], gamma_runs
    finally:
        c.close()
        db.close()

    # no credential anywhere: logs, answers, job errors (in the answers and the database), the database
    logs = "\n".join(p.log.read_text(errors="replace") for p in c.procs)
    assert "job" in logs and "GET /repos" in logs  # the logs were captured
    dump = _dump(pg_url)
    for token in (URL_TOKEN, CONF_TOKEN):
        assert token not in logs
        assert not any(token in a for a in c.answers)
        assert token not in dump
    assert "127.0.0.1:9" in dump  # the dump did read the sources (the URL, without its credential)
    elapsed = time.monotonic() - t_start
    print(f"\nvisible after push (s): {({k: round(v, 1) for k, v in seen_in.items()})}; "
          f"kill -9 to done: {recovered_in:.1f} s; whole test {elapsed:.1f} s")
    assert elapsed < 90, elapsed
