"""The copilot's tools: RepoTools (plain dicts) and the same operations as Strands tools in a real agent loop."""
from __future__ import annotations

import json
import os

import pytest

from repoctx import Index, Settings
from repoctx.copilot.tools import MAX_READ_LINES, TOOL_NAMES, RepoTools, make_tools
from repoctx.store.base import Scope
from tests.conftest import write_tree

AWS_SECRET = "wJalrXUtnFEMI/K7MDENG/bPxRfiCYEXAMPLEKEY"

FILES = {
    "app/db.py": (
        "import os\n"
        "\n"
        "\n"
        "class Pool:\n"
        "    \"\"\"A pool of database connections.\"\"\"\n"
        "\n"
        "    def connect(self):\n"
        "        return open_conn(os.environ.get('DSN'))\n"
        "\n"
        "\n"
        "def open_conn(dsn):\n"
        "    \"\"\"Open one database connection to dsn.\"\"\"\n"
        "    return make_socket(dsn)\n"
    ),
    "app/api.py": (
        "from app.db import Pool\n"
        "\n"
        "\n"
        "def handle_request(req):\n"
        "    \"\"\"Serve one HTTP request from the pool.\"\"\"\n"
        "    return Pool().connect()\n"
    ),
    "app/settings.py": f"DEBUG = False\nAWS_SECRET_ACCESS_KEY = \"{AWS_SECRET}\"\nREGION = 'eu-west-1'\n",
    "app/long.py": "".join(f"def f{i}():\n    return {i}\n\n\n" for i in range(150)),
    "secret/keys.py": (
        "from app.db import open_conn\n"
        "\n"
        "\n"
        "def rotate_master_key():\n"
        "    \"\"\"Rotate the master key.\"\"\"\n"
        "    return open_conn('vault')\n"
    ),
    "private_notes.py": "def private_thing():\n    return 'ignored'\n",
    ".gitignore": "private_notes.py\n",
    ".env": "DATABASE_PASSWORD=hunter2hunter2\n",
}

OPEN_CONN = "app/db.py:11-13 :: open_conn"
CONNECT = "app/db.py:7-8 :: Pool.connect"
HANDLE = "app/api.py:4-6 :: handle_request"
ROTATE = "secret/keys.py:4-6 :: rotate_master_key"


@pytest.fixture
def ix(tmp_path) -> Index:
    root = write_tree(tmp_path / "repo", FILES)
    index = Index(root, Settings(index_dir=tmp_path / "ix", embedder="none"))
    index.update()
    yield index
    index.close()


@pytest.fixture
def rt(ix) -> RepoTools:
    return RepoTools(ix)


def is_error(out: dict, code: str | None = None, tool: str | None = None) -> bool:
    ok = set(out) == {"error", "detail", "tool"} and "\n" not in out["detail"]
    return ok and (code is None or out["error"] == code) and (tool is None or out["tool"] == tool)


# ----------------------------------------------------------------------------------------- (1) each tool
def test_search_code_returns_the_function_with_its_citation(rt):
    out = rt.search_code("open database connection", k=5)
    assert out["level"] == "symbol" and out["route"]["mode"] in ("standard", "agentic") and out["detail"] == "brief"
    top = {r["citation"]: r for r in out["results"]}
    assert OPEN_CONN in top
    brief = top[OPEN_CONN]  # one line's worth: the citation, a short signature and why it was found
    assert set(brief) == {"citation", "repo", "sig", "why"}
    assert brief["repo"] and brief["sig"] == "(dsn)" and "lexical" in brief["why"]

    out = rt.search_code("open database connection", k=5, detail="signatures")
    r = {x["citation"]: x for x in out["results"]}[OPEN_CONN]
    assert (r["path"], r["start_line"], r["end_line"], r["symbol"], r["kind"]) == ("app/db.py", 11, 13, "open_conn",
                                                                                    "function")
    assert r["signature"].startswith("def open_conn") and "database connection" in r["docstring"]
    assert isinstance(r["callers"], int) and isinstance(r["callees"], int) and "snippet" not in r

    out = rt.search_code("open database connection", k=5, detail="full")
    r = {x["citation"]: x for x in out["results"]}[OPEN_CONN]
    assert r["repo"] and r["signature"].startswith("def open_conn") and "database connection" in r["docstring"]
    assert r["snippet"].startswith("def open_conn(dsn):")
    json.dumps(out)  # plain data

    files = rt.search_code("open database connection", k=3, level="file", mode="standard")
    assert files["results"][0]["path"] == "app/db.py" and OPEN_CONN in files["results"][0]["citations"]
    assert rt.search_code("x", detail="everything")["error"] == "invalid_argument"


