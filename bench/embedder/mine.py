"""Stage `mine`: wheels → capsules (repoctx's own parser) → (query, code) pairs with hard negatives.

A pair is what dense search should match: a person's words about a unit of code (its docstring's
first sentence, or a longer paragraph of it, or a test's name and body) and the text repoctx embeds
for that unit (``repoctx.providers.embedding.embed_text`` at the product's 128 tokens) *with the docstring taken
out*, so the model has to match words to code rather than words to the same words. Every candidate
unit of a package (the pool: negatives, validation candidates) is embedded the same way, docstring
out, so "has a docstring" never tells a positive from a negative.

Per package, under ``WORK/mine/``: ``NAME.jsonl`` (pairs), ``NAME.pool.jsonl`` (candidate units: the
validation candidates when the package is held out), ``NAME.stats.json``. A package already mined is not mined again. Then
``merge`` writes ``WORK/pairs/{train,val,val_pool}.jsonl`` and ``stats.json``: queries deduplicated
across packages, and no package above ``--max-share`` of the training pairs.
"""

from __future__ import annotations

import ast
import hashlib
import inspect
import json
import math
import os
import re
import subprocess
import sys
import tempfile
import zipfile
from collections import Counter, defaultdict
from pathlib import Path, PurePosixPath

from repoctx.capsules.parse import parse_source
from repoctx.providers.embedding import embed_text
from repoctx.tokens import STOPWORDS, code_tokens, split_identifier

from .packages import EXCLUDED_MODULES, PACKAGES, VALIDATION, VENDOR_DIRS

EMBED_MAX_LENGTH = 128  # what LocalMiniLM embeds documents at (repoctx.vectors.fill_vectors)
UNIT_KINDS = ("function", "method", "class")
LONG_QUERY_WORDS = 60
LONG_SHARE = 0.4  # share of docstring pairs whose query is the longer paragraph
TEST_SHARE = 0.15  # at most this share of a package's pairs come from tests


def stable_unit(*parts: str) -> float:
    """A number in [0, 1) fixed by ``parts``: deterministic choices without a global RNG."""
    h = hashlib.sha1("\x1f".join(parts).encode()).digest()
    return int.from_bytes(h[:8], "big") / 2**64


# --------------------------------------------------------------------------- download


def fetch_wheel(name: str, version: str, dest: Path) -> Path | None:
    """The wheel of ``name==version`` in ``dest`` (downloaded once; a binary wheel for CPython 3.11 on
    Linux when there is no pure one). Wheels only: pip never builds or runs a package to fetch it."""
    dest.mkdir(parents=True, exist_ok=True)
    canon = re.sub(r"[-_.]+", "_", name).lower()

    def cached() -> Path | None:
        for p in sorted(dest.glob("*.whl")):
            stem = p.name.split("-")
            if re.sub(r"[-_.]+", "_", stem[0]).lower() == canon and stem[1] == version:
                return p
        return None

    hit = cached()
    if hit:
        return hit
    env = {k: v for k, v in os.environ.items() if k != "PIP_FIND_LINKS"}
    err = ""
    for py in ("3.11", "3.12", "3.13"):  # newer releases may ship binary wheels for newer Pythons only
        abi = "cp" + py.replace(".", "")
        cmd = [
            sys.executable,
            "-m",
            "pip",
            "download",
            "--no-deps",
            "--only-binary",
            ":all:",
            "--ignore-requires-python",
            "--python-version",
            py,
            "--implementation",
            "cp",
            "--abi",
            abi,
            "--abi",
            "abi3",
            "--abi",
            "none",
            "--platform",
            "manylinux_2_28_x86_64",
            "--platform",
            "manylinux2014_x86_64",
            "--platform",
            "any",
            "--disable-pip-version-check",
            "-q",
            "-d",
            str(dest),
            f"{name}=={version}",
        ]
        proc = subprocess.run(cmd, capture_output=True, text=True, env=env, timeout=600)
        if proc.returncode == 0:
            break
        err = (proc.stderr.strip().splitlines() or [""])[-1]
    else:
        print(f"  ! {name}=={version}: no wheel: {err}", flush=True)
    return cached()


