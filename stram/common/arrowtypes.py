"""Telling Arrow data apart without importing pyarrow (a process that never loaded it saves its import)."""

from __future__ import annotations

from typing import Any

__all__ = ["is_arrow"]


def is_arrow(obj: Any) -> bool:
    """Whether ``obj`` is a pyarrow RecordBatch or Table (by its type's name and module)."""
    kind = type(obj)
    return kind.__name__ in ("RecordBatch", "Table") and kind.__module__.startswith("pyarrow")
