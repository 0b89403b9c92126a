"""The copilot agent through the real Strands loop, driven by a scripted tool-calling model."""
from __future__ import annotations

import json
import os
import time

import pytest
import typer
from strands import tool
from typer.testing import CliRunner

from repoctx import Index
from repoctx.copilot.agent import (
    SYSTEM_PROMPT,
    Limits,
    MetricsAggregate,
    TurnMetrics,
    ask,
    build_agent,
    parse_citations,
    stream_turn,
)
from repoctx.cli.copilot import copilot_app, parse_duration, register
from repoctx.providers.llm import (
    ProviderNotConfigured,
    ProviderUnavailable,
    build_model,
    parse_spec,
    smollm2_path,
)
from repoctx.copilot.scripted import ScriptedToolModel, last_tool_results
from tests.conftest import indexed

FILES = {
    "auth/csrf.py": "def verify_csrf_token(request):\n    \"\"\"Verify the CSRF token of a POST request.\"\"\"\n"
                    "    return request.token == request.cookie\n",
    "auth/session.py": "def verify_session_cookie(cookie):\n    \"\"\"Verify the signature of a session cookie.\"\"\"\n"
                       "    return check_signature(cookie)\n\n\ndef check_signature(value):\n    return True\n",
    "cache/lru.py": "class LRUCache:\n    \"\"\"Least recently used cache.\"\"\"\n\n    def evict_oldest(self):\n"
                    "        return self.entries.pop(0)\n",
}


@pytest.fixture
def ix(tmp_path) -> Index:
    return indexed(tmp_path, FILES)


def repo_tools(ix: Index) -> list:
    """The copilot's own tools, bound to the index."""
    from repoctx.copilot.tools import make_tools

    return make_tools(ix, None)


def cite_first_hit(messages) -> str:
    """The scripted model 'reads' the tool result and cites the first source in it."""
    text = json.dumps(last_tool_results(messages))
    found = parse_citations(text)
    return f"The CSRF token is checked in {found[0]['citation']}." if found else "I found nothing relevant."


@tool
def explode(path: str) -> str:
    """Always fails."""
    raise RuntimeError(f"disk on fire while reading {path}")


# ----------------------------------------------------------------------------------------- (a)
def test_turn_calls_a_tool_and_cites_the_path(ix):
    model = ScriptedToolModel([{"tool": "search_code", "input": {"query": "verify csrf token"}}, cite_first_hit])
    seen: list[TurnMetrics] = []
    copilot = build_agent(ix, model=model, tools=repo_tools(ix), on_metrics=seen.append)
    result = ask(copilot, "Where is the CSRF token verified?")

    assert result.error is None and result.stop_reason == "end_turn"
    assert "auth/csrf.py:1-3 :: " in result.text
    assert result.citations[0]["path"] == "auth/csrf.py" and result.citations[0]["verified"] is True
    assert any(s.startswith("auth/csrf.py:1-3") for s in result.sources)
    m = result.metrics
    assert (m.model_calls, m.tool_calls, m.tool_errors, m.limit_cut) == (2, 1, 0, None)
    assert m.tokens_in > 0 and m.tokens_out > 0 and m.latency_s > 0
    assert seen == [m] and copilot.last_metrics is m
    # the model was told how to cite and what to do when nothing is found, and was offered the tools
    prompt = model.system_prompts[0]
    assert "path:start-end :: qualname" in prompt and "nothing relevant" in prompt
    assert "search_code" in [t["name"] for t in model.tool_specs[0]]


@pytest.mark.asyncio
async def test_stream_turn_events(ix):
    model = ScriptedToolModel([{"tool": "search_code", "input": {"query": "verify csrf token"}}, cite_first_hit])
    copilot = build_agent(ix, model=model, tools=repo_tools(ix))
    events = [ev async for ev in stream_turn(copilot, "Where is the CSRF token verified?")]
    kinds = [e["type"] for e in events]
    assert kinds[0] == "tool" and events[0]["name"] == "search_code"
    assert events[0]["input"] == {"query": "verify csrf token"}
    assert kinds[1] == "tool_result" and events[1]["status"] == "success" and events[1]["name"] == "search_code"
    tokens = [e["text"] for e in events if e["type"] == "token"]
    assert len(tokens) > 1 and "".join(tokens) == events[-1]["text"]
    cites = [e for e in events if e["type"] == "citation"]
    assert cites and cites[0]["path"] == "auth/csrf.py" and cites[0]["verified"]
    assert kinds[-1] == "done" and kinds.index("citation") > max(i for i, k in enumerate(kinds) if k == "token")
    assert events[-1]["metrics"]["tool_calls"] == 1 and events[-1]["stop_reason"] == "end_turn"
    json.dumps(events)  # every event is plain JSON (the HTTP service forwards them as SSE)


