"""Property values checked against the type hints of an operator's properties."""

from __future__ import annotations

import types
import typing
from typing import Any


class Mismatch(Exception):
    """A value does not fit a type hint; ``expected`` describes the hint."""

    def __init__(self, expected: str) -> None:
        super().__init__(expected)
        self.expected = expected


def is_union(hint: Any) -> bool:
    return typing.get_origin(hint) is typing.Union or isinstance(hint, types.UnionType)


def _type_name(hint: Any) -> str:
    """``int``, ``float``, ``int or null``, ``list[str]``, ``dict[str, int]``…"""
    if hint is type(None):
        return "null"
    if is_union(hint):
        return " or ".join(_type_name(a) for a in typing.get_args(hint))
    origin = typing.get_origin(hint)
    if origin is typing.Literal:
        return "one of " + ", ".join(repr(a) for a in typing.get_args(hint))
    if origin is not None:
        args = typing.get_args(hint)
        inner = ", ".join("..." if a is Ellipsis else _type_name(a) for a in args)
        return f"{getattr(origin, '__name__', str(origin))}[{inner}]" if args else origin.__name__
    return getattr(hint, "__name__", str(hint))


def conform(value: Any, hint: Any) -> Any:
    """``value`` checked against a property's type hint (ints become floats for ``float``).

    Unannotated, ``Any`` and unresolvable (string) hints accept anything.

    Raises
    ------
    Mismatch
        The value does not fit.
    """
    if hint is None or hint is Any or isinstance(hint, (str, typing.ForwardRef)) \
            or hint is object:
        return value
    if hint is type(None):
        if value is None:
            return None
        raise Mismatch("null")
    if is_union(hint):
        for arm in typing.get_args(hint):
            try:
                return conform(value, arm)
            except Mismatch:
                pass
        raise Mismatch(_type_name(hint))
    origin = typing.get_origin(hint)
    args = typing.get_args(hint)
    if origin is typing.Literal:
        if value in args:
            return value
        raise Mismatch(_type_name(hint))
    if hint is bool:
        if isinstance(value, bool):
            return value
        raise Mismatch("bool")
    if hint is int:
        if isinstance(value, int) and not isinstance(value, bool):
            return value
        raise Mismatch("int")
    if hint is float:
        if isinstance(value, (int, float)) and not isinstance(value, bool):
            return float(value)
        raise Mismatch("float")
    if hint is str:
        if isinstance(value, str):
            return value
        raise Mismatch("str (quote it)" if isinstance(value, (int, float, bool)) else "str")
    if hint is list or origin is list:
        if not isinstance(value, list):
            raise Mismatch(_type_name(hint))
        if not args:
            return value
        try:
            return [conform(v, args[0]) for v in value]
        except Mismatch:
            raise Mismatch(_type_name(hint)) from None
    if hint is tuple or origin is tuple:
        if not isinstance(value, (list, tuple)):
            raise Mismatch(_type_name(hint))
        try:
            if len(args) == 2 and args[1] is Ellipsis:
                return tuple(conform(v, args[0]) for v in value)
            if args:
                if len(args) != len(value):
                    raise Mismatch(_type_name(hint))
                return tuple(conform(v, a) for v, a in zip(value, args))
        except Mismatch:
            raise Mismatch(_type_name(hint)) from None
        return tuple(value)
    if hint is dict or origin is dict:
        if not isinstance(value, dict):
            raise Mismatch(_type_name(hint))
        if not args:
            return value
        try:
            return {conform(k, args[0]): conform(v, args[1]) for k, v in value.items()}
        except Mismatch:
            raise Mismatch(_type_name(hint)) from None
    if isinstance(hint, type):
        if isinstance(value, hint):
            return value
        raise Mismatch(_type_name(hint))
    return value  # typing constructs we do not check
