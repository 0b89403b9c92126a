"""`repoctx eval --tree wheel|sdist|both`: a release indexed as its sdist (tests and docs included, top
folder stripped so paths are the repository's) next to its wheel (no network: a local wheel, the sdist
written by an injected downloader)."""
from __future__ import annotations

import io
import json
import tarfile
import zipfile
from pathlib import Path

import pytest
from typer.testing import CliRunner

from repoctx.cli import app
from repoctx.evaluate import corpus as corpus_mod
from repoctx.evaluate.corpus import CorpusError, materialize
from repoctx.evaluate.runner import evaluate_trees, markdown_trees

runner = CliRunner()

DATES_V1 = "def parse_http_date(value):\n    \"\"\"Parse an HTTP date header.\"\"\"\n    return value\n"
DATES_V2 = ("def parse_http_date(value):\n    \"\"\"Parse an HTTP date header.\"\"\"\n"
            "    value = value.strip()\n    return value\n")
CONFTEST = ("import pytest\n\n\ndef pytest_configure(config):\n    \"\"\"Register the slow marker for "
            "the test run.\"\"\"\n    config.addinivalue_line('markers', 'slow marker')\n")
REVERT = """--- a/src/toypkg/dates.py
+++ b/src/toypkg/dates.py
@@ -1,3 +1,4 @@
 def parse_http_date(value):
     \"\"\"Parse an HTTP date header.\"\"\"
+    value = value.strip()
     return value
"""


@pytest.fixture
def env(tmp_path, monkeypatch) -> Path:
    cache = tmp_path / "cache"
    monkeypatch.setenv("REPOCTX_CACHE", str(cache))
    monkeypatch.setenv("REPOCTX_EMBEDDER", "none")
    monkeypatch.delenv("REPOCTX_DATABASE_URL", raising=False)
    monkeypatch.setattr(corpus_mod, "_pip_download", lambda *a, **k: (False, "ERROR: No matching distribution"))
    monkeypatch.setattr(corpus_mod, "_download_sdist", lambda *a, **k: (False, "no network"))
    monkeypatch.setattr(corpus_mod, "_download_sdist_simple", lambda *a, **k: (False, "no network"))
    wheels = cache / "wheels"
    wheels.mkdir(parents=True)
    with zipfile.ZipFile(wheels / "toypkg-1.0-py3-none-any.whl", "w") as zf:
        zf.writestr("toypkg/__init__.py", "")
        zf.writestr("toypkg/dates.py", DATES_V2)
        zf.writestr("toypkg-1.0.dist-info/METADATA", "Name: toypkg\nVersion: 1.0\n")
    return cache


class FakePyPI:
    """A downloader that writes the sdist ``toypkg-1.0.tar.gz`` (top folder ``toypkg-1.0/``) and counts calls."""

    def __init__(self) -> None:
        self.calls: list[tuple[str, str]] = []

    def __call__(self, name: str, version: str, dest: Path) -> tuple[bool, str]:
        self.calls.append((name, version))
        top = f"{name}-{version}/"
        files = {"PKG-INFO": "Name: toypkg\n", "toypkg.egg-info/SOURCES.txt": "x\n",
                 "src/toypkg/__init__.py": "", "src/toypkg/dates.py": DATES_V2,
                 "tests/conftest.py": CONFTEST, "tests/test_dates.py": "def test_parse():\n    assert True\n",
                 "docs/index.rst": "Dates\n=====\n\nParsing HTTP date headers.\n"}
        with tarfile.open(dest / f"{name}-{version}.tar.gz", "w:gz") as tf:
            for rel, text in files.items():
                data = text.encode()
                info = tarfile.TarInfo(top + rel)
                info.size = len(data)
                tf.addfile(info, io.BytesIO(data))
        return True, ""


def _row(iid: str, gold: str, func: str | None = None, **extra) -> dict:
    row = {"instance_id": iid, "repo": "toy/toypkg", "query": "HTTP date header parsing keeps whitespace",
           "gold_files": [gold], "gold_functions": [func] if func else [],
           "corpus": {"pypi": "toypkg", "version": "1.0", "path_prefix": "src/", "mode": "release"}}
    row.update(extra)
    return row


def _files(root: Path) -> set[str]:
    return {p.relative_to(root).as_posix() for p in root.rglob("*") if p.is_file()}