def test_snippet_is_capped(rt):
    out = rt.symbol("f3")
    assert out["matches"][0]["citation"] == "app/long.py:13-14 :: f3"
    big = RepoTools(rt.index)  # a long capsule: the module
    res = big.search_code("app.long", k=10, detail="full")
    for r in res["results"]:
        assert len(r["snippet"].split("\n")) <= 30


def test_get_context_symbol_callers_callees(rt):
    ctx = rt.get_context("how is a database connection opened", task="code_query", budget=800)
    assert ctx["task"] == "code_query" and ctx["budget"] == 800 and ctx["tokens"] <= 800
    assert OPEN_CONN in ctx["citations"] and "def open_conn" in ctx["text"]

    found = rt.symbol("open_conn")
    assert [d["citation"] for d in found["matches"]] == [OPEN_CONN]
    assert found["matches"][0]["text"].startswith("def open_conn(dsn):")  # the whole body
    assert "text" not in rt.symbol("open_conn", body=False)["matches"][0]
    assert rt.symbol("Pool.connect")["matches"][0]["citation"] == CONNECT
    assert rt.symbol("app.db.open_conn")["matches"][0]["citation"] == OPEN_CONN  # module-qualified
    assert rt.symbol("no_such_thing")["matches"] == []

    callers = rt.callers("open_conn")
    assert callers["resolved"] == [OPEN_CONN] and callers["ambiguous"] is False
    cites = {c["citation"] for c in callers["callers"]}
    assert CONNECT in cites and ROTATE in cites  # unscoped: the secret/ caller is visible
    assert all(c["of"] == OPEN_CONN for c in callers["callers"])

    by_id = rt.callers("repo:app/db.py#open_conn")  # a capsule id works too
    assert by_id["resolved"] == [OPEN_CONN]

    callees = rt.callees("Pool.connect")
    assert callees["resolved"] == [CONNECT]
    assert OPEN_CONN in {c["citation"] for c in callees["callees"]}
    unresolved = rt.callees("open_conn")["callees"]
    assert any(c["citation"] is None and c["name"] == "make_socket" and c["resolved"] is False for c in unresolved)

    assert rt.callers("handle_request")["callers"] == []
    assert HANDLE in rt.callees("handle_request")["resolved"]


def test_ambiguous_symbol_lists_every_candidate(tmp_path):
    root = write_tree(tmp_path / "r", {"a.py": "def run():\n    return helper()\n\n\ndef helper():\n    return 1\n",
                                       "b.py": "def run():\n    return 2\n\n\ndef main():\n    return run()\n"})
    with Index(root, Settings(index_dir=tmp_path / "ix", embedder="none")) as ix:
        ix.update()
        out = RepoTools(ix).callees("run")
        assert out["ambiguous"] is True and sorted(out["resolved"]) == ["a.py:1-2 :: run", "b.py:1-2 :: run"]
        assert "2 definitions" in out["note"]
        assert any(c["citation"] == "a.py:5-6 :: helper" and c["of"] == "a.py:1-2 :: run" for c in out["callees"])


