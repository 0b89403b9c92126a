"""Stage `mine --releases`: issue-like pairs from consecutive releases of the pinned packages.

A release note entry ("Fix ``Retry`` losing the backoff when the server sends Retry-After") is the closest
thing to an issue text that PyPI carries, and the code that changed between that release and the one
before is where the fix went: the same task as SWE-bench (an issue → the functions its fix edited, in the
code *before* the fix). Per package:

1. the newest ``--releases-per-package`` final versions up to the pinned one that have an sdist (PyPI's JSON
   API; each sdist's sha256 checked; cached under ``WORK/sdists``); nothing in an sdist is run;
2. for each consecutive pair (old, new): the ``.py`` files outside tests that differ, parsed with repoctx's
   parser; the changed units are the functions/methods of the *old* release whose text differs in the new
   one (innermost only: a class whose one method changed is not a changed unit);
3. the new release's section of its changelog (``CHANGES*``, ``CHANGELOG*``, ``HISTORY*``, ``NEWS*``,
   ``docs/changelog*``...), cut into entries (bullets), markup and issue links removed;
4. an entry is paired with the changed unit whose path and name share the most words with it (a unique
   best, at least one shared word, or the only changed unit of a one-entry release). Releases that change
   more than ``MAX_CHANGED`` units are skipped (too vague to pair).

The positive is the old unit as repoctx embeds it (docstring in: the query is not its docstring); hard
negatives come from BM25 over the old release's units and from the same file. Output:
``WORK/releases/NAME.jsonl`` (query_kind ``release``) and ``NAME.stats.json``.
"""

from __future__ import annotations

import hashlib
import json
import re
import tarfile
import urllib.request
import zipfile
from collections import Counter, defaultdict
from pathlib import Path, PurePosixPath

from repoctx.capsules.parse import parse_source
from repoctx.tokens import STOPWORDS, code_tokens, split_identifier

from .mine import BM25, UNIT_KINDS, is_test_path, negative, related, third_party, unit_record, write_jsonl
from .packages import PACKAGES

MAX_CHANGED = 60  # changed units in one release above which pairing by words is guesswork
MANY_CHANGED = 8  # above this, an entry needs two shared words with its unit
MAX_ENTRY_WORDS = 120
MIN_ENTRY_WORDS = 5
_CHANGELOG = re.compile(
    r"^(changes|changelog|change_log|history|news|releases?|release[-_]notes|whatsnew|"
    r"version[-_]?history|versions|changelog[-_]\d+)(\.(rst|md|txt|markdown))?$",
    re.I,
)
# one file per release: docs/releases/v6.4.1.rst (tornado), doc/release/release_3.2.rst (networkx)
_NOTES_DIR = re.compile(r"(^|/)(releases?|changes|changelog|news|history|whatsnew|release[-_]notes)/", re.I)
_VERSIONISH = re.compile(r"(?<![\w.])v?\d+\.\d+(\.\d+)*(?![\w])")
_UNDERLINE = re.compile(r"^\s*([=\-~^*#+`'\"])\1{2,}\s*$")
_BULLET = re.compile(r"^(\s*)([-*+•]|\d+[.)])\s+(.*)$")
# "- :release:`3.2.2 <2023-08-30>`": the `releases` Sphinx extension (invoke, fabric, paramiko); the entries
# below such a line, up to the next one, are that release's
_RELEASE_ROLE = re.compile(r"^\s*[-*]\s+:release:`\s*v?\d")
# "1.2.9<TAB>2026-07-06" (dulwich), "Version 3.9 2024-08-18" (nltk), "= 4.15.0 (20260607)" (beautifulsoup4),
# "**4.9.0**" (anyio), "1.2.3 (2020-01-01)", "v1.2.3 - 2020-01-01", "1.2.3": a version heading on its own line
_VERSION_LINE = re.compile(
    r"^[=*\s]*(version\s+|release\s+|v)?\d+\.\d+[\w.]*\**\s*"
    r"([-(:–—]|\d{4}-\d\d-\d\d|\d{8}|$)",
    re.I,
)
# zzzeek's changelog extension (alembic, mako, SQLAlchemy): ".. changelog::" / ":version: X" / ".. change::"
_CHANGELOG_DIRECTIVE = re.compile(r"^\s*\.\. changelog::")
_CHANGE_DIRECTIVE = re.compile(r"^\s*\.\. change::")
_DIRECTIVE_OPTION = re.compile(r"^\s*:(\w+):\s*(.*)$")
_HOUSEKEEPING_TAGS = frozenset({"docs", "doc", "tests", "test", "installation", "build", "ci", "changed", "general"})
_NOISE = [
    (re.compile(r":(?:issue|pr|bug|gh|ghissue|user|commit|cve|pull|feature|support)s?:`[^`]*`", re.I), ""),
    (re.compile(r"\b(?:pull request |patch )?courtesy(?: of)? [\w .-]+?\.?\s*$", re.I), ""),
    (re.compile(r"`#?\d+ <[^>]*>`__?"), ""),
    (re.compile(r"\[#?\d+\]\([^)]*\)"), ""),
    (re.compile(r"\[([^\]]+)\]\([^)]*\)"), r"\1"),
    (re.compile(r":[\w:.-]+:`~?!?([^`<]+?)(?:\s*<[^>]*>)?`"), r"\1"),
    (re.compile(r"`([^`<]+?)\s*<[^>]*>`__?"), r"\1"),
    (re.compile(r"\(?(?:\bgh-|#|\bissue\s*#?|\bPR\s*#?|\bpull request\s*#?)\d+\b\)?", re.I), ""),
    (re.compile(r"https?://\S+"), ""),
    (re.compile(r"\(?\b(?:thanks|contributed|reported|patch|by)\s+(?:to\s+)?@?[\w.-]+\)?\.?\s*$", re.I), ""),
    (re.compile(r"@[\w-]+"), ""),
    (re.compile(r"(?<!`)`~(?=[\w.])"), "`"),  # `~pkg.Name`: the default role's "short name" mark
    (re.compile(r"``|`|\*\*"), ""),
]


