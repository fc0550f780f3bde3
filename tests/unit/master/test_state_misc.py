"""MasterState clock events and the journal: timeouts, blocked operators, backoff, restore.

Pure: no processes, no sockets; the clock is passed in.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path


from stram import wire as proto  # noqa: E402
from stram.master.core.plan import OperatorState  # noqa: E402
from stram.master.core.state import KillContainer, LaunchContainer, MasterState, restart_backoff_millis  # noqa: E402
from stram.master.journal import document as journal  # noqa: E402
from stram.master.spec import AppSpec  # noqa: E402

T0 = 1_700_000_000_000

SPEC = """
name: misc
attributes: {STREAMING_WINDOW_SIZE_MILLIS: 100, HEARTBEAT_TIMEOUT_MILLIS: 3000, TIMEOUT_WINDOW_COUNT: 20}
operators:
  src: {class: spec_fixture_ops:Source}
  out: {class: spec_fixture_ops:Sink}
streams:
  a: {from: src.output, to: [out.input]}
"""


def started() -> tuple[MasterState, dict[str, int]]:
    state = MasterState(AppSpec.from_yaml(SPEC), "app", "file:///tmp/misc", "tok", T0, T0)
    state.start(T0)
    ids = {op.name: op.id for op in state.plan.operators.values()}
    for cid in sorted(state.plan.containers):
        state.heartbeat(proto.ContainerHeartbeat(container_id=cid, buffer_server_host="h",
                                                 buffer_server_port=1), T0)
    return state, ids


def report(state: MasterState, op_id: int, window: int, now: int) -> proto.ContainerHeartbeatResponse:
    op = state.plan.operators[op_id]
    hb = proto.ContainerHeartbeat(container_id=op.container, buffer_server_host="h", buffer_server_port=1)
    hb.container_stats.operators.add(node_id=op_id, state=proto.OperatorHeartbeat.ACTIVE,
                                     current_window_id=window)
    response, _ = state.heartbeat(hb, now)
    state.validate_state()
    return response


def test_heartbeat_timeout_loses_the_container_and_replaces_it():
    # t=0 both report; src's container goes silent; at t=3.001s it is lost
    state, ids = started()
    base = state.initial_window
    report(state, ids["src"], base + 1, T0)
    report(state, ids["out"], base + 1, T0)
    old = state.plan.operators[ids["src"]].container
    assert state.tick(T0 + 2_000) == []
    report(state, ids["out"], base + 20, T0 + 2_900)
    instructions = state.tick(T0 + 3_001)
    assert KillContainer(old, f"no heartbeat from {old} for 3000 ms") in instructions
    launches = [i for i in instructions if isinstance(i, LaunchContainer)]
    assert len(launches) == 1 and launches[0].container_id != old
    assert state.plan.operators[ids["src"]].container == launches[0].container_id
    assert state.plan.operators[ids["out"]].state == OperatorState.PENDING_DEPLOY  # downstream redeploys
    state.validate_state()


def test_blocked_operator_is_reported_and_its_container_restarted():
    # out stops finishing windows: after TIMEOUT_WINDOW_COUNT × 100 ms = 2 s it is blocked
    state, ids = started()
    base = state.initial_window
    for k, t in enumerate(range(0, 1_000, 300)):
        report(state, ids["src"], base + k + 1, T0 + t)
        report(state, ids["out"], base + 1, T0 + t)
    assert state.tick(T0 + 1_900) == [] and not state.blocked  # 1.9 s: not yet
    report(state, ids["src"], base + 30, T0 + 2_500)
    assert state.tick(T0 + 2_500) == []  # blocked: its container is asked for a stack first
    assert [o for o in state.info()["blocked"]] == ["out"]
    out = state.plan.operators[ids["out"]]
    hb = proto.ContainerHeartbeat(container_id=out.container, buffer_server_host="h", buffer_server_port=1)
    hb.container_stats.operators.add(node_id=out.id, state=proto.OperatorHeartbeat.ACTIVE,
                                     current_window_id=base + 1)
    response, _ = state.heartbeat(hb, T0 + 2_600)
    assert response.stack_trace_required
    stack = {"threads": [{"name": f"op-{out.id}-out", "ident": 7, "daemon": True, "operator": out.id,
                          "frames": [{"file": "/x/ops.py", "line": 12, "function": "process_input",
                                      "code": "time.sleep(60)"}]}]}
    hb.stack_trace = json.dumps(stack)
    response, _ = state.heartbeat(hb, T0 + 2_700)
    assert not response.stack_trace_required  # answered
    instructions = state.tick(T0 + 2_700)
    assert any(isinstance(i, KillContainer) for i in instructions)
    assert state.plan.operators[ids["out"]].restarts == 1
    # the diagnostic names the operator and carries its thread's stack, like a traceback
    error = state.plan.operators[ids["out"]].last_error
    assert 'File "/x/ops.py", line 12, in process_input' in error and "time.sleep(60)" in error
    assert error.splitlines()[-1].startswith("OperatorBlocked: no window finished for 2500 ms")
    assert state.info()["failures"]["out"]["error"].startswith("OperatorBlocked")


def test_blocked_operator_whose_container_does_not_answer_is_restarted_after_three_heartbeats():
    state, ids = started()
    base = state.initial_window
    report(state, ids["src"], base + 1, T0)
    report(state, ids["out"], base + 1, T0)
    report(state, ids["src"], base + 30, T0 + 2_100)
    assert state.tick(T0 + 2_100) == [] and state.blocked == {ids["out"]}
    for t in (3_000, 4_000, 5_000):  # heartbeats go on, without a stack
        report(state, ids["src"], base + 30, T0 + t)
        assert report(state, ids["out"], base + 1, T0 + t).stack_trace_required
    assert state.tick(T0 + 2_100 + 2_999) == []  # 3 heartbeat intervals (1 s each) not yet over
    instructions = state.tick(T0 + 2_100 + 3_000)
    assert any(isinstance(i, KillContainer) for i in instructions)
    assert "its container sent no stack within 3000 ms" in state.plan.operators[ids["out"]].last_error


def test_two_blocked_operators_where_restarting_one_redeploys_the_other():
    """src and out block at once; restarting src's container redeploys out downstream, which drops
    out's awaited stack while the restarts are being handed out (it raised KeyError there)."""
    state, ids = started()
    base = state.initial_window
    report(state, ids["src"], base + 1, T0)
    report(state, ids["out"], base + 1, T0)
    assert state.tick(T0 + 2_100) == [] and state.blocked == {ids["src"], ids["out"]}
    for t in (3_000, 4_000, 5_000):  # no stacks come
        report(state, ids["src"], base + 1, T0 + t)
        report(state, ids["out"], base + 1, T0 + t)
    instructions = state.tick(T0 + 2_100 + 3_000)
    assert any(isinstance(i, KillContainer) for i in instructions)
    assert state.plan.operators[ids["src"]].restarts == 1
    state.validate_state()


