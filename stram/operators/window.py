"""Event-time windowed aggregation: one result per key and window once the watermark passes it.

:class:`WindowedAggregate` assigns each record to tumbling, sliding or session windows of its key
(by event time, or by arrival time with ``window.time: processing``) and folds it into the window's
accumulator. Without a trigger a window fires once, when the watermark reaches its end plus the
allowed lateness; with one it fires panes (EARLY, ON_TIME, LATE). Records later than the allowed
lateness go out on ``late`` unchanged. Results come out ordered by (window end, window start),
then by the key's first arrival in the window (a session: its first record's arrival).
"""

from __future__ import annotations

import heapq
from typing import Any, Callable, Optional

from stram.common.arrowtypes import is_arrow
from stram.common.watermarks import MAX_WATERMARK, MIN_WATERMARK
from stram.operator import InputPort, OperatorContext, OutputPort
from stram.operators import window_columns
from stram.operators.windowing import (MISSING, EventTimeOperator, Fields, WindowSpec, fail, parse_aggregate,
                                       parse_trigger)

__all__ = ["WindowedAggregate"]


def _slots(entry: list) -> tuple[int, int, int]:
    """Where a pane entry keeps its accumulator, dirty flag and last firing: a session's, or a
    tumbling/sliding window key's [accumulator, dirty, last firing]."""
    return (2, 4, 5) if len(entry) == 7 else (0, 1, 2)

_NUMBER = (int, float)
_FAST_OPS = {"count": 0, "sum": 1, "min": 2, "max": 3}


