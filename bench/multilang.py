"""Multi-language code-search evaluation: hand-written developer questions over non-Python projects.

    python bench/multilang.py --fetch-only        # download + unpack the pinned sources, nothing else
    python bench/multilang.py --verify            # every gold must name exactly one existing capsule
    python bench/multilang.py --no-dense          # evaluate, lexical only (embedder "none")
    python bench/multilang.py                     # evaluate with $REPOCTX_EMBEDDER (default "local")
    python bench/multilang.py --json out.json     # also write per-question ranks and top-10 hits
    python bench/multilang.py --project gin --project clap   # a subset

Data: ``bench/data/multilang/projects.json`` pins each project's source to a registry package and
version: Debian ``golang-*-dev`` / ``librust-*-dev`` packages (``apt-get download PKG=VERSION`` then
``dpkg-deb -x``; needs ``apt-get update`` once) or npm tarballs (``npm pack PKG@VERSION``). The
project root that gets indexed is ``subdir`` inside the unpacked package.
``bench/data/multilang/questions.jsonl`` holds one question per line:
``{"id", "project", "language", "question", "gold": ["path:Qualname", ...]}`` where ``path`` is
relative to the project root and ``Qualname`` is repoctx's capsule qualname (``Receiver.Method`` for
Go, ``Class.method`` for JS/TS, ``Type.method`` for Rust impls; a module capsule's qualname is its
path, used where the code sits in an unnamed export).

Everything downloaded or built lives under ``$REPOCTX_MULTILANG_CACHE`` (default
``~/.cache/repoctx/multilang``): ``downloads/`` (.deb/.tgz), ``src/<name>-<version>/`` (unpacked),
``index/<name>-<embedder>/`` (repoctx index dirs). Nothing is written into the working tree.

Metrics, per language and overall (a hit matches a gold when ``f"{path}:{qualname}"`` equals it):

* Acc@1 — the top hit is a gold capsule;
* Acc@5 / Acc@10 — strict: every gold of the question is within the top k;
* MRR — 1 / rank of the first gold hit in the top 10 (0 when none);
* docs/tests@5 — share of the top-5 hits whose path looks like documentation (``*.md``, ``*.rst``,
  ``*.txt``, ``*.adoc``, a ``docs/`` folder, README / CHANGELOG / CHANGES / HISTORY) or tests
  (``test``/``tests``/``__tests__``/``testdata``/``spec`` folders, ``*_test.go``, ``*.test.ts``,
  ``*.spec.js``, ``test_*.py`` ...). Rust unit tests inline in ``#[cfg(test)] mod tests`` are not
  recognisable from the path and count as code.
* file Acc@1 / Acc@3 / MRR — files ranked from the first 300 units (as ``repoctx eval`` does), rank of the
  first gold file, under the shipped aggregation (``auto``) and the two it chooses between (``max``:
  a file's best unit; ``top2``: the sum of its two best, which ``auto`` uses for issue reports).
"""
from __future__ import annotations

import argparse
import json
import os
import re
import shutil
import subprocess
import sys
import tarfile
import time
from collections import Counter, defaultdict
from datetime import date
from pathlib import Path

from repoctx.retrieve.hybrid import file_aggregation, to_files

HERE = Path(__file__).resolve().parent
DATA = HERE / "data" / "multilang"
CACHE = Path(os.environ.get("REPOCTX_MULTILANG_CACHE", Path.home() / ".cache" / "repoctx" / "multilang"))

# ---------------------------------------------------------------------------------------------- data


def load_projects() -> dict[str, dict]:
    return {p["name"]: p for p in json.loads((DATA / "projects.json").read_text())}


def load_questions() -> list[dict]:
    out = []
    for n, line in enumerate((DATA / "questions.jsonl").read_text().splitlines(), 1):
        if line.strip():
            q = json.loads(line)
            missing = {"id", "project", "language", "question", "gold"} - q.keys()
            if missing or not q["gold"]:
                raise SystemExit(f"questions.jsonl:{n}: malformed record (missing {sorted(missing) or 'gold'})")
            out.append(q)
    return out


def split_gold(gold: str) -> tuple[str, str]:
    path, _, qualname = gold.partition(":")
    return path, qualname


# -------------------------------------------------------------------------------------------- fetch


