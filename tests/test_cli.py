import json
import re
import zipfile

from typer.testing import CliRunner

from repoctx.cli import app
from tests.conftest import write_tree

runner = CliRunner()
FILES = {
    "pkg/dates.py": "def parse_http_date(value):\n    \"\"\"Parse an HTTP date header.\"\"\"\n    return value\n",
    "pkg/cache.py": "class Cache:\n    def expire(self):\n        \"\"\"Drop stale entries.\"\"\"\n        return parse_http_date(1)\n",
}


def test_index_search_status_context(tmp_path, monkeypatch):
    monkeypatch.setenv("REPOCTX_EMBEDDER", "none")
    root = write_tree(tmp_path / "r", FILES)
    res = runner.invoke(app, ["index", str(root)])
    assert res.exit_code == 0 and "2 files" in res.output
    res = runner.invoke(app, ["search", "parse_http_date", "--repo", str(root), "-k", "3"])
    assert res.exit_code == 0
    assert re.search(r"^pkg/dates\.py:1-3 :: parse_http_date\(value\) — exact name", res.output, re.M)
    res = runner.invoke(app, ["search", "stale entries", "--repo", str(root), "--json", "--level", "file"])
    assert json.loads(res.output)["results"][0].split(" — ")[0] == "pkg/cache.py"  # brief: one line per file
    res = runner.invoke(app, ["search", "parse_http_date", "--repo", str(root), "--detail", "full", "--json"])
    top = json.loads(res.output)["results"][0]
    assert top["citation"] == "pkg/dates.py:1-3 :: parse_http_date" and top["snippet"].startswith("def parse_http_date")
    res = runner.invoke(app, ["search", "parse_http_date", "--repo", str(root), "--detail", "signatures"])
    assert "    Parse an HTTP date header." in res.output and "callers 1, callees 0" in res.output
    assert runner.invoke(app, ["search", "x", "--repo", str(root), "--detail", "everything"]).exit_code == 2
    res = runner.invoke(app, ["status", str(root), "--json"])
    assert json.loads(res.output)["fresh"] is True
    (root / "pkg/new.py").write_text("def n():\n    pass\n")
    res = runner.invoke(app, ["status", str(root)])
    assert "stale" in res.output and "added: pkg/new.py" in res.output
    res = runner.invoke(app, ["context", "how does the cache expire entries?", "--repo", str(root), "--json",
                              "--budget", "300"])
    ctx = json.loads(res.output)
    assert ctx["task"] == "code_query" and ctx["tokens"] <= 300 and ctx["citations"]
    res = runner.invoke(app, ["search", "compare how the cache and the dates module handle expiry",
                              "--repo", str(root), "--mode", "auto", "--trace"])
    assert res.exit_code == 0 and "route: agentic" in res.output and "Result" in res.output


def test_bad_input_is_a_clear_error(tmp_path, monkeypatch):
    monkeypatch.setenv("REPOCTX_EMBEDDER", "none")
    res = runner.invoke(app, ["index", str(tmp_path / "missing")])
    assert res.exit_code == 2 and "not a directory" in res.output
    root = write_tree(tmp_path / "r", FILES)
    res = runner.invoke(app, ["search", "x", "--repo", str(root)])
    assert res.exit_code == 1 and "not indexed" in res.output
    res = runner.invoke(app, ["search", "x", "--repo", str(root), "--level", "nope"])
    assert res.exit_code == 2
    monkeypatch.delenv("REPOCTX_LLM", raising=False)
    res = runner.invoke(app, ["search", "x", "--repo", str(root), "--llm"])
    assert res.exit_code == 2 and "REPOCTX_LLM" in res.output and "Traceback" not in res.output
    monkeypatch.setenv("REPOCTX_MAX_FILE_BYTES", "lots")
    res = runner.invoke(app, ["index", str(root)])
    assert res.exit_code == 2 and "REPOCTX_MAX_FILE_BYTES" in res.output


