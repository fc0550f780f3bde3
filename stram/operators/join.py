"""Event-time joins of two streams by key: within a window (:class:`WindowedJoin`) or within a time
interval of each other (:class:`IntervalJoin`).

Both read each side's key and event time from their ``left_*`` / ``right_*`` properties, keep their
state by key (partition them by it) and expire it by the watermark; records that arrive after they
could still join go out on ``late`` unchanged.
"""

from __future__ import annotations

import collections
import heapq
from operator import itemgetter
from typing import Any, Callable, Optional

from stram.common.watermarks import IDLE, MAX_WATERMARK, MIN_WATERMARK
from stram.operator import InputPort, OperatorContext, OutputPort
from stram.operators.windowing import EventTimeOperator, Fields, WindowSpec, fail

__all__ = ["WindowedJoin", "IntervalJoin"]

_SEQ = itemgetter(0)


class _TwoSided(EventTimeOperator):
    """Ports and key/timestamp properties of a join; its partition key per port."""

    event_time_inputs = {"left_timestamp_field": "left", "right_timestamp_field": "right"}

    left = InputPort()
    right = InputPort()
    output = OutputPort()
    late = OutputPort()

    left_key_field: Optional[str] = None
    left_key_fn: Optional[str] = None
    right_key_field: Optional[str] = None
    right_key_fn: Optional[str] = None
    left_timestamp_field: Optional[str] = None
    left_timestamp_fn: Optional[str] = None
    right_timestamp_field: Optional[str] = None
    right_timestamp_fn: Optional[str] = None
    #: inner: matching pairs; left: also every left record that matched nothing, with right None.
    how: str = "inner"

    transient = EventTimeOperator.transient + ("_fields",)

    @classmethod
    def partition_key(cls, properties: dict[str, Any], port: str) -> Optional[str]:
        side = "left" if port == "left" else "right"
        if properties.get(f"{side}_key_field"):
            return "field:" + properties[f"{side}_key_field"]
        return properties.get(f"{side}_key_fn") or None

    def _setup_sides(self, context: OperatorContext) -> None:
        self._begin(context)
        if self.how not in ("inner", "left"):
            raise fail(self._name, "how", f"expected 'inner' or 'left', got {self.how!r}")
        self._fields = (Fields(self, "left_"), Fields(self, "right_"))

    def process_left(self, record: Any) -> None:
        self.process_left_batch([record])

    def process_right(self, record: Any) -> None:
        self.process_right_batch([record])

    def process_left_batch(self, records: list) -> None:
        self._side(records, 0)

    def process_right_batch(self, records: list) -> None:
        self._side(records, 1)

    def _side(self, records: list, side: int) -> None:
        raise NotImplementedError


