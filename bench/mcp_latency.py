"""MCP server latency on a real repository: Django 4.2 (the PyPI wheel, unpacked; never run), over stdio,
driven by the official MCP SDK client exactly as an agent would (``python -m repoctx.mcp --repo ...``).

    python bench/mcp_latency.py            # lexical only (REPOCTX_EMBEDDER=none)
    python bench/mcp_latency.py --dense    # also with dense vectors (REPOCTX_EMBEDDER=local)
    python bench/mcp_latency.py --json     # the numbers as JSON too

Django is indexed once per configuration into a temporary directory (default settings otherwise), then:

* start -> first answer: wall time from spawning the server process to the first ``search_code`` result
  (process start, imports, MCP initialize, opening the index, the search; with dense, loading the model),
  median of ``--starts`` fresh processes; "ready" is the same up to the end of the MCP handshake;
* per call: ``search_code`` over 30 fixed questions (k=10, mode standard), then ``get_context``,
  ``symbol``, ``callers`` and ``read_file`` over 10 calls each, in one session after the first answer;
  p50 / p95 of the client-side round trip (JSON-RPC over pipes included).

The table is printed and written to ``bench/results/mcp_latency.md``.
"""
from __future__ import annotations

import argparse
import asyncio
import json
import os
import platform
import statistics
import sys
import tempfile
import time
from pathlib import Path

from repoctx import Index, Settings
from repoctx.evaluate.corpus import fetch_wheel, materialize

CORPUS_ROW = {"corpus": {"pypi": "Django", "version": "4.2", "path_prefix": ""}, "instance_id": "bench"}
OUT = Path(__file__).parent / "results" / "mcp_latency.md"
LOAD_AT_START = os.getloadavg()[0]

QUESTIONS = [
    "how does the CSRF middleware verify the token",
    "where are database migrations applied",
    "how is a queryset filtered lazily",
    "password hashing with pbkdf2",
    "template variable resolution and filters",
    "how are URL patterns resolved to views",
    "session data stored in signed cookies",
    "how does the ORM build a SQL join",
    "form field validation and cleaning",
    "paginator page out of range",
    "cache key versioning in the cache backend",
    "send mail with attachments",
    "how is the request body parsed for multipart uploads",
    "model field default values and choices",
    "transaction atomic savepoints",
    "admin changelist search fields",
    "signals sent before and after model save",
    "static files storage with hashed names",
    "timezone aware datetimes conversion",
    "translation of strings with gettext lazily",
    "content type framework generic foreign key",
    "authentication backends check user permissions",
    "select_related and prefetch_related difference",
    "file upload handler limits memory",
    "how are HTTP redirects returned",
    "json response encoder for querysets",
    "management command argument parsing",
    "database connection reuse between requests",
    "slugify text for URLs",
    "aggregate Count and Sum annotations",
]
CONTEXT_Q = QUESTIONS[:10]
SYMBOLS = ["QuerySet", "get_token", "reverse", "Paginator", "atomic", "slugify", "authenticate", "render",
           "make_password", "get_object_or_404"]
FILES = ["django/db/models/query.py", "django/middleware/csrf.py", "django/urls/resolvers.py",
         "django/core/paginator.py", "django/db/transaction.py", "django/utils/text.py", "django/contrib/auth/__init__.py",
         "django/shortcuts.py", "django/contrib/auth/hashers.py", "django/http/response.py"]


def _pct(xs: list[float], q: float) -> float:
    xs = sorted(xs)
    if not xs:
        return float("nan")
    i = min(len(xs) - 1, max(0, round(q * (len(xs) - 1))))
    return xs[i]


def _client(root: Path, idx: Path, embedder: str):
    from mcp import Client, StdioServerParameters

    env = {"REPOCTX_INDEX_DIR": str(idx), "REPOCTX_EMBEDDER": embedder}
    if os.environ.get("REPOCTX_CACHE"):
        env["REPOCTX_CACHE"] = os.environ["REPOCTX_CACHE"]
    params = StdioServerParameters(command=sys.executable, args=["-m", "repoctx.mcp", "--repo", str(root)],
                                   env=env)
    return Client(params, read_timeout_seconds=300)


async def _start(root: Path, idx: Path, embedder: str) -> tuple[float, float]:
    t0 = time.perf_counter()
    async with _client(root, idx, embedder) as c:
        ready = time.perf_counter() - t0
        r = await c.call_tool("search_code", {"query": QUESTIONS[0], "k": 10, "mode": "standard"})
        first = time.perf_counter() - t0
        assert not r.is_error and r.structured_content["results"], r.content
    return ready, first


