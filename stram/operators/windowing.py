"""What the event-time operators share: window specs, reading keys and event times, aggregates.

:class:`WindowSpec` parses a ``window`` property (tumbling, sliding or session windows, aligned
to ``origin_ms``); :class:`Fields` reads a record's key and event time as the key/timestamp
properties say; :func:`parse_aggregate` turns ``aggregate`` / ``aggregator`` / ``value_fn`` into
one fold (create, add, merge, result). :class:`EventTimeOperator` keeps the watermark and
counts malformed records (logged once per kind, counted in the ``malformed`` metric).
"""

from __future__ import annotations

import heapq
import logging
import math
import time
from operator import itemgetter
from typing import Any, Callable, Optional

from stram.common import pickled
from stram.common.watermarks import MIN_WATERMARK
from stram.operator import FatalError, Operator, OperatorContext

__all__ = ["WindowSpec", "Fields", "Aggregate", "parse_aggregate", "parse_trigger", "EventTimeOperator",
           "fail", "as_ms", "field_key", "MISSING"]

logger = logging.getLogger("stram.operators")

TUMBLING, SLIDING, SESSION = "tumbling", "sliding", "session"
#: Marks an absent accumulator (None is a valid one: min/max of nothing).
MISSING = object()


def fail(op: str, prop: str, problem: str) -> FatalError:
    """The FatalError for a property that can never work, naming the operator and the property."""
    return FatalError(f"{op}: property '{prop}': {problem}")


def as_ms(value: Any) -> Optional[int]:
    """An event time in epoch ms from a number (floats floored); None when it is not one."""
    cls = value.__class__
    if cls is int:
        return value
    if cls is float and math.isfinite(value):
        return math.floor(value)
    if isinstance(value, int) and not isinstance(value, bool):
        return int(value)
    return None


def _int_prop(op: str, prop: str, value: Any, low: int) -> int:
    if isinstance(value, bool) or not isinstance(value, int) or value < low:
        raise fail(op, prop, f"expected an integer >= {low}, got {value!r}")
    return value


class WindowSpec:
    """A parsed ``window`` property: ``{kind: tumbling, size_ms}``, ``{kind: sliding, size_ms, slide_ms}``
    or ``{kind: session, gap_ms}``, plus ``time`` (event | processing) and ``origin_ms``."""

    _KEYS = {TUMBLING: {"size_ms"}, SLIDING: {"size_ms", "slide_ms"}, SESSION: {"gap_ms"}}

    def __init__(self, op: str, value: Any, prop: str = "window") -> None:
        if not isinstance(value, dict):
            raise fail(op, prop, f"expected a mapping like {{kind: tumbling, size_ms: 1000}}, got {value!r}")
        kind = value.get("kind")
        if kind not in self._KEYS:
            raise fail(op, prop, f"unknown window kind {kind!r} (tumbling, sliding or session)")
        allowed = self._KEYS[kind] | {"kind", "time", "origin_ms"}
        extra = sorted(set(value) - allowed)
        if extra:
            raise fail(op, prop, f"unknown key(s) {', '.join(map(str, extra))} for a {kind} window "
                                 f"(known: {', '.join(sorted(allowed))})")
        for key in sorted(self._KEYS[kind]):
            if key not in value:
                raise fail(op, prop, f"a {kind} window needs {key}")
        self.kind = kind
        self.session = kind == SESSION
        self.size = _int_prop(op, f"{prop}.size_ms", value["size_ms"], 1) if "size_ms" in value else 0
        self.slide = self.size
        if kind == SLIDING:
            self.slide = _int_prop(op, f"{prop}.slide_ms", value["slide_ms"], 1)
            if self.slide > self.size:
                raise fail(op, f"{prop}.slide_ms", f"slide {self.slide} is larger than size {self.size} "
                                                   f"(records between windows would belong to none)")
        self.gap = _int_prop(op, f"{prop}.gap_ms", value["gap_ms"], 1) if self.session else 0
        time_kind = value.get("time", "event")
        if time_kind not in ("event", "processing"):
            raise fail(op, f"{prop}.time", f"expected 'event' or 'processing', got {time_kind!r}")
        self.processing = time_kind == "processing"
        origin = value.get("origin_ms", 0)
        if isinstance(origin, bool) or not isinstance(origin, int):
            raise fail(op, f"{prop}.origin_ms", f"expected an integer, got {origin!r}")
        self.origin = origin

    def starts(self, t: int) -> list[int]:
        """Starts of the tumbling or sliding windows holding time ``t``, latest first."""
        size, slide = self.size, self.slide
        s = t - (t - self.origin) % slide
        out = []
        while s + size > t:
            out.append(s)
            s -= slide
        return out


