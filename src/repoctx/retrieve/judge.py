"""A per-intent relevance judge on a language model, for the agentic path when a provider is configured.

The offline path ranks each intent's candidates with the fusion and the linear re-ranker; per-intent
relevance is its ceiling (an oracle plan reaches only 73.6% of intents at k=10). With a model at hand,
:class:`LLMJudge` shows it each intent with its best few candidates (citation, signature, the docstring's
first line, the body's first lines) and asks which of them implement the intent. The ones it names move to
the front of the intent's lane, in its order; the rest keep theirs. Nothing is dropped, so a wrong verdict
costs rank, never a unit; a model that fails or answers out of schema leaves the lane as it was, with a
note in the trace.

Any Strands model serves (Bedrock, an OpenAI-compatible server, Ollama, a local GGUF, or a scripted one in
tests). It cannot be measured here: no model of useful size runs offline on these machines.
"""

from __future__ import annotations

from functools import lru_cache

from repoctx.types import Hit

JUDGE_PROMPT = """You judge code search results. For each intent of a developer's question you get numbered
candidate code units. Name the candidates that implement what the intent asks (most relevant first); name
none if none does. Answer with JSON only, exactly matching this schema, no prose:
{schema}"""


@lru_cache(maxsize=1)
def verdict_schema():
    """The JSON a judge must answer with (pydantic, built on first use like the planner's)."""
    from pydantic import BaseModel, ConfigDict, Field

    class Verdict(BaseModel):
        model_config = ConfigDict(extra="forbid")
        relevant: list[int] = Field(max_length=20)

    return Verdict


def _brief(hit: Hit, lines: int = 6, width: int = 160) -> str:
    c = hit.capsule
    doc = (c.docstring or "").strip().splitlines()
    body = [ln.rstrip()[:width] for ln in (c.text or "").splitlines() if ln.strip()][:lines]
    parts = [f"{c.path}:{c.start_line} {c.qualname or c.name} ({c.kind})"]
    if c.signature:
        parts.append(" ".join(c.signature.split())[:width])
    if doc:
        parts.append(doc[0][:width])
    parts += ["    " + ln for ln in body]
    return "\n".join(parts)


class LLMJudge:
    """``judge(question, intent, hits)`` -> (hits reordered, note or None). ``top``: candidates shown."""

    def __init__(self, model, top: int = 8):
        self.model = model
        self.top = top

    def _ask(self, prompt: str) -> list[int]:
        from repoctx.retrieve.planner import ask_json

        return ask_json(self.model, JUDGE_PROMPT, prompt, verdict_schema()).relevant

    def judge(self, question: str, intent: str, hits: list[Hit]) -> tuple[list[Hit], str | None]:
        shown = hits[: self.top]
        if not shown:
            return hits, None
        listing = "\n\n".join(f"[{i}] {_brief(h)}" for i, h in enumerate(shown, 1))
        prompt = f"Question: {question}\nIntent: {intent}\n\nCandidates:\n{listing}"
        try:
            picked = self._ask(prompt)
        except ValueError as e:  # out of schema (pydantic's ValidationError is a ValueError)
            return hits, f"judge answered out of schema: {str(e).splitlines()[0]}"
        except Exception as e:  # noqa: BLE001 - provider unreachable etc.: the lane keeps its order
            return hits, f"judge model failed: {type(e).__name__}"
        order = list(dict.fromkeys(i for i in picked if 1 <= i <= len(shown)))
        if len(order) != len(set(picked)):
            return hits, "judge named candidates that were not shown"
        first = [shown[i - 1] for i in order]
        chosen = {h.capsule.id for h in first}
        judged = [Hit(h.capsule, h.score, {**h.why, "judge": {"rank": r}}) for r, h in enumerate(first, 1)]
        return judged + [h for h in hits if h.capsule.id not in chosen], None


def llm_helpers(env=None):
    """The planner and the judge on the copilot's model (``REPOCTX_LLM``); raises the provider's one-sentence
    error when none is configured."""
    from repoctx.providers.llm import model_from_env
    from repoctx.retrieve.planner import LLMPlanner

    model = model_from_env(env)
    return LLMPlanner(model), LLMJudge(model)
