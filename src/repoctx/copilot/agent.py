"""The copilot: a Strands agent over a repoctx index, with per-turn limits, metrics and citations.

``build_agent(index, session_id)`` returns a ``Copilot`` (the Strands ``Agent`` in ``.agent`` plus the
hook that bounds and measures each turn). ``ask(copilot, question)`` runs one turn and returns a
``TurnResult``; ``stream_turn(copilot, question)`` is the same turn as an async stream of plain dict
events (what the HTTP /chat service forwards as SSE)::

    {"type": "token", "text": str}                          # model text as it arrives
    {"type": "tool", "name": str, "input": dict, "id": str} # the model asked for a tool
    {"type": "tool_result", "name": str, "status": "success" | "error", "id": str, "chars": int}
    {"type": "citation", "citation": str, "path": str, "start": int, "end": int, "qualname": str,
     "verified": bool}                                      # cited in the answer; verified = a tool returned it
    {"type": "error", "error": str, "detail": str}          # the turn failed (provider down, "Timeout", ...)
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
from collections.abc import AsyncIterator, Callable, Iterable, Mapping
from dataclasses import asdict, dataclass
from datetime import UTC, datetime
from typing import Any, Protocol, runtime_checkable

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

from repoctx.copilot.tools import error_detail

__all__ = [
    "Limits",
    "TurnMetrics",
    "TurnResult",
    "MetricsSink",
    "JsonlMetricsSink",
    "CallbackSink",
    "MetricsAggregate",
    "Copilot",
    "build_agent",
    "ask",
    "stream_turn",
    "parse_citations",
    "tool_citations",
    "repair_history",
    "turn_timeout_from_env",
    "SYSTEM_PROMPT",
    "AGENT_ID",
    "INTERRUPTED_NOTE",
    "TIMEOUT_ENV",
    "DEFAULT_TURN_TIMEOUT",
]

AGENT_ID = "copilot"
WINDOW_SIZE = 20
# the deadline of one turn: the same variable and default as the HTTP service's stream timeout
# (ServiceSettings.stream_timeout), read here because the service is built on the copilot, not the reverse
TIMEOUT_ENV = "REPOCTX_STREAM_TIMEOUT"
DEFAULT_TURN_TIMEOUT = 60.0
# what an interrupted turn leaves in the history in place of the answer it never got, so roles alternate
INTERRUPTED_NOTE = "(interrupted: no answer)"
INTERRUPTED_TOOL = "interrupted: the turn ended before this tool returned"

SYSTEM_PROMPT = """You are the repoctx copilot. You answer questions about the code repository {repo} using \
only what your tools return ({tools}).

