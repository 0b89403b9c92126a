"""Exact-name questions: a query that is an identifier, a dotted name or a path must put that definition first.

    python bench/exact_names.py                    # flask + rich sdists (pip download, cached) + repoctx's src/
    python bench/exact_names.py --tree NAME=DIR    # other trees (repeatable), instead of the defaults
    python bench/exact_names.py --list             # print the query set and stop
    python bench/exact_names.py --json out.json    # also write every query with its first hits

The query set is drawn from each tree's own index, deterministically (a hash of each candidate orders them,
nothing random), so it does not depend on anyone's guess of what is easy:

Trees: flask 3.1.0 and rich 13.9.4 (sdists), and repoctx's own ``src/`` at commit ``REPOCTX_COMMIT``.

* ``ident``: a function or class name (``render_template``), from the project's code (not tests, docs, examples);
  a hit is right when it is a definition of that name (a name defined twice has two right answers);
* ``method``: a method's bare name (``get_search_results``), often defined in several classes; right when the hit is
  a definition of that name;
* ``dotted``: a method's ``Class.method`` (``Console.print``); right when the hit's qualname is exactly that;
* ``qualified``: a function or method after its module's import path (``flask.helpers.url_for``,
  ``rich.console.Console.print``); right when the hit is that definition;
* ``path``: a file's path as the tree spells it (``src/flask/app.py``) or as an import path reads it
  (``flask/app.py``); right when the hit is that file's module unit (``any-unit`` also counted: a unit of it).

Trees and indexes live under ``$REPOCTX_BENCH_CACHE`` (default ``/tmp/repoctx-bench``), never in the working tree.
Each index uses ``$REPOCTX_EMBEDDER`` (default ``local``: the shipped model), as a user's would.
"""
from __future__ import annotations

import argparse
import hashlib
import json
import os
import subprocess
import sys
import tarfile
import time
from dataclasses import replace
from pathlib import Path

from repoctx import Index, Settings
from repoctx.capsules.parse import module_name
from repoctx.retrieve.hybrid import is_doc_unit, is_test_unit

CACHE = Path(os.environ.get("REPOCTX_BENCH_CACHE", "/tmp/repoctx-bench"))
SDISTS = {"flask": "flask==3.1.0", "rich": "rich==13.9.4"}
HERE = Path(__file__).resolve().parent
REPOCTX_COMMIT = "d58dcb0bdcd821b0732d96ef0b71d8c73a776890"  # the src/ the figures in bench/results were taken on
PER_REPO = {"ident": 6, "method": 6, "dotted": 6, "qualified": 4, "path": 6}


def fetch_sdist(name: str, spec: str) -> Path:
    """The unpacked sdist of ``spec`` (pip download --no-binary :all:, once)."""
    dest = CACHE / "trees" / name
    if dest.is_dir():
        return dest
    dl = CACHE / "downloads"
    dl.mkdir(parents=True, exist_ok=True)
    have = [p for p in dl.iterdir() if p.name.lower().startswith(spec.replace("==", "-").lower())]
    if not have:
        subprocess.run([sys.executable, "-m", "pip", "download", "--no-binary", ":all:", "--no-deps", "-q", "-d",
                        str(dl), spec], check=True)
        have = [p for p in dl.iterdir() if p.name.lower().startswith(spec.replace("==", "-").lower())]
    tmp = CACHE / "trees" / f".{name}.tmp"
    tmp.mkdir(parents=True, exist_ok=True)
    with tarfile.open(have[0]) as tf:
        tf.extractall(tmp, filter="data")
    [top] = list(tmp.iterdir())
    top.rename(dest)
    tmp.rmdir()
    return dest


def default_trees() -> dict[str, Path]:
    trees = {name: fetch_sdist(name, spec) for name, spec in SDISTS.items()}
    # repoctx's own src/ as one commit had it (the working tree moves while others work): copied once
    snap = CACHE / "trees" / "repoctx"
    if not snap.is_dir():
        snap.parent.mkdir(parents=True, exist_ok=True)
        tmp = snap.with_name(".repoctx.tmp")
        tmp.mkdir(exist_ok=True)
        archive = subprocess.run(["git", "-C", str(HERE.parent), "archive", REPOCTX_COMMIT, "src"], check=True,
                                 capture_output=True).stdout
        subprocess.run(["tar", "-x", "-C", str(tmp)], input=archive, check=True)
        (tmp / "src").rename(snap)
        tmp.rmdir()
    trees["repoctx"] = snap
    return trees


def open_index(name: str, root: Path, index_dir: Path | None = None) -> Index:
    settings = Settings.from_env()
    ix = Index(root, replace(settings, index_dir=index_dir or CACHE / "index" / f"{name}-{settings.embedder}"), name=name)
    ix.update()
    return ix


def _key(s: str) -> str:
    return hashlib.sha1(s.encode()).hexdigest()


