"""User functions as property values: cloudpickle, base64 text.

The dataflow API passes lambdas and closures to operators in containers the
way PySpark does, by value with cloudpickle; a property holds the base64 text
so that it travels in the spec, the journal and deploy info like any string.
"""

from __future__ import annotations

import base64
import functools
from typing import Any

import cloudpickle

__all__ = ["dumps", "loads", "PREFIX"]

#: What every pickled property value starts with (so a spec reader can tell one from a name).
PREFIX = "cloudpickle:"


def dumps(value: Any) -> str:
    """``value`` (a function, a closure, any picklable object) as property text."""
    return PREFIX + base64.b64encode(cloudpickle.dumps(value)).decode("ascii")


@functools.lru_cache(maxsize=256)
def loads(text: str) -> Any:
    """What :func:`dumps` gave; the same text gives the same object (cached)."""
    if not text.startswith(PREFIX):
        raise ValueError(f"not a pickled value (expected it to start with {PREFIX!r}): {text[:40]!r}")
    return cloudpickle.loads(base64.b64decode(text[len(PREFIX):]))
