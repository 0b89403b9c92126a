"""Parse speed on a big tree (issue 39): the indexer's per-file parse (``indexer._parse_one``: decode and redact,
tree-sitter or windows, capsule ids namespaced) over every file of Django 4.2.16's sdist, old code beside new in
the same run, and a check that both give the same capsules (every field), references and imports.

    python bench/parse_speed.py                          # old = a git worktree of HEAD at /tmp/rc-old-parse
    python bench/parse_speed.py --old-src DIR/src        # old = another checkout's src/
    python bench/parse_speed.py --check-tree DIR ...     # also compare old and new on more trees (any language)

Each side runs in its own child process (``PYTHONPATH`` set to its src/), twice, alternating; the table keeps each
phase's smaller CPU time (user+sys of the process, ``time.process_time``), which the machine's other load changes
less than wall time. Phases: ``load_text`` (decode, redact), then ``_parse_one`` per group of files (language and
method: tree-sitter, regex, window), and the tree-sitter pieces measured apart (``Parser.parse`` and the query of
the Python files). Output equality is checked on every file of every tree, and for the tree-sitter files also with
``calls=False`` (what the history miner asks for). Table to stdout and ``bench/results/parse_speed.md``.
"""

from __future__ import annotations

import argparse
import collections
import dataclasses
import json
import os
import pickle
import subprocess
import sys
import tempfile
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent
DJANGO = Path("/tmp/repoctx-bigtree/Django-4.2.16")  # bench/big_tree.py unpacks the sdist here
OLD = Path("/tmp/rc-old-parse")


def _files(root: Path):
    from repoctx.config import Settings
    from repoctx.ingest.walk import walk

    return [(sf, sf.abspath.read_bytes()) for sf in walk(root, Settings())]


def _record(pf, note: str, flags: dict) -> tuple:
    if pf is None:
        return (note, flags)
    return (
        note,
        flags,
        pf.path,
        pf.language,
        pf.module,
        pf.method,
        pf.syntax_errors,
        sorted(pf.imports.items()),
        [dataclasses.asdict(c) for c in pf.capsules],
        [dataclasses.astuple(r) for r in pf.refs],
    )


def worker(trees: list[Path], out: Path, timed: bool) -> None:
    """One side: parse every file of every tree, write the outputs (pickle) and, for the first tree, CPU times."""
    from repoctx.capsules.parse import parse_source, supported
    from repoctx.config import Settings
    from repoctx.indexer import _parse_one
    from repoctx.ingest.walk import load_text

    settings = Settings()
    outputs: dict[str, tuple] = {}
    times: dict[str, float] = collections.defaultdict(float)
    counts: dict[str, list[int]] = collections.defaultdict(lambda: [0, 0])
    for k, root in enumerate(trees):
        files = _files(root)
        if k == 0 and timed:
            for sf, data in files[:30]:  # grammars loaded, queries compiled
                _parse_one(sf, data, settings, "r")
            t = time.process_time()
            for sf, data in files:
                load_text(data, redact_secrets=not settings.index_secrets, path=sf.path)
            times["load_text"] = time.process_time() - t
            t0 = time.process_time()
            for sf, data in files:
                t = time.process_time()
                pf, note, flags = _parse_one(sf, data, settings, "r")
                group = f"{sf.language} {pf.method if pf else note}"
                times[group] += time.process_time() - t
                counts[group][0] += 1
                counts[group][1] += len(pf.capsules) if pf else 0
            times["all"] = time.process_time() - t0
            _tree_sitter_parts(files, settings, times)
        for sf, data in files:
            key = f"{root}:{sf.path}"
            pf, note, flags = _parse_one(sf, data, settings, "r")
            rec = _record(pf, note, flags)
            if pf is not None and supported(pf.language) and pf.method == "tree-sitter":
                loaded = load_text(data, redact_secrets=not settings.index_secrets, path=sf.path)
                assert loaded is not None
                rec = (*rec, _record(parse_source(sf.path, loaded.text, pf.language, calls=False), "", {}))
            outputs[key] = rec
    with out.open("wb") as f:
        pickle.dump({"outputs": outputs, "times": dict(times), "counts": dict(counts)}, f)


def _tree_sitter_parts(files, settings, times: dict[str, float]) -> None:
    """The C side of the Python files' parse, apart: ``Parser.parse`` and one run of the query."""
    from tree_sitter import QueryCursor

    from repoctx.capsules import parse as P
    from repoctx.ingest.walk import load_text

    srcs = []
    for sf, data in files:
        if sf.language == "python":
            loaded = load_text(data, redact_secrets=not settings.index_secrets, path=sf.path)
            if loaded is not None and not loaded.minified:
                srcs.append(loaded.text.encode("utf-8", "replace"))
    parser = P._parser("python")
    t = time.process_time()
    trees = [parser.parse(s) for s in srcs]
    times["ts: Parser.parse (python)"] = time.process_time() - t
    query = P._query("python")
    t = time.process_time()
    for tree in trees:
        QueryCursor(query).captures(tree.root_node)
    times["ts: main query (python)"] = time.process_time() - t
    receiver_query = getattr(P, "_receiver_query", None)  # old code: a second query for receivers
    if receiver_query is not None:
        t = time.process_time()
        for tree in trees:
            QueryCursor(receiver_query()).matches(tree.root_node)
        times["ts: receiver query (python)"] = time.process_time() - t


