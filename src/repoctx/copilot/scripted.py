"""A scripted Strands ``Model`` that can call tools: the real agent loop runs without any provider.

Used by the copilot tests and by ``bench/copilot_cost.py``. Each model call plays the next step of the
script (the last step repeats). A step is

* a string: the answer text (stop reason ``end_turn``);
* ``{"tool": name, "input": {...}}``: one tool call (stop reason ``tool_use``);
* ``{"tools": [{"tool": ..., "input": ...}, ...], "text": "..."}``: optional text, then several tool calls;
* a callable ``(messages) -> step``: decided from the conversation so far (e.g. cite what a tool returned).

Usage is reported like a real provider's, estimated at four characters a token, so metrics can be tested.
"""

from __future__ import annotations

import json
from collections.abc import AsyncGenerator, AsyncIterable, Callable, Sequence
from typing import Any

from strands.models.model import Model

Step = str | dict | Callable[[list], Any]

__all__ = ["ScriptedToolModel", "last_tool_results"]


def _tokens(text: str) -> int:
    return max(1, (len(text) + 3) // 4)


def last_tool_results(messages: list) -> list[dict]:
    """The tool results in the latest user message (what the scripted model 'read')."""
    for msg in reversed(messages):
        if msg.get("role") == "user":
            return [b["toolResult"] for b in msg.get("content") or [] if "toolResult" in b]
    return []


class ScriptedToolModel(Model):
    def __init__(self, steps: Sequence[Step], *, chunk: int = 8, report_usage: bool = True):
        if not steps:
            raise ValueError("a script needs at least one step")
        self.steps = list(steps)
        self.chunk = chunk
        self.report_usage = report_usage
        self.calls: list[list] = []  # the messages of every call, as the model saw them
        self.system_prompts: list[str | None] = []
        self.tool_specs: list[list] = []
        self.config: dict[str, Any] = {"model_id": "scripted"}

    def update_config(self, **model_config: Any) -> None:
        self.config.update(model_config)

    def get_config(self) -> dict[str, Any]:
        return self.config

    def _next(self, messages: list) -> dict:
        step = self.steps.pop(0) if len(self.steps) > 1 else self.steps[0]
        if callable(step):
            step = step(messages)
        if isinstance(step, str):
            return {"text": step, "tools": []}
        if "tool" in step:
            return {"text": step.get("text", ""), "tools": [step]}
        return {"text": step.get("text", ""), "tools": list(step.get("tools") or [])}

    async def stream(self, messages, tool_specs=None, system_prompt=None, **kwargs) -> AsyncIterable[Any]:
        self.calls.append(json.loads(json.dumps(messages, default=str)))
        self.system_prompts.append(system_prompt)
        self.tool_specs.append(list(tool_specs or []))
        n = len(self.calls)
        step = self._next(messages)
        text, tools = step["text"], step["tools"]
        yield {"messageStart": {"role": "assistant"}}
        if text:
            yield {"contentBlockStart": {"start": {}}}
            for i in range(0, len(text), self.chunk):
                yield {"contentBlockDelta": {"delta": {"text": text[i : i + self.chunk]}}}
            yield {"contentBlockStop": {}}
        out = text
        for j, call in enumerate(tools):
            args = json.dumps(call.get("input") or {})
            out += args
            yield {"contentBlockStart": {"start": {"toolUse": {"toolUseId": f"call_{n}_{j}", "name": call["tool"]}}}}
            yield {"contentBlockDelta": {"delta": {"toolUse": {"input": args}}}}
            yield {"contentBlockStop": {}}
        yield {"messageStop": {"stopReason": "tool_use" if tools else "end_turn"}}
        if self.report_usage:
            tin = _tokens(
                json.dumps(messages, default=str) + (system_prompt or "") + json.dumps(tool_specs or [], default=str)
            )
            tout = _tokens(out)
            yield {
                "metadata": {
                    "usage": {"inputTokens": tin, "outputTokens": tout, "totalTokens": tin + tout},
                    "metrics": {"latencyMs": 0},
                }
            }

    async def structured_output(self, output_model, prompt, system_prompt=None, **kwargs) -> AsyncGenerator:
        raise NotImplementedError("the scripted model answers in text and tool calls")
        yield  # pragma: no cover