def is_test_path(path: str) -> bool:
    parts = PurePosixPath(path).parts
    name = parts[-1]
    return (
        any(p in ("tests", "test", "testing") for p in parts[:-1])
        or name.startswith("test_")
        or name.endswith("_test.py")
        or name == "conftest.py"
    )


def third_party(path: str) -> bool:
    """A vendored copy or an evaluation project's file inside a package: never mined."""
    parts = PurePosixPath(path).parts
    return any(p in VENDOR_DIRS for p in parts[:-1]) or any(p.removesuffix(".py") in EXCLUDED_MODULES for p in parts)


def wheel_sources(wheel: Path) -> list[tuple[str, str]]:
    """(path, text) of the wheel's .py files, vendored code and evaluation projects' files left out."""
    out = []
    with zipfile.ZipFile(wheel) as zf:
        for info in sorted(zf.infolist(), key=lambda i: i.filename):
            path = info.filename
            if not path.endswith(".py") or ".dist-info/" in path or ".data/" in path:
                continue
            if third_party(path):
                continue
            if info.file_size > 1_000_000:  # generated tables, not code people search
                continue
            out.append((path, zf.read(info).decode("utf-8", "replace")))
    return out


# --------------------------------------------------------------------------- units


def strip_docstring(text: str) -> tuple[str, int] | None:
    """(``text`` without its docstring's lines, non-blank lines of the body after the docstring) for one
    def/class as the parser cut it; None when the docstring shares a line with code or the text does not
    parse."""
    tree, offset = None, 0
    for candidate, off in ((_dedent(text), 0), ("if 1:\n" + text, 1)):
        try:
            tree, offset = ast.parse(candidate), off
            break
        except SyntaxError:
            continue
    if tree is None or not tree.body:
        return None
    node = tree.body[0]
    if offset and isinstance(node, ast.If) and node.body:
        node = node.body[0]
    if not isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)) or not node.body:
        return None
    lines = text.split("\n")
    body = node.body
    first = body[0]
    has_doc = (
        isinstance(first, ast.Expr) and isinstance(first.value, ast.Constant) and isinstance(first.value.value, str)
    )
    rest = body[1:] if has_doc else body
    n_body = 0
    if rest:
        lo, hi = rest[0].lineno - 1 - offset, node.end_lineno - 1 - offset
        n_body = sum(1 for ln in lines[lo : hi + 1] if ln.strip())
    if not has_doc:
        return text, n_body
    start, end = first.lineno - 1 - offset, first.end_lineno - 1 - offset  # 0-based, inclusive
    if start <= node.lineno - 1 - offset:  # `def f(): "doc"` on one line
        return None
    if rest and rest[0].lineno - 1 - offset == end:  # `"""doc"""; x = 1`
        return None
    return "\n".join(lines[:start] + lines[end + 1 :]), n_body


def _dedent(text: str) -> str:
    lines = text.split("\n")
    indent = len(lines[0]) - len(lines[0].lstrip())
    if not indent:
        return text
    return "\n".join(ln[indent:] if ln[:indent].strip() == "" else ln for ln in lines)


def unit_record(c, text: str, docstring: str = "") -> dict:
    """A unit and the text repoctx embeds for it, made of ``text`` and ``docstring`` (by default none)."""
    cap = {"path": c.path, "qualname": c.qualname, "signature": c.signature, "docstring": docstring, "text": text}
    return {
        "path": c.path,
        "qualname": c.qualname,
        "name": c.name,
        "kind": c.kind,
        "start": c.start_line,
        "end": c.end_line,
        "text": embed_text(cap, max_length=EMBED_MAX_LENGTH),
    }


# --------------------------------------------------------------------------- queries

_SECTION = re.compile(
    r"^\s*(args|arguments|parameters|params|returns?|yields?|raises|examples?|notes?|see also|attributes|"
    r"keyword arguments|kwargs|other parameters|warnings?|references|usage|todo|methods|properties|example usage)"
    r"\s*:?\s*$",
    re.I,
)
_FIELD = re.compile(r"^\s*(:\w+(\s+[^:`]*)?:(\s|$)|@\w+|>>>|\.\. |-{3,}|={3,}|\*{3,})")  # :param x:, not :term:`x`
_ROLE = re.compile(r":[\w:.-]+:`~?!?([^`<]+?)(?:\s*<[^>]*>)?`")
_WEAK = re.compile(
    r"^(alias|deprecated|see |same as|backwards?[- ]compat|todo|xxx|fixme|copyright|"
    r"this (function|method) is deprecated|internal use|for internal|override|overrides|"
    r"implementation of|implements |helper (function|method)?\s*$)",
    re.I,
)


