"""POST /chat: the copilot over SSE on a real PostgreSQL, driven by scripted Strands models -- frames,
timeouts, failing tools and models, client disconnects, concurrent sessions, and a session resumed
through a second app instance sharing the database."""
from __future__ import annotations

import asyncio
import json
import re
import time

import httpx
import pytest
from strands import tool

from repoctx.copilot.agent import parse_citations
from repoctx.copilot.scripted import ScriptedToolModel, last_tool_results
from repoctx.service.app import create_app

from test_service_support import Env, LiveServer, SlowModel, parse_sse

pytestmark = pytest.mark.asyncio


def cite_first(messages) -> str:
    found = parse_citations(json.dumps(last_tool_results(messages)))
    return f"Tokens are verified in {found[0]['citation']}." if found else "I found nothing relevant."


def last_user_text(messages) -> str:
    for msg in reversed(messages):
        if msg.get("role") == "user":
            texts = [b["text"] for b in msg.get("content") or [] if "text" in b]
            if texts:
                return texts[-1]
    return ""


@pytest.fixture
def env(pg_url, tmp_path):
    made = []

    def make(**kw) -> Env:
        e = Env(pg_url, tmp_path, **kw)
        made.append(e)
        return e

    yield make
    for e in made:
        e.close()


async def chat(client, key: str, session: str, message: str, **extra) -> tuple[int, list]:
    r = await client.post("/chat", json={"session_id": session, "message": message, **extra}, headers=Env.auth(key))
    return r.status_code, (parse_sse(r.text) if r.status_code == 200 else r.json())


async def test_a_turn_streams_tool_trace_tokens_citations_and_done(env):
    e = env(model_factory=lambda: ScriptedToolModel([{"tool": "search_code", "input": {"query": "verify token"}},
                                                     cite_first]))
    async with e.client() as c:
        r = await c.post("/chat", json={"session_id": "s1", "message": "Where are tokens verified?"},
                         headers=e.auth(e.dev_key))
        assert r.status_code == 200 and r.headers["content-type"].startswith("text/event-stream")
        assert re.search(r"^id: 1$", r.text.replace("\r\n", "\n"), re.M)
        events = parse_sse(r.text)
        kinds = [k for k, _ in events]
        assert kinds[0] == "tool" and events[0][1]["name"] == "search_code"
        chars = events[1][1].pop("chars", None)
        assert kinds[1] == "trace" and events[1][1] == {"step": "tool_result", "name": "search_code",
                                                         "status": "success", "id": events[0][1]["id"]}
        assert isinstance(chars, int) and chars > 100  # the size of the search's answer, for a trace panel
        assert "token" in kinds and kinds[-2] == "citation" and kinds[-1] == "done"
        text = "".join(d["text"] for k, d in events if k == "token")
        done = events[-1][1]
        assert text == done["text"] and "src/auth/tokens.py:" in text
        cite = events[-2][1]
        assert cite["path"] == "src/auth/tokens.py" and cite["verified"] is True
        m = done["metrics"]
        assert (m["model_calls"], m["tool_calls"], m["tool_errors"], m["principal"], m["session_id"]) == \
            (2, 1, 0, "dev1", "s1")
        metrics = (await c.get("/metrics", headers=e.auth(e.admin_key))).text
        assert 'repoctx_chat_turns_total{outcome="ok"} 1.0' in metrics
        assert "repoctx_chat_tool_calls_per_turn_sum 1.0" in metrics
        assert "repoctx_chat_model_calls_per_turn_sum 2.0" in metrics
        assert 'repoctx_chat_tokens_total{direction="in"}' in metrics
        assert 'repoctx_chat_tool_calls_total{tool="search_code"} 1.0' in metrics
        assert 'repoctx_http_request_seconds_count{endpoint="/chat",method="POST",status="200"} 1.0' in metrics


