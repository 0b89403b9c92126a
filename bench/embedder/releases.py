"""Stage `mine --releases`: issue-like pairs from consecutive releases of the pinned packages.

A release note entry ("Fix ``Retry`` losing the backoff when the server sends Retry-After") is the closest
thing to an issue text that PyPI carries, and the code that changed between that release and the one
before is where the fix went: the same task as SWE-bench (an issue → the functions its fix edited, in the
code *before* the fix). Per package:

1. the versions pinned in ``release_pins.json`` (``mine --pinned-releases``, ``release_list.py``), or the
   newest ``--releases N`` final versions up to the ``PACKAGES`` pin that have an sdist (PyPI's JSON API;
   each sdist's sha256 checked; cached under ``WORK/sdists``); nothing in an sdist is run;
2. for each consecutive pair (old, new): the ``.py`` files outside tests that differ, parsed with repoctx's
   parser; the changed units are the functions/methods of the *old* release whose text differs in the new
   one (innermost only: a class whose one method changed is not a changed unit);
3. the new release's section of its changelog (``CHANGES*``, ``CHANGELOG*``, ``HISTORY*``, ``NEWS*``,
   ``docs/changelog*``...), cut into entries (bullets), markup and issue links removed;
4. an entry is paired with every changed unit it names as code (``Client.retry``, ``parse_duration``: at
   most ``MAX_NAMED``, in a release of up to ``MAX_CHANGED_NAMED`` changed units), else with the changed
   method of a class it names whose name shares words with it, else (releases of at most ``MAX_CHANGED``
   changed units) with the unit whose path and name share the most words with it (a unique best, at least
   one shared word, or the only changed unit of a one-entry release). ``pair_entries`` says which.

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

from .mine import UNIT_KINDS, HardNegatives, is_test_path, third_party, unit_record, write_jsonl
from .packages import PACKAGES

MAX_CHANGED = 60  # changed units in one release above which pairing by words is guesswork
MAX_CHANGED_NAMED = 2000  # above this, even an entry that names a changed unit is not paired (a rewrite)
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
    # "by @someone in #123", "in https://github.com/o/r/pull/123" (GitHub's generated release notes)
    (re.compile(r"(?:\s+by\s+@[\w-]+)?\s+in\s+(?:#\d+|https?://\S+)", re.I), ""),
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


def sdist_of(name: str, files: list[dict], before: str | None = None, yanked: bool = False) -> dict | None:
    """The sdist among one release's files (not yanked unless ``yanked``; uploaded before ``before`` when
    given), its URL made absolute (the index may answer with URLs relative to the JSON document)."""
    from urllib.parse import urljoin

    sd = [
        f
        for f in files
        if f.get("packagetype") == "sdist"
        and (yanked or not f.get("yanked"))
        and f["filename"].endswith((".tar.gz", ".zip", ".tgz"))
        and (before is None or f.get("upload_time", "9") < before)
    ]
    return {**sd[0], "url": urljoin(_pypi(name), sd[0]["url"])} if sd else None


def release_chain(name: str, pinned: str | None, n: int, before: str | None = None) -> list[tuple[str, dict]]:
    """The newest ``n`` final releases up to ``pinned`` (any, when None) that have an sdist (uploaded before
    ``before``, when given): [(version, file info)], oldest first."""
    from packaging.version import InvalidVersion, Version

    meta = _json(_pypi(name))
    top = Version(pinned) if pinned else None
    out = []
    for v, files in meta.get("releases", {}).items():
        try:
            ver = Version(v)
        except InvalidVersion:
            continue
        if ver.is_prerelease or ver.is_devrelease or (top is not None and ver > top):
            continue
        info = sdist_of(name, files, before)
        if info:
            out.append((ver, v, info))
    out.sort(key=lambda t: t[0])
    return [(v, f) for _, v, f in out[-n:]]


def fetch_sdist(info: dict, dest: Path) -> Path | None:
    """``dest/<filename>``: the file at hand when its sha256 is the one wanted, else downloaded from ``info["url"]``
    and checked (None: not had; without a URL, only the file at hand is looked at)."""
    dest.mkdir(parents=True, exist_ok=True)
    path = dest / info["filename"]
    want = info.get("digests", {}).get("sha256")
    if path.exists() and (not want or hashlib.sha256(path.read_bytes()).hexdigest() == want):
        return path
    if "url" not in info:
        return None
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
    text = re.sub(r"\s*\([\s,;]*\)", "", text).strip()  # what "(#12, #13)" left
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


_PARSED: dict[tuple[str, str], tuple[list, list[dict]]] = {}  # (path, text digest) → (units, records)


def _units(path: str, text: str) -> list:
    return _parsed(path, text, records=False)[0]


def _parsed(path: str, text: str, records: bool = True) -> tuple[list, list[dict]]:
    """The units of one file and their records, parsed once per text: consecutive releases share most
    files (``clear_parsed`` between packages)."""
    key = (path, hashlib.sha1(text.encode("utf-8", "replace")).hexdigest())
    if key not in _PARSED:
        try:
            units = [c for c in parse_source(path, text, "python").capsules if c.kind in UNIT_KINDS]
        except Exception:  # a parser bug costs one file
            units = []
        _PARSED[key] = (units, [])
    units, recs = _PARSED[key]
    if records and len(recs) != len(units):  # records (the embedded text) only for the files that need them
        recs[:] = [unit_record(c, c.text, c.docstring) for c in units]
    return units, recs


def clear_parsed() -> None:
    _PARSED.clear()


def changed_units(old: dict[str, str], new: dict[str, str], with_pool: bool = True) -> tuple[list[dict], list[dict]]:
    """(changed innermost units of the old release, every unit of the old release: the pool, or [] without
    ``with_pool``: then only the files that differ are parsed)."""
    pool, changed = [], []
    for path, text in sorted(old.items()):
        differs = path in new and new[path] != text
        if not with_pool and not differs:
            continue
        units, recs = _parsed(path, text)
        pool += recs
        if not differs:
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
    return changed, (pool if with_pool else [])


def _words(text: str) -> set[str]:
    return {t for t in code_tokens(text, keep_stopwords=False) if len(t) > 2} - STOPWORDS


def _unit_words(r: dict) -> set[str]:
    parts = set()
    for piece in [r["name"], *r["qualname"].split("."), *PurePosixPath(r["path"]).with_suffix("").parts]:
        parts |= {p.lower() for p in split_identifier(piece) if len(p) > 2}
        parts.add(piece.lower())
    return parts - STOPWORDS


_IDENT = re.compile(r"(?<![\w.])\.?([A-Za-z_]\w*(?:\.[A-Za-z_]\w*)*)")
_NOT_CODE = frozenset({"e.g", "i.e", "etc", "vs"})
MAX_NAMED = 4  # an entry naming more changed units than this is a list (type hints added to ...), no pair
MAX_CLASS_METHODS = 12  # a class named by an entry with more changed methods than this names none of them
MAX_BARE = 3  # a bare name (``__init__``, ``run``) shared by more changed units than this names none of them


def code_names(entry: str) -> list[tuple[str, ...]]:
    """The identifiers an entry writes as code: dotted (``Client.retry``, ``pkg.mod.func``), snake_case or
    camelCase (``parse_duration``, ``getAttr``, ``HTTPResponse``), as tuples of their dotted parts."""
    out = []
    for m in _IDENT.finditer(entry):
        tok = m.group(1).rstrip(".")
        if not tok or tok.lower() in _NOT_CODE or re.fullmatch(r"[\d.]+", tok):
            continue
        if "." in tok or "_" in tok.strip("_") or tok.startswith("__") or re.search(r"[a-z][A-Z]|[A-Z]{2}[a-z]", tok):
            out.append(tuple(tok.split(".")))
    return out


def _names_unit(parts: tuple[str, ...], r: dict) -> str:
    """How an identifier of an entry names a changed unit: "qualname" (its qualified name ends the
    identifier), "module" (``module.func``), "bare" (the unit's own name alone), or ""."""
    qual = tuple(r["qualname"].split("."))
    if len(parts) >= len(qual) and parts[-len(qual) :] == qual and (len(qual) > 1 or len(parts) > 1):
        if len(qual) > 1 or parts[-2] in PurePosixPath(r["path"]).with_suffix("").parts:
            return "qualname" if len(qual) > 1 else "module"
    if len(parts) == 1 and parts[0] == r["name"]:
        return "bare"
    return ""


def _by_named_class(entry: str, changed: list[dict], classes: dict[str, list[int]]) -> int | None:
    """The changed method an entry means when it names its class as written (``SpecifierSet``, ``Marker``):
    among the class's few changed methods, the one whose name shares the most words with the entry (a
    unique best, at least one: "a broken repr if Marker fails" → ``Marker.__repr__``). The class alone is
    not enough: "Make Version faster" does not mean the one method of ``Version`` that changed."""
    named = {t for t in re.findall(r"[A-Za-z_]\w*", entry) if t in classes and not t.islower()}
    cands = [i for c in sorted(named) for i in classes[c]]
    if len(named) != 1 or not cands or len(cands) > MAX_CLASS_METHODS:
        return None
    ew = _words(entry) - {p.lower() for c in named for p in split_identifier(c)}  # the class's own words
    scores = [
        len(ew & ({p.lower() for p in split_identifier(changed[i]["name"]) if len(p) > 2} - STOPWORDS)) for i in cands
    ]
    best = max(scores)
    return cands[scores.index(best)] if best and scores.count(best) == 1 else None


def pair_entries(
    entries: list[str], changed: list[dict], why: Counter | None = None, max_changed: int = MAX_CHANGED
) -> list[tuple[str, dict, int]]:
    """(entry, unit, score) for each changed unit an entry names, else for the entry's unique best unit by
    shared words. An entry that names changed units as code (``Client.retry``, ``parse_duration``) is paired
    with each of them (at most ``MAX_NAMED``), whatever the size of the release; otherwise only a release of
    at most ``max_changed`` changed units pairs by words (path and name words shared with the entry). ``why``
    counts the entries left unpaired by reason."""
    why = Counter() if why is None else why
    out = []
    need = 2 if len(changed) > MANY_CHANGED else 1
    uw = [_unit_words(r) for r in changed]
    bare = Counter(r["name"] for r in changed)
    classes: dict[str, list[int]] = defaultdict(list)  # class → its changed methods
    for i, r in enumerate(changed):
        if "." in r["qualname"]:
            classes[r["qualname"].split(".")[0]].append(i)
    for e in entries:
        named: dict[int, int] = {}
        for parts in code_names(e):
            for i, r in enumerate(changed):
                how = _names_unit(parts, r)
                if how == "bare" and bare[r["name"]] > MAX_BARE:
                    continue
                if how:
                    named[i] = max(named.get(i, 0), {"qualname": 3, "module": 3, "bare": 2}[how])
        if len(named) > MAX_NAMED:
            why["names_too_many_units"] += 1
            continue
        if named:
            out += [(e, changed[i], 10 * s) for i, s in sorted(named.items())]
            continue
        by_class = _by_named_class(e, changed, classes)
        if by_class is not None:
            out.append((e, changed[by_class], 10))
            continue
        if len(changed) > max_changed:
            why["names_no_changed_unit_in_a_big_release"] += 1
            continue
        ew = _words(e) | {w.lower() for w in re.findall(r"[A-Za-z_][\w.]*", e)}
        scores = [len(ew & w) for w in uw]
        best = max(scores, default=0)
        if best == 0:
            if len(entries) == 1 and len(changed) == 1:
                out.append((e, changed[0], 0))
            else:
                why["shares_no_word_with_a_changed_unit"] += 1
            continue
        if best < need:
            why["shares_one_word_in_a_release_of_many_changes"] += 1
        elif scores.count(best) > 1:
            why["ties_between_units"] += 1
        else:
            out.append((e, changed[scores.index(best)], min(best, 9)))  # 10 and up: named (see above)
    return out


# --------------------------------------------------------------------------- one package


def mine_releases(
    name: str, work: Path, n_releases: int = 0, chain: list[tuple[str, dict]] | None = None, negatives: bool = True
) -> tuple[list[dict], dict]:
    """The pairs of one package, over ``chain`` (pinned (version, sdist) pairs, oldest first) or else the
    newest ``n_releases`` up to its pin in ``PACKAGES``. Without ``negatives`` only the files that differ are
    parsed and the pairs carry no hard negatives (``neg_bm25``/``neg_file`` None): a third of the CPU."""
    stats: Counter = Counter()
    why: Counter = Counter()
    if chain is None:
        chain = release_chain(name, PACKAGES[name], n_releases)
    stats["releases"] = len(chain)
    trees: dict[str, dict[str, bytes]] = {}
    digests = {}
    for v, info in chain:
        p = fetch_sdist(info, work / "sdists")
        if p is None:
            stats["download_failed"] += 1
            continue
        digests[v] = info.get("digests", {}).get("sha256", "")
        try:
            trees[v] = sdist_files(p)
        except (tarfile.TarError, zipfile.BadZipFile, OSError, EOFError):
            stats["bad_archive"] += 1
    pairs: list[dict] = []
    seen: set[str] = set()
    for (v_old, _), (v_new, _) in zip(chain, chain[1:]):
        if v_old not in trees or v_new not in trees:
            continue
        stats["release_pairs"] += 1
        entries = [e for e in release_entries(trees[v_new], v_new) if e not in seen]
        if not entries:
            stats["no_changelog_section"] += 1
            continue
        seen.update(entries)
        stats["entries"] += len(entries)
        old, new = _sources(trees[v_old]), _sources(trees[v_new])
        changed, _ = changed_units(old, new, with_pool=False)
        if not changed:
            stats["no_changed_units"] += 1
            why["release_changed_no_function"] += len(entries)
            continue
        if len(changed) > MAX_CHANGED_NAMED:
            stats["too_many_changed"] += 1
            why["release_changed_too_many_functions"] += len(entries)
            continue
        stats["releases_used"] += 1
        stats["changed_units"] += len(changed)
        matched = pair_entries(entries, changed, why)
        stats["entries_paired"] += len({e for e, _, _ in matched})
        if not matched:
            continue
        if not negatives:
            pairs += [_pair(name, v_old, v_new, entry, rec, shared, None, None) for entry, rec, shared in matched]
            continue
        _, pool = changed_units(old, {})  # every unit of the old release: the negatives' pool
        hard = HardNegatives(pool)
        pairs += [_pair(name, v_old, v_new, entry, rec, shared, *hard.of(entry, rec)) for entry, rec, shared in matched]
    clear_parsed()
    stats["pairs"] = len(pairs)
    out = dict(stats)
    out["unpaired_entries"] = dict(why)
    out["sdist_sha256"] = digests
    return pairs, out


def _pair(
    name: str, v_old: str, v_new: str, entry: str, rec: dict, shared: int, neg_bm25: dict | None, neg_file: dict | None
) -> dict:
    return {
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
        "named": shared >= 10,
        "neg_bm25": neg_bm25,
        "neg_file": neg_file,
    }


def mine_all(
    work: Path,
    packages: list[str],
    n_releases: int = 0,
    pins: dict[str, list[str]] | None = None,
    negatives: bool = True,
) -> None:
    """Mine each package (resumable: a package with its output is not mined again). With ``pins``
    (``release_list.load_pins()``), each package's pinned versions, else its newest ``n_releases``."""
    from .release_list import pinned_chain

    out = work / "releases"
    out.mkdir(parents=True, exist_ok=True)
    for k, name in enumerate(packages, 1):
        target, st = out / f"{name}.jsonl", out / f"{name}.stats.json"
        if target.exists() and st.exists():
            continue
        try:
            chain = pinned_chain(name, pins[name]) if pins is not None else None
            pairs, stats = mine_releases(name, work, n_releases, chain, negatives)
        except Exception as e:  # noqa: BLE001 - PyPI unreachable, a broken archive: recorded, the next package goes on
            pairs, stats = [], {"error": f"{type(e).__name__}: {e}"[:200], "pairs": 0}
        if pins is not None:
            stats["pinned"] = pins[name]
        write_jsonl(target, pairs)
        st.write_text(json.dumps(stats, indent=1))
        print(
            f"[releases {k}/{len(packages)}] {name}: {stats.get('releases', 0)} releases, "
            f"{stats.get('releases_used', 0)} used, {stats['pairs']} pairs",
            flush=True,
        )