def test_read_file_and_list_files(rt):
    out = rt.read_file("app/db.py", 11, 13)
    assert (out["path"], out["start"], out["end"], out["total_lines"], out["truncated"]) == ("app/db.py", 11, 13, 13,
                                                                                           False)
    assert out["text"].splitlines() == ["11| def open_conn(dsn):",
                                        "12|     \"\"\"Open one database connection to dsn.\"\"\"",
                                        "13|     return make_socket(dsn)"]
    assert OPEN_CONN in out["symbols"]
    assert rt.read_file("./app//db.py")["end"] == 13  # normalised, whole file

    long = rt.read_file("app/long.py")
    assert long["total_lines"] == 600 and long["end"] == MAX_READ_LINES and long["truncated"] is True
    assert f"start={MAX_READ_LINES + 1}" in long["note"]
    nxt = rt.read_file("app/long.py", start=MAX_READ_LINES + 1)
    assert (nxt["start"], nxt["end"], nxt["truncated"]) == (401, 600, False)

    for bad in [dict(path="app/db.py", start=0), dict(path="app/db.py", start=5, end=2),
                dict(path="app/db.py", start=99), dict(path="  ")]:
        assert is_error(rt.read_file(**bad), "invalid_argument", "read_file"), bad

    files = rt.list_files("*.py")["files"]
    assert "app/db.py" in files and "secret/keys.py" in files
    assert "private_notes.py" not in files and ".env" not in files
    assert rt.list_files("app/")["files"] == ["app/api.py", "app/db.py", "app/long.py", "app/settings.py"]
    assert rt.list_files("*db*")["files"] == ["app/db.py"]
    assert rt.list_files("nothing*")["files"] == [] and "note" in rt.list_files("nothing*")


def test_list_files_is_capped(tmp_path):
    root = write_tree(tmp_path / "many", {f"m/f{i:03}.py": f"X{i} = {i}\n" for i in range(230)})
    with Index(root, Settings(index_dir=tmp_path / "ix", embedder="none")) as ix:
        ix.update()
        out = RepoTools(ix).list_files()
        assert (out["count"], out["total"], out["truncated"]) == (200, 230, True) and len(out["files"]) == 200


# ----------------------------------------------------------------------------------------- (2) refusals
def test_read_file_refusals(rt, ix, tmp_path):
    outside = tmp_path / "outside.py"
    outside.write_text("TOP_SECRET = 1\n")
    os.symlink(outside, ix.root / "app" / "link.py")  # a symlink inside the repo pointing out of the root
    ix.update()

    cases = {
        "../x": "refused",
        "app/../../outside.py": "refused",
        "/etc/passwd": "refused",
        str(outside): "refused",
        "app/link.py": "not_served",  # never indexed: the walker leaves out-of-root symlinks
        "private_notes.py": "not_served",  # .gitignored
        ".env": "not_served",  # secret-named
        "app/missing.py": "not_served",
    }
    for path, code in cases.items():
        out = rt.read_file(path)
        assert is_error(out, code, "read_file"), (path, out)
        assert "TOP_SECRET" not in json.dumps(out) and "hunter2" not in json.dumps(out)
    assert str(ix.root) not in json.dumps(rt.read_file("../x"))


def test_an_indexed_file_swapped_for_an_outside_symlink_is_refused(rt, ix, tmp_path):
    outside = tmp_path / "elsewhere.py"
    outside.write_text("STOLEN = 'yes'\n")
    target = ix.root / "app" / "api.py"
    target.unlink()
    os.symlink(outside, target)  # after indexing: the path is still in the index, but resolves out of the root
    out = rt.read_file("app/api.py")
    assert is_error(out, "refused", "read_file") and "STOLEN" not in json.dumps(out)


