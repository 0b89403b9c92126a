"""The copilot: a Strands agent over a repoctx index, with per-turn limits, metrics and citations.

``build_agent(index, session_id)`` returns a ``Copilot`` (the Strands ``Agent`` in ``.agent`` plus the
hook that bounds and measures each turn). ``ask(copilot, question)`` runs one turn and returns a
``TurnResult``; ``stream_turn(copilot, question)`` is the same turn as an async stream of plain dict
events (what the HTTP /chat service forwards as SSE)::

    {"type": "token", "text": str}                          # model text as it arrives
    {"type": "tool", "name": str, "input": dict, "id": str} # the model asked for a tool
    {"type": "tool_result", "name": str, "status": "success" | "error", "id": str}
    {"type": "citation", "citation": str, "path": str, "start": int, "end": int, "qualname": str,
     "verified": bool}                                      # cited in the answer; verified = a tool returned it
    {"type": "error", "error": str, "detail": str}          # the turn failed (provider down, ...)
    {"type": "done", "text": str, "stop_reason": str, "metrics": dict}   # always last

Limits are enforced with Strands hooks: past ``Limits.tool_calls`` tool calls a further call is cancelled
and the turn ends after that tool batch (``AfterToolsEvent.end_turn``); past ``Limits.model_calls`` the
next model call is cancelled (``BeforeModelCallEvent.cancel``). Either way the turn ends normally with the
note ``stopped: tool-call limit 6 reached`` (or ``model-call``), never an exception.

A tool that raises reaches the model as the tool result ``{"error": <exception type>, "detail": <message>,
"tool": <name>}`` (status error) and the turn goes on.
"""
from __future__ import annotations

import asyncio
import json
import os
import re
import threading
import time
from dataclasses import asdict, dataclass, field
from datetime import datetime, timezone
from typing import Any, AsyncIterator, Callable, Iterable, Protocol, runtime_checkable

from strands.hooks import (
    AfterInvocationEvent,
    AfterModelCallEvent,
    AfterToolCallEvent,
    AfterToolsEvent,
    BeforeInvocationEvent,
    BeforeModelCallEvent,
    BeforeToolCallEvent,
    HookProvider,
    HookRegistry,
)
from strands.types.exceptions import MaxTokensReachedException

__all__ = ["Limits", "TurnMetrics", "TurnResult", "MetricsSink", "JsonlMetricsSink", "CallbackSink",
           "MetricsAggregate", "Copilot", "build_agent", "ask", "stream_turn", "parse_citations",
           "SYSTEM_PROMPT", "AGENT_ID"]

AGENT_ID = "copilot"
WINDOW_SIZE = 20
DEFAULT_TOOL_NAMES = ("search_code", "get_context", "find_symbol", "callers", "callees", "read_file", "list_files")

SYSTEM_PROMPT = """You are the repoctx copilot. You answer questions about the code repository {repo} using \
only what your tools return ({tools}).

- Look the code up with the tools before answering; do not answer from memory.
- Cite the code every claim rests on with the exact source strings the tools gave you, in the form \
`path:start-end :: qualname` (for example `src/app/db.py:10-42 :: app.db.connect`). Never invent a \
citation, a path or a line range.
- If the tools return nothing relevant, say plainly that you found nothing relevant in the repository \
instead of guessing.
- Be concise: answer first, then the citations."""

# path:start-end :: qualname  (paths and qualnames as repoctx writes them; trailing punctuation dropped)
_CITATION = re.compile(r"(?P<path>[\w.+@~/-][\w.+@~/-]*):(?P<start>\d+)-(?P<end>\d+) :: (?P<qual>[^\s`'\"\\,;()]+)")


# ----------------------------------------------------------------------------------------- data
@dataclass(frozen=True)
class Limits:
    """Per-turn budget: tool calls and model calls (one question = one turn)."""

    tool_calls: int = 6
    model_calls: int = 8

    def __post_init__(self):
        if self.tool_calls < 0 or self.model_calls < 1:
            raise ValueError("Limits: tool_calls must be >= 0 and model_calls >= 1")


