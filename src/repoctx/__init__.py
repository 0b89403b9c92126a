"""repoctx: the whole repository as context for coding agents."""

from repoctx.config import Settings
from repoctx.index import Index
from repoctx.store.base import Scope
from repoctx.types import Capsule, Context, Edge, FileHit, Hit, TraceEvent

__all__ = ["Index", "Settings", "Scope", "Capsule", "Edge", "Hit", "FileHit", "Context", "TraceEvent"]
__version__ = "0.1.0"
