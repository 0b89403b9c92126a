"""The counts of the mined release-note pairs (``WORK/releases``): per package, per reason an entry or a
release went unpaired, and a seeded sample of pairs to read. ``python bench/train_embedder.py
release-report`` writes them as markdown (``bench/results/release_pairs.md`` keeps the last run's)."""

from __future__ import annotations

import json
import random
from collections import Counter
from pathlib import Path

from .mine import read_jsonl
from .release_list import load_pins

RELEASE_SKIPS = {
    "no_changelog_section": "the new release's changelog has no section for it (or none in the sdist)",
    "no_changed_units": "no function or method of the old release differs in the new one",
    "too_many_changed": "more changed functions than a rewrite's cap (`MAX_CHANGED_NAMED`)",
    "download_failed": "the sdist did not download (or its sha256 did not match)",
    "bad_archive": "the sdist did not unpack",
}
ENTRY_SKIPS = {
    "names_no_changed_unit_in_a_big_release": "names no changed function as code, in a release of more "
    "than `MAX_CHANGED` changed functions (words would be guesswork)",
    "shares_no_word_with_a_changed_unit": "shares no word with the path or name of any changed function",
    "shares_one_word_in_a_release_of_many_changes": "shares only one word, in a release of more than "
    "`MANY_CHANGED` changed functions",
    "ties_between_units": "two or more changed functions share as many words with it",
    "release_changed_no_function": "its release changed no function (data, constants, new code only)",
    "release_changed_too_many_functions": "its release changed more than `MAX_CHANGED_NAMED` functions",
    "names_too_many_units": "names more than `MAX_NAMED` changed functions (a list, not a change)",
}


def how(r: dict) -> str:
    s = r.get("shared_words", 0)
    return {30: "qualified name", 20: "bare name", 10: "class and method words"}.get(s, "shared words")


def collect(work: Path) -> tuple[list[dict], list[dict]]:
    """(per-package stats rows, all pairs) of the pinned packages mined so far."""
    pins = load_pins()
    rows, pairs = [], []
    for name in pins:
        st, pj = work / "releases" / f"{name}.stats.json", work / "releases" / f"{name}.jsonl"
        if not (st.exists() and pj.exists()):
            continue
        stats = json.loads(st.read_text())
        rows.append({"package": name, "versions": pins[name], **stats})
        pairs += read_jsonl(pj)
    return rows, pairs


def markdown(work: Path, sample: int = 20, seed: int = 44) -> str:
    rows, pairs = collect(work)
    pins = load_pins()
    total = Counter()
    unpaired = Counter()
    for r in rows:
        total.update({k: v for k, v in r.items() if isinstance(v, int)})
        unpaired.update(r.get("unpaired_entries", {}))
    kinds = Counter(how(p) for p in pairs)
    entries_paired = total["entries_paired"]
    out = [
        "# Release-note pairs (issue 44)",
        "",
        f"{len(pairs):,} pairs (changelog entry of release N → a function of release N-1 that N changed and the "
        f"entry names or touches) from {len(rows)} of the {len(pins)} pinned packages "
        f"(`bench/embedder/release_pins.json`), {total['release_pairs']:,} release pairs (N-1, N) compared. "
        f"Data card: `bench/embedder/RELEASE_PAIRS.md`. Mined with `python bench/train_embedder.py mine "
        f"--pinned-releases` (the pairs live under ~/.cache/repoctx/train/releases, never in git).",
        "",
        "| | count |",
        "|---|---|",
        f"| packages mined / pinned | {len(rows)} / {len(pins)} |",
        f"| packages with at least one pair | {sum(1 for r in rows if r.get('pairs'))} |",
        f"| release pairs compared | {total['release_pairs']:,} |",
        f"| release pairs used (a changelog section and changed functions) | {total['releases_used']:,} |",
        f"| changelog entries read (housekeeping dropped) | {total['entries']:,} |",
        f"| entries paired | {entries_paired:,} ({100 * entries_paired / max(1, total['entries']):.1f}%) |",
        f"| pairs (an entry naming two changed functions is two pairs) | {len(pairs):,} |",
        f"| distinct (entry, function) pairs | {len({(p['query'], p['path'], p['qualname']) for p in pairs}):,} |",
        "",
        "## How each pair was matched",
        "",
        "| rule | pairs |",
        "|---|---|",
        *[f"| {k} | {v:,} |" for k, v in kinds.most_common()],
        "",
        "## Release pairs left out, and why",
        "",
        "| reason | release pairs |",
        "|---|---|",
        *[f"| {RELEASE_SKIPS[k]} | {total[k]:,} |" for k in RELEASE_SKIPS if total[k]],
        "",
        "## Entries that matched nothing, and why",
        "",
        "| reason | entries |",
        "|---|---|",
        *[f"| {ENTRY_SKIPS.get(k, k)} | {v:,} |" for k, v in unpaired.most_common()],
        "",
        "## Per package",
        "",
        "| package | releases pinned (oldest → newest) | release pairs used | entries | paired | pairs |",
        "|---|---|---|---|---|---|",
    ]
    for r in sorted(rows, key=lambda r: (-r.get("pairs", 0), r["package"])):
        vs = r["versions"]
        err = f" ({r['error']})" if r.get("error") else ""
        out.append(
            f"| {r['package']} | {vs[0]} → {vs[-1]} ({len(vs)}){err} | {r.get('releases_used', 0)} | "
            f"{r.get('entries', 0)} | {r.get('entries_paired', 0)} | {r.get('pairs', 0)} |"
        )
    rng = random.Random(seed)
    picked = rng.sample(pairs, min(sample, len(pairs)))
    out += [
        "",
        f"## A seeded sample of {len(picked)} pairs (random.Random({seed}))",
        "",
        "| # | package old → new | function (old release) | rule | entry |",
        "|---|---|---|---|---|",
    ]
    for i, p in enumerate(picked, 1):
        q = p["query"].replace("|", "\\|")
        out.append(
            f"| {i} | {p['package']} {p['version']} → {p['release']} | `{p['path']}:{p['qualname']}` | {how(p)} | {q} |"
        )
    return "\n".join(out) + "\n"
