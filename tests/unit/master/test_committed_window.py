"""The committed-window rule (DESIGN: "Checkpoints and the committed window", "Failure and recovery").

Pure state-machine tests, no processes and no sockets. Each test draws its
timeline in a comment. Windows are written ``k`` for the window id
``base + k``, where ``base`` is the initial window ("no checkpoint yet",
the window before the first one); ``●`` marks a checkpoint an operator has
saved, ``cw`` the last window an operator reported finished.

Two tiers:

* the pure function :func:`stram.master.core.state.recovery_checkpoints` (and
  :func:`affected_operators`) on a physical plan whose
  ``PTOperator.checkpoints`` the test sets;
* :class:`stram.master.core.state.MasterState` driven end to end with hand-written
  ``ContainerHeartbeat`` messages, ``validate_state()`` after every step.
"""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Iterable

import pytest


from statekit import START_MILLIS, StateRun, label  # noqa: E402

from stram import wire as proto  # noqa: E402
from stram.master.core.plan import OperatorState, PhysicalPlan, PTOperator  # noqa: E402
from stram.master.core.state import (DeleteCheckpoints, LaunchContainer, affected_operators,  # noqa: E402,E501
                                     recovery_checkpoints)
from stram.master.spec import AppSpec  # noqa: E402

#: The initial window of an application started at START_MILLIS (what MasterState computes).
INITIAL = ((START_MILLIS // 1000) << 32) - 1
TOKEN = "rule-token"
ACTIVE = proto.OperatorHeartbeat.ACTIVE

# ---------------------------------------------------------------- specs

#   src ──▶ up ──▶ out                       (three containers)
LINEAR = """
name: linear
operators:
  src: {class: spec_fixture_ops:Source}
  up: {class: spec_fixture_ops:Upper}
  out: {class: spec_fixture_ops:Sink}
streams:
  a: {from: src.output, to: [up.input]}
  b: {from: up.output, to: [out.input]}
"""

#            ┌──▶ up ──▶ out
#   src ─────┤
#            └──▶ side
FAN_OUT = """
name: fan-out
operators:
  src: {class: spec_fixture_ops:Source}
  up: {class: spec_fixture_ops:Upper}
  out: {class: spec_fixture_ops:Sink}
  side: {class: spec_fixture_ops:Sink}
streams:
  a: {from: src.output, to: [up.input, side.input]}
  b: {from: up.output, to: [out.input]}
"""

#   left  ──▶ join.left
#   right ──▶ join.right       join ──▶ out
FAN_IN = """
name: fan-in
operators:
  left: {class: spec_fixture_ops:Source}
  right: {class: spec_fixture_ops:Source}
  join: {class: spec_fixture_ops:Join}
  out: {class: spec_fixture_ops:Sink}
streams:
  a: {from: left.output, to: [join.left]}
  b: {from: right.output, to: [join.right]}
  c: {from: join.output, to: [out.input]}
"""

#   src[0] ─┐
#           ├─▶ unifier ═THREAD_LOCAL═▶ up ──▶ out
#   src[1] ─┘
PARTITIONED = """
name: partitioned
operators:
  src: {class: spec_fixture_ops:Source, partitions: 2}
  up: {class: spec_fixture_ops:Upper}
  out: {class: spec_fixture_ops:Sink}
streams:
  a: {from: src.output, to: [up.input]}
  b: {from: up.output, to: [out.input]}
"""

#   left(c1) ──────────────────────▶ join.left
#   right(c2) ──▶ pre ═CONTAINER_LOCAL═▶ join.right      (pre + join in c3)
#                                     join ──▶ out(c4)
LOCAL_FAN_IN = """
name: local-fan-in
operators:
  left: {class: spec_fixture_ops:Source}
  right: {class: spec_fixture_ops:Source}
  pre: {class: spec_fixture_ops:Upper}
  join: {class: spec_fixture_ops:Join}
  out: {class: spec_fixture_ops:Sink}
streams:
  a: {from: left.output, to: [join.left]}
  b: {from: right.output, to: [pre.input]}
  c: {from: pre.output, to: [join.right], locality: CONTAINER_LOCAL}
  d: {from: join.output, to: [out.input]}
"""


def grouped(locality: str | None) -> str:
    """``src ──▶ up ══locality══▶ out``: up and out in one container when the locality is inline."""
    loc = f", locality: {locality}" if locality else ""
    return f"""
name: grouped
operators:
  src: {{class: spec_fixture_ops:Source}}
  up: {{class: spec_fixture_ops:Upper}}
  out: {{class: spec_fixture_ops:Sink}}
streams:
  a: {{from: src.output, to: [up.input]}}
  b: {{from: up.output, to: [out.input]{loc}}}
"""


# ---------------------------------------------------------------- pure helpers

def plan_of(text: str, max_containers: int | None = None) -> PhysicalPlan:
    return PhysicalPlan.from_spec(AppSpec.from_yaml(text), INITIAL, max_containers)


def ops_by_label(plan: PhysicalPlan) -> dict[str, PTOperator]:
    return {label(op): op for op in plan.operators.values()}


def recovery(plan: PhysicalPlan, checkpoints: dict[str, Iterable[int]]) -> dict[str, int]:
    """Set each operator's saved checkpoints (window offsets), return recovery offsets by label."""
    ops = ops_by_label(plan)
    assert set(checkpoints) == set(ops), "give every operator its checkpoints (maybe none)"
    for name, windows in checkpoints.items():
        ops[name].checkpoints = sorted(INITIAL + k for k in windows)
    rec = recovery_checkpoints(plan, INITIAL)
    assert set(rec) == set(plan.operators)
    return {name: rec[op.id] - INITIAL for name, op in ops.items()}


def committed(rec: dict[str, int]) -> int:
    return min(rec.values())


# ---------------------------------------------------------------- end-to-end harness

class Run(StateRun):
    """The committed-window tests' run: deploying leaves the committed window at the initial one."""

    def __init__(self, text: str) -> None:
        super().__init__(text, "app-rule", TOKEN)
        assert self.base == INITIAL

    def deploy(self) -> None:
        super().deploy()
        assert self.state.committed == self.base


def deleted(instructions) -> dict[int, tuple[int, ...]]:
    return {i.operator_id: i.windows for i in instructions if isinstance(i, DeleteCheckpoints)}


# ================================================================ pure: recovery_checkpoints
# Operators joined by streams share one recovery checkpoint, the newest one all of them accept
# (PhysicalPlan.checkpoint_groups): a replayed input is not its first run, so nothing downstream
# of it may restart after a later window than it. Only the streams of an operator that reads its
# inputs itself (SelfReader, as SparkPipeline) keep Apex's rule: the newest checkpoint not after
# the downstream's recovery checkpoint.

def test_a_chain_shares_the_newest_checkpoint_all_of_it_has():
    # window k:            60   120   180
    #   src ──▶ up ──▶ out
    #   src                ●────●─────●
    #   up                 ●────●             (lags one checkpoint)
    #   out                ●────●─────●
    # common {60, 120} → 120 for all          committed = 120
    plan = plan_of(LINEAR)
    rec = recovery(plan, {"src": [60, 120, 180], "up": [60, 120], "out": [60, 120, 180]})
    assert rec == {"src": 120, "up": 120, "out": 120}
    assert committed(rec) == 120

    # the sink lagging holds everything with it
    #   src ●────●────●   up ●────●────●   out ●            → all 60
    rec = recovery(plan, {"src": [60, 120, 180], "up": [60, 120, 180], "out": [60]})
    assert rec == {"src": 60, "up": 60, "out": 60}


def test_a_slow_branch_holds_the_whole_fan_out():
    #            ┌──▶ up ──▶ out
    #   src ─────┤
    #            └──▶ side
    # window k:     60   120   180
    #   src, up, out ●────●─────●
    #   side        ●                       (the slow branch)
    # a restart of src replays windows 61.. differently for both branches: all restart from 60
    plan = plan_of(FAN_OUT)
    rec = recovery(plan, {"src": [60, 120, 180], "up": [60, 120, 180], "out": [60, 120, 180],
                          "side": [60]})
    assert rec == {"src": 60, "up": 60, "out": 60, "side": 60}
    assert committed(rec) == 60


def test_fan_in_inputs_share_one_checkpoint_with_what_they_feed():
    #   left  ──▶ join.left
    #   right ──▶ join.right     join ──▶ out
    # window k:     60   120   180
    #   left        ●────●─────●
    #   right       ●                       (lags)
    #   join        ●────●
    #   out         ●────●─────●
    # join restarting after 120 would skip windows 61..120 of right's replay, which need not hold
    # what right's first run put there: all four share 60
    plan = plan_of(FAN_IN)
    rec = recovery(plan, {"left": [60, 120, 180], "right": [60], "join": [60, 120],
                          "out": [60, 120, 180]})
    assert rec == {"left": 60, "right": 60, "join": 60, "out": 60}
    rec = recovery(plan, {"left": [60, 120, 180], "right": [60, 120], "join": [60, 120],
                          "out": [60, 120, 180]})
    assert rec == {"left": 120, "right": 120, "join": 120, "out": 120}


def test_input_partitions_and_their_unifier_share_the_checkpoint():
    #   src[0] ─┐
    #           ├─▶ unifier ═THREAD_LOCAL═▶ up ──▶ out
    #   src[1] ─┘
    # window k:     60   120   180
    #   src[0]      ●────●
    #   src[1]      ●                        (lags)
    #   unifier     ●────●─────●
    #   up          ●────●
    #   out         ●────●─────●
    # common {60} → 60; once src[1] has 120: {60, 120} → 120 (the unifier's 180 is never usable)
    plan = plan_of(PARTITIONED)
    ops = ops_by_label(plan)
    assert plan.inline_group(ops["unifier"].id) == {ops["unifier"].id, ops["up"].id}
    rec = recovery(plan, {"src[0]": [60, 120], "src[1]": [60], "unifier": [60, 120, 180],
                          "up": [60, 120], "out": [60, 120, 180]})
    assert set(rec.values()) == {60}
    rec = recovery(plan, {"src[0]": [60, 120], "src[1]": [60, 120], "unifier": [60, 120, 180],
                          "up": [60, 120], "out": [60, 120, 180]})
    assert set(rec.values()) == {120}


@pytest.mark.parametrize("locality", [None, "CONTAINER_LOCAL", "THREAD_LOCAL"])
def test_any_locality_shares_the_newest_common_checkpoint(locality):
    #   src ──▶ up ══locality══▶ out
    # window k:     60    90   120   180
    #   src         ●──────────●─────●
    #   up          ●──────────●                (checkpoints every 60 windows)
    #   out         ●─────●───────────●         (out checkpoints at 90 and 180)
    # common checkpoints: {60}, in one container or not
    plan = plan_of(grouped(locality))
    ops = ops_by_label(plan)
    inline = locality is not None
    assert (ops["up"].container == ops["out"].container) is inline
    assert (plan.inline_group(ops["up"].id) == {ops["up"].id, ops["out"].id}) is inline
    rec = recovery(plan, {"src": [60, 120, 180], "up": [60, 120], "out": [60, 90, 180]})
    assert rec == {"src": 60, "up": 60, "out": 60}


def test_an_operator_reading_its_inputs_itself_keeps_apexs_rule_on_its_streams():
    #   src ──▶ up ──▶ self (reads its input itself, reports the windows its engine committed)
    # window k:     60   120   130   180
    #   src, up     ●────●───────────●
    #   self                   ●               (its own engine's commit)
    # self: nothing downstream → 130; {src, up}: newest common not after 130 → 120
    plan = plan_of("""
name: self-reading
operators:
  src: {class: spec_fixture_ops:Source}
  up: {class: spec_fixture_ops:Upper}
  self: {class: spec_fixture_ops:SelfReader}
streams:
  a: {from: src.output, to: [up.input]}
  b: {from: up.output, to: [self.input]}
""")
    ops = ops_by_label(plan)
    groups = plan.checkpoint_groups()
    assert groups[ops["src"].id] == {ops["src"].id, ops["up"].id} and groups[ops["self"].id] == {ops["self"].id}
    rec = recovery(plan, {"src": [60, 120, 180], "up": [60, 120, 180], "self": [130]})
    assert rec == {"src": 120, "up": 120, "self": 130}


def test_operator_without_a_checkpoint_holds_everything_at_the_initial_window():
    #   src ──▶ up ──▶ out
    # window k:     0 (initial)   60   120
    #   src         ·             ●────●
    #   up          ·                          (just deployed: no checkpoint yet)
    #   out         ·             ●────●
    plan = plan_of(LINEAR)
    rec = recovery(plan, {"src": [60, 120], "up": [], "out": [60, 120]})
    assert rec == {"src": 0, "up": 0, "out": 0}
    assert committed(rec) == 0  # the initial window: nothing is committed yet


def test_checkpoints_out_of_step_meet_where_all_have_one():
    # (a) different CHECKPOINT_WINDOW_COUNT (every 40 and every 60 windows): they meet at 120
    plan = plan_of(LINEAR)
    rec = recovery(plan, {"src": [40, 80, 120, 160], "up": [40, 80, 120, 160], "out": [60, 120]})
    assert rec == {"src": 120, "up": 120, "out": 120}
    # (b) downstream ahead of upstream: the upstream's newest
    rec = recovery(plan, {"src": [60], "up": [60, 120, 180], "out": [60, 120, 180, 240]})
    assert rec == {"src": 60, "up": 60, "out": 60}
    # (c) never meeting: all stay at the initial window
    rec = recovery(plan, {"src": [50, 110], "up": [50, 110], "out": [60, 120]})
    assert rec == {"src": 0, "up": 0, "out": 0}


# ================================================================ pure: affected set

def test_affected_set_is_lost_operators_everything_downstream_and_their_container_local_upstream():
    #   left(c1) ──────────────────────▶ join.left
    #   right(c2) ──▶ pre ═CONTAINER_LOCAL═▶ join.right      (pre + join in c3)
    #                                     join ──▶ out(c4)
    plan = plan_of(LOCAL_FAN_IN)
    ops = ops_by_label(plan)
    ids = {name: op.id for name, op in ops.items()}
    assert ops["pre"].container == ops["join"].container
    assert len({ops[n].container for n in ("left", "right", "pre", "out")}) == 4

    def affected(*names: str) -> set[str]:
        got = affected_operators(plan, [ids[n] for n in names])
        return {label(plan.operators[i]) for i in got}

    # lose left: left, downstream join and out, and join's container-local upstream pre (no
    # buffer server between pre and join to replay from). right keeps running.
    assert affected("left") == {"left", "join", "out", "pre"}
    # lose right: right, pre, join, out
    assert affected("right") == {"right", "pre", "join", "out"}
    # lose the container of pre and join
    assert affected("pre", "join") == {"pre", "join", "out"}
    # lose the sink: only itself
    assert affected("out") == {"out"}

    linear = plan_of(LINEAR)
    lin = ops_by_label(linear)
    assert affected_operators(linear, [lin["up"].id]) == {lin["up"].id, lin["out"].id}


# ================================================================ end to end: MasterState

def test_heartbeats_move_the_committed_window_once_every_operator_has_a_checkpoint():
    #   src(c1) ──▶ up(c2) ──▶ out(c3)
    # heartbeat:        1           2           3           4           5           6
    #   c1 src        ● 60 cw65                           ● 120 cw125
    #   c2 up                     ● 60 cw65                           ● 120 cw125
    #   c3 out                                ● 60 cw65                           ● 120 cw125
    #   committed     0           0           60          60          60          120
    run = Run(LINEAR)
    run.deploy()
    steps = [("src", 65, 60, 0), ("up", 65, 60, 0), ("out", 65, 60, 60),
             ("src", 125, 120, 60), ("up", 125, 120, 60), ("out", 125, 120, 120)]
    for name, cw, saved, expect in steps:
        response, _ = run.heartbeat(run.cid(name), run.report(name, cw, saved))
        assert run.state.committed == run.w(expect), (name, cw)
        assert response.committed_window_id == run.w(expect)
        assert run.op(name).current_window == run.w(cw)
    info = run.state.info()
    assert info["committed_window"] == run.w(120)
    assert info["recovery_checkpoints"] == {"src": run.w(120), "up": run.w(120), "out": run.w(120)}


def test_checkpoints_arriving_out_of_step_and_out_of_order():
    #   src(c1) ──▶ up(c2) ──▶ out(c3)
    # heartbeat:        1                    2              3                 4
    #   c3 out        ● 120, 60 (unordered)
    #   c2 up                              ● 60
    #   c1 src                                            ● 60, 120
    #   c2 up                                                               ● 120
    #   recovery      all 0                all 0          all 60            all 120
    #   committed     0                    0              60                120
    #   deleted       —                    —              —                 src 60, up 60, out 60
    run = Run(LINEAR)
    run.deploy()
    _, instructions = run.heartbeat(run.cid("out"), run.report("out", 125, 120, 60))
    # sorted on arrival; kept: nothing upstream has a checkpoint yet, so out may restart from any
    assert run.op("out").checkpoints == [run.w(60), run.w(120)]
    assert deleted(instructions) == {}
    assert run.state.committed == run.base
    assert run.rec("out") == 0 and run.rec("up") == 0

    run.heartbeat(run.cid("up"), run.report("up", 65, 60))
    assert run.state.committed == run.base  # src has no checkpoint yet

    _, instructions = run.heartbeat(run.cid("src"), run.report("src", 125, 60, 120))
    assert (run.rec("src"), run.rec("up"), run.rec("out")) == (60, 60, 60)
    assert run.state.committed == run.w(60)
    assert deleted(instructions) == {}

    _, instructions = run.heartbeat(run.cid("up"), run.report("up", 125, 120))
    assert (run.rec("src"), run.rec("up"), run.rec("out")) == (120, 120, 120)
    assert run.state.committed == run.w(120)
    assert deleted(instructions) == {run.id(n): (run.w(60),) for n in ("src", "up", "out")}


def test_committed_window_never_goes_backward():
    #   src(c1) ──▶ up(c2) ──▶ out(c3)
    # window k:     60   120
    #   all         ●────●           committed 120
    # then: a stale report from src (checkpoint 60 again, cw 65 < 125)  → ignored
    # then: c2 is lost, up redeployed from 120 in a new container       → committed stays 120
    # then: the new up reports cw 121 (re-running from its checkpoint)  → committed stays 120
    run = Run(LINEAR)
    run.deploy()
    for k in (60, 120):
        for name in ("src", "up", "out"):
            run.heartbeat(run.cid(name), run.report(name, k + 5, k))
    assert run.state.committed == run.w(120)

    run.heartbeat(run.cid("src"), run.report("src", 65, 60))
    assert run.op("src").checkpoints == [run.w(120)]
    assert run.op("src").current_window == run.w(125)
    assert run.state.committed == run.w(120)

    instructions = run.exited(run.cid("up"))
    (launch,) = [i for i in instructions if isinstance(i, LaunchContainer)]
    assert run.state.committed == run.w(120)
    response, _ = run.heartbeat(launch.container_id)
    assert [(d.name, d.checkpoint.window_id) for d in response.deploy_request] == [("up", run.w(120))]
    run.heartbeat(launch.container_id, run.report("up", 121))
    run.heartbeat(run.cid("out"), run.report("out", 126))
    run.heartbeat(run.cid("src"), run.report("src", 126))
    assert run.state.committed == run.w(120)
    assert run.committed_seen == sorted(run.committed_seen)
    assert run.committed_seen[-1] == run.w(120)


def test_checkpoints_older_than_the_recovery_checkpoint_are_deleted_once():
    #   src(c1) ──▶ up(c2) ──▶ out(c3)
    # window k:     60   120   180
    #   src         ●────●─────●
    #   up          ●────●─────●
    #   out         ●──────────●          (out skips 120)
    # heartbeat     reports                         recovery (all)   DeleteCheckpoints
    #   1-3         all ● 60                        60               —
    #   4-5         src ● 120, up ● 120             60 (out at 60)   —
    #   6           out ● 180                       60 (common {60}) —
    #   7           src ● 180                       60               —
    #   8           up ● 180                        180              src 60 120, up 60 120, out 60
    run = Run(LINEAR)
    run.deploy()
    for name in ("src", "up", "out"):
        _, instructions = run.heartbeat(run.cid(name), run.report(name, 65, 60))
        assert deleted(instructions) == {}
    for name in ("src", "up"):
        _, instructions = run.heartbeat(run.cid(name), run.report(name, 125, 120))
        assert deleted(instructions) == {}
    assert run.state.committed == run.w(60)

    _, instructions = run.heartbeat(run.cid("out"), run.report("out", 185, 180))
    assert (run.rec("src"), run.rec("up"), run.rec("out")) == (60, 60, 60)
    assert deleted(instructions) == {}
    _, instructions = run.heartbeat(run.cid("src"), run.report("src", 185, 180))
    assert deleted(instructions) == {}  # up has no 180 yet
    _, instructions = run.heartbeat(run.cid("up"), run.report("up", 185, 180))
    assert deleted(instructions) == {run.id("src"): (run.w(60), run.w(120)),
                                     run.id("up"): (run.w(60), run.w(120)), run.id("out"): (run.w(60),)}
    assert run.state.committed == run.w(180)
    # nothing at or after a recovery checkpoint is ever deleted
    for op in run.state.plan.operators.values():
        assert op.checkpoints == [op.recovery_checkpoint]
    _, instructions = run.heartbeat(run.cid("up"), run.report("up", 186))
    assert deleted(instructions) == {}  # once


def test_lost_container_redeploys_the_affected_set_from_recovery_checkpoints():
    #   src(c1) ──▶ up(c2) ──▶ out(c3)
    # window k:     60   120
    #   src         ●────●
    #   up          ●                    (lags)
    #   out         ●────●
    # recovery: all 60 (common); committed 60
    # c2 exits → affected {up, out}: up to a new container c4, out redeployed in place in c3.
    # c4's first heartbeat: deploy up from 60.  c3's next heartbeat: undeploy out, deploy from 60.
    run = Run(LINEAR)
    run.deploy()
    run.heartbeat(run.cid("src"), run.report("src", 125, 60, 120))
    run.heartbeat(run.cid("up"), run.report("up", 65, 60))
    run.heartbeat(run.cid("out"), run.report("out", 125, 60, 120))
    assert (run.rec("src"), run.rec("up"), run.rec("out")) == (60, 60, 60)
    assert run.state.committed == run.w(60)
    c1, c2, c3 = run.cid("src"), run.cid("up"), run.cid("out")

    instructions = run.exited(c2)
    (launch,) = [i for i in instructions if isinstance(i, LaunchContainer)]
    c4 = launch.container_id
    assert c4 not in (c1, c2, c3)
    assert run.cid("up") == c4 and run.cid("out") == c3 and run.cid("src") == c1
    assert run.op("up").state == OperatorState.PENDING_DEPLOY
    assert run.op("out").state == OperatorState.PENDING_DEPLOY
    assert run.op("src").state == OperatorState.ACTIVE  # upstream keeps running
    assert run.state.plan.containers[c2].state == "LOST"

    # the lost container is told to shut down if it ever calls again
    response, _ = run.heartbeat(c2)
    assert response.shutdown and not response.deploy_request

    response, _ = run.heartbeat(c4)
    (up,) = response.deploy_request
    assert (up.id, up.checkpoint.window_id) == (run.id("up"), run.w(60))
    (inp,) = up.inputs
    assert (inp.source_node_id, inp.buffer_server_port) == (run.id("src"), 40001)
    assert run.op("up").state == OperatorState.DEPLOYING

    response, _ = run.heartbeat(c3)
    assert list(response.undeploy_request) == [run.id("out")]
    (out,) = response.deploy_request
    assert (out.id, out.checkpoint.window_id) == (run.id("out"), run.w(60))
    assert run.state.committed == run.w(60)

    run.heartbeat(c4, run.report("up", 61))
    run.heartbeat(c3, run.report("out", 61))
    assert {op.state for op in run.state.plan.operators.values()} == {OperatorState.ACTIVE}
    assert run.state.info()["restarts"] == {"up": 1}


def test_in_place_redeploy_ignores_reports_from_the_replaced_incarnation():
    # Same chain. c2 is lost; out (c3) is to be redeployed in place, but c3 heartbeats
    # before the replacement of c2 runs, still reporting the old out ACTIVE (it has not
    # yet received the undeploy). The report must not count as the new incarnation:
    # otherwise out looks ACTIVE, is missing from c3's next heartbeat (undeployed) and is
    # removed from the plan as "missing from heartbeat".
    # heartbeat:   c3 (old out ACTIVE cw 130)  c3 (nothing)  c4 (deploy up)  c3 (deploy out)
    run = Run(LINEAR)
    run.deploy()
    for name in ("src", "up", "out"):
        run.heartbeat(run.cid(name), run.report(name, 65, 60))
    c3 = run.cid("out")
    (launch,) = [i for i in run.exited(run.cid("up")) if isinstance(i, LaunchContainer)]

    response, _ = run.heartbeat(c3, run.report("out", 130))
    assert list(response.undeploy_request) == [run.id("out")]
    assert not response.deploy_request  # up is not running yet: nothing to subscribe to
    response, _ = run.heartbeat(c3)
    assert "out" in {label(op) for op in run.state.plan.operators.values()}
    assert not run.state.removed
    assert not response.shutdown

    response, _ = run.heartbeat(launch.container_id)
    assert [d.checkpoint.window_id for d in response.deploy_request] == [run.w(60)]
    response, _ = run.heartbeat(c3)
    assert [(d.name, d.checkpoint.window_id) for d in response.deploy_request] == [("out", run.w(60))]


def test_lost_container_also_redeploys_container_local_upstream_of_its_downstream():
    #   left(c1) ──────────────────────▶ join.left
    #   right(c2) ──▶ pre ═CONTAINER_LOCAL═▶ join.right      (pre + join in c3)
    #                                     join ──▶ out(c4)
    # window k:     60   120   180
    #   left        ●                               recovery 60
    #   right       ●────●                                    60
    #   pre         ●────●               ┐ group            60
    #   join        ●────●               ┘                    60
    #   out         ●────●─────●                              60
    # all share the newest checkpoint all of them have: left's 60.
    # c1 exits → affected {left, join, out, pre}; right untouched.
    # left → new c5 (deploy from 60); pre, join in place in c3 (undeploy, reset their
    # publishers, deploy from 60: join takes every window left replays); out in place in c4 (from 60).
    run = Run(LOCAL_FAN_IN)
    run.deploy()
    c1, c2, c3, c4 = run.cid("left"), run.cid("right"), run.cid("pre"), run.cid("out")
    assert run.cid("join") == c3
    run.heartbeat(c1, run.report("left", 65, 60))
    run.heartbeat(c2, run.report("right", 125, 60, 120))
    run.heartbeat(c3, run.report("pre", 125, 60, 120), run.report("join", 125, 60, 120))
    run.heartbeat(c4, run.report("out", 185, 60, 120, 180))
    assert {n: run.rec(n) for n in ("left", "right", "pre", "join", "out")} == \
        {"left": 60, "right": 60, "pre": 60, "join": 60, "out": 60}
    assert run.state.committed == run.w(60)

    (launch,) = [i for i in run.exited(c1) if isinstance(i, LaunchContainer)]
    c5 = launch.container_id
    states = {label(op): op.state for op in run.state.plan.operators.values()}
    assert states == {"left": OperatorState.PENDING_DEPLOY, "right": OperatorState.ACTIVE,
                      "pre": OperatorState.PENDING_DEPLOY, "join": OperatorState.PENDING_DEPLOY,
                      "out": OperatorState.PENDING_DEPLOY}

    response, _ = run.heartbeat(c2, run.report("right", 130))
    assert not response.undeploy_request and not response.deploy_request and not response.reset_publishers

    response, _ = run.heartbeat(c5)
    assert [(d.name, d.checkpoint.window_id) for d in response.deploy_request] == [("left", run.w(60))]

    response, _ = run.heartbeat(c3)
    assert sorted(response.undeploy_request) == sorted([run.id("pre"), run.id("join")])
    assert sorted(response.reset_publishers) == sorted([f"{run.id('pre')}.output", f"{run.id('join')}.output"])
    assert sorted((d.name, d.checkpoint.window_id) for d in response.deploy_request) == \
        [("join", run.w(60)), ("pre", run.w(60))]

    response, _ = run.heartbeat(c4)
    assert list(response.undeploy_request) == [run.id("out")]
    assert [(d.name, d.checkpoint.window_id) for d in response.deploy_request] == [("out", run.w(60))]
    assert run.state.committed == run.w(60)


def test_container_local_group_moves_together_end_to_end():
    #   left(c1) ──▶ join.left;  right(c2) ──▶ pre ═CONTAINER_LOCAL═▶ join.right;  join ──▶ out(c4)
    # window k:     60   120   180
    # step 1: everyone ● 60                          → committed 60
    # step 2: left, right, out ● 120, 180; join ● 120 but pre only at 60
    #         common {60} → 60 for all (join's 120 is not usable); committed 60
    # step 3: pre ● 120 → 120 for all; committed 120
    run = Run(LOCAL_FAN_IN)
    run.deploy()
    c1, c2, c3, c4 = run.cid("left"), run.cid("right"), run.cid("pre"), run.cid("out")
    run.heartbeat(c1, run.report("left", 65, 60))
    run.heartbeat(c2, run.report("right", 65, 60))
    run.heartbeat(c3, run.report("pre", 65, 60), run.report("join", 65, 60))
    run.heartbeat(c4, run.report("out", 65, 60))
    assert run.state.committed == run.w(60)

    run.heartbeat(c1, run.report("left", 185, 120, 180))
    run.heartbeat(c2, run.report("right", 185, 120, 180))
    run.heartbeat(c4, run.report("out", 185, 120, 180))
    run.heartbeat(c3, run.report("pre", 125), run.report("join", 125, 120))
    assert {n: run.rec(n) for n in ("left", "right", "pre", "join", "out")} == \
        {"left": 60, "right": 60, "pre": 60, "join": 60, "out": 60}
    assert run.state.committed == run.w(60)

    _, instructions = run.heartbeat(c3, run.report("pre", 125, 120), run.report("join", 125))
    assert {n: run.rec(n) for n in ("left", "right", "pre", "join", "out")} == \
        {"left": 120, "right": 120, "pre": 120, "join": 120, "out": 120}
    assert run.state.committed == run.w(120)
    assert deleted(instructions) == {run.id(n): (run.w(60),) for n in ("left", "right", "pre", "join", "out")}
