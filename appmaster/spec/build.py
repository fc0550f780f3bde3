"""Building a spec from plain data: every key, name, attribute, class, property and stream
checked, then the graph (no cycles, every required input connected, inline localities).
"""

from __future__ import annotations

import re
from typing import Any, Callable, Mapping

from stram.common import attributes as attrs
from stram.common.attributes import Scope, show
from stram.master.spec.affinity import check_affinity
from stram.master.spec.errors import SpecError
from stram.master.spec.imports import class_ref, load_operator_class, resolve
from stram.master.spec.limits import MAX_NAME_LENGTH, MAX_PARTITIONS
from stram.master.spec.parts import CODECS, INLINE_LOCALITIES, LOCALITIES, OperatorSpec, PortRef, SpecGraph, StreamSpec
from stram.master.spec.proptypes import Mismatch, conform
from stram.operator import InputOperator, Operator, input_ports, operator_properties, output_ports

_NAME_RE = re.compile(r"[A-Za-z_][A-Za-z0-9_-]*\Z")
_NAME_RULE = "use letters, digits, '_' and '-', starting with a letter or '_'"

_TOP_KEYS = ("name", "description", "attributes", "operators", "streams")
OPERATOR_KEYS = ("class", "properties", "partitions", "attributes", "port_attributes")
_STREAM_KEYS = ("from", "to", "locality", "codec")