def field_key(name: str) -> Callable[[Any], Any]:
    """A getter of a record's field ``name`` (a dict key; a tuple index when ``name`` is a number)."""
    return itemgetter(int(name)) if name.isdigit() else itemgetter(name)


def _default_key(record: Any) -> Any:
    """A dict's "key", a tuple's first item, else the record itself (as streams partition)."""
    if isinstance(record, dict):
        return record["key"]
    if isinstance(record, tuple):
        return record[0]
    return record


class Fields:
    """Reads a record's key and event time, as an operator's key/timestamp properties say.

    ``key_field`` or ``key_fn`` (pickled), else the default key; ``timestamp_field`` or
    ``timestamp_fn``, else the dict field "ts". Both getters raise on a record without them.
    """

    def __init__(self, op: Operator, prefix: str = "") -> None:
        key_field = getattr(op, prefix + "key_field", None)
        key_fn = getattr(op, prefix + "key_fn", None)
        ts_field = getattr(op, prefix + "timestamp_field", None)
        ts_fn = getattr(op, prefix + "timestamp_fn", None)
        self.key_field = key_field
        self.ts_field = ts_field or (None if ts_fn else "ts")
        self.key = field_key(key_field) if key_field else (_load(op, prefix + "key_fn", key_fn) if key_fn
                                                           else _default_key)
        self.ts = field_key(self.ts_field) if self.ts_field else _load(op, prefix + "timestamp_fn", ts_fn)


def _load(op: Any, prop: str, text: Any) -> Any:
    name = getattr(op, "_name", type(op).__name__)
    if not isinstance(text, str):
        raise fail(name, prop, f"expected pickled text (stram.common.pickled.dumps), got {type(text).__name__}")
    try:
        return pickled.loads(text)
    except Exception as exc:  # noqa: BLE001 - a property that never loads can never work
        raise fail(name, prop, f"cannot be loaded: {exc}") from None


# ------------------------------------------------------------------ aggregates

class Aggregate:
    """One fold: ``create()`` an accumulator, ``add(acc, value) -> acc``, ``merge(a, b) -> acc`` (or
    None), ``result(acc)``; ``value(record)`` gives what ``add`` takes (None: the record itself).
    ``code`` names the built-ins the fast path knows (count, sum, min, max), else None."""

    def __init__(self, create: Callable, add: Callable, merge: Optional[Callable], result: Callable,
                 value: Optional[Callable] = None, code: Optional[str] = None, field: Optional[str] = None,
                 kind: str = "") -> None:
        self.create, self.add, self.merge, self.result = create, add, merge, result
        self.value, self.code, self.field, self.kind = value, code, field, kind

    def in_arrival_order(self) -> "Aggregate":
        """A collect whose accumulators merge in arrival order: it takes (arrival number, value) pairs."""
        return Aggregate(list, _append, lambda a, b: sorted(a + b), lambda a: [v for _, v in a],
                         self.value, None, self.field, self.kind)


def _count_add(a: int, v: Any) -> int:
    return a + 1


def _sum_add(a: Any, v: Any) -> Any:
    return a + v


def _max_add(a: Any, v: Any) -> Any:
    return v if a is None or v > a else a


def _min_add(a: Any, v: Any) -> Any:
    return v if a is None or v < a else a


def _max_merge(a: Any, b: Any) -> Any:
    return a if b is None else _max_add(a, b)


def _min_merge(a: Any, b: Any) -> Any:
    return a if b is None else _min_add(a, b)


def _mean_add(a: list, v: Any) -> list:
    a[0] += v
    a[1] += 1
    return a


