"""Request bodies of the admin API, checked against a small schema before anything is done.

A body is empty or one JSON object of at most :data:`MAX_DEPTH` levels and
:data:`MAX_BODY_BYTES` bytes; each field has a type (an integer is a JSON
integer: not ``1.9``, not ``true``) and, for integers, a range. Anything else
raises :class:`BadBody` (HTTP 400 with the reason); a bigger body is answered
413 before it is read (Flask's ``MAX_CONTENT_LENGTH``, and the HTTP server's own limit).
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from typing import Any

__all__ = ["BadBody", "Field", "MAX_BODY_BYTES", "MAX_DEPTH", "parse"]

#: The largest request body the admin API reads.
MAX_BODY_BYTES = 64 * 1024
#: How deeply a body's JSON may nest (an object holding an object is depth 2).
MAX_DEPTH = 4


class BadBody(ValueError):
    """A request body that does not fit its endpoint's schema (HTTP 400)."""


@dataclass(frozen=True)
class Field:
    """One field of a body: its JSON type (``int``, ``str``, ``bool``, ``float``), whether it
    must be present, and the inclusive range of an integer."""

    type: type
    required: bool = False
    low: int | None = None
    high: int | None = None


_NAMES = {int: "an integer", str: "a string", bool: "true or false", float: "a number"}


def _depth(value: Any) -> int:
    """How deeply ``value`` nests (iteratively: a deep body cannot exhaust the stack here)."""
    deepest, stack = 0, [(value, 1)]
    while stack:
        item, level = stack.pop()
        if isinstance(item, (dict, list)):
            deepest = max(deepest, level)
            if level > MAX_DEPTH:
                return level
            stack.extend((child, level + 1) for child in (item.values() if isinstance(item, dict) else item))
    return deepest


def _check(name: str, value: Any, field: Field) -> None:
    want = field.type
    ok = isinstance(value, want) and not (want is not bool and isinstance(value, bool))
    if want is float and isinstance(value, int) and not isinstance(value, bool):
        ok = True
    if not ok:
        raise BadBody(f"'{name}' must be {_NAMES.get(want, want.__name__)}, got {json.dumps(value)[:40]}")
    if want is int:
        if field.low is not None and value < field.low:
            raise BadBody(f"'{name}' must be at least {field.low}, got {value}")
        if field.high is not None and value > field.high:
            raise BadBody(f"'{name}' must be at most {field.high}, got {value}")


def parse(raw: bytes, schema: dict[str, Field]) -> dict[str, Any]:
    """The body ``raw`` as a dict checked against ``schema`` (an empty body is ``{}``).

    Raises
    ------
    BadBody
        Not JSON, not an object, too deep, an unknown field, a missing or mistyped one.
    """
    if len(raw) > MAX_BODY_BYTES:
        raise BadBody(f"the body is {len(raw)} bytes; at most {MAX_BODY_BYTES} are read")
    text = raw.strip()
    if not text:
        body: Any = {}
    else:
        try:
            body = json.loads(text)
        except (ValueError, RecursionError) as exc:
            raise BadBody(f"the body is not JSON: {str(exc)[:80]}") from None
    if not isinstance(body, dict):
        raise BadBody(f"the body must be a JSON object, got {type(body).__name__ if body is not None else 'null'}")
    if _depth(body) > MAX_DEPTH:
        raise BadBody(f"the body nests deeper than {MAX_DEPTH} levels")
    unknown = sorted(set(body) - set(schema))
    if unknown:
        known = ", ".join(sorted(schema)) or "none"
        raise BadBody(f"unknown field(s) {', '.join(map(repr, unknown))} (known: {known})")
    for name, field in schema.items():
        if name not in body:
            if field.required:
                raise BadBody(f"'{name}' is required")
            continue
        _check(name, body[name], field)
    return body

