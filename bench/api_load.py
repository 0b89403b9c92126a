"""Load on the HTTP service: ``POST /search`` over Django 4.2, SQLite and PostgreSQL, in one run.

    python bench/api_load.py                       # 8 clients, both backends, 1 and 2 server processes,
                                                   # writes bench/results/api_load.md
    python bench/api_load.py --clients 4 8 16 --seconds 15 --server-workers 2
    python bench/api_load.py --backend sqlite --json

What it does, per backend:

* Django 4.2 from its PyPI wheel (``repoctx.evaluate.corpus``: ``fetch_wheel`` + ``materialize``), indexed
  lexically only -- ``REPOCTX_EMBEDDER=none`` -- to keep the run short (dense search adds a query embedding,
  ~5 ms of CPU, to each request); into a SQLite index folder, or a fresh PostgreSQL database (pgvector)
  from ``REPOCTX_DATABASE_URL``'s server or one started from pip as the tests do;
* ``repoctx serve`` in a subprocess on 127.0.0.1 (uvicorn, access log off), an admin key and a scoped key
  (a role granting ``django`` minus ``tests/*``: its grants go into every query's WHERE clause);
* N client threads, each with one keep-alive connection, send the same deterministic 200 queries (docstring
  first lines and identifiers, fixed seed), k=10, mode ``standard``, for ``--seconds`` or ``--max-requests``
  (whichever comes first), after a warm-up; throughput = answered requests / wall time, latency = client-side
  wall time of each request (p50/p95/p99). Bounded in count and time; loopback only; stops by itself.
"""
from __future__ import annotations

import argparse
import http.client
import json
import os
import platform
import random
import shutil
import socket
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT / "src"))

from repoctx import Index, Settings  # noqa: E402
from repoctx.evaluate.corpus import fetch_wheel, materialize  # noqa: E402

CORPUS_ROW = {"corpus": {"pypi": "Django", "version": "4.2", "path_prefix": ""}, "instance_id": "bench"}
SEED = 20240601
N_QUERIES = 200
GOAL_RPS, GOAL_P95_MS, GOAL_CLIENTS = 200.0, 100.0, 8
OUT = ROOT / "bench" / "results" / "api_load.md"


def log(msg: str) -> None:
    print(msg, file=sys.stderr, flush=True)


def make_queries(ix: Index) -> list[str]:
    rng = random.Random(SEED)
    caps = [c for c in ix.store.all_capsules() if c.kind in ("function", "method", "class")]
    rng.shuffle(caps)
    out: list[str] = []
    for c in caps:
        if "/tests/" in c.path or not c.docstring:
            continue
        first = c.docstring.strip().splitlines()[0].strip().rstrip(".")
        if len(first.split()) >= 4:
            out.append(first)
        if len(out) >= N_QUERIES - 20:
            break
    out += [c.name for c in caps[:20]]
    return out


def postgres_url() -> str:
    sys.path.insert(0, str(ROOT))
    from repoctx.copilot import sessions
    from repoctx.service.auth import migrate_postgres
    from repoctx.store.postgres import migrate
    from tests.pg import fresh_database

    url = fresh_database()
    migrate(url)
    sessions.migrate_postgres(url)
    migrate_postgres(url)
    return url


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


