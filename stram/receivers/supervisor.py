"""The receiver supervisor: starts a receiver, restarts it with backoff, stops it.

:class:`ReceiverSupervisor` runs the receiver's ``on_start``/``on_stop`` on its
own thread and keeps its lifecycle (:class:`SupervisorState`); past
``RECEIVER_MAX_RESTARTS`` failures in a row it gives up and says why.
"""

from __future__ import annotations

import enum
import logging
import threading
import time
from typing import Any, Callable

__all__ = ["SupervisorState", "ReceiverSupervisor"]

#: One logger for the whole package, under the name it always had.
logger = logging.getLogger("stram.receivers")


def describe(reason: str, error: BaseException | None = None) -> str:
    """One line: the reason and, when given, the error's type and message."""
    text = reason if error is None else f"{reason}: {type(error).__name__}: {error}"
    return " ".join(text.split())


class SupervisorState(str, enum.Enum):
    """Lifecycle of a supervised receiver."""

    INITIALIZED = "INITIALIZED"
    STARTED = "STARTED"
    RESTARTING = "RESTARTING"
    #: ``stop(reason)``: the receiver is done; the stream ends once everything is emitted.
    STOPPED = "STOPPED"
    #: Too many failures in a row, or ``stop(reason, error)``: the application fails.
    FAILED = "FAILED"
    #: The operator was torn down.
    SHUT_DOWN = "SHUT_DOWN"


_FINAL = (SupervisorState.STOPPED, SupervisorState.FAILED, SupervisorState.SHUT_DOWN)
_REQUEST_RANK = {"restart": 0, "stop": 1, "shutdown": 2}


