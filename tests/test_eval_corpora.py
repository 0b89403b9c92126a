"""`repoctx eval` on git corpora, rows that cannot be built, --limit after --repo, the JSON shape
(no network: local git repositories, local wheels, pip stubbed out)."""
from __future__ import annotations

import json
import logging
import os
import subprocess
import zipfile
from pathlib import Path

import pytest
from typer.testing import CliRunner

from repoctx.cli import app
from repoctx.evaluate import corpus as corpus_mod
from repoctx.evaluate.corpus import CorpusError, materialize
from repoctx.evaluate.runner import markdown_table

runner = CliRunner()

DATES_V1 = "def parse_http_date(value):\n    \"\"\"Parse an HTTP date header.\"\"\"\n    return value\n"
DATES_V2 = ("def parse_http_date(value):\n    \"\"\"Parse an HTTP date header.\"\"\"\n"
            "    value = value.strip()\n    return value\n")
CACHE_PY = "class Cache:\n    def expire(self):\n        \"\"\"Drop stale entries.\"\"\"\n        return 1\n"
GIT_ENV = {"GIT_AUTHOR_NAME": "T", "GIT_AUTHOR_EMAIL": "t@example.com", "GIT_COMMITTER_NAME": "T",
           "GIT_COMMITTER_EMAIL": "t@example.com", "GIT_CONFIG_NOSYSTEM": "1"}


def _git(repo: Path, *args: str) -> str:
    env = {k: v for k, v in os.environ.items() if not k.startswith("GIT_")}
    env.update(GIT_ENV, HOME=str(repo.parent))
    return subprocess.run(["git", *args], cwd=repo, env=env, check=True, capture_output=True,
                          text=True).stdout.strip()


@pytest.fixture
def repo(tmp_path) -> tuple[Path, str, str]:
    """A local repository with two commits: the bug (c1) and its fix plus a new module (c2)."""
    r = tmp_path / "proj"
    (r / "pkg").mkdir(parents=True)
    _git(r, "init", "-q", "-b", "main")
    (r / "pkg" / "__init__.py").write_text("")
    (r / "pkg" / "dates.py").write_text(DATES_V1)
    (r / "pkg" / "cache.py").write_text(CACHE_PY)
    _git(r, "add", "-A")
    _git(r, "commit", "-q", "-m", "first")
    c1 = _git(r, "rev-parse", "HEAD")
    (r / "pkg" / "dates.py").write_text(DATES_V2)
    (r / "pkg" / "new.py").write_text("def added():\n    return 2\n")
    _git(r, "add", "-A")
    _git(r, "commit", "-q", "-m", "fix")
    c2 = _git(r, "rev-parse", "HEAD")
    return r, c1, c2


@pytest.fixture
def env(tmp_path, monkeypatch) -> Path:
    cache = tmp_path / "cache"
    monkeypatch.setenv("REPOCTX_CACHE", str(cache))
    monkeypatch.setenv("REPOCTX_EMBEDDER", "none")
    monkeypatch.delenv("REPOCTX_DATABASE_URL", raising=False)
    monkeypatch.setattr(corpus_mod, "_pip_download", lambda *a, **k: (False, "ERROR: No matching distribution"))
    monkeypatch.setattr(corpus_mod, "_download_sdist", lambda *a, **k: (False, "no sdist on PyPI"))
    return cache


def _files(root: Path) -> dict[str, str]:
    """The files of a tree, its checkout's .git aside."""
    return {
        p.relative_to(root).as_posix(): p.read_text()
        for p in sorted(root.rglob("*"))
        if p.is_file() and p.relative_to(root).parts[0] != ".git"
    }


def _git_row(iid: str, source: str, commit: str, **extra) -> dict:
    row = {"instance_id": iid, "repo": "team/proj", "query": "HTTP date header parsing keeps whitespace",
           "gold_files": ["pkg/dates.py"], "gold_functions": ["pkg/dates.py:parse_http_date"],
           "corpus": {"git": source, "commit": commit, "path_prefix": ""}}
    row.update(extra)
    return row


