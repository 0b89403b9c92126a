"""The HTTP service a team shares: ``create_app(settings) -> FastAPI``.

Every endpoint but ``/health``, the webhooks (``/hooks/*``, which verify their own signatures: ``hooks.py``) and
the OpenAPI pages needs ``Authorization: Bearer KEY``; the key's
principal and role decide what it may read: its ``Scope`` goes into every store query (search, context,
retrieve, the copilot's tools) and its name namespaces the copilot's sessions. A repository the key may
not see answers 404, exactly as one that does not exist.

Endpoints: ``POST /chat`` (SSE: token, tool, trace, citation, error, done), ``POST /search`` (at a ``detail``
level, ``repoctx.render``), ``POST /context``, ``POST /retrieve`` (SSE: trace events, then results), ``POST
/grep``, ``GET /outline``, ``POST /symbol`` (``Index.grep``/``outline``/``symbol``), ``GET /repos``,
``POST /repos`` (admin: register a path under ``REPOCTX_REPO_ROOTS`` or a git URL and branch, and queue
indexing), ``GET
/repos/{name}`` (job state for every key that sees the repository, its progress and counts for admin keys;
source, commits and lag, freshness, vector coverage), ``GET /jobs``, ``POST /jobs/{id}/cancel`` (admin; the
repository and job endpoints live in ``repos.py``), ``POST /hooks/github|gitlab|generic``, ``GET /health``, ``GET
/metrics`` (Prometheus; admin keys, unless
``REPOCTX_METRICS_PUBLIC=1``).

Limits (``limits.py``): a request body of at most ``REPOCTX_MAX_BODY`` bytes (413) that arrives within
``REPOCTX_BODY_TIMEOUT`` seconds (408); ``REPOCTX_RATE_LIMIT`` requests per key in this process (429 with
``Retry-After``); request fields take JSON types as they are (``true`` is not 1, ``"5"`` is not 5). Every error
answer is ``{"error": code, "detail": one line}`` (a 422 adds ``fields``: ``[{field, reason}]``).

Failure behaviour: blocking library calls run in worker threads (a copilot turn runs on its own event
loop in its own thread), every stream has a deadline (``REPOCTX_STREAM_TIMEOUT``, default 60 s), and
once a stream has begun any failure is an ``error`` event followed by a clean close. A client that
disconnects cancels the copilot's run. Error texts name the failure's type; they carry no stack trace
and pass through the secret redactor.

The store going away (``store/availability.py`` decides what is an outage): reaching it gives up after
``REPOCTX_STORE_TIMEOUT`` seconds (default 5), and the answer is 503 ``store_unavailable`` with ``Retry-After:
REPOCTX_RETRY_AFTER`` -- also when the key check is what could not reach it (a valid key is never refused for an
outage) -- or, once a stream has begun, an ``error`` event of that name. ``GET``/``HEAD /health`` answers 503
``degraded`` with the failing components. The pools drop dead connections and reconnect by themselves.
"""

from __future__ import annotations

import asyncio
import functools
import json
import logging
import os
import re
import threading
import time
from collections.abc import AsyncIterator, Callable
from concurrent.futures import ThreadPoolExecutor
from dataclasses import replace
from pathlib import Path
from typing import Annotated, Any, Literal

from fastapi import Depends, FastAPI, HTTPException, Query, Request, Security
from fastapi.exceptions import RequestValidationError
from fastapi.responses import JSONResponse, PlainTextResponse, Response
from fastapi.security import HTTPAuthorizationCredentials, HTTPBearer
from pydantic import BaseModel, BeforeValidator, ConfigDict, Field, StringConstraints
from pydantic_core import PydanticCustomError
from sse_starlette import EventSourceResponse, ServerSentEvent
from starlette.concurrency import run_in_threadpool
from starlette.exceptions import HTTPException as StarletteHTTPException

from repoctx.config import Settings
from repoctx.render import retrieval_dict, wire
from repoctx.service.auth import KeyStore, Principal
from repoctx.service.config import ServiceSettings
from repoctx.service.db import ServiceDB, service_db_target
from repoctx.service.limits import BodyLimit, RateLimit, error_body, parse_rate_limit
from repoctx.service.metrics import ServiceMetrics
from repoctx.service.tasks import job_queue, start_workers
from repoctx.store.availability import StoreUnavailable, store_unavailable
from repoctx.store.base import Scope

log = logging.getLogger("repoctx.service")

__all__ = ["create_app", "app_from_env", "Service"]

PUBLIC_PATHS = (
    "/health",
    "/docs",
    "/redoc",
    "/openapi.json",
    "/docs/oauth2-redirect",
    "/",
)  # "/" and "/ui/": the web pages and their assets, which hold no data (service/web/)
PUBLIC_PREFIXES = (
    "/hooks/",  # push webhooks: no API key, each delivery is verified by its signature (hooks.py)
    "/ui/",
)
SESSION_ID = r"^[A-Za-z0-9_-]{1,128}$"
REPO_NAME = r"^[A-Za-z0-9][A-Za-z0-9._-]{0,99}$"

RepoName = Annotated[str, StringConstraints(pattern=REPO_NAME)]
QueryText = Annotated[str, StringConstraints(strip_whitespace=True, min_length=1, max_length=4000)]


# ------------------------------------------------------------------------------------ request models
def _json_integer(value: Any) -> Any:
    """A JSON number that is a whole number (``5`` or ``5.0``); never ``true`` or ``"5"``, which lax parsing
    would have taken for 1 and 5."""
    if value is None:  # an optional field's null: the type after this decides
        return value
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        raise PydanticCustomError("int_type", "Input should be a valid integer (a JSON number)")
    if isinstance(value, float) and value.is_integer():
        return int(value)
    return value


