"""What issue 38's red team found, closed: a scoped key sees a job's state but not its counts, /metrics is for
administrators, registration by path stays under REPOCTX_REPO_ROOTS, index jobs end at their time and size
limits (the worker goes on, the last index stays), slow and oversized bodies are cut off, keys are rate limited,
request fields take no coerced types, and every error has one shape. SQLite apps: fast, no PostgreSQL."""
from __future__ import annotations

import asyncio
import json
import os
import socket
import time
from pathlib import Path

import httpx
import pytest

from repoctx import Settings
from repoctx.config import ConfigError
from repoctx.service.app import create_app
from repoctx.service.config import ServiceSettings

from test_service_support import LiveServer, SlowModel, parse_sse, write_tree

SHOP = {"src/cart.py": "def add_item(basket, item):\n    return basket + [item]\n",
        "src/price.py": "def total_price(items):\n    return sum(items)\n",
        "secret/vault.py": "def unseal_vault(shares):\n    return sum(shares)\n"}


class App:
    """A SQLite app with one in-process index worker, an admin key and a key scoped to shop's src/."""

    def __init__(self, tmp_path: Path, model_factory=None, **conf):
        conf.setdefault("job_poll", 0.05)
        conf.setdefault("rate_limit", "")
        self.base = tmp_path
        self.app = create_app(Settings(index_dir=tmp_path / "ix", embedder="none"), model_factory=model_factory,
                              service=ServiceSettings(**conf), inprocess_workers=1)
        self.svc = self.app.state.service
        ks = self.svc.keys
        ks.add_role("dev", repo="shop", include=["src/*"])
        self.admin = {"Authorization": f"Bearer {ks.add_key('root', 'admin')[1]}"}
        self.dev = {"Authorization": f"Bearer {ks.add_key('dev1', 'dev')[1]}"}

    def client(self) -> httpx.AsyncClient:
        return httpx.AsyncClient(transport=httpx.ASGITransport(app=self.app), base_url="http://t", timeout=30)

    async def register(self, c: httpx.AsyncClient, name: str, path: Path | str) -> httpx.Response:
        return await c.post("/repos", json={"name": name, "path": str(path)}, headers=self.admin)

    async def settled(self, c: httpx.AsyncClient, name: str, timeout: float = 20.0) -> dict:
        """The repository's status once its latest job is done or failed (as the admin sees it)."""
        deadline = time.monotonic() + timeout
        while True:
            st = (await c.get(f"/repos/{name}", headers=self.admin)).json()
            if st["job"] and st["job"]["status"] in ("done", "failed"):
                return st
            assert time.monotonic() < deadline, st
            await asyncio.sleep(0.05)

    def close(self) -> None:
        self.svc.close()


@pytest.fixture
def make_app(tmp_path):
    apps = []

    def make(**conf) -> App:
        apps.append(App(tmp_path, **conf))
        return apps[-1]
    yield make
    for a in apps:
        a.close()


def common_shape(r: httpx.Response, status: int, error: str) -> dict:
    assert r.status_code == status, r.text
    body = r.json()
    assert body["error"] == error and isinstance(body["detail"], str) and body["detail"], body
    return body


# --------------------------------------------------------------------------------------------- access
def test_a_scoped_key_sees_a_jobs_state_but_not_its_counts(make_app, tmp_path):
    a = make_app(repo_roots=(str(tmp_path),))
    shop = write_tree(tmp_path / "shop", SHOP)

    async def go():
        async with a.client() as c:
            assert (await a.register(c, "shop", shop)).status_code == 202
            full = await a.settled(c, "shop")
            assert full["job"]["status"] == "done" and full["job"]["result"]["files_seen"] == 3
            assert "progress" in full["job"]
            mine = (await c.get("/repos/shop", headers=a.dev)).json()
            job = mine["job"]
            assert job["status"] == "done" and job["created"] and job["started"] and job["finished"]
            assert not {"progress", "result", "detail", "root", "worker"} & set(job), job
            assert "files_seen" not in json.dumps(mine) and mine["counts"]["files"] == 2  # src/ only

    asyncio.run(go())


