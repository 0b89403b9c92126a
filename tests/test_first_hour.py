"""What a new user hit in the first hour: read-only repositories, a full disk, an index deleted under
an open Index, and the small things (empty query, end lines, odd file names, help noise)."""
from __future__ import annotations

import os
import resource
import shutil
import signal
import subprocess
import sys
from pathlib import Path

import pytest
from typer.testing import CliRunner

from repoctx import Index, Settings
from repoctx.cli import app
from repoctx.retrieve.router import reads_as_report
from repoctx.store.base import StoreError
from tests.conftest import write_tree

runner = CliRunner()
FILES = {"pkg/dates.py": "def parse_http_date(value):\n    \"\"\"Parse an HTTP date header.\"\"\"\n    return value\n",
         "pkg/cache.py": "class Cache:\n    def expire(self):\n        \"\"\"Drop stale entries.\"\"\"\n        return 1\n"}
REPOCTX = str(Path(sys.executable).with_name("repoctx"))


_CACHE: list[Path] = []  # the session's stand-in for ~/.cache/repoctx (set by _session_cache)


@pytest.fixture(autouse=True)
def _session_cache(tmp_path_factory):
    _CACHE[:] = [tmp_path_factory.getbasetemp() / "cache"]


def _env(**kw) -> dict:
    """A subprocess's environment: the caller's without REPOCTX_*, lexical only, and a cache of the test session's
    own (`repoctx index` records where each index went under it)."""
    env = {k: v for k, v in os.environ.items() if not k.startswith("REPOCTX_")}
    env.update({"REPOCTX_EMBEDDER": "none", "REPOCTX_CACHE": str(_CACHE[0]), **kw})
    return env


def _read_only(root: Path) -> list[str]:
    """A command prefix under which ``root`` is read-only: a private read-only bind mount as root (root
    ignores file modes, not EROFS), file modes otherwise."""
    if os.geteuid() != 0:
        for p in [root, *root.rglob("*")]:
            os.chmod(p, 0o555 if p.is_dir() else 0o444)
        return []
    if not shutil.which("unshare"):
        pytest.fail("unshare (util-linux) is needed to make a read-only mount")
    script = f'mount --bind "{root}" "{root}" && mount -o remount,bind,ro "{root}" && exec "$@"'
    return ["unshare", "-m", "sh", "-c", script, "sh"]


def test_read_only_repository_is_indexed_in_a_per_user_folder(tmp_path):
    root = write_tree(tmp_path / "ro", FILES)
    home = tmp_path / "home"
    home.mkdir()
    prefix = _read_only(root)
    try:
        env = _env(HOME=str(home), REPOCTX_CACHE=str(home / "cache"))
        res = subprocess.run(prefix + [REPOCTX, "index", str(root)], capture_output=True, text=True, env=env,
                             timeout=120)
        assert res.returncode == 0, res.stderr
        assert "read-only" in res.stderr and str(home / "cache" / "indexes") in res.stderr
        assert "Traceback" not in res.stderr and not (root / ".repoctx").exists()
        res = subprocess.run(prefix + [REPOCTX, "search", "parse_http_date", "--repo", str(root)],
                             capture_output=True, text=True, env=env, timeout=120)
        assert res.returncode == 0 and "pkg/dates.py:1-3 :: parse_http_date" in res.stdout, res.stderr
        res = subprocess.run(prefix + [REPOCTX, "status", str(root)], capture_output=True, text=True, env=env,
                             timeout=120)
        assert res.returncode == 0 and res.stdout.startswith("fresh"), res.stdout + res.stderr
        # a folder it cannot write, named explicitly: one sentence naming REPOCTX_INDEX_DIR, no traceback
        res = subprocess.run(prefix + [REPOCTX, "index", str(root)], capture_output=True, text=True,
                             env={**env, "REPOCTX_INDEX_DIR": str(root / "idx")}, timeout=120)
        assert res.returncode != 0 and "REPOCTX_INDEX_DIR" in res.stderr and "Traceback" not in res.stderr
        assert len(res.stderr.strip().splitlines()) <= 2
    finally:
        for p in [root, *root.rglob("*")]:
            os.chmod(p, 0o755 if p.is_dir() else 0o644)


def _limit_file_size(limit: int):
    def apply():
        signal.signal(signal.SIGXFSZ, signal.SIG_IGN)  # a write past the limit fails (EFBIG) instead of killing
        resource.setrlimit(resource.RLIMIT_FSIZE, (limit, limit))
    return apply