class Builder:
    """Checks plain data for an :class:`AppSpec`, raising the first problem found.

    :meth:`fields` checks the parts (keys, names, attributes, operator classes
    and properties, streams) and gives the spec's fields; :meth:`check_graph`
    then checks the spec as a whole (``stram.master.spec.appspec`` does both).
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
    def fields(self, data: Any) -> dict[str, Any]:
        """The checked fields of an :class:`AppSpec` (its graph not checked yet)."""
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
            raise self.error("name", f"expected a non-empty string, got {show(name)}")
        self.check_length("name", "application name", name)
        if not name.isprintable() or name != name.strip():
            # a newline or a terminal escape in a name would forge rows of `stram list-apps`
            raise self.error("name", f"the application name {show(name)} must be printable characters, "
                                     f"without leading or trailing spaces")
        description = data.get("description") or ""
        if not isinstance(description, str):
            raise self.error("description", f"expected a string, got {_kind(description)}")
        attributes = self.attributes("attributes", data.get("attributes"), Scope.DAG)
        self.check_stats_listener(attributes)
        operators = self.operators(data.get("operators"))
        streams = self.streams(data.get("streams"), operators)
        return dict(name=name, attributes=attributes, operators=operators, streams=streams,
                    source=self.source, description=description)

    def check_length(self, path: str, what: str, name: str) -> None:
        """Names longer than :data:`~stram.master.spec.limits.MAX_NAME_LENGTH` are refused."""
        if len(name) > MAX_NAME_LENGTH:
            raise self.error(path, f"the {what} {show(name)} has {len(name)} characters; "
                                   f"at most {MAX_NAME_LENGTH} are allowed")

    def check_keys(self, path: str, data: dict, known: tuple[str, ...], what: str) -> None:
        for key in data:
            if key not in known:
                raise self.error(path, f"unknown {what} {show(key)} (known: {', '.join(known)})")

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
            listener = resolve(ref, "function")
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
            raise self.error("operators", f"invalid operator name {show(name)} ({_NAME_RULE})")
        self.check_length("operators", "operator name", name)
        path = f"operators.{name}"
        if not isinstance(data, dict):
            raise self.error(path, f"expected a mapping with at least 'class', got {_kind(data)}")
        self.check_keys(path, data, OPERATOR_KEYS, "key")
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
                             f"expected an integer >= 1, got {show(partitions)}")
        if partitions > MAX_PARTITIONS:
            raise self.error(f"{path}.partitions",
                             f"at most {MAX_PARTITIONS} partitions per operator, got {partitions}")
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
                raise self.error(key, f"unknown property {show(name)} of "
                                      f"{class_ref(cls)} ({listing})")
            try:
                result[name] = conform(item, known[name])
            except Mismatch as exc:
                raise self.error(key, f"expected {exc.expected}, got {show(item)}") from None
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
                raise self.error(path, no_port(operator, port, cls))
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
            raise self.error("streams", f"invalid stream name {show(name)} ({_NAME_RULE})")
        self.check_length("streams", "stream name", name)
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
                                           f"got {show(data['to'])}")
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
                                 f"got {show(locality)}")
            locality = locality.strip().upper()
        codec = data.get("codec")
        if codec is not None:
            if not isinstance(codec, str) or codec.strip().lower() not in CODECS:
                raise self.error(f"{path}.codec", f"expected one of {', '.join(CODECS)} "
                                                  f"(or leave it out), got {show(codec)}")
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
            raise self.error(path, no_port(ref.operator, ref.port, cls))
        if output and ref.port not in outputs:
            raise self.error(path, f"'{ref}' is an input port; 'from' takes an output port "
                                   f"({_port_list(ref.operator, outputs, 'output')})")
        if not output and ref.port not in inputs:
            raise self.error(path, f"'{ref}' is an output port; 'to' takes input ports "
                                   f"({_port_list(ref.operator, inputs, 'input')})")
        return ref

    # -- the whole graph ---------------------------------------------------
    def check_graph(self, spec: SpecGraph) -> None:
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
                                 f"no stream feeds {name!r} and {class_ref(cls)} is not an "
                                 f"InputOperator, so nothing would start its windows "
                                 f"(connect one of its input ports, or make it an "
                                 f"InputOperator)")
        self.event_time(spec)
        self.partition_keys(spec)
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
        check_affinity(spec, self.error)

    def event_time(self, spec: SpecGraph) -> None:
        """Event time travels from its source: an operator property listed in the class's
        ``event_time_inputs`` (e.g. a window's ``timestamp_field``) that is unset takes the
        ``timestamp_field`` of the nearest upstream operator that sets one, found through the
        operators between that change no event time."""
        for name, op in spec.operators.items():
            wanted = getattr(self.classes[name], "event_time_inputs", None) or {}
            for prop, port in wanted.items():
                if op.properties.get(prop) is not None or _fn_set(op.properties, prop):
                    continue
                window = op.properties.get("window")
                if isinstance(window, dict) and window.get("time") == "processing":
                    continue
                found = self._upstream_event_time(spec, name, port)
                if found is None:
                    raise self.error(f"operators.{name}.properties.{prop}",
                                     f"{class_ref(self.classes[name])} needs event time on its input "
                                     f"{port!r}: set {prop!r} here, or 'timestamp_field' on the source "
                                     f"upstream (e.g. JsonLinesReader), or use a processing-time window")
                op.properties[prop] = found

    def partition_keys(self, spec: SpecGraph) -> None:
        """A stream is partitioned by one key for all its readers: two partitioned readers with keyed
        state that ask for different keys (``Operator.partition_key``) would get wrong results, so are
        refused. A reader without keyed state (neither ``partition_key`` nor ``split_state`` of its
        own: a map, a filter) takes any key."""
        for stream in spec.streams.values():
            asked: dict[Any, str] = {}
            for sink in stream.sinks:
                op = spec.operators[sink.operator]
                cls = self.classes[sink.operator]
                if op.partitions <= 1 or not _keyed(cls):
                    continue
                key = cls.partition_key(op.properties, sink.port)
                asked.setdefault(key, sink.operator)
            if len(asked) > 1:
                readers = ", ".join(f"{name!r} by {_key_text(key)}" for key, name in asked.items())
                raise self.error(f"streams.{stream.name}",
                                 f"its partitioned readers ask for different partition keys ({readers}); a "
                                 f"stream is partitioned by one key: give each reader its own stream (from a "
                                 f"source of its own, or a step in between)")

    def _upstream_event_time(self, spec: SpecGraph, name: str, port: str) -> str | None:
        """The ``timestamp_field`` of the nearest upstream operator setting one (through ``port``)."""
        seen: set[str] = set()
        todo = [s.source.operator for s in spec.streams.values()
                if any(k.operator == name and k.port == port for k in s.sinks)]
        while todo:
            up = todo.pop(0)
            if up in seen:
                continue
            seen.add(up)
            field = spec.operators[up].properties.get("timestamp_field")
            if field is not None:
                return field
            if getattr(self.classes[up], "event_time_inputs", None):
                continue  # its results carry no event time of its inputs
            todo.extend(s.source.operator for s in spec.streams.values()
                        if any(k.operator == up for k in s.sinks))
        return None


def _keyed(cls: type[Operator]) -> bool:
    """The operator's state is keyed: it names its key or splits its state by key itself."""
    return (cls.partition_key.__func__ is not Operator.partition_key.__func__  # type: ignore[attr-defined]
            or cls.split_state.__func__ is not Operator.split_state.__func__)  # type: ignore[attr-defined]


def _key_text(key: str | None) -> str:
    if key is None:
        return "the default key"
    return f"field {key[len('field:'):]!r}" if key.startswith("field:") else "a key function"


def _fn_set(properties: Mapping[str, Any], prop: str) -> bool:
    """A ``..._field`` property's function twin (``timestamp_field`` -> ``timestamp_fn``) is set."""
    return prop.endswith("_field") and properties.get(prop[:-len("_field")] + "_fn") is not None


def check_size(spec: Any, error: Callable[[str, str], SpecError]) -> None:
    """Refuse a plan past MAX_PHYSICAL_OPERATORS or MAX_CONTAINERS before anything starts.

    An upper bound from the partition counts (every partition, plus a unifier for
    every partition downstream of a partitioned stream) settles most specs without
    planning; only a spec that may pass a limit is planned, exactly as the master will.
    """
    max_ops, max_containers = spec.attribute("MAX_PHYSICAL_OPERATORS"), spec.attribute("MAX_CONTAINERS")
    partitions = {name: op.partitions for name, op in spec.operators.items()}
    bound = sum(partitions.values()) + sum(partitions[s.operator] for st in spec.streams.values()
                                           if partitions[st.source.operator] > 1 for s in st.sinks)
    if bound <= min(max_ops, max_containers):
        return
    from stram.master.core.plan import PhysicalPlan  # only for the specs that need it

    plan = PhysicalPlan.from_spec(spec, max_containers=spec.attribute("CONTAINERS_MAX_COUNT"))
    if len(plan.operators) > max_ops:
        raise error("attributes.MAX_PHYSICAL_OPERATORS",
                    f"the plan has {len(plan.operators):,} physical operators (partitions and unifiers), "
                    f"more than MAX_PHYSICAL_OPERATORS={max_ops:,}; lower the partition counts, or raise "
                    f"the limit if the cluster can hold them")
    if len(plan.containers) > max_containers:
        raise error("attributes.MAX_CONTAINERS",
                    f"the plan needs {len(plan.containers):,} containers, more than MAX_CONTAINERS="
                    f"{max_containers:,}; lower the partition counts, pack operators with "
                    f"CONTAINERS_MAX_COUNT, or raise the limit")


def _find_cycle(spec: SpecGraph) -> list[str]:
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


# ----------------------------------------------------------------------- messages

def no_port(operator: str, port: Any, cls: type) -> str:
    return (f"operator {operator!r} has no port {show(port)} "
            f"({_port_list(operator, input_ports(cls), 'input')}; "
            f"{_port_list(operator, output_ports(cls), 'output')})")


def _port_list(operator: str, ports: Mapping[str, Any], kind: str) -> str:
    return f"{kind} ports of {operator}: {', '.join(ports) if ports else 'none'}"


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
        return f"the string {show(value)}"
    if isinstance(value, list):
        return "a list"
    if isinstance(value, dict):
        return "a mapping"
    return type(value).__name__
