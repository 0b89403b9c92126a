"""Tests for the evaluation corpus builder and localization metrics (no network)."""
from __future__ import annotations

import json
import subprocess
import time
import zipfile
from pathlib import Path

import pytest

from repoctx.evaluate import corpus as corpus_mod
from repoctx.evaluate.corpus import CorpusError, cache_dir, fetch_wheel, load_rows, materialize
from repoctx.evaluate.metrics import aggregate, function_key, normalize_gold_function, rank_metrics

# --------------------------------------------------------------------------- metrics


def test_strict_acc_recall_mrr():
    ranked = ["a.py", "x.py", "b.py", "y.py", "c.py"]
    m = rank_metrics(ranked, ["a.py", "b.py"], ks=(1, 3, 5))
    assert m["acc@1"] == 0.0  # only one of two gold in top 1 -> strict miss
    assert m["recall@1"] == 0.5
    assert m["acc@3"] == 1.0 and m["recall@3"] == 1.0
    assert m["acc@5"] == 1.0
    assert m["mrr"] == 1.0


def test_mrr_and_miss():
    m = rank_metrics(["x", "y", "g"], ["g"], ks=(1, 3))
    assert m["mrr"] == pytest.approx(1 / 3)
    assert m["acc@1"] == 0.0 and m["acc@3"] == 1.0
    none = rank_metrics(["x", "y"], ["g"])
    assert none["mrr"] == 0.0 and none["acc@10"] == 0.0 and none["recall@10"] == 0.0
    assert set(none) == {"acc@1", "acc@3", "acc@5", "acc@10", "recall@1", "recall@3", "recall@5", "recall@10", "mrr"}


def test_duplicates_count_once():
    # without dedupe "g" would be at rank 4; deduped it is at rank 2
    m = rank_metrics(["x", "x", "x", "g"], ["g"], ks=(2,))
    assert m["acc@2"] == 1.0 and m["mrr"] == 0.5
    # duplicate gold hits do not inflate recall
    m = rank_metrics(["g", "g", "h"], ["g", "h"], ks=(2,))
    assert m["recall@2"] == 1.0 and m["acc@2"] == 1.0


def test_empty_gold_is_zero():
    m = rank_metrics(["a"], [], ks=(1,))
    assert m == {"acc@1": 0.0, "recall@1": 0.0, "mrr": 0.0}


def test_aggregate():
    rows = [rank_metrics(["a"], ["a"], ks=(1,)), rank_metrics(["b"], ["a"], ks=(1,)),
            rank_metrics(["b", "a"], ["a"], ks=(1,))]
    agg = aggregate(rows)
    assert agg["n"] == 3
    assert agg["acc@1"] == 33.3
    assert agg["mrr"] == 50.0  # (1 + 0 + 0.5) / 3
    assert aggregate([]) == {"n": 0}


def test_function_keys():
    assert function_key("django/db/models/deletion.py", "Collector.delete") == "django/db/models/deletion.py:Collector.delete"
    assert function_key("./pkg\\mod.py", "f") == "pkg/mod.py:f"
    assert normalize_gold_function(" sympy/core/mul.py:Mul.flatten ") == "sympy/core/mul.py:Mul.flatten"
    assert normalize_gold_function("./a/b.py:C.m") == "a/b.py:C.m"


# --------------------------------------------------------------------------- corpus

ORIG = "def greet(name):\n    return 'hello ' + name\n\n\ndef other():\n    return 1\n"
FIXED = "def greet(name):\n    name = name.strip()\n    return 'hello ' + name\n\n\ndef other():\n    return 1\n"
REVERT_PATCH = """diff --git a/src/tinypkg/core.py b/src/tinypkg/core.py
--- a/src/tinypkg/core.py
+++ b/src/tinypkg/core.py
@@ -1,4 +1,5 @@
 def greet(name):
+    name = name.strip()
     return 'hello ' + name
 
 
"""


def _build_wheel(cache: Path, name: str = "tinypkg", version: str = "1.0") -> Path:
    wheels = cache / "wheels"
    wheels.mkdir(parents=True, exist_ok=True)
    path = wheels / f"{name}-{version}-py3-none-any.whl"
    di = f"{name}-{version}.dist-info"
    with zipfile.ZipFile(path, "w") as zf:
        zf.writestr(f"{name}/__init__.py", "from .core import greet\n")
        zf.writestr(f"{name}/core.py", FIXED)
        zf.writestr(f"{name}/sub/util.py", "X = 1\n")
        zf.writestr(f"{di}/METADATA", f"Metadata-Version: 2.1\nName: {name}\nVersion: {version}\n")
        zf.writestr(f"{di}/WHEEL", "Wheel-Version: 1.0\nRoot-Is-Purelib: true\nTag: py3-none-any\n")
        zf.writestr(f"{di}/RECORD", "")
        zf.writestr(f"{name}-{version}.data/scripts/tool", "#!/bin/sh\n")
    return path