JsonInt = Annotated[int, BeforeValidator(_json_integer)]
OptionalJsonInt = Annotated[int | None, BeforeValidator(_json_integer)]  # (so Field's bounds reach the schema)


class _Model(BaseModel):
    # strict: no coercion between JSON types (a string is not a number, a boolean is not an integer)
    model_config = ConfigDict(extra="forbid", strict=True)


class SearchRequest(_Model):
    """A standard or agentic retrieval; ``repos`` left out means every repository the key may see."""

    query: QueryText = Field(description="A question or identifiers.")
    repos: list[RepoName] | None = Field(None, max_length=50, description="Repository names (default: all visible).")
    k: JsonInt = Field(10, ge=1, le=50, description="How many units (symbol level) or files (file level).")
    level: Literal["symbol", "file"] = "symbol"
    mode: Literal["auto", "standard", "agentic"] = Field("auto", description="auto: the router decides.")
    detail: Literal["brief", "signatures", "full"] = Field(
        "brief",
        description="brief: citation, short signature and why per hit; signatures: + path, lines, score, "
        "whole signature, docstring line, caller/callee counts; full: + the code's first lines "
        "(repoctx.render).",
    )
    paths: list[Annotated[str, StringConstraints(min_length=1, max_length=1000)]] | None = Field(
        None,
        max_length=20,
        description="Path globs (the grants' grammar): only units in a matching file, inside what the key may read.",
    )


class RetrieveRequest(SearchRequest):
    """``/search`` as a stream: trace events as they happen, then the results."""


class ContextRequest(_Model):
    query: QueryText
    repos: list[RepoName] | None = Field(None, max_length=50)
    task: Literal["code_query", "refactor", "code_gen", "search"] | None = Field(
        None, description="What the context is for (default: classified from the query)."
    )
    budget: OptionalJsonInt = Field(None, ge=100, le=16000, description="Token budget.")
    mode: Literal["auto", "standard", "agentic"] = "standard"


class GrepRequest(_Model):
    """``Index.grep`` over the indexed snapshot of the repositories the key sees (no checkout needed)."""

    pattern: Annotated[str, StringConstraints(min_length=1, max_length=1000)] = Field(
        description="A Python regular expression matched against each line (or a literal string with fixed)."
    )
    fixed: bool = Field(False, description="The pattern is a literal string.")
    ignore_case: bool = False
    paths: list[Annotated[str, StringConstraints(min_length=1, max_length=1000)]] | None = Field(
        None, max_length=50, description="Path globs a file must match (any of them; '*' crosses '/')."
    )
    repos: list[RepoName] | None = Field(None, max_length=50)
    limit: JsonInt = Field(100, ge=1, le=1000, description="Matching lines returned.")
    offset: JsonInt = Field(0, ge=0, description="Matching lines skipped (next_offset of the previous page).")
    context: JsonInt = Field(0, ge=0, le=20, description="Lines shown before and after each match.")


class SymbolRequest(_Model):
    """``Index.symbol``: every definition of a name, with its code."""

    name: Annotated[str, StringConstraints(strip_whitespace=True, min_length=1, max_length=1000)] = Field(
        description="Plain, qualified (Class.method), module-qualified, or path:qualname."
    )
    repos: list[RepoName] | None = Field(None, max_length=50)
    limit: JsonInt = Field(10, ge=1, le=50, description="Definitions returned.")
    body: bool = Field(True, description="Each definition's code; false: only where each one is.")


class ChatRequest(_Model):
    session_id: Annotated[str, StringConstraints(pattern=SESSION_ID)] = Field(
        description="The conversation to continue or start (1-128 of A-Z a-z 0-9 _ -); private to the key's principal."
    )
    message: Annotated[str, StringConstraints(strip_whitespace=True, min_length=1, max_length=8000)]
    repos: list[RepoName] | None = Field(None, max_length=50)


# ------------------------------------------------------------------------------------ helpers
_URL_CREDS = re.compile(r"(://)[^/@\s]+@")


def safe_detail(text: Any, limit: int = 200) -> str:
    """One line of an error message fit to show a client: no traceback, no credentials, secrets redacted."""
    line = next((ln.strip() for ln in str(text or "").splitlines() if ln.strip()), "")
    line = _URL_CREDS.sub(r"\1***@", line)
    line = re.sub(r"(?i)(password|passwd|pwd|secret|token|api[_-]?key)\s*=\s*\S+", r"\1=***", line)
    try:
        from repoctx.ingest.walk import redact

        line = redact(line)[0]
    except Exception:  # noqa: BLE001 - the patterns above already took out the usual credentials
        pass
    return line if len(line) <= limit else line[: limit - 1] + "…"


_error_body = error_body  # {"error": code, "detail": one line}: the shape of every error answer (limits.py)


STORE_UNAVAILABLE = "store_unavailable"  # the error of every answer given while the store is away


def _outage_cause(exc: BaseException | None) -> str:
    while isinstance(exc, StoreUnavailable) and (exc.__cause__ or exc.__context__) is not None:
        exc = exc.__cause__ or exc.__context__
    return type(exc).__name__ if exc is not None and not isinstance(exc, StoreUnavailable) else ""


def unavailable_body(exc: BaseException | None, retry_after: int) -> dict:
    """The error body of an answer given while the store cannot be reached (503, or a stream's error event)."""
    cause = _outage_cause(exc)
    return _error_body(
        STORE_UNAVAILABLE, f"the store is unavailable{f' ({cause})' if cause else ''}: try again in {retry_after} s"
    )