def _wheel(cache: Path) -> None:
    wheels = cache / "wheels"
    wheels.mkdir(parents=True, exist_ok=True)
    with zipfile.ZipFile(wheels / "toypkg-1.0-py3-none-any.whl", "w") as zf:
        zf.writestr("toypkg/__init__.py", "")
        zf.writestr("toypkg/dates.py", DATES_V1)
        zf.writestr("toypkg/cache.py", CACHE_PY)
        zf.writestr("toypkg-1.0.dist-info/METADATA", "Name: toypkg\nVersion: 1.0\n")


def _pypi_row(iid: str, name: str = "toypkg", repo: str = "toy/toypkg") -> dict:
    return {"instance_id": iid, "repo": repo, "query": "HTTP date header parsing is wrong",
            "gold_files": ["src/toypkg/dates.py"], "gold_functions": ["src/toypkg/dates.py:parse_http_date"],
            "corpus": {"pypi": name, "version": "1.0", "path_prefix": "src/", "mode": "release"}}


def _dataset(tmp_path: Path, rows: list[dict]) -> Path:
    ds = tmp_path / "ds.jsonl"
    ds.write_text("".join(json.dumps(r) + "\n" for r in rows))
    return ds


# --------------------------------------------------------------------------- git corpora


def test_git_local_commit_is_checked_out_into_the_cache(env, repo):
    r, c1, c2 = repo
    t1 = materialize(_git_row("a", str(r), c1), env)
    t2 = materialize(_git_row("b", str(r), c2), env)
    assert t1 != t2 and t1.is_relative_to(env / "trees" / "git")
    assert _files(t1) == {"pkg/__init__.py": "", "pkg/dates.py": DATES_V1, "pkg/cache.py": CACHE_PY}
    assert _files(t2)["pkg/dates.py"] == DATES_V2 and "pkg/new.py" in _files(t2)
    # a checkout of the commit as a user has one: HEAD there, clean, its history ending there (the fix is not in
    # it), the objects read in place from the team's repository (nothing copied)
    assert _git(t1, "rev-parse", "HEAD") == c1 and _git(t2, "rev-parse", "HEAD") == c2
    assert _git(t1, "status", "--porcelain") == "" and _git(t2, "status", "--porcelain") == ""
    assert _git(t1, "log", "--format=%H", "--all") == c1
    assert _git(t2, "log", "--format=%H") == f"{c2}\n{c1}"
    assert not list((t1 / ".git" / "objects").glob("??"))
    # keyed by repo + commit: an abbreviated SHA, a branch name, a relative path give the same tree
    assert materialize(_git_row("c", str(r), c2[:8]), env) == t2
    assert materialize(_git_row("d", str(r), "main"), env) == t2
    cwd = os.getcwd()
    os.chdir(r.parent)
    try:
        assert materialize(_git_row("e", "proj", c1), env) == t1
    finally:
        os.chdir(cwd)
    # the team's repository is left as it was
    assert _git(r, "status", "--porcelain") == "" and _git(r, "rev-parse", "HEAD") == c2
    assert [p.name for p in (env / "trees" / "git").iterdir() if p.name.startswith(".tmp")] == []


def test_git_checkout_of_a_shallow_clone_and_of_a_linked_worktree(env, repo, tmp_path):
    """The checkout's history reads what its source has: a shallow clone's boundary comes along (git log ends
    there instead of failing on a missing parent), and a linked worktree's objects are its main repository's."""
    r, c1, c2 = repo
    (r / "pkg" / "third.py").write_text("X = 3\n")
    _git(r, "add", "-A")
    _git(r, "commit", "-q", "-m", "third")
    c3 = _git(r, "rev-parse", "HEAD")
    shallow = tmp_path / "shallow"
    _git(tmp_path, "clone", "-q", "--depth", "2", r.as_uri(), str(shallow))
    t = materialize(_git_row("s", str(shallow), c3), env)
    assert _git(t, "log", "--format=%H") == f"{c3}\n{c2}" and (t / ".git" / "shallow").is_file()
    _git(r, "worktree", "add", "-q", "--detach", str(tmp_path / "wt"), c2)
    t = materialize(_git_row("w", str(tmp_path / "wt"), c2), env)
    assert _git(t, "log", "--format=%H") == f"{c2}\n{c1}" and _git(t, "status", "--porcelain") == ""
    assert _files(t)["pkg/dates.py"] == DATES_V2