def test_an_operator_that_moves_on_while_its_stack_is_awaited_is_not_restarted():
    state, ids = started()
    base = state.initial_window
    report(state, ids["src"], base + 1, T0)
    report(state, ids["out"], base + 1, T0)
    report(state, ids["src"], base + 30, T0 + 2_100)
    assert state.tick(T0 + 2_100) == [] and state.blocked == {ids["out"]}
    report(state, ids["out"], base + 2, T0 + 2_500)  # it finished a window after all
    for t in (3_500, 4_500, 5_500):
        report(state, ids["src"], base + 40 + t // 1000, T0 + t)
        report(state, ids["out"], base + 2 + t // 1000, T0 + t)
    assert state.tick(T0 + 6_000) == [] and not state.blocked
    assert state.plan.operators[ids["out"]].restarts == 0


def test_restart_backoff_doubles_to_a_cap():
    assert restart_backoff_millis(1) == 0  # the first recovery is immediate
    assert [restart_backoff_millis(n) for n in (2, 3, 4)] == [250, 500, 1000]
    assert restart_backoff_millis(50) == 30_000


def test_journal_snapshot_restores_the_same_bookkeeping():
    state, ids = started()
    base = state.initial_window
    hb = proto.ContainerHeartbeat(container_id=state.plan.operators[ids["src"]].container)
    hb.container_stats.operators.add(node_id=ids["src"], state=proto.OperatorHeartbeat.ACTIVE,
                                     current_window_id=base + 12, saved_checkpoints=[base + 10])
    state.heartbeat(hb, T0 + 100)
    snapshot = journal.decode(journal.encode(state.snapshot()))
    restored = MasterState.restore(AppSpec.from_yaml(SPEC), snapshot, "file:///tmp/misc", "tok", T0 + 5_000)
    assert restored.attempt == 2
    assert restored.committed == state.committed
    assert {o.id: (o.recovery_checkpoint, o.container) for o in restored.plan.operators.values()} == \
        {o.id: (o.recovery_checkpoint, o.container) for o in state.plan.operators.values()}
    assert restored.plan.operators[ids["src"]].checkpoints == [base + 10]
    # containers get a heartbeat timeout from the restore to come back
    assert restored.tick(T0 + 5_000 + 2_000) == []
    restored.validate_state()
    assert "resumed from the journal" in restored.info()["events"][-1]["text"]


def test_a_deploy_request_carries_each_property_as_json_dumps_writes_it():
    """Equal values of other types (True and 1, 0.0 and -0.0, "1" and 1) keep their own JSON:
    the encoder's cache of repeated values must not mix them up."""
    values = {"flag": True, "one": 1, "text": "1", "none": None, "zero": 0.0, "negzero": -0.0,
              "nan": float("nan"), "big": 2 ** 70, "list": [1, True, "x"], "map": {"a": [None]}}
    spec = AppSpec.from_yaml(SPEC)
    spec.operators["src"].properties.update(values)
    spec.operators["out"].properties.update({"flag": 1, "one": True, "text": 1, "zero": -0.0})
    state = MasterState(spec, "app", "file:///tmp/misc", "tok", T0, T0)
    state.start(T0)
    for name in ("src", "out"):  # out's look-alikes come after src's values are cached
        op = next(o for o in state.plan.operators.values() if o.name == name)
        info = state.deploy_info(op)
        assert dict(info.properties) == {k: json.dumps(v) for k, v in op.properties.items()}
        assert dict(info.context_attributes) == {k: json.dumps(v) for k, v in op.attributes.items()}


def test_a_containers_buffer_server_figures_reach_the_containers_page_flow_control_included():
    state, ids = started()
    cid = state.plan.operators[ids["src"]].container
    hb = proto.ContainerHeartbeat(container_id=cid, buffer_server_host="h", buffer_server_port=1)
    hb.container_stats.operators.add(node_id=ids["src"], state=proto.OperatorHeartbeat.ACTIVE,
                                     current_window_id=state.initial_window + 1)
    hb.publishers.add(publisher=f"{ids['src']}.output", memory_bytes=4096, spilled_bytes=0, windows=3,
                      first_window=7, last_window=9, throttled_millis=1234)
    state.heartbeat(hb, T0 + 100)
    row = next(c for c in state.container_rows() if c["id"] == cid)
    assert row["buffer_server_publishers"] == {f"{ids['src']}.output": {
        "memory_bytes": 4096, "spilled_bytes": 0, "windows": 3, "first_window": 7, "last_window": 9,
        "throttled_millis": 1234}}
    # a heartbeat without publishers (its buffer server holds none now) clears them
    hb.ClearField("publishers")
    state.heartbeat(hb, T0 + 200)
    assert next(c for c in state.container_rows() if c["id"] == cid)["buffer_server_publishers"] == {}
