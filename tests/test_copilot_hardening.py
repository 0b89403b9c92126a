"""Issue 38, the copilot's share of what a red team found: a deadline on the model, citations that keep
trailing underscores, whole tool error messages, sessions repaired after an interrupted turn, and
``repoctx sessions`` honouring REPOCTX_INDEX_DIR and absurd ages. Every turn runs the real Strands loop
behind a scripted ``Model``; sessions run on SQLite and on a real PostgreSQL."""
from __future__ import annotations

import asyncio
import json
import os
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import pytest
from strands import tool
from strands.types.session import Session, SessionAgent, SessionMessage, SessionType
from typer.testing import CliRunner

from repoctx import Index
from repoctx.config import ConfigError
from repoctx.copilot.agent import (
    INTERRUPTED_NOTE,
    ask,
    build_agent,
    parse_citations,
    repair_history,
    stream_turn,
    tool_citations,
    turn_timeout_from_env,
)
from repoctx.cli.copilot import copilot_app
from repoctx.copilot.scripted import ScriptedToolModel, last_tool_results
from repoctx.copilot.sessions import list_sessions, migrate, open_session_repository
from repoctx.copilot.tools import MAX_DETAIL, RepoTools, make_tools
from tests.conftest import indexed, session_repositories

REPO_ROOT = Path(__file__).resolve().parents[1]

FILES = {
    "app/session.py": "class Session:\n    \"\"\"A user's session.\"\"\"\n\n"
                      "    def __init__(self, user):\n        self.user = user\n\n"
                      "    def close_(self):\n        self.user = None\n",
    "auth/csrf.py": "def verify_csrf_token(request):\n    \"\"\"Verify the CSRF token of a POST request.\"\"\"\n"
                    "    return request.token == request.cookie\n",
}
INIT = "app/session.py:4-5 :: Session.__init__"
CLOSE = "app/session.py:7-8 :: Session.close_"


@pytest.fixture
def ix(tmp_path) -> Index:
    return indexed(tmp_path, FILES)


@pytest.fixture
def cli_env(ix, tmp_path, monkeypatch):
    """The environment `repoctx ask` runs in: a provider named (its model is replaced per test), the index."""
    for k in list(os.environ):
        if k.startswith(("AWS_", "REPOCTX_", "OPENAI_")):
            monkeypatch.delenv(k, raising=False)
    monkeypatch.setenv("REPOCTX_LLM", "openai:m@http://127.0.0.1:9/v1")
    monkeypatch.setenv("REPOCTX_INDEX_DIR", str(ix.index_dir))
    monkeypatch.setenv("REPOCTX_EMBEDDER", "none")
    monkeypatch.setenv("REPOCTX_CACHE", str(tmp_path / "cache"))
    return monkeypatch


def use_model(monkeypatch, model) -> None:
    import repoctx.providers.llm as providers

    monkeypatch.setattr(providers, "build_model", lambda spec, **kw: model)


class AwaitsForever(ScriptedToolModel):
    """A provider that accepted the request and never answers (an await that never completes)."""

    async def stream(self, *a, **k):
        self.calls.append([])
        await asyncio.Event().wait()
        yield {}  # pragma: no cover


class SleepsAfterAFewTokens(ScriptedToolModel):
    """Starts an answer, then sleeps an hour between two tokens."""

    async def stream(self, *a, **k):
        self.calls.append([])
        yield {"messageStart": {"role": "assistant"}}
        yield {"contentBlockStart": {"start": {}}}
        yield {"contentBlockDelta": {"delta": {"text": "Let me think"}}}
        await asyncio.sleep(3600)
        yield {"contentBlockStop": {}}  # pragma: no cover


class ProviderError(Exception):
    pass


class Unreachable(ScriptedToolModel):
    async def stream(self, *a, **k):
        raise ProviderError("the provider answered 503: overloaded")
        yield  # pragma: no cover


class CtrlC(ScriptedToolModel):
    """The user pressed Ctrl-C while the model was thinking: nothing in the copilot gets to clean up."""

    async def stream(self, *a, **k):
        raise KeyboardInterrupt
        yield  # pragma: no cover


