"""Repositories registered by git URL and branch (issue 41), on the embedded service (SQLite, jobs in-process): a
branch is fetched into a shared clone and indexed at the fetched commit; pushes announced by signed webhooks are
indexed; forged, unsigned, stale and replayed deliveries change nothing; credentials come from the server's
configuration by name and never show in answers, job records, logs or the database."""
from __future__ import annotations

import asyncio
import json
import logging
import os
import sqlite3
import time
import uuid
from pathlib import Path

import httpx
import pytest

from repoctx import Settings
from repoctx.service.app import create_app
from repoctx.service.config import ServiceSettings
from repoctx.service.git import GitUrlError, parse_git_url, url_key
from repoctx.service.hooks import sign_generic, sign_github

from gitserver import HttpsGitServer, Remote

HOOK_SECRET = "hook-secret-for-tests-7f3a"
TOKEN = "ghp_CANARYtoken0000secret9f2b"


def _files(tag: str, n: int = 3) -> dict[str, str]:
    return {f"pkg/{tag}_{i}.py": f"def {tag}_handler_{i}(x):\n    \"\"\"Handle {tag} {i}.\"\"\"\n    return x + {i}\n"
            for i in range(n)}


def test_urls_the_service_takes_and_refuses(tmp_path):
    roots = (str(tmp_path),)
    ok = {"https://github.com/acme/web.git": ("https", "github.com/acme/web"),
          "https://GitHub.com:443/acme/web/": ("https", "github.com/acme/web"),
          "ssh://git@github.com/acme/web.git": ("ssh", "github.com/acme/web"),
          "git@github.com:acme/web.git": ("ssh", "github.com/acme/web"),
          str(tmp_path / "web.git"): ("local", f"local:{tmp_path.resolve() / 'web.git'}"),
          f"file://{tmp_path}/web.git": ("local", f"local:{tmp_path.resolve() / 'web.git'}")}
    for url, (kind, key) in ok.items():
        u = parse_git_url(url, roots)
        assert (u.kind, u.key) == (kind, key), url
    assert url_key("https://github.com/acme/web") == url_key("git@github.com:acme/web.git")
    refused = ["http://github.com/acme/web.git", "git://github.com/acme/web.git", "ext::sh -c touch% /tmp/x",
               "-uhttps://x/y", "https://github.com", "https://github.com/a b", "https://x/y?z=1", "fd::3",
               "/etc/passwd-repo", "file://host/srv/x.git", "relative/path.git", "https://x/y\nz", "host::path"]
    for url in refused:
        with pytest.raises(GitUrlError):
            parse_git_url(url, roots)
    for url in (f"https://bot:{TOKEN}@github.com/acme/web.git", f"https://{TOKEN}@github.com/acme/web.git",
                f"ssh://git:{TOKEN}@github.com/acme/web.git"):
        with pytest.raises(GitUrlError) as e:
            parse_git_url(url, roots)
        assert "credential" in str(e.value) and TOKEN not in str(e.value)
    with pytest.raises(GitUrlError):  # no REPOCTX_REPO_ROOTS: no local repositories
        parse_git_url(str(tmp_path / "web.git"), ())


def test_credentials_file_entries_are_read_by_name(tmp_path):
    from repoctx.service.git import CredentialError, Credentials

    f = tmp_path / "creds.toml"
    f.write_text('[gh]\ntoken_env = "GH_TOKEN_FOR_TEST"\nurls = ["https://github.com/acme/"]\n'
                 '[deploy]\nssh_key = "/keys/deploy"\nhook_secret = "per-entry-secret"\n')
    creds = Credentials(str(f), env={})
    assert creds.names() == ["deploy", "gh"] and creds.get("deploy").ssh_key == "/keys/deploy"
    with pytest.raises(CredentialError) as e:  # its variable is not set here: that entry only is unusable
        creds.get("gh")
    assert "GH_TOKEN_FOR_TEST" in str(e.value)
    creds = Credentials(str(f), env={"GH_TOKEN_FOR_TEST": TOKEN})
    gh = creds.for_url("https://github.com/acme/web.git", None)
    assert gh.name == "gh" and gh.username == "x-access-token" and gh.password == TOKEN
    assert TOKEN not in repr(gh) and creds.for_url("https://gitlab.com/x/y.git", None) is None
    f.write_text('[gh]\npassword = "x"\nbogus = 1\n')
    with pytest.raises(CredentialError) as e:
        creds.get("gh")
    assert "bogus" in str(e.value)
    f.write_text(f'[gh\npassword = "{TOKEN}"\n')
    with pytest.raises(CredentialError) as e:  # a parse error names no line of the file: it may hold a secret
        creds.names()
    assert TOKEN not in str(e.value)


