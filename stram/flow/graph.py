"""A flow's steps and how they compile into a spec: operator names, streams, pickled functions.

A :class:`Step` is one operator of the flow: its class (``module:Class``),
properties, partitions and the upstream ports feeding its input ports.
:func:`compile_spec` turns the steps into the plain data
:meth:`stram.master.spec.AppSpec.from_dict` takes:

* operators in the order the steps were made, named by their ``name=`` or,
  without one, by their kind (``map``, ``map_2``, ...), skipping the names
  given explicitly anywhere in the flow;
* one stream per upstream output port that something reads, named after its
  source step (``<step>`` for the port ``output``, ``<step>_<port>`` for others),
  to every input port it feeds;
* values wrapped in :class:`Pickled` (the user's functions) turned into text by
  :func:`stram.common.pickled.dumps` only now, once the app file has run to its
  end, so a function sees the globals defined after the step that uses it.
"""

from __future__ import annotations

import re
from collections import deque
from dataclasses import dataclass, field
from typing import Any, Iterable

from stram.common import pickled
from stram.flow.errors import FlowError

__all__ = ["Step", "Port", "Pickled", "compile_spec", "check_name", "check_partitions", "check_locality",
           "event_time_field", "OPAQUE"]

_NAME_RE = re.compile(r"[A-Za-z_][A-Za-z0-9_-]*\Z")
#: Longest operator or stream name a spec takes (stram.master.spec.limits).
MAX_NAME = 128
#: A step's ``event_time`` when its output records carry no source's event-time field (a window's results).
OPAQUE = "<opaque>"


@dataclass(frozen=True)
class Pickled:
    """A property value that compiles to ``stram.common.pickled.dumps(value)``."""

    value: Any


@dataclass(frozen=True)
class Port:
    """An output port of a step: what a stream reads."""

    step: "Step"
    port: str


@dataclass(eq=False)
class Step:
    """One operator of a flow.

    Attributes
    ----------
    kind:
        The base of its derived name (``map``, ``count``, ...).
    class_name:
        ``module:Class`` of its operator.
    properties:
        Its properties; :class:`Pickled` values are pickled at compile time.
    outputs:
        Its output port names (a stream may read each).
    inputs:
        (upstream port, own input port, locality of that stream or None) per connected input.
    event_time:
        For a source, the record field holding its event time (None: it declares none); for a step
        whose ``output`` records carry no source's field, :data:`OPAQUE`; None for the rest, which
        pass their input's event time through.
    attributes:
        Its operator attributes (``attributes:`` under the operator in a spec).
    """

    kind: str
    class_name: str
    properties: dict[str, Any] = field(default_factory=dict)
    outputs: tuple[str, ...] = ("output",)
    inputs: list[tuple[Port, str, str | None]] = field(default_factory=list)
    name: str | None = None
    partitions: int | None = None
    event_time: str | None = None
    attributes: dict[str, Any] = field(default_factory=dict)
    #: Its place in the flow (creation order).
    index: int = 0

    @property
    def label(self) -> str:
        """How messages name it before names are resolved."""
        return repr(self.name) if self.name else f"the {self.kind} step #{self.index + 1}"


def check_name(name: Any) -> str | None:
    """``name`` if it is a valid operator name (or None)."""
    if name is None:
        return None
    if not isinstance(name, str) or not _NAME_RE.match(name):
        raise FlowError(f"invalid step name {name!r}: use letters, digits, '_' and '-', starting with a letter "
                        f"or '_'")
    if len(name) > MAX_NAME:
        raise FlowError(f"step name {name[:20]!r}... has {len(name)} characters; at most {MAX_NAME}")
    return name


def check_partitions(partitions: Any) -> int | None:
    if partitions is None:
        return None
    if isinstance(partitions, bool) or not isinstance(partitions, int) or partitions < 1:
        raise FlowError(f"partitions must be an integer >= 1, got {partitions!r}")
    return partitions


def check_locality(locality: Any) -> str | None:
    if locality is None:
        return None
    from stram.master.spec.parts import LOCALITIES  # the spec's list (a light module)
    value = locality.strip().upper() if isinstance(locality, str) else locality
    if value not in LOCALITIES:
        raise FlowError(f"locality must be one of {', '.join(LOCALITIES)} (or None), got {locality!r}")
    return value


