"""YAML in and out: strict loading (duplicate keys rejected, errors with line and column) and dumping."""

from __future__ import annotations

from typing import Any

import yaml

from stram.master.spec.errors import SpecError

__all__ = ["load_yaml", "dump_yaml"]


def load_yaml(text: str, source: str) -> Any:
    """The plain data of a YAML document.

    Raises
    ------
    SpecError
        Invalid YAML (the reason gives line and column) or duplicate keys.
    """
    try:
        return yaml.load(text, Loader=_StrictLoader)  # noqa: S506 - a SafeLoader subclass
    except yaml.MarkedYAMLError as exc:
        raise SpecError(source, "", _yaml_reason(exc)) from None
    except yaml.YAMLError as exc:
        raise SpecError(source, "", f"invalid YAML: {exc}") from None
    except RecursionError:
        raise SpecError(source, "", "invalid YAML: nested too deeply to read (a spec needs a few levels)") from None


def dump_yaml(data: Any) -> str:
    """Plain data as YAML, keys in their given order."""
    return yaml.safe_dump(data, sort_keys=False, default_flow_style=False)


class _StrictLoader(yaml.SafeLoader):
    """A SafeLoader that rejects duplicate mapping keys instead of keeping the last."""


def _construct_mapping(loader: _StrictLoader, node: yaml.MappingNode) -> dict:
    seen: dict[Any, int] = {}
    for key_node, _ in node.value:
        if key_node.tag == "tag:yaml.org,2002:merge":
            continue  # keys merged in with '<<' may be overridden
        key = loader.construct_object(key_node, deep=True)
        try:
            first = seen.get(key)
        except TypeError:  # unhashable key: let the base constructor report it
            break
        if first is not None:
            raise yaml.constructor.ConstructorError(
                None, None, f"duplicate key {key!r} at line {key_node.start_mark.line + 1} "
                            f"(first at line {first + 1}); keep one", key_node.start_mark)
        seen[key] = key_node.start_mark.line
    return loader.construct_mapping(node, deep=True)


_StrictLoader.add_constructor(yaml.resolver.BaseResolver.DEFAULT_MAPPING_TAG,
                              _construct_mapping)


def _yaml_reason(exc: yaml.MarkedYAMLError) -> str:
    mark = exc.problem_mark or exc.context_mark
    where = f" at line {mark.line + 1}, column {mark.column + 1}" if mark else ""
    problem = exc.problem or exc.context or "unreadable"
    if problem.startswith("duplicate key"):
        return problem
    return f"invalid YAML{where}: {problem}"
