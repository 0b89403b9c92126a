"""The repoctx copilot: a Strands agent that answers questions about a repository with cited sources.

Light on import: the submodules (``agent``, ``sessions``, ``tools``) load what they need. Its model comes
from ``repoctx.providers.llm``; its commands (``repoctx ask``, ``chat``, ``sessions``) live in
``repoctx.cli.copilot``.
"""

from __future__ import annotations

__all__ = ["build_agent", "ask", "stream_turn", "Limits", "TurnMetrics", "TurnResult"]


def __getattr__(name: str):
    if name in ("build_agent", "ask", "stream_turn", "Limits", "TurnMetrics", "TurnResult"):
        from repoctx.copilot import agent

        return getattr(agent, name)
    raise AttributeError(name)
