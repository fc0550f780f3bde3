"""A full disk end to end: APP_PATH and the output on a small tmpfs, filled mid-run.

The application pauses (status.json and get-app-info say ``paused: no space
left on device …``), and either space comes back (the filler is deleted) and it
ends SUCCEEDED with the exact word counts, or it does not and the application
ends FAILED within DISK_FULL_TIMEOUT_SECS with that diagnostic. Needs root (to
mount a tmpfs); skipped otherwise.
"""

from __future__ import annotations

import contextlib
import json
import os
import pathlib
import shutil
import subprocess
import threading
import time

import pytest
from conftest import ROOT, read_counts, word_truth
from e2ekit import admin, app_processes, kill_container_of, launch_detached, running_operators, wait_final, wait_until

from stram.common import apps as stram_apps

MOBY = ROOT / "specs" / "data" / "moby-dick.txt"
FAST = ["-D", "STREAMING_WINDOW_SIZE_MILLIS=100", "-D", "HEARTBEAT_INTERVAL_MILLIS=300",
        "-D", "CHECKPOINT_WINDOW_COUNT=5"]


@contextlib.contextmanager
def small_disk(where: pathlib.Path, size_mb: int):
    """A tmpfs of ``size_mb`` MiB mounted at ``where`` (unmounted after, whatever happens)."""
    if os.geteuid() != 0:
        pytest.skip("mounting a tmpfs needs root")
    where.mkdir(parents=True, exist_ok=True)
    done = subprocess.run(["mount", "-t", "tmpfs", "-o", f"size={size_mb}m", "tmpfs", str(where)],
                          capture_output=True, text=True)
    if done.returncode != 0:
        pytest.skip(f"cannot mount a tmpfs here: {done.stderr.strip()}")
    try:
        yield where
    finally:
        for filler in [f for f in Filler.running if where in f.path.parents]:
            filler.stop()
        for _ in range(50):
            if subprocess.run(["umount", str(where)], capture_output=True).returncode == 0:
                break
            time.sleep(0.2)  # a process of the application may still hold a file open
        else:
            subprocess.run(["umount", "-l", str(where)], capture_output=True)


class Filler:
    """Fills the file system of ``path`` with ``path``, then keeps it full until :meth:`free`.

    The application goes on freeing space after the disk filled (the master deletes checkpoints
    the committed window passed, buffer servers their spill files), and a write that lands in
    such a hole does not find the disk full: a thread tops the filler up every 20 ms.
    """

    #: Fillers still topping up: stopped before their disk is unmounted.
    running: list[Filler] = []

    def __init__(self, path: pathlib.Path) -> None:
        self.path = path
        self.fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o644)
        self._top_up()
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._keep_full, name="filler", daemon=True)
        self._thread.start()
        Filler.running.append(self)

    def _top_up(self) -> None:
        for chunk in (1 << 20, 4096, 512):
            while True:
                try:
                    os.write(self.fd, b"\0" * chunk)
                except OSError:
                    break

    def _keep_full(self) -> None:
        while not self._stop.wait(0.02):
            self._top_up()

    def stop(self) -> None:
        """Stop topping up (the file stays)."""
        if self in Filler.running:
            Filler.running.remove(self)
            self._stop.set()
            self._thread.join()
            os.close(self.fd)

    def free(self) -> None:
        """Stop, and delete the filler: the space comes back."""
        self.stop()
        self.path.unlink()


def status(app_id: str) -> dict:
    """The application's status.json (what list-apps shows once its master is gone)."""
    path = os.path.join(stram_apps.apps_dir(), app_id, "status.json")
    try:
        with open(path) as f:
            return json.load(f)
    except (OSError, ValueError):
        return {}


def kill_left(app_id: str, keep: pathlib.Path | None = None) -> None:
    """Kill what is left of the application; copy its logs (off the small disk) to ``keep``."""
    if keep is not None:
        logs = pathlib.Path(stram_apps.apps_dir()) / app_id / "logs"
        with contextlib.suppress(OSError):
            shutil.copytree(logs, keep / f"logs-{app_id}")
            shutil.copy(logs.parent / "status.json", keep / f"logs-{app_id}")
    for proc in app_processes(app_id):
        with contextlib.suppress(Exception):
            proc.kill()