def _run(cmd: list[str], cwd: Path) -> None:
    proc = subprocess.run(cmd, cwd=cwd, capture_output=True, text=True)
    if proc.returncode != 0:
        raise SystemExit(f"command failed ({proc.returncode}): {' '.join(cmd)}\n{proc.stdout}{proc.stderr}")


def fetch(project: dict) -> Path:
    """Download and unpack one project's pinned package (cached); returns the root to index."""
    src = project["source"]
    version = src["version"]
    dest = CACHE / "src" / f"{project['name']}-{version}"
    root = dest / src["subdir"]
    if (dest / ".complete").exists() and root.is_dir():
        return root
    dl = CACHE / "downloads"
    dl.mkdir(parents=True, exist_ok=True)
    tmp = dest.with_name(dest.name + ".tmp")
    shutil.rmtree(tmp, ignore_errors=True)
    tmp.mkdir(parents=True)
    if "debian" in src:
        pkg = src["debian"]
        debs = sorted(dl.glob(f"{pkg}_{version.replace(':', '%3a')}_*.deb"))
        if not debs:
            if not shutil.which("apt-get"):
                raise SystemExit("apt-get not found: Debian packages cannot be fetched here")
            _run(["apt-get", "download", f"{pkg}={version}"], cwd=dl)
            debs = sorted(dl.glob(f"{pkg}_{version.replace(':', '%3a')}_*.deb"))
        if not debs:
            raise SystemExit(f"apt-get download {pkg}={version} left no .deb in {dl}")
        _run(["dpkg-deb", "-x", str(debs[0]), str(tmp)], cwd=dl)
    elif "npm" in src:
        pkg = src["npm"]
        tgz = dl / f"{pkg.lstrip('@').replace('/', '-')}-{version}.tgz"
        if not tgz.exists():
            if not shutil.which("npm"):
                raise SystemExit("npm not found: npm packages cannot be fetched here")
            _run(["npm", "pack", f"{pkg}@{version}", "--silent", "--pack-destination", str(dl)], cwd=dl)
        if not tgz.exists():
            raise SystemExit(f"npm pack {pkg}@{version} left no {tgz.name} in {dl}")
        with tarfile.open(tgz) as tf:
            try:
                tf.extractall(tmp, filter="data")
            except TypeError:  # Python < 3.12 without extraction filters
                tf.extractall(tmp)
    else:
        raise SystemExit(f"project {project['name']}: unknown source {src}")
    if not (tmp / src["subdir"]).is_dir():
        raise SystemExit(f"project {project['name']}: {src['subdir']} not found in the unpacked package")
    shutil.rmtree(dest, ignore_errors=True)
    tmp.rename(dest)
    (dest / ".complete").write_text(json.dumps(src) + "\n")
    return root


# -------------------------------------------------------------------------------------------- index


def open_index(project: dict, root: Path, embedder: str):
    from repoctx import Index, Settings

    index_dir = CACHE / "index" / f"{project['name']}-{project['source']['version']}-{embedder}"
    ix = Index(root, Settings.from_env(index_dir=index_dir, embedder=embedder))
    t0 = time.perf_counter()
    ix.update()
    return ix, time.perf_counter() - t0


# ------------------------------------------------------------------------------------------- verify


def verify(projects: dict, questions: list[dict]) -> int:
    by_project = defaultdict(list)
    failures = []
    for q in questions:
        if q["project"] not in projects:
            failures.append(f"{q['id']}: unknown project {q['project']!r}")
            continue
        if q["language"] != projects[q["project"]]["language"]:
            failures.append(f"{q['id']}: language {q['language']!r} != project's {projects[q['project']]['language']!r}")
        by_project[q["project"]].append(q)
    ids = Counter(q["id"] for q in questions)
    failures += [f"{i}: duplicate id" for i, n in ids.items() if n > 1]
    for name, qs in by_project.items():
        root = fetch(projects[name])
        ix, _ = open_index(projects[name], root, "none")
        counts = Counter(f"{c.path}:{c.qualname}" for c in ix.store.all_capsules())
        ix.close()
        for q in qs:
            for g in q["gold"]:
                n = counts.get(g, 0)
                if n == 0:
                    path, qual = split_gold(g)
                    near = sorted(k for k in counts if k.startswith(path + ":") and k.endswith("." + qual.split(".")[-1]))
                    hint = f" (same name in that file: {', '.join(near[:3])})" if near else ""
                    failures.append(f"{q['id']}: {g} resolves to no capsule{hint}")
                elif n > 1:
                    failures.append(f"{q['id']}: {g} is ambiguous ({n} capsules share it)")
    n_gold = sum(len(q["gold"]) for q in questions)
    langs = Counter(q["language"] for q in questions)
    print(f"{len(questions)} questions ({', '.join(f'{k} {v}' for k, v in sorted(langs.items()))}), "
          f"{n_gold} gold capsules, {len(by_project)} projects")
    if failures:
        print(f"{len(failures)} failure(s):")
        for f in failures:
            print("  " + f)
        return 1
    print("all gold locations resolve to exactly one capsule")
    return 0