def unavailable_response(exc: BaseException | None, retry_after: int) -> JSONResponse:
    return JSONResponse(unavailable_body(exc, retry_after), status_code=503, headers={"Retry-After": str(retry_after)})


def stream_error(exc: BaseException, retry_after: int) -> dict:
    """An ``error`` event's data for a failure once a stream has begun."""
    if store_unavailable(exc):
        return unavailable_body(exc, retry_after)
    return _error_body(type(exc).__name__, safe_detail(exc))


def _json(data: Any) -> str:
    return json.dumps(data, ensure_ascii=False, default=str)


def _sse(event: str, data: Any, n: int) -> ServerSentEvent:
    return ServerSentEvent(data=_json(data), event=event, id=str(n))


class ThreadedRun:
    """An async generator run to completion on its own event loop in its own thread (a copilot turn:
    model calls, tools, session writes), its items handed to the caller's loop through a queue.
    ``cancel()`` cancels it on its loop (the model call in flight is abandoned, the turn ends)."""

    def __init__(self, make: Callable[[], AsyncIterator[Any]], name: str = "repoctx-turn"):
        self._make = make
        self._loop = asyncio.get_running_loop()
        self.queue: asyncio.Queue = asyncio.Queue()
        self._tloop: asyncio.AbstractEventLoop | None = None
        self._task: asyncio.Task | None = None
        self._cancelled = False
        self.cancelled_run = threading.Event()  # the run saw its cancellation
        self.finished = threading.Event()
        self.thread = threading.Thread(target=self._main, name=name, daemon=True)
        self.thread.start()

    def _put(self, item) -> None:
        try:
            self._loop.call_soon_threadsafe(self.queue.put_nowait, item)
        except RuntimeError:  # the server's loop is gone
            pass

    def _main(self) -> None:
        async def run() -> None:
            self._tloop = asyncio.get_running_loop()
            self._task = asyncio.current_task()
            if self._cancelled:
                self.cancelled_run.set()
                return
            agen = None
            try:
                agen = self._make()
                async for item in agen:
                    self._put(("item", item))
                self._put(("end", None))
            except asyncio.CancelledError:
                self.cancelled_run.set()
                self._put(("cancelled", None))
            except BaseException as e:  # reported as an error event
                log.warning("turn failed: %s", type(e).__name__, exc_info=True)
                self._put(("error", e))
            finally:
                aclose = getattr(agen, "aclose", None)  # an async generator's; a plain iterator has none
                if aclose is not None:
                    try:
                        await aclose()
                    except BaseException:  # noqa: BLE001 - closing is best effort: the turn has ended
                        pass

        try:
            asyncio.run(run())
        except BaseException:  # noqa: BLE001 - run() reports every outcome through the queue
            pass
        finally:
            self.finished.set()

    def cancel(self) -> None:
        self._cancelled = True
        loop, task = self._tloop, self._task
        if loop is not None and task is not None:
            try:
                loop.call_soon_threadsafe(task.cancel)
            except RuntimeError:  # already finished
                pass


