"""Operators for end-to-end tests (imported by containers as ``tests.e2e_ops``)."""

from __future__ import annotations

from container.operator import FatalError, InputPort, Operator, OutputPort


class Boom(Operator):
    """Passes tuples through; raises after ``after`` tuples (every incarnation)."""

    input = InputPort()
    output = OutputPort()
    after: int = 10
    fatal: bool = False
    transient = ("_seen",)

    def __init__(self) -> None:
        self._seen = 0

    def process_input(self, tuple) -> None:  # noqa: A002 - the API's name
        self._seen += 1
        if self._seen > self.after:
            if self.fatal:
                raise FatalError(f"boom after {self.after} tuples (fatal)")
            raise ValueError(f"boom after {self.after} tuples")
        self.output.emit(tuple)
