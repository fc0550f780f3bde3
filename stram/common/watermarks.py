"""Event-time watermarks: the values that travel with streaming windows.

A watermark says "no record with an event time below this is expected any
more" (epoch milliseconds). A source declares one per streaming window; the
engine sends it downstream just before the window's END_WINDOW, and an
operator's input watermark is the minimum over its inputs. Three values are
special: :data:`MIN_WATERMARK` (no event time seen yet), :data:`MAX_WATERMARK`
(end of input: every window may fire) and :data:`IDLE` (the input has had no
records for its idle timeout and stops holding the minimum back).
"""

from __future__ import annotations

from typing import Iterable

__all__ = ["IDLE", "MIN_WATERMARK", "MAX_WATERMARK", "combine", "describe"]

#: An idle input: left out of the minimum (i64 minimum, so it fits the wire's window field).
IDLE = -(1 << 63)
#: No event time seen yet.
MIN_WATERMARK = IDLE + 1
#: End of input.
MAX_WATERMARK = (1 << 63) - 1


def combine(values: Iterable[int]) -> int:
    """The watermark of an operator whose inputs have ``values``: the minimum over the inputs
    that are not idle; :data:`IDLE` when every input is idle (or there are none)."""
    low = None
    for v in values:
        if v != IDLE and (low is None or v < low):
            low = v
    return IDLE if low is None else low


def describe(value: int | None) -> str:
    """A watermark for people: ``idle``, ``none``, ``end``, or its milliseconds."""
    if value is None or value == MIN_WATERMARK:
        return "none"
    if value == IDLE:
        return "idle"
    if value == MAX_WATERMARK:
        return "end"
    return str(value)
