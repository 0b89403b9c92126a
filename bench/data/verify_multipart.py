#!/usr/bin/env python3
"""Check that every gold location in multipart.jsonl resolves in the pinned corpora.

Expected layout: one directory per corpus holding an *unpacked wheel*, i.e. the
directory that contains the top-level package(s):

    <django-dir>/django/db/backends/sqlite3/features.py     (Django==4.2)
    <sympy-dir>/sympy/simplify/trigsimp.py                  (sympy==1.12)
    <pytest-dir>/_pytest/python.py                          (pytest==7.4.0)

A gold entry is "path:qualname". The repository path minus the record's
corpus.path_prefix is the path inside the wheel (pytest uses "src/", so
"src/_pytest/python.py" is "_pytest/python.py" in the wheel). The qualname is a
dotted chain of def/class names (e.g. "Class.method", "func", "Class"); defs
nested in if/try/with blocks count, and a name may be defined more than once
(overloads, property setters).

Materialize the corpora (the wheel cache stays outside git):

    pip download --no-deps --only-binary :all: -d ~/.cache/repoctx/wheels Django==4.2
    pip download --no-deps --only-binary :all: -d ~/.cache/repoctx/wheels sympy==1.12
    pip download --no-deps --only-binary :all: -d ~/.cache/repoctx/wheels pytest==7.4.0
    unzip -q ~/.cache/repoctx/wheels/Django-4.2-py3-none-any.whl -d /tmp/mp/django
    unzip -q ~/.cache/repoctx/wheels/sympy-1.12-py3-none-any.whl -d /tmp/mp/sympy
    unzip -q ~/.cache/repoctx/wheels/pytest-7.4.0-py3-none-any.whl -d /tmp/mp/pytest

or let this script do it with --fetch (same commands, into --root).

Run:

    python bench/data/verify_multipart.py --django /tmp/mp/django \
        --sympy /tmp/mp/sympy --pytest /tmp/mp/pytest
    python bench/data/verify_multipart.py --fetch --root /tmp/mp   # download + unpack + check

Prints a summary and exits non-zero if any record is malformed or any gold
location does not resolve.
"""
from __future__ import annotations

import argparse
import ast
import collections
import json
import os
import subprocess
import sys
import zipfile
from pathlib import Path

HERE = Path(__file__).resolve().parent
DEFAULT_DATA = HERE / "multipart.jsonl"
WHEEL_CACHE = Path(os.environ.get("REPOCTX_WHEELS", "~/.cache/repoctx/wheels")).expanduser()

# key -> (pypi name, version, wheel file name)
CORPORA = {
    "django": ("Django", "4.2", "Django-4.2-py3-none-any.whl"),
    "sympy": ("sympy", "1.12", "sympy-1.12-py3-none-any.whl"),
    "pytest": ("pytest", "7.4.0", "pytest-7.4.0-py3-none-any.whl"),
}
SHAPES = {"comparison", "conjunction", "list", "exploratory"}
DEF_NODES = (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)


def fetch(root: Path) -> dict[str, Path]:
    WHEEL_CACHE.mkdir(parents=True, exist_ok=True)
    dirs = {}
    for key, (name, version, wheel) in CORPORA.items():
        whl = WHEEL_CACHE / wheel
        if not whl.exists():
            subprocess.run(
                [sys.executable, "-m", "pip", "download", "--no-deps",
                 "--only-binary", ":all:", "-d", str(WHEEL_CACHE), f"{name}=={version}"],
                check=True,
            )
        dest = root / key
        if not dest.exists():
            with zipfile.ZipFile(whl) as zf:
                zf.extractall(dest)
        dirs[key] = dest
    return dirs


def _defs_in(body: list[ast.stmt]):
    """Yield def/class nodes directly in a scope body, looking through
    if/try/with/for/while blocks but not into nested defs."""
    for node in body:
        if isinstance(node, DEF_NODES):
            yield node
            continue
        for field in ("body", "orelse", "finalbody", "handlers"):
            sub = getattr(node, field, None)
            if isinstance(sub, list):
                stmts = []
                for s in sub:
                    if isinstance(s, ast.ExceptHandler):
                        stmts.extend(s.body)
                    elif isinstance(s, ast.stmt):
                        stmts.append(s)
                yield from _defs_in(stmts)


