"""stram/common/kerberos.py: a process renews its Kerberos ticket from the keytab on a timer.

A ``kinit`` on PATH that records its arguments stands in for MIT's here (the real one,
against a real KDC, runs in tests/e2e/yarn/test_yarn_kerberos.py): what is checked is when it is
called, with what, and what is logged when it fails.
"""

from __future__ import annotations

import logging
import threading
import time

import pytest
from e2ekit import wait_until

from stram.common import kerberos


@pytest.fixture
def fake_kinit(tmp_path, monkeypatch):
    calls = tmp_path / "calls"
    status = tmp_path / "status"
    status.write_text("0")
    script = tmp_path / "bin" / "kinit"
    script.parent.mkdir()
    script.write_text(f'#!/bin/sh\necho "$@" >> {calls}\ncode=$(cat {status})\n'
                      f'[ "$code" = 0 ] || echo "kinit: Cannot contact any KDC for realm" >&2\nexit $code\n')
    script.chmod(0o755)
    monkeypatch.setenv("PATH", f"{script.parent}:/usr/bin:/bin")
    monkeypatch.setenv("STRAM_PRINCIPAL", "alice@EXAMPLE.COM")
    monkeypatch.setenv("STRAM_KEYTAB", str(tmp_path / "stram.keytab"))

    def read() -> list[str]:
        return calls.read_text().splitlines() if calls.exists() else []
    return read, status


def test_nothing_without_a_principal_and_keytab(monkeypatch):
    monkeypatch.delenv("STRAM_PRINCIPAL", raising=False)
    monkeypatch.setenv("STRAM_KEYTAB", "x")
    assert kerberos.keep_ticket() is None


def test_renews_from_the_keytab_every_interval(fake_kinit, monkeypatch, tmp_path, caplog):
    calls, _ = fake_kinit
    monkeypatch.setenv("STRAM_KINIT_INTERVAL", "1")
    stop = threading.Event()
    with caplog.at_level(logging.INFO, logger="stram.common.kerberos"):
        thread = kerberos.keep_ticket(stop)
        assert thread is not None and thread.daemon
        assert calls() == []  # the launch script took the first ticket
        wait_until(lambda: len(calls()) >= 2, 10, "two renewals")
        stop.set()
        thread.join(5)
    assert not thread.is_alive()
    assert set(calls()) == {f"-kt {tmp_path}/stram.keytab alice@EXAMPLE.COM"}
    assert "renewed the ticket of alice@EXAMPLE.COM from the keytab (next in 1s)" in caplog.text


def test_a_failed_renewal_is_logged_and_tried_again(fake_kinit, monkeypatch, caplog):
    calls, status = fake_kinit
    status.write_text("1")
    monkeypatch.setenv("STRAM_KINIT_INTERVAL", "1")
    monkeypatch.setattr(kerberos, "RETRY", 0.5)
    stop = threading.Event()
    with caplog.at_level(logging.INFO, logger="stram.common.kerberos"):
        thread = kerberos.keep_ticket(stop)
        wait_until(lambda: len(calls()) >= 2, 10, "a retry after a failure")
        status.write_text("0")
        wait_until(lambda: "renewed the ticket" in caplog.text, 10, "a renewal once the KDC is back")
        stop.set()
        thread.join(5)
    assert "cannot renew the ticket of alice@EXAMPLE.COM" in caplog.text
    assert "Cannot contact any KDC for realm" in caplog.text  # kinit's own words


def test_kinit_missing_or_timing_out_is_a_message_not_a_crash(monkeypatch, tmp_path):
    monkeypatch.setenv("PATH", str(tmp_path))
    assert "kinit is not installed" in kerberos.kinit("a@B", "k")
    slow = tmp_path / "kinit"
    slow.write_text("#!/bin/sh\nexec /bin/sleep 5\n")
    slow.chmod(0o755)
    monkeypatch.setattr(kerberos.subprocess, "run", _run_with_timeout(0.2))
    started = time.monotonic()
    assert "TimeoutExpired" in kerberos.kinit("a@B", "k")
    assert time.monotonic() - started < 4


def test_a_bad_interval_falls_back_to_the_default(monkeypatch, caplog):
    monkeypatch.setenv("STRAM_KINIT_INTERVAL", "hourly")
    with caplog.at_level(logging.WARNING, logger="stram.common.kerberos"):
        assert kerberos._interval() == kerberos.DEFAULT_INTERVAL
    assert "STRAM_KINIT_INTERVAL='hourly' is not a number" in caplog.text
    monkeypatch.setenv("STRAM_KINIT_INTERVAL", "0")
    assert kerberos._interval() == 1.0


def _run_with_timeout(seconds: float):
    import subprocess
    real = subprocess.run

    def run(*args, **kwargs):
        kwargs["timeout"] = seconds
        return real(*args, **kwargs)
    return run