def test_git_path_prefix_and_revert_patch(env, repo):
    r, c1, c2 = repo
    t = materialize(_git_row("a", str(r), c1, corpus={"git": str(r), "commit": c1, "path_prefix": "sub"}), env)
    assert (t / "sub/pkg/dates.py").read_text() == DATES_V1
    # the fix commit with the fix reverted is the buggy code (only the patched file is private)
    patch = _git(r, "diff", c1, c2, "--", "pkg/dates.py") + "\n"
    base = materialize(_git_row("x", str(r), c2), env)
    rev = materialize(_git_row("x", str(r), c2, revert_patch=patch), env)
    assert rev.parent.name == "reverted" and (rev / "pkg/dates.py").read_text() == DATES_V1
    # files only: the checkout's history would name the commit whose change is reverted
    assert (base / ".git").is_dir() and not (rev / ".git").exists() and not (t / ".git").exists()
    assert (rev / "pkg/new.py").is_file() and (base / "pkg/dates.py").read_text() == DATES_V2


def test_git_url_is_cloned_once(env, repo):
    r, c1, c2 = repo
    url = r.as_uri()  # file://: a real `git clone`, no network
    t1 = materialize(_git_row("a", url, c1), env)
    assert _files(t1)["pkg/dates.py"] == DATES_V1
    clones = list((env / "git").iterdir())
    assert len(clones) == 1 and clones[0].name.endswith(".git")
    # a commit made after the clone is fetched into it
    (r / "pkg" / "later.py").write_text("X = 3\n")
    _git(r, "add", "-A")
    _git(r, "commit", "-q", "-m", "later")
    c3 = _git(r, "rev-parse", "HEAD")
    assert (materialize(_git_row("b", url, c3), env) / "pkg/later.py").is_file()
    assert list((env / "git").iterdir()) == clones
    # the checkout of a cloned URL reads the bare clone's objects: its history is c3's, not the clone's other refs
    t3 = materialize(_git_row("b", url, c3), env)
    assert _git(t3, "log", "--format=%H") == f"{c3}\n{c2}\n{c1}"
    assert (t3 / ".git" / "objects" / "info" / "alternates").read_text().strip() == str(clones[0] / "objects")


def test_git_errors_are_corpus_errors(env, repo, tmp_path):
    r, c1, _ = repo
    with pytest.raises(CorpusError, match="not found"):
        materialize(_git_row("a", str(r), "0" * 40), env)
    with pytest.raises(CorpusError, match="not found"):
        materialize(_git_row("a", str(r), "no-such-branch"), env)
    with pytest.raises(CorpusError, match="git clone .* failed"):
        materialize(_git_row("a", (tmp_path / "nowhere").as_uri(), c1), env)
    with pytest.raises(CorpusError, match="no such git repository"):
        materialize(_git_row("a", str(tmp_path / "nowhere"), c1), env)
    (tmp_path / "plain").mkdir()
    with pytest.raises(CorpusError, match="not a git repository"):
        materialize(_git_row("a", str(tmp_path / "plain"), c1), env)
    with pytest.raises(CorpusError, match="no 'commit'"):
        materialize(_git_row("a", str(r), ""), env)
    assert not (env / "trees" / "git").exists() or list((env / "trees" / "git").iterdir()) == []
    assert not (env / "git").exists() or list((env / "git").iterdir()) == []


# --------------------------------------------------------------------------- the eval command


