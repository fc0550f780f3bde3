"""Housekeeping off the heartbeat path: obsolete checkpoints, the garbage collector.

Each committed window makes older checkpoints of many operators obsolete: at
2,000 containers × 10 operators checkpointing every 5 s that is thousands of
file deletions a second, each a file-system call (a NameNode RPC on HDFS).
Done in the heartbeat that moved the committed window, they delayed its
answer; a :class:`Purger` takes them in a queue and one thread of its own
deletes them, oldest first.

A deletion that is lost (the master ends or dies first) leaves an obsolete
file behind and nothing else: these windows lie before every operator's
recovery checkpoint, so no recovery reads them again. A failed deletion is
logged (rate-limited) and dropped.

:func:`tune_gc` keeps the cyclic garbage collector's pauses out of heartbeat
answers.
"""

from __future__ import annotations

import collections
import gc
import logging
import threading
import time
from typing import Any, Callable, Iterable

from stram.common import fs
from stram.common.logsetup import rate_limit

log = logging.getLogger("stram.master.process.housekeeping")
rate_limit(log, burst=5, interval=30.0)

__all__ = ["Purger", "purge_delay", "tune_gc", "GC_THRESHOLDS"]


class Purger:
    """Deletes files in a thread of its own, in the order they were submitted, each ``delay``
    seconds after its submission at the earliest.

    Every operator checkpoints the same windows, so every container reports its checkpoints
    within one heartbeat interval, and the committed window makes the previous ones obsolete
    in the same wave. Deleted at once, those files (one per operator) were deleted while the
    master answered the wave's heartbeats, which cost it twice as much as the others: the
    purger's thread took the master's interpreter from them. The master's ``delay`` is half a
    checkpoint period, so the deletions fall between two waves (:func:`purge_delay`).

    Parameters
    ----------
    delete:
        Deletes one URI (missing files are not an error); :func:`stram.common.fs.delete` by default.
    delay:
        Seconds a file waits in the queue before it is deleted (0: at once).
    """

    #: Files deleted per hold of the queue's lock.
    BATCH = 256

    def __init__(self, delete: Callable[[str], None] = fs.delete, delay: float = 0.0) -> None:
        self._delete = delete
        self.delay = max(0.0, delay)
        #: (when it may be deleted, URI), in the order submitted (so in the order of those times)
        self._queue: collections.deque[tuple[float, str]] = collections.deque()
        self._wake = threading.Condition()
        self._closed = False
        self._busy = 0
        self._hurry = 0  # drains waiting: the delay no longer holds
        #: Files deleted, and deletions that failed.
        self.deleted = 0
        self.failed = 0
        self._thread = threading.Thread(target=self._run, name="checkpoint-purger", daemon=True)
        self._thread.start()

    def submit(self, uris: Iterable[str]) -> None:
        """Queue ``uris`` for deletion (returns at once)."""
        due = time.monotonic() + self.delay
        with self._wake:
            if self._closed:
                return
            self._queue.extend((due, uri) for uri in uris)
            self._wake.notify()

    def pending(self) -> int:
        """Files queued or being deleted."""
        with self._wake:
            return len(self._queue) + self._busy

    def drain(self, timeout: float) -> bool:
        """Delete every queued file now, not after its delay; whether that was done within ``timeout`` s."""
        with self._wake:
            self._hurry += 1
            self._wake.notify_all()
            try:
                return self._wake.wait_for(lambda: not self._queue and not self._busy, timeout)
            finally:
                self._hurry -= 1

    def close(self, timeout: float = 2.0) -> None:
        """Delete what is queued for up to ``timeout`` s, then stop (what is left stays on disk)."""
        self.drain(timeout)
        with self._wake:
            self._closed = True
            left = len(self._queue)
            self._queue.clear()
            self._wake.notify_all()
        if left:
            log.info("%d obsolete checkpoint files left undeleted at the end", left)
        self._thread.join(timeout=timeout)

    def _take(self) -> list[str] | None:
        """The next files due (at most :data:`BATCH`), waiting for them; None once closed."""
        with self._wake:
            self._busy = 0  # (this counts down as a batch is deleted; it is not under the lock)
            self._wake.notify_all()
            while True:
                if self._closed:
                    return None
                queue = self._queue
                if queue:
                    wait = queue[0][0] - time.monotonic()
                    if wait <= 0 or self._hurry:
                        now = time.monotonic()
                        batch = []
                        while queue and len(batch) < self.BATCH and (self._hurry or queue[0][0] <= now):
                            batch.append(queue.popleft()[1])
                        self._busy = len(batch)
                        return batch
                    self._wake.wait(wait)
                else:
                    self._wake.wait()

    def _run(self) -> None:
        while (batch := self._take()) is not None:
            for uri in batch:
                if self._closed:
                    break  # closed meanwhile: the rest stays on disk
                try:
                    self._delete(uri)
                    self.deleted += 1
                except Exception as exc:  # noqa: BLE001 - an obsolete file left behind harms nothing
                    self.failed += 1
                    log.warning("could not delete obsolete checkpoint %s: %s", uri, exc)
                self._busy -= 1