def test_scope_excludes_a_path_everywhere(ix):
    scoped = RepoTools(ix, Scope(exclude=("secret/*",)))
    assert is_error(scoped.read_file("secret/keys.py"), "not_served", "read_file")
    assert "error" not in RepoTools(ix).read_file("secret/keys.py")  # visible without the scope

    def dump(x) -> str:
        return json.dumps(x)

    for mode in ("standard", "agentic"):
        assert "secret/" not in dump(scoped.search_code("rotate master key vault", k=20, mode=mode))
    assert "secret/" not in dump(scoped.search_code("rotate master key", k=20, level="file"))
    assert "secret/" not in dump(scoped.get_context("rotate the master key"))
    assert scoped.symbol("rotate_master_key")["matches"] == []
    assert scoped.grep("rotate_master_key")["matches"] == [] and RepoTools(ix).grep("rotate_master_key")["total"]
    assert scoped.outline("secret/keys.py")["units"] == [] and RepoTools(ix).outline("secret/keys.py")["units"]
    callers = scoped.callers("open_conn")
    assert CONNECT in {c["citation"] for c in callers["callers"]} and "secret/" not in dump(callers)
    assert scoped.callees("rotate_master_key")["resolved"] == []
    files = scoped.list_files("*")["files"]
    assert "app/db.py" in files and not any(f.startswith("secret/") for f in files)
    assert scoped.list_files("secret/*")["files"] == []


def test_several_repositories_are_addressed_by_name(tmp_path):
    settings = Settings(index_dir=tmp_path / "shared", embedder="none")
    for name, body in (("alpha", "def alpha_fn():\n    return 1\n"), ("beta", "def beta_fn():\n    return 2\n")):
        root = write_tree(tmp_path / name, {"main.py": body, f"{name}_only.py": "Y = 1\n"})
        with Index(root, settings) as one:
            one.update()
    with Index(settings=settings, repos=("alpha", "beta")) as ix:
        rt = RepoTools(ix)
        assert is_error(rt.read_file("main.py"), "ambiguous")
        assert "beta_fn" in rt.read_file("beta:main.py")["text"]
        assert "alpha_fn" in rt.read_file("main.py", repo="alpha")["text"]
        assert rt.read_file("alpha_only.py")["repo"] == "alpha"
        assert set(rt.list_files("*main.py")["files"]) == {"alpha:main.py", "beta:main.py"}
        only_beta = RepoTools(ix, Scope(repos=("beta",)))
        assert is_error(only_beta.read_file("alpha:main.py"), "not_served")
        assert only_beta.list_files()["files"] == ["beta_only.py", "main.py"]


# ----------------------------------------------------------------------------------------- (3) redaction
def test_read_file_redacts_secrets(rt):
    out = rt.read_file("app/settings.py")
    assert "error" not in out, out
    assert AWS_SECRET not in json.dumps(out)
    assert "[REDACTED]" in out["text"] and "AWS_SECRET_ACCESS_KEY" in out["text"]
    assert out["total_lines"] == 3 and "REGION = 'eu-west-1'" in out["text"]  # line count kept
    assert "secret/keys.py" not in out["text"]
    assert AWS_SECRET not in json.dumps(rt.search_code("AWS_SECRET_ACCESS_KEY", k=10))


# ----------------------------------------------------------------------------------------- (4) errors
def test_a_raising_tool_returns_the_error_dict(rt, ix, monkeypatch):
    def boom(*a, **k):
        raise RuntimeError('store fell over: password = "hunter2hunter2"\nTraceback (most recent call last): ...')

    monkeypatch.setattr(ix, "retrieve", boom)
    out = rt.search_code("anything")
    assert is_error(out, "RuntimeError", "search_code")
    assert out["detail"].startswith("store fell over") and "hunter2hunter2" not in out["detail"]
    assert "Traceback" not in out["detail"]

    tools = {t.tool_name: t for t in make_tools(ix)}
    res = tools["search_code"](query="anything")  # the Strands tool: status error, the dict as JSON content
    assert res["status"] == "error" and is_error(res["content"][0]["json"], "RuntimeError", "search_code")