def test_full_disk_is_one_sentence_and_the_old_index_stays(tmp_path):
    root = write_tree(tmp_path / "r", FILES)
    env = _env(REPOCTX_INDEX_DIR=str(tmp_path / "ix"))
    assert subprocess.run([REPOCTX, "index", str(root)], env=env, capture_output=True, timeout=120).returncode == 0
    size = max(p.stat().st_size for p in (tmp_path / "ix").iterdir() if p.is_file())
    big = "".join(f"def generated_function_{i}(value):\n    return value + {i}\n\n" for i in range(4000))
    (root / "pkg/big.py").write_text(big)
    res = subprocess.run([REPOCTX, "index", str(root)], env=env, capture_output=True, text=True, timeout=120,
                         preexec_fn=_limit_file_size(size + 4096))
    assert res.returncode == 1, res.stdout + res.stderr
    # a file-size limit fails the write as a full disk would (SQLite: "disk I/O error" here, "full" on ENOSPC)
    assert "disk" in res.stderr and "previous index" in res.stderr and "Traceback" not in res.stderr
    assert len(res.stderr.strip().splitlines()) == 1
    res = subprocess.run([REPOCTX, "search", "parse_http_date", "--repo", str(root)], env=env, capture_output=True,
                         text=True, timeout=120)
    assert res.returncode == 0 and "pkg/dates.py:1-3 :: parse_http_date" in res.stdout


def test_index_deleted_under_an_open_index(tmp_path):
    root = write_tree(tmp_path / "r", FILES)
    ix = Index(root, Settings(index_dir=tmp_path / "ix", embedder="none"))
    ix.update()
    shutil.rmtree(tmp_path / "ix")
    with pytest.raises(StoreError, match="removed while it was open"):
        ix.search("parse_http_date")
    report = ix.update()  # rebuilt, and said so, rather than written to a deleted file
    assert any("removed" in n for n in report.notes) and (tmp_path / "ix" / "index.sqlite").exists()
    assert ix.search("parse_http_date")[0].capsule.qualname == "parse_http_date"
    reopened = Index(root, Settings(index_dir=tmp_path / "ix", embedder="none"), create=False)
    assert reopened.search("parse_http_date")[0].capsule.qualname == "parse_http_date"


def test_a_search_never_creates_an_index(tmp_path, monkeypatch):
    monkeypatch.setenv("REPOCTX_EMBEDDER", "none")
    root = write_tree(tmp_path / "r", FILES)
    assert runner.invoke(app, ["index", str(root)]).exit_code == 0
    shutil.rmtree(root / ".repoctx")
    res = runner.invoke(app, ["search", "parse_http_date", "--repo", str(root)])
    assert res.exit_code == 1 and "not indexed" in res.output
    res = runner.invoke(app, ["context", "parse dates", "--repo", str(root)])
    assert res.exit_code == 1 and "not indexed" in res.output
    res = runner.invoke(app, ["status", str(root)])
    assert res.exit_code == 1 and "not indexed" in res.output
    assert not (root / ".repoctx").exists()


def test_small_things(tmp_path, monkeypatch):
    monkeypatch.setenv("REPOCTX_EMBEDDER", "none")
    root = write_tree(tmp_path / "r", {**FILES, "notes.txt": "first line\nsecond line\n", "a\nb.py": "def odd():\n    pass\n"})
    assert runner.invoke(app, ["index", str(root)]).exit_code == 0
    # an empty query is an error, not arbitrary hits
    for q in ("", "   "):
        res = runner.invoke(app, ["search", q, "--repo", str(root)])
        assert res.exit_code == 2 and "empty" in res.output
    ix = Index(root, Settings(embedder="none"), create=False)
    with pytest.raises(ValueError, match="empty"):
        ix.search("")
    # a whole-file unit ends on the file's last line
    notes = [c for c in ix.store.all_capsules(ix.scope()) if c.path == "notes.txt" and c.kind == "module"][0]
    assert notes.end_line == 2
    dates = [c for c in ix.find("pkg.dates")][0]
    assert dates.end_line == 3
    # a file name with a newline keeps its citation on one line
    odd = ix.find("odd")[0]
    assert "\n" not in odd.citation and odd.citation.startswith("a\\x0ab.py:1-2")
    res = runner.invoke(app, ["search", "odd", "--repo", str(root)])
    assert "a\\x0ab.py:1-2 :: odd" in res.output
    # flags show no <bool> in help
    assert "<bool>" not in runner.invoke(app, ["search", "--help"]).output
    # a search with nothing to find says so
    empty = write_tree(tmp_path / "empty", {"README": ""})
    assert runner.invoke(app, ["index", str(empty)]).exit_code == 0
    res = runner.invoke(app, ["search", "anything at all", "--repo", str(empty)])
    assert res.exit_code == 0 and "no matches" in res.output