# ------------------------------------------------------------------------------------ the service
class Service:
    """What the endpoints share: the store and a read view of it, keys, jobs, sessions, metrics."""

    def __init__(
        self,
        settings: Settings,
        service: ServiceSettings,
        *,
        model_factory=None,
        key_store: KeyStore | None = None,
        store=None,
        tools_factory=None,
        inprocess_workers: int | None = None,
    ):
        from repoctx.index import Index, open_store

        if settings.store_timeout is None:  # reaching the store fails within this (then 503), never hangs
            settings = replace(settings, store_timeout=service.store_timeout)
        self.settings = settings
        self.conf = service
        self.db = ServiceDB(service_db_target(settings), connect_timeout=settings.store_timeout)
        try:
            self.keys = key_store or KeyStore(
                self.db, roles_file=service.roles_file, cache_seconds=service.key_cache_seconds
            )
            self._owns_keys = key_store is None
            self.store = store if store is not None else open_store(settings, long_lived=True)
            self._owns_store = store is None
        except BaseException:
            self.db.close()
            raise
        self.index = Index(settings=settings, repos=(), store=self.store)
        if getattr(self.store, "memory_enabled", False):
            self.store.warm_lexical()  # start building BM25 in memory (the store's own queries answer meanwhile)
        self.jobs = job_queue(self.db, service)  # procrastinate's (PostgreSQL) or the embedded one (SQLite)
        self.metrics = ServiceMetrics(self.jobs.counts)
        self._model_factory = model_factory
        self._default_model = None
        self._model_lock = threading.Lock()
        self.tools_factory = tools_factory
        # request work runs here: a future of this pool can be abandoned at its deadline (the answer is 504 or
        # an error event at once; the thread finishes its step in the background)
        self.executor = ThreadPoolExecutor(max_workers=32, thread_name_prefix="repoctx-request")
        self.busy: set[tuple[str, str]] = set()
        self.runs: set[ThreadedRun] = set()
        self._sessions_pool: Any = None  # a psycopg_pool.ConnectionPool when the sessions are on PostgreSQL
        sessions_target = os.environ.get("REPOCTX_SESSIONS_URL") or settings.database_url
        if not sessions_target:
            if settings.index_dir is None:
                raise ValueError("the service needs REPOCTX_INDEX_DIR or REPOCTX_DATABASE_URL")
            sessions_target = str(Path(settings.index_dir) / "sessions.sqlite")
        self._sessions_target = sessions_target
        self._sessions_ok = False
        self._check_sessions()
        n = inprocess_workers
        if n is None:
            inproc = service.inprocess_jobs if service.inprocess_jobs is not None else self.db.backend == "sqlite"
            n = 1 if inproc else 0
        self.watchers = None  # repoctx.watch.Watchers: the trees registered by path, with jobs in this process
        self.workers = (
            start_workers(
                settings,
                service,
                self.db,
                self.jobs,
                self.store,
                n,
                on_job=self._job_done,
                embedder=lambda: self.index.embedder,
            )
            if n
            else None
        )
        if self.workers is not None and settings.watch:  # a save under a path registered here: a job within seconds
            from repoctx.watch import Watchers

            self.watchers = Watchers(settings, self.jobs.enqueue)
            self._watch_paths()

    @property
    def runs_jobs(self) -> bool:
        return self.workers is not None

    def _job_done(self, job, outcome: str, seconds: float) -> None:
        self.metrics.record_job(job, outcome, seconds)
        if self.watchers is not None:  # a path registered since: watched once its first job has run
            self._watch_paths()

    def _watch_paths(self) -> None:
        from repoctx.service.sources import Sources

        watchers = self.watchers
        if watchers is None:
            return
        try:
            for src in Sources(self.db).all("path"):
                if src.path:
                    watchers.watch(src.name, src.path)
        except Exception as e:  # noqa: BLE001 - without a watch the repository is indexed when asked
            log.warning("watching the repositories registered by path: %s", type(e).__name__)

    # ---- sessions
    def _postgres_sessions(self) -> bool:
        from repoctx.service.db import is_postgres_url

        return is_postgres_url(self._sessions_target)

    def _check_sessions(self) -> None:
        from repoctx.copilot import sessions

        try:
            if self._postgres_sessions():
                if self._sessions_pool is None:
                    from repoctx.store.availability import connection_pool

                    self._sessions_pool = connection_pool(
                        self._sessions_target,
                        timeout=self.settings.store_timeout,
                        max_size=8,
                        name="repoctx-service-sessions",
                    )
                sessions.PostgresSessionRepository(self._sessions_pool, "probe")
            else:
                sessions.migrate_sqlite(self._sessions_target)  # embedded: created beside the index
            self._sessions_ok = True
        except Exception as e:  # noqa: BLE001 - /chat answers 503 until `repoctx db migrate` has run
            log.warning("copilot sessions unavailable: %s", type(e).__name__)
            self._sessions_ok = False

    def session_repository(self, principal: str):
        from repoctx.copilot import sessions

        if not self._sessions_ok:
            self._check_sessions()
            if not self._sessions_ok:
                raise HTTPException(
                    503,
                    _error_body("SessionStoreNotMigrated", "the session store is not ready: run `repoctx db migrate`"),
                )
        if self._postgres_sessions():
            return sessions.PostgresSessionRepository(self._sessions_pool, principal)
        return sessions.SQLiteSessionRepository(self._sessions_target, principal)

    # ---- model
    def model(self):
        if self._model_factory is not None:
            return self._model_factory()
        with self._model_lock:
            if self._default_model is None:
                from repoctx.providers.llm import model_from_env

                self._default_model = model_from_env()
            return self._default_model

    # ---- health
    def health_probes(self) -> dict[str, Callable[[], Any]]:
        """One cheap read of each component the answers need: the index store, the service tables (keys,
        roles, jobs) and, on PostgreSQL, the copilot's sessions."""

        def store() -> None:
            present = getattr(self.store, "check_present", None)  # SQLite: the file is still the one opened
            if callable(present):
                present()
            self.store.meta("schema_version")

        def sessions() -> None:
            with self._sessions_pool.connection() as conn:
                conn.execute("SELECT 1")

        probes: dict[str, Callable[[], Any]] = {"store": store, "service_db": lambda: self.db.q("SELECT 1")}
        if self._sessions_pool is not None:
            probes["sessions"] = sessions
        return probes

    # ---- scope
    def visible(self, p: Principal, name: str) -> bool:
        return p.scope.allows_repo(name) and self.store.repo(name) is not None

    def scope_for(self, p: Principal, repos: list[str] | None, paths: list[str] | None = None) -> Scope:
        """The key's scope narrowed to ``repos`` (404 for one it may not see) and to files matching ``paths``
        (globs; a GlobError, i.e. 400, for one the grammar refuses). Narrowing never widens: the grants stay."""
        scope = p.scope
        if repos:
            names = tuple(dict.fromkeys(repos))
            for name in names:
                if not self.visible(p, name):
                    raise HTTPException(404, _error_body("not_found", "repository not found"))
            scope = replace(scope, repos=names)
        if paths:
            if scope.include:  # a key's own scope names no include (grants carry its paths); never OR into one
                raise ValueError("path filters cannot narrow this key's scope")
            scope = replace(scope, include=tuple(paths))
        return scope

    async def call(self, fn: Callable, *args, timeout: float | None = None):
        """``fn(*args)`` in the request pool; with ``timeout``, abandoned (TimeoutError) when it passes."""
        fut = asyncio.get_running_loop().run_in_executor(self.executor, functools.partial(fn, *args))
        return await (asyncio.wait_for(fut, timeout) if timeout is not None else fut)

    def close(self) -> None:
        for run in list(self.runs):
            run.cancel()
        self.executor.shutdown(wait=False, cancel_futures=True)
        if self.watchers is not None:
            self.watchers.close()
        if self.workers is not None:
            self.workers.close()
        if hasattr(self.jobs, "close"):
            self.jobs.close()
        if self._default_model is not None:
            from repoctx.providers.llm import close_model

            close_model(self._default_model)
        if self._sessions_pool is not None:
            self._sessions_pool.close()
        if self._owns_keys:
            self.keys.close()
        self.db.close()
        if self._owns_store:
            self.store.close()


