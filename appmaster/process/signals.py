"""How the master process answers SIGTERM and SIGINT: a kill while the application runs, its stop after.

On YARN a SIGTERM comes from two places. ``yarn application -kill`` (and ``stram kill-app``,
which asks YARN) signal the master's container while the application runs: that is a
kill. Skein's application master stops the master script with SIGTERM as soon as the
master reported the final state (at its exit): that is the end the master asked for, and
is logged as such, not as a kill.
"""

from __future__ import annotations

import logging
import signal
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from stram.master.process.master import AppMaster

log = logging.getLogger("stram.master")

__all__ = ["install_signal_handlers"]


def install_signal_handlers(master: AppMaster) -> None:
    """SIGTERM/SIGINT kill the application (containers stopped, state KILLED) until it has ended;
    once it has (``master.finished``: its final state decided, its containers stopped), a signal
    is the master's expected stop and only says so."""
    def handler(signum: int, frame: Any) -> None:
        if master.finished.is_set():
            log.info("signal %d after the application ended %s: the master is stopping", signum,
                     master.state.state)
            return
        log.info("signal %d: killing the application", signum)
        master.request_kill()
    signal.signal(signal.SIGTERM, handler)
    signal.signal(signal.SIGINT, handler)