def _run_side(src: Path, trees: list[Path], out: Path, timed: bool) -> dict:
    env = dict(os.environ, PYTHONPATH=str(src))
    args = [sys.executable, __file__, "--worker", str(out), *(["--timed"] if timed else [])]
    for t in trees:
        args += ["--tree", str(t)]
    subprocess.run(args, env=env, check=True)
    with out.open("rb") as f:
        return pickle.load(f)


def _diff(old: dict, new: dict) -> list[str]:
    diffs = []
    for key in sorted(old.keys() | new.keys()):
        a, b = old.get(key), new.get(key)
        if a != b:
            diffs.append(key)
    return diffs


def _explain(a, b) -> str:
    if a is None or b is None:
        return "missing on one side"
    for i, (x, y) in enumerate(zip(a, b, strict=False)):
        if x != y:
            if isinstance(x, list) and isinstance(y, list):
                for j, (u, v) in enumerate(zip(x, y, strict=False)):
                    if u != v:
                        return f"field {i} item {j}: {str(u)[:300]} != {str(v)[:300]}"
                return f"field {i}: {len(x)} items != {len(y)}"
            return f"field {i}: {str(x)[:300]} != {str(y)[:300]}"
    return "lengths differ"


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--worker", type=Path)
    ap.add_argument("--timed", action="store_true")
    ap.add_argument("--tree", type=Path, action="append", default=[])
    ap.add_argument("--old-src", type=Path, default=OLD / "src")
    ap.add_argument("--check-tree", type=Path, action="append", default=[])
    ap.add_argument("--repeat", type=int, default=2)
    ap.add_argument("--out", type=Path, default=HERE / "results" / "parse_speed.md")
    a = ap.parse_args()
    if a.worker:
        worker(a.tree, a.worker, a.timed)
        return
    if not a.old_src.exists():
        subprocess.run(["git", "worktree", "add", str(OLD), "HEAD"], cwd=HERE.parent, check=True)
    new_src = HERE.parent / "src"
    trees = [DJANGO, *a.check_tree]
    load = os.getloadavg()
    with tempfile.TemporaryDirectory() as tmp:
        runs: dict[str, list[dict]] = {"old": [], "new": []}
        for i in range(a.repeat):
            for side, src in (("old", a.old_src), ("new", new_src)):
                # outputs of every tree once; the timed runs read the first tree only
                runs[side].append(_run_side(src, trees if i == 0 else trees[:1], Path(tmp) / f"{side}{i}.pkl", True))
        old_out, new_out = runs["old"][0]["outputs"], runs["new"][0]["outputs"]
        diffs = _diff(old_out, new_out)
    load_after = os.getloadavg()

    def best(side: str, key: str) -> float:
        return min(r["times"].get(key, 0.0) for r in runs[side])

    counts = runs["new"][0]["counts"]
    groups = sorted(counts, key=lambda g: -best("old", g))
    rows = [
        "| phase | files | units | old CPU s | new CPU s | new/old |",
        "|---|---:|---:|---:|---:|---:|",
    ]

    def row(label: str, key: str, files: str = "", units: str = "") -> None:
        o, n = best("old", key), best("new", key)
        ratio = f"{n / o:.2f}" if o else "-"
        rows.append(f"| {label} | {files} | {units} | {o:.2f} | {n:.2f} | {ratio} |")

    total_files = sum(c[0] for c in counts.values())
    total_units = sum(c[1] for c in counts.values())
    row("**`_parse_one`, every file**", "all", f"{total_files:,}", f"{total_units:,}")
    row("of which `load_text` (decode, redact; not parse code)", "load_text", f"{total_files:,}")
    for g in groups:
        if best("old", g) >= 0.005 or best("new", g) >= 0.005:
            row(f"`_parse_one`: {g}", g, f"{counts[g][0]:,}", f"{counts[g][1]:,}")
    for key in sorted(k for r in runs["old"] + runs["new"] for k in r["times"] if k.startswith("ts: ")):
        if f"| {key} |" not in "\n".join(rows):
            row(key, key)
    n_checked = len(old_out)
    check = (
        f"Identical output (capsules, every field; refs; imports; flags; and `calls=False`): {n_checked:,} files "
        f"over {len(trees)} tree(s), {len(diffs)} differences."
    )
    lines = [
        "# Parse speed: Django 4.2.16 sdist, old vs new parse code",
        "",
        f"`python bench/parse_speed.py` on {time.strftime('%Y-%m-%d %H:%M UTC', time.gmtime())}; "
        f"{os.cpu_count()} cores, load average {load[0]:.1f} before, {load_after[0]:.1f} after. "
        f"CPU seconds (user+sys), the smaller of {a.repeat} runs a side, alternating old/new.",
        "",
        *rows,
        "",
        check,
        "",
        "Trees: " + ", ".join(str(t) for t in trees),
    ]
    text = "\n".join(lines) + "\n"
    print(text)
    for key in diffs[:20]:
        print("DIFF", key, _explain(old_out.get(key), new_out.get(key)))
    a.out.parent.mkdir(parents=True, exist_ok=True)
    a.out.write_text(text)
    print(json.dumps({"differences": len(diffs)}))


if __name__ == "__main__":
    main()