def prose(doc: str) -> list[str]:
    """The docstring's leading prose paragraphs, markup thinned, stopping at the first section
    (Args:, Parameters, :param, >>>, ...)."""
    doc = inspect.cleandoc(doc)
    paras, cur = [], []
    for line in doc.split("\n"):
        if _SECTION.match(line) or _FIELD.match(line):
            break
        if not line.strip():
            if cur:
                paras.append(" ".join(cur))
                cur = []
            continue
        cur.append(line.strip())
    if cur:
        paras.append(" ".join(cur))
    out = []
    for p in paras:
        p = _ROLE.sub(r"\1", p).replace("``", "").replace("`", "")
        p = re.sub(r"\s+", " ", p).strip()
        if p:
            out.append(p)
    return out


def first_sentence(par: str) -> str:
    m = re.search(r"(?<=[.!?])\s+(?=[A-Z(\"'])", par)
    return par[: m.start()].strip() if m else par


def cut_words(text: str, n: int) -> str:
    words = text.split()
    return " ".join(words[:n])


def trivial(query: str, name: str) -> bool:
    """The query says no more than the unit's name (``get_value`` / "Get the value.")."""
    q = {t for t in code_tokens(query, keep_stopwords=False) if len(t) > 1}
    n = {p.lower() for p in split_identifier(name)} | {name.lower()}
    return not (q - n - STOPWORDS - {"return", "returns", "given", "object", "value", "function", "method"})


def doc_query(doc: str, key: str) -> tuple[str, str] | None:
    """(query, kind) from a docstring: the first sentence, or (some of the time, when there is more to
    say) its first paragraphs cut to 60 words."""
    paras = prose(doc)
    if not paras:
        return None
    short = first_sentence(paras[0])
    long = cut_words(" ".join(paras), LONG_QUERY_WORDS)
    if len(long.split()) >= len(short.split()) + 6 and stable_unit(key, "long") < LONG_SHARE:
        query, kind = long, "doc_paragraph"
    else:
        query, kind = short, "doc_first"
    if len(query.split()) < 4 or _WEAK.match(query):
        return None
    return query, kind


def test_query(c) -> str:
    words = " ".join(split_identifier(c.name)).lower()
    body = "\n".join(s for s in (ln.strip() for ln in c.text.split("\n")[1:]) if s)
    return cut_words(f"{words}\n{body}", LONG_QUERY_WORDS)


# --------------------------------------------------------------------------- BM25 negatives


class BM25:
    def __init__(self, docs: list[list[str]], k1: float = 1.2, b: float = 0.75):
        self.k1, self.b = k1, b
        self.len = [len(d) for d in docs]
        self.avg = (sum(self.len) / len(docs)) if docs else 1.0
        self.post: dict[str, list[tuple[int, int]]] = defaultdict(list)
        for i, d in enumerate(docs):
            for t, n in Counter(d).items():
                self.post[t].append((i, n))
        self.n = len(docs)

    def top(self, terms: list[str], k: int = 20) -> list[int]:
        scores: dict[int, float] = defaultdict(float)
        for t in set(terms):
            plist = self.post.get(t)
            if not plist:
                continue
            idf = math.log(1 + (self.n - len(plist) + 0.5) / (len(plist) + 0.5))
            for i, tf in plist:
                scores[i] += idf * tf * (self.k1 + 1) / (tf + self.k1 * (1 - self.b + self.b * self.len[i] / self.avg))
        return sorted(scores, key=lambda i: (-scores[i], i))[:k]


def related(a: dict, b: dict) -> bool:
    """Same unit, same name, or one inside the other (a class and its method): never a negative."""
    if a["qualname"] == b["qualname"] or a["text"] == b["text"]:
        return True
    return a["path"] == b["path"] and (
        a["start"] <= b["start"] <= b["end"] <= a["end"] or b["start"] <= a["start"] <= a["end"] <= b["end"]
    )


