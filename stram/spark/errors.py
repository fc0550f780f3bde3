"""Errors of reading stram streams in Spark, and reading them back out of a failed query's text.

Their messages start with a marker that survives Spark's error wrapping, so
the SparkPipeline can tell a schema mismatch (fatal) from a failed read (worth
a restart) in the exception text of its query.
"""

from __future__ import annotations

from typing import Any

__all__ = ["StramSchemaError", "StramReadError", "SCHEMA_MARKER", "READ_MARKER"]

#: Markers in exception messages: they survive the trip through Spark's error wrapping.
SCHEMA_MARKER = "[STRAM_SCHEMA_MISMATCH]"
READ_MARKER = "[STRAM_READ_ERROR]"


class StramSchemaError(ValueError):
    """Tuples of a stream do not fit the schema declared for it (not worth retrying)."""

    def __init__(self, message: str) -> None:
        super().__init__(f"{SCHEMA_MARKER} {message}")


class StramReadError(RuntimeError):
    """Reading a window range from a buffer server failed (server gone, timeout, reset)."""

    def __init__(self, message: str) -> None:
        super().__init__(f"{READ_MARKER} {message}")


def first_line(exc: Any) -> str:
    text = str(exc).strip()
    for line in text.splitlines():
        if line.strip():
            return line.strip()[:500]
    return type(exc).__name__ if isinstance(exc, BaseException) else ""


def marker_line(text: str, marker: str) -> str:
    for line in text.splitlines():
        if marker in line:
            return line[line.index(marker) + len(marker):].strip()
    return first_line(text)