@dataclass
class TurnMetrics:
    """What one turn cost. ``tokens_in``/``tokens_out`` are None when the provider reported no usage;
    ``limit_cut`` is None, "tool_calls", "model_calls" or "max_tokens" (the provider's per-answer cap)."""

    latency_s: float = 0.0
    model_calls: int = 0
    tool_calls: int = 0
    tokens_in: int | None = None
    tokens_out: int | None = None
    limit_cut: str | None = None
    tool_errors: int = 0
    session_id: str | None = None
    principal: str | None = None
    model: str | None = None
    started_at: str = ""
    error: str | None = None

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)

    def to_json(self) -> str:
        return json.dumps(self.to_dict(), sort_keys=True)


@dataclass
class TurnResult:
    text: str
    citations: list[dict[str, Any]]
    sources: list[str]
    metrics: TurnMetrics
    stop_reason: str = "end_turn"
    error: dict[str, str] | None = None

    def to_dict(self) -> dict[str, Any]:
        return {"text": self.text, "citations": self.citations, "sources": self.sources,
                "metrics": self.metrics.to_dict(), "stop_reason": self.stop_reason, "error": self.error}


@runtime_checkable
class MetricsSink(Protocol):
    """Anything that wants each turn's metrics (a log file, the HTTP service's /metrics, a test)."""

    def record(self, metrics: TurnMetrics) -> None: ...


class JsonlMetricsSink:
    """One JSON line per turn appended to a file (``REPOCTX_METRICS_LOG``)."""

    def __init__(self, path: str | os.PathLike):
        self.path = os.fspath(path)
        self._lock = threading.Lock()

    def record(self, metrics: TurnMetrics) -> None:
        line = metrics.to_json() + "\n"
        with self._lock:
            os.makedirs(os.path.dirname(os.path.abspath(self.path)), exist_ok=True)
            with open(self.path, "a", encoding="utf-8") as f:
                f.write(line)


class CallbackSink:
    def __init__(self, fn: Callable[[TurnMetrics], None]):
        self.fn = fn

    def record(self, metrics: TurnMetrics) -> None:
        self.fn(metrics)


class MetricsAggregate:
    """Running totals over many turns (thread-safe); ``snapshot()`` is what a /metrics endpoint reads."""

    def __init__(self):
        self._lock = threading.Lock()
        self._t = {"turns": 0, "model_calls": 0, "tool_calls": 0, "tokens_in": 0, "tokens_out": 0,
                   "tool_errors": 0, "limit_cuts": 0, "errors": 0, "latency_s_sum": 0.0, "latency_s_max": 0.0}

    def record(self, m: TurnMetrics) -> None:
        with self._lock:
            t = self._t
            t["turns"] += 1
            t["model_calls"] += m.model_calls
            t["tool_calls"] += m.tool_calls
            t["tokens_in"] += m.tokens_in or 0
            t["tokens_out"] += m.tokens_out or 0
            t["tool_errors"] += m.tool_errors
            t["limit_cuts"] += 1 if m.limit_cut else 0
            t["errors"] += 1 if m.error else 0
            t["latency_s_sum"] += m.latency_s
            t["latency_s_max"] = max(t["latency_s_max"], m.latency_s)

    def snapshot(self) -> dict[str, Any]:
        with self._lock:
            return dict(self._t)


# ----------------------------------------------------------------------------------------- citations
def parse_citations(text: str) -> list[dict[str, Any]]:
    """Every distinct ``path:start-end :: qualname`` in ``text``, in order of appearance."""
    out: dict[str, dict[str, Any]] = {}
    for m in _CITATION.finditer(text or ""):
        qual = m.group("qual")
        while qual and (qual[-1] in ".:!?>*_" or (qual[-1] == "]" and qual.count("]") > qual.count("["))):
            qual = qual[:-1]
        if not qual:
            continue
        path = m.group("path").lstrip("*_")
        cite = f"{path}:{m.group('start')}-{m.group('end')} :: {qual}"
        out.setdefault(cite, {"citation": cite, "path": path, "start": int(m.group("start")),
                              "end": int(m.group("end")), "qualname": qual})
    return list(out.values())


