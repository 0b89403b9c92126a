"""The pinned packages of the release-note miner (issue 44), chosen by a rule, and what is kept out of them.

Rule (``select``): PyPI's most-downloaded packages, in the order of their download rank (the workplace's
``pypi.tsv``, column ``rank_among_15000_most_downloaded``), keeping each that

1. is no evaluation project (``excluded``: the repositories of ``../shared/eval/*.jsonl``, the projects of
   ``bench/data/train``, and ``packages.EXCLUDED_PROJECTS``, names compared as PEP 503 normalizes them);
2. has at least two final releases with an sdist uploaded before ``CUTOFF`` (never "latest at run time");
3. ships, in its newest such sdist, Python code outside tests and docs and a changelog that has a section
   for that release (``releases.release_entries``), at most ``MAX_SDIST`` bytes.

Each kept package is pinned to its newest ``PAIRS_PER_PACKAGE + 1`` such releases: the consecutive pairs
(N-1, N) are what the miner compares. The pins are written to ``release_pins.json`` beside this file
(versions only; each sdist's sha256 comes from PyPI and is checked on download, and the mined data's
manifest records them). Nobody chose a package by what it yields.
"""

from __future__ import annotations

import json
import re
from collections import Counter
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

from .packages import EXCLUDED_PROJECTS

CUTOFF = "2026-12-01T00:00:00"
PAIRS_PER_PACKAGE = 12
MAX_SDIST = 20_000_000
PINS = Path(__file__).with_name("release_pins.json")
ROOT = Path(__file__).resolve().parents[2]
EVAL_DIR = ROOT.parent / "shared" / "eval"
TRAIN_DIR = ROOT / "bench" / "data" / "train"
RANKS = Path("/work/.library/env/packages/pypi.tsv")


def normalize(name: str) -> str:
    """PEP 503: ``Typing_Extensions`` and ``typing.extensions`` are ``typing-extensions``."""
    return re.sub(r"[-_.]+", "-", name).lower()


def evaluation_projects(eval_dir: Path = EVAL_DIR, train_dir: Path = TRAIN_DIR) -> frozenset[str]:
    """Every project an evaluation or a tuning set asks about, normalized: the repositories (``owner/name``)
    and PyPI names of the eval rows, the projects of bench/data/train (``click.jsonl``, ``click-b.jsonl``)
    and the fixed list of the SWE-bench Lite projects."""
    names = {normalize(n) for n in EXCLUDED_PROJECTS}
    for path in sorted(eval_dir.glob("*.jsonl")) if eval_dir.is_dir() else []:
        with path.open() as f:
            for line in f:
                if not line.strip():
                    continue
                row = json.loads(line)
                if row.get("repo"):
                    names.add(normalize(row["repo"].rsplit("/", 1)[-1]))
                corpus = row.get("corpus") or {}
                if isinstance(corpus, dict) and corpus.get("pypi"):
                    names.add(normalize(corpus["pypi"]))
    for path in sorted(train_dir.glob("*.jsonl")) if train_dir.is_dir() else []:
        names.add(normalize(re.sub(r"-b$", "", path.stem)))
    return frozenset(names)


def excluded(name: str, projects: frozenset[str] | None = None) -> bool:
    return normalize(name) in (evaluation_projects() if projects is None else projects)


def ranked_names(path: Path = RANKS) -> list[str]:
    """Package names in download-rank order (rank 1 first)."""
    rows = []
    with path.open() as f:
        next(f)
        for line in f:
            cols = line.rstrip("\n").split("\t")
            if len(cols) > 3 and cols[3].strip():
                rows.append((int(cols[3]), cols[0]))
    return [n for _, n in sorted(rows)]


def load_pins(path: Path | None = None) -> dict[str, list[str]]:
    path = path or PINS
    return json.loads(path.read_text())["packages"] if path.exists() else {}


def pinned_chain(name: str, versions: list[str]) -> list[tuple[str, dict]]:
    """The sdist of each pinned version (PyPI's JSON for that package; the versions are not chosen here)."""
    from .releases import _json, _pypi, sdist_of

    releases = _json(_pypi(name)).get("releases", {})
    chain = [(v, sdist_of(name, releases.get(v, []), yanked=True)) for v in versions]
    return [(v, info) for v, info in chain if info]


