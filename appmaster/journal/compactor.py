"""The journal's compaction, made by a process of its own: snapshot g and log g become snapshot g+1.

:class:`~stram.master.journal.log.JournalWriter` appends what changed to
``journal/log-<g>`` and, once the log is long, starts ``log-<g+1>`` and hands
the old pair to this module: ``python -m stram.master.journal.compactor APP_PATH G``
reads snapshot g, replays log g and writes the result as snapshot g+1
(:func:`~stram.master.journal.log.compact`) (``fs.replace_file``: one complete version
or the other is always there). The master meanwhile goes on appending to log
g+1; until the new snapshot is in place a reader replays both logs
(:func:`~stram.master.journal.log.read_journal`).

Made in the master, from its caches and under its lock, the snapshot of
20,000 operators (16 MB) took 115-150 ms, every heartbeat waiting for it,
every 30 s or so at 2,000 containers (``bench/bench_heartbeats.py``). Here it
costs the master a process start and, once it ended, one deletion.
"""

from __future__ import annotations

import logging
import os
import subprocess
import sys

from stram.master.journal.log import Compaction, compact

__all__ = ["start"]

log = logging.getLogger("stram.master.journal")


def _die_with_parent(parent: int) -> bool:
    """Ask Linux to kill this process when its parent (the master) ends; whether it still lives.
    A compactor outliving its master could put an old snapshot in the place of the next attempt's."""
    try:
        import ctypes
        import signal

        libc = ctypes.CDLL(None, use_errno=True)
        libc.prctl(1, int(signal.SIGKILL), 0, 0, 0)  # PR_SET_PDEATHSIG
    except (OSError, AttributeError):
        pass  # not Linux: the check of the snapshot's identity before the replacement remains
    return os.getppid() == parent


def start(app_path: str, generation: int) -> Compaction:
    """Compact ``generation`` in a new process (exit code 0 once snapshot ``generation + 1`` is in place)."""
    here = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
    env = dict(os.environ, PYTHONPATH=os.pathsep.join(p for p in (here, os.environ.get("PYTHONPATH")) if p))
    return subprocess.Popen([sys.executable, "-m", "stram.master.journal.compactor", app_path, str(generation),
                             str(os.getpid())],
                            stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL, env=env)


def main(argv: list[str]) -> int:
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(levelname)s %(name)s: %(message)s")
    if len(argv) not in (2, 3) or not all(a.isdigit() for a in argv[1:]):
        print("usage: python -m stram.master.journal.compactor APP_PATH GENERATION [MASTER_PID]", file=sys.stderr)
        return 2
    if len(argv) == 3 and not _die_with_parent(int(argv[2])):
        log.error("the master (pid %s) has ended: no compaction", argv[2])
        return 1
    try:
        compact(argv[0], int(argv[1]))
    except Exception as exc:  # noqa: BLE001 - the master reads the exit code and snapshots its live state
        log.error("the compaction of the journal's generation %s under %s failed: %s", argv[1], argv[0], exc)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