def test_metrics_need_an_admin_key_unless_made_public(make_app):
    a = make_app()

    async def go(app: App, public: bool):
        async with app.client() as c:
            if public:
                assert (await c.get("/metrics")).status_code == 200
                assert (await c.get("/metrics", headers=app.dev)).status_code == 200
                return
            common_shape(await c.get("/metrics", headers=app.dev), 403, "forbidden")
            r = await c.get("/metrics", headers=app.admin)
            assert r.status_code == 200 and "repoctx_index_jobs" in r.text
            common_shape(await c.get("/metrics"), 401, "unauthorized")

    asyncio.run(go(a, False))
    a.close()
    asyncio.run(go(make_app(metrics_public=True), True))


# --------------------------------------------------------------------------------------------- roots
def test_registration_by_path_stays_under_the_repo_roots(make_app, tmp_path):
    roots = tmp_path / "repos"
    inside = write_tree(roots / "shop", SHOP)
    outside = write_tree(tmp_path / "elsewhere", SHOP)
    write_tree(tmp_path / "repos-evil", SHOP)
    (roots / "link").symlink_to(outside, target_is_directory=True)

    async def go():
        unset = make_app()
        async with unset.client() as c:
            body = common_shape(await unset.register(c, "shop", inside), 403, "forbidden")
            assert "REPOCTX_REPO_ROOTS" in body["detail"]
        unset.close()
        a = make_app(repo_roots=(str(tmp_path / "nowhere"), str(roots)))
        async with a.client() as c:
            for path in (outside, roots / "link", roots / ".." / "elsewhere", tmp_path / "repos-evil", tmp_path):
                body = common_shape(await a.register(c, "x", path), 403, "forbidden")
                assert "REPOCTX_REPO_ROOTS" in body["detail"], path
            assert (await a.register(c, "shop", inside)).status_code == 202
            assert (await a.settled(c, "shop"))["job"]["status"] == "done"
            assert (await a.register(c, "all", roots)).status_code == 202  # the root itself is allowed

    asyncio.run(go())


# --------------------------------------------------------------------------------------------- job limits
def test_a_job_past_its_size_limits_fails_with_the_reason_and_the_next_job_runs(make_app, tmp_path):
    a = make_app(repo_roots=(str(tmp_path),), job_max_files=5, job_max_bytes=4000)
    files = {f"pkg/m{i}.py": f"def handler_{i}(x):\n    return x + {i}\n" for i in range(3)}
    small = write_tree(tmp_path / "small", files)
    big = write_tree(tmp_path / "big", {f"pkg/m{i}.py": f"def f{i}():\n    return {i}\n" for i in range(8)})
    heavy = write_tree(tmp_path / "heavy", {"big.py": "".join(f"def g{i}():\n    return {i}\n" for i in range(300))})

    async def go():
        async with a.client() as c:
            await a.register(c, "small", small)
            assert (await a.settled(c, "small"))["job"]["status"] == "done"
            await a.register(c, "big", big)
            job = (await a.settled(c, "big"))["job"]
            assert (job["status"], job["error"], job["attempts"]) == ("failed", "JobLimit", 1)
            assert job["detail"] == "more than 5 files (REPOCTX_JOB_MAX_FILES)"
            await a.register(c, "heavy", heavy)
            job = (await a.settled(c, "heavy"))["job"]
            assert job["status"] == "failed" and job["detail"] == "more than 4000 bytes of source (REPOCTX_JOB_MAX_BYTES)"
            # a repository that grew past the limit keeps its last index
            write_tree(small, {f"pkg/new{i}.py": f"def extra_{i}():\n    return {i}\n" for i in range(4)})
            await a.register(c, "small", small)
            st = await a.settled(c, "small")
            assert st["job"]["status"] == "failed" and st["indexed"] is True and st["counts"]["files"] == 3
            hits = (await c.post("/search", json={"query": "handler", "repos": ["small"]}, headers=a.admin)).json()
            assert hits["count"] > 0
            # the worker took the next job
            await a.register(c, "next", write_tree(tmp_path / "next", files))
            assert (await a.settled(c, "next"))["job"]["status"] == "done"

    asyncio.run(go())