def test_sdist_tree_has_repository_paths_and_is_cached(env):
    fake = FakePyPI()
    row = _row("r1", "src/toypkg/dates.py")
    sdist = materialize(row, tree="sdist", download_sdist=fake)
    wheel = materialize(row)
    # the top folder is stripped, tests and docs kept, build metadata dropped; path_prefix is the wheel's
    assert _files(sdist) == {"src/toypkg/__init__.py", "src/toypkg/dates.py", "tests/conftest.py",
                             "tests/test_dates.py", "docs/index.rst"}
    assert _files(wheel) == {"src/toypkg/__init__.py", "src/toypkg/dates.py"}
    assert sdist != wheel and fake.calls == [("toypkg", "1.0")]
    assert (env / "wheels" / "sdists" / "toypkg-1.0.tar.gz").is_file()  # in the wheels' cache, apart
    # cached: no second download, and the wheel mode still picks the wheel
    assert materialize(row, tree="sdist", download_sdist=fake) == sdist and len(fake.calls) == 1
    assert corpus_mod.fetch_wheel("toypkg", "1.0").name.endswith(".whl")
    # a revert patch is in repository paths: it applies to the sdist tree as to the wheel's
    reverted = materialize(_row("r2", "src/toypkg/dates.py", revert_patch=REVERT), tree="sdist", download_sdist=fake)
    assert (reverted / "src/toypkg/dates.py").read_text() == DATES_V1
    assert (sdist / "src/toypkg/dates.py").read_text() == DATES_V2 and (reverted / "tests/conftest.py").is_file()


def test_a_fetched_sdist_is_never_taken_for_the_wheel(env):
    (env / "wheels" / "toypkg-1.0-py3-none-any.whl").unlink()
    row = _row("r1", "src/toypkg/dates.py")
    assert (materialize(row, tree="sdist", download_sdist=FakePyPI()) / "tests/conftest.py").is_file()
    with pytest.raises(CorpusError, match=r"could not fetch toypkg==1\.0"):  # offline, no wheel: not the sdist
        materialize(row)


def test_sdist_offline_without_cache_is_a_clear_error(env):
    with pytest.raises(CorpusError, match=r"sdist of toypkg==1\.0.*no network.*offline"):
        materialize(_row("r1", "src/toypkg/dates.py"), tree="sdist")
    with pytest.raises(ValueError):
        materialize(_row("r1", "src/toypkg/dates.py"), tree="checkout")


def test_both_trees_are_reported_with_gold_missing(env, tmp_path):
    fake = FakePyPI()
    ds = tmp_path / "ds.jsonl"
    rows = [_row("in-both", "src/toypkg/dates.py", "src/toypkg/dates.py:parse_http_date"),
            _row("sdist-only", "tests/conftest.py", "tests/conftest.py:pytest_configure",
                 query="register the slow marker in pytest_configure")]
    ds.write_text("".join(json.dumps(r) + "\n" for r in rows))
    by_tree = evaluate_trees(ds, configs=("bm25",), download_sdist=fake)
    wheel, sdist = by_tree["wheel"]["bm25"], by_tree["sdist"]["bm25"]
    assert (wheel["tree"], sdist["tree"]) == ("wheel", "sdist")
    assert wheel["n"] == sdist["n"] == 2 and wheel["skipped"] == sdist["skipped"] == 0
    assert wheel["gold_missing"] == 1 and sdist["gold_missing"] == 0
    w_rows = {r["instance_id"]: r for r in wheel["rows"]}
    s_rows = {r["instance_id"]: r for r in sdist["rows"]}
    assert w_rows["sdist-only"]["gold_missing"] == ["tests/conftest.py"] and w_rows["sdist-only"]["file_rank"] is None
    assert s_rows["sdist-only"]["gold_file_ranks"]["tests/conftest.py"] is not None
    assert s_rows["sdist-only"]["gold_function_ranks"]["tests/conftest.py:pytest_configure"] is not None
    assert s_rows["in-both"]["gold_file_ranks"]["src/toypkg/dates.py"] is not None
    table = markdown_trees(by_tree)
    lines = [ln for ln in table.splitlines() if ln.startswith("| BM25")]
    assert [ln.split("|")[2].strip() for ln in lines] == ["wheel", "sdist"]
    assert [ln.split("|")[5].strip() for ln in lines] == ["1", "0"]  # the gold-missing column


def test_cli_tree_both_and_errors(env, tmp_path, monkeypatch):
    ds = tmp_path / "ds.jsonl"
    ds.write_text(json.dumps(_row("in-both", "src/toypkg/dates.py", "src/toypkg/dates.py:parse_http_date")) + "\n")
    bad = runner.invoke(app, ["eval", str(ds), "--tree", "checkout", "-q"])
    assert bad.exit_code == 2 and "--tree" in bad.output
    offline = runner.invoke(app, ["eval", str(ds), "--tree", "sdist", "--config", "bm25", "-q", "--json"])
    assert offline.exit_code == 0
    out = json.loads(offline.stdout)["bm25"]
    assert out["n"] == 0 and "offline" in out["errors"][0]["reason"]
    monkeypatch.setattr(corpus_mod, "_download_sdist_simple", FakePyPI())
    res = runner.invoke(app, ["eval", str(ds), "--tree", "both", "--config", "bm25", "-q", "--json"])
    assert res.exit_code == 0, res.output
    got = json.loads(res.stdout)
    assert set(got) == {"wheel", "sdist"} and got["sdist"]["bm25"]["n"] == got["wheel"]["bm25"]["n"] == 1
    table = runner.invoke(app, ["eval", str(ds), "--tree", "both", "--config", "bm25", "-q"])
    assert table.exit_code == 0 and "| wheel |" in table.stdout and "| sdist |" in table.stdout
