"""The end of an application (appmaster/core/ending.py): containers still ending their operators.

Pure MasterState tests with hand-written heartbeats. After the application
ends, a container that heartbeats ``ending`` (its outputs still make their last
committed windows final) is alive and told to shut down; SUCCEEDED turns FAILED
when such a container has to be stopped, or when a teardown fails after the end.
"""

from __future__ import annotations

import sys
from pathlib import Path

from stram import wire as proto

from statekit import StateRun  # noqa: E402

from stram.master.core.events import ContainersStopped, ErrorReport, KillApp  # noqa: E402
from stram.master.core.state import Finish  # noqa: E402

LINEAR = """
name: ending
operators:
  src: {class: spec_fixture_ops:Source}
  out: {class: spec_fixture_ops:Sink}
streams:
  s: {from: src.output, to: [out.input]}
"""


def ended_run() -> StateRun:
    """Both operators shut down at window 10 with a checkpoint there: removed, SUCCEEDED."""
    run = StateRun(LINEAR)
    run.deploy()
    run.heartbeat(run.cid("src"), run.ended("src", 10, 10))
    run.heartbeat(run.cid("out"), run.ended("out", 10, 10))
    run.heartbeat(run.cid("src"))
    assert run.state.state == "SUCCEEDED", run.state.diagnostics
    return run


def ending_heartbeat(run: StateRun, container_id: str, *ending: str):
    run.now += 1000
    hb = proto.ContainerHeartbeat(container_id=container_id, jvm_name=f"1@{container_id}", ending=list(ending))
    return run.state.heartbeat(hb, run.now)


def finishes(instructions) -> list[Finish]:  # noqa: ANN001
    return [i for i in instructions if isinstance(i, Finish)]


def test_a_container_ending_its_operators_is_alive_and_told_to_shut_down():
    run = ended_run()
    out = run.cid("out")
    response, instructions = ending_heartbeat(run, out, "out (2)")
    assert response.shutdown and response.committed_window_id == run.state.committed
    assert not finishes(instructions)  # it still runs: no final state yet
    container = run.state.plan.containers[out]
    assert container.ending == ["out (2)"] and container.last_heartbeat_millis == run.now
    assert any(e.kind == "ending" and "still ends out (2)" in e.text for e in run.state.events)
    # it exits once its teardown is done: the application ends as it was
    run.exited(run.cid("src"), 0)
    (finish,) = finishes(run.exited(out, 0))
    assert finish.state == "SUCCEEDED"


def test_a_container_stopped_while_still_ending_makes_succeeded_failed():
    run = ended_run()
    out = run.cid("out")
    ending_heartbeat(run, out, "out (2)")
    (finish,) = finishes(run.state.handle(ContainersStopped(run.now + 1000, (run.cid("src"), out))))
    assert finish.state == "FAILED"
    assert finish.diagnostics == (f"the application ended, but container {out} was stopped while still ending "
                                  f"out (2) (END_TIMEOUT_SECS=600): its last committed windows may not be final")


def test_a_container_stopped_without_saying_it_was_ending_leaves_succeeded():
    run = ended_run()
    (finish,) = finishes(run.state.handle(ContainersStopped(run.now + 1000, (run.cid("out"),))))
    assert finish.state == "SUCCEEDED"


def test_a_teardown_failing_after_the_end_makes_succeeded_failed_naming_the_operator():
    run = ended_run()
    out = run.cid("out")
    run.state.handle(ErrorReport(out, (run.id("out"),), "teardown of out failed: OSError: refused\n", run.now))
    assert run.state.state == "FAILED"
    assert run.state.diagnostics == (f"the application ended, but out in {out} failed while ending, so its "
                                     f"output may be incomplete: teardown of out failed: OSError: refused")
    run.exited(run.cid("src"), 0)
    (finish,) = finishes(run.exited(out, 1))
    assert finish.state == "FAILED"


def test_a_killed_application_stays_killed_whatever_fails_while_ending():
    run = StateRun(LINEAR)
    run.deploy()
    instructions = run.state.handle(KillApp(run.now))
    state, diagnostics = run.state.state, run.state.diagnostics
    assert state == "KILLED"
    out = run.cid("out")
    instructions += run.state.handle(ErrorReport(out, (run.id("out"),), "teardown of out failed: OSError: x",
                                                 run.now))
    instructions += ending_heartbeat(run, out, "out (2)")[1]
    instructions += run.state.handle(ContainersStopped(run.now + 1000, (run.cid("src"), out)))
    (finish,) = finishes(instructions)
    assert (finish.state, finish.diagnostics) == (state, diagnostics)
    assert (run.state.state, run.state.diagnostics) == (state, diagnostics)
