"""Containers' credential files: each written before its container is launched.

A container proves itself to the master and to buffer servers with a credential
derived from the application's token (:mod:`stram.common.secret`), which the
master writes to the application's directory before it launches the
container. On HDFS each write is several NameNode round trips (36 ms on the
minicluster, so 73 s for the 2,000 containers of a large application, one
after another): when an event launches several containers at once (the first
Start, a scale-out), :meth:`CredentialFiles.write_ahead` writes theirs
:data:`WRITERS` at a time before the launches begin. On the local file system a
write takes 40 µs and threads would only slow it down: they are written one by
one, as each launch comes.
"""

from __future__ import annotations

import logging
from concurrent.futures import ThreadPoolExecutor
from typing import Iterable

from stram.common import apppath, fs
from stram.common.secret import container_credential
from stram.master.core.instructions import Instruction, LaunchContainer

__all__ = ["CredentialFiles", "WRITERS"]

log = logging.getLogger("stram.master")

#: Credential files written at once ahead of a launch of several containers on a remote file system.
WRITERS = 8


class CredentialFiles:
    """Writes each container's credential file before its launch (``app_path``: the application's directory)."""

    def __init__(self, app_path: str, token: str) -> None:
        self.app_path = app_path
        self.token = token
        #: Containers whose file :meth:`write_ahead` wrote and whose launch has not come yet.
        self._ready: set[str] = set()
        #: Whether the directory is on a remote file system (HDFS), where writes are round trips.
        self.remote = fs.local_path(app_path) is None

    def write(self, container_id: str) -> None:
        """Write ``container_id``'s credential file (just before its launch), unless written ahead.

        Raises OSError (a full disk, HDFS away): the container cannot be launched.
        """
        if container_id in self._ready:
            self._ready.discard(container_id)
            return
        fs.write_atomic(apppath.credential(self.app_path, container_id),
                        container_credential(self.token, container_id).encode())

    def write_ahead(self, instructions: Iterable[Instruction]) -> None:
        """Write the credential files of the containers ``instructions`` launch, several at once
        on a remote file system (before the launches, which then find them written).

        One that fails is logged and left to :meth:`write` (its launch tries again, and fails
        as it would have without this).
        """
        ids = [ins.container_id for ins in instructions if isinstance(ins, LaunchContainer)]
        if len(ids) < 2 or not self.remote:
            return
        with ThreadPoolExecutor(min(WRITERS, len(ids)), thread_name_prefix="credentials") as pool:
            written = list(pool.map(self._try_write, ids))
        self._ready.update(cid for cid, ok in zip(ids, written) if ok)

    def _try_write(self, container_id: str) -> bool:
        try:
            self.write(container_id)
            return True
        except Exception as exc:  # noqa: BLE001 - its launch writes it again and reports the failure
            log.warning("could not write the credential of %s ahead of its launch: %s", container_id, exc)
            return False
