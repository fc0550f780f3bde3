"""Streams of a flow and their methods: each call adds one step (one operator) and returns its output.

Every method takes ``name=`` (the operator's name; derived from the method
when left out), ``partitions=`` and ``locality=`` (the locality of the stream
into the new step: ``THREAD_LOCAL``, ``CONTAINER_LOCAL``, ``NODE_LOCAL``, ``RACK_LOCAL``).

* :class:`Stream`: ``map``, ``filter``, ``flat_map``, ``map_batches``,
  ``inspect``, ``branch``, ``union``, ``key_by``, ``write_jsonl``,
  ``write_parquet``, ``to`` (any operator);
* :class:`KeyedStream` (``key_by``): ``reduce``, ``fold``, ``window``,
  ``join``, ``interval_join``, ``dedup``;
* :class:`WindowedStream` (``window``): ``count``, ``sum``, ``min``, ``max``,
  ``mean``, ``top_k``, ``collect``, ``fold``.

Windowed aggregates, joins and dedup compile to the event-time operators
(``stram.operators.window``, ``.join``, ``.dedup``) with the very properties a
YAML spec would give them: a key or value given as a field name is
``key_field`` / ``F`` of ``aggregate``, a function is a pickled ``*_fn``.
"""

from __future__ import annotations

from typing import Any, Callable

from stram.common.imports import ReferenceLoadError, load_class
from stram.flow.errors import FlowError
from stram.flow.graph import OPAQUE, Pickled, Port, Step, check_locality, check_name, check_partitions, event_time_field
from stram.flow.ops import UNION_INPUTS, Aggregator
from stram.operator import Operator, input_ports, operator_properties, output_ports

__all__ = ["Stream", "KeyedStream", "WindowedStream", "operator_class_name", "checked_properties", "snake"]

_OPS = "stram.flow.ops"
_WINDOW = "stram.operators.window:WindowedAggregate"
_JOIN = "stram.operators.join"
_DEDUP = "stram.operators.dedup:Dedup"
_WINDOW_KINDS = {"tumbling": ("size_ms",), "sliding": ("size_ms", "slide_ms"), "session": ("gap_ms",)}
_HOWS = ("inner", "left")


def _function(fn: Any, what: str) -> Pickled:
    if not callable(fn):
        raise FlowError(f"{what} takes a function, got {type(fn).__name__} {fn!r:.60}")
    return Pickled(fn)


def _field_or_fn(value: Any, what: str) -> tuple[str | None, Pickled | None]:
    """(field name, None) or (None, pickled function)."""
    if isinstance(value, str) and value:
        return value, None
    if callable(value):
        return None, Pickled(value)
    raise FlowError(f"{what} takes a field name or a function, got {value!r:.60}")


def operator_class_name(operator: Any) -> tuple[str, type[Operator]]:
    """(``module:Class``, class) of an operator given as a class or as ``"module:Class"``.

    Raises
    ------
    FlowError
        Not an Operator subclass, not importable, or defined in the app file itself (containers
        import operator classes by name; the app file is not importable there).
    """
    if isinstance(operator, str):
        try:
            cls = load_class(operator)
        except ReferenceLoadError as exc:
            raise FlowError(f"operator {operator!r}: {exc}") from None
        if not (isinstance(cls, type) and issubclass(cls, Operator)):
            raise FlowError(f"{operator!r} is not an Operator subclass")
        return operator, cls
    if not (isinstance(operator, type) and issubclass(operator, Operator)):
        raise FlowError(f"expected an Operator subclass or 'module:Class', got {operator!r:.80}")
    module = operator.__module__
    if module in ("__main__",) or module.startswith("__stram_app"):
        raise FlowError(f"operator class {operator.__qualname__} is defined in the app file; containers load "
                        f"operator classes by name, so put it in a module beside the app file and import it")
    if "<locals>" in operator.__qualname__:
        raise FlowError(f"operator class {operator.__qualname__} is defined inside a function; define it at "
                        f"the top level of a module")
    return f"{module}:{operator.__qualname__}", operator


def snake(name: str) -> str:
    """``KeyCounter`` -> ``key_counter``: a step's kind from its class name."""
    out = []
    for i, ch in enumerate(name):
        if ch.isupper() and i and (not name[i - 1].isupper() or (i + 1 < len(name) and name[i + 1].islower())):
            out.append("_")
        out.append(ch.lower())
    return "".join(out)