class ReceiverSupervisor:
    """Starts a receiver, restarts it with backoff when it asks, stops it (Spark's ReceiverSupervisor).

    ``on_start``/``on_stop`` run on the supervisor's own thread. A restart
    (asked by the receiver, or an exception from ``on_start``) calls
    ``on_stop``, waits ``min(initial * 2 ** (failures - 1), longest)`` and
    calls ``on_start`` again. Failures count in a row: a receiver that stored
    something since its last start begins again at one. Past ``max_restarts``
    failures in a row the supervisor gives up: :attr:`state` becomes FAILED and
    :attr:`fatal` says why.

    Parameters
    ----------
    receiver:
        Anything with ``on_start()`` and ``on_stop()``.
    progress:
        Returns a number that grows while the receiver makes progress
        (items stored); default: never.
    label:
        Names the receiver in messages.
    max_restarts:
        ``RECEIVER_MAX_RESTARTS``.
    backoff:
        (first, longest) delay before a restart, in seconds.
    log:
        Where restart messages go.
    """

    def __init__(self, receiver: Any, progress: Callable[[], int] = lambda: 0, *,
                 label: str = "receiver", max_restarts: int = 10,
                 backoff: tuple[float, float] = (0.1, 5.0),
                 log: Callable[[str], None] | None = None) -> None:
        self.receiver = receiver
        self.label = label
        self.max_restarts = int(max_restarts)
        self.backoff = backoff
        self.state = SupervisorState.INITIALIZED
        #: Restarts done so far.
        self.restarts = 0
        #: Failures since the receiver last made progress.
        self.failures = 0
        #: The last restart's reason and error, one line.
        self.last_error = ""
        #: Why the application must fail (state FAILED), else None.
        self.fatal: str | None = None
        #: Why the receiver stopped (state STOPPED).
        self.stop_reason = ""
        self._progress = progress
        self._log = log or (lambda msg: logger.info("%s", msg))
        self._cond = threading.Condition()
        self._request: tuple[str, str, BaseException | None] | None = None
        self._receiving = False
        self._thread: threading.Thread | None = None

    @property
    def receiving(self) -> bool:
        """The receiver is started and no restart or stop is under way."""
        return self._receiving

    def backoff_delay(self, failures: int) -> float:
        """Seconds to wait before restarting after ``failures`` failures in a row."""
        first, longest = self.backoff
        return min(first * 2 ** max(failures - 1, 0), longest)

    def start(self) -> None:
        """Start the receiver on the supervisor's thread."""
        with self._cond:
            if self._thread is not None or self.state in _FINAL:
                return
            self._thread = threading.Thread(target=self._run, daemon=True,
                                            name=f"receiver-supervisor-{self.label}")
        self._thread.start()

    def request_restart(self, reason: str, error: BaseException | None = None) -> None:
        """Stop the receiver and start it again after the backoff."""
        self._post("restart", reason, error)

    def request_stop(self, reason: str, error: BaseException | None = None) -> None:
        """Stop the receiver for good; with an ``error`` the application fails."""
        self._post("stop", reason, error)

    def request_shutdown(self) -> None:
        """Stop the receiver because its operator is going away."""
        self._post("shutdown", "the operator is shutting down", None)

    def join(self, timeout: float | None = None) -> None:
        """Wait for the supervisor's thread to end (after a stop or shutdown)."""
        thread = self._thread
        if thread is not None and thread is not threading.current_thread():
            thread.join(timeout)

    def _post(self, kind: str, reason: str, error: BaseException | None) -> None:
        with self._cond:
            if self.state in _FINAL:
                return
            self._receiving = False
            if self._thread is None and kind != "restart":
                self._finish(kind, reason, error)  # never started: nothing to stop
                return
            if self._request is None or _REQUEST_RANK[kind] > _REQUEST_RANK[self._request[0]]:
                self._request = (kind, reason, error)
            self._cond.notify_all()

    def _run(self) -> None:
        delay = 0.0
        while True:
            with self._cond:
                deadline = time.monotonic() + delay
                while self._request is None or self._request[0] == "restart":
                    left = deadline - time.monotonic()
                    if left <= 0:
                        break
                    self._cond.wait(left)
                if self._request is not None and self._request[0] != "restart":
                    self._finish(*self._request)
                    return
                self._request = None  # a restart asked during the backoff is this one
                self.state = SupervisorState.STARTED
                self._receiving = True
            mark = self._progress()
            try:
                self.receiver.on_start()
            except Exception as exc:  # noqa: BLE001 - receiver code may raise anything
                self._post("restart", "error starting receiver", exc)
            with self._cond:
                while self._request is None:
                    self._cond.wait()
                kind, reason, error = self._request
                if kind == "restart":
                    self._request = None
                self._receiving = False
            self._stop_receiver()
            if kind != "restart":
                with self._cond:
                    self._finish(kind, reason, error)
                return
            self.failures = 1 if self._progress() > mark else self.failures + 1
            self.last_error = describe(reason, error)
            if self.failures > self.max_restarts:
                with self._cond:
                    self.state = SupervisorState.FAILED
                    self.fatal = (f"receiver {self.label} failed {self.failures} times in a row "
                                  f"(RECEIVER_MAX_RESTARTS={self.max_restarts}); last error: "
                                  f"{self.last_error}")
                self._log(self.fatal)
                return
            self.restarts += 1
            delay = self.backoff_delay(self.failures)
            with self._cond:
                if self.state not in _FINAL:
                    self.state = SupervisorState.RESTARTING
            self._log(f"receiver {self.label}: restart {self.restarts} in {delay:.2f}s: {self.last_error}")

    def _stop_receiver(self) -> None:
        try:
            self.receiver.on_stop()
        except Exception as exc:  # noqa: BLE001
            logger.warning("receiver %s: on_stop failed: %s", self.label, describe("", exc))

    def _finish(self, kind: str, reason: str, error: BaseException | None) -> None:
        """Final state for a stop or shutdown request (``_cond`` held)."""
        self._request = None
        self._receiving = False
        if kind == "shutdown":
            self.state = SupervisorState.SHUT_DOWN
        elif error is not None:
            self.state = SupervisorState.FAILED
            self.last_error = describe(reason, error)
            self.fatal = f"receiver {self.label} stopped: {self.last_error}"
        else:
            self.state = SupervisorState.STOPPED
            self.stop_reason = reason
        self._cond.notify_all()