async def test_a_slow_model_ends_in_a_timeout_error_event_within_the_limit(env):
    slow = SlowModel(seconds=30)
    e = env(model_factory=lambda: slow, stream_timeout=1.5)
    async with e.client() as c:
        t0 = time.perf_counter()
        status, events = await chat(c, e.dev_key, "slow", "Take your time")
        elapsed = time.perf_counter() - t0
    assert status == 200
    assert 1.4 < elapsed < 3.0, elapsed
    assert events[0] == ("token", {"text": "Thinking"})
    assert events[-2][0] == "error" and events[-2][1]["error"] == "Timeout" and "1.5 s" in events[-2][1]["detail"]
    assert events[-1] == ("done", {"text": "", "stop_reason": "timeout"})
    assert slow.cancelled.wait(5), "the model call was not cancelled"
    assert not slow.finished.is_set() and not e.svc.busy


async def test_a_raising_tool_is_a_trace_event_and_the_stream_goes_on(env):
    @tool
    def explode(path: str) -> str:
        """Always fails."""
        raise RuntimeError(f"disk on fire while reading {path} with password=hunter2")

    def tools(index, scope):
        from repoctx.copilot.tools import make_tools

        return make_tools(index, scope) + [explode]

    e = env(tools_factory=tools, model_factory=lambda: ScriptedToolModel([
        {"tool": "explode", "input": {"path": "a.py"}},
        {"tool": "search_code", "input": {"query": "basket"}}, cite_first]))
    async with e.client() as c:
        status, events = await chat(c, e.dev_key, "boom", "What does the basket do?")
    assert status == 200
    kinds = [k for k, _ in events]
    traces = [d for k, d in events if k == "trace"]
    assert traces[0]["name"] == "explode" and traces[0]["status"] == "error"
    assert traces[1]["name"] == "search_code" and traces[1]["status"] == "success"
    assert kinds[-1] == "done" and "error" not in kinds
    assert events[-1][1]["metrics"]["tool_errors"] == 1 and "src/cart/basket.py" in events[-1][1]["text"]
    async with e.client() as c:
        metrics = (await c.get("/metrics", headers=e.auth(e.admin_key))).text
    assert "repoctx_chat_tool_errors_total 1.0" in metrics


async def test_a_runaway_turn_is_cut_by_the_tool_call_limit_and_counted(env):
    e = env(model_factory=lambda: ScriptedToolModel([{"tool": "search_code", "input": {"query": "cache"}}]))
    async with e.client() as c:
        status, events = await chat(c, e.dev_key, "loop", "Search forever")
        metrics = (await c.get("/metrics", headers=e.auth(e.admin_key))).text
    assert status == 200 and events[-1][0] == "done"
    done = events[-1][1]
    assert done["stop_reason"] == "limit_tool_calls" and done["metrics"]["tool_calls"] == 6
    assert "tool-call limit 6" in done["text"]
    assert 'repoctx_chat_limit_cuts_total{limit="tool_calls"} 1.0' in metrics


async def test_a_failing_model_is_an_error_event_without_secrets(env):
    class Broken(SlowModel):
        async def stream(self, messages, tool_specs=None, system_prompt=None, **kwargs):
            raise ConnectionError("cannot reach postgresql://svc:hunter2@db.internal:5432/x\nTraceback: ...")
            yield  # pragma: no cover

    e = env(model_factory=lambda: Broken())
    async with e.client() as c:
        status, events = await chat(c, e.dev_key, "broken", "hello")
    assert status == 200
    raw = json.dumps(events)
    assert "hunter2" not in raw and "Traceback" not in raw
    errors = [d for k, d in events if k == "error"]
    assert errors and errors[0]["error"] == "ConnectionError"
    assert events[-1][0] == "done" and events[-1][1]["stop_reason"] == "error"


async def test_no_configured_model_is_a_503_with_the_setting_to_change(env, monkeypatch):
    monkeypatch.delenv("REPOCTX_LLM", raising=False)
    e = env()
    async with e.client() as c:
        status, body = await chat(c, e.dev_key, "s", "hello")
    assert status == 503 and body["error"] == "ProviderNotConfigured" and "REPOCTX_LLM" in body["detail"]