def event_time_field(start: Port, what: str) -> str:
    """The event-time field of the records on ``start``: that of the nearest upstream source that declares
    one, walking back through steps that pass records on (``what`` names the step asking, for messages).

    Raises
    ------
    FlowError
        No source upstream declares one, a step on the way makes new records (a window's results), or
        the nearest sources declare different fields.
    """
    seen: set[int] = set()
    level = [start]
    while level:
        found: dict[str, str] = {}
        opaque: list[str] = []
        following: deque[Port] = deque()
        for port in level:
            step = port.step
            if id(step) in seen:
                continue
            seen.add(id(step))
            if step.event_time == OPAQUE and port.port == "output":
                opaque.append(step.label)
            elif step.event_time is not None:
                found.setdefault(step.event_time, step.label)
            elif not step.inputs:
                continue  # a source without an event-time field: another branch may have one
            else:
                following.extend(upstream for upstream, _, _ in step.inputs)
        if len(found) > 1:
            listing = ", ".join(f"{f!r} ({label})" for f, label in found.items())
            raise FlowError(f"{what}: the nearest sources upstream declare different event-time fields "
                            f"({listing}); pass timestamp= to say which")
        if found:
            return next(iter(found))
        if opaque:
            raise FlowError(f"{what}: its input comes from {opaque[0]}, whose results carry no source's "
                            f"event-time field; pass timestamp= (a field or a function record -> epoch ms)")
        level = list(following)
    raise FlowError(f"{what}: no event time: no source upstream declares a timestamp field (read_jsonl("
                    f"..., timestamp_field=...)); pass timestamp= (a field or a function record -> epoch ms), "
                    f"or use a processing-time window (time=\"processing\")")


def _names(steps: list[Step]) -> dict[int, str]:
    """Step index -> its operator name: the given one, or its kind numbered past every taken name."""
    taken = {s.name for s in steps if s.name}
    out: dict[int, str] = {}
    counts: dict[str, int] = {}
    for step in steps:
        if step.name:
            out[step.index] = step.name
            continue
        n = counts.get(step.kind, 0)
        while True:
            n += 1
            candidate = step.kind if n == 1 else f"{step.kind}_{n}"
            if candidate not in taken:
                break
        counts[step.kind] = n
        taken.add(candidate)
        out[step.index] = candidate
    return out


def _plain(value: Any) -> Any:
    """A property value as spec data: :class:`Pickled` values pickled, containers copied."""
    if isinstance(value, Pickled):
        return pickled.dumps(value.value)
    if isinstance(value, dict):
        return {k: _plain(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [_plain(v) for v in value]
    return value


def compile_spec(name: str, attributes: dict[str, Any], description: str, steps: Iterable[Step]) -> dict[str, Any]:
    """The spec (plain data for ``AppSpec.from_dict``) of a flow's steps.

    Raises
    ------
    FlowError
        The flow has no steps, or two readers of one stream ask for different localities.
    """
    steps = list(steps)
    if not steps:
        raise FlowError(f"flow {name!r} has no steps: start it with a source (flow.read_jsonl(...), "
                        f"flow.read_lines(...), flow.source(...))")
    names = _names(steps)
    operators: dict[str, Any] = {}
    for step in steps:
        entry: dict[str, Any] = {"class": step.class_name}
        if step.properties:
            entry["properties"] = _plain(step.properties)
        if step.partitions not in (None, 1):
            entry["partitions"] = step.partitions
        if step.attributes:
            entry["attributes"] = dict(step.attributes)
        operators[names[step.index]] = entry
    # streams: one per read output port, ordered by source step, then by the order ports were first read
    readers: dict[tuple[int, str], list[tuple[str, str | None, str]]] = {}
    for step in steps:
        for upstream, port, locality in step.inputs:
            readers.setdefault((upstream.step.index, upstream.port), []).append(
                (f"{names[step.index]}.{port}", locality, names[step.index]))
    streams: dict[str, Any] = {}
    for (index, port), sinks in sorted(readers.items(), key=lambda kv: kv[0][0]):
        source = names[index]
        stream_name = source if port == "output" else f"{source}_{port}"
        base, n = stream_name, 1
        while stream_name in streams:
            n += 1
            stream_name = f"{base}_{n}"
        entry = {"from": f"{source}.{port}", "to": [sink for sink, _, _ in sinks]}
        asked = {loc: reader for _, loc, reader in sinks if loc is not None}
        if len(asked) > 1:
            listing = ", ".join(f"{reader} asks {loc}" for loc, reader in asked.items())
            raise FlowError(f"the stream from {source}.{port} has one locality for all its readers, but "
                            f"{listing}; give it on one of them")
        if asked:
            entry["locality"] = next(iter(asked))
        streams[stream_name] = entry
    spec: dict[str, Any] = {"name": name}
    if description:
        spec["description"] = description
    if attributes:
        spec["attributes"] = dict(attributes)
    spec["operators"] = operators
    if streams:
        spec["streams"] = streams
    return spec