def release_file(disk: pathlib.Path) -> pathlib.Path:
    """Once this file exists the reader reads the rest at full speed (off the small disk)."""
    return disk.parent / "release-reader"


def launch_wordcount(disk: pathlib.Path, monkeypatch, *extra: str) -> tuple[str, pathlib.Path]:
    home = disk / "home"
    monkeypatch.setenv("STRAM_HOME", str(home))
    out = disk / "out"
    app_id = launch_detached("specs/wordcount.yaml", *FAST, *extra,
                             "-D", f"operators.reader.path={MOBY}", "-D", "operators.reader.lines_per_window=60",
                             "-D", "operators.reader.class=tests.kits.e2e_ops:SlowUntilSignal",
                             "-D", f"operators.reader.signal={release_file(disk)}",
                             "-D", "operators.count.partitions=2", "-D", f"operators.out.path={out}")
    wait_until(lambda: running_operators(app_id) == 6, what="all operators running")
    wait_until(lambda: out.exists() and any(out.rglob("*.jsonl")), timeout=60, what="committed output")
    return app_id, out


def test_disk_fills_then_frees_succeeds_exactly(tmp_path, monkeypatch):
    """Filled mid-run: the application pauses and says so; freed: it ends SUCCEEDED with exact counts."""
    with small_disk(tmp_path / "disk", 48) as disk:
        app_id = ""
        try:
            app_id, out = launch_wordcount(disk, monkeypatch)
            filler = Filler(disk / "filler")
            paused = wait_until(lambda: "paused: no space left on device" in status(app_id).get("diagnostics", "")
                                and status(app_id), timeout=60, what="status.json to say the application paused")
            assert paused["state"] == "RUNNING", paused
            info = wait_until(lambda: (i := admin(app_id, "info")) and i.get("paused") and i, timeout=30,
                              what="get-app-info to say the application paused")
            assert info["state"] == "RUNNING"
            assert "no space left on device" in info["diagnostics"], info
            time.sleep(4)  # a pause longer than a few heartbeats and windows
            assert status(app_id).get("state") == "RUNNING"
            filler.free()
            release_file(disk).touch()
            final = wait_final(app_id, timeout=240)
            assert final["state"] == "SUCCEEDED", final.get("diagnostics")
            sums, _, _ = read_counts(out)
            assert sums == word_truth(MOBY), "counts differ from the direct count"
            logs = disk / "home" / "apps" / app_id / "logs"
            said = "".join(p.read_text(errors="replace") for p in logs.glob("*.log*"))
            print(paused["diagnostics"], "|", info["diagnostics"])
            print("\n".join(line for line in said.splitlines() if "space" in line)[-3000:])
            assert "resumed after" in said, "no log line says the application resumed"
        finally:
            if app_id:
                kill_left(app_id, tmp_path)


def test_disk_stays_full_fails_with_diagnostic(tmp_path, monkeypatch):
    """Filled for good: the application ends FAILED within DISK_FULL_TIMEOUT_SECS, saying why."""
    with small_disk(tmp_path / "disk", 48) as disk:
        app_id = ""
        try:
            app_id, _ = launch_wordcount(disk, monkeypatch, "-D", "DISK_FULL_TIMEOUT_SECS=6")
            Filler(disk / "filler")
            started = time.monotonic()
            final = wait_final(app_id, timeout=120)
            took = time.monotonic() - started
            assert final["state"] == "FAILED", final
            assert "no space left on device" in final["diagnostics"], final["diagnostics"]
            assert "DISK_FULL_TIMEOUT_SECS=6" in final["diagnostics"], final["diagnostics"]
            assert took < 90, f"took {took:.0f} s to fail"
            print(f"FAILED after {took:.0f} s: {final['diagnostics']}")
        finally:
            if app_id:
                kill_left(app_id, tmp_path)