class Stream:
    """The records of one output port of a step. Made by a :class:`~stram.flow.Flow` source or a method."""

    def __init__(self, flow: Any, step: Step, port: str = "output") -> None:
        self.flow = flow
        self.step = step
        self.port = port

    def __repr__(self) -> str:
        return f"<{type(self).__name__} {self.step.label}.{self.port}>"

    # -- adding steps --------------------------------------------------------
    def then(self, kind: str, class_name: str, properties: dict[str, Any] | None = None, *, name: Any = None,
             partitions: Any = None, locality: Any = None, port: str = "input",
             outputs: tuple[str, ...] = ("output",), event_time: str | None = None,
             more: tuple[tuple["Stream", str], ...] = ()) -> Step:
        """Add a step reading this stream on its input ``port`` (and each of ``more`` on its port)."""
        step = Step(kind=kind, class_name=class_name, properties=dict(properties or {}), outputs=outputs,
                    name=check_name(name), partitions=check_partitions(partitions), event_time=event_time)
        loc = check_locality(locality)
        for stream, into in ((self, port), *more):
            if not isinstance(stream, Stream):
                raise FlowError(f"{kind}: expected a Stream, got {type(stream).__name__}")
            if stream.flow is not self.flow:
                raise FlowError(f"{kind}: {stream!r} belongs to flow {stream.flow.name!r}, not {self.flow.name!r}")
            step.inputs.append((Port(stream.step, stream.port), into, loc))
        self.flow.add_step(step)
        return step

    def _simple(self, kind: str, cls: str, fn: Any, name: Any, partitions: Any, locality: Any) -> "Stream":
        step = self.then(kind, f"{_OPS}:{cls}", {"fn": _function(fn, kind)}, name=name, partitions=partitions,
                         locality=locality)
        return Stream(self.flow, step)

    def port_of(self, port: str) -> "Stream":
        """Another output port of the same step (of an operator added with :meth:`to`)."""
        if port not in self.step.outputs:
            raise FlowError(f"{self.step.label} has no output port {port!r} (its ports: "
                            f"{', '.join(self.step.outputs) or 'none'})")
        return Stream(self.flow, self.step, port)

    @property
    def late(self) -> "Stream":
        """The records a windowed aggregate, join or dedup found too late (its ``late`` port), unchanged."""
        if "late" not in self.step.outputs:
            raise FlowError(f"{self.step.label} has no late records: only a windowed aggregate, a join or "
                            f"dedup has a .late stream")
        return Stream(self.flow, self.step, "late")

    # -- per record ------------------------------------------------------------
    def map(self, fn: Callable[[Any], Any], *, name: Any = None, partitions: Any = None,
            locality: Any = None) -> "Stream":
        """``fn(record)`` for every record."""
        return self._simple("map", "Map", fn, name, partitions, locality)

    def filter(self, pred: Callable[[Any], Any], *, name: Any = None, partitions: Any = None,
               locality: Any = None) -> "Stream":
        """The records for which ``pred(record)`` is true."""
        return self._simple("filter", "Filter", pred, name, partitions, locality)

    def flat_map(self, fn: Callable[[Any], Any], *, name: Any = None, partitions: Any = None,
                 locality: Any = None) -> "Stream":
        """Every item of the iterable ``fn(record)``."""
        return self._simple("flat_map", "FlatMap", fn, name, partitions, locality)

    def map_batches(self, fn: Callable[[Any], Any], *, name: Any = None, partitions: Any = None,
                    locality: Any = None) -> "Stream":
        """``fn(pyarrow.RecordBatch) -> RecordBatch`` on each batch of dict records; its rows go on as dicts."""
        return self._simple("map_batches", "MapBatches", fn, name, partitions, locality)

    def inspect(self, fn: Callable[[Any], Any], *, name: Any = None, partitions: Any = None,
                locality: Any = None) -> "Stream":
        """Calls ``fn(record)`` for every record; the records go on unchanged."""
        return self._simple("inspect", "Inspect", fn, name, partitions, locality)

    def branch(self, pred: Callable[[Any], Any], *, name: Any = None, partitions: Any = None,
               locality: Any = None) -> tuple["Stream", "Stream"]:
        """(records for which ``pred`` is true, the others)."""
        step = self.then("branch", f"{_OPS}:Branch", {"fn": _function(pred, "branch")}, name=name,
                         partitions=partitions, locality=locality, outputs=("output", "rest"))
        return Stream(self.flow, step), Stream(self.flow, step, "rest")

    def union(self, *others: "Stream", name: Any = None, partitions: Any = None,
              locality: Any = None) -> "Stream":
        """This stream's records and those of ``others``, merged (more than eight streams: unions chained)."""
        if not others:
            raise FlowError("union takes at least one other stream")
        streams = [self, *others]
        while True:
            head, streams = streams[:UNION_INPUTS], streams[UNION_INPUTS:]
            more = tuple((s, f"input{i}") for i, s in enumerate(head[1:], start=1))
            step = head[0].then("union", f"{_OPS}:Union", name=None if streams else name, partitions=partitions,
                                locality=locality, port="input0", more=more)
            merged = Stream(self.flow, step)
            if not streams:
                return merged
            streams = [merged, *streams]

    def key_by(self, key: str | Callable[[Any], Any]) -> "KeyedStream":
        """The same records, keyed by a dict field (name) or a function ``record -> key``."""
        _field_or_fn(key, "key_by")
        return KeyedStream(self.flow, self.step, self.port, key)

    # -- sinks and any operator ---------------------------------------------------
    def write_jsonl(self, path: str, *, name: Any = None, partitions: Any = None, locality: Any = None) -> None:
        """Each record as one JSON line in ``*.jsonl`` files under the directory ``path``
        (``stram.operators.io:JsonLinesOutput``; exactly once in EXACTLY_ONCE mode)."""
        self.then("write_jsonl", "stram.operators.io:JsonLinesOutput", {"path": path}, name=name,
                  partitions=partitions, locality=locality, outputs=())

    def write_parquet(self, path: str, partition_by: Any = None, *, name: Any = None, partitions: Any = None,
                      locality: Any = None) -> None:
        """The records as Parquet files under ``path`` (``stram.operators.parquet:ParquetOutput``)."""
        props: dict[str, Any] = {"path": path}
        if partition_by is not None:
            props["partition_by"] = partition_by
        self.then("write_parquet", "stram.operators.parquet:ParquetOutput", props, name=name,
                  partitions=partitions, locality=locality, outputs=())

    def to(self, operator: Any, port: str = "input", *, name: Any = None, partitions: Any = None,
           locality: Any = None, **properties: Any) -> "Stream | None":
        """Feed this stream to any operator (a class or ``"module:Class"``) on its input ``port``, with
        ``properties`` (a function given as a property value is pickled). Returns its ``output`` port (or its
        only output port; :meth:`port_of` gives others), None for an operator without outputs."""
        class_name, cls = operator_class_name(operator)
        if port not in input_ports(cls):
            raise FlowError(f"{class_name} has no input port {port!r} (its input ports: "
                            f"{', '.join(input_ports(cls)) or 'none'})")
        props = checked_properties(class_name, cls, properties)
        outputs = tuple(output_ports(cls))
        step = self.then(snake(cls.__name__), class_name, props, name=name, partitions=partitions,
                         locality=locality, port=port, outputs=outputs)
        if not outputs:
            return None
        return Stream(self.flow, step, "output" if "output" in outputs else outputs[0])