class WindowedJoin(_TwoSided):
    """Pairs the left and right records of one key that fall in the same window; a window's pairs go
    out when it fires (watermark >= end + allowed lateness), in left then right arrival order.

    State: ``panes`` (window start -> {key: [lefts, rights]}) or, for session windows, ``sessions``
    (key -> [[start, end, lefts, rights, order], ...], with (arrival number, record) items).
    """

    window: dict
    allowed_lateness_ms: int = 0

    transient = _TwoSided.transient + ("_spec", "_lateness", "_heap")

    def __init__(self) -> None:
        super().__init__()
        self.panes: dict[int, dict[Any, list]] = {}
        self.sessions: dict[Any, list[list]] = {}
        self.order = 0
        self.arrivals = 0
        self._spec: Optional[WindowSpec] = None
        self._heap: list = []

    def held(self) -> int:
        """Keys of open windows and open sessions."""
        return sum(map(len, self.panes.values())) + sum(map(len, self.sessions.values()))

    def setup(self, context: OperatorContext) -> None:
        self._setup_sides(context)
        self._spec = spec = WindowSpec(self._name, getattr(self, "window", None))
        self._lateness = 0 if spec.processing else self._int("allowed_lateness_ms", 0)
        self._rebuild()

    def _rebuild(self) -> None:
        self._heap = [(x[1], x[0], x[4], k) for k, lst in self.sessions.items() for x in lst]
        heapq.heapify(self._heap)

    def _side(self, records: list, side: int) -> None:
        fields, spec, panes = self._fields[side], self._spec, self.panes
        size = spec.size
        now = int(self._clock() * 1000)
        limit = -float("inf") if spec.processing else self.watermark - self._lateness
        late = []
        for r in records:
            kt = self._read(fields, r)
            if kt is None:
                continue
            k, t = kt
            if spec.processing:
                t = now
            if spec.session:
                if t + spec.gap <= limit:
                    late.append(r)
                else:
                    self._session_add(k, t, side, r)
                continue
            starts = [s for s in spec.starts(t) if s + size > limit]
            if not starts:
                late.append(r)
            for s in starts:
                d = panes.get(s)
                if d is None:
                    d = panes[s] = {}
                e = d.get(k)
                if e is None:
                    e = d[k] = [[], []]
                e[side].append(r)
        self._emit(late=late)

    def _session_add(self, k: Any, t: int, side: int, r: Any) -> None:
        end = t + self._spec.gap
        lst = self.sessions.get(k)
        if lst is None:
            lst = self.sessions[k] = []
        item = (self.arrivals, r)
        self.arrivals += 1
        hits = [x for x in lst if x[0] < end and x[1] > t]
        if not hits:
            x = [t, end, [], [], self.order]
            self.order += 1
            lst.append(x)
        else:
            x = hits[0]
            for h in hits[1:]:
                x[0], x[1], x[4] = min(x[0], h[0]), max(x[1], h[1]), min(x[4], h[4])
                x[2] = sorted(x[2] + h[2], key=_SEQ)
                x[3] = sorted(x[3] + h[3], key=_SEQ)
            if len(hits) > 1:
                lst[:] = [y for y in lst if y is x or all(y is not h for h in hits)]
            x[0], x[1] = min(x[0], t), max(x[1], end)
        x[2 + side].append(item)
        heapq.heappush(self._heap, (x[1], x[0], x[4], k))

    def _expire(self, watermark: int) -> None:
        if not self._spec.processing or watermark == MAX_WATERMARK:
            self._fire(watermark)

    def end_window(self) -> None:
        if self._spec.processing:
            self._fire(int(self._clock() * 1000))
        self._report()

    def _fire(self, wm: int) -> None:
        rows: list = []
        deadline = wm - self._lateness
        if self._spec.session:
            heap, sessions = self._heap, self.sessions
            while heap and heap[0][0] <= deadline:
                end, start, order, k = heapq.heappop(heap)
                lst = sessions.get(k)
                for i, x in enumerate(lst or ()):
                    if x[1] == end and x[0] == start and x[4] == order:
                        del lst[i]
                        if not lst:
                            del sessions[k]
                        self._pairs(rows, k, start, end, [r for _, r in x[2]], [r for _, r in x[3]])
                        break
        else:
            size = self._spec.size
            for s in sorted(s for s in self.panes if s + size <= deadline):
                for k, (lefts, rights) in self.panes.pop(s).items():
                    self._pairs(rows, k, s, s + size, lefts, rights)
        self._emit(rows)

    def _pairs(self, rows: list, k: Any, start: int, end: int, lefts: list, rights: list) -> None:
        for left in lefts:
            for right in rights:
                rows.append({"key": k, "window_start": start, "window_end": end, "left": left, "right": right})
            if not rights and self.how == "left":
                rows.append({"key": k, "window_start": start, "window_end": end, "left": left, "right": None})

    @classmethod
    def split_state(cls, states: list[dict[str, Any]], count: int,
                    owner: Callable[[Any], int]) -> list[dict[str, Any]]:
        """Deal the windows' keys out by ``owner(key)``; every new partition takes the highest watermark."""
        return _split(states, count, owner, ("panes",), ("sessions",))