def _mean_result(a: list) -> Optional[float]:
    return a[0] / a[1] if a[1] else None


def _append(a: list, v: Any) -> list:
    a.append(v)
    return a


def _same(a: Any) -> Any:
    return a


def _topk(k: int) -> tuple[Callable, Callable, Callable]:
    def add(a: list, v: Any) -> list:
        if len(a) < k:
            heapq.heappush(a, v)
        elif v > a[0]:
            heapq.heapreplace(a, v)
        return a

    def merge(a: list, b: list) -> list:
        out = heapq.nlargest(k, a + b)
        heapq.heapify(out)
        return out

    def result(a: list) -> list:
        return sorted(a, reverse=True)
    return add, merge, result


def parse_aggregate(op: Operator, name: str) -> Aggregate:
    """The fold an operator's ``aggregate`` / ``aggregator`` / ``value_fn`` properties describe."""
    text = getattr(op, "aggregator", None)
    if text:
        custom = _load(op, "aggregator", text)
        missing = [m for m in ("create", "add", "result") if not callable(getattr(custom, m, None))]
        if missing:
            raise fail(name, "aggregator", f"the object has no {', '.join(missing)} method")
        merge = getattr(custom, "merge", None)
        return Aggregate(custom.create, custom.add, merge if callable(merge) else None, custom.result)
    spec = getattr(op, "aggregate", "count")
    if not isinstance(spec, str):
        raise fail(name, "aggregate", f"expected a string like 'sum:price', got {spec!r}")
    fn_text = getattr(op, "value_fn", None)
    value_fn = _load(op, "value_fn", fn_text) if fn_text else None
    parts = spec.split(":")
    kind, args = parts[0], parts[1:]
    known = "count, sum:F, max:F, min:F, mean:F, collect, collect:F, topk:K:F"
    if kind == "topk":
        if len(args) not in (1, 2) or not args[0].isdigit() or int(args[0]) < 1:
            raise fail(name, "aggregate", f"{spec!r}: expected topk:K:F with K >= 1 ({known})")
        k, args = int(args[0]), args[1:]
    if kind not in ("count", "sum", "max", "min", "mean", "collect", "topk") or len(args) > 1 \
            or (args and not args[0]) or (kind == "count" and args):
        raise fail(name, "aggregate", f"unknown aggregate {spec!r} ({known})")
    field = args[0] if args else None
    value = value_fn or (field_key(field) if field else None)
    if value is None and kind not in ("count", "collect"):
        raise fail(name, "aggregate", f"{spec!r} needs a field ({kind}:F) or the property value_fn")
    if kind == "count":
        return Aggregate(int, _count_add, _sum_add, _same, None, "count")
    code = None if value_fn else kind
    if kind == "sum":
        return Aggregate(int, _sum_add, _sum_add, _same, value, code, field)
    if kind == "max":
        return Aggregate(lambda: None, _max_add, _max_merge, _same, value, code, field)
    if kind == "min":
        return Aggregate(lambda: None, _min_add, _min_merge, _same, value, code, field)
    if kind == "mean":
        return Aggregate(lambda: [0, 0], _mean_add, lambda a, b: [a[0] + b[0], a[1] + b[1]], _mean_result, value)
    if kind == "collect":
        return Aggregate(list, _append, lambda a, b: a + b, list, value, kind="collect")
    add, merge, result = _topk(k)
    return Aggregate(list, add, merge, result, value)


def parse_trigger(name: str, value: Any) -> Optional[tuple[Optional[int], bool, bool]]:
    """``trigger`` as (early_ms or None, late panes, discarding), or None without one."""
    if value is None:
        return None
    if not isinstance(value, dict):
        raise fail(name, "trigger", f"expected a mapping like {{early_ms: 1000, mode: accumulating}}, got {value!r}")
    extra = sorted(set(value) - {"early_ms", "late", "mode"})
    if extra:
        raise fail(name, "trigger", f"unknown key(s) {', '.join(map(str, extra))} (known: early_ms, late, mode)")
    early = value.get("early_ms")
    if early is not None:
        early = _int_prop(name, "trigger.early_ms", early, 0)
    late = value.get("late", True)
    if not isinstance(late, bool):
        raise fail(name, "trigger.late", f"expected true or false, got {late!r}")
    mode = value.get("mode", "accumulating")
    if mode not in ("accumulating", "discarding"):
        raise fail(name, "trigger.mode", f"expected 'accumulating' or 'discarding', got {mode!r}")
    return early, late, mode == "discarding"