def roles(messages) -> list[str]:
    return [m["role"] for m in messages]


def alternate(messages) -> bool:
    return all(a["role"] != b["role"] for a, b in zip(messages, messages[1:]))


def texts(messages) -> str:
    return " ".join(b.get("text", "") for m in messages for b in m["content"])


# ------------------------------------------------------------------------------ 1. a deadline on the model
@pytest.mark.parametrize("stall", [AwaitsForever, SleepsAfterAFewTokens])
def test_ask_stops_a_stalled_model_at_the_stream_timeout(cli_env, ix, stall):
    cli_env.setenv("REPOCTX_STREAM_TIMEOUT", "0.5")
    use_model(cli_env, stall(["never"]))
    t0 = time.monotonic()
    res = CliRunner().invoke(copilot_app, ["ask", "Where is the CSRF token verified?", "--repo", str(ix.root)])
    took = time.monotonic() - t0
    assert res.exit_code == 1 and isinstance(res.exception, SystemExit)
    assert took < 10
    assert "Traceback" not in res.output
    errors = [ln for ln in res.stderr.splitlines() if ln.startswith("error:")]
    assert len(errors) == 1 and res.stderr.strip().splitlines()[-1] == errors[0]  # ends on one line
    assert "0.5 s" in errors[0] and "REPOCTX_STREAM_TIMEOUT" in errors[0]


def test_ask_json_reports_the_timeout_in_the_json_and_on_stderr(cli_env, ix):
    cli_env.setenv("REPOCTX_STREAM_TIMEOUT", "0.5")
    use_model(cli_env, AwaitsForever(["never"]))
    res = CliRunner().invoke(copilot_app, ["ask", "q", "--repo", str(ix.root), "--json"])
    assert res.exit_code == 1 and "Traceback" not in res.output
    out = json.loads(res.stdout)
    assert out["error"]["error"] == "Timeout" and out["stop_reason"] == "timeout"
    assert "REPOCTX_STREAM_TIMEOUT" in res.stderr and len(res.stderr.strip().splitlines()) == 1


def test_a_bad_stream_timeout_is_a_clear_error(cli_env, ix):
    cli_env.setenv("REPOCTX_STREAM_TIMEOUT", "soon")
    res = CliRunner().invoke(copilot_app, ["ask", "q", "--repo", str(ix.root)])
    assert res.exit_code == 2 and "REPOCTX_STREAM_TIMEOUT" in res.output and "Traceback" not in res.output


def test_the_turn_timeout_reads_the_variable_the_service_reads(monkeypatch):
    from repoctx.service.config import ServiceSettings

    for raw in ("", "5", "0.25", "90"):
        monkeypatch.setenv("REPOCTX_STREAM_TIMEOUT", raw)
        assert turn_timeout_from_env() == ServiceSettings.from_env().stream_timeout
    for raw in ("0", "-1", "abc", "nan"):
        monkeypatch.setenv("REPOCTX_STREAM_TIMEOUT", raw)
        with pytest.raises(ConfigError, match="REPOCTX_STREAM_TIMEOUT"):
            turn_timeout_from_env()
        with pytest.raises(ConfigError, match="REPOCTX_STREAM_TIMEOUT"):
            ServiceSettings.from_env()


def test_a_turn_past_its_deadline_ends_with_a_timeout_and_the_conversation_goes_on():
    model = AwaitsForever(["never"])
    copilot = build_agent(None, model=model, tools=[])
    t0 = time.monotonic()
    result = ask(copilot, "hello?", timeout=0.3)
    assert time.monotonic() - t0 < 5
    assert result.error["error"] == "Timeout" and result.stop_reason == "timeout"
    assert "Timeout" in result.metrics.error

    copilot.agent.model = later = ScriptedToolModel(["here now"])
    again = ask(copilot, "still there?", timeout=5)
    assert again.text == "here now" and again.error is None
    assert alternate(later.calls[0]) and "hello?" in texts(later.calls[0])  # the question is still visible


