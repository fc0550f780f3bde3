"""stram.common.fs.hdfs_retry: which HDFS failures are waited out, for how long, and what is raised at once.

The NameNode itself is the session's mini cluster in tests/e2e/yarn/test_yarn_hdfs_faults.py;
here a helper fails the way libhdfs reports a NameNode that is away (errno 255,
EROFS in safe mode) and the probe of ``/`` is set to say whether the NameNode
answers, so that the policy's bounds can be checked in milliseconds.
"""

from __future__ import annotations

import errno
import time

import pytest

from stram.common import fs


def failing(outcomes):
    """A helper taking a URI that raises the given errnos in turn, then returns "ok"; its calls."""
    calls = []

    @fs.hdfs_retry
    def helper(uri: str) -> str:
        calls.append(time.monotonic())
        if len(calls) <= len(outcomes):
            code = outcomes[len(calls) - 1]
            raise (FileNotFoundError if code == errno.ENOENT else OSError)(code, f"HDFS call failed: errno {code}")
        return "ok"
    return helper, calls


@pytest.fixture
def namenode(monkeypatch):
    state = {"answers": False}
    monkeypatch.setattr(fs, "_answers", lambda key: state["answers"])
    monkeypatch.setenv("STRAM_HDFS_RETRY_SECS", "3")
    return state


def test_a_namenode_away_is_waited_out(namenode):
    helper, calls = failing([255, 255, errno.EROFS, 255])
    assert helper("hdfs://nn:8020/app/journal") == "ok"
    assert len(calls) == 5
    assert calls[-1] - calls[0] < 2.5  # backoff 0.1, 0.2, 0.4, 0.8 s


def test_answers_of_the_namenode_are_raised_at_once(namenode):
    for code in (errno.ENOENT, errno.EACCES, errno.ENOSPC, errno.EEXIST):
        helper, calls = failing([code])
        with pytest.raises(OSError) as info:
            helper("hdfs://nn:8020/app/x")
        assert info.value.errno == code and len(calls) == 1


def test_local_files_are_never_retried(namenode):
    helper, calls = failing([255])
    with pytest.raises(OSError):
        helper("/tmp/app/journal")
    assert len(calls) == 1


def test_the_wait_is_bounded_and_names_the_namenode(namenode, monkeypatch):
    monkeypatch.setenv("STRAM_HDFS_RETRY_SECS", "1")
    helper, calls = failing([255] * 1000)
    started = time.monotonic()
    with pytest.raises(fs.HdfsUnavailable) as info:
        helper("hdfs://nn:8020/app/journal")
    assert 0.9 < time.monotonic() - started < 3
    assert "HDFS NameNode hdfs://nn:8020" in str(info.value) and "/app/journal" in str(info.value)
    assert 3 <= len(calls) < 15


def test_an_unexplained_error_while_the_namenode_answers_is_retried_briefly(namenode, monkeypatch):
    namenode["answers"] = True
    monkeypatch.setattr(fs, "_ANSWERING_GRACE", 0.5)
    monkeypatch.setenv("STRAM_HDFS_RETRY_SECS", "60")
    helper, calls = failing([255] * 1000)
    started = time.monotonic()
    with pytest.raises(fs.HdfsUnavailable):
        helper("hdfs://nn:8020/app/x")
    assert time.monotonic() - started < 3