def checked_properties(class_name: str, cls: type[Operator], properties: dict[str, Any]) -> dict[str, Any]:
    """Properties for a step of ``cls``: known names only; functions pickled."""
    known = operator_properties(cls)
    out: dict[str, Any] = {}
    for key, value in properties.items():
        if key not in known:
            raise FlowError(f"{class_name} has no property {key!r} (its properties: {', '.join(known) or 'none'})")
        out[key] = Pickled(value) if callable(value) and not isinstance(value, type) else value
    return out


class KeyedStream(Stream):
    """A stream with a key (a dict field or a function): running folds, windows, joins and dedup by key."""

    def __init__(self, flow: Any, step: Step, port: str, key: str | Callable[[Any], Any]) -> None:
        super().__init__(flow, step, port)
        self.key = key

    def key_props(self, prefix: str = "") -> dict[str, Any]:
        """``{prefix + "key_field": name}`` or ``{prefix + "key_fn": pickled function}``."""
        field, fn = _field_or_fn(self.key, "key_by")
        return {f"{prefix}key_field": field} if field else {f"{prefix}key_fn": fn}

    def timestamp_props(self, timestamp: Any, what: str, prefix: str = "") -> dict[str, Any]:
        """The ``timestamp_field`` / ``timestamp_fn`` property: ``timestamp`` if given, else the event-time
        field of the nearest source upstream."""
        if timestamp is None:
            return {f"{prefix}timestamp_field": event_time_field(Port(self.step, self.port), what)}
        field, fn = _field_or_fn(timestamp, f"{what}: timestamp=")
        return {f"{prefix}timestamp_field": field} if field else {f"{prefix}timestamp_fn": fn}

    # -- running folds --------------------------------------------------------
    def reduce(self, fn: Callable[[Any, Any], Any], *, name: Any = None, partitions: Any = None,
               locality: Any = None) -> Stream:
        """Per key, ``acc = fn(acc, record)`` from the key's first record on; at each streaming window's end
        ``{"key": k, "value": acc}`` for the keys that changed in it (``stram.flow.ops:KeyedReduce``)."""
        props = {**self.key_props(), "fn": _function(fn, "reduce")}
        return Stream(self.flow, self.then("reduce", f"{_OPS}:KeyedReduce", props, name=name,
                                           partitions=partitions, locality=locality, event_time=OPAQUE))

    def fold(self, init: Any, fn: Callable[[Any, Any], Any], *, name: Any = None, partitions: Any = None,
             locality: Any = None) -> Stream:
        """As :meth:`reduce`, starting each key's ``acc`` from a copy of ``init``."""
        props = {**self.key_props(), "fn": _function(fn, "fold"), "init": Pickled(init)}
        return Stream(self.flow, self.then("fold", f"{_OPS}:KeyedReduce", props, name=name,
                                           partitions=partitions, locality=locality, event_time=OPAQUE))

    # -- event time ------------------------------------------------------------
    def window(self, windower: dict[str, Any], allowed_lateness_ms: int = 0, trigger: dict[str, Any] | None = None,
               timestamp: Any = None) -> "WindowedStream":
        """Windows per key (``windows.tumbling``, ``sliding``, ``session``); aggregate with a method of the
        result. ``timestamp``: a field or a function record -> epoch ms (default: the source's field)."""
        window = _check_window(windower)
        props: dict[str, Any] = self.key_props()
        if window.get("time", "event") == "event":
            props.update(self.timestamp_props(timestamp, f"window {window['kind']}"))
        elif timestamp is not None:
            raise FlowError("a processing-time window takes no timestamp=")
        props["window"] = window
        if allowed_lateness_ms:
            props["allowed_lateness_ms"] = _millis("allowed_lateness_ms", allowed_lateness_ms)
        if trigger is not None:
            if not isinstance(trigger, dict):
                raise FlowError(f"trigger takes a dict {{early_ms, late, mode}}, got {trigger!r:.60}")
            props["trigger"] = dict(trigger)
        return WindowedStream(self, props)

    def join(self, other: "KeyedStream", window: dict[str, Any], how: str = "inner", *, allowed_lateness_ms: int = 0,
             timestamp: Any = None, other_timestamp: Any = None, name: Any = None, partitions: Any = None,
             locality: Any = None) -> Stream:
        """Pairs of this stream's (left) and ``other``'s (right) records with the same key in the same window:
        ``{"key", "window_start", "window_end", "left", "right"}`` (``stram.operators.join:WindowedJoin``)."""
        props = self._join_props(other, how, timestamp, other_timestamp, "join")
        props["window"] = _check_window(window)
        if allowed_lateness_ms:
            props["allowed_lateness_ms"] = _millis("allowed_lateness_ms", allowed_lateness_ms)
        return self._join("join", f"{_JOIN}:WindowedJoin", other, props, name, partitions, locality)

    def interval_join(self, other: "KeyedStream", lower_ms: int, upper_ms: int, how: str = "inner", *,
                      allowed_lateness_ms: int | None = None, timestamp: Any = None, other_timestamp: Any = None,
                      name: Any = None, partitions: Any = None, locality: Any = None) -> Stream:
        """Pairs with the same key where right's time - left's time is in [lower_ms, upper_ms]:
        ``{"key", "left", "right"}`` (``stram.operators.join:IntervalJoin``). ``allowed_lateness_ms``: a
        record further behind the watermark is late (default: late only once it can match nothing);
        0 keeps the least state."""
        for label, value in (("lower_ms", lower_ms), ("upper_ms", upper_ms)):
            if isinstance(value, bool) or not isinstance(value, int):
                raise FlowError(f"interval_join: {label} must be an integer of milliseconds, got {value!r}")
        if lower_ms > upper_ms:
            raise FlowError(f"interval_join: lower_ms ({lower_ms}) is above upper_ms ({upper_ms})")
        props = self._join_props(other, how, timestamp, other_timestamp, "interval_join")
        props.update(lower_ms=lower_ms, upper_ms=upper_ms)
        if allowed_lateness_ms is not None:
            props["allowed_lateness_ms"] = _millis("allowed_lateness_ms", allowed_lateness_ms)
        return self._join("interval_join", f"{_JOIN}:IntervalJoin", other, props, name, partitions, locality)

    def _join_props(self, other: Any, how: str, timestamp: Any, other_timestamp: Any, what: str) -> dict[str, Any]:
        if not isinstance(other, KeyedStream):
            raise FlowError(f"{what}: the other stream must be keyed too (other.key_by(...)), got {other!r}")
        if how not in _HOWS:
            raise FlowError(f"{what}: how must be one of {', '.join(_HOWS)}, got {how!r}")
        props = {**self.key_props("left_"), **other.key_props("right_"),
                 **self.timestamp_props(timestamp, f"{what} (left)", "left_"),
                 **other.timestamp_props(other_timestamp, f"{what} (right)", "right_")}
        if how != "inner":
            props["how"] = how
        return props

    def _join(self, kind: str, cls: str, other: "KeyedStream", props: dict[str, Any], name: Any, partitions: Any,
              locality: Any) -> Stream:
        step = self.then(kind, cls, props, name=name, partitions=partitions, locality=locality, port="left",
                         outputs=("output", "late"), event_time=OPAQUE, more=((other, "right"),))
        return Stream(self.flow, step)

    def dedup(self, within_ms: int, *, timestamp: Any = None, name: Any = None, partitions: Any = None,
              locality: Any = None) -> Stream:
        """A record unless one with the same key and an event time within ``within_ms`` went out
        (``stram.operators.dedup:Dedup``)."""
        props = {**self.key_props(), **self.timestamp_props(timestamp, "dedup"),
                 "within_ms": _millis("within_ms", within_ms, positive=True)}
        step = self.then("dedup", _DEDUP, props, name=name, partitions=partitions, locality=locality,
                         outputs=("output", "late"))
        return Stream(self.flow, step)