def test_a_model_blocking_its_thread_is_ended_by_the_watchdog(ix, tmp_path):
    """A provider that blocks the event loop (no await to cancel): the process still ends, on one line."""
    script = tmp_path / "blocked.py"
    script.write_text(textwrap.dedent("""
        import sys, time
        import repoctx.providers.llm as providers
        from repoctx.copilot.scripted import ScriptedToolModel

        class Blocks(ScriptedToolModel):
            async def stream(self, *a, **k):
                time.sleep(3600)
                yield {}

        providers.build_model = lambda spec, **kw: Blocks(["x"])
        from repoctx.cli.copilot import copilot_app
        copilot_app(["ask", "q", "--repo", sys.argv[1]])
    """))
    env = {k: v for k, v in os.environ.items() if not k.startswith(("REPOCTX_", "OPENAI_", "AWS_"))}
    env.update(REPOCTX_LLM="openai:m@http://127.0.0.1:9/v1", REPOCTX_INDEX_DIR=str(ix.index_dir),
               REPOCTX_EMBEDDER="none", REPOCTX_STREAM_TIMEOUT="0.5", REPOCTX_CACHE=str(tmp_path / "cache"),
               PYTHONPATH=str(REPO_ROOT / "src"))
    t0 = time.monotonic()
    proc = subprocess.run([sys.executable, str(script), str(ix.root)], env=env, capture_output=True, text=True,
                          timeout=120)
    took = time.monotonic() - t0
    assert proc.returncode == 1, proc.stderr
    assert "Traceback" not in proc.stderr
    assert proc.stderr.strip().splitlines()[-1].startswith("error: no answer within 0.5 s")
    assert "REPOCTX_STREAM_TIMEOUT" in proc.stderr
    assert took < 60


# ------------------------------------------------------------------------------ 2. citations
def test_citations_keep_trailing_underscores_and_drop_prose_punctuation():
    def cites(text, **kw):
        return [c["citation"] for c in parse_citations(text, **kw)]

    assert cites(f"It is set in {INIT}.") == [INIT]
    assert cites(f"(see {INIT}), then `{CLOSE}`; done") == [INIT, CLOSE]
    assert cites(f"**{CLOSE}**, and {CLOSE}:") == [CLOSE]
    assert cites("a/b.py:1-9 :: pkg.mod.Klass.method_.") == ["a/b.py:1-9 :: pkg.mod.Klass.method_"]
    assert cites("a/b.py:1-9 :: __dunder__!") == ["a/b.py:1-9 :: __dunder__"]
    assert cites("_private/x.py:3-4 :: _helper_") == ["_private/x.py:3-4 :: _helper_"]
    assert cites("see docs/a.md:1-20 :: docs/a.md[1-20]).") == ["docs/a.md:1-20 :: docs/a.md[1-20]"]
    assert cites("in f.py:2-3 :: outer.<locals>.inner.") == ["f.py:2-3 :: outer.<locals>.inner"]
    # ambiguous tails resolve to what a tool returned
    assert cites("Is it a.rb:1-3 :: User.valid?") == ["a.rb:1-3 :: User.valid"]
    assert cites("Is it a.rb:1-3 :: User.valid?", known={"a.rb:1-3 :: User.valid?"}) == ["a.rb:1-3 :: User.valid?"]
    assert cites("__a.py:1-2 :: f__", known={"a.py:1-2 :: f"}) == ["a.py:1-2 :: f"]
    c = parse_citations(f"{INIT}.")[0]
    assert (c["path"], c["start"], c["end"], c["qualname"]) == ("app/session.py", 4, 5, "Session.__init__")


def test_tool_outputs_give_their_citations_exactly():
    out = {"results": [{"citation": INIT}, {"citation": "a.rb:1-3 :: User.valid?"}],
           "note": "cite as app/session.py:1-8 :: <symbol>"}
    assert tool_citations(json.dumps(out)) == [INIT, "a.rb:1-3 :: User.valid?"]
    assert tool_citations(f"plain text naming {CLOSE}.") == [CLOSE]


