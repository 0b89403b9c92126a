"""A scripted model behind Strands' real ``Model`` interface, so the real agent loop runs in tests."""
from __future__ import annotations

from typing import Any, AsyncGenerator, AsyncIterable

from strands.models.model import Model


class ScriptedModel(Model):
    """Answers each call with the next scripted text (the last one repeats)."""

    def __init__(self, replies: list[str]):
        self.replies = list(replies)
        self.calls: list[list] = []
        self.config: dict[str, Any] = {"model_id": "scripted"}

    def update_config(self, **model_config: Any) -> None:
        self.config.update(model_config)

    def get_config(self) -> dict[str, Any]:
        return self.config

    def _next(self) -> str:
        return self.replies.pop(0) if len(self.replies) > 1 else self.replies[0]

    async def stream(self, messages, tool_specs=None, system_prompt=None, **kwargs) -> AsyncIterable[dict]:
        self.calls.append(messages)
        text = self._next()
        yield {"messageStart": {"role": "assistant"}}
        yield {"contentBlockStart": {"start": {}}}
        for i in range(0, len(text), 16):
            yield {"contentBlockDelta": {"delta": {"text": text[i:i + 16]}}}
        yield {"contentBlockStop": {}}
        yield {"messageStop": {"stopReason": "end_turn"}}
        yield {"metadata": {"usage": {"inputTokens": 1, "outputTokens": 1, "totalTokens": 2},
                            "metrics": {"latencyMs": 1}}}

    async def structured_output(self, output_model, prompt, system_prompt=None, **kwargs) -> AsyncGenerator:
        raise NotImplementedError("scripted model answers in text")
        yield  # pragma: no cover
