"""The application spec: a strict, typed model of a stram YAML spec, validated as a whole."""

from __future__ import annotations

import copy
import heapq
import importlib
import re
import sys
import types
import typing
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Iterable, Mapping

import yaml

from appmaster import attributes as attrs
from appmaster.attributes import Scope, _show
from appmaster.errors import UserError
from container.operator import (InputOperator, Operator, input_ports, operator_properties,
                                output_ports)

__all__ = [
    "SpecError",
    "PortRef",
    "OperatorSpec",
    "StreamSpec",
    "AppSpec",
    "LOCALITIES",
    "INLINE_LOCALITIES",
    "CODECS",
    "load_operator_class",
]

#: Stream localities, tightest first.
LOCALITIES = ("THREAD_LOCAL", "CONTAINER_LOCAL", "NODE_LOCAL", "RACK_LOCAL")
#: Localities that put both ends of a stream in one container.
INLINE_LOCALITIES = ("THREAD_LOCAL", "CONTAINER_LOCAL")
#: Stream codecs.
CODECS = ("pickle", "arrow")

_NAME_RE = re.compile(r"[A-Za-z_][A-Za-z0-9_-]*\Z")
_NAME_RULE = "use letters, digits, '_' and '-', starting with a letter or '_'"
_PORT_REF_RE = re.compile(r"([A-Za-z_][A-Za-z0-9_-]*)\.([A-Za-z_][A-Za-z0-9_]*)\Z")
_CLASS_REF_RE = re.compile(r"[A-Za-z_][A-Za-z0-9_]*(\.[A-Za-z_][A-Za-z0-9_]*)*"
                           r":[A-Za-z_][A-Za-z0-9_]*(\.[A-Za-z_][A-Za-z0-9_]*)*\Z")

_TOP_KEYS = ("name", "description", "attributes", "operators", "streams")
_OPERATOR_KEYS = ("class", "properties", "partitions", "attributes", "port_attributes")
_STREAM_KEYS = ("from", "to", "locality", "codec")


# ----------------------------------------------------------------------- errors

class SpecError(UserError, ValueError):
    """A spec that cannot run: where (file and key path) and why (with how to fix it).

    Parameters
    ----------
    source:
        The spec's file, or ``<string>``/``<dict>``.
    key_path:
        Dotted path of the offending key (``operators.split.partitions``), or
        ``-D <key>`` for a bad override, or ``""`` for whole-file problems.
    reason:
        What is wrong and how to fix it.
    """

    def __init__(self, source: str, key_path: str, reason: str) -> None:
        self.source = source
        self.key_path = key_path
        self.reason = reason
        super().__init__(str(self))

    def __str__(self) -> str:
        if self.key_path:
            return f"{self.source}: {self.key_path}: {self.reason}"
        return f"{self.source}: {self.reason}"

    def __reduce__(self) -> tuple[Any, ...]:
        return (type(self), (self.source, self.key_path, self.reason))


# ----------------------------------------------------------------------- model

@dataclass(frozen=True)
class PortRef:
    """A port of a logical operator, written ``"operator.port"``."""

    operator: str
    port: str

    @classmethod
    def parse(cls, text: Any) -> "PortRef":
        """Parse ``"operator.port"``.

        Raises
        ------
        ValueError
            ``text`` is not of that form.
        """
        match = _PORT_REF_RE.match(text) if isinstance(text, str) else None
        if not match:
            raise ValueError(f"expected 'operator.port', got {_show(text)}")
        return cls(match.group(1), match.group(2))

    def __str__(self) -> str:
        return f"{self.operator}.{self.port}"


@dataclass
class OperatorSpec:
    """A logical operator: its class, properties, partition count and attributes."""

    name: str
    #: ``"module:Class"`` of an :class:`~container.operator.Operator` subclass.
    class_name: str
    #: Explicitly set properties, already checked against the class's annotations.
    properties: dict[str, Any] = field(default_factory=dict)
    partitions: int = 1
    #: Explicitly set operator attributes (canonical names, coerced values).
    attributes: dict[str, Any] = field(default_factory=dict)
    #: Port name -> explicitly set port attributes.
    port_attributes: dict[str, dict[str, Any]] = field(default_factory=dict)

    def load_class(self) -> type[Operator]:
        """Import and return the operator class.

        Raises
        ------
        ValueError
            The class cannot be imported or is no Operator subclass.
        """
        return load_operator_class(self.class_name)

    def instantiate(self) -> Operator:
        """A new instance of the operator class with the spec's properties set."""
        operator = self.load_class()()
        for name, value in self.properties.items():
            setattr(operator, name, copy.deepcopy(value))
        return operator

    def to_dict(self) -> dict[str, Any]:
        """The operator's entry in a spec (keys left out when at their defaults)."""
        out: dict[str, Any] = {"class": self.class_name}
        if self.properties:
            out["properties"] = _plain(self.properties)
        if self.partitions != 1:
            out["partitions"] = self.partitions
        if self.attributes:
            out["attributes"] = _plain(self.attributes)
        if self.port_attributes:
            out["port_attributes"] = _plain(self.port_attributes)
        return out


