"""Never a silent stall: an operator missing from a heartbeat, a hang that comes back, a frozen committed window.

Pure: a MasterState driven by hand-written heartbeats; the clock is passed in.
"""

from __future__ import annotations

import json

from stram import wire as proto
from stram.master.core.plan import OperatorState
from stram.master.core.recovery import stall_limit_millis
from stram.master.core.state import KillContainer, MasterState
from stram.master.spec import AppSpec

T0 = 1_700_000_000_000

SPEC = """
name: stalls
attributes: {STREAMING_WINDOW_SIZE_MILLIS: 100, HEARTBEAT_TIMEOUT_MILLIS: 60000, TIMEOUT_WINDOW_COUNT: 20,
             CHECKPOINT_WINDOW_COUNT: 10, RECOVERY_ATTEMPTS: 2}
operators:
  src: {class: spec_fixture_ops:Source}
  out: {class: spec_fixture_ops:Sink}
streams:
  a: {from: src.output, to: [out.input]}
"""


def started() -> tuple[MasterState, dict[str, int]]:
    state = MasterState(AppSpec.from_yaml(SPEC), "app", "file:///tmp/stalls", "tok", T0, T0)
    state.start(T0)
    for cid in sorted(state.plan.containers):
        hello(state, cid, T0)
    return state, {op.name: op.id for op in state.plan.operators.values()}


def hello(state: MasterState, cid: str, now: int) -> None:
    state.heartbeat(proto.ContainerHeartbeat(container_id=cid, buffer_server_host="h", buffer_server_port=1), now)


def report(state: MasterState, op_id: int, window: int, now: int, saved: tuple[int, ...] = (),
           stack: dict | None = None) -> proto.ContainerHeartbeatResponse:
    op = state.plan.operators[op_id]
    hb = proto.ContainerHeartbeat(container_id=op.container, buffer_server_host="h", buffer_server_port=1)
    hb.container_stats.operators.add(node_id=op_id, state=proto.OperatorHeartbeat.ACTIVE,
                                     current_window_id=window, saved_checkpoints=list(saved))
    if stack is not None:
        hb.stack_trace = json.dumps(stack)
    response, _ = state.heartbeat(hb, now)
    state.validate_state()
    return response


def relaunch(state: MasterState, op_id: int, now: int) -> int:
    """Start the replacement container of ``op_id`` (after its backoff) and get it ACTIVE; the time."""
    op = state.plan.operators[op_id]
    while state.plan.containers[op.container].state == "WAITING":  # a restart's backoff
        now += 250
        state.tick(now)
    hello(state, op.container, now)
    report(state, op_id, op.recovery_checkpoint, now)
    assert state.plan.operators[op_id].state == OperatorState.ACTIVE
    return now


def test_an_operator_missing_from_a_heartbeat_is_recovered_and_counted_until_the_application_fails():
    """An empty heartbeat (a buggy or hostile agent, with the container's own credential) once removed
    the operator and froze the application with no word; it is a failure of the operator."""
    state, ids = started()
    base = state.initial_window
    report(state, ids["src"], base + 1, T0)
    now = T0
    for attempt in (1, 2, 3):
        cid = state.plan.operators[ids["src"]].container
        empty = proto.ContainerHeartbeat(container_id=cid)  # no operator stats at all
        _, instructions = state.heartbeat(empty, now)
        assert KillContainer(cid, "operator src missing from its heartbeat") in instructions
        assert state.info()["failures"]["src"]["count"] == attempt
        assert state.info()["removed"] == []
        if attempt < 3:
            assert state.state == "RUNNING" and state.plan.operators[ids["src"]].restarts == attempt
            now = relaunch(state, ids["src"], now + 10)
    # RECOVERY_ATTEMPTS=2: the third time ends the application, naming the operator and why
    assert state.state == "FAILED"
    assert state.diagnostics.startswith("operator src (1) failed 3 times (RECOVERY_ATTEMPTS=2); last error: "
                                        "operator src (1) went missing from ")


def test_a_hang_that_comes_back_is_caught_every_time_then_fails_with_the_stack():
    """Detected as blocked and redeployed once, a hung operator was never looked at again."""
    state, ids = started()
    base = state.initial_window
    stack = {"threads": [{"name": "op-2-out", "ident": 7, "daemon": True, "operator": ids["out"],
                          "frames": [{"file": "/x/ops.py", "line": 12, "function": "process_input",
                                      "code": "time.sleep(600)"}]}]}
    report(state, ids["out"], base + 1, T0)
    now, restarts = T0, 0
    while state.state == "RUNNING":
        now += 2_100  # out finishes no window for more than TIMEOUT_WINDOW_COUNT x 100 ms
        report(state, ids["src"], base + (now - T0) // 100, now)
        assert state.tick(now) == [] and state.info()["blocked"] == ["out"]
        window = state.plan.operators[ids["out"]].current_window
        assert report(state, ids["out"], window, now + 50).stack_trace_required  # asked for its stack
        report(state, ids["out"], window, now + 100, stack=stack)  # which comes with the next heartbeat
        instructions = state.tick(now + 100)
        if state.state != "RUNNING":
            break
        assert any(isinstance(i, KillContainer) for i in instructions)
        restarts += 1
        assert state.plan.operators[ids["out"]].restarts == restarts
        now = relaunch(state, ids["out"], now + 200)
        assert state.info()["blocked"] == []
    assert restarts == 2  # caught every time: twice restarted, the third hang is one too many
    assert state.state == "FAILED"
    assert state.diagnostics.startswith("operator out (2) failed 3 times (RECOVERY_ATTEMPTS=2); last error: "
                                        "OperatorBlocked: no window finished for")
    assert 'File "/x/ops.py", line 12, in process_input' in state.diagnostics and "time.sleep(600)" in state.diagnostics


def test_a_frozen_committed_window_is_reported_naming_the_operator_that_holds_it_back():
    """Windows go on, but out never saves a checkpoint: the committed window cannot move. The
    watchdog says so once the limit passes, in info (get-app-info, the console), and takes it
    back when the window moves again."""
    state, ids = started()
    base = state.initial_window
    limit = stall_limit_millis(state)
    assert limit == 30_000
    now = T0
    while now - T0 <= limit + 1_000:
        now += 1_000
        w = base + (now - T0) // 100
        report(state, ids["src"], w, now, saved=(w - w % 10,))
        report(state, ids["out"], w, now)  # never a checkpoint
        state.tick(now)
        if now - T0 < limit:
            assert state.info()["stalled"] == ""
    stalled = state.info()["stalled"]
    assert stalled.startswith("the committed window ") and " has not moved for 3" in stalled
    assert f"operator out ({ids['out']}) on {state.plan.operators[ids['out']].container} holds it back" in stalled
    assert state.info(brief=True)["stalled"] == stalled and state.state == "RUNNING"
    assert any(e["kind"] == "stall" for e in state.info()["events"])
    w = base + (now - T0) // 100
    report(state, ids["out"], w, now + 1_000, saved=(w - w % 10,))
    state.tick(now + 1_000)
    assert state.info()["stalled"] == ""