def _row(**extra) -> dict:
    row = {"instance_id": "tiny__tiny-1", "repo": "tiny/tiny", "query": "q", "gold_files": ["src/tinypkg/core.py"],
           "gold_functions": ["src/tinypkg/core.py:greet"],
           "corpus": {"pypi": "TinyPkg", "version": "1.0", "path_prefix": "src/", "mode": "pre-fix release"}}
    row.update(extra)
    return row


@pytest.fixture
def cache(tmp_path, monkeypatch):
    c = tmp_path / "cache"
    _build_wheel(c)

    def no_network(*a, **k):  # any download attempt is a test failure
        raise AssertionError("network used")

    monkeypatch.setattr(corpus_mod, "_pip_download", no_network)
    monkeypatch.setattr(corpus_mod, "_download_sdist", no_network)
    return c


def test_cache_dir_env(monkeypatch, tmp_path):
    monkeypatch.setenv("REPOCTX_CACHE", str(tmp_path / "c"))
    assert cache_dir() == tmp_path / "c"
    monkeypatch.delenv("REPOCTX_CACHE")
    assert cache_dir() == Path.home() / ".cache" / "repoctx"


def test_fetch_wheel_uses_cache(cache):
    # name and version are matched canonically (case / separators)
    assert fetch_wheel("TinyPkg", "1.0", cache).name == "tinypkg-1.0-py3-none-any.whl"
    assert fetch_wheel("tinypkg", "1.0.0", cache).name == "tinypkg-1.0-py3-none-any.whl"


def test_fetch_wheel_error_names_package(tmp_path, monkeypatch):
    monkeypatch.setattr(corpus_mod, "_pip_download", lambda *a, **k: (False, "ERROR: No matching distribution"))
    monkeypatch.setattr(corpus_mod, "_download_sdist", lambda *a, **k: (False, "no sdist on PyPI"))
    with pytest.raises(CorpusError, match=r"nopkg==9\.9"):
        fetch_wheel("nopkg", "9.9", tmp_path)
    assert not list((tmp_path / "wheels").glob(".dl-*"))  # temp download dir cleaned up


def test_materialize_layout(cache):
    root = materialize(_row(), cache)
    files = sorted(p.relative_to(root).as_posix() for p in root.rglob("*") if p.is_file())
    assert files == ["src/tinypkg/__init__.py", "src/tinypkg/core.py", "src/tinypkg/sub/util.py"]
    assert (root / "src/tinypkg/core.py").read_text() == FIXED
    assert not any(".dist-info" in f or ".data" in f for f in files)


def test_materialize_cached_and_atomic(cache, monkeypatch):
    first = materialize(_row(), cache)
    calls = []
    monkeypatch.setattr(corpus_mod, "_unpack_wheel", lambda *a: calls.append(a))
    t0 = time.perf_counter()
    second = materialize(_row(instance_id="other"), cache)
    assert second == first and calls == []  # same (name, version, prefix) -> same tree, no work
    assert time.perf_counter() - t0 < 0.5
    # no temp dirs left behind
    assert [p.name for p in first.parent.iterdir() if p.name.startswith(".tmp")] == []
    # a different prefix is a different tree
    other = _row()
    other["corpus"] = dict(other["corpus"], path_prefix="")
    monkeypatch.undo()
    monkeypatch.setattr(corpus_mod, "_pip_download", lambda *a, **k: pytest.fail("network"))
    assert (materialize(other, cache) / "tinypkg/core.py").is_file()


def test_interrupted_materialize_leaves_no_tree(cache, monkeypatch):
    def boom(wheel, root, prefix):
        (root / "partial.py").write_text("x")
        raise KeyboardInterrupt

    monkeypatch.setattr(corpus_mod, "_unpack_wheel", boom)
    with pytest.raises(KeyboardInterrupt):
        materialize(_row(), cache)
    trees = cache / "trees"
    assert list(trees.iterdir()) == []  # neither a final tree nor a temp dir
    monkeypatch.undo()
    monkeypatch.setattr(corpus_mod, "_pip_download", lambda *a, **k: pytest.fail("network"))
    assert (materialize(_row(), cache) / "src/tinypkg/core.py").read_text() == FIXED