- Look the code up with the tools before answering; do not answer from memory.
- Cite the code every claim rests on with the exact source strings the tools gave you, in the form \
`path:start-end :: qualname` (for example `src/app/db.py:10-42 :: app.db.connect`). Never invent a \
citation, a path or a line range.
- If the tools return nothing relevant, say plainly that you found nothing relevant in the repository \
instead of guessing.
- Be concise: answer first, then the citations."""

# path:start-end :: qualname in prose: a qualname runs to whitespace, a quote, a backtick, a comma, a semicolon or
# a parenthesis; what prose may glue to its end (a full stop, a colon, emphasis) is trimmed afterwards
_CITATION = re.compile(r"(?P<path>[\w.+@~/-]+):(?P<start>\d+)-(?P<end>\d+) :: (?P<qual>[^\s`'\"\\,;()]+)")
# one whole string that is a citation (a tool's "citation" field): nothing to trim
_EXACT_CITATION = re.compile(r"(?P<path>\S+?):(?P<start>\d+)-(?P<end>\d+) :: (?P<qual>\S+)")
_PROSE_TAIL = ".:!?*"  # never the last character of a qualname repoctx writes, but prose ends sentences with them
_CLOSERS = {"]": "[", ">": "<"}  # dropped only when unbalanced: `path[1-20]` and `f.<locals>` keep theirs


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
        return {
            "text": self.text,
            "citations": self.citations,
            "sources": self.sources,
            "metrics": self.metrics.to_dict(),
            "stop_reason": self.stop_reason,
            "error": self.error,
        }


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
        self._t = {
            "turns": 0,
            "model_calls": 0,
            "tool_calls": 0,
            "tokens_in": 0,
            "tokens_out": 0,
            "tool_errors": 0,
            "limit_cuts": 0,
            "errors": 0,
            "latency_s_sum": 0.0,
            "latency_s_max": 0.0,
        }

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
def _trim_variants(qual: str) -> list[str]:
    """``qual`` and then each shorter form with one more trailing prose character dropped, longest first."""
    out = [qual]
    while qual:
        last = qual[-1]
        if last in _PROSE_TAIL or (last in _CLOSERS and qual.count(last) > qual.count(_CLOSERS[last])):
            qual = qual[:-1]
            if qual:
                out.append(qual)
        else:
            break
    return out


def _cite(path: str, start: str, end: str, qual: str) -> dict[str, Any]:
    cite = f"{path}:{start}-{end} :: {qual}"
    return {"citation": cite, "path": path, "start": int(start), "end": int(end), "qualname": qual}


def parse_citations(text: str, known: Iterable[str] = ()) -> list[dict[str, Any]]:
    """Every distinct ``path:start-end :: qualname`` in ``text``, in order of appearance.

    A qualname keeps every character an identifier may end with (``Session.__init__``, ``name_``); what prose
    glues to it (a full stop, a colon, ``**``, an unbalanced ``]``) is dropped. Where that is ambiguous
    (Ruby's ``valid?``, a path in ``__underscore emphasis__``), the form among ``known`` -- the citations the
    tools returned -- wins."""
    known = set(known)
    out: dict[str, dict[str, Any]] = {}
    for m in _CITATION.finditer(text or ""):
        path, start, end = m.group("path"), m.group("start"), m.group("end")
        variants = _trim_variants(m.group("qual"))
        candidates = [(path, q) for q in variants]
        opener = len(path) - len(path.lstrip("_"))
        if 0 < opener <= 2 and (m.start() == 0 or not text[m.start() - 1].isalnum()):
            run = "_" * opener  # `__path:1-2 :: qual__` may be emphasis: tried only against known citations
            candidates += [(path[opener:], q[:-opener]) for q in variants if q.endswith(run) and len(q) > opener]
        chosen = next((c for c in candidates if f"{c[0]}:{start}-{end} :: {c[1]}" in known), None)
        if chosen is None:
            chosen = (path, variants[-1])
        cite = _cite(chosen[0], start, end, chosen[1])
        out.setdefault(cite["citation"], cite)
    return list(out.values())


def _strings(value: Any) -> Iterable[str]:
    if isinstance(value, str):
        yield value
    elif isinstance(value, dict):
        for k, v in value.items():
            if k not in ("note", "notes", "snippet_note"):  # guidance ("cite as a.py:1-3 :: <symbol>"), not sources
                yield from _strings(v)
    elif isinstance(value, list):
        for v in value:
            yield from _strings(v)


def tool_citations(value: Any) -> list[str]:
    """The citations in a tool's output (a JSON value, or text that may be JSON): a string that is a whole
    citation is taken exactly as the tool wrote it; citations inside longer text are parsed from the prose."""
    if isinstance(value, str):
        try:
            value = json.loads(value)
        except ValueError:
            return [c["citation"] for c in parse_citations(value)]
    seen: dict[str, None] = {}
    for s in _strings(value):
        m = _EXACT_CITATION.fullmatch(s.strip())
        if m:
            seen.setdefault(s.strip())
        else:
            for c in parse_citations(s):
                seen.setdefault(c["citation"])
    return list(seen)


def _result_chars(result: dict) -> int:
    """How big a tool's answer was, in characters of what the model reads (its text, or its JSON)."""
    n = 0
    for block in result.get("content") or []:
        if "text" in block:
            n += len(str(block["text"]))
        elif "json" in block:
            n += len(json.dumps(block["json"], ensure_ascii=False, default=str))
    return n


def _tool_result_citations(result: Mapping[str, Any]) -> list[str]:
    seen: dict[str, None] = {}
    for block in result.get("content") or []:
        if "text" in block:
            found = tool_citations(str(block["text"]))
        elif "json" in block:
            found = tool_citations(block["json"])
        else:
            continue
        for c in found:
            seen.setdefault(c)
    return list(seen)


def _history_sources(messages: Iterable[dict]) -> list[str]:
    """Citations that tools returned anywhere in the conversation (so resumed sessions count too)."""
    seen: dict[str, None] = {}
    for msg in messages:
        for block in msg.get("content") or []:
            if "toolResult" in block:
                for c in _tool_result_citations(block["toolResult"]):
                    seen.setdefault(c)
    return list(seen)


def _final_text(message: dict | None) -> str:
    if not message:
        return ""
    return "".join(str(b["text"]) for b in message.get("content") or [] if "text" in b).strip()


def turn_timeout_from_env(env: os._Environ[str] | dict[str, str] | None = None) -> float:
    """Seconds one turn may take: ``REPOCTX_STREAM_TIMEOUT`` (a number > 0; ``inf`` for no deadline), default 60;
    ``ConfigError`` when it is not a positive number. Read by the same ``float_env`` as the service's
    ``ServiceSettings.stream_timeout``."""
    from repoctx.config import float_env

    return float_env(TIMEOUT_ENV, DEFAULT_TURN_TIMEOUT, env=env)


# ----------------------------------------------------------------------------------------- history
def _blocks(message: dict, kind: str) -> list[dict]:
    return [b for b in message.get("content") or [] if kind in b]


def _add_message(agent, message: Any) -> None:  # a Strands Message (a TypedDict)
    """Append to the agent's history the way the SDK does, so its session manager stores the message."""
    from strands.hooks import MessageAddedEvent

    try:
        from strands.types.content import _ensure_tracking_id  # the SDK's own id for messages it appends

        _ensure_tracking_id(message)
    except ImportError:  # pragma: no cover - an SDK without tracking ids
        pass
    agent.messages.append(message)
    try:
        agent.hooks.invoke_callbacks(MessageAddedEvent(agent=agent, message=message))
    except RuntimeError:  # an async callback: the history is repaired in memory, and again at the next load
        pass


def repair_history(agent) -> int:
    """Make the conversation one a provider accepts after an interrupted turn (timeout, provider failure,
    Ctrl-C, a killed process): roles alternate and every tool call has its result.

    A dangling question keeps the user's words and gets the assistant's ``INTERRUPTED_NOTE``; a dangling tool
    call gets an error result for each call, then the note. These are appended through the SDK's
    ``MessageAddedEvent``, so a session stores them and the next load finds an alternating history. Two user
    messages in a row further up (histories saved before this repair existed) get the note between them in
    memory only: the stored rows keep their numbers. Returns how many messages were added."""
    messages = agent.messages
    added = 0
    i = 1
    while i < len(messages):
        prev, cur = messages[i - 1], messages[i]
        if prev.get("role") == "user" and cur.get("role") == "user" and not _blocks(cur, "toolResult"):
            messages.insert(i, {"role": "assistant", "content": [{"text": INTERRUPTED_NOTE}]})
            added += 1
            i += 1
        i += 1
    if not messages:
        return added
    last = messages[-1]
    if last.get("role") == "assistant" and _blocks(last, "toolUse"):
        _add_message(
            agent,
            {
                "role": "user",
                "content": [
                    {
                        "toolResult": {
                            "toolUseId": b["toolUse"]["toolUseId"],
                            "status": "error",
                            "content": [{"text": INTERRUPTED_TOOL}],
                        }
                    }
                    for b in _blocks(last, "toolUse")
                ],
            },
        )
        added += 1
        last = messages[-1]
    if last.get("role") == "user":
        _add_message(agent, {"role": "assistant", "content": [{"text": INTERRUPTED_NOTE}]})
        added += 1
    return added


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

    def __init__(
        self,
        limits: Limits,
        sinks: list[MetricsSink],
        *,
        session_id: str | None,
        principal: str | None,
        model_name: str | None,
    ):
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
        self.turn = _Turn(
            TurnMetrics(
                session_id=self.session_id,
                principal=self.principal,
                model=self.model_name,
                started_at=datetime.now(UTC).isoformat(),
            )
        )

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
        usage: dict[str, Any] = dict((message.get("metadata") or {}).get("usage") or {})
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
            detail = error_detail(str(exc)) or type(exc).__name__
            event.result = {
                "toolUseId": event.result.get("toolUseId", event.tool_use.get("toolUseId")),
                "status": "error",
                "content": [{"json": {"error": error, "detail": detail, "tool": name}}],
            }
        result = event.result
        if result.get("status") == "error" or any(
            isinstance(b.get("json"), dict) and "error" in b["json"] for b in result.get("content") or []
        ):
            turn.metrics.tool_errors += 1
        for c in _tool_result_citations(result):
            turn.turn_sources.setdefault(c)

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
            except Exception:  # noqa: BLE001 - a broken sink must not break the conversation
                pass


# ----------------------------------------------------------------------------------------- the agent
class Copilot:
    """The Strands agent plus the per-turn guard. ``copilot.agent`` is a plain ``strands.Agent``."""

    def __init__(
        self,
        agent,
        guard: TurnGuard,
        *,
        session_id: str | None,
        principal: str,
        session_repository=None,
        owns_repository: bool = False,
        model=None,
        owns_model: bool = False,
    ):
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

    def ask(self, question: str, *, timeout: float | None = None) -> TurnResult:
        return ask(self, question, timeout=timeout)

    def stream(self, question: str, *, timeout: float | None = None) -> AsyncIterator[dict]:
        return stream_turn(self, question, timeout=timeout)

    def close(self) -> None:
        if self._owns_repository and hasattr(self.session_repository, "close"):
            self.session_repository.close()
        if self.owns_model:
            from repoctx.providers.llm import close_model

            close_model(self._model)

    def __enter__(self) -> Copilot:
        return self

    def __exit__(self, *exc) -> None:
        self.close()


def _model_name(model) -> str | None:
    try:
        cfg = model.get_config() or {}
        return str(cfg.get("model_id")) if cfg.get("model_id") else type(model).__name__
    except Exception:  # noqa: BLE001 - a model without a readable config is named by its class
        return type(model).__name__


def build_agent(
    index,
    session_id: str | None = None,
    principal: str = "local",
    *,
    model=None,
    tools=None,
    scope=None,
    limits: Limits = Limits(),
    session_repository=None,
    callback_handler=None,
    on_metrics: Callable[[TurnMetrics], None] | None = None,
    metrics_sinks: Iterable[MetricsSink] = (),
    system_prompt: str | None = None,
) -> Copilot:
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
        from repoctx.providers.llm import model_from_env

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
            session_repository = open_session_repository(sessions_target(getattr(index, "index_dir", None)), principal)
            owns_repo = True
        elif getattr(session_repository, "principal", principal) != principal:
            raise ValueError(
                f"the session repository belongs to principal {session_repository.principal!r}, not {principal!r}"
            )
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
    if session_manager is not None:
        repair_history(agent)  # a resumed session whose last turn was interrupted
    return Copilot(
        agent,
        guard,
        session_id=session_id,
        principal=principal,
        session_repository=session_repository,
        owns_repository=owns_repo,
        model=model,
        owns_model=owns_model,
    )


# ----------------------------------------------------------------------------------------- turns
class _Deadline(Exception):
    """The turn's deadline passed (the step in flight was cancelled and has unwound)."""


async def _next_event(stream, deadline: float | None):
    """The stream's next event, or ``_Deadline`` once ``deadline`` (loop time) passes. The step runs in the
    caller's task, so the SDK's context (tracing spans) stays whole; the deadline covers only the wait for
    the SDK, never the caller's handling of an event."""
    if deadline is None:
        return await stream.__anext__()
    scope = asyncio.timeout_at(deadline)
    try:
        async with scope:
            return await stream.__anext__()
    except TimeoutError:
        if scope.expired():
            raise _Deadline() from None
        raise  # the provider's own timeout: an error like any other


async def stream_turn(copilot: Copilot, question: str, *, timeout: float | None = None) -> AsyncIterator[dict]:
    """One turn as events (see the module docstring); never raises for a failing model or tool.

    ``timeout``: seconds the whole turn may take (the CLI passes ``REPOCTX_STREAM_TIMEOUT``); past it the
    model call or tool in flight is cancelled and the turn ends with ``{"type": "error", "error": "Timeout"}``
    and ``stop_reason`` ``"timeout"``. An interrupted turn leaves the history repaired (``repair_history``)."""
    if timeout is not None and not timeout > 0:
        raise ValueError(f"timeout must be > 0 seconds, not {timeout!r}")
    agent = copilot.agent
    previous_turn = copilot.guard.turn
    names: dict[str, str] = {}
    streamed = False
    result = None
    error: dict[str, str] | None = None
    deadline = None if timeout is None or timeout == float("inf") else asyncio.get_running_loop().time() + timeout
    timed_out: _Deadline | None = None
    try:
        repair_history(agent)  # a previous turn of this conversation that never got its answer
        stream = agent.stream_async(question)
        while True:
            try:
                ev = await _next_event(stream, deadline)
            except StopAsyncIteration:
                break
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
                        yield {
                            "type": "tool",
                            "name": tu["name"],
                            "input": tu.get("input") or {},
                            "id": tu["toolUseId"],
                        }
                    elif "toolResult" in block:
                        tr = block["toolResult"]
                        yield {
                            "type": "tool_result",
                            "name": names.get(tr["toolUseId"], "?"),
                            "status": tr.get("status", "success"),
                            "id": tr["toolUseId"],
                            "chars": _result_chars(tr),
                        }
            elif "result" in ev:
                result = ev["result"]
    except _Deadline as e:
        timed_out = e
        error = {"error": "Timeout", "detail": f"the turn took longer than {timeout:g} s and was stopped"}
        yield {"type": "error", **error}
    except MaxTokensReachedException:  # the partial answer stays in the conversation; a note says so
        last = agent.messages[-1] if agent.messages else None
        result = _Partial(last if last and last.get("role") == "assistant" else None)
    except Exception as e:  # noqa: BLE001 - provider unreachable, bad credentials, ...: data, not a traceback
        from repoctx.store.availability import store_unavailable

        # the session store (or the index) went away: the name the HTTP service gives every outage
        name = "store_unavailable" if store_unavailable(e) else type(e).__name__
        error = {"error": name, "detail": str(e).strip().splitlines()[0] if str(e).strip() else ""}
        yield {"type": "error", **error}
    if error is not None and error["error"] != "store_unavailable":
        try:  # the question stays in the history, with a note for its missing answer
            repair_history(agent)
        except Exception:  # noqa: BLE001 - the session store failed too: the next load repairs it
            pass

    turn = copilot.guard.turn
    began = turn is not None and turn is not previous_turn
    metrics = (
        turn.metrics
        if turn is not None and began
        else TurnMetrics(session_id=copilot.session_id, principal=copilot.principal)
    )
    if error and metrics.error in (None, "turn failed"):
        metrics.error = f"{error['error']}: {error['detail']}"
    text = _final_text(result.message) if result is not None else ""
    stop_reason = str(result.stop_reason) if result is not None else ("timeout" if timed_out else "error")
    if metrics.limit_cut:
        note = copilot.guard.note(metrics.limit_cut)
        stop_reason = "max_tokens" if metrics.limit_cut == "max_tokens" else f"limit_{metrics.limit_cut}"
        if note not in text:
            text = f"{text}\n\n{note}".strip()
        yield {"type": "token", "text": ("\n\n" if streamed else "") + note}
    elif result is not None and not streamed and text:
        yield {"type": "token", "text": text}  # a provider that does not stream

    sources = set(_history_sources(agent.messages))
    for c in parse_citations(text, known=sources):
        yield {"type": "citation", **c, "verified": c["citation"] in sources}
    yield {
        "type": "done",
        "text": text,
        "stop_reason": stop_reason,
        "metrics": metrics.to_dict(),
        **({"error": error} if error else {}),
    }


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
        except BaseException as e:  # pragma: no cover  # noqa: BLE001 - re-raised below
            box["error"] = e

    t = threading.Thread(target=target, name="repoctx-copilot-turn")
    t.start()
    t.join()
    if "error" in box:
        raise box["error"]
    return box["value"]


def ask(copilot: Copilot, question: str, *, timeout: float | None = None) -> TurnResult:
    """One turn, blocking: the answer, its citations (verified against tool results), the sources the
    tools returned this turn, and the turn's metrics. Failures come back in ``TurnResult.error`` (a turn
    longer than ``timeout`` seconds as ``{"error": "Timeout", ...}``, stop reason ``"timeout"``)."""

    async def collect() -> list[dict]:
        return [ev async for ev in stream_turn(copilot, question, timeout=timeout)]

    events = _run_sync(collect())
    done = events[-1]
    turn = copilot.guard.turn
    metrics = (
        turn.metrics
        if turn is not None and turn.metrics.to_dict() == done["metrics"]
        else TurnMetrics(**done["metrics"])
    )
    citations = [{k: v for k, v in e.items() if k != "type"} for e in events if e["type"] == "citation"]
    sources = list(turn.turn_sources) if turn is not None else []
    return TurnResult(
        text=done["text"],
        citations=citations,
        sources=sources,
        metrics=metrics,
        stop_reason=done["stop_reason"],
        error=done.get("error"),
    )
