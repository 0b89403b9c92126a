"""Issue-like training rows for the standard search's second stage, from the release-note pairs (session 15).

The standard second stage serves issue reports (the router reads 103 of the 121 SWE-bench dev rows as reports),
but its weights were fitted on hand-written *questions* about code. The release-note pairs of ``releases.py``
are the issue-like data PyPI carries: an entry of release N's changelog and the function of release N-1 that
the change edited. Here each pair becomes one row in the shape of the evaluation data: the old release's
sdist unpacked (its ``.py`` files) as the corpus, the entry as the query, the changed unit as the gold. The
packages are the pinned training list (``packages.py``): none of them is an evaluation project.

Rows: ``{"id", "package", "version", "tree", "archive", "query", "gold"}`` (``gold``: ``path:qualname`` keys).
Which rows the pairs give depends on the miner's version and on PyPI's releases, so a fit's rows are kept pinned
(``pin``: each release's sdist by file name and sha256, no local path) and read back from that file
(``pinned_rows``); ``bench/data/reports/`` holds the shipped standard weights' rows.
"""
from __future__ import annotations

import hashlib
import json
import re
import sys
import tarfile
import zipfile
from collections import defaultdict
from pathlib import Path, PurePosixPath

from .mine import is_test_path, third_party
from .packages import PACKAGES

# what a wheel would not carry: the evaluation corpora are wheels (the package, no tests, docs or examples)
_NOT_IN_WHEEL = re.compile(r"(^|/)(docs?|examples?|benchmarks?|bench|asv_bench|tools|scripts|ci)/")

_ARCHIVE = re.compile(r"^(?P<name>.+?)-(?P<version>\d[^-]*?)\.(?:tar\.gz|tgz|zip)$")


def _norm(name: str) -> str:
    return re.sub(r"[-_.]+", "_", name).lower()


def _sdists(work: Path) -> dict[tuple[str, str], Path]:
    out = {}
    for p in (work / "sdists").glob("*"):
        m = _ARCHIVE.match(p.name)
        if m:
            out[(_norm(m.group("name")), m.group("version"))] = p
    return out


def unpack(archive: Path, dest: Path) -> Path:
    """The archive's ``.py`` files under ``dest``, as its wheel would carry them (top folder stripped; tests, docs,
    examples and vendored code left out; nothing is run). Idempotent."""
    done = dest / ".unpacked"
    if done.exists():
        return dest
    dest.mkdir(parents=True, exist_ok=True)

    def write(rel: str, data: bytes) -> None:
        pp = PurePosixPath(rel)
        if pp.is_absolute() or ".." in pp.parts or not rel.endswith(".py") or len(data) > 1_000_000 \
                or is_test_path(rel) or third_party(rel) or _NOT_IN_WHEEL.search(rel):
            return
        target = dest.joinpath(*pp.parts)
        target.parent.mkdir(parents=True, exist_ok=True)
        target.write_bytes(data)

    if archive.name.endswith(".zip"):
        with zipfile.ZipFile(archive) as zf:
            for i in zf.infolist():
                if not i.is_dir() and "/" in i.filename:
                    write(i.filename.split("/", 1)[1], zf.read(i))
    else:
        with tarfile.open(archive) as tf:
            for m in tf:
                if m.isfile() and "/" in m.name:
                    f = tf.extractfile(m)
                    if f is not None:
                        write(m.name.split("/", 1)[1], f.read())
    done.write_text("")
    return dest


def report_rows(work: Path, packages: list[str] | None = None, max_versions: int = 4) -> list[dict]:
    """One row per release-note pair, for the newest ``max_versions`` old releases of each package that have
    pairs (an index per old release; more releases mostly repeat the same code)."""
    archives = _sdists(work)
    rows = []
    for name in packages or list(PACKAGES):
        f = work / "releases" / f"{name}.jsonl"
        if not f.exists():
            continue
        pairs = [json.loads(line) for line in f.read_text().splitlines() if line.strip()]
        by_version: dict[str, list[dict]] = defaultdict(list)
        for p in pairs:
            by_version[p["version"]].append(p)
        versions = [v for v in by_version if (_norm(name), v) in archives][-max_versions:]
        for v in versions:
            rows += [_row(work, f"{name}-{v}-{j}", name, v, archives[(_norm(name), v)], p["query"],
                          [f"{p['path']}:{p['qualname']}"]) for j, p in enumerate(by_version[v])]
    return rows


def _row(work: Path, rid: str, package: str, version: str, archive: Path, query: str, gold: list[str]) -> dict:
    """One row: the old release's sdist ``archive`` unpacks to ``WORK/trees/<package>-<version>``."""
    return {"id": rid, "package": package, "version": version,
            "tree": str(work / "trees" / f"{_norm(package)}-{version}"), "archive": str(archive), "query": query,
            "gold": gold}


def pin(rows: list[dict]) -> list[dict]:
    """``report_rows``' rows in the form a fit can be made again from (``pinned_rows``): the sdist each row's tree
    comes from named by file and sha256 instead of local paths."""
    digests: dict[str, str] = {}
    out = []
    for r in rows:
        archive = Path(r["archive"])
        if archive.name not in digests:
            digests[archive.name] = hashlib.sha256(archive.read_bytes()).hexdigest()
        out.append({"id": r["id"], "package": r["package"], "version": r["version"], "sdist": archive.name,
                    "sha256": digests[archive.name], "query": r["query"], "gold": r["gold"]})
    return out


def pinned_rows(path: Path, work: Path) -> list[dict]:
    """The rows ``pin`` wrote, as ``report_rows`` gives them: an sdist not in ``WORK/sdists`` is looked up among its
    release's files on PyPI (JSON API) and fetched; its sha256 is checked either way; its tree goes under
    ``WORK/trees``. A release whose sdist cannot be had with that sha256 is left out with its rows, said on stderr."""
    from .releases import _json, _pypi, fetch_sdist, sdist_of

    def fetch(r: dict) -> Path | None:
        if (have := fetch_sdist({"filename": r["sdist"], "digests": {"sha256": r["sha256"]}}, work / "sdists")):
            return have  # at hand, its sha256 checked
        try:
            files = _json(_pypi(r["package"])).get("releases", {}).get(r["version"], [])
        except (OSError, ValueError) as e:  # unreachable, or not JSON
            print(f"  ! {r['sdist']}: PyPI: {e}", file=sys.stderr)
            return None
        found = sdist_of(r["package"], [f for f in files if f["filename"] == r["sdist"]], yanked=True)
        if found is None:
            print(f"  ! {r['sdist']}: not among {r['package']} {r['version']}'s files", file=sys.stderr)
            return None
        return fetch_sdist({**found, "digests": {"sha256": r["sha256"]}}, work / "sdists")

    rows = [json.loads(line) for line in path.read_text().splitlines() if line.strip()]
    archives: dict[str, Path | None] = {}
    out = []
    for r in rows:
        if r["sdist"] not in archives:
            archives[r["sdist"]] = fetch(r)
            if archives[r["sdist"]] is None:
                print(f"  ! {r['sdist']} (sha256 {r['sha256'][:12]}…) not had: its rows are left out", file=sys.stderr)
        if (archive := archives[r["sdist"]]) is not None:
            out.append(_row(work, r["id"], r["package"], r["version"], archive, r["query"], r["gold"]))
    return out


def gold_match(keys: list[str], gold: list[str]) -> bool:
    """A unit is gold when its key is a gold key, or a gold key is a def nested inside it."""
    return any(k == g or g.startswith(k + ".") for k in keys for g in gold)