def _tool_result_text(result: dict) -> str:
    parts = []
    for block in result.get("content") or []:
        if "text" in block:
            parts.append(str(block["text"]))
        elif "json" in block:
            parts.append(json.dumps(block["json"], ensure_ascii=False, default=str))
    return "\n".join(parts)


def _history_sources(messages: Iterable[dict]) -> list[str]:
    """Citations that tools returned anywhere in the conversation (so resumed sessions count too)."""
    seen: dict[str, None] = {}
    for msg in messages:
        for block in msg.get("content") or []:
            if "toolResult" in block:
                for c in parse_citations(_tool_result_text(block["toolResult"])):
                    seen.setdefault(c["citation"])
    return list(seen)


def _final_text(message: dict | None) -> str:
    if not message:
        return ""
    return "".join(str(b["text"]) for b in message.get("content") or [] if "text" in b).strip()


# ----------------------------------------------------------------------------------------- hooks
class _Turn:
    __slots__ = ("metrics", "t0", "turn_sources")

    def __init__(self, metrics: TurnMetrics):
        self.metrics = metrics
        self.t0 = time.perf_counter()
        self.turn_sources: dict[str, None] = {}  # citations the tools returned this turn, in order


class TurnGuard(HookProvider):
    """A Strands ``HookProvider``: counts and caps model and tool calls per turn, shapes tool errors,
    measures the turn and hands its ``TurnMetrics`` to the sinks."""

    def __init__(self, limits: Limits, sinks: list[MetricsSink], *, session_id: str | None, principal: str | None,
                 model_name: str | None):
        self.limits = limits
        self.sinks = sinks
        self.session_id = session_id
        self.principal = principal
        self.model_name = model_name
        self.turn: _Turn | None = None
        self.last_metrics: TurnMetrics | None = None

    def register_hooks(self, registry: HookRegistry, **kwargs: Any) -> None:
        registry.add_callback(BeforeInvocationEvent, self._start)
        registry.add_callback(BeforeModelCallEvent, self._before_model)
        registry.add_callback(AfterModelCallEvent, self._after_model)
        registry.add_callback(BeforeToolCallEvent, self._before_tool)
        registry.add_callback(AfterToolCallEvent, self._after_tool)
        registry.add_callback(AfterToolsEvent, self._after_tools)
        registry.add_callback(AfterInvocationEvent, self._finish)

    def note(self, which: str) -> str:
        if which == "max_tokens":
            return "stopped: the model's max-token limit cut this answer short"
        if which == "tool_calls":
            return f"stopped: tool-call limit {self.limits.tool_calls} reached"
        return f"stopped: model-call limit {self.limits.model_calls} reached"

    # ---- events
    def _start(self, event: BeforeInvocationEvent) -> None:
        self.turn = _Turn(TurnMetrics(session_id=self.session_id, principal=self.principal, model=self.model_name,
                                      started_at=datetime.now(timezone.utc).isoformat()))

    def _cur(self) -> _Turn:
        if self.turn is None:  # a hook fired outside an invocation (direct tool call): measure it anyway
            self._start(None)  # type: ignore[arg-type]
        return self.turn  # type: ignore[return-value]

    def _before_model(self, event: BeforeModelCallEvent) -> None:
        turn = self._cur()
        m = turn.metrics
        if m.limit_cut:
            event.cancel = self.note(m.limit_cut)
            return
        if m.model_calls >= self.limits.model_calls:
            m.limit_cut = "model_calls"
            event.cancel = self.note("model_calls")
            return
        m.model_calls += 1

    def _after_model(self, event: AfterModelCallEvent) -> None:
        turn = self._cur()
        if event.stop_response is None:
            return
        message = event.stop_response.message
        if event.stop_response.stop_reason == "max_tokens" and not turn.metrics.limit_cut:
            turn.metrics.limit_cut = "max_tokens"
        usage = (message.get("metadata") or {}).get("usage") or {}
        if usage.get("inputTokens") or usage.get("outputTokens") or usage.get("totalTokens"):
            m = turn.metrics
            m.tokens_in = (m.tokens_in or 0) + int(usage.get("inputTokens") or 0)
            m.tokens_out = (m.tokens_out or 0) + int(usage.get("outputTokens") or 0)

    def _before_tool(self, event: BeforeToolCallEvent) -> None:
        turn = self._cur()
        m = turn.metrics
        if m.limit_cut == "tool_calls" or m.tool_calls >= self.limits.tool_calls:
            m.limit_cut = "tool_calls"
            event.cancel_tool = self.note("tool_calls")
            return
        m.tool_calls += 1

    def _after_tool(self, event: AfterToolCallEvent) -> None:
        turn = self._cur()
        if event.cancel_message is not None:
            return
        name = event.tool_use.get("name", "?")
        if event.exception is not None:
            exc = event.exception
            error = "unknown_tool" if event.selected_tool is None else type(exc).__name__
            detail = next((ln.strip() for ln in str(exc).splitlines() if ln.strip()), type(exc).__name__)[:300]
            event.result = {"toolUseId": event.result.get("toolUseId", event.tool_use.get("toolUseId")),
                            "status": "error",
                            "content": [{"json": {"error": error, "detail": detail, "tool": name}}]}
        result = event.result
        if result.get("status") == "error" or any(
                isinstance(b.get("json"), dict) and "error" in b["json"] for b in result.get("content") or []):
            turn.metrics.tool_errors += 1
        for c in parse_citations(_tool_result_text(result)):
            turn.turn_sources.setdefault(c["citation"])

    def _after_tools(self, event: AfterToolsEvent) -> None:
        turn = self._cur()
        if turn.metrics.limit_cut == "tool_calls":
            event.end_turn = self.note("tool_calls")

    def _finish(self, event: AfterInvocationEvent) -> None:
        turn = self._cur()
        m = turn.metrics
        m.latency_s = round(time.perf_counter() - turn.t0, 4)
        if event.result is None and m.error is None and m.limit_cut != "max_tokens":
            m.error = "turn failed"
        self.last_metrics = m
        for sink in self.sinks:
            try:
                sink.record(m)
            except Exception:  # a broken sink must not break the conversation
                pass