# ----------------------------------------------------------------------------------------- evaluate

_DOC_EXT = (".md", ".markdown", ".rst", ".txt", ".adoc")
_DOC_NAMES = re.compile(r"^(readme|changelog|changes|history|news|contributing|migration_guide)\b", re.I)
_TEST_DIRS = {"test", "tests", "__tests__", "testdata", "testing", "spec", "specs", "__mocks__"}
_TEST_FILE = re.compile(
    r"(_test\.go$|_tests?\.rs$|\.(test|spec)\.[cm]?[jt]sx?$|^test_.*\.py$|_test\.py$|Tests?\.java$)", re.I)


def path_class(path: str) -> str:
    """'docs', 'tests' or 'code' from the path alone."""
    parts = path.split("/")
    name = parts[-1]
    if name.lower().endswith(_DOC_EXT) or _DOC_NAMES.match(name) or "docs" in parts[:-1]:
        return "docs"
    if _TEST_FILE.search(name) or any(p in _TEST_DIRS for p in parts[:-1]):
        return "tests"
    return "code"


FILE_AGGS = ("auto", "max", "top2")  # the shipped choice, and the two it chooses between
FILE_POOL = 300  # units a file ranking is made of (as in repoctx eval)


def evaluate(projects: dict, questions: list[dict], embedder: str, k: int = 10) -> tuple[list[dict], dict]:
    by_project = defaultdict(list)
    for q in questions:
        by_project[q["project"]].append(q)
    rows, info = [], {}
    for name, qs in by_project.items():
        project = projects[name]
        root = fetch(project)
        ix, secs = open_index(project, root, embedder)
        n_caps = ix.store.counts().get("capsules") if hasattr(ix.store, "counts") else None
        info[name] = {"index_seconds": round(secs, 1), "capsules": n_caps}
        print(f"# {name}: indexed in {secs:.1f}s ({n_caps} capsules)", file=sys.stderr)
        for q in qs:
            pool = ix.search(q["question"], k=max(k, FILE_POOL))
            hits = pool[:k]
            gold_files = {split_gold(g)[0] for g in q["gold"]}
            file_rank = {}
            for agg in FILE_AGGS:
                files = [f.path for f in to_files(pool, file_aggregation(agg, q["question"]))]
                file_rank[agg] = next((i for i, p in enumerate(files, 1) if p in gold_files), None)
            keys = [f"{h.capsule.path}:{h.capsule.qualname}" for h in hits]
            ranks = {g: (keys.index(g) + 1 if g in keys else None) for g in q["gold"]}
            classes = [path_class(h.capsule.path) for h in hits[:5]]
            rows.append({
                "id": q["id"], "project": name, "language": q["language"], "question": q["question"],
                "gold": q["gold"], "ranks": ranks,
                "first": min((r for r in ranks.values() if r), default=None),
                "all": None if any(r is None for r in ranks.values()) else max(ranks.values()),
                "top5_classes": classes, "file_rank": file_rank,
                "top": [{"key": key, "kind": h.capsule.kind, "class": path_class(h.capsule.path),
                         "score": round(float(h.score), 4)} for key, h in zip(keys, hits)],
            })
        ix.close()
    return rows, info