def test_interrupted_vector_fill_is_not_called_a_model_change(tmp_path):
    from tests.test_store_contract import HashEmbedder

    class Failing(HashEmbedder):
        calls = 0

        def encode(self, texts):
            Failing.calls += 1
            if Failing.calls == 2:
                raise KeyboardInterrupt  # the kill, half way
            return super().encode(texts)

    files = {f"m{i}.py": f"def f{i}():\n    return {i}\n" for i in range(40)}
    root = write_tree(tmp_path / "r", files)
    settings = Settings(index_dir=tmp_path / "ix", embedder="none", vector_cache=tmp_path / "v.sqlite")
    ix = Index(root, settings, embedder=Failing())
    ix.update(embed=False)
    from repoctx.vectors import VectorCache, fill_vectors

    with pytest.raises(KeyboardInterrupt):
        fill_vectors(ix.store.writer(ix.repo), Failing(), VectorCache(tmp_path / "v.sqlite"), batch=8)
    partial = Index(root, settings, embedder=HashEmbedder())
    status = partial.vectors_status()
    assert 8 <= status["count"] < status["total"] and not status["current"]  # what was embedded is searchable
    res = partial.retrieve("f3", mode="standard")
    assert res.notes and "cover" in res.notes[0]
    assert "still being filled" not in res.notes[0]  # the fill was killed: nothing is filling them
    again = Index(root, settings, embedder=HashEmbedder())
    again.update()
    assert again.last_embed is not None and again.last_embed.model_changed_from is None
    # the batch embedded before the kill was kept: carried over from the partial set, not embedded again
    assert again.last_embed.kept >= 8 and again.last_embed.embedded == again.last_embed.total - again.last_embed.kept
    assert again.vectors_status()["current"] and again.vectors_status()["coverage"] == 1.0


def test_docs_and_tests_do_not_crowd_code_answers(tmp_path):
    root = write_tree(tmp_path / "r", {
        "router/tree.go": "package router\n\n// getValue walks the radix tree to match a request path to its route.\n"
                          "func (n *node) getValue(path string) *route {\n\treturn n.match(path)\n}\n",
        "router/tree_test.go": "package router\n\nfunc TestRadixTreeMatchRoute(t *testing.T) {\n\t// match route in the radix tree\n"
                               "\tn.getValue(\"/a\") // radix tree route match path\n}\n",
        "README.md": "# Router\nRoutes are matched in a radix tree: the tree matches each request path to a route.\n",
        "index.d.ts": "// match a route in the radix tree\nexport declare function matchRoute(path: string): Route;\n",
    })
    ix = Index(root, Settings(index_dir=tmp_path / "ix", embedder="none"))
    ix.update()
    hits = ix.search("how are routes matched in the radix tree", k=10)
    assert hits[0].capsule.qualname == "node.getValue"
    why = {h.capsule.path: h.why for h in hits}
    assert why["router/tree_test.go"].get("test_demoted") and why["README.md"].get("doc_demoted")
    assert why["index.d.ts"].get("doc_demoted")
    # a question about the documentation keeps it at full weight
    assert ix.search("what does the README say about the radix tree", k=1)[0].capsule.path == "README.md"
    # an issue report is read by its title: an "Example:" in its body does not make it ask for the docs
    report = ("Route lookup fails for a path in the radix tree\n\nThe tree does not match the request path to its "
              "route.\nExample:\n\n```\nn.getValue(\"/a\")  // returns nil\n```\n\nExpected behaviour: the route.")
    assert reads_as_report(report)
    why = {h.capsule.path: h.why for h in ix.search(report, k=10)}
    assert why["README.md"].get("doc_demoted")
    docs_report = report.replace("Route lookup fails", "Docs: route lookup is described wrongly", 1)
    assert not {h.capsule.path: h.why for h in ix.search(docs_report, k=10)}["README.md"].get("doc_demoted")