# ------------------------------------------------------------------ the base

class EventTimeOperator(Operator):
    """Keeps ``watermark`` (the highest seen, from ``on_watermark``) and counts malformed records.

    A record whose key, event time or value cannot be read is dropped: logged once per kind of
    problem, counted in ``malformed`` and reported as the metric ``malformed`` at window ends.

    What the event-time operators share: ``on_watermark`` advances ``watermark`` and calls
    ``_expire(watermark)`` (what a higher watermark fires or drops) only when it rose; ``set_state``
    calls ``_rebuild()`` (indexes derived from the state, such as expiry heaps) once the operator is
    set up (``setup`` builds them itself); ``_emit(rows, late)`` sends results, then late records.
    """

    transient = ("_context", "_name", "_logged", "_clock")

    def __init__(self) -> None:
        #: The highest input watermark heard of (epoch ms).
        self.watermark = MIN_WATERMARK
        #: Malformed records dropped so far.
        self.malformed = 0
        self._context: Optional[OperatorContext] = None
        self._name = type(self).__name__
        self._logged: set = set()
        #: Processing time in seconds (tests put a fake clock here).
        self._clock: Callable[[], float] = time.time

    def _begin(self, context: OperatorContext) -> None:
        self._context = context
        self._name = f"{type(self).__name__} {context.name}"
        self._logged = set()

    def _int(self, prop: str, low: int) -> int:
        return _int_prop(self._name, prop, getattr(self, prop), low)

    def set_state(self, state: dict[str, Any]) -> None:
        super().set_state(state)
        if self._context is not None:
            self._rebuild()

    def _rebuild(self) -> None:
        """Rebuild what is derived from the state (expiry heaps); nothing by default."""

    def on_watermark(self, watermark: int) -> None:
        if watermark <= self.watermark:
            return
        self.watermark = watermark
        self._expire(watermark)

    def _expire(self, watermark: int) -> None:
        """Fire or drop what the watermark, which just rose to ``watermark``, passed; nothing by default."""

    def _emit(self, rows: list = (), late: list = ()) -> None:
        """Results on ``output``, then late records on ``late`` (each only when there are some)."""
        if rows:
            self.output.emit_batch(rows)
        if late:
            self.late.emit_batch(late)

    def end_window(self) -> None:
        self._report()

    def _bad(self, kind: str, record: Any, exc: Any = None) -> None:
        """Drop a malformed record: count it; log the first of each kind."""
        self.malformed += 1
        if kind not in self._logged:
            self._logged.add(kind)
            detail = f" ({type(exc).__name__}: {exc})" if exc is not None else ""
            msg = f"{self._name}: dropping a record whose {kind} cannot be read{detail}: {record!r:.300} " \
                  f"(further such records are counted in the metric 'malformed', not logged)"
            logger.warning(msg)
            if self._context is not None:
                self._context.log(msg)

    def held(self) -> int:
        """Records, accumulators or sessions the operator holds (its state's size; expired by the
        watermark, so bounded on an endless stream)."""
        return 0

    def _report(self) -> None:
        if self._context is not None:
            self._context.set_metric("held", self.held())
            if self.malformed:
                self._context.set_metric("malformed", self.malformed)

    def _read(self, fields: Fields, record: Any) -> Optional[tuple[Any, int]]:
        """(key, event time) of a record, or None (counted as malformed)."""
        try:
            key = fields.key(record)
        except Exception as exc:  # noqa: BLE001 - a record without the key is dropped, not fatal
            self._bad("key", record, exc)
            return None
        try:
            t = as_ms(fields.ts(record))
        except Exception as exc:  # noqa: BLE001
            self._bad("timestamp", record, exc)
            return None
        if t is None:
            self._bad("timestamp", record, None)
            return None
        return key, t