# ------------------------------------------------------------------------------------ middleware
class _Middleware:
    """Authentication for every path but the public ones, and latency per endpoint (to the last byte)."""

    def __init__(self, app, service: Service):
        self.app = app
        self.svc = service

    async def __call__(self, scope, receive, send):
        if scope["type"] != "http":
            return await self.app(scope, receive, send)
        svc = self.svc
        t0 = time.perf_counter()
        status = {"code": 500}

        async def send_wrapper(message):
            if message["type"] == "http.response.start":
                status["code"] = message["status"]
            await send(message)

        svc.metrics.in_flight.inc()
        try:
            path = scope.get("path", "")
            public = (
                path in PUBLIC_PATHS
                or path.startswith(PUBLIC_PREFIXES)
                or (path == "/metrics" and svc.conf.metrics_public)
            )
            if not public:
                try:
                    principal = await self._authenticate(scope)
                except StoreUnavailable as e:  # a valid key is never refused for an outage: 503, retry
                    await unavailable_response(e, svc.conf.retry_after)(scope, receive, send_wrapper)
                    return
                except Exception as e:  # a failing check is the server's fault, not the key's: never a 401
                    log.error("key check failed: %s", type(e).__name__, exc_info=e)
                    response = JSONResponse(
                        _error_body(type(e).__name__, "internal error; the server log has the details"), status_code=500
                    )
                    await response(scope, receive, send_wrapper)
                    return
                if principal is None:
                    svc.metrics.auth_failures.inc()
                    response = JSONResponse(
                        _error_body("unauthorized", "a valid API key is required: Authorization: Bearer KEY"),
                        status_code=401,
                        headers={"WWW-Authenticate": "Bearer"},
                    )
                    await response(scope, receive, send_wrapper)
                    return
                scope.setdefault("state", {})["principal"] = principal
            await self.app(scope, receive, send_wrapper)
        finally:
            svc.metrics.in_flight.dec()
            route = scope.get("route")
            endpoint = getattr(route, "path", None) or "unmatched"
            svc.metrics.requests.labels(endpoint, scope.get("method", ""), str(status["code"])).observe(
                time.perf_counter() - t0
            )

    async def _authenticate(self, scope) -> Principal | None:
        header = ""
        for k, v in scope.get("headers") or []:
            if k == b"authorization":
                header = v.decode("latin-1")
                break
        scheme, _, key = header.partition(" ")
        key = key.strip()
        if scheme.lower() != "bearer" or not key or len(key) > 200:
            return None
        keys = self.svc.keys
        cached = keys.peek(key) if hasattr(keys, "peek") else None
        if cached is not None:
            return cached
        try:  # the pools give up after store_timeout; this deadline is the backstop
            return await self.svc.call(keys.authenticate, key, timeout=self.svc.conf.store_timeout + 1.0)
        except Exception as e:
            if isinstance(e, asyncio.TimeoutError) or store_unavailable(e):
                log.warning("key check: the store is unavailable (%s)", type(e).__name__)
                raise StoreUnavailable("the key check could not reach the store") from e
            raise


_bearer = HTTPBearer(auto_error=False, description="An API key from `repoctx keys add NAME --role ROLE`.")


async def current_principal(
    request: Request, _creds: HTTPAuthorizationCredentials | None = Security(_bearer)
) -> Principal:
    """Async so FastAPI does not hop to a worker thread for it: it only reads what the middleware set."""
    p = getattr(request.state, "principal", None)
    if p is None:  # the middleware lets no request through without one; never trust a missing one
        raise HTTPException(401, _error_body("unauthorized", "a valid API key is required"))
    return p


PrincipalDep = Annotated[Principal, Depends(current_principal)]