async def test_a_client_disconnect_cancels_the_agent_run(env):
    slow = SlowModel(seconds=30)
    e = env(model_factory=lambda: slow, stream_timeout=60)
    with LiveServer(e.app) as live:
        async with httpx.AsyncClient(base_url=live.url, timeout=10) as c:
            async with c.stream("POST", "/chat", json={"session_id": "gone", "message": "hello"},
                                headers=e.auth(e.dev_key)) as r:
                assert r.status_code == 200
                async for line in r.aiter_lines():
                    if line.startswith("event: token"):
                        break
            # the response is closed here: the connection goes away mid-stream
        assert slow.cancelled.wait(5), "the agent's model call kept running after the client left"
        deadline = time.time() + 5
        while e.svc.busy and time.time() < deadline:
            await asyncio.sleep(0.05)
        assert not e.svc.busy and not slow.finished.is_set()
        async with httpx.AsyncClient(base_url=live.url, timeout=10) as c:
            metrics = (await c.get("/metrics", headers=e.auth(e.admin_key))).text
        assert 'repoctx_stream_disconnects_total{endpoint="/chat"} 1.0' in metrics


async def test_two_sessions_run_concurrently_and_one_session_runs_one_turn_at_a_time(env):
    def echo(messages):
        time.sleep(1.0)  # a blocking model: only its own turn's thread waits
        return f"You said: {last_user_text(messages)}"

    e = env(model_factory=lambda: ScriptedToolModel([echo]), max_turns=2)
    with LiveServer(e.app) as live:
        async with httpx.AsyncClient(base_url=live.url, timeout=30) as c:
            t0 = time.perf_counter()
            (s1, ev1), (s2, ev2), health = await asyncio.gather(
                chat(c, e.dev_key, "alpha", "first question"), chat(c, e.admin_key, "beta", "second question"),
                c.get("/health"))
            elapsed = time.perf_counter() - t0
            assert s1 == s2 == 200 and health.status_code == 200
            assert ev1[-1][1]["text"] == "You said: first question"
            assert ev2[-1][1]["text"] == "You said: second question"
            assert elapsed < 1.95, f"the two turns ran one after the other ({elapsed:.2f} s)"
            # the same session twice at once: the second is refused while the first runs
            first = asyncio.create_task(chat(c, e.dev_key, "alpha", "third"))
            await asyncio.sleep(0.3)
            status, body = await chat(c, e.dev_key, "alpha", "fourth")
            assert status == 409 and body["error"] == "session_busy"
            # past the number of turns a process runs at once: 429 with Retry-After
            second = asyncio.create_task(chat(c, e.dev_key, "gamma", "fifth"))
            await asyncio.sleep(0.3)
            r = await c.post("/chat", json={"session_id": "delta", "message": "sixth"}, headers=e.auth(e.dev_key))
            assert r.status_code == 429 and r.json()["error"] == "too_many_turns" and r.headers["retry-after"] == "2"
            assert (await first)[1][-1][1]["text"] == "You said: third"
            assert (await second)[1][-1][1]["text"] == "You said: fifth"


async def test_a_session_resumes_on_a_second_app_instance_sharing_postgresql(env):
    def recall(messages):
        said = [m for m in (last_user_text([x]) for x in messages) if m.startswith("My name is ")]
        q = last_user_text(messages)
        if q.startswith("My name is "):
            return "Noted."
        return f"Your name is {said[0][len('My name is '):]}." if said else "I do not know your name."

    a = env(model_factory=lambda: ScriptedToolModel([recall]))
    b_app = create_app(a.settings, service=a.conf, model_factory=lambda: ScriptedToolModel([recall]),
                       inprocess_workers=0)
    try:
        async with a.client() as ca, httpx.AsyncClient(transport=httpx.ASGITransport(app=b_app),
                                                       base_url="http://b.test") as cb:
            status, events = await chat(ca, a.dev_key, "resume-me", "My name is Ada")
            assert status == 200 and events[-1][1]["text"] == "Noted."
            status, events = await chat(cb, a.dev_key, "resume-me", "What is my name?")
            assert status == 200 and events[-1][1]["text"] == "Your name is Ada."
            # sessions are namespaced by principal: another key's session of the same id is a new one
            status, events = await chat(cb, a.admin_key, "resume-me", "What is my name?")
            assert events[-1][1]["text"] == "I do not know your name."
    finally:
        b_app.state.service.close()
