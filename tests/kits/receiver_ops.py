"""Operators for the receiver tests, importable from specs as ``tests.kits.receiver_ops:Name``."""

from __future__ import annotations

from typing import Any

from stram.operator import InputPort, Operator, OutputPort
from stram.receivers import Receiver


class Relay(Operator):
    """Passes every tuple on unchanged (a stage between a receiver and the output)."""

    input = InputPort()
    output = OutputPort()

    def process_input(self, tuple: Any) -> None:
        self.output.emit(tuple)


class FailingReceiver(Receiver):
    """A receiver whose source is never reachable: ``on_start`` always raises."""

    message: str = "source unavailable"

    def on_start(self) -> None:
        raise ConnectionError(self.message)
