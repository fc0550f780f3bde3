"""Operators of the heartbeat load harness's application (:mod:`bench.heartbeats.bench_heartbeats`).

The master imports them to validate and plan the spec; no container runs
them: the harness's simulated agents only report windows for them.
"""

from __future__ import annotations

from typing import Any

from stram.operator import InputOperator, InputPort, Operator, OutputPort


class Source(InputOperator):
    """An input operator (never run by the harness)."""

    output = OutputPort()

    def emit_tuples(self) -> None:
        pass


class Relay(Operator):
    """Passes tuples on (never run by the harness)."""

    input = InputPort()
    output = OutputPort()

    def process_input(self, tuple: Any) -> None:  # noqa: A002
        self.output.emit(tuple)
