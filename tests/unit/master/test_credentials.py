"""Containers' credential files (appmaster/process/credentials.py): written before each launch, several at once on HDFS.

The fast tests use the real local file system, told it is remote so that the
threaded path runs; the slow one starts a master on the real NameNode (the
session's mini cluster) and checks every launched container's credential there.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import threading
import uuid

import pytest
from conftest import ROOT
from hadoop import as_user_of

from stram.common import apppath, fs
from stram.common.secret import container_credential
from stram.master.core.instructions import KillContainer, LaunchContainer
from stram.master.process import credentials as credentials_mod
from stram.master.process.credentials import CredentialFiles

TOKEN = "t0ken"


def _recorded(monkeypatch) -> list[tuple[str, str]]:  # noqa: ANN001
    """(file name, writing thread's name) of every credential write from now on."""
    writes: list[tuple[str, str]] = []
    real = fs.write_atomic

    def write_atomic(uri: str, data: bytes) -> None:
        writes.append((uri.rsplit("/", 1)[-1], threading.current_thread().name))
        real(uri, data)

    monkeypatch.setattr(fs, "write_atomic", write_atomic)
    return writes


def _launches(n: int) -> list:
    return [LaunchContainer(f"container_{i:06d}", 1024, 1) for i in range(1, n + 1)]


def test_on_a_remote_file_system_the_files_are_written_ahead_in_threads_and_each_once(tmp_path, monkeypatch):
    files = CredentialFiles(f"file://{tmp_path}", TOKEN)
    files.remote = True  # as HDFS
    writes = _recorded(monkeypatch)
    launches = _launches(20)
    files.write_ahead([*launches, KillContainer("container_000099")])
    assert sorted(name for name, _ in writes) == sorted(apppath.credential("", i.container_id).rsplit("/", 1)[-1]
                                                         for i in launches)
    assert {thread.split("_")[0] for _, thread in writes} == {"credentials"}
    assert len({thread for _, thread in writes}) > 1  # several at once
    writes.clear()
    for ins in launches:  # the launches find them written
        files.write(ins.container_id)
    assert writes == []
    for ins in launches:
        with open(apppath.credential(str(tmp_path), ins.container_id), "rb") as f:
            assert f.read().decode() == container_credential(TOKEN, ins.container_id)
    files.write("container_000021")  # a later single launch writes its own
    assert writes == [(apppath.credential("", "container_000021").rsplit("/", 1)[-1], "MainThread")]


def test_a_file_that_could_not_be_written_ahead_is_written_by_its_launch(tmp_path, monkeypatch, caplog):
    files = CredentialFiles(f"file://{tmp_path}", TOKEN)
    files.remote = True
    real = fs.write_atomic
    refused = apppath.credential(f"file://{tmp_path}", "container_000003")

    def flaky(uri: str, data: bytes) -> None:
        if uri == refused and threading.current_thread().name.startswith("credentials"):
            raise OSError("the NameNode is away")
        real(uri, data)

    monkeypatch.setattr(fs, "write_atomic", flaky)
    files.write_ahead(_launches(5))
    assert "could not write the credential of container_000003 ahead of its launch" in caplog.text
    assert not os.path.exists(apppath.credential(str(tmp_path), "container_000003"))
    files.write("container_000003")
    with open(apppath.credential(str(tmp_path), "container_000003"), "rb") as f:
        assert f.read().decode() == container_credential(TOKEN, "container_000003")


def test_on_the_local_file_system_each_launch_writes_its_own(tmp_path, monkeypatch):
    files = CredentialFiles(f"file://{tmp_path}", TOKEN)
    assert not files.remote
    writes = _recorded(monkeypatch)
    launches = _launches(4)
    files.write_ahead(launches)
    assert writes == []  # 40 µs a write: threads would only slow it down
    for ins in launches:
        files.write(ins.container_id)
    assert [thread for _, thread in writes] == ["MainThread"] * 4


_START_ON_HDFS = """
import json, sys, time
from stram.master.launch.local import Launcher
from stram.master.process.master import AppMaster
from stram.master.spec import AppSpec
from stram.master.core.events import Start
from stram.common import apppath, fs
from stram.common.secret import container_credential

class Recording(Launcher):
    def __init__(self): self.launched = []
    def launch(self, request): self.launched.append(request.container_id)
    def kill(self, container_id): pass
    def poll(self): return []
    def stop_all(self, grace=5.0): pass
    def running(self): return list(self.launched)

spec = AppSpec.from_yaml(sys.argv[2])
master = AppMaster(spec, "application_0_0042", sys.argv[1], "t0ken", Recording(), host="127.0.0.1")
started = time.perf_counter()
master.dispatch(Start(int(time.time() * 1000)))
took = time.perf_counter() - started
wrong = [cid for cid in master.launcher.launched
         if fs.read_bytes(apppath.credential(sys.argv[1], cid)).decode() != container_credential("t0ken", cid)]
print(json.dumps({"launched": master.launcher.launched, "wrong": wrong, "seconds": took}))
"""


@pytest.mark.slow
def test_a_master_on_hdfs_writes_every_launched_containers_credential(minicluster, monkeypatch, tmp_path_factory):
    cluster = as_user_of(minicluster, monkeypatch, tmp_path_factory)
    spec = "name: wide\noperators:\n" + "".join(
        f"  o{i}: {{class: 'stram.operators.io:LineReader', properties: {{path: /dev/null}}}}\n"
        for i in range(3 * credentials_mod.WRITERS))
    app_path = cluster.uri(f"/tests/credentials-{uuid.uuid4().hex[:8]}")
    proc = subprocess.run([sys.executable, "-c", _START_ON_HDFS, app_path, spec], cwd=ROOT, env=dict(os.environ),
                          capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0, proc.stderr[-3000:]
    result = json.loads(proc.stdout.strip().splitlines()[-1])
    assert len(result["launched"]) == 3 * credentials_mod.WRITERS
    assert result["wrong"] == []


def _full_disk_for(monkeypatch, failures: int) -> list[str]:
    """Credential writes fail with ENOSPC ``failures`` times, then work; the failed files' names."""
    import errno

    failed: list[str] = []
    real = fs.write_atomic

    def write_atomic(uri: str, data: bytes) -> None:
        if "/credentials/" in uri and len(failed) < failures:
            failed.append(uri.rsplit("/", 1)[-1])
            raise OSError(errno.ENOSPC, "No space left on device")
        real(uri, data)

    monkeypatch.setattr(fs, "write_atomic", write_atomic)
    return failed


def _master(tmp_path, timeout_secs: int):  # noqa: ANN001
    from statekit import FakeLauncher  # records launches, starts no processes

    from stram.master.process.master import AppMaster
    from stram.master.spec import AppSpec

    spec = AppSpec.from_yaml(
        f"name: two\nattributes: {{DISK_FULL_TIMEOUT_SECS: {timeout_secs}}}\noperators:\n"
        + "".join(f"  o{i}: {{class: 'stram.operators.io:LineReader', properties: {{path: /dev/null}}}}\n"
                  for i in range(2)))
    return AppMaster(spec, "application_0_0043", f"file://{tmp_path}/app", TOKEN, FakeLauncher(), host="127.0.0.1")


def test_a_launch_waits_for_space_to_write_the_credential(tmp_path, monkeypatch):
    """A full disk when a container is launched: the launch retries its credential until space comes
    back (the status says what waits meanwhile), then the container starts with its credential."""
    import time

    from stram.master.core.events import Start

    failed = _full_disk_for(monkeypatch, 4)
    master = _master(tmp_path, 60)
    seen: list[str] = []
    real_still = master.pauses.still
    monkeypatch.setattr(master.pauses, "still", lambda what: (seen.append(master.pauses.describe()),
                                                              real_still(what)))
    master.dispatch(Start(int(time.time() * 1000)))
    assert len(failed) == 4 and master.state.state == "RUNNING"
    assert len(master.launcher.launched) == 2 and set(failed) <= set(master.launcher.launched)
    assert any("paused: no space left on device writing the credential of container_" in d for d in seen), seen
    assert not master.pauses.active()
    for cid in master.launcher.launched:
        assert fs.read_bytes(apppath.credential(master.app_path, cid)).decode() == container_credential(TOKEN, cid)


def test_a_launch_that_never_finds_space_fails_the_application_saying_why(tmp_path, monkeypatch):
    import time

    from stram.master.core.events import Start

    _full_disk_for(monkeypatch, 10**9)
    master = _master(tmp_path, 1)
    master.dispatch(Start(int(time.time() * 1000)))
    assert master.launcher.launched == []
    assert master.state.state == "FAILED"
    assert "no space left on device writing the credential of container_" in master.state.diagnostics
    assert "DISK_FULL_TIMEOUT_SECS=1" in master.state.diagnostics