def test_ask_json_keeps_the_trailing_underscore_end_to_end(cli_env, ix):
    def answer(messages):
        found = [c for m in messages for b in m["content"] if "toolResult" in b
                 for c in tool_citations(b["toolResult"]["content"][0]["text"])]
        assert INIT in found and CLOSE in found, found
        return f"The user is stored by {INIT}. It is cleared by {CLOSE}."

    use_model(cli_env, ScriptedToolModel([{"tool": "symbol", "input": {"name": "__init__"}},
                                          {"tool": "symbol", "input": {"name": "close_"}}, answer]))
    res = CliRunner().invoke(copilot_app, ["ask", "Where is the user stored?", "--repo", str(ix.root), "--json"])
    assert res.exit_code == 0, res.output
    out = json.loads(res.stdout)
    assert [(c["citation"], c["qualname"], c["verified"]) for c in out["citations"]] == [
        (INIT, "Session.__init__", True), (CLOSE, "Session.close_", True)]
    assert INIT in out["sources"] and CLOSE in out["sources"]


@pytest.mark.asyncio
async def test_stream_citation_events_keep_the_trailing_underscore(ix):
    """The events the HTTP /chat forwards as SSE citation frames."""
    model = ScriptedToolModel([{"tool": "symbol", "input": {"name": "__init__"}}, f"See {INIT}."])
    copilot = build_agent(ix, model=model, tools=make_tools(ix))
    events = [ev async for ev in stream_turn(copilot, "where?")]
    assert [(e["citation"], e["verified"]) for e in events if e["type"] == "citation"] == [(INIT, True)]


# ------------------------------------------------------------------------------ 3. whole tool errors
def test_a_tool_argument_error_names_the_field_for_the_model(ix):
    model = ScriptedToolModel([{"tool": "search_code", "input": {"query": "csrf", "k": "lots"}}, "ok"])
    result = ask(build_agent(ix, model=model, tools=make_tools(ix)), "find csrf")
    res = last_tool_results(model.calls[1])[0]
    assert res["status"] == "error"
    err = res["content"][0]["json"]
    assert set(err) == {"error", "detail", "tool"} and err["tool"] == "search_code"
    lines = err["detail"].splitlines()
    assert "k" in [ln.strip() for ln in lines]  # the field's name, which the first line alone lost
    assert "valid integer" in err["detail"] and "lots" in err["detail"]
    assert "errors.pydantic.dev" not in err["detail"]
    assert result.text == "ok" and result.metrics.tool_errors == 1


def test_a_repo_tool_error_keeps_the_whole_message_bounded(ix, monkeypatch):
    rt = RepoTools(ix)

    def boom(*a, **k):
        raise ValueError("the query could not be run:\n  field 'k': 500 is above the store's limit of 100\n"
                         "Traceback (most recent call last):\n  File ...")

    monkeypatch.setattr(ix, "retrieve", boom)
    out = rt.search_code("anything")
    assert out["error"] == "ValueError" and out["tool"] == "search_code"
    assert "field 'k': 500 is above" in out["detail"] and "Traceback" not in out["detail"]

    monkeypatch.setattr(ix, "retrieve", lambda *a, **k: (_ for _ in ()).throw(ValueError("x\n" + "y" * 50_000)))
    out = rt.search_code("anything")
    assert len(out["detail"]) <= MAX_DETAIL and out["detail"].startswith("x\nyyy") and out["detail"].endswith("…")


# ------------------------------------------------------------------------------ 4. interrupted turns
@tool
def search_code(query: str) -> dict:
    """Search the repository."""
    return {"hits": [{"citation": "pkg/db.py:3-9 :: pkg.db.connect"}]}


@pytest.fixture(params=["sqlite", "postgres"])
def target(request, tmp_path):
    t = str(tmp_path / "ix" / "sessions.sqlite") if request.param == "sqlite" else request.getfixturevalue("pg_url")
    migrate(t)
    return t


@pytest.fixture
def open_repo(target):
    with session_repositories(target) as open_for:
        yield open_for