def test_eval_skips_rows_it_cannot_build(env, repo, tmp_path):
    r, c1, c2 = repo
    _wheel(env)
    no_corpus = _pypi_row("no-corpus")
    del no_corpus["corpus"]
    fuzzy = (_git(r, "diff", c1, c2, "--", "pkg/dates.py") + "\n").replace("    return value", "    return val")
    rows = [
        _git_row("git-ok", str(r), c1),
        no_corpus,
        _pypi_row("no-wheel", name="missingpkg"),
        _git_row("no-commit", str(r), "f" * 40),
        _git_row("bad-revert", str(r), c2, revert_patch=fuzzy),
        _git_row("bad-url", (tmp_path / "nowhere.git").as_uri(), c1),
        _pypi_row("pypi-ok"),
    ]
    res = runner.invoke(app, ["eval", str(_dataset(tmp_path, rows)), "--json", "--config", "bm25", "-q"])
    assert res.exit_code == 0, res.output
    out = json.loads(res.stdout)
    assert list(out) == ["bm25"]
    b = out["bm25"]
    assert b["n"] == 2 and b["rows_total"] == 7 and b["skipped"] == 5
    reasons = {e["instance_id"]: e["reason"] for e in b["errors"]}
    assert list(reasons) == ["no-corpus", "no-wheel", "no-commit", "bad-revert", "bad-url"]
    assert "no corpus" in reasons["no-corpus"]
    assert "missingpkg==1.0" in reasons["no-wheel"]
    assert "not found" in reasons["no-commit"]
    assert "does not apply" in reasons["bad-revert"]
    assert "git clone" in reasons["bad-url"]
    assert b["file"]["acc@1"] == 100.0 and b["file"]["n"] == 2
    # one stderr line per skipped row, and the count
    for iid in reasons:
        assert f"skipped {iid}" in res.stderr
    assert "5 of 7 rows skipped" in res.stderr
    # per-row results: rank of each gold file and function, and the first ranks
    by_id = {row["instance_id"]: row for row in b["rows"]}
    assert set(by_id) == {"git-ok", "pypi-ok"}
    assert by_id["git-ok"]["gold_file_ranks"] == {"pkg/dates.py": 1}
    assert by_id["git-ok"]["gold_function_ranks"] == {"pkg/dates.py:parse_http_date": 1}
    assert by_id["git-ok"]["file_rank"] == 1 and by_id["git-ok"]["function_rank"] == 1
    assert by_id["pypi-ok"]["gold_file_ranks"] == {"src/toypkg/dates.py": 1}
    # the table says it too
    res = runner.invoke(app, ["eval", str(_dataset(tmp_path, rows)), "--config", "bm25", "-q"])
    assert res.exit_code == 0, res.output
    assert "| 2 | 5 |" in res.stdout and "5 of 7 rows skipped" in res.stdout


def test_eval_json_is_keyed_by_config_with_several_configs(env, repo, tmp_path):
    r, c1, _ = repo
    ds = _dataset(tmp_path, [_git_row("git-ok", str(r), c1), _git_row("no-commit", str(r), "f" * 40)])
    res = runner.invoke(app, ["eval", str(ds), "--json", "--config", "bm25,hybrid", "-q"])
    assert res.exit_code == 0, res.output
    out = json.loads(res.stdout)
    assert list(out) == ["bm25", "hybrid"]
    for name in out:
        assert out[name]["n"] == 1 and out[name]["skipped"] == 1
        assert out[name]["errors"][0]["instance_id"] == "no-commit"
        assert out[name]["rows"][0]["gold_file_ranks"] == {"pkg/dates.py": 1}
    assert set(out["bm25"]) == set(out["hybrid"])
    assert res.stderr.count("skipped no-commit") == 1  # a corpus failure is reported once, skipped in both
    # each result names the settings its ranking depends on (BM25 runs without an embedder)
    assert out["bm25"]["settings"]["embedder"] == "none" and out["hybrid"]["settings"]["function_windows"] is False


def test_limit_applies_after_repo(env, tmp_path):
    _wheel(env)
    rows = [_pypi_row(f"a-{i}", repo="other/repo") for i in range(3)] + [_pypi_row("toy-1"), _pypi_row("toy-2")]
    ds = _dataset(tmp_path, rows)
    res = runner.invoke(app, ["eval", str(ds), "--json", "--config", "bm25", "-q", "--repo", "toy/toypkg",
                              "--limit", "1"])
    assert res.exit_code == 0, res.output
    out = json.loads(res.stdout)["bm25"]
    assert out["n"] == 1 and [r["instance_id"] for r in out["rows"]] == ["toy-1"]
    assert set(out["by_repo"]) == {"toy/toypkg"}