def negative(rec: dict) -> dict:
    return {"path": rec["path"], "qualname": rec["qualname"], "text": rec["text"]}


# --------------------------------------------------------------------------- one package


def mine_package(name: str, version: str, wheel: Path) -> tuple[list[dict], list[dict], dict]:
    """(pairs, pool, stats) of one wheel."""
    pool: list[dict] = []  # candidate units (non-test), docstring out
    docs: list[tuple[int, str]] = []  # (pool index, docstring) of units with a docstring
    tests: list = []
    stats = Counter()
    by_name: dict[str, list[int]] = defaultdict(list)
    for path, text in wheel_sources(wheel):
        stats["files"] += 1
        try:
            pf = parse_source(path, text, "python")
        except Exception:  # a parser bug costs one file
            stats["parse_failed"] += 1
            continue
        test_file = is_test_path(path)
        for c in pf.capsules:
            if c.kind not in UNIT_KINDS:
                continue
            stats["units"] += 1
            if c.name.startswith("__") and c.name.endswith("__"):
                continue
            if test_file:
                if c.name.startswith("test_") and c.kind in ("function", "method"):
                    tests.append(c)
                continue
            cut = strip_docstring(c.text)
            if cut is None:
                stats["unparsed_or_inline_docstring"] += 1
                continue
            stripped, n_body = cut
            if n_body < 2:
                continue
            rec = unit_record(c, stripped)
            if c.docstring.strip():
                first = next((ln.strip() for ln in c.docstring.splitlines() if len(ln.strip()) > 12), "")
                if first and first in rec["text"]:  # the docstring must not leak into the code side
                    stats["docstring_leak"] += 1
                    continue
                docs.append((len(pool), c.docstring))
            by_name[c.name].append(len(pool))
            pool.append(rec)
    stats["pool"] = len(pool)

    candidates: list[tuple[int, str, str]] = []  # (pool index, query, kind)
    for i, doc in docs:
        rec = pool[i]
        q = doc_query(doc, f"{name}:{rec['path']}:{rec['qualname']}")
        if q is None:
            stats["no_query"] += 1
            continue
        if trivial(q[0], rec["name"]):
            stats["trivial"] += 1
            continue
        candidates.append((i, *q))
    n_tests = 0
    cap_tests = int(TEST_SHARE * len(candidates))
    for t in sorted(tests, key=lambda t: stable_unit(name, t.path, t.qualname)):
        if n_tests >= cap_tests:
            break
        parts = t.name[len("test_") :].split("_")
        for k in range(len(parts), 0, -1):  # test_parse_date_utc -> parse_date_utc, parse_date, parse
            hits = by_name.get("_".join(parts[:k]), [])
            if len(hits) == 1:
                candidates.append((hits[0], test_query(t), "test"))
                n_tests += 1
                break

    negatives = HardNegatives(pool)
    pairs, seen = [], set()
    for i, query, kind in candidates:
        if query in seen:
            stats["duplicate_query"] += 1
            continue
        seen.add(query)
        rec = pool[i]
        neg_bm25, neg_file = negatives.of(query, rec)
        pairs.append(
            {
                "package": name,
                "version": version,
                "path": rec["path"],
                "qualname": rec["qualname"],
                "kind": rec["kind"],
                "query_kind": kind,
                "query": query,
                "positive": rec["text"],
                "pool_index": i,
                "neg_bm25": neg_bm25,
                "neg_file": neg_file,
            }
        )
        stats[f"pairs_{kind}"] += 1
    stats["pairs"] = len(pairs)
    return pairs, pool, dict(stats)


class HardNegatives:
    """The two hard negatives of a pair from a pool of units: the best BM25 unit for the query and the
    nearest unit of the positive's file, neither related to the positive (as ``negative`` records)."""

    def __init__(self, pool: list[dict]):
        self.pool = pool
        self.bm25 = BM25([code_tokens(r["text"]) for r in pool])
        self.by_path: dict[str, list[int]] = defaultdict(list)
        for i, r in enumerate(pool):
            self.by_path[r["path"]].append(i)

    def of(self, query: str, rec: dict) -> tuple[dict | None, dict | None]:
        pool = self.pool
        top = (pool[j] for j in self.bm25.top(code_tokens(query, keep_stopwords=False)) if not related(pool[j], rec))
        near = min(
            (j for j in self.by_path[rec["path"]] if not related(pool[j], rec)),
            key=lambda j: (abs(pool[j]["start"] - rec["start"]), j),
            default=None,
        )
        by_bm25 = next(top, None)
        return (negative(by_bm25) if by_bm25 else None), (negative(pool[near]) if near is not None else None)