def test_unverified_citation_and_nothing_found(ix):
    model = ScriptedToolModel(["See made/up.py:1-2 :: nothing.here for that."])
    result = ask(build_agent(ix, model=model, tools=repo_tools(ix)), "Where is the ORM?")
    assert result.citations == [{"citation": "made/up.py:1-2 :: nothing.here", "path": "made/up.py", "start": 1,
                                 "end": 2, "qualname": "nothing.here", "verified": False}]
    assert result.metrics.tool_calls == 0 and result.sources == []


# ----------------------------------------------------------------------------------------- (b)
def test_raising_tool_becomes_a_structured_error_and_the_turn_goes_on():
    model = ScriptedToolModel([{"tool": "explode", "input": {"path": "a.py"}},
                               lambda msgs: "The tool failed: " + json.dumps(last_tool_results(msgs)[0]["content"])])
    copilot = build_agent(None, model=model, tools=[explode])
    result = ask(copilot, "Read a.py")

    tool_result = last_tool_results(model.calls[1])[0]
    assert tool_result["status"] == "error"
    assert tool_result["content"] == [{"json": {"error": "RuntimeError", "detail": "disk on fire while reading a.py",
                                                "tool": "explode"}}]
    assert result.error is None and result.text.startswith("The tool failed:")
    assert (result.metrics.tool_calls, result.metrics.tool_errors, result.metrics.model_calls) == (1, 1, 2)


def test_unknown_tool_is_an_error_for_the_model_too():
    model = ScriptedToolModel([{"tool": "no_such_tool", "input": {}}, "ok"])
    result = ask(build_agent(None, model=model, tools=[explode]), "x")
    content = last_tool_results(model.calls[1])[0]["content"][0]["json"]
    assert content["error"] == "unknown_tool" and content["tool"] == "no_such_tool"
    assert result.text == "ok"


# ----------------------------------------------------------------------------------------- (c)
def test_runaway_tool_calls_are_cut_by_the_tool_call_limit(ix):
    model = ScriptedToolModel([{"tool": "search_code", "input": {"query": "cache"}}])  # forever
    copilot = build_agent(ix, model=model, tools=repo_tools(ix))
    result = ask(copilot, "loop")
    assert result.error is None
    assert result.text == "stopped: tool-call limit 6 reached"
    assert result.stop_reason == "limit_tool_calls"
    assert (result.metrics.tool_calls, result.metrics.limit_cut) == (6, "tool_calls")
    assert len(model.calls) == 7  # the 7th request was refused, and the model was not called again

    # the next turn starts with fresh counters and a valid conversation
    model.steps = ["All done: auth/csrf.py:1-3 :: x"]
    again = ask(copilot, "and now?")
    assert again.text.startswith("All done") and again.metrics.limit_cut is None
    assert (again.metrics.model_calls, again.metrics.tool_calls) == (1, 0)


@pytest.mark.asyncio
async def test_runaway_model_calls_are_cut_by_the_model_call_limit(ix):
    model = ScriptedToolModel([{"tool": "search_code", "input": {"query": "cache"}}])
    copilot = build_agent(ix, model=model, tools=repo_tools(ix), limits=Limits(tool_calls=100, model_calls=3))
    events = [ev async for ev in stream_turn(copilot, "loop")]
    assert len(model.calls) == 3
    done = events[-1]
    assert done["type"] == "done" and done["text"] == "stopped: model-call limit 3 reached"
    assert done["metrics"]["limit_cut"] == "model_calls" and done["metrics"]["model_calls"] == 3
    assert done["stop_reason"] == "limit_model_calls"
    assert [e for e in events if e["type"] == "token"][-1]["text"] == "stopped: model-call limit 3 reached"
    assert not any(e["type"] == "error" for e in events)


