"""Window kinds for :meth:`stram.flow.KeyedStream.window` and joins: the ``window`` property's dict.

Each function returns the plain dict the window operators take as their
``window`` property (the YAML form), so a flow and a YAML spec that say the
same thing compile to the same properties. Keys at their defaults are left
out: ``tumbling(10_000)`` is ``{"kind": "tumbling", "size_ms": 10000}``.
"""

from __future__ import annotations

from typing import Any

from stram.flow.errors import FlowError

__all__ = ["tumbling", "sliding", "session", "TIMES"]

#: What a window's time may be: the records' event time or the operator's clock.
TIMES = ("event", "processing")


def tumbling(size_ms: int, origin_ms: int = 0, time: str = "event") -> dict[str, Any]:
    """Back-to-back windows of ``size_ms``, aligned to ``origin_ms``."""
    return _window("tumbling", {"size_ms": _positive("size_ms", size_ms)}, origin_ms, time)


def sliding(size_ms: int, slide_ms: int, origin_ms: int = 0, time: str = "event") -> dict[str, Any]:
    """Windows of ``size_ms`` starting every ``slide_ms`` (a record falls in ``size_ms / slide_ms`` of them)."""
    size = _positive("size_ms", size_ms)
    slide = _positive("slide_ms", slide_ms)
    if slide > size:
        raise FlowError(f"sliding window: slide_ms ({slide}) must not exceed size_ms ({size}); "
                         f"records between windows would be lost (use tumbling for slide == size)")
    return _window("sliding", {"size_ms": size, "slide_ms": slide}, origin_ms, time)


def session(gap_ms: int, time: str = "event") -> dict[str, Any]:
    """Per key, records closer than ``gap_ms`` to each other share one window."""
    return _window("session", {"gap_ms": _positive("gap_ms", gap_ms)}, 0, time)


def _window(kind: str, sizes: dict[str, int], origin_ms: int, time: str) -> dict[str, Any]:
    out: dict[str, Any] = {"kind": kind, **sizes}
    if time not in TIMES:
        raise FlowError(f"{kind} window: time must be one of {', '.join(TIMES)}, got {time!r}")
    if time != "event":
        out["time"] = time
    if isinstance(origin_ms, bool) or not isinstance(origin_ms, int):
        raise FlowError(f"{kind} window: origin_ms must be an integer (epoch ms), got {origin_ms!r}")
    if origin_ms:
        out["origin_ms"] = origin_ms
    return out


def _positive(name: str, value: Any) -> int:
    if isinstance(value, bool) or not isinstance(value, int) or value <= 0:
        raise FlowError(f"{name} must be a positive integer of milliseconds, got {value!r}")
    return value