# --------------------------------------------------------------------------- stage


def write_jsonl(path: Path, rows) -> int:
    tmp = path.with_suffix(path.suffix + ".tmp")
    n = 0
    with tmp.open("w") as f:
        for r in rows:
            f.write(json.dumps(r, ensure_ascii=False) + "\n")
            n += 1
    tmp.replace(path)
    return n


def read_jsonl(path: Path) -> list[dict]:
    with path.open() as f:
        return [json.loads(line) for line in f if line.strip()]


def mine(work: Path, packages: list[str] | None = None) -> None:
    names = packages or list(PACKAGES)
    unknown = [n for n in names if n not in PACKAGES]
    if unknown:
        raise SystemExit(f"not in the pinned list (bench/embedder/packages.py): {unknown}")
    out = work / "mine"
    out.mkdir(parents=True, exist_ok=True)
    for n, name in enumerate(names, 1):
        version = PACKAGES[name]
        target = out / f"{name}.jsonl"
        if all((out / f"{name}{ext}").exists() for ext in (".jsonl", ".pool.jsonl", ".stats.json")):
            continue
        wheel = fetch_wheel(name, version, work / "wheels")
        if wheel is None:
            write_jsonl(target, [])
            write_jsonl(out / f"{name}.pool.jsonl", [])
            (out / f"{name}.stats.json").write_text(json.dumps({"error": "no wheel", "pool": 0, "pairs": 0}))
            continue
        pairs, pool, stats = mine_package(name, version, wheel)
        stats.update(package=name, version=version, wheel=wheel.name)
        write_jsonl(out / f"{name}.pool.jsonl", pool)  # validation candidates when held out
        write_jsonl(target, pairs)
        (out / f"{name}.stats.json").write_text(json.dumps(stats, indent=1))
        print(
            f"[mine {n}/{len(names)}] {name}=={version}: {stats.get('files', 0)} files, {stats['pool']} units, "
            f"{stats['pairs']} pairs",
            flush=True,
        )


def share_cap(sizes: list[int], share: float) -> int:
    """Largest per-package cap c with max(min(n, c)) <= share * sum(min(n, c))."""
    lo, hi = 1, max(sizes, default=1)
    while lo < hi:
        mid = (lo + hi + 1) // 2
        total = sum(min(n, mid) for n in sizes)
        if min(max(sizes), mid) <= share * total:
            lo = mid
        else:
            hi = mid - 1
    return lo