def test_markdown_table_has_function_acc1_and_skips():
    res = {"bm25": {"name": "BM25 only", "n": 3, "rows_total": 4, "skipped": 1,
                    "errors": [{"instance_id": "x-1", "reason": "no corpus"}],
                    "file": {"n": 3, "acc@1": 33.3, "acc@3": 66.7, "acc@5": 100.0, "acc@10": 100.0, "mrr": 61.1},
                    "function": {"n": 2, "acc@1": 50.0, "acc@5": 100.0, "acc@10": 100.0, "mrr": 75.0}}}
    table = markdown_table(res)
    header, _, line = table.splitlines()[:3]
    cols = [c.strip() for c in header.strip("|").split("|")]
    vals = [c.strip() for c in line.strip("|").split("|")]
    row = dict(zip(cols, vals))
    assert row["fn Acc@1"] == "50.0" and row["fn MRR"] == "75.0" and row["skipped"] == "1"
    assert "1 of 4 rows skipped (x-1)" in table and "measured with" not in table
    res["bm25"]["settings"] = {"embedder": "local:code", "second_stage": True, "function_windows": True, "history": True}
    assert "BM25 only: measured with REPOCTX_EMBEDDER=local:code, REPOCTX_FUNCTION_WINDOWS=1" in markdown_table(res)


# --------------------------------------------------------------------------- a file of the snapshot that cannot be read

BIG = 4 << 20  # the red team's 4 MiB data file