@dataclass
class StreamSpec:
    """A logical stream from one output port to one or more input ports."""

    name: str
    source: PortRef
    sinks: list[PortRef]
    #: One of :data:`LOCALITIES`, or None (no constraint).
    locality: str | None = None
    #: One of :data:`CODECS`, or None (the ports' codec).
    codec: str | None = None

    def to_dict(self) -> dict[str, Any]:
        """The stream's entry in a spec."""
        out: dict[str, Any] = {"from": str(self.source), "to": [str(s) for s in self.sinks]}
        if self.locality is not None:
            out["locality"] = self.locality
        if self.codec is not None:
            out["codec"] = self.codec
        return out


@dataclass
class AppSpec:
    """A validated application: operators, streams and attributes.

    Build it with :meth:`from_file`, :meth:`from_yaml` or :meth:`from_dict`;
    they reject anything that could not run, raising :class:`SpecError`.
    """

    name: str
    #: Explicitly set DAG attributes (canonical names, coerced values).
    attributes: dict[str, Any] = field(default_factory=dict)
    #: Operators in file order.
    operators: dict[str, OperatorSpec] = field(default_factory=dict)
    streams: dict[str, StreamSpec] = field(default_factory=dict)
    #: Where the spec came from (used in error messages; not compared).
    source: str = field(default="<dict>", compare=False)
    description: str = ""

    # -- loading -----------------------------------------------------------
    @classmethod
    def from_file(cls, path: str | Path, overrides: Iterable[str] = ()) -> "AppSpec":
        """Read and validate a YAML spec file.

        Parameters
        ----------
        path:
            The spec file.
        overrides:
            ``-D`` strings ``"NAME=VALUE"``, applied in order; see :meth:`with_overrides`.

        Raises
        ------
        SpecError
            The file cannot be read, or the spec or an override is invalid.
        """
        source = str(path)
        try:
            text = Path(path).read_text(encoding="utf-8")
        except (OSError, UnicodeDecodeError) as exc:
            raise SpecError(source, "", f"cannot read the spec: {exc}") from None
        return cls.from_yaml(text, source=source, overrides=overrides)

    @classmethod
    def from_yaml(cls, text: str, source: str = "<string>",
                  overrides: Iterable[str] = ()) -> "AppSpec":
        """Parse and validate a YAML spec.

        Parameters
        ----------
        text:
            The YAML document.
        source:
            Name used in error messages (the file path).
        overrides:
            ``-D`` strings, see :meth:`with_overrides`.

        Raises
        ------
        SpecError
            Invalid YAML (the reason gives line and column), duplicate keys,
            or an invalid spec or override.
        """
        try:
            data = yaml.load(text, Loader=_StrictLoader)  # noqa: S506 - a SafeLoader subclass
        except yaml.MarkedYAMLError as exc:
            raise SpecError(source, "", _yaml_reason(exc)) from None
        except yaml.YAMLError as exc:
            raise SpecError(source, "", f"invalid YAML: {exc}") from None
        return cls.from_dict(data, source=source, overrides=overrides)

    @classmethod
    def from_dict(cls, data: Any, source: str = "<dict>",
                  overrides: Iterable[str] = ()) -> "AppSpec":
        """Validate a spec given as plain data (what ``yaml.safe_load`` returns).

        Raises
        ------
        SpecError
            The spec or an override is invalid.
        """
        spec = _Builder(source).build(copy.deepcopy(data))
        overrides = list(overrides)
        return spec.with_overrides(overrides) if overrides else spec

    def with_overrides(self, overrides: Iterable[str]) -> "AppSpec":
        """A copy of this spec with ``-D`` overrides applied, validated again.

        Each override is ``"KEY=VALUE"``; VALUE is read as YAML (so numbers and
        booleans get their types) except for properties declared ``str``, which
        keep the raw text, and attributes, which convert strings themselves.
        Keys:

        - ``NAME`` or ``attributes.NAME``: a DAG attribute;
        - ``operators.<op>.<property>`` or ``operators.<op>.properties.<property>``;
        - ``operators.<op>.attributes.<ATTR>``, ``operators.<op>.partitions``,
          ``operators.<op>.class``, ``operators.<op>.port_attributes.<port>.<ATTR>``;
        - ``streams.<stream>.locality``, ``streams.<stream>.codec`` (``null`` unsets).

        Raises
        ------
        SpecError
            With key path ``-D <key>`` when an override is malformed or its
            value is invalid; other problems the overrides cause name their
            key path and say that the overrides were applied.
        """
        data = self.to_dict()
        origin: dict[str, str] = {}
        for item in overrides:
            path, label = _apply_override(self, data, item)
            origin[path] = label
        return _Builder(self.source, origin).build(data)

    def validate(self) -> None:
        """Check a spec that was built or changed by hand.

        Raises
        ------
        SpecError
            As :meth:`from_dict` would for ``self.to_dict()``.
        """
        _Builder(self.source).build(self.to_dict())

    # -- writing -----------------------------------------------------------
    def to_dict(self) -> dict[str, Any]:
        """Plain data that :meth:`from_dict` turns back into an equal spec."""
        out: dict[str, Any] = {"name": self.name}
        if self.description:
            out["description"] = self.description
        if self.attributes:
            out["attributes"] = _plain(self.attributes)
        out["operators"] = {name: op.to_dict() for name, op in self.operators.items()}
        if self.streams:
            out["streams"] = {name: s.to_dict() for name, s in self.streams.items()}
        return out

    def to_yaml(self) -> str:
        """The spec as YAML, in file order."""
        return yaml.safe_dump(self.to_dict(), sort_keys=False, default_flow_style=False)

    # -- queries -----------------------------------------------------------
    def attribute(self, name: str, operator: str | None = None) -> Any:
        """Effective value of an attribute.

        Parameters
        ----------
        name:
            Attribute name or alias.
        operator:
            A logical operator name: its own value wins over the DAG's.

        Returns
        -------
        The operator's value if set (and the attribute has operator scope),
        else the DAG's value if set, else the default.

        Raises
        ------
        ValueError
            Unknown attribute name.
        KeyError
            Unknown operator.
        """
        canonical = attrs.canonical_name(name)
        if operator is not None:
            own = self.operators[operator].attributes
            if canonical in own:
                return own[canonical]
        if canonical in self.attributes:
            return self.attributes[canonical]
        return attrs.default(canonical)

    def port_attribute(self, operator: str, port: str, name: str) -> Any:
        """Effective value of a port attribute (set on the port, else the default)."""
        canonical = attrs.canonical_name(name)
        own = self.operators[operator].port_attributes.get(port, {})
        return own[canonical] if canonical in own else attrs.default(canonical)

    def topological_order(self) -> list[str]:
        """Operator names, every operator after all of its upstream operators.

        Ties are broken by file order, so the order is deterministic.
        """
        index = {name: i for i, name in enumerate(self.operators)}
        indegree = {name: len(self.upstream(name)) for name in self.operators}
        ready = [index[n] for n, d in indegree.items() if d == 0]
        heapq.heapify(ready)
        names = list(self.operators)
        order: list[str] = []
        while ready:
            name = names[heapq.heappop(ready)]
            order.append(name)
            for down in self.downstream(name):
                indegree[down] -= 1
                if indegree[down] == 0:
                    heapq.heappush(ready, index[down])
        return order

    def upstream(self, operator: str) -> list[str]:
        """Names of the operators feeding ``operator`` (each once, in stream order)."""
        found: dict[str, None] = {}
        for stream in self.input_streams(operator).values():
            found[stream.source.operator] = None
        return list(found)

    def downstream(self, operator: str) -> list[str]:
        """Names of the operators ``operator`` feeds (each once, in stream order)."""
        found: dict[str, None] = {}
        for stream in self.output_streams(operator).values():
            for sink in stream.sinks:
                found[sink.operator] = None
        return list(found)

    def input_streams(self, operator: str) -> dict[str, StreamSpec]:
        """Input port name -> the stream feeding it, for the connected ports of ``operator``."""
        return {sink.port: stream for stream in self.streams.values()
                for sink in stream.sinks if sink.operator == operator}

    def output_streams(self, operator: str) -> dict[str, StreamSpec]:
        """Output port name -> the stream it is the source of, for ``operator``."""
        return {stream.source.port: stream for stream in self.streams.values()
                if stream.source.operator == operator}