# ----------------------------------------------------------------------------------------- metrics
def test_metrics_go_to_the_log_file_and_sinks(ix, tmp_path, monkeypatch):
    log = tmp_path / "logs" / "copilot.jsonl"
    monkeypatch.setenv("REPOCTX_METRICS_LOG", str(log))
    agg = MetricsAggregate()
    model = ScriptedToolModel([{"tool": "search_code", "input": {"query": "csrf"}}, cite_first_hit, "second"])
    copilot = build_agent(ix, model=model, tools=repo_tools(ix), metrics_sinks=[agg])
    ask(copilot, "one")
    ask(copilot, "two")
    lines = [json.loads(line) for line in log.read_text().splitlines()]
    assert [(r["model_calls"], r["tool_calls"]) for r in lines] == [(2, 1), (1, 0)]
    assert set(lines[0]) >= {"latency_s", "model_calls", "tool_calls", "tokens_in", "tokens_out", "limit_cut",
                             "tool_errors"}
    snap = agg.snapshot()
    assert snap["turns"] == 2 and snap["model_calls"] == 3 and snap["tokens_out"] == lines[0]["tokens_out"] + \
        lines[1]["tokens_out"]


def test_no_usage_reported_means_no_token_counts():
    model = ScriptedToolModel(["hello"], report_usage=False)
    result = ask(build_agent(None, model=model, tools=[explode]), "hi")
    assert result.metrics.tokens_in is None and result.metrics.tokens_out is None


def test_provider_failure_is_data_not_a_traceback():
    class Down(ScriptedToolModel):
        async def stream(self, *a, **k):
            raise ConnectionError("connection refused by 127.0.0.1:9")
            yield  # pragma: no cover

    result = ask(build_agent(None, model=Down(["x"]), tools=[explode]), "hi")
    assert result.error == {"error": "ConnectionError", "detail": "connection refused by 127.0.0.1:9"}
    assert result.metrics.error and result.stop_reason == "error"


# ----------------------------------------------------------------------------------------- providers
def test_provider_specs():
    assert parse_spec("openai:qwen2.5-coder@http://localhost:8000/v1") == parse_spec(
        "openai:qwen2.5-coder@http://localhost:8000/v1")
    s = parse_spec("openai:org/model@name@http://gw:4000/v1")
    assert (s.provider, s.model, s.base_url) == ("openai", "org/model@name", "http://gw:4000/v1")
    s = parse_spec("ollama:llama3.1:8b@gpu-box:11434")
    assert (s.model, s.base_url) == ("llama3.1:8b", "http://gpu-box:11434")
    assert parse_spec("ollama:llama3.1").base_url == "http://localhost:11434"
    assert parse_spec("bedrock").model is None and parse_spec("bedrock:anthropic.claude").model == "anthropic.claude"
    assert parse_spec("smollm2") == parse_spec(f"gguf:{smollm2_path()}")
    for bad in ("", None, "   "):
        with pytest.raises(ProviderNotConfigured, match="REPOCTX_LLM"):
            parse_spec(bad)
    with pytest.raises(ProviderNotConfigured, match="REPOCTX_LLM"):
        parse_spec("gpt4all:foo")
    with pytest.raises(ProviderNotConfigured, match="REPOCTX_LLM_API_KEY"):
        build_model("openai:gpt-4o", env={})
    m = build_model("openai:m@http://127.0.0.1:9/v1", env={"REPOCTX_LLM_MAX_TOKENS": "64"})
    assert m.get_config()["params"]["max_tokens"] == 64 and m.get_config()["model_id"] == "m"


def test_missing_optional_package_names_the_extra(monkeypatch, tmp_path):
    import sys

    monkeypatch.setitem(sys.modules, "xllamacpp", None)
    gguf = tmp_path / "m.gguf"
    gguf.write_bytes(b"GGUF")
    with pytest.raises(ProviderUnavailable, match=r"pip install 'repoctx\[gguf\]'"):
        build_model(f"gguf:{gguf}", env={})
    monkeypatch.setitem(sys.modules, "ollama", None)
    with pytest.raises(ProviderUnavailable, match=r"pip install 'repoctx\[ollama\]'"):
        build_model("ollama:llama3.1", env={})