# --------------------------------------------------------------------------- PyPI


def _pypi(name: str) -> str:
    return f"https://pypi.org/pypi/{name}/json"


def _json(url: str) -> dict:
    with urllib.request.urlopen(url, timeout=60) as r:
        return json.load(r)


def release_chain(name: str, pinned: str, n: int) -> list[tuple[str, dict]]:
    """The newest ``n`` final releases up to ``pinned`` that have an sdist: [(version, file info)], oldest
    first."""
    from packaging.version import InvalidVersion, Version

    from urllib.parse import urljoin

    meta = _json(_pypi(name))
    top = Version(pinned)
    out = []
    for v, files in meta.get("releases", {}).items():
        try:
            ver = Version(v)
        except InvalidVersion:
            continue
        if ver.is_prerelease or ver.is_devrelease or ver > top:
            continue
        sd = [
            f
            for f in files
            if f.get("packagetype") == "sdist"
            and not f.get("yanked")
            and f["filename"].endswith((".tar.gz", ".zip", ".tgz"))
        ]
        if sd:  # the index may answer with URLs relative to the JSON document
            out.append((ver, v, {**sd[0], "url": urljoin(_pypi(name), sd[0]["url"])}))
    out.sort(key=lambda t: t[0])
    return [(v, f) for _, v, f in out[-n:]]


def fetch_sdist(info: dict, dest: Path) -> Path | None:
    dest.mkdir(parents=True, exist_ok=True)
    path = dest / info["filename"]
    want = info.get("digests", {}).get("sha256")
    if path.exists() and (not want or hashlib.sha256(path.read_bytes()).hexdigest() == want):
        return path
    try:
        with urllib.request.urlopen(info["url"], timeout=120) as r:
            data = r.read()
    except OSError as e:
        print(f"  ! {info['filename']}: {e}", flush=True)
        return None
    if want and hashlib.sha256(data).hexdigest() != want:
        print(f"  ! {info['filename']}: sha256 mismatch", flush=True)
        return None
    tmp = path.with_suffix(path.suffix + ".tmp")
    tmp.write_bytes(data)
    tmp.replace(path)
    return path