# ----------------------------------------------------------------------- classes

def load_operator_class(class_name: str) -> type[Operator]:
    """Import ``"module:Class"`` and check that it is an Operator subclass.

    Raises
    ------
    ValueError
        With the reason: malformed name, module not importable (with the
        ImportError), no such class (listing the operators the module has), or
        not an Operator subclass.
    """
    obj = _resolve(class_name, "Class")
    if not isinstance(obj, type):
        raise ValueError(f"{class_name!r} is not a class")
    if not issubclass(obj, Operator):
        raise ValueError(f"{class_name!r} is not a subclass of container.operator.Operator")
    return obj


def _resolve(ref: str, what: str) -> Any:
    """Import ``"module:attr.path"``; ``what`` names the object in messages."""
    if not isinstance(ref, str) or not _CLASS_REF_RE.match(ref):
        raise ValueError(f"expected 'module:{what}', got {_show(ref)}")
    module_name, _, attr_path = ref.partition(":")
    try:
        module = importlib.import_module(module_name)
    except ImportError as exc:
        raise ValueError(f"cannot import module {module_name!r}: {exc}") from None
    except Exception as exc:  # a module that fails while importing
        raise ValueError(f"importing module {module_name!r} failed: "
                         f"{type(exc).__name__}: {exc}") from None
    obj: Any = module
    for part in attr_path.split("."):
        if not hasattr(obj, part):
            hint = ""
            if obj is module and what == "Class":
                found = [n for n, v in vars(module).items()
                         if isinstance(v, type) and issubclass(v, Operator)
                         and (v.__module__ == module_name
                              or v.__module__.startswith(module_name + "."))]
                hint = f" (operators there: {', '.join(found)})" if found else ""
            raise ValueError(f"module {module_name!r} has no {part!r}{hint}")
        obj = getattr(obj, part)
    return obj