def test_a_job_past_its_time_limit_fails_and_the_last_index_stays(make_app, tmp_path, monkeypatch):
    import repoctx.indexer as indexer

    a = make_app(repo_roots=(str(tmp_path),), job_timeout=0.5)
    root = write_tree(tmp_path / "slow", {f"pkg/m{i}.py": f"def old_{i}(x):\n    return x\n" for i in range(6)})

    async def go():
        async with a.client() as c:
            await a.register(c, "slow", root)
            assert (await a.settled(c, "slow"))["job"]["status"] == "done"
            real = indexer._parse_one

            def slow_parse(*args, **kw):
                time.sleep(0.15)
                return real(*args, **kw)

            monkeypatch.setattr(indexer, "_parse_one", slow_parse)
            write_tree(root, {f"pkg/m{i}.py": f"def new_{i}(x):\n    return x\n" for i in range(6)})
            t0 = time.monotonic()
            await a.register(c, "slow", root)
            st = await a.settled(c, "slow")
            assert st["job"]["status"] == "failed" and st["job"]["error"] == "JobLimit", st["job"]
            assert st["job"]["detail"] == "ran over 0.5 s (REPOCTX_JOB_TIMEOUT)"
            assert time.monotonic() - t0 < 5
            # the index before the job answers as it did
            hits = (await c.post("/search", json={"query": "old_3", "k": 3}, headers=a.admin)).json()
            assert hits["results"] and ":: old_3(" in hits["results"][0]  # brief: one line per hit
            monkeypatch.setattr(indexer, "_parse_one", real)
            await a.register(c, "slow", root)
            assert (await a.settled(c, "slow"))["job"]["status"] == "done"

    asyncio.run(go())


# --------------------------------------------------------------------------------------------- HTTP edges
def test_a_body_sent_byte_by_byte_is_cut_off_at_the_body_deadline(make_app):
    a = make_app(body_timeout=1.0)
    body = json.dumps({"query": "basket total price " * 4}).encode()
    head = (f"POST /search HTTP/1.1\r\nHost: t\r\nContent-Type: application/json\r\n"
            f"Content-Length: {len(body)}\r\nAuthorization: {a.dev['Authorization']}\r\n\r\n").encode()
    with LiveServer(a.app) as server, socket.create_connection(("127.0.0.1", server.port), timeout=5) as s:
        s.sendall(head)
        t0 = time.monotonic()
        answer = b""
        s.settimeout(0.2)
        for byte in body:  # at most len(body) * 0.2 s; the server answers long before the last byte
            try:
                s.sendall(bytes([byte]))
                chunk = s.recv(65536)
            except socket.timeout:
                continue
            except OSError:  # the server closed the connection after its answer
                break
            answer += chunk
            if not chunk or b"\r\n\r\n" in answer:
                break
        elapsed = time.monotonic() - t0
        s.settimeout(2)
        try:
            while chunk := s.recv(65536):
                answer += chunk
        except OSError:
            pass
    status, _, rest = answer.partition(b"\r\n")
    assert status.startswith(b"HTTP/1.1 408"), answer[:300]
    assert 0.9 < elapsed < 1.0 + 1.5, elapsed
    err = json.loads(rest.split(b"\r\n\r\n", 1)[1])
    assert err["error"] == "request_timeout" and "REPOCTX_BODY_TIMEOUT" in err["detail"]


def test_a_stream_outlives_the_body_deadline(tmp_path):
    """The deadline is for the body: a copilot turn that streams for longer than it ends as usual."""
    slow = SlowModel(seconds=0.8)
    a = App(tmp_path, body_timeout=0.3, model_factory=lambda: slow)

    async def go():
        async with a.client() as c:
            r = await c.post("/chat", json={"session_id": "s1", "message": "hi"}, headers=a.dev)
            assert r.status_code == 200
            events = parse_sse(r.text)
            assert events[-1][0] == "done" and events[-1][1]["stop_reason"] != "timeout", events[-3:]
            assert slow.finished.is_set()

    try:
        asyncio.run(go())
    finally:
        a.close()


