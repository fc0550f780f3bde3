"""Text operators."""

from __future__ import annotations

import re

from stram.operator import InputPort, Operator, OutputPort

_WORD = re.compile(r"[a-z0-9]+")


class WordSplitter(Operator):
    """Emits every match of ``[a-z0-9]+`` in the lower-cased line.

    A batch of lines is split in one pass over the lines joined by newlines
    (a newline is never part of a word, so the words and their order are
    those of the lines one by one).
    """

    input = InputPort()
    output = OutputPort()

    def process_input(self, line: str) -> None:
        emit = self.output.emit
        for word in _WORD.findall(line.lower()):
            emit(word)

    def process_batch(self, lines: list) -> None:
        self.output.emit_batch(_WORD.findall("\n".join(lines).lower()))