def test_git_runs_closed_and_answers_a_password_prompt_for_its_own_host_only(tmp_path):
    import subprocess

    from repoctx.service.git import Credential, GitCache

    cache = GitCache(tmp_path / "cache")
    u = parse_git_url("https://git.acme.dev:8443/acme/web.git")
    env = cache.env(u, Credential("ci", "bot", TOKEN))
    assert env["GIT_TERMINAL_PROMPT"] == "0" and env["GIT_CONFIG_GLOBAL"] == os.devnull
    config = {env[f"GIT_CONFIG_KEY_{i}"]: env[f"GIT_CONFIG_VALUE_{i}"] for i in range(int(env["GIT_CONFIG_COUNT"]))}
    assert config["core.hooksPath"] == os.devnull and config["credential.helper"] == ""
    assert config["protocol.allow"] == "never" and config["protocol.file.allow"] == "never"
    assert not any(k.startswith("REPOCTX_") and k not in ("REPOCTX_GIT_HOST", "REPOCTX_GIT_USERNAME",
                                                          "REPOCTX_GIT_PASSWORD") for k in env)

    def ask(prompt: str) -> str:
        return subprocess.run([env["GIT_ASKPASS"], prompt], env=env, capture_output=True, text=True).stdout.strip()

    assert ask("Username for 'https://git.acme.dev:8443': ") == "bot"
    assert ask("Password for 'https://bot@git.acme.dev:8443': ") == TOKEN
    assert ask("Password for 'https://bot@evil.example': ") == ""  # a redirect elsewhere gets nothing
    assert ask("Password for 'https://bot@git.acme.dev': ") == ""  # nor another port of the host
    ssh = cache.env(parse_git_url("git@gitlab.acme.dev:ops/infra.git"), Credential("d", ssh_key="/keys/deploy key"))
    assert "BatchMode=yes" in ssh["GIT_SSH_COMMAND"] and "-i '/keys/deploy key'" in ssh["GIT_SSH_COMMAND"]
    assert "REPOCTX_GIT_PASSWORD" not in ssh


def test_webhooks_are_rate_limited_by_address(tmp_path):
    a = App(tmp_path, rate_limit="3/minute")

    async def go():
        async with a.client() as c:
            codes = [(await c.post("/hooks/github", content=b"{}", headers={"X-Hub-Signature-256": "sha256=00"}))
                     .status_code for _ in range(5)]
            assert codes == [403, 403, 403, 429, 429], codes

    a.run(go)


class App:
    def __init__(self, tmp_path: Path, **conf):
        conf = {"job_poll": 0.05, "key_cache_seconds": 0, "repo_roots": (str(tmp_path / "remotes"),),
                "git_cache": str(tmp_path / "gitcache"), "hook_secret": HOOK_SECRET, "git_poll": 0,
                "rate_limit": "", **conf}
        self.app = create_app(Settings(index_dir=tmp_path / "ix", embedder="none"), service=ServiceSettings(**conf))
        self.svc = self.app.state.service
        _, self.key = self.svc.keys.add_key("root", "admin")
        self.svc.keys.add_role("reader", repo="*")
        _, self.reader = self.svc.keys.add_key("reader1", "reader")
        self.h = {"Authorization": f"Bearer {self.key}"}

    def client(self) -> httpx.AsyncClient:
        return httpx.AsyncClient(transport=httpx.ASGITransport(app=self.app), base_url="http://t", timeout=60)

    async def wait_done(self, c, name: str, after_job: int = 0, timeout: float = 30) -> dict:
        deadline = time.time() + timeout
        while True:
            st = (await c.get(f"/repos/{name}", headers=self.h)).json()
            job = st.get("job") or {}
            if job.get("id", 0) > after_job and job.get("status") in ("done", "failed", "cancelled"):
                return st
            assert time.time() < deadline, st
            await asyncio.sleep(0.05)

    async def search(self, c, query: str, repo: str) -> list[str]:
        r = await c.post("/search", json={"query": query, "repos": [repo], "mode": "standard",
                                            "detail": "signatures"}, headers=self.h)
        return [h["citation"] for h in r.json()["results"]]

    def run(self, go) -> None:
        """Runs the coroutine function `go` to its end, then closes the service whatever happened."""
        try:
            asyncio.run(go())
        finally:
            self.close()

    def close(self):
        self.svc.close()


