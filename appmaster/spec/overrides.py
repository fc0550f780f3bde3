"""``-D NAME=VALUE`` overrides: where each key lands in a spec's data and how its value is read."""

from __future__ import annotations

import typing
from typing import Any

import yaml

from stram.common import attributes as attrs
from stram.master.spec.build import OPERATOR_KEYS, no_port
from stram.master.spec.errors import SpecError
from stram.master.spec.parts import SpecGraph
from stram.master.spec.proptypes import is_union
from stram.operator import input_ports, operator_properties, output_ports

_RESERVED_OPERATOR_KEYS = frozenset(OPERATOR_KEYS)
_OVERRIDE_FORMS = ("NAME=VALUE for a DAG attribute, operators.<op>.<property>=VALUE, "
                   "operators.<op>.attributes.<ATTR>=VALUE or operators.<op>.partitions=N")


def apply_override(spec: SpecGraph, data: dict[str, Any], item: str) -> tuple[str, str]:
    """Apply one ``-D`` override to ``data`` (``spec.to_dict()``).

    Returns the key path it set and its ``-D`` label.
    """
    key, sep, raw = str(item).partition("=")
    key = key.strip()
    label = f"-D {key}"
    if not sep or not key:
        raise SpecError(spec.source, f"-D {item}", f"expected KEY=VALUE ({_OVERRIDE_FORMS})")
    parts = key.split(".")
    if len(parts) == 2 and parts[0] == "attributes":
        parts = parts[1:]
    if len(parts) == 1:
        name = _canonical_or_same(parts[0])
        data.setdefault("attributes", {})[name] = raw
        return f"attributes.{name}", label
    if parts[0] == "operators" and len(parts) >= 3:
        op = parts[1]
        if op not in spec.operators:
            raise SpecError(spec.source, label, f"unknown operator {op!r} "
                                                f"(operators: {', '.join(spec.operators)})")
        entry = data["operators"][op]
        rest = parts[2:]
        if rest == ["partitions"]:
            entry["partitions"] = _yaml_value(spec.source, label, raw)
            return f"operators.{op}.partitions", label
        if rest == ["class"]:
            entry["class"] = raw.strip()
            return f"operators.{op}.class", label
        if len(rest) == 2 and rest[0] == "attributes":
            name = _canonical_or_same(rest[1])
            entry.setdefault("attributes", {})[name] = raw
            return f"operators.{op}.attributes.{name}", label
        if len(rest) == 3 and rest[0] == "port_attributes":
            port, name = rest[1], _canonical_or_same(rest[2])
            cls = spec.operators[op].load_class()
            if port not in input_ports(cls) and port not in output_ports(cls):
                raise SpecError(spec.source, label, no_port(op, port, cls))
            entry.setdefault("port_attributes", {}).setdefault(port, {})[name] = raw
            return f"operators.{op}.port_attributes.{port}.{name}", label
        if len(rest) == 2 and rest[0] == "properties":
            rest = rest[1:]
        if len(rest) == 1 and rest[0] not in _RESERVED_OPERATOR_KEYS:
            prop = rest[0]
            hint = operator_properties(spec.operators[op].load_class()).get(prop)
            entry.setdefault("properties", {})[prop] = _property_value(spec.source, label,
                                                                       raw, hint)
            return f"operators.{op}.properties.{prop}", label
    if parts[0] == "streams" and len(parts) == 3 and parts[2] in ("locality", "codec"):
        stream = parts[1]
        if stream not in spec.streams:
            raise SpecError(spec.source, label, f"unknown stream {stream!r} "
                                                f"(streams: {', '.join(spec.streams) or 'none'})")
        data["streams"][stream][parts[2]] = _yaml_value(spec.source, label, raw)
        return f"streams.{stream}.{parts[2]}", label
    raise SpecError(spec.source, label, f"cannot override {key!r} (use {_OVERRIDE_FORMS})")


def _canonical_or_same(name: str) -> str:
    try:
        return attrs.canonical_name(name)
    except ValueError:
        return name  # reported with the right key path when the spec is validated


def _yaml_value(source: str, label: str, raw: str) -> Any:
    try:
        return yaml.safe_load(raw)
    except yaml.YAMLError as exc:
        problem = getattr(exc, "problem", None) or str(exc)
        raise SpecError(source, label, f"cannot read value {raw!r} as YAML: {problem} "
                                       f"(quote it)") from None
    except RecursionError:
        raise SpecError(source, label, "cannot read the value as YAML: nested too deeply") from None


def _property_value(source: str, label: str, raw: str, hint: Any) -> Any:
    """A property's ``-D`` value: raw text for ``str`` properties, else YAML."""
    if hint is str:
        return raw
    arms = typing.get_args(hint) if is_union(hint) else ()
    if arms and set(arms) == {str, type(None)}:
        return None if raw.strip() in ("null", "~") else raw
    return _yaml_value(source, label, raw)