# ----------------------------------------------------------------------- building

class _Builder:
    """Turns plain data into an :class:`AppSpec`, raising the first problem found.

    ``origin`` maps key paths set by ``-D`` overrides to their ``-D`` label, so
    that errors in them point at the override rather than at the file.
    """

    def __init__(self, source: str, origin: Mapping[str, str] | None = None) -> None:
        self.source = source
        self.origin = dict(origin or {})
        self.classes: dict[str, type[Operator]] = {}

    def error(self, path: str, reason: str) -> SpecError:
        if path in self.origin:
            return SpecError(self.source, self.origin[path], reason)
        if self.origin:
            reason += " (with the -D overrides applied)"
        return SpecError(self.source, path, reason)

    # -- top level ---------------------------------------------------------
    def build(self, data: Any) -> AppSpec:
        if data is None:
            raise self.error("", "the spec is empty (expected a mapping with name, "
                                 "operators and streams)")
        if not isinstance(data, dict):
            raise self.error("", f"the top level must be a mapping with name, operators and "
                                 f"streams, got {_kind(data)}")
        self.check_keys("", data, _TOP_KEYS, "top-level key")
        if "name" not in data:
            raise self.error("", "missing key 'name' (the application's name)")
        name = data["name"]
        if not isinstance(name, str) or not name.strip():
            raise self.error("name", f"expected a non-empty string, got {_show(name)}")
        description = data.get("description") or ""
        if not isinstance(description, str):
            raise self.error("description", f"expected a string, got {_kind(description)}")
        attributes = self.attributes("attributes", data.get("attributes"), Scope.DAG)
        self.check_stats_listener(attributes)
        operators = self.operators(data.get("operators"))
        streams = self.streams(data.get("streams"), operators)
        spec = AppSpec(name=name, attributes=attributes, operators=operators, streams=streams,
                       source=self.source, description=description)
        self.check_graph(spec)
        return spec

    def check_keys(self, path: str, data: dict, known: tuple[str, ...], what: str) -> None:
        for key in data:
            if key not in known:
                raise self.error(path, f"unknown {what} {_show(key)} (known: {', '.join(known)})")

    def mapping(self, path: str, value: Any, what: str) -> dict:
        """``value`` as a dict (``None`` is empty); anything else is an error."""
        if value is None:
            return {}
        if not isinstance(value, dict):
            raise self.error(path, f"expected a mapping of {what}, got {_kind(value)}")
        return value

    def attributes(self, path: str, value: Any, scope: Scope) -> dict[str, Any]:
        raw = self.mapping(path, value, "attribute names to values")
        result: dict[str, Any] = {}
        set_as: dict[str, str] = {}
        for name, item in raw.items():
            key = f"{path}.{name}"
            try:
                coerced = attrs.coerce_attribute(name, item, scope)
                canonical = attrs.canonical_name(name)
            except ValueError as exc:
                raise self.error(key, str(exc)) from None
            if canonical in set_as:
                raise self.error(key, f"{name!r} and {set_as[canonical]!r} are the same "
                                      f"attribute; set it once")
            set_as[canonical] = name
            result[canonical] = coerced
        return result

    def check_stats_listener(self, attributes: dict[str, Any]) -> None:
        ref = attributes.get("STATS_LISTENER")
        if ref is None:
            return
        try:
            listener = _resolve(ref, "function")
        except ValueError as exc:
            raise self.error("attributes.STATS_LISTENER", str(exc)) from None
        if not callable(listener):
            raise self.error("attributes.STATS_LISTENER", f"{ref!r} is not callable")

    # -- operators ---------------------------------------------------------
    def operators(self, value: Any) -> dict[str, OperatorSpec]:
        raw = self.mapping("operators", value, "operator names to operators")
        if not raw:
            raise self.error("operators", "no operators (add at least one under 'operators')")
        return {name: self.operator(name, item) for name, item in raw.items()}

    def operator(self, name: Any, data: Any) -> OperatorSpec:
        if not isinstance(name, str) or not _NAME_RE.match(name):
            raise self.error("operators", f"invalid operator name {_show(name)} ({_NAME_RULE})")
        path = f"operators.{name}"
        if not isinstance(data, dict):
            raise self.error(path, f"expected a mapping with at least 'class', got {_kind(data)}")
        self.check_keys(path, data, _OPERATOR_KEYS, "key")
        if "class" not in data:
            raise self.error(path, "missing key 'class' (\"module:Class\" of an Operator "
                                   "subclass)")
        class_name = data["class"]
        try:
            cls = load_operator_class(class_name)
        except ValueError as exc:
            raise self.error(f"{path}.class", str(exc)) from None
        self.classes[name] = cls
        properties = self.properties(f"{path}.properties", data.get("properties"), cls)
        partitions = data.get("partitions", 1)
        if isinstance(partitions, bool) or not isinstance(partitions, int) or partitions < 1:
            raise self.error(f"{path}.partitions",
                             f"expected an integer >= 1, got {_show(partitions)}")
        attributes = self.attributes(f"{path}.attributes", data.get("attributes"),
                                     Scope.OPERATOR)
        port_attributes = self.port_attributes(f"{path}.port_attributes",
                                               data.get("port_attributes"), name, cls)
        return OperatorSpec(name=name, class_name=class_name, properties=properties,
                            partitions=partitions, attributes=attributes,
                            port_attributes=port_attributes)

    def properties(self, path: str, value: Any, cls: type[Operator]) -> dict[str, Any]:
        raw = self.mapping(path, value, "property names to values")
        known = operator_properties(cls)
        result: dict[str, Any] = {}
        for name, item in raw.items():
            key = f"{path}.{name}"
            if name not in known:
                listing = (f"known: {', '.join(known)}" if known
                           else f"{cls.__name__} has no properties")
                raise self.error(key, f"unknown property {_show(name)} of "
                                      f"{_class_ref(cls)} ({listing})")
            try:
                result[name] = _conform(item, known[name])
            except _Mismatch as exc:
                raise self.error(key, f"expected {exc.expected}, got {_show(item)}") from None
        return result

    def port_attributes(self, path: str, value: Any, operator: str,
                        cls: type[Operator]) -> dict[str, dict[str, Any]]:
        raw = self.mapping(path, value, "port names to attributes")
        inputs, outputs = input_ports(cls), output_ports(cls)
        result: dict[str, dict[str, Any]] = {}
        for port, item in raw.items():
            if port in inputs:
                scope = Scope.INPUT_PORT
            elif port in outputs:
                scope = Scope.OUTPUT_PORT
            else:
                raise self.error(path, _no_port(operator, port, cls))
            result[port] = self.attributes(f"{path}.{port}", item, scope)
        return result

    # -- streams -----------------------------------------------------------
    def streams(self, value: Any, operators: dict[str, OperatorSpec]) -> dict[str, StreamSpec]:
        raw = self.mapping("streams", value, "stream names to streams")
        sources: dict[PortRef, str] = {}
        sinks: dict[PortRef, str] = {}
        return {name: self.stream(name, item, operators, sources, sinks)
                for name, item in raw.items()}

    def stream(self, name: Any, data: Any, operators: dict[str, OperatorSpec],
               sources: dict[PortRef, str], sinks: dict[PortRef, str]) -> StreamSpec:
        if not isinstance(name, str) or not _NAME_RE.match(name):
            raise self.error("streams", f"invalid stream name {_show(name)} ({_NAME_RULE})")
        path = f"streams.{name}"
        if not isinstance(data, dict):
            raise self.error(path, f"expected a mapping with 'from' and 'to', got {_kind(data)}")
        self.check_keys(path, data, _STREAM_KEYS, "key")
        if "from" not in data:
            raise self.error(path, "missing key 'from' (the 'operator.port' of an output port)")
        if "to" not in data:
            raise self.error(path, "missing key 'to' (a list of 'operator.port' of input ports)")
        source = self.port_ref(f"{path}.from", data["from"], operators, output=True)
        if source in sources:
            raise self.error(f"{path}.from",
                             f"output port '{source}' is already the source of stream "
                             f"{sources[source]!r} (list all its sinks in that stream's 'to')")
        sources[source] = name
        targets = data["to"]
        if isinstance(targets, str):
            targets = [targets]
        if not isinstance(targets, list) or not targets:
            raise self.error(f"{path}.to", f"expected a non-empty list of 'operator.port', "
                                           f"got {_show(data['to'])}")
        refs: list[PortRef] = []
        for target in targets:
            sink = self.port_ref(f"{path}.to", target, operators, output=False)
            if sink in sinks:
                raise self.error(f"{path}.to",
                                 f"input port '{sink}' is already fed by stream "
                                 f"{sinks[sink]!r} (an input port takes one stream)")
            sinks[sink] = name
            refs.append(sink)
        locality = data.get("locality")
        if locality is not None:
            if not isinstance(locality, str) or locality.strip().upper() not in LOCALITIES:
                raise self.error(f"{path}.locality",
                                 f"expected one of {', '.join(LOCALITIES)} (or leave it out), "
                                 f"got {_show(locality)}")
            locality = locality.strip().upper()
        codec = data.get("codec")
        if codec is not None:
            if not isinstance(codec, str) or codec.strip().lower() not in CODECS:
                raise self.error(f"{path}.codec", f"expected one of {', '.join(CODECS)} "
                                                  f"(or leave it out), got {_show(codec)}")
            codec = codec.strip().lower()
        return StreamSpec(name=name, source=source, sinks=refs, locality=locality, codec=codec)

    def port_ref(self, path: str, text: Any, operators: dict[str, OperatorSpec],
                 output: bool) -> PortRef:
        try:
            ref = PortRef.parse(text)
        except ValueError as exc:
            raise self.error(path, str(exc)) from None
        if ref.operator not in operators:
            raise self.error(path, f"unknown operator {ref.operator!r} in '{ref}' "
                                   f"(operators: {', '.join(operators)})")
        cls = self.classes[ref.operator]
        inputs, outputs = input_ports(cls), output_ports(cls)
        if ref.port not in inputs and ref.port not in outputs:
            raise self.error(path, _no_port(ref.operator, ref.port, cls))
        if output and ref.port not in outputs:
            raise self.error(path, f"'{ref}' is an input port; 'from' takes an output port "
                                   f"({_port_list(ref.operator, outputs, 'output')})")
        if not output and ref.port not in inputs:
            raise self.error(path, f"'{ref}' is an output port; 'to' takes input ports "
                                   f"({_port_list(ref.operator, inputs, 'input')})")
        return ref

    # -- the whole graph ---------------------------------------------------
    def check_graph(self, spec: AppSpec) -> None:
        cycle = _find_cycle(spec)
        if cycle:
            raise self.error("streams", f"the streams form a cycle: {' -> '.join(cycle)} "
                                        f"(an application must be a DAG)")
        for name in spec.operators:
            cls = self.classes[name]
            connected = spec.input_streams(name)
            missing = [p for p, port in input_ports(cls).items()
                       if p not in connected and not port.optional]
            if missing:
                listed = ", ".join(repr(p) for p in missing)
                one = len(missing) == 1
                raise self.error(f"operators.{name}",
                                 f"input {'port' if one else 'ports'} {listed} "
                                 f"{'is' if one else 'are'} not connected (feed "
                                 f"{'it' if one else 'them'} from a stream's 'to', or declare "
                                 f"{'it' if one else 'them'} InputPort(optional=True))")
            if not connected and not issubclass(cls, InputOperator):
                raise self.error(f"operators.{name}",
                                 f"no stream feeds {name!r} and {_class_ref(cls)} is not an "
                                 f"InputOperator, so nothing would start its windows "
                                 f"(connect one of its input ports, or make it an "
                                 f"InputOperator)")
        for stream in spec.streams.values():
            if stream.locality not in INLINE_LOCALITIES:
                continue
            up = spec.operators[stream.source.operator]
            for sink in stream.sinks:
                down = spec.operators[sink.operator]
                if down.partitions != up.partitions:
                    raise self.error(
                        f"streams.{stream.name}.locality",
                        f"{stream.locality} needs the same partition count at both ends, but "
                        f"{up.name!r} has {_count(up.partitions, 'partition')} and "
                        f"{down.name!r} has {_count(down.partitions, 'partition')} (drop the "
                        f"locality or give both the same partitions)")