class WindowedAggregate(EventTimeOperator):
    """Aggregates records per key and event-time window (properties: see the class attributes).

    State: ``panes`` (tumbling/sliding: window start -> {key: accumulator}, with a trigger
    {key: [accumulator, dirty, last firing ms]}), ``sessions`` (key -> [[start, end, accumulator,
    order, dirty, last firing ms, on-time fired], ...]) and ``fired`` (with a trigger: starts of
    the windows whose ON_TIME pane went out).
    """

    event_time_inputs = {"timestamp_field": "input"}

    input = InputPort()
    output = OutputPort()
    late = OutputPort()

    #: The key: a dict field, or a pickled function; neither: the default key (dict "key", tuple's first).
    key_field: Optional[str] = None
    key_fn: Optional[str] = None
    #: The event time (epoch ms): a field or a pickled function; neither: the field "ts".
    timestamp_field: Optional[str] = None
    timestamp_fn: Optional[str] = None
    #: {kind: tumbling, size_ms} | {kind: sliding, size_ms, slide_ms} | {kind: session, gap_ms};
    #: optional time: event | processing, origin_ms.
    window: dict
    #: count | sum:F | max:F | min:F | mean:F | collect | collect:F | topk:K:F
    aggregate: str = "count"
    #: Pickled object with create(), add(acc, record) -> acc, merge(a, b), result(acc); overrides aggregate.
    aggregator: Optional[str] = None
    #: Pickled function record -> value, used instead of the field F.
    value_fn: Optional[str] = None
    allowed_lateness_ms: int = 0
    #: {early_ms: N, late: bool, mode: accumulating | discarding}
    trigger: Optional[dict] = None
    #: Fed Arrow batches (count/sum/min/max, tumbling or sliding, no trigger): each window's results as
    #: one ``pyarrow.Table`` (key, window_start, window_end, value) instead of dict records.
    arrow_results: bool = False

    transient = EventTimeOperator.transient + ("_spec", "_agg", "_fields", "_trig", "_lateness", "_heap",
                                               "_fast_op", "_fast_value", "_tumbling_fold", "_columns")

    def __init__(self) -> None:
        super().__init__()
        self.panes: dict[int, dict[Any, Any]] = {}
        self.sessions: dict[Any, list[list]] = {}
        self.fired: set[int] = set()
        #: Creation counter of sessions (orders sessions with equal bounds).
        self.order = 0
        #: Arrival counter of session records (a session's collect keeps arrival order across merges).
        self.arrivals = 0
        self._spec: Optional[WindowSpec] = None
        self._heap: list = []
        self._fast_op: Optional[int] = None
        self._tumbling_fold = False
        #: Fed Arrow batches: pane start -> partial tables (stram.operators.window_columns), and the
        #: watermark their windows were last fired at.
        self.columns: dict[int, list] = {}
        self.columns_mark = MIN_WATERMARK
        self._columns: Optional[window_columns.Columns] = None

    def held(self) -> int:
        """Accumulators of open windows (one per key and window) and open sessions."""
        return sum(map(len, self.panes.values())) + sum(map(len, self.sessions.values())) + sum(
            t.num_rows for parts in self.columns.values() for t in parts) + (self._columns.pending_rows
                                                                            if self._columns else 0)

    # -- configuration ---------------------------------------------------------------------------------
    @classmethod
    def partition_key(cls, properties: dict[str, Any], port: str) -> Optional[str]:
        if properties.get("key_field"):
            return "field:" + properties["key_field"]
        return properties.get("key_fn") or None

    def setup(self, context: OperatorContext) -> None:
        self._begin(context)
        name = self._name
        self._spec = spec = WindowSpec(name, getattr(self, "window", None))
        self._lateness = 0 if spec.processing else self._int("allowed_lateness_ms", 0)
        self._agg = agg = parse_aggregate(self, name)
        if spec.session and agg.kind == "collect":
            self._agg = agg = agg.in_arrival_order()  # merged sessions keep the records' arrival order
        if spec.session and agg.merge is None:
            raise fail(name, "aggregator", "session windows merge accumulators: the aggregator needs merge(a, b)")
        self._trig = parse_trigger(name, self.trigger)
        self._fields = Fields(self)
        fast = (not spec.processing and self._trig is None and agg.code in _FAST_OPS
                and self._fields.key_field and self._fields.ts_field and (agg.code == "count" or agg.field))
        self._fast_op = _FAST_OPS[agg.code] if fast else None
        self._tumbling_fold = (not fast and not spec.processing and not spec.session and self._trig is None
                               and spec.slide == spec.size)
        self._fast_value = agg.value
        self._columns = window_columns.Columns(self._fields.key_field, self._fields.ts_field, agg.field, agg.code,
                                               spec.size, spec.slide, spec.origin) \
            if window_columns.usable(spec, agg.code, self._fields, agg.field, self._trig) else None
        self._rebuild()

    def _rebuild(self) -> None:
        """The firing heap of sessions (without a trigger), from the state."""
        self._heap = [(x[1], x[0], x[3], k) for k, lst in self.sessions.items() for x in lst]
        heapq.heapify(self._heap)

    # -- records ---------------------------------------------------------------------------------------
    def process_input(self, record: Any) -> None:
        self.process_input_batch([record])

    def process_input_batch(self, records: list) -> None:
        late: list = []
        if records and (is_arrow(records[0]) or self.columns or (self._columns and self._columns.pending)):
            records = self._columnar(records, late)
        if self._fast_op is not None:
            if self._spec.session:
                self._fast_sessions(records, late)
            elif self._fast_op == 0 and self._spec.slide == self._spec.size:
                self._fast_tumbling_count(records, late)
            else:
                self._fast(records, late)
        elif self._tumbling_fold:
            self._fold_tumbling(records, late)
        else:
            now = int(self._clock() * 1000)
            one = self._one
            for r in records:
                one(r, late, now)
        self._emit(late=late)

    def _fold_tumbling(self, records: list, late: list) -> None:
        """Any aggregate in event-time tumbling windows without a trigger: :meth:`_one`'s steps in one loop
        (each record is in one window; key and integer time read inline from dict fields)."""
        spec, agg, fields = self._spec, self._agg, self._fields
        size, origin = spec.size, spec.origin
        limit = self.watermark - self._lateness
        create, add, value = agg.create, agg.add, agg.value
        numeric = agg.code in ("sum", "min", "max")
        kf, tf = fields.key_field, fields.ts_field
        inline = kf is not None and tf is not None
        read, panes = self._read, self.panes
        for r in records:
            t = None
            if inline:
                try:
                    k, t = r[kf], r[tf]
                except (KeyError, TypeError, IndexError):
                    pass
            if t.__class__ is not int:
                kt = read(fields, r)
                if kt is None:
                    continue
                k, t = kt
            v = r
            if value is not None:
                try:
                    v = value(r)
                except Exception as exc:  # noqa: BLE001 - a record without the value is dropped, not fatal
                    self._bad("value", r, exc)
                    continue
            if numeric and v.__class__ not in _NUMBER:
                self._bad("value", r, None)
                continue
            s = t - (t - origin) % size
            if s + size <= limit:
                late.append(r)
                continue
            d = panes.get(s)
            if d is None:
                d = panes[s] = {}
            a = d.get(k, MISSING)
            d[k] = add(create() if a is MISSING else a, v)

    def _fast(self, records: list, late: list) -> None:
        """Tumbling or sliding windows, count/sum/min/max of a field, key and time from fields."""
        spec = self._spec
        kf, tf, vf = self._fields.key_field, self._fields.ts_field, self._agg.field
        size, slide, origin = spec.size, spec.slide, spec.origin
        op = self._fast_op
        limit = self.watermark - self._lateness
        panes = self.panes
        number = _NUMBER
        for r in records:
            try:
                k = r[kf]
                t = r[tf]
                v = r[vf] if op else None
            except (KeyError, TypeError, IndexError):
                self._one(r, late, 0)
                continue
            if t.__class__ is not int or (op and v.__class__ not in number):
                self._one(r, late, 0)
                continue
            s = t - (t - origin) % slide
            if s + size <= limit:
                late.append(r)
                continue
            while True:
                d = panes.get(s)
                if d is None:
                    d = panes[s] = {}
                if op == 0:
                    d[k] = d.get(k, 0) + 1
                elif op == 1:
                    d[k] = d.get(k, 0) + v
                else:
                    c = d.get(k)
                    if c is None or (v < c if op == 2 else v > c):
                        d[k] = v
                s -= slide
                if s + size <= t or s + size <= limit:
                    break

    def _fast_tumbling_count(self, records: list, late: list) -> None:
        """The commonest case on its own: counts per key in tumbling windows."""
        spec = self._spec
        kf, tf = self._fields.key_field, self._fields.ts_field
        size, origin = spec.size, spec.origin
        limit = self.watermark - self._lateness
        panes = self.panes
        last_s, d = None, None
        for r in records:
            try:
                k = r[kf]
                t = r[tf]
            except (KeyError, TypeError, IndexError):
                self._one(r, late, 0)
                continue
            if t.__class__ is not int:
                self._one(r, late, 0)
                continue
            s = t - (t - origin) % size
            if s != last_s:
                if s + size <= limit:
                    late.append(r)
                    continue
                d = panes.get(s)
                if d is None:
                    d = panes[s] = {}
                last_s = s
            d[k] = d.get(k, 0) + 1

    def _fast_sessions(self, records: list, late: list) -> None:
        """Sessions, count/sum/min/max of a field, key and time from fields: a record opens a session
        or extends the one it falls in, in place (its firing entry is renewed when it comes due); a
        record joining two sessions takes the general path, which merges them."""
        kf, tf, vf = self._fields.key_field, self._fields.ts_field, self._agg.field
        gap = self._spec.gap
        op = self._fast_op
        limit = self.watermark - self._lateness
        sessions = self.sessions
        heap, push = self._heap, heapq.heappush
        number = _NUMBER
        for r in records:
            try:
                k = r[kf]
                t = r[tf]
                v = r[vf] if op else None
            except (KeyError, TypeError, IndexError):
                self._one(r, late, 0)
                continue
            if t.__class__ is not int or (op and v.__class__ not in number):
                self._one(r, late, 0)
                continue
            end = t + gap
            if end <= limit:
                late.append(r)
                continue
            lst = sessions.get(k)
            if lst is None:
                lst = sessions[k] = []
            hit = None
            for x in lst:
                if x[0] < end and x[1] > t:
                    if hit is not None:  # it joins two sessions: the general path merges them
                        hit = lst
                        break
                    hit = x
            if hit is None:  # a new session
                x = [t, end, 1 if op == 0 else v, self.order, True, 0, False]
                self.order += 1
                lst.append(x)
                push(heap, (end, t, x[3], k))
                continue
            if hit is lst:
                self._one(r, late, 0)
                continue
            x = hit
            if t < x[0]:
                x[0] = t
            if end > x[1]:
                x[1] = end
            a = x[2]
            if op == 0:
                x[2] = a + 1
            elif op == 1:
                x[2] = a + v
            elif a is None or (v < a if op == 2 else v > a):
                x[2] = v
            x[4] = True

    def _one(self, r: Any, late: list, now: int) -> None:
        kt = self._read(self._fields, r)
        if kt is None:
            return
        k, t = kt
        agg = self._agg
        v = r
        if agg.value is not None:
            try:
                v = agg.value(r)
            except Exception as exc:  # noqa: BLE001 - a record without the value is dropped, not fatal
                self._bad("value", r, exc)
                return
        if agg.code in ("sum", "min", "max") and v.__class__ not in _NUMBER:
            self._bad("value", r, None)
            return
        spec = self._spec
        if spec.processing:
            t = now
        if spec.session:
            self._session_add(r, k, t, v, late, now)
            return
        limit = -float("inf") if spec.processing else self.watermark - self._lateness
        size = spec.size
        starts = [s for s in spec.starts(t) if s + size > limit]
        if not starts:
            late.append(r)
            return
        create, add, trig, panes = agg.create, agg.add, self._trig, self.panes
        for s in starts:
            d = panes.get(s)
            if d is None:
                d = panes[s] = {}
            a = d.get(k, MISSING)
            if trig is None:
                d[k] = add(create() if a is MISSING else a, v)
            else:
                if a is MISSING:
                    a = d[k] = [create(), False, now]
                a[0] = add(a[0], v)
                a[1] = True

    def _session_add(self, r: Any, k: Any, t: int, v: Any, late: list, now: int) -> None:
        end = t + self._spec.gap
        wm = self.watermark
        if not self._spec.processing and end + self._lateness <= wm:
            late.append(r)
            return
        agg = self._agg
        lst = self.sessions.get(k)
        if lst is None:
            lst = self.sessions[k] = []
        hits = [x for x in lst if x[0] < end and x[1] > t]
        if agg.kind == "collect":
            v = (self.arrivals, v)
            self.arrivals += 1
        if not hits:
            x = [t, end, agg.add(agg.create(), v), self.order, True, now, False]
            self.order += 1
            lst.append(x)
        else:
            x = hits[0]
            fired = all(h[6] for h in hits)
            for h in hits[1:]:
                x[2] = agg.merge(x[2], h[2])
                x[0], x[1], x[3] = min(x[0], h[0]), max(x[1], h[1]), min(x[3], h[3])
                x[5] = max(x[5], h[5])
            if len(hits) > 1:
                lst[:] = [y for y in lst if y is x or all(y is not h for h in hits)]
            x[0], x[1] = min(x[0], t), max(x[1], end)
            x[2] = agg.add(x[2], v)
            x[4] = True
            x[6] = fired and x[1] <= wm
        if self._trig is None:
            heapq.heappush(self._heap, (x[1], x[0], x[3], k))

    # -- firing ----------------------------------------------------------------------------------------
    def _expire(self, watermark: int) -> None:
        if not self._spec.processing or watermark == MAX_WATERMARK:
            self._fire(watermark)

    def end_window(self) -> None:
        if self._columns is not None and self._columns.pending:
            late: list = []
            self._drain(late)
            self._emit(late=late)
        now = int(self._clock() * 1000)
        if self._spec.processing:
            self._fire(now)
        if self._trig is not None:
            self._panes_at_end(now)
        self._report()

    def _fire(self, wm: int) -> None:
        if self._trig is not None:
            self._fire_panes(wm)
        elif self._spec.session:
            self._fire_sessions(wm)
        else:
            self._fire_windows(wm)

    def _fire_windows(self, wm: int) -> None:
        size, result, panes = self._spec.size, self._agg.result, self.panes
        due = sorted(s for s in panes if s + size + self._lateness <= wm)
        rows = []
        for s in due:
            end = s + size
            rows += [{"key": k, "window_start": s, "window_end": end, "value": result(a)}
                     for k, a in panes.pop(s).items()]
        if self.columns and self._columns is not None:
            rows += self._fire_columns(wm)
        self._emit(rows)

    # -- Arrow batches -----------------------------------------------------------------------------------
    def _columnar(self, records: list, late: list) -> list:
        """Aggregate the Arrow batches among ``records`` as columns (stram.operators.window_columns) when
        this operator can and holds no windows of dict records; the records left for the other paths."""
        columns = self._columns
        if columns is None or self.panes:  # not columnar: every batch's rows as dicts
            return [r for x in records for r in (x.to_pylist() if is_arrow(x) else (x,))]
        bad, why = columns.take(records)  # queued until PENDING_ROWS, the next watermark or window end
        for r in bad:
            self._bad("fields", r, why)
        if columns.pending_rows >= window_columns.PENDING_ROWS:
            self._drain(late)
        return []

    def _drain(self, late: list) -> None:
        gone, odd, failed = self._columns.drain(self.columns, self.watermark - self._lateness)
        late += gone
        for r in odd:
            self._bad("key, time or value (null)", r)
        for n, exc in failed:  # types unlike the state's
            self._bad("key or value type", f"a batch of {n} rows", exc)

    def on_watermark(self, watermark: int) -> None:
        if self._columns is not None and self._columns.pending and watermark > self.watermark:
            late: list = []
            self._drain(late)  # at the watermark they arrived under
            self._emit(late=late)
        super().on_watermark(watermark)

    def _fire_columns(self, wm: int) -> list:
        fired = self._columns.fire(self.columns, self.columns_mark, wm, self._lateness)
        self.columns_mark = wm
        return window_columns.results(fired, self._spec.size, bool(self.arrow_results))

    def _fire_sessions(self, wm: int) -> None:
        heap, sessions, result = self._heap, self.sessions, self._agg.result
        deadline = wm - self._lateness
        rows = []
        while heap and heap[0][0] <= deadline:
            end, start, order, k = heapq.heappop(heap)
            lst = sessions.get(k)
            for i, x in enumerate(lst or ()):
                if x[3] != order:
                    continue
                if x[1] != end or x[0] != start:  # extended in place since: due at its new end
                    heapq.heappush(heap, (x[1], x[0], order, k))
                    break
                del lst[i]
                if not lst:
                    del sessions[k]
                rows.append({"key": k, "window_start": start, "window_end": end, "value": result(x[2])})
                break
        self._emit(rows)

    def _entries(self) -> list[tuple]:
        """Every (end, start, order, key, entry, window fired) with a trigger."""
        out = []
        size, fired = self._spec.size, self.fired
        for s, d in self.panes.items():
            on = s in fired
            out += [(s + size, s, i, k, e, on) for i, (k, e) in enumerate(d.items())]
        for k, lst in self.sessions.items():
            out += [(x[1], x[0], x[3], k, x, x[6]) for x in lst]
        return out

    def _fire_panes(self, wm: int) -> None:
        """ON_TIME panes of the windows the watermark reached, LATE ones of those it drops that got
        records since their last pane; then the dropped windows' state goes."""
        late_panes, lateness = self._trig[1], self._lateness
        panes: list[tuple] = []
        for end, start, order, k, e, on in self._entries():
            if end > wm:
                continue
            if not on:
                panes.append((end, start, order, k, e, "ON_TIME"))
            elif late_panes and end + lateness <= wm and e[_slots(e)[1]]:
                panes.append((end, start, order, k, e, "LATE"))
        self._emit_panes(panes, int(self._clock() * 1000))
        size = self._spec.size
        for s in [s for s in self.panes if s + size + lateness <= wm]:
            del self.panes[s]
            self.fired.discard(s)
        for k in [k for k, lst in self.sessions.items() if any(x[1] + lateness <= wm for x in lst)]:
            lst = [x for x in self.sessions[k] if x[1] + lateness > wm]
            if lst:
                self.sessions[k] = lst
            else:
                del self.sessions[k]

    def _panes_at_end(self, now: int) -> None:
        """LATE panes of passed windows and EARLY panes of the others that got records since their
        last pane (EARLY: once early_ms of processing time went by since it)."""
        early, late_panes, _ = self._trig
        wm = MIN_WATERMARK if self._spec.processing else self.watermark
        panes = []
        for end, start, order, k, e, on in self._entries():
            _, dirty, last = _slots(e)
            if not e[dirty]:
                continue
            if on or end <= wm:
                if late_panes:
                    panes.append((end, start, order, k, e, "LATE"))
            elif early is not None and now - e[last] >= early:
                panes.append((end, start, order, k, e, "EARLY"))
        self._emit_panes(panes, now)

    def _emit_panes(self, panes: list[tuple], now: int) -> None:
        """Emit panes in (end, start, key order) order; reset what a pane covers when discarding."""
        if not panes:
            return
        panes.sort(key=lambda p: p[:3])
        result, create, discarding = self._agg.result, self._agg.create, self._trig[2]
        rows = []
        for end, start, _, k, e, kind in panes:
            acc, dirty, last = _slots(e)
            rows.append({"key": k, "window_start": start, "window_end": end, "value": result(e[acc]),
                         "pane": kind})
            if discarding:
                e[acc] = create()
            e[dirty] = False
            e[last] = now
            if kind != "EARLY":
                if acc:
                    e[6] = True
                else:
                    self.fired.add(start)
        self.output.emit_batch(rows)

    # -- repartitioning --------------------------------------------------------------------------------
    @classmethod
    def split_state(cls, states: list[dict[str, Any]], count: int,
                    owner: Callable[[Any], int]) -> list[dict[str, Any]]:
        """Deal the windows' keys out by ``owner(key)`` (old partitions own disjoint keys); every new
        partition starts from the highest watermark of the old ones."""
        if not states:
            return [{} for _ in range(count)]
        base = {k: v for k, v in states[0].items() if k not in ("panes", "sessions", "fired", "columns")}
        base["columns_mark"] = max(s.get("columns_mark", MIN_WATERMARK) for s in states)
        base["watermark"] = max(s.get("watermark", base.get("watermark")) for s in states)
        base["order"] = max(s.get("order", 0) for s in states)
        base["arrivals"] = max(s.get("arrivals", 0) for s in states)
        base["malformed"] = 0
        fired = set().union(*(s.get("fired", ()) for s in states))
        new = [dict(base, panes={}, sessions={}, fired=set(fired)) for _ in range(count)]
        for state in states:
            for s, d in state.get("panes", {}).items():
                for k, a in d.items():
                    new[owner(k)]["panes"].setdefault(s, {})[k] = a
            for k, lst in state.get("sessions", {}).items():
                new[owner(k)]["sessions"].setdefault(k, []).extend(lst)
        for i, columns in enumerate(window_columns.split([s.get("columns", {}) for s in states], count, owner)):
            new[i]["columns"] = columns
        return new