#: The longest a purger waits before it deletes an obsolete checkpoint, seconds.
MAX_PURGE_DELAY = 30.0


def purge_delay(spec: Any) -> float:
    """Half the application's checkpoint period, seconds (at most :data:`MAX_PURGE_DELAY`): an
    obsolete checkpoint is deleted midway between the wave of checkpoints that made it obsolete and
    the next (:class:`Purger`)."""
    period = float(spec.attribute("STREAMING_WINDOW_SIZE_MILLIS")) * int(spec.attribute("CHECKPOINT_WINDOW_COUNT"))
    return min(MAX_PURGE_DELAY, max(0.0, period / 2000))


#: Allocations between young collections in a master process (Python's default: 700).
GC_THRESHOLDS = (50_000, 20, 100)


def tune_gc() -> None:
    """Keep the cyclic garbage collector's pauses out of heartbeat answers (a master process only).

    The master's state is tens of thousands of long-lived objects; with Python's defaults a
    collection of the older generations scanned all of them every few seconds (0.2-0.5 s at
    20,000 operators, every heartbeat waiting). Everything alive once the plan is made moves to
    the permanent generation (:func:`gc.freeze`: still freed by reference counting, never scanned
    again), and young collections run every 50,000 allocations, the full one more rarely.
    """
    gc.collect()
    gc.freeze()
    gc.set_threshold(*GC_THRESHOLDS)
    gc.enable()  # after pause_gc


def pause_gc() -> None:
    """No cyclic collection until :func:`tune_gc` (a master process only, while it builds its state).

    Building the plan of a restored journal only allocates: a collection finds no garbage,
    yet each full one scans everything built so far. At 20,000 operators they took 1.2 s of
    a 2.3 s journal read.
    """
    gc.disable()


#: The interpreter's GIL switch interval (``sys.setswitchinterval``) for a master of at least
#: :data:`SWITCH_MIN_CONTAINERS` containers while some of them have no heartbeat stream open (start-up,
#: a restarted master adopting them, replacements). Its gRPC event loop, which accepts their calls,
#: shares the GIL with the thread handling heartbeats; CPython's 5 ms let it accept a call or two per
#: turn. ``bench/bench_heartbeats.py`` at 2,000 x 10, 1 s interval, two runs each: every operator
#: ACTIVE after 16.6-18.3 s at 0.5 ms, 29.7-31.7 s at 5 ms; but 18% fewer heartbeats/s served at
#: 0.5 ms, so once every container holds its stream the interpreter's own interval comes back.
#: (20 ms served more heartbeats/s only because it starved the calls of the containers still
#: connecting, past their 30 s deadline: fewer containers heartbeated.)
SWITCH_CONNECTING = 0.0005
SWITCH_MIN_CONTAINERS = 500


def switch_interval(live_containers: int, open_streams: int, default: float) -> float:
    """The switch interval for a master with ``live_containers`` (launched, not lost or released) of
    which ``open_streams`` hold a heartbeat stream; ``default``: the interpreter's own."""
    if live_containers >= SWITCH_MIN_CONTAINERS and open_streams < live_containers:
        return SWITCH_CONNECTING
    return default
