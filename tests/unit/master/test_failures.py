"""Operator failures on the master (issue 13, item 6): deterministic failures end the application,
restarts back off, the diagnostics name the operator that raised with its exception and traceback.

Pure: a MasterState driven by hand-written heartbeats (tests/kits/statekit.py).
"""

from __future__ import annotations

import sys
from pathlib import Path

import pytest


from statekit import StateRun  # noqa: E402

from stram import wire as proto  # noqa: E402
from stram.client.commands import failure_note  # noqa: E402
from stram.master.core.plan import ContainerState  # noqa: E402

FAILED = proto.OperatorHeartbeat.FAILED
SPEC = """
name: failing
attributes: {{STREAMING_WINDOW_SIZE_MILLIS: 100{extra}}}
operators:
  reader: {{class: spec_fixture_ops:Source}}
  split: {{class: spec_fixture_ops:Upper}}
  out: {{class: spec_fixture_ops:Sink}}
streams:
  lines: {{from: reader.output, to: [split.input], locality: CONTAINER_LOCAL}}
  words: {{from: split.output, to: [out.input]}}
"""


def traceback_of(error: str) -> str:
    return ('Traceback (most recent call last):\n  File "/app/ops.py", line 12, in emit_tuples\n'
            f'    raise ValueError("{error}")\n{error}')


def run(extra: str = "") -> StateRun:
    r = StateRun(SPEC.format(extra=extra))
    r.deploy()
    return r


def fail(r: StateRun, name: str, cw: int, error: str, fatal: bool = False):
    """``name`` reports FAILED after window ``cw`` with ``error`` (its container-mates report ACTIVE)."""
    cid = r.cid(name)
    reports = [proto.OperatorHeartbeat(node_id=r.id(name), state=FAILED, current_window_id=r.w(cw),
                                       error=traceback_of(error), fatal=fatal)]
    reports += [r.report(o, cw) for o in sorted(r.state.plan.containers[cid].operators) if o != r.id(name)]
    return r.heartbeat(cid, *reports)


def redeploy(r: StateRun) -> None:
    """Launch waiting containers (the clock passes their backoff) and deploy everything again."""
    r.now += 60_000
    r.state.tick(r.now)
    r.deploy()


def test_the_same_error_at_the_same_window_twice_fails_the_application_naming_the_operator():
    r = run()
    fail(r, "reader", 3, "ValueError: bad line 42")
    assert r.state.state == "RUNNING"
    redeploy(r)
    fail(r, "reader", 3, "ValueError: bad line 42")
    assert r.state.state == "FAILED"
    diagnostics = r.state.diagnostics
    assert diagnostics.startswith(f"operator reader ({r.id('reader')}) failed again after window ")
    assert "deterministic failure (set RETRY_DETERMINISTIC_FAILURES: true to keep retrying): " \
           "ValueError: bad line 42\nTraceback (most recent call last):\n" in diagnostics
    assert 'raise ValueError("ValueError: bad line 42")' in diagnostics
    assert "split" not in diagnostics


def test_a_failure_at_another_window_or_with_another_error_is_retried():
    r = run()
    fail(r, "reader", 3, "ValueError: bad line 42")
    redeploy(r)
    fail(r, "reader", 5, "ValueError: bad line 42")
    redeploy(r)
    fail(r, "reader", 5, "OSError: disk hiccup")
    assert r.state.state == "RUNNING"
    assert r.op("reader").restarts == 3 and r.op("split").restarts == 0


def test_retry_deterministic_failures_keeps_restarting_with_exponential_backoff():
    r = run(", RETRY_DETERMINISTIC_FAILURES: true")
    delays = []
    for _ in range(4):
        _, instructions = fail(r, "reader", 3, "ValueError: bad line 42")
        assert r.state.state == "RUNNING"
        new = r.state.plan.containers[r.op("reader").container]
        delays.append(new.launch_at - r.now if new.state == ContainerState.WAITING else 0)
        redeploy(r)
    assert delays == [0, 250, 500, 1000]  # rules.restart_backoff_millis, applied to operator failures
    assert r.op("reader").restarts == 4


def test_recovery_attempts_blames_the_operator_that_raised_with_its_exception():
    """Before: `operator split failed 2 times ...` when reader raised, without reader's exception."""
    r = run(", RECOVERY_ATTEMPTS: 1")
    fail(r, "reader", 3, "ValueError: first")
    redeploy(r)
    fail(r, "reader", 7, "ValueError: second")
    assert r.state.state == "FAILED"
    assert r.state.diagnostics.startswith(
        f"operator reader ({r.id('reader')}) failed 2 times (RECOVERY_ATTEMPTS=1); last error: "
        "ValueError: second\nTraceback (most recent call last):\n")


def test_a_fatal_error_fails_at_once_with_its_traceback():
    r = run()
    fail(r, "reader", 0, "FatalError: LineReader: the input file /nowhere.txt does not exist", fatal=True)
    assert r.state.state == "FAILED"
    assert r.state.diagnostics.startswith(
        f"operator reader ({r.id('reader')}) failed fatally: FatalError: LineReader: the input file "
        "/nowhere.txt does not exist\nTraceback")


def test_info_and_the_progress_line_show_each_failure_as_it_happens():
    r = run()
    fail(r, "split", 3, "KeyError: 'x'")
    info = r.state.info()
    assert info["failures"]["split"]["error"] == "KeyError: 'x'" and info["failures"]["split"]["count"] == 1
    assert failure_note(info) == " | split failed: KeyError: 'x'"
    redeploy(r)
    fail(r, "reader", 4, "OSError: flaky")
    redeploy(r)
    fail(r, "reader", 6, "OSError: flaky")
    info = r.state.info()
    assert list(info["failures"]) == ["split", "reader"]  # the newest last
    assert failure_note(info) == " | reader failed (2x): OSError: flaky"
    assert failure_note({"failures": {}}) == ""


def test_line_reader_setup_fails_fatally_on_a_missing_file_or_a_directory(tmp_path):
    from stram.operator import FatalError
    from stram.operators.io import LineReader
    reader = LineReader()
    for path, why in ((tmp_path / "missing.txt", "does not exist"), (tmp_path, "is a directory")):
        reader.path = str(path)
        with pytest.raises(FatalError, match=f"LineReader: the input (file|path) {path} {why}"):
            reader.setup(None)  # type: ignore[arg-type]