async def _calls(root: Path, idx: Path, embedder: str) -> dict[str, list[float]]:
    out: dict[str, list[float]] = {}

    async def timed(c, name, args):
        t = time.perf_counter()
        r = await c.call_tool(name, args)
        out.setdefault(name, []).append((time.perf_counter() - t) * 1000)
        assert not r.is_error, (name, args, r.content)
        return r

    async with _client(root, idx, embedder) as c:
        await c.call_tool("search_code", {"query": "warm up", "k": 10, "mode": "standard"})  # the first answer
        for q in QUESTIONS:
            await timed(c, "search_code", {"query": q, "k": 10, "mode": "standard"})
        for q in CONTEXT_Q:
            await timed(c, "get_context", {"query": q, "budget": 2000})
        for s in SYMBOLS:
            await timed(c, "symbol", {"name": s})
            await timed(c, "callers", {"symbol": s})
        for f in FILES:
            await timed(c, "read_file", {"path": f, "start": 1, "end": 120})
    return out


def run(embedder: str, root: Path, tmp: Path, starts: int) -> dict:
    idx = tmp / f"idx-{embedder}"
    t0 = time.perf_counter()
    with Index(root, Settings(index_dir=idx, embedder=embedder)) as ix:
        rep = ix.update()
        st = ix.status()
    index_s = time.perf_counter() - t0
    res = {"embedder": embedder, "index_s": round(index_s, 2), "files": st["counts"]["files"],
           "capsules": st["counts"]["capsules"], "vectors": st["vectors"]["count"], "new_files": len(rep.added)}
    ready, first = [], []
    for _ in range(starts):
        a, b = asyncio.run(_start(root, idx, embedder))
        ready.append(a)
        first.append(b)
    res["ready_s"] = round(statistics.median(ready), 3)
    res["first_answer_s"] = round(statistics.median(first), 3)
    res["first_answer_all_s"] = [round(x, 3) for x in first]
    calls = asyncio.run(_calls(root, idx, embedder))
    res["calls"] = {k: {"n": len(v), "p50_ms": round(_pct(v, 0.5), 1), "p95_ms": round(_pct(v, 0.95), 1)}
                    for k, v in calls.items()}
    return res


def table(results: list[dict], starts: int) -> str:
    lines = ["# MCP server latency (Django 4.2, stdio, official MCP SDK client)", "",
             f"Machine: {platform.machine()}, {os.cpu_count()} CPUs, Python {platform.python_version()}; "
             f"load average {LOAD_AT_START:.1f} at start, {os.getloadavg()[0]:.1f} at the end (other work on the "
             f"machine inflates every time). Run: `python bench/mcp_latency.py"
             f"{' --dense' if len(results) > 1 else ''}`.", "",
             "| configuration | index (s) | units | start → ready (s) | start → first search_code (s) |",
             "|---|---|---|---|---|"]
    for r in results:
        label = "lexical (REPOCTX_EMBEDDER=none)" if r["embedder"] == "none" else f"hybrid (REPOCTX_EMBEDDER={r['embedder']})"
        units = f"{r['capsules']} in {r['files']} files" + (f", {r['vectors']} vectors" if r["vectors"] else "")
        lines.append(f"| {label} | {r['index_s']} | {units} | {r['ready_s']} | {r['first_answer_s']} |")
    lines += ["", f"Start times: median of {starts} fresh processes (spawn, imports, MCP handshake, open the index; "
                  "with dense the first search also loads the embedding model).", "",
              "| configuration | tool | calls | p50 (ms) | p95 (ms) |", "|---|---|---|---|---|"]
    for r in results:
        label = "lexical" if r["embedder"] == "none" else "hybrid"
        for tool, c in r["calls"].items():
            lines.append(f"| {label} | {tool} | {c['n']} | {c['p50_ms']} | {c['p95_ms']} |")
    lines += ["", "Per-call: client-side round trip in one session after the first answer (search_code: 30 fixed "
                  "questions, k=10, mode standard; get_context budget 2000; read_file 120-line ranges)."]
    return "\n".join(lines) + "\n"


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--dense", action="store_true", help="also REPOCTX_EMBEDDER=local (vectors)")
    ap.add_argument("--starts", type=int, default=3, help="fresh processes timed for start -> first answer")
    ap.add_argument("--json", action="store_true")
    ap.add_argument("--no-save", action="store_true")
    a = ap.parse_args()
    fetch_wheel("Django", "4.2")
    root = materialize(CORPUS_ROW)
    results = []
    with tempfile.TemporaryDirectory(prefix="repoctx-mcp-bench-") as tmp:
        for emb in (["none", "local"] if a.dense else ["none"]):
            print(f"[{emb}] indexing and timing ...", file=sys.stderr, flush=True)
            results.append(run(emb, root, Path(tmp), a.starts))
    md = table(results, a.starts)
    print(md)
    if a.json:
        print(json.dumps(results, indent=1))
    if not a.no_save:
        OUT.parent.mkdir(parents=True, exist_ok=True)
        OUT.write_text(md)


if __name__ == "__main__":
    main()