def copilot_on(repo, model, session="conv-1"):
    return build_agent(None, session, "local", model=model, tools=[search_code], session_repository=repo)


def stored(repo, session="conv-1") -> list[dict]:
    return [m.to_message() for m in repo.list_messages(session, "copilot")]


def test_a_session_interrupted_by_ctrl_c_is_repaired_when_loaded(open_repo):
    first = copilot_on(open_repo(), CtrlC(["x"]))
    with pytest.raises(KeyboardInterrupt):
        ask(first, "Where do we connect to the database?")
    first.close()
    assert roles(stored(open_repo())) == ["user"]  # what a killed turn leaves behind

    model = ScriptedToolModel(["It is pkg/db.py:3-9 :: pkg.db.connect."])
    second = copilot_on(open_repo(), model)
    assert roles(second.messages) == ["user", "assistant"]
    assert second.messages[-1]["content"] == [{"text": INTERRUPTED_NOTE}]
    assert roles(stored(open_repo())) == ["user", "assistant"]  # the repair is stored too

    result = ask(second, "Where do we connect?")
    assert result.error is None
    sent = model.calls[0]
    assert roles(sent) == ["user", "assistant", "user"]
    assert "Where do we connect to the database?" in texts(sent)  # the user's words stay in the history

    third = copilot_on(open_repo(), ScriptedToolModel(["x"]))  # nothing more to repair
    assert roles(third.messages) == ["user", "assistant", "user", "assistant"]


def test_a_session_left_on_a_tool_call_is_repaired_when_loaded(open_repo):
    repo = open_repo()
    repo.create_session(Session(session_id="conv-1", session_type=SessionType.AGENT))
    seed = build_agent(None, model=ScriptedToolModel(["x"]), tools=[search_code])
    repo.create_agent("conv-1", SessionAgent.from_agent(seed.agent))
    history = [{"role": "user", "content": [{"text": "Where do we connect?"}]},
               {"role": "assistant", "content": [{"toolUse": {"toolUseId": "t1", "name": "search_code",
                                                              "input": {"query": "connect"}}}]}]
    for i, m in enumerate(history):  # the process died while the tool ran
        repo.create_message("conv-1", "copilot", SessionMessage.from_message(m, i))

    model = ScriptedToolModel(["It is pkg/db.py:3-9 :: pkg.db.connect."])
    copilot = copilot_on(open_repo(), model)
    assert roles(copilot.messages) == ["user", "assistant", "user", "assistant"]
    result_block = copilot.messages[2]["content"][0]["toolResult"]
    assert result_block["toolUseId"] == "t1" and result_block["status"] == "error"
    assert copilot.messages[3]["content"] == [{"text": INTERRUPTED_NOTE}]
    assert roles(stored(open_repo())) == ["user", "assistant", "user", "assistant"]

    ask(copilot, "And now?")
    assert alternate(model.calls[0]) and len(model.calls[0]) == 5


def test_a_failed_turn_is_repaired_at_once_and_stored(open_repo):
    copilot = copilot_on(open_repo(), Unreachable(["x"]))
    result = ask(copilot, "Where do we connect?")
    assert result.error["error"] == "ProviderError"
    assert roles(stored(open_repo())) == ["user", "assistant"]

    copilot.agent.model = model = ScriptedToolModel(["fine"])
    ask(copilot, "Try again?")
    assert roles(model.calls[0]) == ["user", "assistant", "user"]
    rows = list_sessions(open_repo())
    assert rows[0]["messages"] == 4


def test_a_timed_out_turn_is_repaired_and_stored(open_repo):
    copilot = copilot_on(open_repo(), AwaitsForever(["x"]))
    result = ask(copilot, "Where do we connect?", timeout=0.3)
    assert result.stop_reason == "timeout"
    assert roles(stored(open_repo())) == ["user", "assistant"]
    resumed = copilot_on(open_repo(), model := ScriptedToolModel(["fine"]))
    ask(resumed, "Again?")
    assert alternate(model.calls[0])


