"""Spark's checkpoint of a query: the window of each ``stram`` source in its newest committed batch.

Spark calls a source's ``commit`` only when it plans the *next* batch, so the
last batch of a stream is known committed from ``<checkpointLocation>/commits``
alone; the matching ``offsets/<batch>`` file holds the end windows.
"""

from __future__ import annotations

import json
import threading

from stram.common import fs

__all__ = ["committed_offsets"]


class CommitLog:
    """Reads the committed end windows out of a query's checkpoint (``commits/``, ``offsets/``)."""

    def __init__(self, location: str) -> None:
        self.location = location
        self.batch = -1
        self.windows: dict[str, int] = {}
        self._lock = threading.Lock()

    def _uri(self, *parts: str) -> str:
        return fs.join(self.location, *parts)

    def poll(self) -> dict[str, int]:
        """Port -> end window of the newest committed batch (empty before the first)."""
        with self._lock:
            return dict(self._poll())

    def _poll(self) -> dict[str, int]:
        newest = self.batch
        if newest < 0:
            try:
                names = [info.base_name for info in fs.list_dir(self._uri("commits"))]
            except OSError:
                names = []
            ids = [int(n) for n in names if n.isdigit()]
            newest = max(ids, default=-1)
        else:
            while fs.exists(self._uri("commits", str(newest + 1))):
                newest += 1
        if newest > self.batch:
            windows = committed_offsets(self._uri("offsets", str(newest)))
            if windows is not None:
                self.batch = newest
                self.windows = windows
        return self.windows


def committed_offsets(offset_file: str) -> dict[str, int] | None:
    """Port -> window of the ``stram`` sources in one offset-log file (None if unreadable)."""
    try:
        text = fs.read_bytes(offset_file).decode()
    except (OSError, FileNotFoundError):
        return None
    out: dict[str, int] = {}
    for line in text.splitlines()[2:]:
        try:
            offset = json.loads(line)
        except ValueError:
            continue
        if isinstance(offset, dict) and "window" in offset and "port" in offset:
            port = str(offset["port"])
            out[port] = min(int(offset["window"]), out.get(port, int(offset["window"])))
    return out