def merge(
    work: Path,
    packages: list[str] | None = None,
    validation: tuple[str, ...] = VALIDATION,
    max_share: float = 0.08,
    release_names: list[str] | None = None,
    release_max_share: float = 0.0,
) -> dict:
    """Per-package pairs → train.jsonl / val.jsonl (+ val_pool.jsonl), deduplicated and capped; the
    release-note pairs of ``packages`` and of ``release_names`` (the pinned release list) beside them, no
    package above ``release_max_share`` of them (0: no cap), and hard negatives from the package's other
    pairs where the miner gave none (``pair_negatives``)."""
    names = packages or list(PACKAGES)
    src, dst = work / "mine", work / "pairs"
    dst.mkdir(parents=True, exist_ok=True)
    train_by_pkg: dict[str, list[dict]] = {}
    val_rows, pool_rows = [], []
    seen_q, seen_pos = set(), set()
    per_pkg: dict[str, dict] = {}
    for name in names:
        path = src / f"{name}.jsonl"
        if not path.exists():
            continue
        stats = json.loads((src / f"{name}.stats.json").read_text())
        rows = read_jsonl(path)
        if name in validation:
            pool = read_jsonl(src / f"{name}.pool.jsonl")
            pool_rows += [{"package": name, **r} for r in pool]
            val_rows += rows
            per_pkg[name] = {
                "split": "val",
                "mined": len(rows),
                "kept": len(rows),
                "pool": len(pool),
                "version": PACKAGES[name],
            }
            continue
        kept = []
        for r in rows:  # queries and code texts seen once across packages (no in-batch twin)
            if r["query"] in seen_q or r["positive"] in seen_pos:
                continue
            seen_q.add(r["query"])
            seen_pos.add(r["positive"])
            kept.append(r)
        train_by_pkg[name] = kept
        per_pkg[name] = {
            "split": "train",
            "mined": len(rows),
            "kept": len(kept),
            "version": PACKAGES[name],
            "error": stats.get("error"),
        }
    if train_by_pkg and max_share * len(train_by_pkg) < 1.5:  # a few packages (a smoke run): cannot hold
        max_share = 1.5 / len(train_by_pkg)
        print(f"[merge] only {len(train_by_pkg)} training packages: share cap raised to {max_share:.2f}")
    cap = share_cap([len(v) for v in train_by_pkg.values()], max_share) if train_by_pkg else 0
    train_rows = []
    for name, rows in train_by_pkg.items():
        if len(rows) > cap:
            rows = sorted(rows, key=lambda r: stable_unit(r["package"], r["path"], r["qualname"], r["query"]))[:cap]
        per_pkg[name]["kept"] = len(rows)
        train_rows += rows
    train_rows.sort(key=lambda r: (r["package"], r["path"], r["qualname"]))
    write_jsonl(dst / "train.jsonl", train_rows)
    write_jsonl(dst / "val.jsonl", val_rows)
    write_jsonl(dst / "val_pool.jsonl", pool_rows)
    kinds = Counter(r["query_kind"] for r in train_rows)
    rel_names = list(dict.fromkeys([*names, *(release_names or [])]))
    rel_train, rel_val = _release_pairs(work, rel_names, validation, seen_q)
    n_rel_mined = len(rel_train)
    rel_train, rel_cap = cap_release_pairs(rel_train, release_max_share)
    n_filled = pair_negatives(rel_train)
    write_jsonl(dst / "train_release.jsonl", rel_train)
    write_jsonl(dst / "val_release.jsonl", rel_val)
    summary = {
        "train_pairs": len(train_rows),
        "val_pairs": len(val_rows),
        "val_pool": len(pool_rows),
        "release_train_pairs": len(rel_train),
        "release_val_pairs": len(rel_val),
        "release_pairs_before_cap": n_rel_mined,
        "release_max_share": release_max_share,
        "release_cap_per_package": rel_cap,
        "release_negatives_from_pairs": n_filled,
        "cap_per_package": cap,
        "max_share": max_share,
        "query_kinds": dict(kinds),
        "validation_packages": [n for n in names if n in validation],
        "packages": per_pkg,
    }
    (dst / "stats.json").write_text(json.dumps(summary, indent=1))
    return summary


def _release_pairs(
    work: Path, names: list[str], validation: tuple[str, ...], seen_q: set[str]
) -> tuple[list[dict], list[dict]]:
    """Release-note pairs (``releases.py``) of the mined packages: (training, held out)."""
    src = work / "releases"
    train_rows, val_rows = [], []
    seen_pairs: set[tuple[str, str, str]] = set()
    for name in names:
        path = src / f"{name}.jsonl"
        if not path.exists():
            continue
        for r in read_jsonl(path):
            if name in validation:
                val_rows.append(r)
                continue
            key = (r["query"], r["path"], r["qualname"])  # an entry naming two functions is two pairs
            if key in seen_pairs or r["query"] in seen_q:  # a docstring query: kept there
                continue
            seen_pairs.add(key)
            train_rows.append(r)
    seen_q.update(r["query"] for r in train_rows)
    return train_rows, val_rows


def cap_release_pairs(rows: list[dict], share: float) -> tuple[list[dict], int]:
    """``rows`` with no package above ``share`` of them (a fixed subset of a larger package's pairs, by
    hash), and the per-package cap (0: ``share`` is 0, no cap)."""
    if share <= 0 or not rows:
        return rows, 0
    by_pkg: dict[str, list[dict]] = defaultdict(list)
    for r in rows:
        by_pkg[r["package"]].append(r)
    cap = share_cap([len(v) for v in by_pkg.values()], share)
    keep = set()
    for pkg_rows in by_pkg.values():
        if len(pkg_rows) > cap:
            pkg_rows = sorted(
                pkg_rows,
                key=lambda r: stable_unit("release", r["package"], r["release"], r["path"], r["qualname"], r["query"]),
            )[:cap]
        keep.update(id(r) for r in pkg_rows)
    return [r for r in rows if id(r) in keep], cap


