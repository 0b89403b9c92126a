"""A big tree as a new user meets it (issue 39's baseline): Django 4.2's whole sdist — docs/, tests/, locale
files — indexed by the ``repoctx`` commands, beside code-index-mcp (from PyPI) in the same run.

    python bench/big_tree.py                        # everything below, table to bench/results/big_tree.md
    python bench/big_tree.py --no-vectors --no-peer # the lexical part only (a minute or two)
    python bench/big_tree.py --tree DIR             # another tree (default: the Django 4.2.16 sdist)

The sdist comes from ``pip download --no-binary :all: --no-deps Django==4.2.16`` and is unpacked under
/tmp/repoctx-bigtree (never in the repository); each run copies it to a temporary folder, so edits never
touch it. Every command runs as a child process, its peak RSS from ``os.wait4`` (its own, not the bench's),
with a private ``REPOCTX_INDEX_DIR`` and ``REPOCTX_CACHE`` (a cold vector cache, no location records left
behind). Phases:

* cold index, lexical + graph — ``REPOCTX_EMBEDDER=none repoctx index TREE --json``, after ``sync`` (the tree was
  just copied) and one untimed index of django/db (libraries read from disk, modules compiled), waited for; its
  summed PSS from a second cold run, sampled;
* index on disk — the index folder's files, and SQLite's ``dbstat`` share of each table and index (FTS5's
  shadow tables listed under their own names);
* no-op reindex and one-file reindex (a function appended to django/db/models/query.py), median of 3,
  each the command's wall and the update's own seconds;
* one ``repoctx search`` from the shell, lexical (no vectors) and hybrid, median of 3 walls, largest RSS;
* cold index with vectors: ``repoctx index`` with the default model into a fresh index and an empty vector
  cache; when every code unit was searchable by meaning (the fill embeds code first, vectors.EMBED_ORDER,
  and publishes each class as it completes), and each class's count;
* the same cold lexical index with a second CPU-bound process running (a bounded ``while 1: pass``,
  killed after);
* watching (repoctx/watch.py): the folders the walk enters, the time to list them and to set up their
  watches, and a save's latency to a search of the running MCP server (``RepoctxMCP`` in process); the
  same setup on synthetic trees of 10,000 and 30,000 folders (what ``REPOCTX_WATCH_MAX_DIRS`` is set by);
* code-index-mcp (``pip install code-index-mcp==2.17.1`` into its own venv under /tmp), driven over stdio
  with the MCP SDK as a client would: ``set_project_path`` then ``build_deep_index``, idle and with the
  CPU-bound process; peak RSS is the server's VmHWM, disk its index folder (its ``TMPDIR``).

The machine is shared: the load average is printed at each phase. Times are rough; ratios are better.
"""
from __future__ import annotations

import argparse
import asyncio
import json
import os
import platform
import shutil
import sqlite3
import statistics
import subprocess
import sys
import tarfile
import tempfile
import threading
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent
BIN = Path(sys.executable).parent
REPOCTX = str(BIN / "repoctx")
DJANGO = "Django==4.2.16"
CACHE = Path("/tmp/repoctx-bigtree")
PEER_VENV = CACHE / "cim-venv"
PEER = "code-index-mcp==2.17.1"
EDIT_FILE = "django/db/models/query.py"
LEXICAL_Q = "prefetch related objects for a queryset"
HYBRID_Q = "where are the objects related to a queryset fetched in bulk?"
BURN_S = 900  # the CPU-bound process ends by itself after this long at most


def _mib(n_bytes: float) -> float:
    return n_bytes / 2 ** 20


def _load() -> str:
    return "/".join(f"{x:.2f}" for x in os.getloadavg())