def test_build_agent_without_a_model_never_falls_back_to_bedrock(monkeypatch):
    monkeypatch.delenv("REPOCTX_LLM", raising=False)
    with pytest.raises(ProviderNotConfigured, match="REPOCTX_LLM"):
        build_agent(None, tools=[explode])


# ----------------------------------------------------------------------------------------- (e) CLI
def _clean_env(monkeypatch):
    for k in list(os.environ):
        if k.startswith(("AWS_", "REPOCTX_LLM", "OPENAI_")):
            monkeypatch.delenv(k, raising=False)


def test_ask_without_a_provider_exits_2_with_one_sentence(ix, monkeypatch):
    _clean_env(monkeypatch)
    runner = CliRunner()
    res = runner.invoke(copilot_app, ["ask", "where is csrf verified?", "--repo", str(ix.root)])
    assert res.exit_code == 2
    out = res.output
    assert "REPOCTX_LLM" in out and "Traceback" not in out
    assert out.strip().startswith("error:") and len(out.strip().splitlines()) <= 3  # one sentence, wrapped at most

    app = typer.Typer()

    @app.command()
    def index():  # a stand-in for the main CLI's own commands
        pass

    register(app)
    res = runner.invoke(app, ["ask", "q", "--repo", str(ix.root)])
    assert res.exit_code == 2 and "REPOCTX_LLM" in res.output and "Traceback" not in res.output
    assert {"ask", "chat", "sessions"} <= {c.name for c in typer.main.get_command(app).commands.values()}


def test_ask_on_an_unindexed_repo_says_how_to_index(tmp_path, monkeypatch):
    _clean_env(monkeypatch)
    monkeypatch.setenv("REPOCTX_LLM", "openai:m@http://127.0.0.1:9/v1")
    (tmp_path / "bare").mkdir()
    monkeypatch.setenv("REPOCTX_INDEX_DIR", str(tmp_path / "bare-ix"))
    res = CliRunner().invoke(copilot_app, ["ask", "q", "--repo", str(tmp_path / "bare")])
    assert res.exit_code == 1 and "repoctx index" in res.output and "Traceback" not in res.output


def test_ask_with_a_bad_session_id_or_unmigrated_store(ix, tmp_path, monkeypatch):
    _clean_env(monkeypatch)
    monkeypatch.delenv("REPOCTX_SESSIONS_URL", raising=False)
    monkeypatch.delenv("REPOCTX_DATABASE_URL", raising=False)
    monkeypatch.setenv("REPOCTX_LLM", "openai:m@http://127.0.0.1:9/v1")
    monkeypatch.setenv("REPOCTX_INDEX_DIR", str(ix.index_dir))
    res = CliRunner().invoke(copilot_app, ["ask", "q", "--repo", str(ix.root), "--session", "../x"])
    assert res.exit_code == 2 and "invalid session id" in res.output
    res = CliRunner().invoke(copilot_app, ["ask", "q", "--repo", str(ix.root), "--session", "s1"])
    if "repoctx.copilot.tools" in res.output:  # tools.py not written yet: the CLI says so, no traceback
        assert res.exit_code == 2 and "Traceback" not in res.output
    else:
        assert res.exit_code == 2 and "repoctx db migrate" in res.output


def test_sessions_cli_list_and_prune(tmp_path):
    from repoctx.copilot.sessions import migrate, open_session_repository
    from strands.types.session import Session, SessionType

    db = tmp_path / "s.sqlite"
    runner = CliRunner()
    res = runner.invoke(copilot_app, ["sessions", "list", "--url", str(db)])
    assert res.exit_code == 2 and "repoctx db migrate" in res.output
    migrate(db)
    repo = open_session_repository(db, "local")
    repo.create_session(Session(session_id="s-1", session_type=SessionType.AGENT))
    res = runner.invoke(copilot_app, ["sessions", "list", "--url", str(db), "--json"])
    assert res.exit_code == 0 and json.loads(res.output)[0]["id"] == "s-1"
    res = runner.invoke(copilot_app, ["sessions", "prune", "--older-than", "7d", "--url", str(db)])
    assert res.exit_code == 0 and "pruned 0 sessions" in res.output
    time.sleep(0.01)
    res = runner.invoke(copilot_app, ["sessions", "prune", "--older-than", "0s", "--url", str(db)])
    assert res.exit_code == 0 and "pruned 1 session" in res.output
    res = runner.invoke(copilot_app, ["sessions", "prune", "--older-than", "soon", "--url", str(db)])
    assert res.exit_code == 2
    repo.close()


