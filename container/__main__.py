"""``python -m stram.agent``: run a container agent (the launcher starts this)."""

from __future__ import annotations

import logging
import os
import signal
import sys

from stram.agent.agent import Agent, MasterGone
from stram.agent.engine import heap
from stram.common import logsetup


def _wait_to_go() -> bool:
    """A process started ahead of the plan (``STRAM_HOLD``): finish the imports, then wait
    for the master's word on stdin. True: go on as the container; False: not needed, exit."""
    from stram.common import fs
    if fs.local_path(os.environ.get("STRAM_APP_PATH", "")) is None:
        fs.pafs.FileType  # noqa: B018 - pyarrow.fs for HDFS, imported now rather than after the go
    go = sys.stdin.buffer.readline().strip() == b"go"
    devnull = os.open(os.devnull, os.O_RDONLY)
    os.dup2(devnull, 0)  # as a container launched at once has it
    os.close(devnull)
    return go


def main() -> int:
    # Arrow's buffers from malloc, not mimalloc, which kept much of what a Parquet source freed
    os.environ.setdefault("ARROW_DEFAULT_MEMORY_POOL", "system")
    if os.environ.get("STRAM_HEAP_TUNE", "1") == "1":
        heap.tune()
        heap.tune_gc()
    os.umask(0o077)  # checkpoints, write-ahead logs, logs: owner-only (a local output's files too)
    if os.environ.get("STRAM_HOLD") == "1" and not _wait_to_go():
        return 0
    # its own rotating file in the log dir (STRAM_LOG_DIR); stdout/stderr keep only a crash's traceback
    log_dir = os.environ.get("STRAM_LOG_DIR")
    name = os.environ.get("STRAM_CONTAINER_ID", "container")
    logsetup.configure(os.path.join(log_dir, f"{name}.log") if log_dir else None,
                       os.environ.get("STRAM_LOG_LEVEL", "INFO"))
    try:
        container_id = os.environ["STRAM_CONTAINER_ID"]
        app_path = os.environ["STRAM_APP_PATH"]
    except KeyError as missing:
        print(f"error: environment variable {missing} is not set; containers are started "
              f"by the stram master, not by hand", file=sys.stderr)
        return 2
    from stram.common import apppath, fs, kerberos
    kerberos.keep_ticket()
    fs.keep_private(app_path)
    where = apppath.credential(app_path, container_id)
    try:  # written by the master before it started this container (HDFS: retried while away)
        credential = fs.read_bytes(where).decode().strip()
    except (OSError, UnicodeDecodeError) as exc:
        credential, why = "", str(exc)
    else:
        why = "the file is empty"
    if not credential:
        print(f"error: cannot read this container's credential from {where}: {why}; containers are "
              f"started by the stram master, which writes it first", file=sys.stderr)
        return 2
    logsetup.freeze_startup()  # no operator ran yet: the files they leave open are found fast at exit
    agent = Agent(container_id, app_path, credential, work_dir=os.environ.get("STRAM_WORK_DIR"))
    signal.signal(signal.SIGTERM, lambda *_: agent.stop())
    try:
        return agent.run()
    except MasterGone as exc:
        logging.getLogger("stram.agent").error("%s; exiting", exc)
        return 3


if __name__ == "__main__":
    logsetup.exit_fast(main(), flush_files=True)