def sdist_files(path: Path) -> dict[str, bytes]:
    """Member path (top folder stripped) → bytes, for .py files and changelog-like files."""
    out: dict[str, bytes] = {}

    def keep(rel: str, size: int) -> bool:
        name = PurePosixPath(rel).name
        return size < 1_000_000 and (
            rel.endswith(".py")
            or bool(_CHANGELOG.match(name))
            or bool(_NOTES_DIR.search(rel) and name.endswith((".rst", ".md", ".txt")))
        )

    if path.name.endswith(".zip"):
        with zipfile.ZipFile(path) as zf:
            for i in zf.infolist():
                rel = i.filename.split("/", 1)[1] if "/" in i.filename else i.filename
                if not i.is_dir() and keep(rel, i.file_size):
                    out[rel] = zf.read(i)
        return out
    with tarfile.open(path) as tf:
        for m in tf:
            if not m.isfile():
                continue
            rel = m.name.split("/", 1)[1] if "/" in m.name else m.name
            if keep(rel, m.size):
                f = tf.extractfile(m)
                if f is not None:
                    out[rel] = f.read()
    return out


# --------------------------------------------------------------------------- changelog


def _norm_version(v: str) -> str:
    return v.lower().lstrip("v")


def _short(v: str) -> str:
    """``3.2.0`` → ``3.2``: a release-note file may leave out trailing zeros."""
    return re.sub(r"(\.0)+$", "", v)


def release_entries(files: dict[str, bytes], version: str) -> list[str]:
    """The bullet entries of ``version``'s section in the sdist's changelog (the first file that has one)."""
    notes = sorted(p for p in files if _NOTES_DIR.search(p) and not p.endswith(".py"))
    cands = sorted((p for p in files if _CHANGELOG.match(PurePosixPath(p).name)), key=lambda p: (p.count("/"), p))
    cands += [p for p in notes if p not in cands]  # a notes folder's files may hold sections of several releases
    want = _norm_version(version)
    for p in notes:  # a file of its own: docs/releases/v6.4.1.rst, release/version0.14.rst
        stem = re.sub(r"^(version|release|v)(?=\d)", "", PurePosixPath(p).stem, flags=re.I)
        found = [_norm_version(m.group(0)) for m in _VERSIONISH.finditer(stem.replace("_", " ").replace("-", " "))]
        if _short(want) in {_short(f) for f in found}:
            entries = _bullets(files[p].decode("utf-8", "replace").splitlines())
            if entries:
                return entries
    for p in cands:
        lines = files[p].decode("utf-8", "replace").splitlines()
        entries = _directive_entries(lines, want)
        if entries is None:
            section = _section(lines, want)
            entries = _bullets(section) if section is not None else None
        if entries:
            return entries
    return []


def _directive_entries(lines: list[str], version: str) -> list[str] | None:
    """The ``.. change::`` paragraphs of ``version``'s ``.. changelog::`` block; None when the file is not
    written with those directives (or has no block for the version)."""
    start = end = None
    for i, line in enumerate(lines):
        if not _CHANGELOG_DIRECTIVE.match(line):
            continue
        m = next((_DIRECTIVE_OPTION.match(x) for x in lines[i + 1 : i + 4] if x.strip().startswith(":version:")), None)
        if start is not None:
            end = i
            break
        if m and _norm_version(m.group(2).strip()) == version:
            start = i + 1
    if start is None:
        return None
    blocks: list[list[str]] = []
    for line in lines[start:end]:
        if _CHANGE_DIRECTIVE.match(line):
            blocks.append([])
        elif blocks:
            blocks[-1].append(line)
    entries = []
    for block in blocks:
        tags = set()
        text = []
        for line in block:
            m = _DIRECTIVE_OPTION.match(line)
            if m and not text:
                if m.group(1) == "tags":
                    tags = {t.strip().lower() for t in m.group(2).split(",") if t.strip()}
                continue
            if line.strip():
                text.append(line.strip())
            elif text:
                break  # the first paragraph: the rest is detail and examples
        if text and not (tags and tags <= _HOUSEKEEPING_TAGS):
            entries.append(" ".join(text))
    return _finish(entries)


def _is_header(lines: list[str], i: int) -> bool:
    line = lines[i].strip()
    if not line or len(line) > 90:
        return False
    if line.startswith("#"):
        return True
    nxt = lines[i + 1] if i + 1 < len(lines) else ""
    if _UNDERLINE.match(nxt):
        return True
    # a version line starts the line: "  3.7." inside an indented entry is the entry's text
    return bool((_VERSION_LINE.match(line) and not lines[i][:1].isspace()) or _RELEASE_ROLE.match(line))