def summarize(rows: list[dict]) -> dict:
    n = len(rows)
    if not n:
        return {"n": 0}
    top5 = [c for r in rows for c in r["top5_classes"]]
    return {
        "n": n,
        "acc1": sum(r["first"] == 1 for r in rows) / n,
        "acc5": sum(r["all"] is not None and r["all"] <= 5 for r in rows) / n,
        "acc10": sum(r["all"] is not None and r["all"] <= 10 for r in rows) / n,
        "mrr": sum(1 / r["first"] for r in rows if r["first"]) / n,
        "docs5": top5.count("docs") / max(len(top5), 1),
        "tests5": top5.count("tests") / max(len(top5), 1),
        "doctest5": (top5.count("docs") + top5.count("tests")) / max(len(top5), 1),
    }


def file_table(rows: list[dict]) -> str:
    """Files ranked from the units (first gold file's rank) under each aggregation; auto is what ships."""
    lines = ["| file aggregation | n | file Acc@1 | file Acc@3 | file MRR |", "|---|---:|---:|---:|---:|"]
    for agg in FILE_AGGS:
        ranks = [r["file_rank"][agg] for r in rows]
        n = len(ranks) or 1
        lines.append(f"| {agg} | {len(ranks)} | {100 * sum(x == 1 for x in ranks) / n:.1f} | "
                     f"{100 * sum(x is not None and x <= 3 for x in ranks) / n:.1f} | "
                     f"{sum(1 / x for x in ranks if x) / n:.3f} |")
    return "\n".join(lines)


def table(rows: list[dict], key: str, title: str) -> str:
    groups = defaultdict(list)
    for r in rows:
        groups[r[key]].append(r)
    lines = [f"| {title} | n | Acc@1 | Acc@5 | Acc@10 | MRR | docs/tests@5 | docs@5 | tests@5 |",
             "|---|---:|---:|---:|---:|---:|---:|---:|---:|"]
    for name in sorted(groups):
        lines.append(_row(name, summarize(groups[name])))
    lines.append(_row("**all**", summarize(rows)))
    return "\n".join(lines)


def _row(name: str, s: dict) -> str:
    pct = lambda x: f"{100 * x:.1f}"  # noqa: E731
    return (f"| {name} | {s['n']} | {pct(s['acc1'])} | {pct(s['acc5'])} | {pct(s['acc10'])} | "
            f"{s['mrr']:.3f} | {pct(s['doctest5'])} | {pct(s['docs5'])} | {pct(s['tests5'])} |")


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0],
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--verify", action="store_true", help="check every gold resolves to exactly one capsule")
    ap.add_argument("--fetch-only", action="store_true", help="download and unpack the sources, then stop")
    ap.add_argument("--no-dense", action="store_true", help='lexical only (embedder "none")')
    ap.add_argument("--project", action="append", help="only this project (repeatable)")
    ap.add_argument("--json", metavar="PATH", help="write per-question ranks and top hits as JSON")
    ap.add_argument("-k", type=int, default=10)
    args = ap.parse_args(argv)

    projects = load_projects()
    questions = load_questions()
    if args.project:
        unknown = set(args.project) - projects.keys()
        if unknown:
            raise SystemExit(f"unknown project(s): {', '.join(sorted(unknown))}")
        questions = [q for q in questions if q["project"] in args.project]
        projects = {k: v for k, v in projects.items() if k in args.project}
    if args.fetch_only:
        for p in projects.values():
            print(f"{p['name']}: {fetch(p)}")
        return 0
    if args.verify:
        return verify(projects, questions)

    embedder = "none" if args.no_dense else os.environ.get("REPOCTX_EMBEDDER", "local")
    t0 = time.perf_counter()
    rows, info = evaluate(projects, questions, embedder, k=args.k)
    versions = ", ".join(f"{p['name']} {p['source']['version']}" for p in projects.values())
    print(f"multilang eval, {date.today().isoformat()}, embedder={embedder}, k={args.k}, "
          f"{len(rows)} questions ({versions}), {time.perf_counter() - t0:.0f}s\n")
    print(table(rows, "language", "language"))
    print()
    print(table(rows, "project", "project"))
    print()
    print(file_table(rows))
    if args.json:
        Path(args.json).write_text(json.dumps({
            "date": date.today().isoformat(), "embedder": embedder, "k": args.k,
            "projects": {n: {**projects[n]["source"], **info.get(n, {})} for n in projects},
            "summary": {"all": summarize(rows),
                        **{lang: summarize([r for r in rows if r["language"] == lang])
                           for lang in sorted({r["language"] for r in rows})}},
            "questions": rows,
        }, indent=1) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