# ------------------------------------------------------------------------------------------ the tree
def django_tree() -> Path:
    """The unpacked sdist under /tmp/repoctx-bigtree (downloaded once with pip)."""
    tree = CACHE / "Django-4.2.16"
    if (tree / "django" / "__init__.py").is_file():
        return tree
    dl = CACHE / "dl"
    dl.mkdir(parents=True, exist_ok=True)
    subprocess.run([sys.executable, "-m", "pip", "download", "-q", "--no-binary", ":all:", "--no-deps", DJANGO,
                    "-d", str(dl)], check=True)
    with tarfile.open(next(dl.glob("Django-4.2.16.tar.gz"))) as tf:
        tf.extractall(CACHE, filter="data")
    return tree


# ------------------------------------------------------------------------------------------ children
def _tree_pids(pid: int) -> list[int]:
    """The process and its descendants (a forked parse worker), from /proc/<pid>/task/*/children."""
    out, todo = [], [pid]
    while todo:
        p = todo.pop()
        out.append(p)
        try:
            for t in os.listdir(f"/proc/{p}/task"):
                with open(f"/proc/{p}/task/{t}/children") as f:
                    todo += [int(c) for c in f.read().split()]
        except OSError:  # gone meanwhile
            pass
    return out


def _pss_kib(pid: int) -> int:
    """Proportional set size: its private pages plus its share of the pages it shares (a fork's copy-on-write
    pages count half in each of two processes), so a sum over a process tree counts each page once."""
    try:
        with open(f"/proc/{pid}/smaps_rollup") as f:
            for line in f:
                if line.startswith("Pss:"):
                    return int(line.split()[1])
    except OSError:
        pass
    return 0


