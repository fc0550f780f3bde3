"""Event-time deduplication by key: a record goes out unless one of its key within ``within_ms`` of
its event time already did; what it remembers expires with the watermark."""

from __future__ import annotations

import heapq
from typing import Any, Callable, Optional

from stram.operator import InputPort, OperatorContext, OutputPort
from stram.operators.windowing import EventTimeOperator, Fields

__all__ = ["Dedup"]


class Dedup(EventTimeOperator):
    """Emits a record unless a record with the same key and an event time within ``within_ms`` of
    it was emitted. A record whose ts + within_ms is below the watermark goes to ``late``. A
    remembered time t is dropped once the watermark passes t + 2 * within_ms: a record that is not
    late has ts >= watermark - within_ms, so it is never within within_ms of a forgotten time
    (forgetting at t + within_ms would let duplicates of ts in [watermark - within_ms, watermark)
    through).

    State: ``seen`` (key -> event times emitted and not yet expired).
    """

    event_time_inputs = {"timestamp_field": "input"}

    input = InputPort()
    output = OutputPort()
    late = OutputPort()

    key_field: Optional[str] = None
    key_fn: Optional[str] = None
    timestamp_field: Optional[str] = None
    timestamp_fn: Optional[str] = None
    within_ms: int = 0

    transient = EventTimeOperator.transient + ("_fields", "_heap", "_count")

    def __init__(self) -> None:
        super().__init__()
        self.seen: dict[Any, list[int]] = {}
        self._heap: list = []
        self._count = 0

    def held(self) -> int:
        """Event times remembered."""
        return len(self._heap)

    @classmethod
    def partition_key(cls, properties: dict[str, Any], port: str) -> Optional[str]:
        if properties.get("key_field"):
            return "field:" + properties["key_field"]
        return properties.get("key_fn") or None

    def setup(self, context: OperatorContext) -> None:
        self._begin(context)
        self._int("within_ms", 0)
        self._fields = Fields(self)
        self._rebuild()

    def _rebuild(self) -> None:
        """The expiry heap (t + 2 * within, number, key, t), from the state."""
        self._heap = [(t + 2 * self.within_ms, n, k, t) for n, (k, t) in
                      enumerate((k, t) for k, ts in self.seen.items() for t in ts)]
        heapq.heapify(self._heap)
        self._count = len(self._heap)

    def process_input(self, record: Any) -> None:
        self.process_input_batch([record])

    def process_input_batch(self, records: list) -> None:
        fields, within, wm, seen, heap = self._fields, self.within_ms, self.watermark, self.seen, self._heap
        keep = 2 * within
        out, late = [], []
        for r in records:
            kt = self._read(fields, r)
            if kt is None:
                continue
            k, t = kt
            if t + within < wm:
                late.append(r)
                continue
            times = seen.get(k)
            if times is None:
                times = seen[k] = []
            elif any(-within <= t - e <= within for e in times):
                continue
            times.append(t)
            self._count += 1
            heapq.heappush(heap, (t + keep, self._count, k, t))
            out.append(r)
        self._emit(out, late)

    def _expire(self, watermark: int) -> None:
        heap, seen = self._heap, self.seen
        while heap and heap[0][0] < watermark:
            _, _, k, t = heapq.heappop(heap)
            times = seen[k]
            times.remove(t)
            if not times:
                del seen[k]

    @classmethod
    def split_state(cls, states: list[dict[str, Any]], count: int,
                    owner: Callable[[Any], int]) -> list[dict[str, Any]]:
        """Deal the remembered keys out by ``owner(key)``; every new partition takes the highest watermark."""
        if not states:
            return [{} for _ in range(count)]
        base = dict(states[0], watermark=max(s.get("watermark", states[0].get("watermark")) for s in states),
                    malformed=0)
        new = [dict(base, seen={}) for _ in range(count)]
        for state in states:
            for k, times in state.get("seen", {}).items():
                new[owner(k)]["seen"].setdefault(k, []).extend(times)
        return new