def _section(lines: list[str], version: str) -> list[str] | None:
    start = None
    for i, line in enumerate(lines):
        if not _is_header(lines, i):
            continue
        found = [_norm_version(m.group(0)) for m in _VERSIONISH.finditer(line)]
        if start is None:
            if version in found:
                start = i + 1
        elif found and version not in found:
            return lines[start:i]
    return lines[start : start + 400] if start is not None else None


_HOUSEKEEPING = re.compile(
    r"^(doc|docs|documentation|tst|tests?|maint|ci|bld|build|sty|style|typo|chore|"
    r"refactor|deps|dependencies|bump|release|changelog|packaging|lint)\b",
    re.I,
)


def clean_entry(text: str) -> str:
    """An entry without markup, issue numbers and credits; empty for housekeeping (docs, tests, CI)."""
    for pat, rep in _NOISE:
        text = pat.sub(rep, text)
    text = re.sub(r"\s+", " ", text).strip(" -–—:;,")
    text = re.sub(r"(^|\s)\.(?=[A-Za-z_])", r"\1", text)  # `.SSLIOStream`: a role's leading dot
    text = re.sub(r"\s+([.,;:])", r"\1", re.sub(r"\(\s*\)", "", text)).strip()
    return "" if _HOUSEKEEPING.match(text) else text


def _bullets(section: list[str]) -> list[str]:
    entries, cur, indent = [], [], 0
    for line in section:
        if _UNDERLINE.match(line):
            continue
        m = _BULLET.match(line)
        if m:
            if cur:
                entries.append(" ".join(cur))
            cur, indent = [m.group(3).strip()], len(m.group(1))
        elif cur and line.strip() and (len(line) - len(line.lstrip())) > indent:
            cur.append(line.strip())
        elif cur:
            entries.append(" ".join(cur))
            cur = []
    if cur:
        entries.append(" ".join(cur))
    return _finish([e for e in entries if not e.startswith(":release:")])  # a release line is no entry


def _finish(entries: list[str]) -> list[str]:
    """Cleaned entries long enough to say something, cut to ``MAX_ENTRY_WORDS``."""
    out = []
    for e in entries:
        e = clean_entry(e)
        if len(e.split()) >= MIN_ENTRY_WORDS:
            out.append(" ".join(e.split()[:MAX_ENTRY_WORDS]))
    return out


# --------------------------------------------------------------------------- code changes


def _sources(files: dict[str, bytes]) -> dict[str, str]:
    out = {}
    for rel, data in files.items():
        if not rel.endswith(".py") or is_test_path(rel) or third_party(rel):
            continue
        if PurePosixPath(rel).parts[0] in (
            "docs",
            "doc",
            "examples",
            "benchmarks",
            "scripts",
            "tools",
            "build",
            ".github",
        ):
            continue
        out[rel] = data.decode("utf-8", "replace")
    return out


def _units(path: str, text: str) -> list:
    try:
        pf = parse_source(path, text, "python")
    except Exception:  # a parser bug costs one file
        return []
    return [c for c in pf.capsules if c.kind in UNIT_KINDS]


def changed_units(old: dict[str, str], new: dict[str, str]) -> tuple[list[dict], list[dict]]:
    """(changed innermost units of the old release, every unit of the old release: the pool)."""
    pool, changed = [], []
    for path, text in sorted(old.items()):
        units = _units(path, text)
        recs = [unit_record(c, c.text, c.docstring) for c in units]
        pool += recs
        if path not in new or new[path] == text:
            continue
        after = {c.qualname: c.text for c in _units(path, new[path])}
        diff = [(c, r) for c, r in zip(units, recs) if c.qualname in after and after[c.qualname] != c.text]
        for c, r in diff:
            inner = any(
                d is not c
                and c.start_line <= d.start_line <= d.end_line <= c.end_line
                and (d.start_line, d.end_line) != (c.start_line, c.end_line)
                for d, _ in diff
            )
            if not inner and c.kind in ("function", "method"):
                changed.append(r)
    return changed, pool


def _words(text: str) -> set[str]:
    return {t for t in code_tokens(text, keep_stopwords=False) if len(t) > 2} - STOPWORDS


def _unit_words(r: dict) -> set[str]:
    parts = set()
    for piece in [r["name"], *r["qualname"].split("."), *PurePosixPath(r["path"]).with_suffix("").parts]:
        parts |= {p.lower() for p in split_identifier(piece) if len(p) > 2}
        parts.add(piece.lower())
    return parts - STOPWORDS


