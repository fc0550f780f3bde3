"""Text operators."""

from __future__ import annotations

import re

from container.operator import InputPort, Operator, OutputPort

_WORD = re.compile(r"[a-z0-9]+")


class WordSplitter(Operator):
    """Emits every match of ``[a-z0-9]+`` in the lower-cased line."""

    input = InputPort()
    output = OutputPort()

    def process_input(self, line: str) -> None:
        emit = self.output.emit
        for word in _WORD.findall(line.lower()):
            emit(word)