# ------------------------------------------------------------------------------------ the app
def create_app(
    settings: Settings | None = None,
    *,
    model_factory: Callable[[], Any] | None = None,
    key_store: KeyStore | None = None,
    service: ServiceSettings | None = None,
    store=None,
    tools_factory: Callable[[Any, Scope], list] | None = None,
    inprocess_workers: int | None = None,
) -> FastAPI:
    """The service over the store the settings name (``REPOCTX_DATABASE_URL``, else ``REPOCTX_INDEX_DIR``).

    ``model_factory()``: a Strands Model for each chat turn (default: one model from ``REPOCTX_LLM``).
    ``key_store``: keys and roles (default: the service tables beside the store). ``tools_factory(index,
    scope)``: the copilot's tools (default ``make_tools``). ``inprocess_workers``: index-job threads in this
    process (default 1 with SQLite, 0 with PostgreSQL, where ``repoctx worker`` runs them).
    ``app.state.service.close()`` releases everything (also done at shutdown)."""
    settings = settings or Settings.from_env()
    conf = service or ServiceSettings.from_env()
    parse_rate_limit(conf.rate_limit)  # a ConfigError naming REPOCTX_RATE_LIMIT now, not at the first request
    svc = Service(
        settings,
        conf,
        model_factory=model_factory,
        key_store=key_store,
        store=store,
        tools_factory=tools_factory,
        inprocess_workers=inprocess_workers,
    )

    from contextlib import asynccontextmanager

    @asynccontextmanager
    async def lifespan(app: FastAPI):
        yield
        await run_in_threadpool(svc.close)

    app = FastAPI(
        title="repoctx",
        version="0.1.0",
        lifespan=lifespan,
        description="Repository context for a team: search, context, traced retrieval and a copilot "
        "whose answers cite their sources, under per-key access rules.",
    )
    app.state.service = svc
    # outermost last: authentication (and latency), then the per-key rate limit (it needs the key), then the
    # body's size and deadline (a body is read only for a request that got this far)
    app.add_middleware(BodyLimit, max_body=conf.max_body, timeout=conf.body_timeout)
    app.add_middleware(RateLimit, limit=conf.rate_limit)
    app.add_middleware(_Middleware, service=svc)

    # ---- errors: a reason, never a traceback or an echo of the input
    @app.exception_handler(RequestValidationError)
    async def _invalid(request: Request, exc: RequestValidationError):
        problems = []
        for e in exc.errors():
            if e.get("type") == "json_invalid":  # the body is not JSON at all: one problem, the body's
                reason = f"not valid JSON ({(e.get('ctx') or {}).get('error') or 'decode error'})"
                problems.append({"field": "body", "reason": reason})
                continue
            problems.append(
                {
                    "field": ".".join(str(x) for x in e.get("loc", ()) if x != "body") or "body",
                    "reason": e.get("msg", "invalid"),
                }
            )
        detail = safe_detail("; ".join(f"{p['field']}: {p['reason']}" for p in problems), 400)
        return JSONResponse(_error_body("invalid_request", detail, fields=problems), status_code=422)

    _codes = {
        400: "invalid_request",
        401: "unauthorized",
        403: "forbidden",
        404: "not_found",
        405: "method_not_allowed",
        408: "request_timeout",
        413: "body_too_large",
        429: "rate_limited",
    }

    @app.exception_handler(StarletteHTTPException)
    async def _http(request: Request, exc: StarletteHTTPException):
        body = (
            exc.detail
            if isinstance(exc.detail, dict)
            else _error_body(_codes.get(exc.status_code, "error"), str(exc.detail))
        )
        return JSONResponse(body, status_code=exc.status_code, headers=getattr(exc, "headers", None))

    @app.exception_handler(Exception)
    async def _crash(request: Request, exc: Exception):
        if store_unavailable(exc):  # raised outside `threaded` (which makes it a StoreUnavailable): still a 503
            log.warning("%s on %s: the store is unavailable", type(exc).__name__, request.url.path)
            return unavailable_response(exc, conf.retry_after)
        log.error("unhandled %s on %s", type(exc).__name__, request.url.path, exc_info=exc)
        return JSONResponse(
            _error_body(type(exc).__name__, "internal error; the server log has the details"), status_code=500
        )

    async def threaded(fn: Callable, *args, timeout: float | None = None):
        """A blocking call in a worker thread, under the request deadline; ValueError is a 400."""
        try:
            return await svc.call(fn, *args, timeout=timeout or conf.request_timeout)
        except TimeoutError:
            raise HTTPException(504, _error_body("Timeout", f"no answer within {conf.request_timeout:g} s")) from None
        except ValueError as e:
            raise HTTPException(400, _error_body("invalid_request", safe_detail(e))) from None
        except StoreUnavailable:
            raise
        except Exception as e:
            if store_unavailable(e):  # the one place an outage becomes a 503 (the handler below)
                raise StoreUnavailable(f"the store is unavailable: {type(e).__name__}") from e
            raise

    @app.exception_handler(StoreUnavailable)
    async def _store_unavailable(request: Request, exc: StoreUnavailable):
        return unavailable_response(exc, conf.retry_after)

    # ---- public
    async def _health(head: bool) -> Response:
        async def probe(fn: Callable[[], Any]) -> str:
            try:
                await svc.call(fn, timeout=conf.store_timeout + 1.0)
                return "ok"
            except TimeoutError:
                return "timeout"
            except Exception as e:  # noqa: BLE001 - a component's state, not a crash of /health
                return "unavailable" if store_unavailable(e) else type(e).__name__

        probes = svc.health_probes()
        components = dict(zip(probes, await asyncio.gather(*(probe(fn) for fn in probes.values())), strict=True))
        failing = [name for name, state in components.items() if state != "ok"]
        body: dict[str, Any] = {
            "status": "degraded" if failing else "ok",
            "backend": svc.store.backend,
            "jobs": "in-process" if svc.runs_jobs else "workers",
            "components": components,
            "failing": failing,
        }
        if not failing and getattr(svc.store, "memory_enabled", False):
            # BM25 in memory, built in the background at start and after each index change
            try:
                ready = await svc.call(svc.store.warm_lexical, timeout=conf.store_timeout + 1.0)
                body["lexical"] = "memory" if ready else "building"
                if building := svc.store.scoped_building():  # a scope's own index (a key's repositories)
                    body["lexical_scopes_building"] = building
            except Exception:  # noqa: BLE001 - the store answered a moment ago; this is only a detail
                body["lexical"] = "unknown"
        status = 503 if failing else 200
        headers = {"Retry-After": str(conf.retry_after)} if failing else None
        if head:
            return Response(status_code=status, headers=headers)
        return JSONResponse(body, status_code=status, headers=headers)

    @app.get(
        "/health",
        tags=["service"],
        summary="Liveness and each component's state (no key needed): 200 ok, "
        "or 503 degraded with the failing components and Retry-After",
    )
    async def health():
        return await _health(head=False)

    @app.head("/health", include_in_schema=False)
    async def health_head():
        return await _health(head=True)

    @app.get(
        "/metrics",
        tags=["service"],
        response_class=PlainTextResponse,
        summary="Prometheus metrics (an admin key, unless REPOCTX_METRICS_PUBLIC=1)",
    )
    async def metrics(request: Request):
        # the service's whole traffic and job counts: not for a key scoped to some paths of some repositories
        p = getattr(request.state, "principal", None)
        if not conf.metrics_public and (p is None or not p.admin):
            raise HTTPException(
                403,
                _error_body(
                    "forbidden",
                    "/metrics needs an admin key (or REPOCTX_METRICS_PUBLIC=1 for a scraper on a private network)",
                ),
            )
        data = await svc.call(svc.metrics.render, timeout=30)
        return PlainTextResponse(data, media_type="text/plain; version=0.0.4; charset=utf-8")

    # ---- reads
    @app.post("/search", tags=["retrieval"], summary="Hybrid (or agentic) search over the repositories the key sees")
    async def search(req: SearchRequest, p: PrincipalDep) -> dict:
        def work():
            scope = svc.scope_for(p, req.repos, req.paths)
            r = svc.index.retrieve(req.query, k=req.k, level=req.level, mode=req.mode, scope=scope)
            return wire(retrieval_dict(r, req.detail, index=svc.index, scope=scope))

        return await threaded(work)

    @app.post("/context", tags=["retrieval"], summary="Context compressed to a task inside a token budget")
    async def context(req: ContextRequest, p: PrincipalDep) -> dict:
        def work():
            scope = svc.scope_for(p, req.repos)
            ctx = svc.index.context(req.query, task=req.task, budget=req.budget, mode=req.mode, scope=scope)
            return ctx.to_dict()

        return await threaded(work)

    @app.post(
        "/grep", tags=["retrieval"], summary="Lines matching a pattern, like `git grep -n` over the indexed snapshot"
    )
    async def grep(req: GrepRequest, p: PrincipalDep) -> dict:
        from repoctx.store.grep import PatternError

        def work():
            scope = svc.scope_for(p, req.repos)
            try:
                return svc.index.grep(
                    req.pattern,
                    fixed=req.fixed,
                    ignore_case=req.ignore_case,
                    paths=tuple(req.paths or ()),
                    scope=scope,
                    limit=req.limit,
                    offset=req.offset,
                    context=req.context,
                )
            except PatternError as e:  # the request's shape is right, its regex is not: name the problem
                raise HTTPException(
                    400,
                    _error_body(
                        "invalid_request", safe_detail(e, 400), fields=[{"field": "pattern", "reason": e.reason}]
                    ),
                ) from None

        return await threaded(work)

    @app.get(
        "/outline",
        tags=["retrieval"],
        summary="A file's classes, functions and methods, with signatures, line spans and caller counts",
    )
    async def outline(
        p: PrincipalDep,
        path: Annotated[
            str, Query(min_length=1, max_length=4096, description="The file's path, relative to its repository's root.")
        ],
        repo: Annotated[
            str | None, Query(pattern=REPO_NAME, description="The repository, needed only when several hold the path.")
        ] = None,
    ) -> dict:
        def work():
            scope = svc.scope_for(p, [repo] if repo else None)
            return svc.index.outline(path, repo=repo, scope=scope)

        return await threaded(work)

    @app.post(
        "/symbol",
        tags=["retrieval"],
        summary="Every definition of a name with its code; several are listed, none guessed",
    )
    async def symbol(req: SymbolRequest, p: PrincipalDep) -> dict:
        def work():
            scope = svc.scope_for(p, req.repos)
            out = svc.index.symbol(req.name, scope=scope, limit=req.limit)
            if not req.body:
                for m in out["matches"]:
                    m.pop("text", None)
            return out

        return await threaded(work)

    @app.post(
        "/retrieve",
        tags=["retrieval"],
        response_class=EventSourceResponse,
        summary="Retrieval as a server-sent event stream: `trace` events, then `results` (or `error`)",
    )
    async def retrieve(req: RetrieveRequest, p: PrincipalDep):
        scope = await threaded(svc.scope_for, p, req.repos, req.paths)
        gen = svc.index.stream(req.query, k=req.k, level=req.level, mode=req.mode, scope=scope)
        loop = asyncio.get_running_loop()
        deadline = loop.time() + conf.stream_timeout
        done = object()

        async def events():
            n = 0
            try:
                while True:
                    remaining = deadline - loop.time()
                    if remaining <= 0:
                        raise TimeoutError
                    ev = await svc.call(next, gen, done, timeout=remaining)
                    if ev is done:
                        return
                    n += 1
                    if ev.step == "Result":
                        results = await svc.call(
                            functools.partial(
                                retrieval_dict, ev.data["retrieval"], req.detail, index=svc.index, scope=scope
                            ),
                            timeout=deadline - loop.time(),
                        )
                        yield _sse("results", wire(results), n)
                        return
                    yield _sse("trace", ev.to_dict(), n)
            except TimeoutError:
                svc.metrics.stream_errors.labels("/retrieve", "Timeout").inc()
                yield _sse(
                    "error", _error_body("Timeout", f"retrieval took longer than {conf.stream_timeout:g} s"), n + 1
                )
            except asyncio.CancelledError:
                svc.metrics.disconnects.labels("/retrieve").inc()
                raise
            except Exception as e:  # the stream has begun: an error event, then close
                log.warning("retrieve failed: %s", type(e).__name__, exc_info=not store_unavailable(e))
                data = stream_error(e, conf.retry_after)
                svc.metrics.stream_errors.labels("/retrieve", data["error"]).inc()
                yield _sse("error", data, n + 1)

        return EventSourceResponse(events(), ping=15, send_timeout=30)

    # ---- the copilot
    @app.post(
        "/chat",
        tags=["copilot"],
        response_class=EventSourceResponse,
        summary="One copilot turn as server-sent events: token, tool, trace, citation, error, done",
    )
    async def chat(req: ChatRequest, p: PrincipalDep):
        from repoctx.providers.llm import ProviderNotConfigured, ProviderUnavailable

        scope = await threaded(svc.scope_for, p, req.repos)
        key = (p.name, req.session_id)
        if key in svc.busy:
            raise HTTPException(409, _error_body("session_busy", "a turn of this session is still running"))
        if len(svc.busy) >= conf.max_turns:
            raise HTTPException(
                429,
                _error_body("too_many_turns", f"{conf.max_turns} copilot turns are running: try again shortly"),
                headers={"Retry-After": "2"},
            )
        try:
            model = await svc.call(svc.model)
        except (ProviderNotConfigured, ProviderUnavailable) as e:
            raise HTTPException(503, _error_body(type(e).__name__, safe_detail(e, 400))) from None
        repo = await threaded(svc.session_repository, p.name)
        svc.busy.add(key)

        async def turn():
            from repoctx.copilot.agent import Limits, build_agent, stream_turn

            copilot = None
            try:
                tools = svc.tools_factory(svc.index, scope) if svc.tools_factory else None
                copilot = build_agent(
                    svc.index,
                    req.session_id,
                    p.name,
                    model=model,
                    scope=scope,
                    tools=tools,
                    session_repository=repo,
                    metrics_sinks=[svc.metrics],
                    limits=Limits(conf.turn_tool_calls, conf.turn_model_calls),
                )
                async for ev in stream_turn(copilot, req.message):
                    yield ev
            finally:
                if copilot is not None:
                    copilot.close()
                close = getattr(repo, "close", None)
                if callable(close) and not svc._postgres_sessions():
                    close()

        run = ThreadedRun(turn, name=f"repoctx-chat-{p.name}")
        svc.runs.add(run)
        loop = asyncio.get_running_loop()
        deadline = loop.time() + conf.stream_timeout

        def release() -> None:
            run.cancel()
            svc.busy.discard(key)
            svc.runs.discard(run)

        async def events():
            n = 0
            try:
                while True:
                    remaining = deadline - loop.time()
                    if remaining <= 0:
                        raise TimeoutError
                    kind, item = await asyncio.wait_for(run.queue.get(), remaining)
                    if kind == "end" or kind == "cancelled":
                        return
                    n += 1
                    if kind == "error":
                        data = stream_error(item, conf.retry_after)
                        svc.metrics.stream_errors.labels("/chat", data["error"]).inc()
                        yield _sse("error", data, n)
                        yield _sse("done", {"text": "", "stop_reason": "error"}, n + 1)
                        return
                    typ = item.get("type")
                    data = {k: v for k, v in item.items() if k != "type"}
                    if typ == "tool":
                        svc.metrics.tool_calls.labels(str(item.get("name", "?"))).inc()
                        yield _sse("tool", data, n)
                    elif typ == "tool_result":
                        yield _sse("trace", {"step": "tool_result", **data}, n)
                    elif typ == "error":
                        svc.metrics.stream_errors.labels("/chat", str(item.get("error"))).inc()
                        yield _sse("error", _error_body(str(item.get("error")), safe_detail(item.get("detail"))), n)
                    elif typ in ("token", "citation", "done"):
                        if typ == "done" and data.get("error"):
                            data["error"] = _error_body(
                                str(data["error"].get("error")), safe_detail(data["error"].get("detail"))
                            )
                        if typ == "done" and isinstance(data.get("metrics"), dict) and data["metrics"].get("error"):
                            data["metrics"] = {**data["metrics"], "error": safe_detail(data["metrics"]["error"])}
                        yield _sse(typ, data, n)
                        if typ == "done":
                            return
                    else:
                        yield _sse("trace", {"step": str(typ), **data}, n)
            except TimeoutError:
                run.cancel()
                svc.metrics.stream_errors.labels("/chat", "Timeout").inc()
                yield _sse(
                    "error",
                    _error_body("Timeout", f"the turn took longer than {conf.stream_timeout:g} s and was stopped"),
                    n + 1,
                )
                yield _sse("done", {"text": "", "stop_reason": "timeout"}, n + 2)
            except asyncio.CancelledError:  # the client left: stop the agent's run
                run.cancel()
                svc.metrics.disconnects.labels("/chat").inc()
                raise
            finally:
                release()

        from starlette.background import BackgroundTask

        return EventSourceResponse(events(), ping=15, send_timeout=30, background=BackgroundTask(release))

    # ---- repositories, jobs and push webhooks
    from repoctx.service.hooks import hooks_router
    from repoctx.service.repos import repos_router

    app.include_router(repos_router(svc, threaded))
    app.include_router(hooks_router(svc, threaded))

    # ---- the web pages (public HTML and assets; their data comes from the endpoints above, with the key)
    from repoctx.service.web import mount_static, web_router

    app.include_router(web_router(svc, threaded))
    mount_static(app)

    return app


def app_from_env() -> FastAPI:
    """``create_app()`` from the environment alone: the factory ``repoctx serve --workers N`` hands uvicorn
    (each uvicorn process builds its own app). ``REPOCTX_SERVE_JOBS`` sets its index-job threads."""
    jobs = os.environ.get("REPOCTX_SERVE_JOBS")
    return create_app(inprocess_workers=int(jobs) if jobs not in (None, "") else None)
