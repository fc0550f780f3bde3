"""The standing skein driver (``stram driver start|stop|status``, :mod:`stram.client.yarn.standing`).

On the session's mini cluster: commands use the standing driver while it runs and
was started as they would start one; they start their own otherwise (another
ResourceManager wait, no driver running, a holder that was killed). A command
proves which driver it used by ``SKEIN_DRIVER_JAVA_OPTIONS=-XX:+NoSuchOption``:
a driver it starts itself cannot start, the standing one is already up.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys

import psutil
import pytest
from conftest import ROOT
from e2ekit import wait_until
from hadoop import as_user_of

pytestmark = [pytest.mark.yarn]

BROKEN_JVM = {"SKEIN_DRIVER_JAVA_OPTIONS": "-XX:+NoSuchOption"}


def stram(*args: str, env: dict[str, str] | None = None) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "stram.client.cli", *args], cwd=ROOT, capture_output=True, text=True,
                          timeout=300, env={**os.environ, **(env or {})})


def lists_yarn(env: dict[str, str]) -> bool:
    """Whether ``stram list-apps`` reached YARN (it lists the local applications without it)."""
    listed = stram("list-apps", "--json", env=env)
    assert listed.returncode == 0, listed.stderr
    assert isinstance(json.loads(listed.stdout), list)
    return "YARN applications not listed" not in listed.stderr


def driver_jvms(holder: int) -> list[psutil.Process]:
    try:
        return [p for p in psutil.Process(holder).children(recursive=True) if "java" in p.name()]
    except psutil.NoSuchProcess:
        return []


def test_commands_use_the_standing_driver_while_it_runs(minicluster, monkeypatch, tmp_path_factory):
    as_user_of(minicluster, monkeypatch, tmp_path_factory)  # a STRAM_HOME of its own: no driver yet
    assert stram("driver", "status").returncode == 3
    assert not lists_yarn(BROKEN_JVM)  # it starts a driver, which cannot start

    started = stram("driver", "start")
    assert started.returncode == 0, started.stderr
    record = json.loads(stram("driver", "status", "--json").stdout)
    assert f"at {record['address']} (pid {record['pid']})" in started.stdout
    assert stram("driver", "start").stdout == started.stdout  # started once
    [jvm] = driver_jvms(record["pid"])
    try:
        assert lists_yarn(BROKEN_JVM)
        # another ResourceManager wait than the standing driver's: a driver of its own
        assert not lists_yarn({**BROKEN_JVM, "STRAM_YARN_CONNECT_WAIT_MS": "4321"})
        assert not lists_yarn({**BROKEN_JVM, "STRAM_YARN_DRIVER": "new"})

        from stram.client import yarn
        with yarn.connect() as client:  # in this process too
            assert client.address == record["address"]
            assert client.get_applications(states=["RUNNING"]) is not None
        assert jvm.is_running(), "closing a client of the standing driver stopped it"

        # a killed holder takes its driver along (its stdin closes); its record is passed over
        os.kill(record["pid"], signal.SIGKILL)
        jvm.wait(60)
        assert stram("driver", "status").returncode == 3
        assert not lists_yarn(BROKEN_JVM)
        again = stram("driver", "start")
        assert again.returncode == 0, again.stderr
        record = json.loads(stram("driver", "status", "--json").stdout)
        [jvm] = driver_jvms(record["pid"])
    finally:
        stopped = stram("driver", "stop")
    assert stopped.returncode == 0 and f"pid {record['pid']}" in stopped.stdout, stopped
    jvm.wait(60)
    assert not psutil.pid_exists(record["pid"]) or psutil.Process(record["pid"]).status() == psutil.STATUS_ZOMBIE
    assert stram("driver", "status").returncode == 3
    assert stram("driver", "stop").stdout.strip() == "no standing driver runs"


def test_a_driver_started_for_another_cluster_is_not_used(tmp_path, monkeypatch):
    """:func:`standing.find` matches the record's key; a dead holder's record is nobody's."""
    from stram.client.yarn import standing

    monkeypatch.setenv("STRAM_HOME", str(tmp_path))
    monkeypatch.delenv("STRAM_YARN_CONNECT_WAIT_MS", raising=False)
    (tmp_path / "driver").mkdir()
    here = standing.key(str(tmp_path), None, None)
    holder = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(60)", standing.HOLDER_MODULE])
    try:
        # (its command line can be empty for a moment after Popen returns, in a process that imported grpc)
        wait_until(lambda: psutil.Process(holder.pid).cmdline(), 10, "the stand-in holder's command line")
        record = {"pid": holder.pid, "address": "127.0.0.1:1", "key": here, "started": 0}
        (tmp_path / "driver" / "driver.json").write_text(json.dumps(record))
        assert standing.find(here) == "127.0.0.1:1"
        assert standing.find(standing.key(str(tmp_path / "other"), None, None)) is None
        assert standing.find(standing.key(str(tmp_path), "alice@EXAMPLE.COM", str(tmp_path / "k"))) is None
        assert standing.find(standing.key(str(tmp_path), None, None, connect_wait_ms=5)) is None
        monkeypatch.setenv("SKEIN_CONFIG", str(tmp_path / "skein"))
        assert standing.find(standing.key(str(tmp_path), None, None)) is None
    finally:
        holder.kill()
        holder.wait()
    assert standing.running() is None and standing.find(here) is None
    # a live process that is not a holder (the pid was reused) is nobody's either
    (tmp_path / "driver" / "driver.json").write_text(json.dumps({**record, "pid": os.getpid()}))
    assert standing.running() is None