def test_journal_waits_for_space_while_a_container_is_recovered(tmp_path, monkeypatch):
    """The disk is full when a container dies: the master's journal (its recovery decision) waits
    for space, the status says so, heartbeats are refused meanwhile; freed, the run ends exact."""
    with small_disk(tmp_path / "disk", 48) as disk:
        app_id = ""
        try:
            app_id, out = launch_wordcount(disk, monkeypatch)
            filler = Filler(disk / "filler")
            # the containers wait to write their checkpoints first: the committed window stops, and
            # no checkpoint it passed is deleted any more (space the master's journal could take)
            wait_until(lambda: "paused: no space left on device" in status(app_id).get("diagnostics", ""),
                       timeout=60, what="status.json to say the application paused")
            kill_container_of(app_id, "count")
            paused = wait_until(lambda: "writing the journal" in status(app_id).get("diagnostics", "")
                                and status(app_id), timeout=60, what="status.json to say the journal waits")
            assert paused["state"] == "RUNNING", paused
            assert paused["diagnostics"].startswith("paused: no space left on device writing the journal")
            time.sleep(3)
            assert status(app_id).get("state") == "RUNNING"
            filler.free()
            release_file(disk).touch()
            final = wait_final(app_id, timeout=240)
            assert final["state"] == "SUCCEEDED", final.get("diagnostics")
            sums, _, _ = read_counts(out)
            assert sums == word_truth(MOBY), "counts differ from the direct count"
        finally:
            if app_id:
                kill_left(app_id, tmp_path)


def test_new_master_attempt_waits_for_space_at_start(tmp_path, monkeypatch):
    """The disk is full when the master dies: the next attempt starts, cannot write its address
    files or journal, waits for space (saying so) instead of failing; freed, the run ends exact."""
    with small_disk(tmp_path / "disk", 48) as disk:
        app_id = ""
        try:
            app_id, out = launch_wordcount(disk, monkeypatch)
            first = json.loads((disk / "home" / "apps" / app_id / "admin.json").read_text())["pid"]
            filler = Filler(disk / "filler")
            os.kill(first, 9)
            wait_until(lambda: [p for p in app_processes(app_id) if p.pid != first
                                and "stram.master" in " ".join(p.cmdline()) and "supervise" not in " ".join(p.cmdline())],
                       timeout=60, what="the supervisor to start attempt 2")  # its log is on the full disk
            time.sleep(6)  # longer than a few heartbeat timeouts: the attempt waits, it does not fail
            assert stram_apps.find_app(app_id)["state"] == "RUNNING", stram_apps.find_app(app_id)
            info = wait_until(lambda: (i := admin(app_id, "info")) and i.get("paused") and i, timeout=60,
                              what="the new attempt's get-app-info to say it waits for space")
            assert "no space left on device" in info["diagnostics"], info
            filler.free()
            release_file(disk).touch()
            final = wait_final(app_id, timeout=240)
            assert final["state"] == "SUCCEEDED", final.get("diagnostics")
            sums, _, _ = read_counts(out)
            assert sums == word_truth(MOBY), "counts differ from the direct count"
            master_log = (disk / "home" / "apps" / app_id / "logs" / "master.log").read_text(errors="replace")
            assert "master attempt 2 resumed from the journal" in master_log
        finally:
            if app_id:
                kill_left(app_id, tmp_path)


def test_new_master_attempt_on_a_disk_that_stays_full_fails_saying_why(tmp_path, monkeypatch):
    """The next attempt waits DISK_FULL_TIMEOUT_SECS for space, then ends the application FAILED
    with the diagnostic (not "exited without a final state"), its containers stopped."""
    with small_disk(tmp_path / "disk", 48) as disk:
        app_id = ""
        try:
            app_id, _ = launch_wordcount(disk, monkeypatch, "-D", "DISK_FULL_TIMEOUT_SECS=8")
            first = json.loads((disk / "home" / "apps" / app_id / "admin.json").read_text())["pid"]
            Filler(disk / "filler")
            os.kill(first, 9)
            final = wait_final(app_id, timeout=120)
            assert final["state"] == "FAILED", final
            assert "no space left on device writing the " in final["diagnostics"], final  # files or journal
            assert "without a final state" not in final["diagnostics"], final
            assert "DISK_FULL_TIMEOUT_SECS=8" in final["diagnostics"], final["diagnostics"]
        finally:
            if app_id:
                kill_left(app_id, tmp_path)
