"""The files through which others find a running master: ``admin.json`` and ``heartbeatUri``.

A new container finds its master only through ``heartbeatUri`` and the CLI
finds the admin API through ``admin.json``. The master writes each once what
it names serves (a first attempt writes ``heartbeatUri`` before it starts its
admin API; a later one, after it has taken over the containers), checks them
every few seconds (rewriting one that is missing or stale), and, on a full
disk, waits for space to write them as its journal does instead of dying
attempt after attempt.
"""

from __future__ import annotations

import json
import logging
import os
import time

from stram.common import apppath, fs, space

__all__ = ["AddressFiles"]

log = logging.getLogger("stram.master.files")


class AddressFiles:
    """The address-file part of :class:`stram.master.process.master.AppMaster` (a mixin: it uses the
    master's ``app_path``, ``admin_url``, ``host``, ``port``, ``pauses``,
    ``_stop_requested`` and ``write_status``)."""

    def _write_address_files(self) -> str:
        """Write ``admin.json`` and ``heartbeatUri``, waiting for space as the journal does
        (up to DISK_FULL_TIMEOUT_SECS; the status says the master is paused meanwhile, written
        in place): "" once written, else why the application fails. A new attempt that starts
        on a full disk thus waits for space instead of dying, attempt after attempt."""
        what = f"writing the master's address files under {self.app_path}"
        last_status = 0.0

        def between_tries() -> bool:
            nonlocal last_status
            if time.monotonic() - last_status >= 1.0:
                last_status = time.monotonic()
                self.write_status(final=False)
            return self._stop_requested

        try:
            space.retry(what, self.keep_address_files, True, pauses=self.pauses, stop=between_tries)
            return ""
        except space.DiskFull as exc:
            return str(exc)
        except OSError as exc:
            if self._stop_requested and space.is_no_space(exc):
                return f"killed while {what} waited for space: {exc}"
            raise

    def write_heartbeat_uri(self) -> None:
        """Write ``heartbeatUri`` alone, ahead of :meth:`_write_address_files` (which writes it
        again if this could not: a full disk)."""
        try:
            fs.write_atomic(apppath.file(self.app_path, apppath.HEARTBEAT_URI), self._umbilical_address())
        except OSError as exc:
            log.warning("could not write heartbeatUri yet (written again once the admin API serves): %s", exc)

    def address_files(self) -> dict[str, bytes]:
        """What ``admin.json`` and ``heartbeatUri`` hold while this master runs."""
        import psutil
        admin = {"url": self.admin_url, "pid": os.getpid(), "host": self.host,
                 "started": psutil.Process().create_time()}
        proxy_url = getattr(self, "proxy_url", "")
        if proxy_url and proxy_url != self.admin_url:
            admin["proxy_url"] = proxy_url  # the plain listener for YARN's web proxy
        return {apppath.ADMIN: json.dumps(admin).encode(),
                apppath.HEARTBEAT_URI: self._umbilical_address()}

    def _umbilical_address(self) -> bytes:
        return f"{self.host}:{self.port}".encode()

    def keep_address_files(self, force: bool = False) -> list[str]:
        """Write ``admin.json`` and ``heartbeatUri`` (in that order) where they are missing or
        stale (``force``: always); the names rewritten. A new container finds its master only
        through ``heartbeatUri``, so :meth:`run` checks them every :data:`KEEP_FILES_SECONDS`."""
        rewritten = []
        for name, data in self.address_files().items():
            uri = apppath.file(self.app_path, name)
            if not force:
                try:
                    if fs.read_bytes(uri) == data:
                        continue
                except OSError:
                    pass  # missing or unreadable: rewrite it
                log.warning("%s was missing or stale; rewriting it", name)
            fs.write_atomic(uri, data)
            rewritten.append(name)
        return rewritten

