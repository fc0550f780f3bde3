"""Tiny operators for the spec tests (imported as ``spec_fixture_ops``)."""

from __future__ import annotations

from typing import Any, Optional

from stram.operator import InputOperator, InputPort, Operator, OutputPort


class Source(InputOperator):
    """An input operator with one property of each supported type."""

    output = OutputPort()
    path: str = ""
    count: int = 10
    rate: float = 1.0
    verbose: bool = False
    limit: Optional[int] = None
    label: Optional[str] = None
    tags: list[str] = []
    weights: dict[str, int] = {}
    anything = None  # not annotated: not a property

    def emit_tuples(self) -> None:
        self.output.emit(self.path)


class Upper(Operator):
    """One input, one output."""

    input = InputPort()
    output = OutputPort()
    prefix: str = ""

    def process_input(self, tuple: Any) -> None:
        self.output.emit(self.prefix + str(tuple).upper())


class Join(Operator):
    """Two required inputs and an optional one."""

    left = InputPort()
    right = InputPort()
    control = InputPort(optional=True)
    output = OutputPort()


class Sink(Operator):
    """An output operator."""

    input = InputPort()
    path: str = ""


class OptionalSink(Operator):
    """An operator whose only input is optional."""

    input = InputPort(optional=True)


class ControlledSource(InputOperator):
    """An input operator that also declares an (optional) input port."""

    control = InputPort(optional=True)
    output = OutputPort()


class NotAnOperator:
    """A class that is no Operator."""


def stats_listener(stats: Any) -> None:
    """A STATS_LISTENER target."""


NOT_CALLABLE = 42


class SelfReader(InputOperator):
    """An operator that reads its input streams itself (as SparkPipeline does)."""

    external_inputs = True
    input = InputPort()
