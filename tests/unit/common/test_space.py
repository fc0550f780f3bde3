"""A full disk: recognizing no-space errors, waiting for space, giving up with DiskFull, status in place."""

from __future__ import annotations

import errno
import json
import os
import subprocess
import threading
import time

import pytest

from stram.common import fs, space
from stram.operator import FatalError


def test_is_no_space():
    assert space.is_no_space(OSError(errno.ENOSPC, "No space left on device"))
    assert space.is_no_space(OSError(errno.EDQUOT, "Disk quota exceeded"))
    assert space.is_no_space(OSError("Error writing bytes to file. Detail: [errno 28] No space left on device"))
    assert space.is_no_space(OSError("org.apache.hadoop.hdfs.protocol.DSQuotaExceededException: quota"))
    assert not space.is_no_space(OSError(errno.EACCES, "Permission denied"))
    assert not space.is_no_space(ValueError("no space left on device"))  # not an I/O error
    try:
        try:
            raise OSError(errno.ENOSPC, "full")
        except OSError as exc:
            raise RuntimeError("wrapped") from exc
    except RuntimeError as wrapped:
        assert space.is_no_space(wrapped)
    assert not space.is_no_space(space.DiskFull("no space left on device ... for 300 s"))
    assert issubclass(space.DiskFull, FatalError)


class Disk:
    """A writer that fails for want of space until ``frees`` tries have been made."""

    def __init__(self, frees: int) -> None:
        self.frees = frees
        self.tries = 0

    def write(self, data: bytes) -> int:
        self.tries += 1
        if self.tries <= self.frees:
            raise OSError(errno.ENOSPC, "No space left on device")
        return len(data)


def test_retry_waits_for_space_and_says_so():
    pauses = space.Pauses(timeout=30)
    disk = Disk(frees=6)
    seen: list[str] = []
    watcher_stop = threading.Event()

    def watch() -> None:
        while not watcher_stop.is_set():
            seen.append(pauses.describe())
            time.sleep(0.01)
    t = threading.Thread(target=watch)
    t.start()
    try:
        assert space.retry("writing the test file (/x)", disk.write, b"abc", pauses=pauses) == 3
    finally:
        watcher_stop.set()
        t.join()
    assert disk.tries == 7
    assert any(s.startswith("paused: no space left on device writing the test file (/x); retrying") for s in seen)
    assert pauses.describe() == "" and not pauses.active()


def test_retry_gives_up_after_the_time_limit():
    pauses = space.Pauses(timeout=0.5)
    started = time.monotonic()
    with pytest.raises(space.DiskFull, match=r"no space left on device writing x for \d s "
                                              r"\(DISK_FULL_TIMEOUT_SECS=0.5\)"):
        space.retry("writing x", Disk(frees=10**9).write, b"", pauses=pauses)
    assert 0.5 <= time.monotonic() - started < 5
    assert not pauses.active()


def test_retry_other_errors_at_once():
    def denied() -> None:
        raise PermissionError(errno.EACCES, "denied")
    with pytest.raises(PermissionError):
        space.retry("writing y", denied, pauses=space.Pauses(10))


def test_retry_stops_when_the_caller_stops():
    stop = threading.Event()
    threading.Timer(0.2, stop.set).start()
    with pytest.raises(OSError) as caught:
        space.retry("writing z", Disk(frees=10**9).write, b"", pauses=space.Pauses(60), stop=stop.is_set)
    assert caught.value.errno == errno.ENOSPC


def test_pauses_overdue():
    pauses = space.Pauses(timeout=0.1)
    pauses.begin("writing the journal under /a", OSError(errno.ENOSPC, "full"))
    assert pauses.overdue() is None
    time.sleep(0.15)
    assert "writing the journal under /a for 0 s (DISK_FULL_TIMEOUT_SECS=0.1)" in pauses.overdue()
    pauses.end("writing the journal under /a")
    assert pauses.overdue() is None


@pytest.fixture
def full_tmpfs(tmp_path):
    if os.geteuid() != 0:
        pytest.skip("mounting a tmpfs needs root")
    where = tmp_path / "small"
    where.mkdir()
    if subprocess.run(["mount", "-t", "tmpfs", "-o", "size=1m", "tmpfs", str(where)]).returncode != 0:
        pytest.skip("cannot mount a tmpfs")
    try:
        yield where
    finally:
        subprocess.run(["umount", "-l", str(where)])


def _fill(path) -> None:
    fd = os.open(path, os.O_WRONLY | os.O_CREAT)
    try:
        for chunk in (65536, 512):
            try:
                while True:
                    os.write(fd, b"\0" * chunk)
            except OSError:
                pass
    finally:
        os.close(fd)


def test_status_file_is_rewritten_in_place_on_a_full_disk(full_tmpfs):
    status = full_tmpfs / "status.json"
    fs.write_status_file(str(status), json.dumps({"state": "RUNNING"}).encode())
    assert os.path.getsize(status) == fs.STATUS_RESERVE
    _fill(full_tmpfs / "filler")
    with pytest.raises(OSError) as caught:
        fs.write_atomic(str(full_tmpfs / "other.json"), b"x" * 8192)
    assert space.is_no_space(caught.value)
    assert sorted(os.listdir(full_tmpfs)) == ["filler", "status.json"]  # no temporary file left
    doc = {"state": "FAILED", "diagnostics": "no space left on device writing the journal " + "x" * 6000}
    fs.write_status_file(str(status), json.dumps(doc).encode())
    assert json.loads(status.read_text()) == doc


def test_an_append_that_meets_a_full_disk_leaves_no_torn_line(full_tmpfs):
    """AT_LEAST_ONCE output on a full disk: the window fails whole; once space returns, every line parses."""
    from stram.operator import OperatorContext
    from stram.operators import io

    op = io.JsonLinesOutput()
    op.path = str(full_tmpfs / "out")
    op.setup(OperatorContext(id=3, name="out", attributes={"PROCESSING_MODE": "AT_LEAST_ONCE"}))
    rows = [{"key": f"w{i}", "count": i, "total": i * 7} for i in range(200)]
    op.begin_window(1)
    for row in rows[:10]:
        op.process_input(row)
    op.end_window()
    part = full_tmpfs / "out" / "part-out-3.jsonl"
    size = part.stat().st_size
    _fill(full_tmpfs / "filler")
    op.begin_window(2)
    for row in rows * 50:  # far more than the few bytes left
        op.process_input(row)
    with pytest.raises(OSError):
        op.end_window()
    assert part.stat().st_size == size  # the failed window left nothing behind
    os.unlink(full_tmpfs / "filler")
    op.begin_window(2)  # the replay
    for row in rows:
        op.process_input(row)
    op.end_window()
    op.teardown()
    assert [json.loads(line) for line in part.read_text().splitlines()] == rows[:10] + rows