def resolves(tree: ast.Module, qualname: str) -> bool:
    scopes = [tree.body]
    for part in qualname.split("."):
        nxt = [n.body for body in scopes for n in _defs_in(body) if n.name == part]
        if not nxt:
            return False
        scopes = nxt
    return True


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--data", type=Path, default=DEFAULT_DATA)
    for key in CORPORA:
        ap.add_argument(f"--{key}", type=Path, help=f"unpacked {key} wheel directory")
    ap.add_argument("--fetch", action="store_true", help="download and unpack the pinned wheels")
    ap.add_argument("--root", type=Path, default=Path("/tmp/repoctx-corpora"),
                    help="where --fetch unpacks (one subdirectory per corpus)")
    ap.add_argument("--any-corpus", action="store_true",
                    help="accept any PyPI corpus and lay it out with repoctx.evaluate.corpus.materialize (the training "
                         "questions in bench/data/train/); downloads wheels that are not cached")
    args = ap.parse_args()
    if args.any_corpus:
        from repoctx.evaluate.corpus import materialize

    dirs = fetch(args.root) if args.fetch else {}
    for key in CORPORA:
        if getattr(args, key):
            dirs[key] = getattr(args, key)
    by_pypi = {CORPORA[k][0].lower(): (k, CORPORA[k][1]) for k in CORPORA}

    problems: list[str] = []
    trees: dict[Path, ast.Module | None] = {}
    ids = set()
    n_q = n_intents = n_gold = n_ok = 0
    per_corpus = collections.Counter()
    per_shape = collections.Counter()
    per_corpus_shape = collections.Counter()
    intents_hist = collections.Counter()

    lines = args.data.read_text(encoding="utf-8").splitlines()
    for lineno, line in enumerate(lines, 1):
        if not line.strip():
            continue
        try:
            rec = json.loads(line)
        except json.JSONDecodeError as e:
            problems.append(f"line {lineno}: bad JSON: {e}")
            continue
        rid = rec.get("id", f"line{lineno}")
        if rid in ids:
            problems.append(f"{rid}: duplicate id")
        ids.add(rid)
        corpus = rec.get("corpus", {})
        pypi = str(corpus.get("pypi", "")).lower()
        if args.any_corpus and pypi not in by_pypi:
            by_pypi[pypi] = (pypi, corpus.get("version"))
            dirs[pypi] = materialize({"corpus": corpus, "instance_id": rid})
        if pypi not in by_pypi:
            problems.append(f"{rid}: unknown corpus {corpus}")
            continue
        key, version = by_pypi[pypi]
        if not args.any_corpus and corpus.get("version") != version:
            problems.append(f"{rid}: version {corpus.get('version')} != pinned {version}")
        prefix = corpus.get("path_prefix", "")
        shape = rec.get("shape")
        if shape not in SHAPES:
            problems.append(f"{rid}: bad shape {shape!r}")
        if not str(rec.get("question", "")).strip():
            problems.append(f"{rid}: empty question")
        intents = rec.get("intents", [])
        if not 2 <= len(intents) <= 6:
            problems.append(f"{rid}: {len(intents)} intents (need 2-6)")
        n_q += 1
        per_corpus[key] += 1
        per_shape[shape] += 1
        per_corpus_shape[(key, shape)] += 1
        intents_hist[len(intents)] += 1
        root = dirs.get(key)
        if root is None:
            problems.append(f"{rid}: no directory given for corpus {key} (use --{key} or --fetch)")
        for it in intents:
            n_intents += 1
            gold = it.get("gold", [])
            if not str(it.get("intent", "")).strip() or not gold:
                problems.append(f"{rid}: intent without description or gold: {it}")
            for g in gold:
                n_gold += 1
                path, sep, qual = g.partition(":")
                if not sep or not qual or not path.endswith(".py"):
                    problems.append(f"{rid}: malformed gold {g!r}")
                    continue
                if not path.startswith(prefix):
                    problems.append(f"{rid}: gold {g!r} lacks prefix {prefix!r}")
                    continue
                if root is None:
                    continue
                f = root / path if args.any_corpus else root / path[len(prefix):]
                if f not in trees:
                    try:
                        trees[f] = ast.parse(f.read_text(encoding="utf-8"), str(f))
                    except (OSError, SyntaxError):
                        trees[f] = None
                tree = trees[f]
                if tree is None:
                    problems.append(f"{rid}: file not found/unparsable: {path}")
                elif not resolves(tree, qual):
                    problems.append(f"{rid}: {qual} not defined in {path}")
                else:
                    n_ok += 1

    print(f"questions: {n_q}  intents: {n_intents}  gold locations: {n_gold}  resolved: {n_ok}")
    print("per corpus: " + ", ".join(f"{k}={per_corpus[k]}" for k in per_corpus))
    print("per shape:  " + ", ".join(f"{s}={per_shape[s]}" for s in sorted(SHAPES)))
    for k in per_corpus:
        print(f"  {k:7s} " + ", ".join(f"{s}={per_corpus_shape[(k, s)]}" for s in sorted(SHAPES)))
    print("intents per question: " + ", ".join(f"{n}:{intents_hist[n]}" for n in sorted(intents_hist)))
    if problems:
        print(f"FAIL: {len(problems)} problem(s)")
        for p in problems:
            print("  " + p)
        return 1
    print("OK: all gold locations resolve")
    return 0


if __name__ == "__main__":
    sys.exit(main())
