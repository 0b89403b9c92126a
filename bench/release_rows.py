"""Held-out evaluation rows from release notes: packages no shipped model or weight was fitted on (issue 44).

The dev split (121 SWE-bench rows, six projects) decided every ranking choice, and the issue's own held-out
measurement showed dev figures 4-8 points above what unseen projects get. This makes a larger sample from
projects nobody tuned on, in the shape of ``repoctx eval``'s rows: an entry of release N's changelog is the
question, the functions of release N-1 that N changed and the entry names or touches are the gold, and release
N-1's sdist is the tree (``--tree sdist``: tests and docs included, as a checkout has them). The pairing is the
release-note miner's (``bench/embedder/releases.py``, without hard negatives); its precision is estimated in
``bench/results/release_pairs.md``.

Which packages, by a rule: the pinned list's order (``bench/embedder/release_pins.json``, PyPI download rank),
leaving out every package a shipped model or weight file was fitted or validated on (the embedders' training
packages and validation packages, ``embedder.packages``; the packages of ``bench/data/reports/``) and the
evaluation projects (``release_list.excluded``); per package its three newest pinned releases (two release
pairs), an sdist of at most ``--max-mb`` MB, at most ``--per-package`` rows (changelog order). A gold unit must be
a function or a method of a top-level class (what the eval's function ranking holds).

    python bench/release_rows.py --packages 150 --out rows.jsonl    # the committed 296 rows again, byte for byte
    repoctx eval bench/data/heldout/release_rows_2026-12-07.jsonl --tree sdist --config hybrid+graph --json

Each row names its sdist and sha256 (``sdist``, ``sha256``); ``repoctx eval`` fetches the same file from PyPI
(checked against the index's sha256) or takes it from its cache.
"""

from __future__ import annotations

import argparse
import json
import sys
from collections import Counter
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

from embedder.packages import PACKAGES, VALIDATION
from embedder.release_list import evaluation_projects, excluded, load_pins, normalize, pinned_chain
from embedder.releases import mine_releases

REPORTS = Path(__file__).resolve().parent / "data" / "reports"
HELDOUT = Path(__file__).resolve().parent / "data" / "heldout" / "release_rows_2026-12-07.jsonl"


def fitted_packages(reports: Path = REPORTS) -> set[str]:
    """Every package a shipped model or weight file saw: the embedders' lists and the pinned release rows."""
    names = {normalize(n) for n in (*PACKAGES, *VALIDATION)}
    for f in reports.glob("*.jsonl"):
        for line in f.read_text().splitlines():
            if line.strip():
                names.add(normalize(json.loads(line)["package"]))
    for f in reports.glob("*.chains.json"):
        names.update(normalize(n) for n in json.loads(f.read_text()))
    return names


def gold_key(pair: dict) -> str | None:
    """``path:qualname`` as the eval counts functions, or None when the unit is nested (a function inside a
    function, a class inside a class), which the eval would count as its outer function."""
    parts = pair["qualname"].split(".")
    if (pair["kind"], len(parts)) in (("function", 1), ("method", 2)):
        return f"{pair['path']}:{pair['qualname']}"
    return None


def rows_of(name: str, pairs: list[dict], chain: dict[str, dict], per_package: int) -> list[dict]:
    by_entry: dict[tuple[str, str], list[dict]] = {}
    for p in pairs:
        by_entry.setdefault((p["version"], p["query"]), []).append(p)
    rows = []
    for (version, query), ps in by_entry.items():
        keys = {gold_key(p) for p in ps}
        if None in keys:
            continue
        info = chain[version]
        rows.append(
            {
                "instance_id": f"{name}-{version}-{len(rows)}",
                "repo": name,
                "query": query,
                "gold_files": sorted({p["path"] for p in ps}),
                "gold_functions": sorted(k for k in keys if k),
                "corpus": {"pypi": name, "version": version, "mode": "release before the change"},
                "sdist": info["filename"],
                "sha256": info.get("digests", {}).get("sha256", ""),
                "release": ps[0]["release"],
                "match": max(p["shared_words"] for p in ps),
            }
        )
        if len(rows) >= per_package:
            break
    return rows


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--packages", type=int, default=60, help="stop after this many packages gave rows")
    ap.add_argument("--per-package", type=int, default=3)
    ap.add_argument("--max-mb", type=float, default=5.0)
    ap.add_argument("--work", type=Path, default=Path.home() / ".cache" / "repoctx" / "train")
    ap.add_argument("--out", type=Path, required=True)
    a = ap.parse_args(argv)
    skip = fitted_packages()
    projects = evaluation_projects()
    pins = load_pins()
    rows: list[dict] = []
    used = tried = 0
    tally: Counter[str] = Counter()
    for name, versions in pins.items():
        if used >= a.packages:
            break
        if normalize(name) in skip or excluded(name, projects) or len(versions) < 2:
            tally["fitted, evaluated or too few releases"] += 1
            continue
        tried += 1
        try:
            chain = pinned_chain(name, versions[-3:])
        except Exception as e:  # noqa: BLE001 - PyPI unreachable for one package: noted, the next goes on
            print(f"  ! {name}: {type(e).__name__}: {e}", file=sys.stderr)
            tally["PyPI did not answer"] += 1
            continue
        if any(info.get("size", 0) > a.max_mb * 1e6 for _, info in chain):
            tally["an sdist above the size cap"] += 1
            continue
        pairs, _ = mine_releases(name, a.work, chain=chain, negatives=False)
        got = rows_of(name, pairs, dict(chain), a.per_package)
        if not got:
            tally["no pair, or only nested units"] += 1
            continue
        used += 1
        rows += got
        print(f"[{used}/{a.packages}] {name}: {len(got)} rows", file=sys.stderr, flush=True)
    a.out.parent.mkdir(parents=True, exist_ok=True)
    a.out.write_text("".join(json.dumps(r) + "\n" for r in rows))
    print(json.dumps({"rows": len(rows), "packages": used, "packages_tried": tried, "left_out": tally}, indent=1))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