def pair_negatives(rows: list[dict]) -> int:
    """Fill the missing ``neg_bm25`` / ``neg_file`` of release-note pairs (mined with
    ``--no-release-negatives``) from the other pairs of the same package, in place: the package's distinct
    positives are the pool (changed functions of its releases). ``neg_bm25`` is the pool unit BM25 ranks
    first for the query, ``neg_file`` one of the positive's file (picked by hash); never the same
    qualified name, a unit inside it or around it, nor a positive of the same entry. Returns how many
    rows got at least one negative."""
    by_pkg: dict[str, list[dict]] = defaultdict(list)
    for r in rows:
        by_pkg[r["package"]].append(r)
    filled = 0
    for pkg_rows in by_pkg.values():
        pool_by_text: dict[str, dict] = {}
        for r in pkg_rows:
            pool_by_text.setdefault(
                r["positive"], {"path": r["path"], "qualname": r["qualname"], "text": r["positive"]}
            )
        pool = list(pool_by_text.values())
        if len(pool) < 2:
            continue
        bm25 = BM25([code_tokens(u["text"]) for u in pool])
        by_path: dict[str, list[int]] = defaultdict(list)
        for i, u in enumerate(pool):
            by_path[u["path"]].append(i)
        same_entry: dict[str, set[str]] = defaultdict(set)
        for r in pkg_rows:
            same_entry[r["query"]].add(r["qualname"])
        for r in pkg_rows:
            if r.get("neg_bm25") or r.get("neg_file"):
                continue
            entry = same_entry[r["query"]]
            top = [pool[j] for j in bm25.top(code_tokens(r["query"], keep_stopwords=False), k=10)]
            by_bm25 = next((u for u in top if _pair_negative_ok(u, r, entry)), None)
            near = sorted(
                (pool[j] for j in by_path[r["path"]] if _pair_negative_ok(pool[j], r, entry)),
                key=lambda u: stable_unit("neg", r["query"], u["qualname"]),
            )
            r["neg_bm25"] = dict(by_bm25) if by_bm25 else None
            r["neg_file"] = dict(near[0]) if near else None
            filled += bool(by_bm25 or near)
    return filled


def _pair_negative_ok(unit: dict, row: dict, same_entry: set[str]) -> bool:
    """``unit`` may be a negative of the release-note pair ``row``: not its function (in any release), not
    a unit inside it or around it, not another function its entry names (``same_entry``)."""
    a, b = unit["qualname"], row["qualname"]
    nested = unit["path"] == row["path"] and (a.startswith(b + ".") or b.startswith(a + "."))
    return not (a == b or unit["text"] == row["positive"] or a in same_entry or nested)


def print_counts(summary: dict) -> None:
    print(f"{'package':<18} {'version':<10} {'split':<5} {'mined':>6} {'kept':>6}")
    for name, s in sorted(summary["packages"].items(), key=lambda kv: (kv[1]["split"], -kv[1]["kept"])):
        print(
            f"{name:<18} {s['version']:<10} {s['split']:<5} {s['mined']:>6} {s['kept']:>6}"
            + (f"  ({s['error']})" if s.get("error") else "")
        )
    print(
        f"train pairs {summary['train_pairs']} (cap {summary['cap_per_package']}/package, "
        f"kinds {summary['query_kinds']}); validation pairs {summary['val_pairs']} over a pool of "
        f"{summary['val_pool']} units in {', '.join(summary['validation_packages'])}; release-note pairs "
        f"{summary.get('release_train_pairs', 0)} to train on, {summary.get('release_val_pairs', 0)} held out"
    )
    if summary.get("release_cap_per_package"):
        print(
            f"release-note pairs capped at {summary['release_cap_per_package']}/package "
            f"({summary['release_max_share']:.1%}): {summary['release_pairs_before_cap']} -> "
            f"{summary['release_train_pairs']}; {summary['release_negatives_from_pairs']} given hard negatives "
            "from their package's other pairs"
        )
