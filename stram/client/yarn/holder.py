"""The holder of the standing skein driver: ``stram driver start|stop`` (see :mod:`stram.client.yarn.standing`).

:func:`start` runs ``python -m stram.client.yarn.holder`` in a session of its own;
it opens a driver with :func:`stram.client.yarn.driver.connect`, records it and
keeps it until SIGTERM (:func:`stop`). The driver exits with it: skein's
driver ends when its stdin, the holder's pipe, closes.
"""

from __future__ import annotations

import argparse
import json
import logging
import os
import signal
import subprocess
import sys
import threading
import time
from typing import Any

from stram.client.yarn.driver import connect, log_tail, preflight
from stram.client.yarn.standing import HOLDER_MODULE, driver_dir, holder_alive, key, record_path, running
from stram.common import fs
from stram.common.errors import StramError, UserError

log = logging.getLogger("stram.client.yarn")

__all__ = ["start", "stop", "serve"]


def start(principal: str | None = None, keytab: str | None = None, timeout: float = 180.0) -> dict[str, Any]:
    """Start the standing driver (or find it running, started the same way); its record.

    Raises
    ------
    UserError
        A standing driver started for another configuration or login runs (stop it
        first), or what :func:`stram.client.yarn.driver.connect` checks is missing.
    StramError
        The driver did not start (the end of the holder's log says why).
    """
    wanted = key(preflight(), principal, keytab)
    record = running()
    if record is not None:
        if record.get("key") == wanted:
            return record
        raise UserError(f"a standing driver for {record.get('key', {}).get('conf_dir')} runs (pid "
                        f"{record['pid']}); stop it first with `stram driver stop`")
    where = driver_dir()
    os.makedirs(where, mode=0o700, exist_ok=True)
    holder_log = os.path.join(where, "holder.log")
    args = [sys.executable, "-m", HOLDER_MODULE]
    if principal:
        args += ["--principal", principal]
    if keytab:
        args += ["--keytab", os.path.abspath(keytab)]
    import stram
    root = os.path.dirname(os.path.dirname(os.path.abspath(stram.__file__)))  # where `import stram` finds it
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(filter(None, [root, os.environ.get("PYTHONPATH")]))}
    with open(holder_log, "w") as out:
        proc = subprocess.Popen(args, stdin=subprocess.DEVNULL, stdout=out, stderr=subprocess.STDOUT,
                                env=env, start_new_session=True)
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        record = running()
        if record is not None and int(record["pid"]) == proc.pid:
            return record
        if proc.poll() is not None:
            raise StramError(f"the standing driver did not start (exit code {proc.returncode}):"
                             f"{log_tail(holder_log, label='holder log')}")
        time.sleep(0.1)
    proc.terminate()
    proc.wait(30)
    raise StramError(f"the standing driver did not start within {timeout:g}s:"
                     f"{log_tail(holder_log, label='holder log')}")


def stop(timeout: float = 30.0) -> dict[str, Any] | None:
    """Stop the standing driver; its record, or None when none ran."""
    record = running()
    if record is None:
        try:  # a record left by a holder that was killed
            os.unlink(record_path())
        except FileNotFoundError:
            pass
        return None
    pid = int(record["pid"])
    os.kill(pid, signal.SIGTERM)
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline and holder_alive(pid):
        time.sleep(0.1)
    if holder_alive(pid):
        os.kill(pid, signal.SIGKILL)
    try:
        os.unlink(record_path())
    except FileNotFoundError:
        pass
    return record


def serve(principal: str | None, keytab: str | None) -> int:
    """The holder: open a driver, record it, keep it until SIGTERM or SIGINT (or until it dies)."""
    ended = threading.Event()
    for sig in (signal.SIGTERM, signal.SIGINT):
        signal.signal(sig, lambda *_: ended.set())
    signal.signal(signal.SIGHUP, signal.SIG_IGN)
    wanted = key(preflight(), principal, keytab)
    with connect(principal, keytab, log_path=os.path.join(driver_dir(), "driver.log"), standing=False) as client:
        record = {"pid": os.getpid(), "address": client.address, "key": wanted, "started": time.time()}
        fs.write_atomic(record_path(), json.dumps(record).encode())
        log.info("standing driver at %s (pid %d)", client.address, os.getpid())
        try:
            # skein keeps the driver's process as _proc; it exits when its stdin (this process) closes
            proc = getattr(client, "_proc", None)
            while not ended.wait(2.0):
                if proc is not None and proc.poll() is not None:
                    log.error("the driver exited (code %s)", proc.returncode)
                    return 1
        finally:
            if (running() or {}).get("pid") == os.getpid():
                os.unlink(record_path())
    return 0


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog=f"python -m {HOLDER_MODULE}", description="Hold a standing skein driver.")
    parser.add_argument("--principal")
    parser.add_argument("--keytab")
    args = parser.parse_args(argv)
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(levelname)s %(name)s: %(message)s")
    try:
        return serve(args.principal, args.keytab)
    except StramError as exc:
        log.error("%s", exc)
        return 1


if __name__ == "__main__":
    sys.exit(main())