def _find_cycle(spec: AppSpec) -> list[str]:
    """Operator names along one cycle, first repeated at the end; [] when there is none."""
    WHITE, GREY, BLACK = 0, 1, 2
    color = dict.fromkeys(spec.operators, WHITE)
    stack: list[str] = []

    def visit(name: str) -> list[str]:
        color[name] = GREY
        stack.append(name)
        for down in spec.downstream(name):
            if color[down] == GREY:
                return stack[stack.index(down):] + [down]
            if color[down] == WHITE:
                found = visit(down)
                if found:
                    return found
        stack.pop()
        color[name] = BLACK
        return []

    for name in spec.operators:
        if color[name] == WHITE:
            found = visit(name)
            if found:
                return found
    return []


# ----------------------------------------------------------------------- overrides

_RESERVED_OPERATOR_KEYS = frozenset(_OPERATOR_KEYS)
_OVERRIDE_FORMS = ("NAME=VALUE for a DAG attribute, operators.<op>.<property>=VALUE, "
                   "operators.<op>.attributes.<ATTR>=VALUE or operators.<op>.partitions=N")


def _apply_override(spec: AppSpec, data: dict[str, Any], item: str) -> tuple[str, str]:
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
                raise SpecError(spec.source, label, _no_port(op, port, cls))
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