def test_bad_arguments_are_error_dicts(rt):
    bad = [
        rt.search_code("x", k=0), rt.search_code("x", k=51), rt.search_code("x", level="module"),
        rt.search_code("x", mode="psychic"), rt.search_code("   "), rt.search_code("x", k="many"),
        rt.get_context("x", task="poetry"), rt.get_context("x", budget=10), rt.get_context("x", budget=10 ** 6),
        rt.get_context(""), rt.symbol(""), rt.callers(""), rt.callees(" "), rt.list_files(glob=None),
    ]
    for out in bad:
        assert is_error(out, "invalid_argument"), out
    assert is_error(rt.call("rm_rf", {}), "unknown_tool")
    assert is_error(rt.call("search_code", {"qeury": "x"}), "invalid_argument", "search_code")
    assert rt.call("symbol", {"name": "open_conn"})["total"] == 1


def test_make_tools_specs(ix):
    tools = make_tools(ix, Scope(exclude=("secret/*",)))
    assert [t.tool_name for t in tools] == list(TOOL_NAMES)
    for t in tools:
        spec = t.tool_spec
        assert "citation" in spec["description"].lower() or t.tool_name == "list_files"
        assert spec["inputSchema"]["json"]["properties"]
    rf = {t.tool_name: t for t in tools}["read_file"]
    assert "400" in rf.tool_spec["description"]
    # bound to its own scope, not to any global: a second set over another scope differs
    assert "secret/keys.py" not in json.dumps({t.tool_name: t for t in tools}["list_files"]())
    assert "secret/keys.py" in json.dumps({t.tool_name: t for t in make_tools(ix)}["list_files"]())


# ----------------------------------------------------------------------------------------- (5) agent loop
def _agent(ix, steps, scope=None):
    from strands import Agent

    from repoctx.copilot.scripted import ScriptedToolModel

    model = ScriptedToolModel(steps)
    return Agent(model=model, tools=make_tools(ix, scope), callback_handler=None), model


def _tool_results(messages) -> list[dict]:
    return [b["toolResult"] for m in messages for b in m.get("content") or [] if "toolResult" in b]


def _result_text(tr: dict) -> str:
    return "\n".join(b["text"] if "text" in b else json.dumps(b.get("json")) for b in tr["content"])


def test_tools_run_in_a_real_strands_agent_loop(ix):
    from repoctx.copilot.scripted import last_tool_results

    def cite(messages):
        seen = json.loads(last_tool_results(messages)[0]["content"][0]["text"])
        line = seen["results"][0]  # brief: one line per hit, its citation first
        return f"Connections are opened in {line.split('(')[0]}."

    agent, model = _agent(ix, [{"tool": "search_code", "input": {"query": "open database connection"}}, cite])
    result = agent("Where are database connections opened?")
    final = "".join(b.get("text", "") for b in result.message["content"])
    assert OPEN_CONN in final
    results = _tool_results(agent.messages)
    assert len(results) == 1 and results[0]["status"] == "success"
    assert "app/db.py" in _result_text(results[0]) and OPEN_CONN in _result_text(results[0])
    assert len(model.calls) == 2 and "search_code" in [s["name"] for s in model.tool_specs[0]]


def test_a_refused_read_is_a_tool_result_and_the_turn_goes_on(ix):
    agent, _ = _agent(ix, [{"tools": [{"tool": "read_file", "input": {"path": "../etc/passwd"}},
                                      {"tool": "read_file", "input": {"path": "secret/keys.py"}},
                                      {"tool": "read_file", "input": {"path": "app/db.py", "start": 11, "end": 13}}]},
                           "I could not read that file; the connection code is app/db.py:11-13 :: open_conn."],
                      scope=Scope(exclude=("secret/*",)))
    result = agent("read some files")
    assert "app/db.py:11-13 :: open_conn" in "".join(b.get("text", "") for b in result.message["content"])
    by_status = sorted((tr["status"], _result_text(tr)) for tr in _tool_results(agent.messages))
    assert [s for s, _ in by_status] == ["error", "error", "success"]
    assert '"refused"' in by_status[0][1] + by_status[1][1] and '"not_served"' in by_status[0][1] + by_status[1][1]
    assert "def open_conn" in by_status[2][1] and "rotate_master_key" not in json.dumps(agent.messages)