def test_eval_keeps_a_row_whose_git_snapshot_lacks_one_blob(env, repo, tmp_path, caplog):
    """A partial clone that never fetched a 4 MiB data file, its origin gone: git cannot write that one file.
    The row is scored on the rest (files after it included), and the file is reported, not the row lost."""
    r, c1, _ = repo
    (r / "data").mkdir()
    (r / "data" / "big.csv").write_text(("1,2,3,4,5,6,7\n" * (BIG // 14 + 1))[:BIG])
    _git(r, "add", "-A")
    _git(r, "commit", "-q", "-m", "data")
    c3 = _git(r, "rev-parse", "HEAD")
    _git(r, "config", "uploadpack.allowFilter", "true")
    partial = tmp_path / "partial.git"
    _git(tmp_path, "clone", "-q", "--bare", "--filter=blob:limit=1m", r.as_uri(), str(partial))
    r.rename(tmp_path / "origin-gone")  # the promisor remote cannot hand the blob over any more
    ds = _dataset(tmp_path, [_git_row("partial", str(partial), c3)])
    with caplog.at_level(logging.WARNING, logger="repoctx.eval"):  # (stderr, where pytest does not catch logs)
        res = runner.invoke(app, ["eval", str(ds), "--json", "--config", "bm25", "-q"])
    assert res.exit_code == 0, res.output
    b = json.loads(res.stdout)["bm25"]
    assert b["n"] == 1 and b["skipped"] == 0 and b["errors"] == [], b["errors"]
    row = b["rows"][0]
    assert row["gold_file_ranks"] == {"pkg/dates.py": 1}  # (pkg/ comes after data/: git was asked again)
    assert [u["path"] for u in row["unread_files"]] == ["data/big.csv"]
    assert "git checkout-index" in row["unread_files"][0]["reason"]
    assert b["warnings"] == [{"instance_id": "partial", "warning": b["warnings"][0]["warning"],
                              "unread_files": row["unread_files"]}]
    assert row["history_commits"] == 1  # mined as a partial clone's (exact renames: no blob asked for): c2
    assert "partial: scored without 1 file" in caplog.text and "data/big.csv" in caplog.text
    tree = materialize(_git_row("partial", str(partial), c3))
    assert sorted(_files(tree)) == ["pkg/__init__.py", "pkg/cache.py", "pkg/dates.py", "pkg/new.py"]
    assert corpus_mod.unread_files(tree) == row["unread_files"]
    assert _git(tree, "config", "--get", "remote.origin.promisor") == "true"  # its checkout is a partial clone too
    # the table says it too
    res = runner.invoke(app, ["eval", str(ds), "--config", "bm25", "-q"])
    assert res.exit_code == 0 and "1 of 1 rows scored without files that could not be read (partial)" in res.stdout


def _break_member(wheel: Path, name: str, how: str) -> None:
    """Corrupt one stored member of a zip in place: its bytes (a bad CRC) or its compression method
    (9, Deflate64, which zipfile cannot read)."""
    data = bytearray(wheel.read_bytes())
    with zipfile.ZipFile(wheel) as zf:
        info = zf.getinfo(name)
    start = info.header_offset + 30 + len(name.encode()) + len(info.extra)
    if how == "crc":
        data[start + 100] ^= 0xFF
    else:
        at = data.rfind(name.encode()) - 46  # the central directory's entry, which zipfile trusts
        assert data[at:at + 4] == b"PK\x01\x02"
        data[at + 10:at + 12] = (9).to_bytes(2, "little")
    wheel.write_bytes(bytes(data))


def test_eval_keeps_a_row_whose_wheel_has_unreadable_members(env, tmp_path, caplog):
    wheels = env / "wheels"
    wheels.mkdir(parents=True, exist_ok=True)
    whl = wheels / "toypkg-1.0-py3-none-any.whl"
    with zipfile.ZipFile(whl, "w") as zf:
        zf.writestr("toypkg/__init__.py", "")
        zf.writestr("toypkg/data/big.csv", b"7" * BIG, compress_type=zipfile.ZIP_STORED)
        zf.writestr("toypkg/data/table.bin", b"\x01" * 4096, compress_type=zipfile.ZIP_STORED)
        zf.writestr("toypkg/dates.py", DATES_V1)
        zf.writestr("toypkg-1.0.dist-info/METADATA", "Name: toypkg\nVersion: 1.0\n")
    _break_member(whl, "toypkg/data/big.csv", "crc")
    _break_member(whl, "toypkg/data/table.bin", "method")
    ds = _dataset(tmp_path, [_pypi_row("pypi-bad-member")])
    with caplog.at_level(logging.WARNING, logger="repoctx.eval"):
        res = runner.invoke(app, ["eval", str(ds), "--json", "--config", "bm25", "-q"])
    assert res.exit_code == 0, res.output
    b = json.loads(res.stdout)["bm25"]
    assert b["n"] == 1 and b["skipped"] == 0, b["errors"]
    row = b["rows"][0]
    assert row["gold_file_ranks"] == {"src/toypkg/dates.py": 1}
    reasons = {u["path"]: u["reason"] for u in row["unread_files"]}
    assert set(reasons) == {"src/toypkg/data/big.csv", "src/toypkg/data/table.bin"}
    assert "CRC" in reasons["src/toypkg/data/big.csv"] and "compression" in reasons["src/toypkg/data/table.bin"]
    tree = materialize(_pypi_row("pypi-bad-member"))
    assert not (tree / "src/toypkg/data/big.csv").exists() and (tree / "src/toypkg/dates.py").is_file()
    assert "pypi-bad-member: scored without 2 files" in caplog.text


# --------------------------------------------------------------------------- a checkout's history in the file ranking

HEADERS_PY = ('def strip_trailing_whitespace_header(header):\n    """Trailing whitespace of a header."""\n'
              '    return header.rstrip()\n')


def test_eval_ranks_files_with_the_checkouts_history_up_to_its_commit(env, tmp_path):
    """A git corpus is indexed as a checkout: its past commits vote on the file ranking as in a file-level search
    (a fix to the same file said in the same words lifts it), the history stops at the row's commit (a later fix
    that names the question's words is not in it), and --no-history ranks as before."""
    r = tmp_path / "proj"
    (r / "pkg").mkdir(parents=True)
    _git(r, "init", "-q", "-b", "main")
    (r / "pkg" / "headers.py").write_text(HEADERS_PY)
    (r / "pkg" / "dates.py").write_text(DATES_V1)
    (r / "pkg" / "cache.py").write_text(CACHE_PY)
    _git(r, "add", "-A")
    _git(r, "commit", "-q", "-m", "first")
    for i, (path, message) in enumerate([("pkg/dates.py", "Fix parsing when the header ends in trailing whitespace"),
                                         ("pkg/cache.py", "Cache: drop stale entries on expiry")]):
        (r / path).write_text((r / path).read_text() + f"\n\nX{i} = {i}\n")
        _git(r, "add", "-A")
        _git(r, "commit", "-q", "-m", message)
    row_commit = _git(r, "rev-parse", "HEAD")
    (r / "pkg" / "headers.py").write_text(HEADERS_PY + "\n\nLATER = 1\n")
    _git(r, "add", "-A")
    _git(r, "commit", "-q", "-m", "Fix the header parsing of trailing whitespace")  # after the row: never seen
    row = _git_row("hist", str(r), row_commit, query="parsing breaks when a header ends in trailing whitespace")
    ds = _dataset(tmp_path, [row])

    def run(*extra: str) -> dict:
        res = runner.invoke(app, ["eval", str(ds), "--json", "--config", "bm25", "-q", *extra])
        assert res.exit_code == 0, res.output
        return json.loads(res.stdout)["bm25"]

    without = run("--no-history")
    assert without["rows"][0]["file_rank"] == 2  # the header helper's words win the lexical ranking
    assert without["rows"][0]["history_commits"] is None and without["history"] == {"rows": 0, "moved": 0}
    with_ = run()
    got = with_["rows"][0]
    assert got["file_rank"] == 1 and got["history_moved"] >= 1, got
    assert got["history_commits"] == 2  # the two modifying commits up to the row's; not the later fix
    assert with_["history"] == {"rows": 1, "moved": 1}
    res = runner.invoke(app, ["eval", str(ds), "--config", "bm25", "-q"])
    assert "1 of 1 rows' trees are git checkouts whose mined history voted" in res.stdout
    res = runner.invoke(app, ["eval", str(ds), "--config", "bm25", "-q", "--tree", "both"])
    assert res.exit_code == 0 and "(wheel): 1 of 1 rows' trees are git checkouts" in res.stdout, res.output


def test_fix_commits_become_second_stage_examples_at_their_parents(env, repo, tmp_path):
    """bench/train_rerank.py --history: each row history_rows.py writes (a fix commit: its message, the repository at
    its parent, the functions it changed) is searched as an issue report of its parent's index; a unit the second
    stage may move is an example, gold when the commit changed it, folded by the row's project."""
    import sys

    from repoctx.config import Settings

    sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "bench"))
    from train_rerank import history_searches, report_examples

    r, _, _ = repo
    (r / "pkg" / "dates.py").write_text(
        DATES_V1 + '\n\ndef format_http_date(value):\n    """Format a date for an HTTP header."""\n    return value\n'
    )
    _git(r, "commit", "-q", "-am", "format")  # the parent: two functions the report's words find
    parent = _git(r, "rev-parse", "HEAD")
    rows = tmp_path / "rows.jsonl"
    rows.write_text(json.dumps(_git_row("proj-fix", str(r), parent)) + "\n")
    searches = history_searches(rows, Settings.from_env())
    assert len(searches) == 1
    row, hits, hit_keys, keep, _ = searches[0]
    assert row["package"] == "team/proj" and row["gold"] == ["pkg/dates.py:parse_http_date"]
    moved_gold = [
        i for i, (cid, _) in enumerate(hits) if cid not in keep and "pkg/dates.py:parse_http_date" in hit_keys[i]
    ]
    assert len(moved_gold) == 1  # the changed function, found at the parent, is one the second stage may move
    examples = report_examples(searches, "history:")
    assert len(examples) == sum(1 for cid, _ in hits if cid not in keep)
    assert {project for _, _, project in examples} == {"history:team/proj"}
    assert sum(label for _, label, _ in examples) == 1.0


def test_history_rows_name_functions_not_classes_as_function_gold(tmp_path):
    """bench/history_rows.py: the history names every unit a commit changed, a class when lines of its own body
    changed; function-level gold is functions and methods (as SWE-bench's), so the kind is read at the parent."""
    import sys

    sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "bench"))
    from history_rows import unit_kind

    r = tmp_path / "proj"
    (r / "pkg").mkdir(parents=True)
    _git(r, "init", "-q")
    (r / "pkg" / "opts.py").write_text(
        "class Option:\n    default = None\n\n    def parse(self, value):\n        return value\n\n\n"
        "def helper():\n    def inner():\n        return 1\n    return inner\n"
    )
    _git(r, "add", ".")
    _git(r, "commit", "-q", "-m", "options")
    sha = _git(r, "rev-parse", "HEAD")
    kinds = {q: unit_kind(r, sha, f"pkg/opts.py:{q}") for q in ("Option", "Option.parse", "helper", "gone")}
    assert kinds == {"Option": "class", "Option.parse": "method", "helper": "function", "gone": None}
    assert unit_kind(r, sha, "pkg/missing.py:f") is None  # a path the commit does not hold