def _property_value(source: str, label: str, raw: str, hint: Any) -> Any:
    """A property's ``-D`` value: raw text for ``str`` properties, else YAML."""
    if hint is str:
        return raw
    arms = typing.get_args(hint) if _is_union(hint) else ()
    if arms and set(arms) == {str, type(None)}:
        return None if raw.strip() in ("null", "~") else raw
    return _yaml_value(source, label, raw)


# ----------------------------------------------------------------------- property types

class _Mismatch(Exception):
    """A value does not fit a type hint; ``expected`` describes the hint."""

    def __init__(self, expected: str) -> None:
        super().__init__(expected)
        self.expected = expected


def _is_union(hint: Any) -> bool:
    return typing.get_origin(hint) is typing.Union or isinstance(hint, types.UnionType)


def _type_name(hint: Any) -> str:
    """``int``, ``float``, ``int or null``, ``list[str]``, ``dict[str, int]``…"""
    if hint is type(None):
        return "null"
    if _is_union(hint):
        return " or ".join(_type_name(a) for a in typing.get_args(hint))
    origin = typing.get_origin(hint)
    if origin is typing.Literal:
        return "one of " + ", ".join(repr(a) for a in typing.get_args(hint))
    if origin is not None:
        args = typing.get_args(hint)
        inner = ", ".join("..." if a is Ellipsis else _type_name(a) for a in args)
        return f"{getattr(origin, '__name__', str(origin))}[{inner}]" if args else origin.__name__
    return getattr(hint, "__name__", str(hint))