def _millis(label: str, value: Any, positive: bool = False) -> int:
    if isinstance(value, bool) or not isinstance(value, int) or value < (1 if positive else 0):
        raise FlowError(f"{label} must be an integer of milliseconds {'> 0' if positive else '>= 0'}, got {value!r}")
    return value


def _check_window(window: Any) -> dict[str, Any]:
    if not isinstance(window, dict) or window.get("kind") not in _WINDOW_KINDS:
        raise FlowError(f"expected a window from stram.flow.windows (tumbling, sliding, session), got {window!r:.80}")
    missing = [k for k in _WINDOW_KINDS[window["kind"]] if k not in window]
    if missing:
        raise FlowError(f"{window['kind']} window without {', '.join(missing)}: {window!r}")
    return dict(window)


class WindowedStream:
    """Windows per key, waiting for an aggregate; each method adds one ``WindowedAggregate`` step and returns
    its results ``{"key", "window_start", "window_end", "value"}``, with ``.late`` for late records."""

    def __init__(self, keyed: KeyedStream, props: dict[str, Any]) -> None:
        self.keyed = keyed
        self.props = props

    def _aggregate(self, kind: str, aggregate: str | None, extra: dict[str, Any], name: Any, partitions: Any,
                   locality: Any) -> Stream:
        props = dict(self.props)
        if aggregate is not None:
            props["aggregate"] = aggregate
        props.update(extra)
        step = self.keyed.then(kind, _WINDOW, props, name=name, partitions=partitions, locality=locality,
                               outputs=("output", "late"), event_time=OPAQUE)
        return Stream(self.keyed.flow, step)

    def _by_value(self, kind: str, op: str, value: Any, name: Any, partitions: Any, locality: Any,
                  arrow: bool = False) -> Stream:
        field, fn = _field_or_fn(value, kind)
        if field:
            return self._aggregate(kind, f"{op}:{field}", self._arrow(arrow), name, partitions, locality)
        if arrow:
            raise FlowError(f"window {kind}: arrow=True takes a field's values, not a function's")
        return self._aggregate(kind, op, {"value_fn": fn}, name, partitions, locality)

    def _arrow(self, arrow: bool) -> dict[str, Any]:
        """``arrow_results`` for ``arrow=True``: only windows of fields' values kept as columns have them."""
        if not arrow:
            return {}
        window, props = self.props["window"], self.props
        if window.get("time", "event") != "event" or window["kind"] == "session" or "trigger" in props \
                or not props.get("key_field") or window.get("size_ms", 0) % window.get("slide_ms", 1) \
                or not props.get("timestamp_field"):
            raise FlowError("arrow=True: event-time tumbling or sliding windows (size a multiple of the slide), "
                            "no trigger, keyed by a field with the time in a field")
        return {"arrow_results": True}

    def count(self, *, name: Any = None, partitions: Any = None, locality: Any = None, arrow: bool = False) -> Stream:
        """Records per key and window. ``arrow`` (here and for sum, min and max): fed Arrow batches, each
        window's results go out as one ``pyarrow.Table`` (key, window_start, window_end, value)."""
        return self._aggregate("count", "count", self._arrow(arrow), name, partitions, locality)

    def sum(self, value: str | Callable[[Any], Any], *, name: Any = None, partitions: Any = None,
            locality: Any = None, arrow: bool = False) -> Stream:
        """Sum of a field (``"sum:F"``) or of a function's values (``value_fn``)."""
        return self._by_value("sum", "sum", value, name, partitions, locality, arrow)

    def min(self, value: str | Callable[[Any], Any], *, name: Any = None, partitions: Any = None,
            locality: Any = None, arrow: bool = False) -> Stream:
        return self._by_value("min", "min", value, name, partitions, locality, arrow)

    def max(self, value: str | Callable[[Any], Any], *, name: Any = None, partitions: Any = None,
            locality: Any = None, arrow: bool = False) -> Stream:
        return self._by_value("max", "max", value, name, partitions, locality, arrow)

    def mean(self, value: str | Callable[[Any], Any], *, name: Any = None, partitions: Any = None,
             locality: Any = None) -> Stream:
        return self._by_value("mean", "mean", value, name, partitions, locality)

    def top_k(self, k: int, value: str | Callable[[Any], Any], *, name: Any = None, partitions: Any = None,
              locality: Any = None) -> Stream:
        """The ``k`` records with the largest values (``"topk:K:F"``)."""
        if isinstance(k, bool) or not isinstance(k, int) or k < 1:
            raise FlowError(f"top_k: k must be an integer >= 1, got {k!r}")
        return self._by_value("top_k", f"topk:{k}", value, name, partitions, locality)

    def collect(self, value: str | Callable[[Any], Any] | None = None, *, name: Any = None, partitions: Any = None,
                locality: Any = None) -> Stream:
        """The records (or a field's, or a function's values) of each key and window, as a list."""
        if value is None:
            return self._aggregate("collect", "collect", {}, name, partitions, locality)
        return self._by_value("collect", "collect", value, name, partitions, locality)

    def fold(self, create: Callable[[], Any], add: Callable[[Any, Any], Any], merge: Callable[[Any, Any], Any] | None
             = None, result: Callable[[Any], Any] | None = None, *, name: Any = None, partitions: Any = None,
             locality: Any = None) -> Stream:
        """A custom aggregate: ``acc = create()``, ``acc = add(acc, record)`` per record, ``merge(a, b)`` (session
        windows need it), ``result(acc)`` the value emitted (default: ``acc``)."""
        for label, fn in (("create", create), ("add", add), ("merge", merge), ("result", result)):
            if fn is not None and not callable(fn):
                raise FlowError(f"window fold: {label} must be a function, got {fn!r:.60}")
        if self.props["window"]["kind"] == "session" and merge is None:
            raise FlowError("window fold over session windows needs merge= (sessions that grow together merge)")
        return self._aggregate("fold", None, {"aggregator": Pickled(Aggregator(create, add, merge, result))},
                               name, partitions, locality)