def test_materialize_reverts_patch(cache):
    row = _row(revert_patch=REVERT_PATCH, corpus={"pypi": "tinypkg", "version": "1.0", "path_prefix": "src/",
                                                   "mode": "post-fix release with gold patch reverted"})
    base = materialize(_row(), cache)
    rev = materialize(row, cache)
    assert rev != base
    assert (rev / "src/tinypkg/core.py").read_text() == ORIG
    assert (base / "src/tinypkg/core.py").read_text() == FIXED  # shared base untouched
    assert (rev / "src/tinypkg/sub/util.py").read_text() == "X = 1\n"
    assert not list(rev.rglob("*.orig")) and not list(rev.rglob("*.rej"))
    # idempotent
    mtime = (rev / "src/tinypkg/core.py").stat().st_mtime_ns
    assert materialize(row, cache) == rev
    assert (rev / "src/tinypkg/core.py").stat().st_mtime_ns == mtime
    # a different instance gets its own tree
    row2 = dict(row, instance_id="tiny__tiny-2")
    assert materialize(row2, cache) != rev


def test_reverse_patch_failure_names_instance(cache):
    bad = REVERT_PATCH.replace("name = name.strip()", "this line is not there")
    row = _row(instance_id="tiny__bad-7", revert_patch=bad)
    with pytest.raises(CorpusError, match="tiny__bad-7"):
        materialize(row, cache)
    assert not list((cache / "trees" / "reverted").glob("tiny__bad-7*"))


def test_reverse_patch_inside_enclosing_git_repo(tmp_path, monkeypatch):
    # a cache living inside some git work tree must not confuse `git apply`
    subprocess.run(["git", "init", "-q", str(tmp_path)], check=True)
    c = tmp_path / "inner" / "cache"
    _build_wheel(c)
    monkeypatch.setattr(corpus_mod, "_pip_download", lambda *a, **k: pytest.fail("network"))
    rev = materialize(_row(revert_patch=REVERT_PATCH), c)
    assert (rev / "src/tinypkg/core.py").read_text() == ORIG


def test_patch_fallback(cache, monkeypatch):
    # `patch -R -p1` is used when git is unavailable
    real_which = corpus_mod.shutil.which
    monkeypatch.setattr(corpus_mod.shutil, "which", lambda n: None if n == "git" else real_which(n))
    rev = materialize(_row(instance_id="tiny__patch-1", revert_patch=REVERT_PATCH), cache)
    assert (rev / "src/tinypkg/core.py").read_text() == ORIG


def test_load_rows(tmp_path):
    p = tmp_path / "rows.jsonl"
    p.write_text("\n".join(json.dumps({"instance_id": str(i)}) for i in range(5)) + "\n\n")
    assert len(load_rows(p)) == 5
    assert [r["instance_id"] for r in load_rows(p, limit=2)] == ["0", "1"]


# a trailing context line that is not in the file: `patch -R` applies this "with fuzz 1"
FUZZY_PATCH = REVERT_PATCH.replace("@@ -1,4 +1,5 @@", "@@ -1,5 +1,6 @@") + " def another():\n"


def test_reverse_patch_needing_fuzz_fails_the_row(cache):
    row = _row(instance_id="tiny__fuzz-3", revert_patch=FUZZY_PATCH)
    with pytest.raises(CorpusError, match=r"does not apply for tiny__fuzz-3") as info:
        materialize(row, cache)
    assert "\n" not in str(info.value)  # one line: it becomes a stderr line and a JSON reason
    assert not list((cache / "trees" / "reverted").glob("tiny__fuzz-3*"))
    # the shared release tree is untouched
    assert (materialize(_row(), cache) / "src/tinypkg/core.py").read_text() == FIXED


def test_reverse_patch_without_git_is_strict_too(cache, monkeypatch):
    real_which = corpus_mod.shutil.which
    monkeypatch.setattr(corpus_mod.shutil, "which", lambda n: None if n == "git" else real_which(n))
    with pytest.raises(CorpusError, match="does not apply"):
        materialize(_row(instance_id="tiny__fuzz-4", revert_patch=FUZZY_PATCH), cache)


def test_row_without_a_corpus_is_a_corpus_error(cache):
    row = _row()
    del row["corpus"]
    with pytest.raises(CorpusError, match="no corpus"):
        materialize(row, cache)
    with pytest.raises(CorpusError, match="no 'version'"):
        materialize(_row(corpus={"pypi": "tinypkg"}), cache)


def test_a_reverted_tree_updates_its_release_index_incrementally(cache, monkeypatch):
    """The reverted tree's index starts as a copy of the release's and keeps its repository name, so
    only the patched file is parsed again (not the whole tree as a second repository)."""
    from repoctx import Settings
    from repoctx.evaluate.runner import open_corpus_index

    monkeypatch.setenv("REPOCTX_CACHE", str(cache))
    row = _row(revert_patch=REVERT_PATCH, corpus={"pypi": "tinypkg", "version": "1.0", "path_prefix": "src/",
                                                   "mode": "post-fix release with gold patch reverted"})
    ix = open_corpus_index(row, False, Settings(embedder="none"))
    report = ix.update()
    assert report.modified == ["src/tinypkg/core.py"] and not report.added
    assert [r.name for r in ix.store.repos()] == [ix.repo]
    assert "def greet" in ix.find("greet")[0].text