class Server:
    def __init__(self, env: dict, workers: int):
        self.port = free_port()
        self.proc = subprocess.Popen(
            [sys.executable, "-m", "repoctx.cli.service", "serve", "--port", str(self.port), "--log-level", "warning",
             "--workers", str(workers), "--jobs", "0"],
            env=env, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
        deadline = time.time() + 60
        while time.time() < deadline:
            if self.proc.poll() is not None:
                raise RuntimeError("the server exited: " + self.proc.stderr.read().decode()[-2000:])
            try:
                conn = http.client.HTTPConnection("127.0.0.1", self.port, timeout=2)
                conn.request("GET", "/health")
                resp = conn.getresponse()
                body = json.loads(resp.read() or b"{}")
                # SQLite: wait for BM25 in memory (built at start) so the run measures the steady state
                if resp.status == 200 and body.get("lexical", "memory") == "memory":
                    conn.close()
                    return
                time.sleep(0.2)
            except OSError:
                time.sleep(0.1)
        self.stop()
        raise RuntimeError("the server did not answer /health within 60 s")

    def stop(self) -> None:
        if self.proc.poll() is None:
            self.proc.terminate()
            try:
                self.proc.wait(20)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait(10)


def drive(port: int, key: str, queries: list[str], clients: int, seconds: float, max_requests: int,
          path: str = "/search") -> dict:
    """``clients`` threads, each one keep-alive connection, until the time or request budget is spent."""
    lat: list[list[float]] = [[] for _ in range(clients)]
    errors = [0] * clients
    budget = threading.Semaphore(max_requests)
    stop_at = [0.0]
    start = threading.Barrier(clients + 1)
    headers = {"Authorization": f"Bearer {key}", "Content-Type": "application/json"}

    def client(i: int) -> None:
        conn = http.client.HTTPConnection("127.0.0.1", port, timeout=30)
        n = i * 7
        start.wait()
        while time.perf_counter() < stop_at[0] and budget.acquire(blocking=False):
            body = json.dumps({"query": queries[n % len(queries)], "k": 10, "mode": "standard"})
            n += 1
            t0 = time.perf_counter()
            try:
                if path == "/search":
                    conn.request("POST", "/search", body=body, headers=headers)
                else:
                    conn.request("GET", path, headers=headers)
                resp = conn.getresponse()
                data = resp.read()
                ok = resp.status == 200 and (path != "/search" or b'"results"' in data)
            except OSError:
                ok = False
                conn.close()
                conn = http.client.HTTPConnection("127.0.0.1", port, timeout=30)
            lat[i].append(time.perf_counter() - t0)
            errors[i] += 0 if ok else 1
        conn.close()

    threads = [threading.Thread(target=client, args=(i,), daemon=True) for i in range(clients)]
    for t in threads:
        t.start()
    stop_at[0] = time.perf_counter() + seconds
    t0 = time.perf_counter()
    start.wait()
    for t in threads:
        t.join(seconds + 60)
    wall = time.perf_counter() - t0
    all_lat = sorted(x for xs in lat for x in xs)
    n = len(all_lat)

    def pct(p: float) -> float:
        return all_lat[min(n - 1, int(p * n))] * 1000 if n else float("nan")

    return {"clients": clients, "requests": n, "errors": sum(errors), "seconds": round(wall, 2),
            "rps": round((n - sum(errors)) / wall, 1) if wall else 0.0, "p50_ms": round(pct(0.50), 1),
            "p95_ms": round(pct(0.95), 1), "p99_ms": round(pct(0.99), 1),
            "mean_ms": round(statistics.fmean(all_lat) * 1000, 1) if n else float("nan")}


def run_backend(backend: str, tree: Path, tmp: Path, args) -> list[dict]:
    from repoctx.service.auth import KeyStore
    from repoctx.service.db import ServiceDB, service_db_target

    url = postgres_url() if backend == "postgres" else ""
    settings = Settings(index_dir=tmp / f"ix-{backend}", embedder="none", database_url=url or None)
    t0 = time.perf_counter()
    ix = Index(tree, settings, name="django")
    ix.update()
    index_s = time.perf_counter() - t0
    counts = ix.store.counts()
    queries = make_queries(ix)
    log(f"{backend}: indexed {counts['files']} files, {counts['capsules']} capsules in {index_s:.1f} s")
    rows = []
    if args.baseline:  # the same searches in-process, one thread, no HTTP: what the library itself costs now
        from repoctx.store.base import Grant, Scope

        scopes = {"admin": None, "scoped": Scope(grants=(Grant("django", (), ("tests/*",)),))}
        for who in args.keys:
            for q in queries[:5]:
                ix.retrieve(q, k=10, mode="standard", scope=scopes[who])
            lat = []
            t_all = time.perf_counter()
            for q in queries:
                t0 = time.perf_counter()
                ix.retrieve(q, k=10, mode="standard", scope=scopes[who])
                lat.append(time.perf_counter() - t0)
            wall = time.perf_counter() - t_all
            lat.sort()
            rows.append({"backend": backend, "key": who, "clients": "in-process", "server_workers": 0,
                         "requests": len(lat), "errors": 0, "seconds": round(wall, 2),
                         "rps": round(len(lat) / wall, 1), "p50_ms": round(lat[len(lat) // 2] * 1000, 1),
                         "p95_ms": round(lat[int(0.95 * len(lat))] * 1000, 1),
                         "p99_ms": round(lat[int(0.99 * len(lat))] * 1000, 1),
                         "files": counts["files"], "capsules": counts["capsules"]})
            log(f"{backend} {who} in-process: p50 {rows[-1]['p50_ms']} ms, p95 {rows[-1]['p95_ms']} ms")
    ix.close()
    ks = KeyStore(ServiceDB(service_db_target(settings)), cache_seconds=0, owns_db=True)
    ks.add_role("reader", repo="django", exclude=["tests/*"])
    keys = {"admin": ks.add_key("bench-admin", "admin")[1], "scoped": ks.add_key("bench-reader", "reader")[1]}
    ks.close()
    env = {**os.environ, "REPOCTX_EMBEDDER": "none", "REPOCTX_INDEX_DIR": str(settings.index_dir),
           "PYTHONPATH": str(ROOT / "src"), "REPOCTX_KEY_CACHE": "30",
           "REPOCTX_RATE_LIMIT": ""}  # the benchmark measures throughput: one key sends far past a per-key limit
    env.pop("REPOCTX_DATABASE_URL", None)
    if url:
        env["REPOCTX_DATABASE_URL"] = url
    for workers in args.server_workers:
        server = Server(env, workers)
        try:
            if workers == args.server_workers[0]:  # the HTTP layer alone: auth, routing, JSON, no search
                drive(server.port, keys["admin"], queries, 4, 1.0, 100, path="/repos")
                r = drive(server.port, keys["admin"], queries, GOAL_CLIENTS, min(args.seconds, 5.0),
                          args.max_requests, path="/repos")
                r.update(backend=backend, key="admin (GET /repos)", server_workers=workers,
                         files=counts["files"], capsules=counts["capsules"])
                log(f"{backend} GET /repos {workers} proc: {r['rps']} req/s, p95 {r['p95_ms']} ms")
                rows.append(r)
            for who in args.keys:
                drive(server.port, keys[who], queries, 4, 2.0, 200)  # warm-up: caches, pools, first-query costs
                for n in args.clients:
                    r = drive(server.port, keys[who], queries, n, args.seconds, args.max_requests)
                    r.update(backend=backend, key=who, server_workers=workers,
                             files=counts["files"], capsules=counts["capsules"])
                    log(f"{backend} {who} {workers} proc {n} clients: {r['rps']} req/s, p50 {r['p50_ms']} ms, "
                        f"p95 {r['p95_ms']} ms, {r['errors']} errors")
                    rows.append(r)
        finally:
            server.stop()
    return rows


def markdown(rows: list[dict], meta: dict) -> str:
    lines = [f"`POST /search` over Django 4.2 ({rows[0]['files']} files, {rows[0]['capsules']} capsules), "
             f"lexical only (`REPOCTX_EMBEDDER=none`), k=10, mode standard; `repoctx serve` (uvicorn) and the "
             f"client threads on one machine: {meta['cpus']} CPUs, load avg 1m/5m before {meta['load_before']}, "
             f"after {meta['load_after']} (other work on the machine counts), Python {meta['python']}. Each run: "
             f"{meta['seconds']:g} s or {meta['max_requests']} requests, keep-alive connections, latency measured at "
             "the client. Key `admin`: no access rule; `scoped`: a role granting `django` minus `tests/*` (its rule "
             "is part of every query). Rows `in-process`: the same 200 searches through `Index.retrieve` in one "
             "thread, no HTTP, just before -- what the library itself costs on the machine at that moment. Rows "
             "`GET /repos`: the HTTP layer alone (key check, routing, a small JSON answer), no search.", "",
             "| backend | key | server processes | clients | requests | errors | req/s | p50 ms | p95 ms | p99 ms |",
             "|---|---|---|---|---|---|---|---|---|---|"]
    for r in rows:
        lines.append(f"| {r['backend']} | {r['key']} | {r['server_workers'] or '-'} | {r['clients']} | {r['requests']} | "
                     f"{r['errors']} | {r['rps']:.0f} | {r['p50_ms']:.1f} | {r['p95_ms']:.1f} | {r['p99_ms']:.1f} |")
    lines += ["", f"Goal: at least {GOAL_RPS:.0f} req/s with p95 at most {GOAL_P95_MS:.0f} ms at "
                  f"{GOAL_CLIENTS} clients."]
    for r in rows:
        if r["clients"] == GOAL_CLIENTS and r["key"] in ("admin", "scoped"):
            ok = r["rps"] >= GOAL_RPS and r["p95_ms"] <= GOAL_P95_MS and not r["errors"]
            lines.append(f"- {r['backend']}, {r['key']} key, {r['server_workers']} server process"
                         f"{'es' if r['server_workers'] > 1 else ''}: {r['rps']:.0f} req/s, p95 {r['p95_ms']:.1f} ms: "
                         + ("met" if ok else "**not met**"))
    lines += ["", "Reproduce: `python bench/api_load.py` " + meta["argv"]]
    return "\n".join(lines) + "\n"


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--backend", choices=("sqlite", "postgres", "both"), default="both")
    ap.add_argument("--clients", type=int, nargs="+", default=[GOAL_CLIENTS])
    ap.add_argument("--keys", nargs="+", choices=("admin", "scoped"), default=["admin", "scoped"])
    ap.add_argument("--seconds", type=float, default=10.0)
    ap.add_argument("--max-requests", type=int, default=20000)
    ap.add_argument("--server-workers", type=int, nargs="+", default=[1, 2], help="uvicorn processes (each value: a run)")
    ap.add_argument("--no-baseline", dest="baseline", action="store_false",
                    help="skip the in-process (no HTTP) searches")
    ap.add_argument("--json", action="store_true")
    ap.add_argument("--no-write", action="store_true", help="do not write bench/results/api_load.md")
    args = ap.parse_args()
    if max(args.clients) > 64 or args.seconds > 120:
        ap.error("at most 64 clients and 120 s per run")
    tree = materialize(CORPUS_ROW)
    fetch_wheel("Django", "4.2")  # cached by materialize; named here so the source is explicit
    meta = {"cpus": os.cpu_count(), "load_before": "/".join(f"{x:.2f}" for x in os.getloadavg()[:2]),
            "python": platform.python_version(), "seconds": args.seconds, "max_requests": args.max_requests,
            "argv": " ".join(sys.argv[1:])}
    backends = ["sqlite", "postgres"] if args.backend == "both" else [args.backend]
    tmp = Path(tempfile.mkdtemp(prefix="repoctx-api-load-"))
    rows: list[dict] = []
    try:
        for b in backends:
            rows += run_backend(b, tree, tmp, args)
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    meta["load_after"] = "/".join(f"{x:.2f}" for x in os.getloadavg()[:2])
    text = markdown(rows, meta)
    if args.json:
        print(json.dumps({"meta": meta, "rows": rows}, indent=2))
    else:
        print(text)
    if not args.no_write:
        OUT.parent.mkdir(parents=True, exist_ok=True)
        OUT.write_text(text)
        log(f"wrote {OUT.relative_to(ROOT)}")


if __name__ == "__main__":
    main()
