"""The process heap's free pages given back to the system (glibc keeps them otherwise)."""

from __future__ import annotations

import ctypes


def trim() -> None:
    """``malloc_trim(0)``: glibc returns free chunks' pages, also inside the heap (a large update's temporaries
    left its heap at its peak: Django's cold update 270 -> 188 MiB with a trim after it)."""
    try:
        ctypes.CDLL(None).malloc_trim(0)
    except (OSError, AttributeError):  # not glibc: nothing to trim this way
        pass