class IntervalJoin(_TwoSided):
    """Pairs a left record l and a right record r of one key when lower_ms <= r.ts - l.ts <= upper_ms,
    as soon as the second of them arrives.

    A left record is late (goes to ``late``) when l.ts + upper_ms is below the watermark, a right
    one when r.ts - lower_ms is: it could no longer match anything. ``allowed_lateness_ms`` A bounds
    that further: a record more than A behind the watermark is late too (Flink's interval join is
    A = 0: a record behind the watermark is late). A record that is not late may be behind the
    watermark, so records are kept until no record that is not late can match them: a left one until
    the watermark passes l.ts + upper_ms + max(0, min(A, -lower_ms)) (then, with how=left and no
    match, it goes out with right None), a right one until it passes r.ts - lower_ms + max(0, min(A,
    upper_ms)). With A = 0 and lower_ms = 0 a right record is dropped once the watermark passes it.

    With A set, each side also goes by its own input's watermark (a record behind it broke its
    stream's promise): a record is late when more than A behind it, and a record is kept only until
    the other input's watermark shows no partner can come, not kept at all when it shows so on
    arrival. A source far ahead of the other then costs the other side no state: its records pair
    with what is held and go on.

    State: ``lefts`` (key -> {arrival: [ts, record, matched]}) and ``rights`` (key -> {arrival: [ts, record]}).
    Expiry: per side a FIFO of (expiry, arrival, key) for records that arrive in expiry order (the
    common case: a side's records in time order) and a heap for the others.
    """

    lower_ms: int = 0
    upper_ms: int = 0
    #: How far behind the watermark a record may be and still join (None: as long as it can match).
    allowed_lateness_ms: Optional[int] = None

    transient = _TwoSided.transient + ("_heaps", "_fifos", "_horizons", "_input_marks")

    def __init__(self) -> None:
        super().__init__()
        self.lefts: dict[Any, dict[int, list]] = {}
        self.rights: dict[Any, dict[int, list]] = {}
        self.arrivals = 0
        self._heaps: tuple[list, list] = ([], [])
        self._fifos: tuple[collections.deque, collections.deque] = (collections.deque(), collections.deque())
        self._horizons = (0, 0)
        self._input_marks = [MIN_WATERMARK, MIN_WATERMARK]   # each input's own watermark, with A set

    def held(self) -> int:
        """Records of both sides waiting for a partner: one expiry entry each (counted in O(1); the state
        has a dict per key)."""
        return sum(map(len, self._heaps)) + sum(map(len, self._fifos))

    def setup(self, context: OperatorContext) -> None:
        self._setup_sides(context)
        lower = self._int("lower_ms", -(1 << 62))
        upper = self._int("upper_ms", -(1 << 62))
        if lower > upper:
            raise fail(self._name, "lower_ms", f"lower_ms {lower} is above upper_ms {upper}: nothing could match")
        if self.allowed_lateness_ms is not None:
            self._int("allowed_lateness_ms", 0)
        lateness = self.allowed_lateness_ms
        # a record is late when its ts + its side's horizon is below the watermark
        self._horizons = (upper, -lower) if lateness is None else (min(upper, lateness), min(-lower, lateness))
        self._rebuild()

    def on_input_watermarks(self, marks: dict[str, int]) -> None:
        """Each input's own watermark (the engine's, at a window's end): with A set, what the other side
        holds for it may go sooner."""
        if self.allowed_lateness_ms is None:
            return
        rose = False
        for side, port in enumerate(("left", "right")):
            mark = marks.get(port, IDLE)
            if mark != IDLE and mark > self._input_marks[side]:
                self._input_marks[side] = mark
                rose = True
        if rose:
            self._expire(self.watermark)

    def _marks(self) -> tuple[int, int]:
        """The watermark each side's records are judged by: the operator's, or with A set the higher of it
        and the side's own input's."""
        wm = self.watermark
        if self.allowed_lateness_ms is None:
            return wm, wm
        left, right = self._input_marks
        return max(wm, left), max(wm, right)

    def _rebuild(self) -> None:
        """The expiry heaps (expiry ms, arrival, key) of both sides, from the state."""
        left_keep, right_keep = self._keep()
        self._heaps = ([(e[0] + left_keep, n, k) for k, d in self.lefts.items() for n, e in d.items()],
                       [(e[0] + right_keep, n, k) for k, d in self.rights.items() for n, e in d.items()])
        for heap in self._heaps:
            heapq.heapify(heap)
        self._fifos = (collections.deque(), collections.deque())

    def _keep(self) -> tuple[int, int]:
        """How long past its ts each side's record is kept (left, right): until its last possible partner's
        time plus how far behind the watermark that partner may still come."""
        left_horizon, right_horizon = self._horizons
        return self.upper_ms + max(0, right_horizon), -self.lower_ms + max(0, left_horizon)

    def _side(self, records: list, side: int) -> None:
        fields = self._fields[side]
        marks = self._marks()
        wm, theirs_wm = marks[side], marks[1 - side]
        lower, upper = self.lower_ms, self.upper_ms
        keep = self._keep()[side]
        horizon = self._horizons[side]
        mine, theirs = (self.lefts, self.rights) if side == 0 else (self.rights, self.lefts)
        heap, fifo = self._heaps[side], self._fifos[side]
        kf, tf = fields.key_field, fields.ts_field
        inline = kf is not None and tf is not None
        read = self._read
        late, rows = [], []
        for r in records:
            t = None
            if inline:  # the common case read inline: key and integer time from dict fields
                try:
                    k, t = r[kf], r[tf]
                except (KeyError, TypeError, IndexError):
                    pass
            if t.__class__ is not int:
                kt = read(fields, r)
                if kt is None:
                    continue
                k, t = kt
            if t + horizon < wm:
                late.append(r)
                continue
            other = theirs.get(k)
            if other:
                if side == 0:
                    lo, hi = t + lower, t + upper
                    before = len(rows)
                    for e in other.values():
                        if lo <= e[0] <= hi:
                            rows.append({"key": k, "left": r, "right": e[1]})
                    entry = [t, r, len(rows) > before]
                else:
                    lo, hi = t - upper, t - lower
                    for e in other.values():
                        if lo <= e[0] <= hi:
                            rows.append({"key": k, "left": e[1], "right": r})
                            e[2] = True
                    entry = [t, r]
            else:
                entry = [t, r, False] if side == 0 else [t, r]
            due = t + keep
            if due < theirs_wm:  # no partner can come any more: nothing to hold
                if side == 0 and not entry[2] and self.how == "left":
                    rows.append({"key": k, "left": r, "right": None})
                continue
            n = self.arrivals
            self.arrivals += 1
            d = mine.get(k)
            if d is None:
                d = mine[k] = {}
            d[n] = entry
            if not fifo or fifo[-1][0] <= due:
                fifo.append((due, n, k))
            else:
                heapq.heappush(heap, (due, n, k))
        self._emit(rows, late)

    def _expire(self, watermark: int) -> None:
        rows = []
        marks = self._marks()
        for side, state in ((0, self.lefts), (1, self.rights)):
            heap, fifo = self._heaps[side], self._fifos[side]
            watermark = marks[1 - side]   # a side's records wait for partners from the other input
            while (fifo and fifo[0][0] < watermark) or (heap and heap[0][0] < watermark):
                if fifo and fifo[0][0] < watermark and (not heap or fifo[0] < heap[0]):
                    _, n, k = fifo.popleft()
                else:
                    _, n, k = heapq.heappop(heap)
                d = state[k]
                e = d.pop(n)
                if not d:
                    del state[k]
                if side == 0 and not e[2] and self.how == "left":
                    rows.append({"key": k, "left": e[1], "right": None})
        self._emit(rows)

    @classmethod
    def split_state(cls, states: list[dict[str, Any]], count: int,
                    owner: Callable[[Any], int]) -> list[dict[str, Any]]:
        """Deal both sides' keys out by ``owner(key)``; every new partition takes the highest watermark."""
        return _split(states, count, owner, (), ("lefts", "rights"))


def _split(states: list[dict[str, Any]], count: int, owner: Callable[[Any], int], windowed: tuple[str, ...],
           keyed: tuple[str, ...]) -> list[dict[str, Any]]:
    """New partition states: ``windowed`` maps (window -> {key: v}) and ``keyed`` maps (key -> v) dealt
    out by key owner; the rest from the first state; the highest watermark and counters."""
    if not states:
        return [{} for _ in range(count)]
    base = {k: v for k, v in states[0].items() if k not in windowed + keyed}
    for name in ("watermark", "order", "arrivals"):
        if name in base:
            base[name] = max(s.get(name, base[name]) for s in states)
    base["malformed"] = 0
    new = [dict(base, **{name: {} for name in windowed + keyed}) for _ in range(count)]
    for state in states:
        for name in windowed:
            for w, d in state.get(name, {}).items():
                for k, v in d.items():
                    new[owner(k)][name].setdefault(w, {})[k] = v
        for name in keyed:
            for k, v in state.get(name, {}).items():
                target = new[owner(k)][name]
                if isinstance(v, dict):
                    target.setdefault(k, {}).update(v)
                else:
                    target.setdefault(k, []).extend(v)
    return new
