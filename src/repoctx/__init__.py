"""repoctx: the whole repository as context for coding agents."""

from __future__ import annotations

from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from repoctx.config import Settings
    from repoctx.index import Index
    from repoctx.store.base import Scope
    from repoctx.types import Capsule, Context, Edge, FileHit, Hit, TraceEvent

__all__ = ["Index", "Settings", "Scope", "Capsule", "Edge", "Hit", "FileHit", "Context", "TraceEvent"]
__version__ = "0.1.0"

# Where each public name lives. They are imported on first use (PEP 562): every module of repoctx imports this
# package first, and `import repoctx.index` costs a one-shot command its numpy and retrieval imports before its
# own first line runs (`repoctx search` starts loading the model before them; see cli.search)
_HOMES = {
    "Index": "repoctx.index",
    "Settings": "repoctx.config",
    "Scope": "repoctx.store.base",
    "Capsule": "repoctx.types",
    "Edge": "repoctx.types",
    "Hit": "repoctx.types",
    "FileHit": "repoctx.types",
    "Context": "repoctx.types",
    "TraceEvent": "repoctx.types",
}


def __getattr__(name: str):
    home = _HOMES.get(name)
    if home is None:
        raise AttributeError(f"module 'repoctx' has no attribute {name!r}")
    import importlib

    return getattr(importlib.import_module(home), name)


def __dir__() -> list[str]:
    return sorted(set(globals()) | set(__all__))