def github_hook(remote: Remote, branch: str, after: str, secret: str = HOOK_SECRET, delivery: str | None = None):
    body = json.dumps({"ref": f"refs/heads/{branch}", "after": after,
                       "repository": {"full_name": "acme/web", "clone_url": str(remote.bare)}}).encode()
    return body, {"X-GitHub-Event": "push", "X-GitHub-Delivery": delivery or str(uuid.uuid4()),
                  "X-Hub-Signature-256": sign_github(secret, body), "content-type": "application/json"}


def test_branches_by_url_share_a_clone_and_follow_signed_pushes(tmp_path):
    remote = Remote(tmp_path / "remotes", "web", _files("alpha"), branches=("main", "dev"))
    a = App(tmp_path)

    async def go():
        async with a.client() as c:
            r = await c.post("/repos", json={"name": "web", "url": str(remote.bare), "branch": "main"}, headers=a.h)
            assert r.status_code == 202, r.text
            assert r.json()["source"] == {"kind": "git", "branch": "main", "url": str(remote.bare.resolve()),
                                          "credential": None}
            r = await c.post("/repos", json={"name": "web-dev", "url": str(remote.bare), "branch": "dev"}, headers=a.h)
            assert r.status_code == 202, r.text
            st = await a.wait_done(c, "web")
            dev = await a.wait_done(c, "web-dev")
            assert st["job"]["status"] == "done" and dev["job"]["status"] == "done", (st, dev)
            head = remote.head("main")
            assert st["commits"]["indexed"] == st["commits"]["head"] == head
            assert st["commits"]["lag"] == {"behind": False, "commits": 0, "seconds": 0.0}
            assert st["job"]["result"]["commit"] == head and st["counts"]["files"] == 3
            clones = list((tmp_path / "gitcache" / "clones").glob("*.git"))
            assert len(clones) == 1  # two branches, one clone
            assert {p.name for p in (tmp_path / "gitcache" / "worktrees").iterdir()} == {"web", "web-dev"}
            # a key that is not an admin sees the branch and commits, not the URL
            seen = (await c.get("/repos/web", headers={"Authorization": f"Bearer {a.reader}"})).json()
            assert seen["source"] == {"kind": "git", "branch": "main"} and "root" not in seen
            assert seen["commits"]["indexed"] == head
            # same name, another branch or URL: 409; the same again: a reindex
            r = await c.post("/repos", json={"name": "web", "url": str(remote.bare), "branch": "dev"}, headers=a.h)
            assert r.status_code == 409
            r = await c.post("/repos", json={"name": "web", "path": str(remote.work)}, headers=a.h)
            assert r.status_code == 409

            # a push to main announced by a signed GitHub hook: only the main entry is reindexed
            new = remote.commit({"pkg/beta.py": "def beta_settlement_window(x):\n    return x * 2\n"}, "beta")
            jobs_before = len((await c.get("/jobs", headers=a.h)).json()["jobs"])
            body, headers = github_hook(remote, "main", new)
            r = await c.post("/hooks/github", content=body, headers=headers)
            assert r.status_code == 202 and [q["repo"] for q in r.json()["queued"]] == ["web"], r.text
            st = await a.wait_done(c, "web", after_job=st["job"]["id"])
            assert st["job"]["status"] == "done" and st["commits"]["indexed"] == new
            assert st["job"]["result"]["added"] == 1 and st["job"]["result"]["unchanged"] == 3  # incremental
            assert any("beta_settlement_window" in x for x in await a.search(c, "beta settlement window", "web"))
            assert not any("beta_settlement" in x for x in await a.search(c, "beta settlement window", "web-dev"))
            jobs = (await c.get("/jobs", headers=a.h)).json()["jobs"]
            assert len(jobs) == jobs_before + 1

            # replayed, forged, unsigned, stale: refused, nothing queued
            r = await c.post("/hooks/github", content=body, headers=headers)
            assert r.status_code == 403 and r.json()["error"] == "replayed"
            newer = remote.commit({"pkg/gamma.py": "def gamma_rollover():\n    return 3\n"}, "gamma")
            body, headers = github_hook(remote, "main", newer, secret="not-the-secret")
            assert (await c.post("/hooks/github", content=body, headers=headers)).status_code == 403
            del headers["X-Hub-Signature-256"]
            assert (await c.post("/hooks/github", content=body, headers=headers)).status_code == 401
            stamp = str(int(time.time()) - 600)
            gbody = json.dumps({"url": str(remote.bare), "branch": "main"}).encode()
            stale = {"X-Repoctx-Timestamp": stamp, "X-Repoctx-Signature": sign_generic(HOOK_SECRET, stamp, gbody),
                     "X-Repoctx-Delivery": "d-stale"}
            r = await c.post("/hooks/generic", content=gbody, headers=stale)
            assert r.status_code == 403 and r.json()["error"] == "stale"
            r = await c.post("/hooks/gitlab", content=gbody, headers={"X-Gitlab-Token": "guess",
                                                                       "X-Gitlab-Event-UUID": "g1"})
            assert r.status_code == 403
            assert len((await c.get("/jobs", headers=a.h)).json()["jobs"]) == len(jobs)  # the queue untouched
            st = (await c.get("/repos/web", headers=a.h)).json()
            assert st["commits"]["head"] == new  # a refused delivery does not move the head either

            # a GitLab push (token), then a generic one: each indexed
            gl = json.dumps({"object_kind": "push", "ref": "refs/heads/main", "after": newer, "checkout_sha": newer,
                             "project": {"git_http_url": str(remote.bare)}}).encode()
            r = await c.post("/hooks/gitlab", content=gl, headers={"X-Gitlab-Token": HOOK_SECRET,
                                                                    "X-Gitlab-Event": "Push Hook",
                                                                    "X-Gitlab-Event-UUID": str(uuid.uuid4())})
            assert r.status_code == 202 and [q["repo"] for q in r.json()["queued"]] == ["web"], r.text
            st = await a.wait_done(c, "web", after_job=st["job"]["id"])
            assert st["commits"]["indexed"] == newer
            last = remote.commit({"pkg/delta.py": "def delta_reconcile():\n    return 4\n"}, "delta", branch="dev")
            stamp = str(int(time.time()))
            gbody = json.dumps({"url": str(remote.bare), "branch": "dev", "after": last}).encode()
            r = await c.post("/hooks/generic", content=gbody, headers={
                "X-Repoctx-Timestamp": stamp, "X-Repoctx-Signature": sign_generic(HOOK_SECRET, stamp, gbody),
                "X-Repoctx-Delivery": "d-1"})
            assert r.status_code == 202 and [q["repo"] for q in r.json()["queued"]] == ["web-dev"], r.text
            dev = await a.wait_done(c, "web-dev", after_job=dev["job"]["id"])
            assert dev["commits"]["indexed"] == last
            assert any("delta_reconcile" in x for x in await a.search(c, "delta reconcile", "web-dev"))

    a.run(go)