def _conform(value: Any, hint: Any) -> Any:
    """``value`` checked against a property's type hint (ints become floats for ``float``).

    Unannotated, ``Any`` and unresolvable (string) hints accept anything.

    Raises
    ------
    _Mismatch
        The value does not fit.
    """
    if hint is None or hint is Any or isinstance(hint, (str, typing.ForwardRef)) \
            or hint is object:
        return value
    if hint is type(None):
        if value is None:
            return None
        raise _Mismatch("null")
    if _is_union(hint):
        for arm in typing.get_args(hint):
            try:
                return _conform(value, arm)
            except _Mismatch:
                pass
        raise _Mismatch(_type_name(hint))
    origin = typing.get_origin(hint)
    args = typing.get_args(hint)
    if origin is typing.Literal:
        if value in args:
            return value
        raise _Mismatch(_type_name(hint))
    if hint is bool:
        if isinstance(value, bool):
            return value
        raise _Mismatch("bool")
    if hint is int:
        if isinstance(value, int) and not isinstance(value, bool):
            return value
        raise _Mismatch("int")
    if hint is float:
        if isinstance(value, (int, float)) and not isinstance(value, bool):
            return float(value)
        raise _Mismatch("float")
    if hint is str:
        if isinstance(value, str):
            return value
        raise _Mismatch("str (quote it)" if isinstance(value, (int, float, bool)) else "str")
    if hint is list or origin is list:
        if not isinstance(value, list):
            raise _Mismatch(_type_name(hint))
        if not args:
            return value
        try:
            return [_conform(v, args[0]) for v in value]
        except _Mismatch:
            raise _Mismatch(_type_name(hint)) from None
    if hint is tuple or origin is tuple:
        if not isinstance(value, (list, tuple)):
            raise _Mismatch(_type_name(hint))
        try:
            if len(args) == 2 and args[1] is Ellipsis:
                return tuple(_conform(v, args[0]) for v in value)
            if args:
                if len(args) != len(value):
                    raise _Mismatch(_type_name(hint))
                return tuple(_conform(v, a) for v, a in zip(value, args))
        except _Mismatch:
            raise _Mismatch(_type_name(hint)) from None
        return tuple(value)
    if hint is dict or origin is dict:
        if not isinstance(value, dict):
            raise _Mismatch(_type_name(hint))
        if not args:
            return value
        try:
            return {_conform(k, args[0]): _conform(v, args[1]) for k, v in value.items()}
        except _Mismatch:
            raise _Mismatch(_type_name(hint)) from None
    if isinstance(hint, type):
        if isinstance(value, hint):
            return value
        raise _Mismatch(_type_name(hint))
    return value  # typing constructs we do not check