# ----------------------------------------------------------------------------------------- the agent
class Copilot:
    """The Strands agent plus the per-turn guard. ``copilot.agent`` is a plain ``strands.Agent``."""

    def __init__(self, agent, guard: TurnGuard, *, session_id: str | None, principal: str,
                 session_repository=None, owns_repository: bool = False, model=None, owns_model: bool = False):
        self.agent = agent
        self.guard = guard
        self.session_id = session_id
        self.principal = principal
        self.session_repository = session_repository
        self._owns_repository = owns_repository
        self._model = model
        self.owns_model = owns_model  # close() stops an in-process model (a gguf llama.cpp server)

    @property
    def limits(self) -> Limits:
        return self.guard.limits

    @property
    def last_metrics(self) -> TurnMetrics | None:
        return self.guard.last_metrics

    @property
    def messages(self) -> list[dict]:
        return self.agent.messages

    def ask(self, question: str) -> TurnResult:
        return ask(self, question)

    def stream(self, question: str) -> AsyncIterator[dict]:
        return stream_turn(self, question)

    def close(self) -> None:
        if self._owns_repository and hasattr(self.session_repository, "close"):
            self.session_repository.close()
        if self.owns_model:
            from repoctx.copilot.providers import close_model

            close_model(self._model)

    def __enter__(self) -> "Copilot":
        return self

    def __exit__(self, *exc) -> None:
        self.close()


def _model_name(model) -> str | None:
    try:
        cfg = model.get_config() or {}
        return str(cfg.get("model_id")) if cfg.get("model_id") else type(model).__name__
    except Exception:
        return type(model).__name__