def pair_entries(entries: list[str], changed: list[dict]) -> list[tuple[str, dict, int]]:
    """(entry, unit, shared words) for each entry with a unique best unit."""
    out = []
    need = 2 if len(changed) > MANY_CHANGED else 1
    uw = [_unit_words(r) for r in changed]
    for e in entries:
        ew = _words(e) | {w.lower() for w in re.findall(r"[A-Za-z_][\w.]*", e)}
        scores = [len(ew & w) for w in uw]
        best = max(scores, default=0)
        if best == 0:
            if len(entries) == 1 and len(changed) == 1:
                out.append((e, changed[0], 0))
            continue
        if best >= need and scores.count(best) == 1:
            out.append((e, changed[scores.index(best)], best))
    return out


# --------------------------------------------------------------------------- one package


def mine_releases(name: str, work: Path, n_releases: int) -> tuple[list[dict], dict]:
    stats: Counter = Counter()
    chain = release_chain(name, PACKAGES[name], n_releases)
    stats["releases"] = len(chain)
    trees: dict[str, dict[str, bytes]] = {}
    for v, info in chain:
        p = fetch_sdist(info, work / "sdists")
        if p is None:
            stats["download_failed"] += 1
            continue
        try:
            trees[v] = sdist_files(p)
        except (tarfile.TarError, zipfile.BadZipFile, OSError, EOFError):
            stats["bad_archive"] += 1
    pairs: list[dict] = []
    seen = set()
    for (v_old, _), (v_new, _) in zip(chain, chain[1:]):
        if v_old not in trees or v_new not in trees:
            continue
        entries = release_entries(trees[v_new], v_new)
        if not entries:
            stats["no_changelog_section"] += 1
            continue
        stats["entries"] += len(entries)
        old, new = _sources(trees[v_old]), _sources(trees[v_new])
        changed, pool = changed_units(old, new)
        if not changed:
            stats["no_changed_units"] += 1
            continue
        if len(changed) > MAX_CHANGED:
            stats["too_many_changed"] += 1
            continue
        stats["releases_used"] += 1
        matched = pair_entries(entries, changed)
        if not matched:
            continue
        bm25 = BM25([code_tokens(r["text"]) for r in pool])
        by_path: dict[str, list[int]] = defaultdict(list)
        for i, r in enumerate(pool):
            by_path[r["path"]].append(i)
        for entry, rec, shared in matched:
            if entry in seen:
                continue
            seen.add(entry)
            neg_bm25 = next(
                (pool[j] for j in bm25.top(code_tokens(entry, keep_stopwords=False)) if not related(pool[j], rec)), None
            )
            near = sorted(
                (j for j in by_path[rec["path"]] if not related(pool[j], rec)),
                key=lambda j: (abs(pool[j]["start"] - rec["start"]), j),
            )
            pairs.append(
                {
                    "package": name,
                    "version": v_old,
                    "release": v_new,
                    "path": rec["path"],
                    "qualname": rec["qualname"],
                    "kind": rec["kind"],
                    "query_kind": "release",
                    "query": entry,
                    "positive": rec["text"],
                    "shared_words": shared,
                    "neg_bm25": negative(neg_bm25) if neg_bm25 else None,
                    "neg_file": negative(pool[near[0]]) if near else None,
                }
            )
    stats["pairs"] = len(pairs)
    return pairs, dict(stats)


def mine_all(work: Path, packages: list[str], n_releases: int) -> None:
    out = work / "releases"
    out.mkdir(parents=True, exist_ok=True)
    for k, name in enumerate(packages, 1):
        target, st = out / f"{name}.jsonl", out / f"{name}.stats.json"
        if target.exists() and st.exists():
            continue
        try:
            pairs, stats = mine_releases(name, work, n_releases)
        except OSError as e:  # PyPI unreachable for this package: recorded, the next one goes on
            pairs, stats = [], {"error": str(e)[:200], "pairs": 0}
        write_jsonl(target, pairs)
        st.write_text(json.dumps(stats, indent=1))
        print(
            f"[releases {k}/{len(packages)}] {name}: {stats.get('releases', 0)} releases, "
            f"{stats.get('releases_used', 0)} used, {stats['pairs']} pairs",
            flush=True,
        )