# ----------------------------------------------------------------------- helpers

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


def _no_port(operator: str, port: Any, cls: type) -> str:
    return (f"operator {operator!r} has no port {_show(port)} "
            f"({_port_list(operator, input_ports(cls), 'input')}; "
            f"{_port_list(operator, output_ports(cls), 'output')})")


def _port_list(operator: str, ports: Mapping[str, Any], kind: str) -> str:
    return f"{kind} ports of {operator}: {', '.join(ports) if ports else 'none'}"


def _class_ref(cls: type) -> str:
    """``module:Class``; a class its package re-exports is named through the package
    (``container.receivers:SocketTextReceiver``, not ``container.receivers.builtin:...``)."""
    parts = cls.__module__.split(".")
    for i in range(len(parts) - 1, 0, -1):
        package = ".".join(parts[:i])
        if getattr(sys.modules.get(package), cls.__qualname__, None) is cls:
            return f"{package}:{cls.__qualname__}"
    return f"{cls.__module__}:{cls.__qualname__}"


def _count(n: int, noun: str) -> str:
    return f"{n} {noun}" + ("" if n == 1 else "s")


def _kind(value: Any) -> str:
    """YAML-ish name of a value's type, for messages."""
    if value is None:
        return "null"
    if isinstance(value, bool):
        return "a boolean"
    if isinstance(value, (int, float)):
        return f"the number {value!r}"
    if isinstance(value, str):
        return f"the string {_show(value)}"
    if isinstance(value, list):
        return "a list"
    if isinstance(value, dict):
        return "a mapping"
    return type(value).__name__




def _plain(value: Any) -> Any:
    """A deep copy with tuples turned into lists (plain YAML data)."""
    if isinstance(value, dict):
        return {k: _plain(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [_plain(v) for v in value]
    return copy.deepcopy(value)
