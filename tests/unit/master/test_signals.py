"""The master's SIGTERM/SIGINT: a kill while the application runs, the expected stop once it ended.

On YARN, Skein's application master stops the master script with SIGTERM as soon as the
master reported the final state; ``yarn application -kill`` (and ``stram kill-app``, which
asks YARN) stop it with SIGTERM too, while the application runs. The log must tell them apart.
"""

from __future__ import annotations

import logging
import signal
import threading
import types

import pytest

from stram.master.process.signals import install_signal_handlers


class FakeMaster:
    """What the handlers use of an AppMaster: ``finished``, ``state.state``, ``request_kill``."""

    def __init__(self) -> None:
        self.finished = threading.Event()
        self.state = types.SimpleNamespace(state="RUNNING")
        self.kills = 0

    def request_kill(self) -> None:
        self.kills += 1


@pytest.fixture
def master():
    saved = {s: signal.getsignal(s) for s in (signal.SIGTERM, signal.SIGINT)}
    fake = FakeMaster()
    install_signal_handlers(fake)  # type: ignore[arg-type]
    try:
        yield fake
    finally:
        for s, handler in saved.items():
            signal.signal(s, handler)


def lines(caplog) -> list[str]:
    return [r.getMessage() for r in caplog.records if r.name == "stram.master"]


def test_sigterm_while_running_kills_the_application(master, caplog):
    caplog.set_level(logging.INFO, logger="stram.master")
    signal.raise_signal(signal.SIGTERM)  # delivered for real; the handler runs in this (main) thread
    assert master.kills == 1
    assert lines(caplog) == ["signal 15: killing the application"]
    signal.raise_signal(signal.SIGINT)
    assert master.kills == 2 and lines(caplog)[-1] == "signal 2: killing the application"


@pytest.mark.parametrize("final", ["SUCCEEDED", "FAILED", "KILLED"])
def test_sigterm_after_the_end_is_the_masters_stop_not_a_kill(master, caplog, final):
    caplog.set_level(logging.INFO, logger="stram.master")
    master.state.state = final
    master.finished.set()
    signal.raise_signal(signal.SIGTERM)
    assert master.kills == 0
    assert lines(caplog) == [f"signal 15 after the application ended {final}: the master is stopping"]
    assert not any("killing" in line for line in lines(caplog))
