"""Window ids: ``(base seconds << 32) | index``, where the base is the application's start second.

The master and the agents compute them the same way from
``start_window_millis`` (the init context's start of window index 0).
"""

from __future__ import annotations

__all__ = ["initial_window", "window_index", "window_millis", "is_checkpoint_window"]


def initial_window(start_window_millis: int) -> int:
    """The window "before window 0": the checkpoint of an operator that starts from scratch."""
    return ((start_window_millis // 1000) << 32) - 1


def window_index(window_id: int) -> int:
    """A window's index counted from the start (the low 32 bits)."""
    return window_id & 0xFFFFFFFF


def window_millis(window_id: int, window_size: int) -> int:
    """Nominal start time of a window."""
    return (window_id >> 32) * 1000 + window_index(window_id) * window_size


def is_checkpoint_window(window_id: int, count: int) -> bool:
    """True for every ``count``-th window, where operators checkpoint."""
    return (window_index(window_id) + 1) % max(count, 1) == 0
