"""The repoctx copilot: a Strands agent that answers questions about a repository with cited sources.

Light on import: the submodules (``agent``, ``sessions``, ``providers``, ``cli``) load what they need.
"""
from __future__ import annotations

__all__ = ["build_agent", "ask", "stream_turn", "Limits", "TurnMetrics", "TurnResult", "ProviderNotConfigured"]


def __getattr__(name: str):
    if name in ("build_agent", "ask", "stream_turn", "Limits", "TurnMetrics", "TurnResult"):
        from repoctx.copilot import agent

        return getattr(agent, name)
    if name == "ProviderNotConfigured":
        from repoctx.copilot.providers import ProviderNotConfigured

        return ProviderNotConfigured
    raise AttributeError(name)
