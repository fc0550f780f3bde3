"""The probe of the start-up benchmark (bench/bench_startup.py).

``FirstWindow`` writes, as JSON to ``path``, the wall-clock times of the first
tuple it processed and of the end of the first window that carried any, then
counts what it sees (the benchmark checks the count against the input).
"""

from __future__ import annotations

import json
import os
import time
from typing import Any

from container.operator import InputPort, Operator


class FirstWindow(Operator):
    input = InputPort()
    path: str = ""

    def __init__(self) -> None:
        self.first_tuple = 0.0
        self.first_window = 0.0
        self.count = 0

    def process_input(self, tuple: Any) -> None:  # noqa: A002
        if not self.first_tuple:
            self.first_tuple = time.time()
        self.count += 1

    def end_window(self) -> None:
        if self.count and not self.first_window:
            self.first_window = time.time()
        self._write()

    def teardown(self) -> None:
        self._write()

    def _write(self) -> None:
        tmp = f"{self.path}.tmp"
        with open(tmp, "w") as f:
            json.dump({"first_tuple": self.first_tuple, "first_window": self.first_window,
                       "count": self.count}, f)
        os.replace(tmp, self.path)
