"""The channel: the files through which a SparkPipeline and its ``stram`` readers talk.

In PySpark 4 the reader's driver-side methods (``initialOffset``,
``latestOffset``, ``partitions``, ``commit``) run in Python worker processes
started by the JVM, not in the process that owns the SparkSession, so they
cannot reach the operator's objects. They talk through a directory of small
JSON files instead:

* ``state.json`` (operator -> reader): the buffer-server address, token,
  publisher, mask, keys and codec of every upstream partition of every input
  port, the last window each upstream operator finished (``upstream_windows``
  from the master), the upstream partitions whose stream ended, and the
  initial window. The operator rewrites it (atomically) when it changes.
* ``commit-<port>.json`` (reader -> operator): the end window Spark passed to
  ``commit(end)``.
"""

from __future__ import annotations

import json
import os
import threading
import time
from typing import Any

__all__ = ["Channel", "latest_window"]


class Channel:
    """The files through which a SparkPipeline and its ``stram`` readers talk.

    Parameters
    ----------
    directory : str
        A local directory of the SparkPipeline's container (its work dir).
    """

    def __init__(self, directory: str) -> None:
        self.directory = directory

    @property
    def state_path(self) -> str:
        return os.path.join(self.directory, "state.json")

    def commit_path(self, port: str) -> str:
        return os.path.join(self.directory, f"commit-{port}.json")

    def _write(self, path: str, data: dict[str, Any]) -> None:
        os.makedirs(self.directory, exist_ok=True)
        tmp = f"{path}.{os.getpid()}.{threading.get_ident()}.tmp"
        with open(tmp, "w") as f:
            json.dump(data, f, separators=(",", ":"))
        os.replace(tmp, path)

    @staticmethod
    def _read(path: str) -> dict[str, Any] | None:
        try:
            with open(path) as f:
                return json.load(f)
        except FileNotFoundError:
            return None

    def write_state(self, state: dict[str, Any]) -> None:
        """Publish the operator's view (operator side)."""
        self._write(self.state_path, state)

    def read_state(self) -> dict[str, Any]:
        """The operator's view (reader side).

        Raises
        ------
        RuntimeError
            When the operator has not written it (the channel option is wrong).
        """
        state = self._read(self.state_path)
        if state is None:
            raise RuntimeError(f"stram source: no channel state at {self.state_path}; the 'channel' option "
                               f"must name the directory of a running SparkPipeline operator")
        return state

    def write_commit(self, port: str, window: int) -> None:
        """Record Spark's ``commit(end)`` for a port (reader side)."""
        self._write(self.commit_path(port), {"port": port, "window": int(window), "millis": _now_ms()})

    def read_commit(self, port: str) -> int | None:
        """The last window Spark committed for a port through ``commit`` (operator side)."""
        data = self._read(self.commit_path(port))
        return None if data is None else int(data["window"])


def _now_ms() -> int:
    return int(time.time() * 1000)


def latest_window(state: dict[str, Any], port: str) -> int | None:
    """Newest window every upstream partition of ``port`` has finished (None: unknown yet).

    Partitions whose stream ended count with their last window only when every
    partition of the port ended; until then the running ones decide.
    """
    parts = state["ports"].get(port) or []
    windows = state.get("windows", {})
    ended = state.get("ended", {})
    running: list[int] = []
    finished: list[int] = []
    for part in parts:
        src = str(part["source"])
        if src in ended:
            finished.append(int(ended[src]))
        elif src in windows:
            running.append(int(windows[src]))
        else:
            return None
    if running:
        return min(running)
    return max(finished) if finished else None