def test_eval_end_to_end_on_a_local_wheel(tmp_path, monkeypatch):
    monkeypatch.setenv("REPOCTX_EMBEDDER", "none")
    monkeypatch.setenv("REPOCTX_CACHE", str(tmp_path / "cache"))
    wheels = tmp_path / "cache" / "wheels"
    wheels.mkdir(parents=True)
    with zipfile.ZipFile(wheels / "toypkg-1.0-py3-none-any.whl", "w") as zf:
        zf.writestr("toypkg/__init__.py", "")
        zf.writestr("toypkg/dates.py", FILES["pkg/dates.py"])
        zf.writestr("toypkg/cache.py", FILES["pkg/cache.py"])
        zf.writestr("toypkg-1.0.dist-info/METADATA", "Name: toypkg\nVersion: 1.0\n")
    row = {"instance_id": "toy-1", "repo": "toy/toypkg", "query": "HTTP date header parsing is wrong",
           "gold_files": ["src/toypkg/dates.py"], "gold_functions": ["src/toypkg/dates.py:parse_http_date"],
           "corpus": {"pypi": "toypkg", "version": "1.0", "path_prefix": "src/", "mode": "release"}}
    ds = tmp_path / "ds.jsonl"
    ds.write_text(json.dumps(row) + "\n")
    res = runner.invoke(app, ["eval", str(ds), "--json", "--config", "bm25", "-q"])
    assert res.exit_code == 0, res.output
    out = json.loads(res.stdout)["bm25"]  # always keyed by config name
    assert out["n"] == 1 and out["file"]["acc@1"] == 100.0 and out["function"]["acc@1"] == 100.0
    assert set(out["by_repo"]) == {"toy/toypkg"}


def test_grep_outline_and_symbol(tmp_path, monkeypatch):
    monkeypatch.setenv("REPOCTX_EMBEDDER", "none")
    root = write_tree(tmp_path / "r", FILES)
    assert runner.invoke(app, ["index", str(root)]).exit_code == 0
    res = runner.invoke(app, ["grep", r"parse_\w+", "--repo", str(root)])
    assert res.exit_code == 0
    assert "pkg/cache.py:4:         return parse_http_date(1)" in res.output
    assert "pkg/dates.py:1: def parse_http_date(value):" in res.output
    res = runner.invoke(app, ["grep", "PARSE_HTTP", "-F", "-i", "--path", "pkg/dates.py", "--repo", str(root), "--json"])
    out = json.loads(res.output)
    assert [(m["path"], m["line"]) for m in out["matches"]] == [("pkg/dates.py", 1)] and out["total"] == 1
    res = runner.invoke(app, ["grep", "parse", "-n", "1", "--repo", str(root)])
    assert "more: --offset 1" in res.output
    assert runner.invoke(app, ["grep", "nothing_like_this", "--repo", str(root)]).exit_code == 1
    res = runner.invoke(app, ["grep", "parse_(", "--repo", str(root)])
    assert res.exit_code == 2 and "missing ), unterminated subpattern" in res.output and "Traceback" not in res.output

    res = runner.invoke(app, ["outline", "pkg/cache.py", "--repo", str(root)])
    assert res.exit_code == 0
    assert "1-4 Cache: class Cache · 0 callers" in res.output and "  2-4 Cache.expire: def expire(self)" in res.output
    res = runner.invoke(app, ["outline", "pkg/cache.py", "--repo", str(root), "--json"])
    assert [u["qualname"] for u in json.loads(res.output)["units"]] == ["Cache", "Cache.expire"]
    assert runner.invoke(app, ["outline", "pkg/none.py", "--repo", str(root)]).exit_code == 1

    res = runner.invoke(app, ["symbol", "Cache.expire", "--repo", str(root)])
    assert res.exit_code == 0 and "pkg/cache.py:2-4 :: Cache.expire (method)" in res.output
    assert "return parse_http_date(1)" in res.output
    res = runner.invoke(app, ["symbol", "parse_http_date", "--no-body", "--json", "--repo", str(root)])
    assert "text" not in json.loads(res.output)["matches"][0]
    res = runner.invoke(app, ["symbol", "Cache.flush", "--repo", str(root)])
    assert res.exit_code == 1 and "no definition" in res.output