def test_a_burst_of_pushes_is_one_job(tmp_path):
    remote = Remote(tmp_path / "remotes", "api", _files("api"))
    a = App(tmp_path)
    a.svc.workers.close()  # no worker: the jobs stay queued while the hooks arrive

    async def go():
        async with a.client() as c:
            r = await c.post("/repos", json={"name": "api", "url": str(remote.bare), "branch": "main"}, headers=a.h)
            first = r.json()["job"]["id"]
            for i in range(5):
                body, headers = github_hook(remote, "main", remote.commit({f"pkg/n{i}.py": f"X = {i}\n"}, f"c{i}"))
                r = await c.post("/hooks/github", content=body, headers=headers)
                assert r.status_code == 202 and r.json()["queued"][0]["job"] == first
            jobs = (await c.get("/jobs", headers=a.h)).json()["jobs"]
            assert [j["id"] for j in jobs] == [first] and jobs[0]["status"] == "queued"
            st = (await c.get("/repos/api", headers=a.h)).json()
            assert st["commits"]["head"] == remote.head() and st["commits"]["lag"]["behind"] is True
            # cancel it
            r = await c.post(f"/jobs/{first}/cancel", headers=a.h)
            assert r.status_code == 202 and r.json()["status"] == "cancelled"
            assert (await c.post(f"/jobs/{first}/cancel", headers=a.h)).status_code == 409
            assert (await c.get("/jobs", headers={"Authorization": f"Bearer {a.reader}"})).status_code == 403

    a.run(go)


