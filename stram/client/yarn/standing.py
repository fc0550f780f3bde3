"""A standing skein driver: one Java driver that every stram command on YARN reuses.

Every stram command on YARN talks to the ResourceManager through skein's Java
driver, and starting one takes seconds of a JVM's start (4 s, 6 s of CPU, on
the test machine). ``stram driver start`` starts one that stays: a small
Python process (the *holder*, ``python -m stram.client.yarn.holder``) opens it
with :func:`stram.client.yarn.driver.connect` and records its address in
``$STRAM_HOME/driver/driver.json``; :func:`stram.client.yarn.driver.connect` then
connects to it instead of starting a driver, when it was started for the same
Hadoop configuration, Kerberos login, ResourceManager wait and skein
credentials (:func:`find`). ``stram driver stop`` ends the holder, which closes
the driver. A record whose holder is gone, or a driver that does not answer,
is passed over: the command starts a driver of its own, as without one.
"""

from __future__ import annotations

import json
import logging
import os
from typing import Any

log = logging.getLogger("stram.client.yarn")

__all__ = ["driver_dir", "record_path", "key", "find", "running", "holder_alive", "HOLDER_MODULE"]

#: The holder's module (:mod:`stram.client.yarn.holder`): it marks the holder's command line, so that
#: a recorded pid that no longer runs it (it was reused) is passed over.
HOLDER_MODULE = "stram.client.yarn.holder"


def driver_dir() -> str:
    """``$STRAM_HOME/driver``: the record, the holder's log and the driver's."""
    from stram.common.apps import stram_home
    return os.path.join(stram_home(), "driver")


def record_path() -> str:
    return os.path.join(driver_dir(), "driver.json")


def key(conf_dir: str, principal: str | None, keytab: str | None,
        connect_wait_ms: int | None = None) -> dict[str, Any]:
    """What a driver must have been started with to serve a command: its configuration, login,
    ResourceManager wait (``STRAM_YARN_CONNECT_WAIT_MS`` unless given) and skein's credentials."""
    wait = connect_wait_ms if connect_wait_ms is not None else (os.environ.get("STRAM_YARN_CONNECT_WAIT_MS") or None)
    return {"conf_dir": os.path.realpath(conf_dir), "principal": principal or None,
            "keytab": os.path.abspath(keytab) if keytab else None,
            "connect_wait_ms": None if wait is None else int(wait),
            "skein_config": os.path.realpath(os.path.expanduser(os.environ.get("SKEIN_CONFIG") or "~/.skein"))}


def holder_alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except (ProcessLookupError, PermissionError):  # gone, or another user's process: not our holder
        return False
    try:
        with open(f"/proc/{pid}/cmdline", "rb") as f:
            return HOLDER_MODULE.encode() in f.read()
    except OSError:  # no /proc here: the pid is enough
        return True


def running() -> dict[str, Any] | None:
    """The record of the standing driver if its holder runs, else None."""
    try:
        with open(record_path()) as f:
            record = json.load(f)
        pid = int(record["pid"])
        record["address"]
    except (OSError, ValueError, KeyError, TypeError):
        return None
    return record if holder_alive(pid) else None


def find(wanted: dict[str, Any]) -> str | None:
    """The address of a standing driver started as ``wanted`` (:func:`key`) says, else None."""
    record = running()
    if record is None:
        return None
    if record.get("key") != wanted:
        log.debug("the standing driver (pid %s) was started for %s, not %s: not used",
                  record.get("pid"), record.get("key"), wanted)
        return None
    return record["address"]
