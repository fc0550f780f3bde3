"""Aggregating operators."""

from __future__ import annotations

from collections import Counter
from typing import Any, Callable

from stram.operator import InputPort, Operator, OutputPort


class KeyCounter(Operator):
    """Counts keys; at each window's end emits one dict per key seen in it.

    Emits ``{"key": k, "count": n_in_this_window, "total": running_total}``.
    The running totals are checkpointed state; partitioned by key (the tuple
    itself is its key), the totals stay exact.
    """

    input = InputPort()
    output = OutputPort()
    transient = ("_window",)

    def __init__(self) -> None:
        #: key -> count over every window so far.
        self.totals: dict[Any, int] = {}
        self._window: Counter = Counter()

    def set_state(self, state: dict[str, Any]) -> None:
        super().set_state(state)
        self._window = Counter()

    def begin_window(self, window_id: int) -> None:
        self._window = Counter()

    def process_input(self, key: Any) -> None:
        self._window[key] += 1

    def process_batch(self, keys: list) -> None:
        self._window.update(keys)

    def end_window(self) -> None:
        totals = self.totals
        get = totals.get
        rows = []
        for key, n in self._window.items():
            total = totals[key] = get(key, 0) + n
            rows.append({"key": key, "count": n, "total": total})
        self.output.emit_batch(rows)
        self._window = Counter()

    @classmethod
    def split_state(cls, states: list[dict[str, Any]], count: int,
                    owner: Callable[[Any], int]) -> list[dict[str, Any]]:
        """Merge the old partitions' totals and deal them out by key owner."""
        new = [{"totals": {}} for _ in range(count)]
        for state in states:
            for key, total in state.get("totals", {}).items():
                new[owner(key)]["totals"][key] = total
        return new