def queries_for(ix: Index) -> list[dict]:
    """The tree's queries (see the module docstring): the first few of each kind in hash order."""
    caps = [c for c in ix.store.all_capsules(ix.scope())
            if not is_test_unit(c) and not is_doc_unit(c) and c.language == "python"]
    by_id = {c.id: c for c in caps}
    out: list[dict] = []
    idents = sorted({c.name for c in caps if c.kind in ("function", "class") and len(c.name) >= 5
                     and not c.name.startswith("__") and "." not in c.qualname}, key=_key)
    out += [{"kind": "ident", "query": n} for n in idents[:PER_REPO["ident"]]]
    methods = [c for c in caps if c.kind == "method" and c.qualname.count(".") == 1 and not c.name.startswith("__")
               and by_id.get(c.parent or "") is not None and by_id[c.parent].kind == "class"]
    bare = sorted({c.name for c in methods if len(c.name) >= 5} - set(idents), key=_key)
    out += [{"kind": "method", "query": n} for n in bare[:PER_REPO["method"]]]
    dotted = sorted({c.qualname for c in methods}, key=_key)
    out += [{"kind": "dotted", "query": q} for q in dotted[:PER_REPO["dotted"]]]
    named = sorted((c for c in caps if c.kind in ("function", "method") and c.path.endswith(".py")
                    and not c.name.startswith("_") and (c.kind == "function") == ("." not in c.qualname)),
                   key=lambda c: _key(c.id))
    for c in named[:PER_REPO["qualified"]]:
        out.append({"kind": "qualified", "query": f"{module_name(c.path, 'python')}.{c.qualname}",
                    "qualname": c.qualname, "path": c.path})
    paths = sorted({c.path for c in caps if c.kind == "module" and not c.path.endswith("__init__.py")}, key=_key)
    n = PER_REPO["path"]
    for i, p in enumerate(paths[:n]):
        # half as the tree spells it, half as the import path reads (``src/flask/app.py`` -> ``flask/app.py``)
        parts = p.split("/")
        q = "/".join(parts[1:]) if i % 2 and len(parts) > 2 else p
        out.append({"kind": "path", "query": q, "path": p})
    return out


def judge(q: dict, hits) -> dict:
    top = hits[0].capsule if hits else None
    ok = any_unit = False
    if top is not None:
        if q["kind"] == "ident":
            ok = top.name == q["query"] and top.kind in ("function", "method", "class")
        elif q["kind"] == "method":
            ok = top.name == q["query"] and top.kind in ("function", "method", "class")  # a bare name names any of them
        elif q["kind"] == "dotted":
            ok = top.qualname == q["query"]
        elif q["kind"] == "qualified":
            ok = top.qualname == q["qualname"] and top.path == q["path"]
        else:
            ok = top.path == q["path"] and top.kind == "module"
            any_unit = top.path == q["path"]
    return {**q, "first": top.citation if top else None, "ok": ok, "any_unit": ok or any_unit,
            "top3": [h.capsule.citation for h in hits[:3]]}


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--tree", action="append", default=[], help="NAME=DIR (repeatable)")
    ap.add_argument("--index-dir", action="append", default=[],
                    help="NAME=DIR: the index of tree NAME is there (e.g. one repoctx eval built), not under the cache")
    ap.add_argument("--list", action="store_true")
    ap.add_argument("--json", type=Path)
    args = ap.parse_args()
    trees = dict(t.split("=", 1) for t in args.tree) if args.tree else default_trees()
    results: list[dict] = []
    index_dirs = {k: Path(v).expanduser() for k, v in (t.split("=", 1) for t in args.index_dir)}
    for name, root in trees.items():
        ix = open_index(name, Path(root).expanduser(), index_dirs.get(name))
        try:
            qs = queries_for(ix)
            if args.list:
                for q in qs:
                    print(f"{name}\t{q['kind']}\t{q['query']}")
                continue
            for q in qs:
                t0 = time.perf_counter()
                hits = ix.search(q["query"], k=10)
                r = judge(q, hits)
                r.update(repo=name, ms=round(1000 * (time.perf_counter() - t0), 1))
                results.append(r)
        finally:
            ix.close()
    if args.list:
        return 0
    print("| repo | kind | n | first right | a unit of the file first |")
    print("|---|---|---|---|---|")
    groups: dict[tuple[str, str], list[dict]] = {}
    for r in results:
        groups.setdefault((r["repo"], r["kind"]), []).append(r)
        groups.setdefault(("all", r["kind"]), []).append(r)
        groups.setdefault(("all", "all"), []).append(r)
    kinds = list(PER_REPO) + ["all"]
    for (repo, kind), rs in sorted(groups.items(), key=lambda kv: (kv[0][0] == "all", kinds.index(kv[0][1]))):
        ok = sum(r["ok"] for r in rs)
        anyu = sum(r["any_unit"] for r in rs)
        print(f"| {repo} | {kind} | {len(rs)} | {ok} ({100 * ok / len(rs):.1f} %) | "
              f"{anyu if kind in ('path', 'all') else ''} |")
    misses = [r for r in results if not r["ok"]]
    if misses:
        print("\nmisses:")
        for r in misses:
            print(f"  {r['repo']} {r['kind']} {r['query']!r} -> {r['first']}")
    if args.json:
        args.json.write_text(json.dumps(results, indent=1))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