def test_cli_renders_tokens_tool_lines_and_citations(ix, capsys):
    import asyncio
    import io

    from rich.console import Console

    from repoctx.cli.copilot import _Renderer, _turn

    model = ScriptedToolModel([{"tool": "search_code", "input": {"query": "verify csrf token"}}, cite_first_hit])
    copilot = build_agent(ix, model=model, tools=repo_tools(ix))
    out, err = io.StringIO(), io.StringIO()
    renderer = _Renderer(Console(file=out, width=200), Console(file=err, width=200))
    events = asyncio.run(_turn(copilot, "Where is the CSRF token verified?", renderer))
    tokens = capsys.readouterr().out  # tokens go straight to stdout as they arrive
    assert tokens.startswith("The CSRF token is checked in auth/csrf.py:1-3")
    lines = out.getvalue().splitlines()
    assert lines[0].startswith("· search_code {\"query\": \"verify csrf token\"}")  # one line per tool call
    assert lines[1] == "sources" and lines[2].startswith("  auth/csrf.py:1-3 :: ") and lines[2].endswith("✓")
    assert "2 model calls · 1 tool calls" in err.getvalue()
    assert events[-1]["type"] == "done"


def test_parse_duration():
    assert parse_duration("7d") == 7 * 86400 and parse_duration("12h") == 43200
    assert parse_duration("30m") == 1800 and parse_duration("45") == 45 and parse_duration("1.5h") == 5400
    with pytest.raises(typer.BadParameter):
        parse_duration("7 days")


def test_citation_parsing_edges():
    text = ("See `src/app/db.py:10-42 :: app.db.connect`, and **lib/x.rs:1-9 :: x::Y::new**. "
            "Also docs/README.md:1-20 :: docs/README.md[1-20]. Dup src/app/db.py:10-42 :: app.db.connect.")
    cites = [c["citation"] for c in parse_citations(text)]
    assert cites == ["src/app/db.py:10-42 :: app.db.connect", "lib/x.rs:1-9 :: x::Y::new",
                     "docs/README.md:1-20 :: docs/README.md[1-20]"]
    assert "{repo}" in SYSTEM_PROMPT


# ----------------------------------------------------------------------------------------- (f)
@pytest.mark.asyncio
async def test_smollm2_in_process_end_to_end(ix):
    """The real SmolLM2-135M GGUF through llama.cpp in this process: tokens stream and are counted.
    Mechanics only -- nothing is asserted about what the model says."""
    model = build_model("smollm2", env={}, max_tokens=32, threads=2, n_ctx=4096, temperature=0.0)
    try:
        copilot = build_agent(ix, model=model, tools=repo_tools(ix), limits=Limits(tool_calls=2, model_calls=3))
        t0 = time.perf_counter()
        events = [ev async for ev in stream_turn(copilot, "Where is the CSRF token verified?")]
        elapsed = time.perf_counter() - t0
    finally:
        model.close()
    done = events[-1]
    assert done["type"] == "done" and "error" not in done, done
    m = done["metrics"]
    assert m["model_calls"] >= 1 and m["tokens_in"] > 0 and m["tokens_out"] > 0
    assert any(e["type"] in ("token", "tool") for e in events)
    assert elapsed < 60
    print(f"\nsmollm2: {elapsed:.2f}s, {m['model_calls']} model calls, {m['tool_calls']} tool calls, "
          f"{m['tokens_in']} tokens in, {m['tokens_out']} out, "
          f"{sum(1 for e in events if e['type'] == 'token')} token events")