def test_the_embedded_service_polls_when_no_hook_comes(tmp_path):
    remote = Remote(tmp_path / "remotes", "quiet", _files("quiet"))
    a = App(tmp_path, git_poll=0.5)

    async def go():
        async with a.client() as c:
            r = await c.post("/repos", json={"name": "quiet", "url": str(remote.bare), "branch": "main"}, headers=a.h)
            assert r.status_code == 202, r.text
            st = await a.wait_done(c, "quiet")
            assert st["job"]["status"] == "done"
            head = remote.commit({"pkg/late.py": "def arrived_without_a_hook():\n    return 1\n"}, "late")
            deadline = time.time() + 20
            while (st := (await c.get("/repos/quiet", headers=a.h)).json())["commits"]["indexed"] != head:
                assert time.time() < deadline, st
                await asyncio.sleep(0.1)
            assert any("arrived_without_a_hook" in x for x in await a.search(c, "arrived without a hook", "quiet"))

    a.run(go)


def test_credentials_come_by_name_and_never_show(tmp_path, monkeypatch, caplog):
    caplog.set_level(logging.DEBUG)
    remote = Remote(tmp_path / "remotes", "secret-repo", _files("vault"))
    server = HttpsGitServer(tmp_path / "remotes", "bot", TOKEN, tmp_path)
    monkeypatch.setenv("GIT_SSL_CAINFO", str(server.cert))
    monkeypatch.setenv("CI_GIT_TOKEN", TOKEN)
    creds = json.dumps({"ci": {"username": "bot", "password_env": "CI_GIT_TOKEN"},
                        "wrong": {"username": "bot", "password": "not-the-token-1234"}})
    a = App(tmp_path, git_credentials=creds)
    url = server.url("secret-repo")
    answers: list[str] = []

    async def go():
        async with a.client() as c:
            async def post(body):
                r = await c.post("/repos", json=body, headers=a.h)
                answers.append(r.text)
                return r
            # a URL with the token in it is refused, and the answer does not repeat it
            for bad in (url.replace("https://", f"https://bot:{TOKEN}@"), url.replace("https://", f"https://{TOKEN}@")):
                r = await post({"name": "vault", "url": bad, "branch": "main"})
                assert r.status_code == 400 and "credential" in r.json()["detail"], r.text
            r = await post({"name": "vault", "url": url, "branch": "main", "credential": "nope"})
            assert r.status_code == 400 and "nope" in r.json()["detail"]
            # no credential, a wrong one: the job fails with git's reason, scrubbed
            r = await post({"name": "anon", "url": url, "branch": "main"})
            st = await a.wait_done(c, "anon")
            answers.append(json.dumps(st))
            assert st["job"]["status"] == "failed" and st["job"]["error"] == "GitError", st
            r = await post({"name": "wrong", "url": url, "branch": "main", "credential": "wrong"})
            st = await a.wait_done(c, "wrong")
            answers.append(json.dumps(st))
            assert st["job"]["status"] == "failed" and "Authentication failed" in st["job"]["detail"], st
            assert st["job"]["attempts"] == 1  # refused by the remote: not retried
            # the named credential works
            r = await post({"name": "vault", "url": url, "branch": "main", "credential": "ci"})
            assert r.status_code == 202 and r.json()["source"]["credential"] == "ci"
            st = await a.wait_done(c, "vault")
            answers.append(json.dumps(st))
            assert st["job"]["status"] == "done" and st["commits"]["indexed"] == remote.head(), st
            assert any("vault_handler_1" in x for x in await a.search(c, "vault handler", "vault"))
            answers.append((await c.get("/jobs", headers=a.h)).text)
            answers.append((await c.get("/repos", headers=a.h)).text)

    try:
        asyncio.run(go())
    finally:
        a.close()
        server.close()
    assert any(h.startswith("Basic ") for h in server.auth_headers)  # the credential did reach the remote
    for text in answers:
        assert TOKEN not in text
    assert TOKEN not in caplog.text and "not-the-token-1234" not in caplog.text
    for db in (tmp_path / "ix").glob("*.sqlite"):
        conn = sqlite3.connect(db)
        dump = "\n".join(conn.iterdump())
        conn.close()
        assert TOKEN not in dump and "not-the-token-1234" not in dump, db
    for f in (tmp_path / "gitcache").rglob("*"):  # the clone's config has the URL, never the token
        if f.is_file() and f.stat().st_size < 1 << 20:
            assert TOKEN.encode() not in f.read_bytes(), f