def run(cmd: list[str], env: dict, cwd: Path | None = None, timeout: float = 3600, sample_pss: bool = True) -> dict:
    """Run a command; its wall time, peak RSS (MiB, from wait4: the largest single process of the command and
    its children), the peak of its process tree's summed PSS (MiB, sampled every 50 ms from /proc) and output.
    ``sample_pss=False`` (the sub-second commands): no sampling, one blocking wait. Reading /proc's smaps of the
    process every 50 ms (and polling every 10 ms) slows what it measures: a one-file reindex with its vector
    measured 0.535 s (min of 5) sampled against 0.492 s waited for (alternating, load ~1.7)."""
    t0 = time.perf_counter()
    p = subprocess.Popen(cmd, env=env, cwd=cwd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    out: dict[str, str] = {}
    readers = [threading.Thread(target=lambda k, f: out.__setitem__(k, f.read()), args=(k, f), daemon=True)
               for k, f in (("stdout", p.stdout), ("stderr", p.stderr))]
    for r in readers:
        r.start()
    deadline = t0 + timeout
    pss, pss_procs, sampled = 0, 1, 0.0
    if not sample_pss:
        timer = threading.Timer(timeout, p.kill)
        timer.start()
        _, status, ru = os.wait4(p.pid, 0)
        timer.cancel()
        pss_procs = 0
    while sample_pss:
        pid, status, ru = os.wait4(p.pid, os.WNOHANG)
        if pid:
            break
        if time.perf_counter() > deadline:
            p.kill()
        if time.perf_counter() - sampled >= 0.05:
            sampled = time.perf_counter()
            pids = _tree_pids(p.pid)
            total = sum(_pss_kib(q) for q in pids)
            if total > pss:
                pss, pss_procs = total, len(pids)
        time.sleep(0.01)
    wall = time.perf_counter() - t0
    for r in readers:
        r.join()
    p.returncode = os.waitstatus_to_exitcode(status)
    if p.returncode != 0:
        raise RuntimeError(f"{' '.join(cmd)} exited {p.returncode}: {out.get('stderr', '')[-2000:]}")
    return {"wall": wall, "rss": ru.ru_maxrss / 1024, "pss": pss / 1024, "pss_procs": pss_procs,
            "stdout": out.get("stdout", ""), "user": ru.ru_utime, "sys": ru.ru_stime}


class Burner:
    """A second CPU-bound process for the length of a ``with`` block (bounded by BURN_S, killed after)."""

    def __enter__(self):
        code = f"import time\nend = time.time() + {BURN_S}\nwhile time.time() < end: pass\n"
        self.p = subprocess.Popen([sys.executable, "-c", code])
        time.sleep(1.0)  # let it take its core
        return self

    def __exit__(self, *exc):
        self.p.kill()
        self.p.wait()


def repoctx_env(run_dir: Path, index_dir: Path, embedder: str) -> dict:
    env = dict(os.environ)
    for k in list(env):
        # PYTHONDONTWRITEBYTECODE (set on the machines here) compiles every module of repoctx in every command, ~0.09 s
        # of a one-shot search: a user's install has its .pyc (pip writes them; an editable install on first use)
        if k.startswith("REPOCTX_") or k == "PYTHONDONTWRITEBYTECODE":
            del env[k]
    env.update(REPOCTX_INDEX_DIR=str(index_dir), REPOCTX_CACHE=str(run_dir / "cache"), REPOCTX_EMBEDDER=embedder)
    return env


# ------------------------------------------------------------------------------------------ disk
def folder_bytes(d: Path) -> int:
    return sum(p.stat().st_size for p in d.rglob("*") if p.is_file())


def dbstat(db: Path) -> list[tuple[str, int]]:
    con = sqlite3.connect(f"file:{db}?mode=ro", uri=True)
    try:
        rows = con.execute("SELECT name, SUM(pgsize) FROM dbstat GROUP BY name ORDER BY 2 DESC").fetchall()
    finally:
        con.close()
    return [(n, int(b)) for n, b in rows]


def counts(tree: Path, index_dir: Path) -> dict:
    from repoctx import Index, Settings

    with Index(tree, Settings(index_dir=index_dir, embedder="none"), create=False) as ix:
        return dict(ix.store.counts(ix.scope()))


# ------------------------------------------------------------------------------------------ repoctx
def index_cmd(tree: Path, env: dict, sample_pss: bool = True) -> dict:
    r = run([REPOCTX, "index", str(tree), "--json"], env, sample_pss=sample_pss)
    r["report"] = json.loads(r["stdout"])
    return r


def search_cmd(tree: Path, env: dict, query: str, n: int = 3) -> dict:
    runs = [run([REPOCTX, "search", query, "--repo", str(tree), "-k", "10"], env, sample_pss=False) for _ in range(n)]
    return {"wall": statistics.median(r["wall"] for r in runs), "rss": max(r["rss"] for r in runs),
            "top": runs[-1]["stdout"].strip().splitlines()[:2]}


def edit(tree: Path, i: int) -> None:
    with open(tree / EDIT_FILE, "a", encoding="utf-8") as f:
        f.write(f"\n\ndef bench_added_function_{i}(queryset, n={i}):\n    \"\"\"Added by bench/big_tree.py.\"\"\"\n"
                f"    return list(queryset)[:n]\n")


def list_and_watch(root: Path) -> dict:
    """How many folders below root, how long listing them took, and how long setting a watch on them took."""
    from watchfiles._rust_notify import RustNotify

    from repoctx.ingest.walk import walk_dirs

    t0 = time.perf_counter()
    folders = [f.path for f in walk_dirs(root)]
    listed = time.perf_counter() - t0
    t0 = time.perf_counter()
    with RustNotify(folders, False, False, 300, False, False):
        setup = time.perf_counter() - t0
    return {"folders": len(folders), "list_s": listed, "setup_s": setup}


def watch_phase(tree: Path, index_dir: Path) -> dict:
    """Folders watched, their listing and setup times, and a save's latency to a search of the MCP server."""
    from repoctx import Settings
    from repoctx.mcp import RepoctxMCP

    out = list_and_watch(tree)
    state = RepoctxMCP([tree], Settings(index_dir=index_dir, embedder="none"))
    try:
        w = state.repos[next(iter(state.repos))].watcher
        w.wait_ready(60)
        state.wait_refresh(120)
        cpu0 = time.process_time()
        time.sleep(5)
        out["idle_cpu_ms_per_s"] = (time.process_time() - cpu0) * 1000 / 5
        path = tree / "django" / "utils" / "bench_watch_probe.py"
        path.write_text('def bench_watch_probe_marker():\n    """Saved while watched."""\n    return 1\n')
        t0 = time.perf_counter()
        while True:
            r = state.call("symbol", {"name": "bench_watch_probe_marker"})
            if r.get("count"):
                out["save_to_found_s"] = time.perf_counter() - t0
                break
            if time.perf_counter() - t0 > 60:
                out["save_to_found_s"] = float("nan")
                break
            time.sleep(0.02)
        path.unlink()
        t0 = time.perf_counter()
        while state.call("symbol", {"name": "bench_watch_probe_marker"}).get("count"):
            if time.perf_counter() - t0 > 60:
                break
            time.sleep(0.02)
        out["delete_to_gone_s"] = time.perf_counter() - t0
        out["status"] = w.status()["note"]
    finally:
        state.close()
    return out


def synthetic_watch(base: Path, n: int) -> dict:
    """Listing and watch setup over a tree of n empty folders (100 per parent)."""
    root = base / f"folders-{n}"
    for i in range(n // 100):
        for j in range(99):
            (root / f"a{i}" / f"b{j}").mkdir(parents=True, exist_ok=True)
    out = list_and_watch(root)
    shutil.rmtree(root)
    return out


# ------------------------------------------------------------------------------------------ the peer
def peer_python() -> Path | None:
    py = PEER_VENV / "bin" / "python"
    if (PEER_VENV / "bin" / "code-index-mcp").exists():
        return py
    try:
        subprocess.run(["python3", "-m", "venv", str(PEER_VENV)], check=True, capture_output=True)
        subprocess.run([str(py), "-m", "pip", "install", "-q", PEER], check=True, capture_output=True, timeout=600)
    except (subprocess.SubprocessError, OSError) as e:
        print(f"code-index-mcp: not installed ({e}); skipped", file=sys.stderr)
        return None
    return py


def _vmhwm(marker: str) -> float | None:
    """Peak RSS (MiB) of the code-index-mcp process whose TMPDIR is ``marker``."""
    for env_file in Path("/proc").glob("[0-9]*/environ"):
        try:
            if f"TMPDIR={marker}".encode() not in env_file.read_bytes().split(b"\0"):
                continue
            status = (env_file.parent / "status").read_text()
        except OSError:
            continue
        for line in status.splitlines():
            if line.startswith("VmHWM:"):
                return int(line.split()[1]) / 1024
    return None


def peer_index(tree: Path, work: Path) -> dict:
    from mcp import Client, StdioServerParameters

    work.mkdir(parents=True, exist_ok=True)
    env = {"PATH": os.environ.get("PATH", ""), "HOME": str(work), "TMPDIR": str(work),
           "FILE_WATCHER_ENABLED": "false"}
    params = StdioServerParameters(command=str(PEER_VENV / "bin" / "code-index-mcp"),
                                   args=["--indexer-path", str(work / "settings")], env=env)

    async def go() -> dict:
        async with Client(params, read_timeout_seconds=1800) as c:
            t0 = time.perf_counter()
            r1 = await c.call_tool("set_project_path", {"path": str(tree)})
            shallow = time.perf_counter() - t0
            r2 = await c.call_tool("build_deep_index", {})
            total = time.perf_counter() - t0
            t0 = time.perf_counter()
            await c.call_tool("search_code_advanced", {"pattern": "def prefetch_related_objects"})
            search = time.perf_counter() - t0
            rss = _vmhwm(str(work))
            text = " ".join(getattr(x, "text", "") for x in [*r1.content, *r2.content])
        return {"shallow_s": shallow, "wall": total, "rss": rss, "search_s": search, "said": text[:200]}

    out = asyncio.run(go())
    out["disk"] = folder_bytes(work / "code_indexer") if (work / "code_indexer").exists() else folder_bytes(work)
    return out


# ------------------------------------------------------------------------------------------ main
def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--tree", type=Path, default=None)
    ap.add_argument("--out", type=Path, default=HERE / "results" / "big_tree.md")
    ap.add_argument("--no-vectors", action="store_true", help="skip the vectors fill and the hybrid search")
    ap.add_argument("--no-peer", action="store_true", help="skip code-index-mcp")
    ap.add_argument("--no-load", action="store_true", help="skip the runs beside a CPU-bound process")
    args = ap.parse_args()

    src = args.tree.resolve() if args.tree else django_tree()
    run_dir = Path(tempfile.mkdtemp(prefix="repoctx-bigtree-"))
    rows: list[tuple[str, str, str]] = []  # (what, repoctx, code-index-mcp)
    notes: list[str] = []
    loads = {"start": _load()}
    started = time.strftime("%Y-%m-%d %H:%M")
    try:
        tree = run_dir / src.name
        shutil.copytree(src, tree, symlinks=True)
        # the copy's 60 MB of dirty pages would be written back while the index runs (an fsync commits the file
        # system's journal, and the copy's data with it): measured here, that is the bench's cost, not repoctx's
        os.sync()
        idx = run_dir / "idx"
        lex = repoctx_env(run_dir, idx, "none")
        # one untimed index of a part of the tree first: a command's first run after a boot or an install reads its
        # libraries from disk and compiles repoctx's modules (an installed copy has them compiled); a user's does not
        index_cmd(tree / "django" / "db", repoctx_env(run_dir, run_dir / "idx-warm", "none"), sample_pss=False)

        # cold, lexical + graph: waited for, not sampled (reading /proc every 50 ms takes CPU from what it measures)
        loads["cold"] = _load()
        cold = index_cmd(tree, lex, sample_pss=False)
        # the same again into another index, its processes' PSS sampled: the pair's memory, not its time
        cold_pss = index_cmd(tree, repoctx_env(run_dir, run_dir / "idx-pss", "none"))
        cold["pss"], cold["pss_procs"] = cold_pss["pss"], cold_pss["pss_procs"]
        c = counts(tree, idx)
        disk = folder_bytes(idx)
        stat = dbstat(idx / "index.sqlite")
        print(f"cold: {cold['wall']:.1f} s, {cold['rss']:.0f} MiB (summed PSS {cold['pss']:.0f}), {c}", flush=True)

        # the peer, idle, in the same minutes
        peer = None
        if not args.no_peer and peer_python() is not None:
            loads["peer"] = _load()
            try:
                peer = peer_index(tree, run_dir / "cim")
                print(f"code-index-mcp: {peer}", flush=True)
            except Exception as e:  # noqa: BLE001 - the table says why it is missing
                notes.append(f"code-index-mcp failed: {type(e).__name__}: {e}")
                print(notes[-1], file=sys.stderr)

        # no-op and one-file reindex
        loads["reindex"] = _load()
        noops = [index_cmd(tree, lex, sample_pss=False) for _ in range(3)]
        edits = []
        for i in range(3):
            edit(tree, i)
            edits.append(index_cmd(tree, lex, sample_pss=False))
        assert all(e["report"]["modified"] == [EDIT_FILE] for e in edits), [e["report"]["modified"] for e in edits]

        # one-shot lexical search
        loads["search"] = _load()
        s_lex = search_cmd(tree, lex, LEXICAL_Q)

        # watching
        loads["watch"] = _load()
        watch = watch_phase(tree, idx)
        synth = [synthetic_watch(run_dir, n) for n in (10_000, 30_000)]
        print(f"watch: {watch} {synth}", flush=True)

        # vectors and hybrid search
        vec = s_hyb = None
        if not args.no_vectors:
            loads["vectors"] = _load()
            # cold, lexical + graph + vectors in one command, into its own index and an empty vector cache
            vidx = run_dir / "idx-vec"
            dense = repoctx_env(run_dir, vidx, "local")
            dense["REPOCTX_CACHE"] = str(run_dir / "cache-vec")
            vec = index_cmd(tree, dense)
            vec["disk"] = folder_bytes(vidx)
            vec["cache"] = folder_bytes(run_dir / "cache-vec")
            print(f"vectors: {vec['wall']:.1f} s, {vec['rss']:.0f} MiB, {vec['report'].get('vectors')}", flush=True)
            s_hyb = search_cmd(tree, dense, HYBRID_Q)
            # the acceptance line's reindex: with the edited unit's vector (the index above holds every vector)
            vec_noops = [index_cmd(tree, dense, sample_pss=False) for _ in range(3)]
            vec_edits = []
            for i in range(3):
                edit(tree, 10 + i)
                vec_edits.append(index_cmd(tree, dense, sample_pss=False))
            bad = [e["report"]["modified"] for e in vec_edits if e["report"]["modified"] != [EDIT_FILE]]
            assert not bad, bad

        # cold again beside a CPU-bound process (and the peer too)
        busy = peer_busy = None
        if not args.no_load:
            loads["busy"] = _load()
            with Burner():
                busy = index_cmd(tree, repoctx_env(run_dir, run_dir / "idx-busy", "none"), sample_pss=False)
                if peer is not None:
                    try:
                        peer_busy = peer_index(tree, run_dir / "cim-busy")
                    except Exception as e:  # noqa: BLE001
                        notes.append(f"code-index-mcp beside the CPU-bound process failed: {e}")
            loads["busy_end"] = _load()
        loads["end"] = _load()
    finally:
        shutil.rmtree(run_dir, ignore_errors=True)

    # ------------------------------------------------------------------ the table
    P = lambda f: "–" if peer is None else f(peer)  # noqa: E731
    med = lambda rs, k: statistics.median(r[k] for r in rs)  # noqa: E731
    units = c.get("capsules", 0)
    rows += [
        ("cold index, lexical + graph: wall (s)", f"{cold['wall']:.1f} (update {cold['report']['seconds']:.1f})",
         P(lambda p: f"{p['wall']:.1f} (file list {p['shallow_s']:.1f} + deep index)")),
        ("… units / files", f"{units:,} units from {c.get('files', 0):,} files",
         P(lambda p: p["said"].split("Found ")[-1].rstrip(". ") if "Found" in p["said"] else "")),
        ("… CPU user + sys (s)", f"{cold['user']:.1f} + {cold['sys']:.1f}", "–"),
        ("… peak RSS (MiB): its largest process (wait4)", f"{cold['rss']:.0f}",
         P(lambda p: f"{p['rss']:.0f}" if p["rss"] else "?")),
        ("… peak of the summed PSS of its processes, the parse worker's too (MiB, sampled every 50 ms, in a second "
         "cold run)",
         f"{cold['pss']:.0f} ({cold['pss_procs']} processes at the peak)", "–"),
        ("index on disk (MiB)", f"{_mib(disk):.1f}", P(lambda p: f"{_mib(p['disk']):.1f}")),
        ("cold index beside a CPU-bound process (s)",
         "–" if busy is None else f"{busy['wall']:.1f} ({busy['wall'] / cold['wall']:.1f}× idle)",
         "–" if peer_busy is None else f"{peer_busy['wall']:.1f} ({peer_busy['wall'] / peer['wall']:.1f}× idle)"),
        ("no-op reindex, `repoctx index` wall (s), median of 3",
         f"{med(noops, 'wall'):.2f} (update {statistics.median(r['report']['seconds'] for r in noops):.2f})", "–"),
        ("one-file reindex, lexical (s), median of 3",
         f"{med(edits, 'wall'):.2f} (update {statistics.median(r['report']['seconds'] for r in edits):.2f})", "–"),
        ("one `repoctx search`, lexical: wall (s) / RSS (MiB)", f"{s_lex['wall']:.2f} / {s_lex['rss']:.0f}",
         P(lambda p: f"in server: {p['search_s']:.2f} / –")),
    ]
    if vec is not None:
        v = vec["report"].get("vectors") or {}
        ready = v.get("ready_s") or {}
        # the fill began this long before the command ended: its seconds, and what followed it (negligible)
        fill_start = vec["wall"] - v.get("seconds", 0.0)
        rows += [
            ("cold index with vectors (default model), one `repoctx index`: wall (s) / CPU user + sys (s) / RSS (MiB)",
             f"{vec['wall']:.0f} (lexical {vec['report']['seconds']:.0f}, vectors {v.get('seconds', 0):.0f}) / "
             f"{vec['user']:.0f} + {vec['sys']:.0f} / {vec['rss']:.0f}", "–"),
            ("… every code unit searchable by meaning (s after the command started)",
             f"{fill_start + ready['code']:.0f}" if "code" in ready else "–", "–"),
            ("… units embedded by class, in order (vectors.EMBED_ORDER): count, ready at (s)",
             "; ".join(f"{k} {n:,} at {fill_start + ready.get(k, 0):.0f}" for k, n in (v.get("classes") or {}).items())
             or "–", "–"),
            ("… index + vector cache on disk (MiB)", f"{_mib(vec['disk']):.1f} + {_mib(vec['cache']):.1f}", "–"),
            ("one `repoctx search`, hybrid: wall (s) / RSS (MiB)", f"{s_hyb['wall']:.2f} / {s_hyb['rss']:.0f}", "–"),
            ("with vectors: no-op / one-file reindex, its vector included (s), median of 3",
             f"{med(vec_noops, 'wall'):.2f} / {med(vec_edits, 'wall'):.2f} (update "
             f"{statistics.median(r['report']['seconds'] for r in vec_edits):.2f}, RSS {med(vec_edits, 'rss'):.0f} MiB)",
             "–"),
        ]
    rows += [
        ("watch: folders / list (s) / set up (s)",
         f"{watch['folders']:,} / {watch['list_s']:.2f} / {watch['setup_s']:.3f}", "–"),
        ("watch: save → found by the MCP server (s) / delete → gone (s)",
         f"{watch['save_to_found_s']:.2f} / {watch['delete_to_gone_s']:.2f}", "–"),
        ("watch: idle CPU of the server (ms per s)", f"{watch['idle_cpu_ms_per_s']:.1f}", "–"),
    ] + [(f"watch, synthetic {s['folders']:,} folders: list (s) / set up (s)",
          f"{s['list_s']:.2f} / {s['setup_s']:.2f}", "–") for s in synth]

    total = sum(b for _, b in stat)
    shares = [(n, b) for n, b in stat if b / total >= 0.005]
    rest = total - sum(b for _, b in shares)

    lines = [f"# The big tree: {src.name} (issue 39's baseline)", "",
             f"Run {started} by `python bench/big_tree.py`; {os.cpu_count()} CPUs, {platform.python_implementation()} "
             f"{platform.python_version()}; load average (1/5/15 min) at each phase: "
             + "; ".join(f"{k} {v}" for k, v in loads.items()) + ". The machine is shared: times are rough.", "",
             "| | repoctx | code-index-mcp 2.17.1 |", "|---|---|---|"]
    lines += [f"| {a} | {b} | {p} |" for a, b, p in rows]
    lines += ["", f"Index on disk after the cold lexical index, by SQLite `dbstat` ({_mib(total):.1f} MiB in pages):", "",
              "| table or index | MiB | share |", "|---|---|---|"]
    lines += [f"| {n} | {_mib(b):.1f} | {100 * b / total:.1f}% |" for n, b in shares]
    if rest:
        lines.append(f"| (the rest) | {_mib(rest):.1f} | {100 * rest / total:.1f}% |")
    lines += ["", f"Searches: lexical `{LEXICAL_Q}`, hybrid `{HYBRID_Q}` (each `-k 10`, brief)."]
    if watch.get("status"):
        lines.append(f"Watch status on the tree: {watch['status']}.")
    lines += [f"Note: {n}" for n in notes]
    text = "\n".join(lines) + "\n"
    print(text)
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(text, encoding="utf-8")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