def test_an_oversized_body_is_413_by_its_length_and_by_its_bytes(make_app):
    a = make_app(max_body=1000)
    big = json.dumps({"query": "x" * 2000}).encode()

    async def chunks():
        for i in range(0, len(big), 100):
            yield big[i:i + 100]

    async def go():
        async with a.client() as c:
            h = {**a.dev, "content-type": "application/json"}
            body = common_shape(await c.post("/search", content=big, headers=h), 413, "body_too_large")
            assert "REPOCTX_MAX_BODY" in body["detail"]
            r = await c.post("/search", content=chunks(), headers=h)  # no Content-Length: counted as it streams
            assert "content-length" not in r.request.headers
            common_shape(r, 413, "body_too_large")
            assert (await c.post("/search", json={"query": "cart"}, headers=a.dev)).status_code == 200

    asyncio.run(go())


def test_a_key_past_its_rate_limit_gets_429_with_retry_after(make_app):
    a = make_app(rate_limit="3/minute")

    async def go():
        async with a.client() as c:
            for _ in range(3):
                assert (await c.get("/repos", headers=a.dev)).status_code == 200
            r = await c.get("/repos", headers=a.dev)
            body = common_shape(r, 429, "rate_limited")
            assert 1 <= int(r.headers["retry-after"]) <= 60 and "REPOCTX_RATE_LIMIT" in body["detail"]
            assert (await c.post("/search", json={"query": "x"}, headers=a.dev)).status_code == 429
            assert (await c.get("/repos", headers=a.admin)).status_code == 200  # another key, its own count
            for _ in range(3):  # without a key: the client's address
                assert (await c.get("/health")).status_code == 200
            common_shape(await c.get("/health"), 429, "rate_limited")

    asyncio.run(go())


def test_a_bad_rate_limit_is_a_config_error_at_startup(tmp_path, monkeypatch):
    monkeypatch.setenv("REPOCTX_RATE_LIMIT", "lots/often")
    with pytest.raises(ConfigError, match="REPOCTX_RATE_LIMIT"):
        ServiceSettings.from_env()
    with pytest.raises(ConfigError, match="REPOCTX_RATE_LIMIT"):
        create_app(Settings(index_dir=tmp_path / "ix", embedder="none"), service=ServiceSettings(rate_limit="x/y"))
    monkeypatch.setenv("REPOCTX_RATE_LIMIT", "")
    assert ServiceSettings.from_env().rate_limit == ""


def test_fields_take_no_coerced_types_and_every_error_has_one_shape(make_app):
    a = make_app()

    async def go():
        async with a.client() as c:
            for body, field in (({"query": "x", "k": True}, "k"), ({"query": "x", "k": "5"}, "k"),
                                ({"query": "x", "k": 2.5}, "k"), ({"query": 5}, "query"),
                                ({"query": "x", "budget": True}, "budget"), ({"query": "x", "budget": "500"}, "budget")):
                path = "/context" if "budget" in body else "/search"
                r = await c.post(path, json=body, headers=a.dev)
                err = common_shape(r, 422, "invalid_request")
                assert [f["field"] for f in err["fields"]] == [field], (body, err)
                assert field in err["detail"]
            for k in (5, 5.0):  # JSON numbers stay numbers
                r = await c.post("/search", json={"query": "cart", "k": k}, headers=a.dev)
                assert r.status_code == 200 and r.json()["k"] == 5
            assert (await c.post("/context", json={"query": "cart", "budget": 300}, headers=a.dev)).status_code == 200
            r = await c.post("/search", content=b"{nope", headers={**a.dev, "content-type": "application/json"})
            err = common_shape(r, 422, "invalid_request")
            assert "JSON" in err["detail"] and "nope" not in r.text
            common_shape(await c.get("/no/such/route", headers=a.dev), 404, "not_found")
            common_shape(await c.delete("/search", headers=a.dev), 405, "method_not_allowed")
            common_shape(await c.get("/repos/nothing-here", headers=a.dev), 404, "not_found")
            common_shape(await c.post("/repos", json={"name": "x", "path": "/x"}, headers=a.dev), 403, "forbidden")

    asyncio.run(go())