def build_agent(index, session_id: str | None = None, principal: str = "local", *, model=None, tools=None,
                scope=None, limits: Limits = Limits(), session_repository=None, callback_handler=None,
                on_metrics: Callable[[TurnMetrics], None] | None = None,
                metrics_sinks: Iterable[MetricsSink] = (), system_prompt: str | None = None) -> Copilot:
    """A copilot over ``index`` (a ``repoctx.Index``; may be None when ``tools`` are given).

    ``model``: a Strands Model; None reads ``REPOCTX_LLM`` (raises ``ProviderNotConfigured``, never falls
    back to Bedrock). ``tools``: Strands tools; None uses ``repoctx.copilot.tools.make_tools(index, scope)``.
    ``session_id``: resume/persist the conversation through ``session_repository`` (default: the store
    named by ``sessions_target(index.index_dir)`` for ``principal``; it must be migrated).
    ``on_metrics`` / ``metrics_sinks`` / ``REPOCTX_METRICS_LOG`` receive each turn's ``TurnMetrics``."""
    from strands import Agent
    from strands.agent.conversation_manager import SlidingWindowConversationManager

    owns_model = False
    if model is None:
        from repoctx.copilot.providers import model_from_env

        model = model_from_env()
        owns_model = True
    if tools is None:
        from repoctx.copilot.tools import make_tools

        tools = make_tools(index, scope)
    tools = list(tools)

    session_manager = None
    owns_repo = False
    if session_id is not None:
        from strands.session.repository_session_manager import RepositorySessionManager

        from repoctx.copilot.sessions import open_session_repository, sessions_target, validate_session_id

        validate_session_id(session_id)
        if session_repository is None:
            session_repository = open_session_repository(sessions_target(getattr(index, "index_dir", None)),
                                                         principal)
            owns_repo = True
        elif getattr(session_repository, "principal", principal) != principal:
            raise ValueError(f"the session repository belongs to principal {session_repository.principal!r}, "
                             f"not {principal!r}")
        session_manager = RepositorySessionManager(session_id=session_id, session_repository=session_repository)

    sinks: list[MetricsSink] = list(metrics_sinks)
    if on_metrics is not None:
        sinks.append(CallbackSink(on_metrics))
    if os.environ.get("REPOCTX_METRICS_LOG"):
        sinks.append(JsonlMetricsSink(os.environ["REPOCTX_METRICS_LOG"]))
    guard = TurnGuard(limits, sinks, session_id=session_id, principal=principal, model_name=_model_name(model))

    names = [getattr(t, "tool_name", None) or getattr(t, "__name__", None) or str(t) for t in tools]
    repo_name = getattr(getattr(index, "root", None), "name", None) or "in question"
    prompt = system_prompt or SYSTEM_PROMPT.format(repo=repo_name, tools=", ".join(names) or "none")
    agent = Agent(
        model=model,
        tools=tools,
        system_prompt=prompt,
        conversation_manager=SlidingWindowConversationManager(window_size=WINDOW_SIZE),
        session_manager=session_manager,
        hooks=[guard],
        callback_handler=callback_handler,
        agent_id=AGENT_ID,
        name="repoctx-copilot",
    )
    return Copilot(agent, guard, session_id=session_id, principal=principal, session_repository=session_repository,
                   owns_repository=owns_repo, model=model, owns_model=owns_model)