def _chain(name: str, n: int) -> list[tuple[str, dict]]:
    """The newest ``n`` final releases uploaded before ``CUTOFF`` with an sdist, oldest first."""
    from .releases import release_chain

    return release_chain(name, None, n, before=CUTOFF)


def qualifies(name: str, work: Path) -> tuple[list[tuple[str, dict]], str]:
    """(the release chain, "") when ``name`` passes rules 2 and 3, else ([], the reason)."""
    from .releases import _sources, fetch_sdist, release_entries, sdist_files

    try:
        chain = _chain(name, PAIRS_PER_PACKAGE + 1)
    except OSError:
        return [], "pypi_unreachable"
    except ValueError:
        return [], "bad_pypi_answer"
    if len(chain) < 2:
        return [], "fewer_than_two_sdists"
    v, info = chain[-1]
    if info.get("size", 0) > MAX_SDIST:
        return [], "sdist_too_big"
    path = fetch_sdist(info, work / "sdists")
    if path is None:
        return [], "download_failed"
    try:
        files = sdist_files(path)
    except Exception:  # noqa: BLE001 - a broken archive costs the package, whatever the archive library raises
        return [], "bad_archive"
    if not _sources(files):
        return [], "no_python_code"
    if not release_entries(files, v):
        return [], "no_changelog_section"
    return chain, ""


def select(work: Path, want: int, ranks: Path = RANKS, threads: int = 4, resume: bool = False) -> dict:
    """Pin the first ``want`` packages in rank order that pass the rule; write ``PINS``; return the tally.
    With ``resume``, the pins file's packages are kept and the ranks after its ``last_rank_seen`` are read
    (the same list as a fresh run for the larger ``want``: the rule and the order are fixed)."""
    from .releases import fetch_sdist

    projects = evaluation_projects()
    tally: Counter = Counter()
    pins: dict[str, list[str]] = {}
    i = 0  # names[:i] are decided
    if resume and PINS.exists():
        meta = json.loads(PINS.read_text())
        pins, i = meta["packages"], meta["last_rank_seen"]
        tally.update({k: v for k, v in meta["tally"].items() if k != "candidates_seen"})
    names = ranked_names(ranks)
    pool = ThreadPoolExecutor(threads)
    prefetch = []

    def head(complete: bool) -> dict:
        return {
            "cutoff": CUTOFF,
            "pairs_per_package": PAIRS_PER_PACKAGE,
            "last_rank_seen": i,
            "tally": {**tally, "candidates_seen": i},
            "complete": complete,
        }

    while len(pins) < want and i < len(names):
        batch = names[i : i + threads]
        results = pool.map(
            lambda n: ("evaluation_project", []) if excluded(n, projects) else qualifies(n, work)[::-1], batch
        )
        for name, (why, chain) in zip(batch, results, strict=True):
            if len(pins) >= want:
                break
            i += 1
            if why:
                tally[why] += 1
                continue
            pins[name] = [v for v, _ in chain]
            tally["pinned"] += 1
            prefetch += [pool.submit(fetch_sdist, info, work / "sdists") for _, info in chain[:-1]]
            print(f"[select {len(pins)}/{want}] {name}: {len(chain)} releases", flush=True)
        write_pins(pins, head(False))
    for f in prefetch:
        f.result()
    pool.shutdown()
    write_pins(pins, head(True))
    return {**tally, "candidates_seen": i}


def write_pins(pins: dict[str, list[str]], head: dict, path: Path | None = None) -> None:
    """One package a line, so that a diff of the list reads as packages added or dropped."""
    path = path or PINS
    lines = [f"{json.dumps(k)}: {json.dumps(v)}" for k, v in pins.items()]
    body = ",\n".join(" " + x for x in lines)
    meta = ",\n".join(f"{json.dumps(k)}: {json.dumps(v)}" for k, v in head.items())
    tmp = path.with_suffix(".tmp")
    tmp.write_text("{\n" + meta + ',\n"packages": {\n' + body + "\n}}\n")
    tmp.replace(path)