def test_legacy_histories_with_two_questions_in_a_row_alternate_in_memory():
    copilot = build_agent(None, model=ScriptedToolModel(["x"]), tools=[])
    copilot.agent.messages.extend([{"role": "user", "content": [{"text": "one"}]},
                                   {"role": "user", "content": [{"text": "two"}]},
                                   {"role": "assistant", "content": [{"text": "answer"}]}])
    assert repair_history(copilot.agent) == 1
    assert roles(copilot.messages) == ["user", "assistant", "user", "assistant"]
    assert repair_history(copilot.agent) == 0


# ------------------------------------------------------------------------------ 5. repoctx sessions
def _session_with_a_message(target: str, sid: str) -> None:
    repo = open_session_repository(target, "local")
    try:
        ask(copilot_on(repo, ScriptedToolModel(["hi"]), sid), "hello")
    finally:
        repo.close()


def test_sessions_commands_use_the_shared_index_dir_without_repo(tmp_path, monkeypatch):
    for k in ("REPOCTX_SESSIONS_URL", "REPOCTX_DATABASE_URL"):
        monkeypatch.delenv(k, raising=False)
    shared = tmp_path / "shared-ix"
    monkeypatch.setenv("REPOCTX_INDEX_DIR", str(shared))
    monkeypatch.setenv("REPOCTX_CACHE", str(tmp_path / "cache"))
    monkeypatch.chdir(tmp_path)
    runner = CliRunner()
    res = runner.invoke(copilot_app, ["sessions", "migrate"])
    assert res.exit_code == 0 and (shared / "sessions.sqlite").exists()
    _session_with_a_message(str(shared / "sessions.sqlite"), "s-1")

    res = runner.invoke(copilot_app, ["sessions", "list", "--json"])
    assert res.exit_code == 0, res.output
    assert [r["id"] for r in json.loads(res.stdout)] == ["s-1"]
    res = runner.invoke(copilot_app, ["sessions", "prune", "--older-than", "0s"])
    assert res.exit_code == 0 and "pruned 1 session" in res.output
    assert not (tmp_path / "cache" / "sessions.sqlite").exists()


@pytest.mark.parametrize("age", ["10000000d", "99999999999999999999w"])
def test_prune_with_an_absurd_age_deletes_nothing_and_prints_no_traceback(target, age, monkeypatch):
    for k in ("REPOCTX_SESSIONS_URL", "REPOCTX_DATABASE_URL", "REPOCTX_INDEX_DIR"):
        monkeypatch.delenv(k, raising=False)
    _session_with_a_message(target, "keep-me")
    runner = CliRunner()
    res = runner.invoke(copilot_app, ["sessions", "prune", "--older-than", age, "--url", target])
    assert res.exit_code == 0, res.output
    assert "Traceback" not in res.output and "pruned 0 sessions" in res.output
    assert [r["id"] for r in list_sessions(target)] == ["keep-me"]

    res = runner.invoke(copilot_app, ["sessions", "prune", "--older-than", "9" * 400 + "d", "--url", target])
    assert res.exit_code == 2 and "too long" in res.output and "Traceback" not in res.output
    time.sleep(0.01)
    res = runner.invoke(copilot_app, ["sessions", "prune", "--older-than", "0s", "--url", target])
    assert res.exit_code == 0 and "pruned 1 session" in res.output


def test_prune_through_the_database_url_like_the_other_commands(pg_url, monkeypatch):
    migrate(pg_url)
    _session_with_a_message(pg_url, "pg-1")
    for k in ("REPOCTX_SESSIONS_URL", "REPOCTX_INDEX_DIR"):
        monkeypatch.delenv(k, raising=False)
    monkeypatch.setenv("REPOCTX_DATABASE_URL", pg_url)
    runner = CliRunner()
    res = runner.invoke(copilot_app, ["sessions", "list", "--json"])
    assert res.exit_code == 0 and [r["id"] for r in json.loads(res.stdout)] == ["pg-1"]
    res = runner.invoke(copilot_app, ["sessions", "prune", "--older-than", "10000000d"])
    assert res.exit_code == 0 and "pruned 0 sessions" in res.output and "Traceback" not in res.output