# ----------------------------------------------------------------------------------------- turns
async def stream_turn(copilot: Copilot, question: str) -> AsyncIterator[dict]:
    """One turn as events (see the module docstring); never raises for a failing model or tool."""
    agent = copilot.agent
    previous_turn = copilot.guard.turn
    names: dict[str, str] = {}
    streamed = False
    result = None
    error: dict[str, str] | None = None
    try:
        async for ev in agent.stream_async(question):
            if "data" in ev and not ev.get("reasoning"):
                if ev["data"]:
                    streamed = True
                    yield {"type": "token", "text": ev["data"]}
            elif "message" in ev:
                msg = ev["message"]
                for block in msg.get("content") or []:
                    if "toolUse" in block:
                        tu = block["toolUse"]
                        names[tu["toolUseId"]] = tu["name"]
                        yield {"type": "tool", "name": tu["name"], "input": tu.get("input") or {},
                               "id": tu["toolUseId"]}
                    elif "toolResult" in block:
                        tr = block["toolResult"]
                        yield {"type": "tool_result", "name": names.get(tr["toolUseId"], "?"),
                               "status": tr.get("status", "success"), "id": tr["toolUseId"]}
            elif "result" in ev:
                result = ev["result"]
    except MaxTokensReachedException:  # the partial answer stays in the conversation; a note says so
        last = agent.messages[-1] if agent.messages else None
        result = _Partial(last if last and last.get("role") == "assistant" else None)
    except Exception as e:  # provider unreachable, bad credentials, ...: data, not a traceback
        from repoctx.store.availability import store_unavailable

        # the session store (or the index) went away: the name the HTTP service gives every outage
        name = "store_unavailable" if store_unavailable(e) else type(e).__name__
        error = {"error": name, "detail": str(e).strip().splitlines()[0] if str(e).strip() else ""}
        yield {"type": "error", **error}

    began = copilot.guard.turn is not None and copilot.guard.turn is not previous_turn
    metrics = copilot.guard.turn.metrics if began else TurnMetrics(session_id=copilot.session_id,
                                                                    principal=copilot.principal)
    if error and metrics.error in (None, "turn failed"):
        metrics.error = f"{error['error']}: {error['detail']}"
    text = _final_text(result.message) if result is not None else ""
    stop_reason = str(result.stop_reason) if result is not None else "error"
    if metrics.limit_cut:
        note = copilot.guard.note(metrics.limit_cut)
        stop_reason = "max_tokens" if metrics.limit_cut == "max_tokens" else f"limit_{metrics.limit_cut}"
        if note not in text:
            text = f"{text}\n\n{note}".strip()
        yield {"type": "token", "text": ("\n\n" if streamed else "") + note}
    elif result is not None and not streamed and text:
        yield {"type": "token", "text": text}  # a provider that does not stream

    sources = _history_sources(agent.messages)
    for c in parse_citations(text):
        yield {"type": "citation", **c, "verified": c["citation"] in sources}
    yield {"type": "done", "text": text, "stop_reason": stop_reason, "metrics": metrics.to_dict(),
           **({"error": error} if error else {})}


class _Partial:
    """Stands in for the AgentResult of a turn the model's max-token limit ended."""

    stop_reason = "max_tokens"

    def __init__(self, message: dict | None):
        self.message = message


def _run_sync(coro):
    """Run a coroutine to completion from sync code, even when this thread already runs an event loop."""
    try:
        asyncio.get_running_loop()
    except RuntimeError:
        return asyncio.run(coro)
    box: dict[str, Any] = {}

    def target():
        try:
            box["value"] = asyncio.run(coro)
        except BaseException as e:  # pragma: no cover - re-raised below
            box["error"] = e

    t = threading.Thread(target=target, name="repoctx-copilot-turn")
    t.start()
    t.join()
    if "error" in box:
        raise box["error"]
    return box["value"]


def ask(copilot: Copilot, question: str) -> TurnResult:
    """One turn, blocking: the answer, its citations (verified against tool results), the sources the
    tools returned this turn, and the turn's metrics. Failures come back in ``TurnResult.error``."""

    async def collect() -> list[dict]:
        return [ev async for ev in stream_turn(copilot, question)]

    events = _run_sync(collect())
    done = events[-1]
    turn = copilot.guard.turn
    metrics = turn.metrics if turn is not None and turn.metrics.to_dict() == done["metrics"] \
        else TurnMetrics(**done["metrics"])
    citations = [{k: v for k, v in e.items() if k != "type"} for e in events if e["type"] == "citation"]
    sources = list(turn.turn_sources) if turn is not None else []
    return TurnResult(text=done["text"], citations=citations, sources=sources, metrics=metrics,
                      stop_reason=done["stop_reason"], error=done.get("error"))
