"""Kerberos for processes that run for weeks: a ticket renewed from the shipped keytab.

On a secure cluster an application launched with a keytab runs its master and
containers with ``STRAM_PRINCIPAL`` and ``STRAM_KEYTAB`` set (the YARN launch
scripts do it) and a ticket cache of their own (``KRB5CCNAME``). They reach HDFS
with that ticket, not with the delegation tokens YARN gives containers: YARN
renews those only up to their maximum lifetime (7 days by default), after which
every HDFS call would fail. A ticket expires too (in hours), so
:func:`keep_ticket` logs in again from the keytab on a timer, long before it
does; libhdfs' JVM reads the cache again when its old ticket stops working.
"""

from __future__ import annotations

import logging
import os
import shutil
import subprocess
import threading

__all__ = ["DEFAULT_INTERVAL", "keep_ticket", "kinit"]

logger = logging.getLogger(__name__)

#: Seconds between logins from the keytab (``STRAM_KINIT_INTERVAL``): tickets last 10 to 24 hours
#: on most sites, so an hour leaves a day's worth of failed attempts before the ticket runs out.
DEFAULT_INTERVAL = 3600.0
#: Seconds before another attempt after a failed login (the KDC away, say).
RETRY = 60.0


def kinit(principal: str, keytab: str) -> str | None:
    """Log ``principal`` in from ``keytab`` into the cache ``KRB5CCNAME`` names; None, or why it failed."""
    command = shutil.which("kinit")
    if command is None:
        return "kinit is not installed on this node (Debian/Ubuntu: krb5-user, RHEL: krb5-workstation)"
    try:
        done = subprocess.run([command, "-kt", keytab, principal], capture_output=True, text=True,
                              timeout=60, stdin=subprocess.DEVNULL)
    except (OSError, subprocess.TimeoutExpired) as exc:
        return f"{type(exc).__name__}: {exc}"
    if done.returncode != 0:
        return (done.stderr or done.stdout).strip() or f"kinit exited with {done.returncode}"
    return None


def _interval() -> float:
    raw = os.environ.get("STRAM_KINIT_INTERVAL", "")
    try:
        value = float(raw) if raw else DEFAULT_INTERVAL
    except ValueError:
        logger.warning("STRAM_KINIT_INTERVAL=%r is not a number of seconds; using %.0f", raw, DEFAULT_INTERVAL)
        return DEFAULT_INTERVAL
    return max(value, 1.0)


def keep_ticket(stop: threading.Event | None = None) -> threading.Thread | None:
    """Renew this process's Kerberos ticket from its keytab every ``STRAM_KINIT_INTERVAL`` seconds.

    Nothing (None) unless ``STRAM_PRINCIPAL`` and ``STRAM_KEYTAB`` are set. The
    launch script took the first ticket; a failed renewal is logged and tried
    again a minute later while the current ticket still works.
    """
    principal = os.environ.get("STRAM_PRINCIPAL")
    keytab = os.environ.get("STRAM_KEYTAB")
    if not principal or not keytab:
        return None
    interval = _interval()
    stop = stop or threading.Event()

    def renew() -> None:
        delay = interval
        while not stop.wait(delay):
            failed = kinit(principal, keytab)
            if failed:
                delay = min(interval, RETRY)
                logger.warning("Kerberos: cannot renew the ticket of %s from %s (trying again in %.0fs): %s",
                               principal, keytab, delay, failed)
            else:
                delay = interval
                logger.info("Kerberos: renewed the ticket of %s from the keytab (next in %.0fs)", principal, delay)

    thread = threading.Thread(target=renew, daemon=True, name="kerberos-renewal")
    thread.start()
    logger.info("Kerberos: %s reaches HDFS with a ticket renewed from the keytab every %.0fs", principal, interval)
    return thread
