"""Safe removal of shut-down operators (DESIGN: "Shutdown and safe partition removal").

Pure state-machine tests of :class:`stram.master.core.state.MasterState` driven through
``heartbeat`` with hand-written ``ContainerHeartbeat`` messages; no processes,
no sockets; ``validate_state()`` after every step. Each test draws its timeline
in a comment: ``k`` is the window id ``base + k`` (``base`` = the initial
window), ``●`` a saved checkpoint, ``|`` the window an operator shut down at,
``cw`` the last window an operator reported finished.

The rule under test: an operator that shut down at window ``w`` is parked in
``shutdown_operators[w]`` and removed in the first heartbeat cycle in which
``w ≤ committed`` and every downstream operator has reached ``w``; its unifier
goes with its last partition, a downstream operator left without inputs goes
too when it has shut down itself and its window is committed, containers left
empty are released, and the application succeeds when no operator is left.
"""

from __future__ import annotations

import sys
from pathlib import Path

import pytest


from statekit import StateRun  # noqa: E402

from stram.master.core.plan import OperatorState  # noqa: E402
from stram.master.core.state import Finish, KillContainer, LaunchContainer, UnknownContainer  # noqa: E402

TOKEN = "rule-token"

# ---------------------------------------------------------------- specs

#   src(c1) ──▶ up(c2) ──▶ out(c3)
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

#   src(c1) ──▶ out(c2)
TWO = """
name: two
operators:
  src: {class: spec_fixture_ops:Source}
  out: {class: spec_fixture_ops:Sink}
streams:
  a: {from: src.output, to: [out.input]}
"""

#   src[0](c1) ─┐
#               ├─▶ unifier ═THREAD_LOCAL═▶ up ──▶ out(c4)       (unifier + up in c3)
#   src[1](c2) ─┘
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

#   left(c1) ──▶ join.left
#   right(c2) ──▶ join.right       join(c3) ──▶ out(c4)
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

#   src ═CONTAINER_LOCAL═▶ out          (one container)
LOCAL_SINK = """
name: local-sink
operators:
  src: {class: spec_fixture_ops:Source}
  out: {class: spec_fixture_ops:Sink}
streams:
  a: {from: src.output, to: [out.input], locality: CONTAINER_LOCAL}
"""

#   src ═CONTAINER_LOCAL═▶ join.left    (src + join in c1)
#   src2(c2) ─────────────▶ join.right
LOCAL_JOIN = """
name: local-join
operators:
  src: {class: spec_fixture_ops:Source}
  src2: {class: spec_fixture_ops:Source}
  join: {class: spec_fixture_ops:Join}
streams:
  a: {from: src.output, to: [join.left], locality: CONTAINER_LOCAL}
  b: {from: src2.output, to: [join.right]}
"""


# ---------------------------------------------------------------- harness

class Run(StateRun):
    """The removal tests' run: a container that exits on its own exits cleanly (code 0)."""

    def __init__(self, text: str) -> None:
        super().__init__(text, "app-removal", TOKEN)

    def exited(self, container_id: str, code: int = 0):
        return super().exited(container_id, code)


def partition_zero_removed(run: Run) -> None:
    """PARTITIONED: src[0] shuts down at 70 and is removed once committed reaches 70.

    window k:            60    70        120
      src[0]  (c1)       ●─────●|                  shuts down at 70 (final checkpoint 70)
      src[1]  (c2)       ●───────────────●──▶
      unifier+up (c3)    ●───────────────●──▶      (one thread: one checkpoint)
      out     (c4)       ●───────────────●──▶
    step  heartbeat                        committed   src[0]
     1-4  everyone ● 60, cw 65             60          running
     5    c1: src[0] SHUTDOWN at 70, ● 70  60          parked at 70 (70 > committed)
     6    c1: (src[0] no longer reported)  60          still parked: not "missing"
     7    c2: src[1] ● 120                 60          parked
     8    c3: unifier, up ● 120            60          parked (out still at 60)
     9    c4: out ● 120                    70          removed in this very cycle
    """
    run.deploy()
    run.everyone(65, 60)
    assert run.state.committed == run.w(60)

    run.heartbeat(run.cid("src[0]"), run.ended("src[0]", 70, 70))
    assert run.op("src[0]").state == OperatorState.SHUTDOWN
    assert run.parked() == {70: {"src[0]"}}
    run.heartbeat(run.cid("src[0]"))
    assert run.parked() == {70: {"src[0]"}}
    run.heartbeat(run.cid("src[1]"), run.report("src[1]", 125, 120))
    run.heartbeat(run.cid("up"), run.report("unifier", 125, 120), run.report("up", 125, 120))
    assert run.state.committed == run.w(60)
    assert run.parked() == {70: {"src[0]"}}
    assert "src[0]" in run.alive()

    response, _ = run.heartbeat(run.cid("out"), run.report("out", 125, 120))
    assert run.state.committed == run.w(70)
    assert "src[0]" not in run.alive()
    assert run.parked() == {}
    assert response.committed_window_id == run.w(70)


#   src[0](c1) ─┐
#               ├─▶ reader (c3; reads both partitions' buffer servers itself)
#   src[1](c2) ─┘
SELF_READER = """
name: self-reader
operators:
  src: {class: spec_fixture_ops:Source, partitions: 2}
  reader: {class: spec_fixture_ops:SelfReader}
streams:
  a: {from: src.output, to: [reader.input]}
"""


# ================================================================ the rule

def test_partition_is_removed_in_the_first_cycle_its_window_is_committed():
    # timeline: see partition_zero_removed
    run = Run(PARTITIONED)
    partition_zero_removed(run)
    info = run.state.info()
    (entry,) = info["removed"]
    assert (entry["label"], entry["window"], entry["committed"]) == ("src[0]", run.w(70), run.w(70))
    assert info["shutdown_operators"] == {}
    assert info["operators"] == 4
    # the unifier keeps merging the partition that is left
    assert run.op("unifier").source_ids == {run.id("src[1]")}
    # the container of src[0] gets the undeploy, and (now empty) is released
    response, _ = run.heartbeat(run.cid("src[0]"))
    assert list(response.undeploy_request) == [run.id("src[0]")]
    assert response.shutdown
    # the others carry on
    for names in (["src[1]"], ["unifier", "up"], ["out"]):
        response, _ = run.heartbeat(run.cid(names[0]), *(run.report(n, 126) for n in names))
        assert not response.shutdown and not response.undeploy_request
    assert run.alive() == {"src[1]", "unifier", "up", "out"}


def test_partition_waits_until_every_downstream_operator_reached_its_window():
    #   src(c1) ──▶ out(c2)        out declares windows durable ahead of finishing them
    #                              (a self-checkpointing output, e.g. an external transaction)
    # window k:     60   65   70   75   120
    #   src         ●─────────●|                shuts down at 70 (final checkpoint 70)
    #   out         ●────cw65──────────●        reports checkpoint 120 while at window 65
    # committed = min(src 70, out 120) = 70, but out is still before 70 → src stays parked;
    # out reaches 75 → src removed in that cycle. out, left without inputs, stays (ACTIVE).
    run = Run(TWO)
    run.deploy()
    run.everyone(65, 60)
    run.heartbeat(run.cid("src"), run.ended("src", 70, 70))
    assert run.parked() == {70: {"src"}}
    assert run.state.committed == run.w(60)

    run.heartbeat(run.cid("out"), run.report("out", 65, 120))
    assert run.state.committed == run.w(70)
    assert run.parked() == {70: {"src"}}  # committed, but downstream before 70
    assert "src" in run.alive()

    run.heartbeat(run.cid("out"), run.report("out", 69))
    assert run.parked() == {70: {"src"}}

    run.heartbeat(run.cid("out"), run.report("out", 75))
    assert run.alive() == {"out"}
    assert run.removed() == ["src"]
    assert run.op("out").inputs == []
    assert run.op("out").state == OperatorState.ACTIVE


def test_unifier_goes_with_the_last_partition_then_the_rest_as_each_shuts_down():
    # continues partition_zero_removed:
    # window k:          70     120      150
    #   src[0]  (c1)     |  (removed)
    #   src[1]  (c2)     ───────●────────●|         shuts down at 150
    #   unifier (c3)     ───────●────────● cw150    ACTIVE: END_STREAM not seen yet
    #   up      (c3)     ───────●────────● cw150 ... then SHUTDOWN at 150
    #   out     (c4)     ───────●────────● cw150 ... then SHUTDOWN at 150
    # step  heartbeat                                 committed  removed this cycle
    #  1    c2: src[1] SHUTDOWN at 150 ● 150          120        —
    #  2    c3: unifier, up ● 150 cw 150              120        —   (out still at 120)
    #  3    c4: out ● 150 cw 150                      150        src[1], and the unifier (no input left)
    #  4    c3: up SHUTDOWN at 150                    150        up (out is at 150)
    #  5    c4: out SHUTDOWN at 150                   150        out → no operator left: SUCCEEDED
    run = Run(PARTITIONED)
    partition_zero_removed(run)

    run.heartbeat(run.cid("src[1]"), run.ended("src[1]", 150, 150))
    assert run.parked() == {150: {"src[1]"}}
    run.heartbeat(run.cid("up"), run.report("unifier", 150, 150), run.report("up", 150, 150))
    assert run.state.committed == run.w(120)
    assert run.alive() == {"src[1]", "unifier", "up", "out"}

    run.heartbeat(run.cid("out"), run.report("out", 150, 150))
    assert run.state.committed == run.w(150)
    assert run.alive() == {"up", "out"}
    assert run.removed() == ["src[0]", "src[1]", "src.output.unifier"]
    assert run.op("up").inputs == [] and run.op("up").state == OperatorState.ACTIVE

    response, _ = run.heartbeat(run.cid("src[1]"))
    assert list(response.undeploy_request) == [run.id("src[1]")] and response.shutdown

    response, _ = run.heartbeat(run.cid("up"), run.ended("up", 150))
    assert run.alive() == {"out"}
    assert sorted(response.undeploy_request) == sorted([run.id("unifier"), run.id("up")])
    assert response.shutdown  # c3 is empty now

    response, _ = run.heartbeat(run.cid("out"), run.ended("out", 150))
    assert run.alive() == set()
    assert run.state.state == "SUCCEEDED"
    assert response.shutdown


def test_downstream_left_without_inputs_goes_too_when_shut_down_and_committed():
    #   left(c1) ──▶ join.left;  right(c2) ──▶ join.right;  join(c3) ──▶ out(c4)
    # window k:     60   70    120   130   180
    #   left        ●────●|                           shuts down at 70
    #   right       ●──────────●─────●|               shuts down at 130
    #   join        ●──────────●─────●|               ends with its last input at 130
    #   out         ●──────────●───────────●          keeps running (cw 185)
    # committed 70  → left removed; join keeps its input from right.
    # committed 130 → right removed; join, without inputs, shut down at 130 ≤ committed
    #                 → removed in the same cycle. out stays (ACTIVE, no inputs).
    run = Run(FAN_IN)
    run.deploy()
    run.everyone(65, 60)
    run.heartbeat(run.cid("left"), run.ended("left", 70, 70))
    run.heartbeat(run.cid("right"), run.report("right", 125, 120))
    run.heartbeat(run.cid("join"), run.report("join", 125, 120))
    assert run.state.committed == run.w(60)
    run.heartbeat(run.cid("out"), run.report("out", 125, 120))
    assert run.state.committed == run.w(70)
    assert run.alive() == {"right", "join", "out"}
    assert run.op("join").source_ids == {run.id("right")}

    run.heartbeat(run.cid("right"), run.ended("right", 130, 130))
    run.heartbeat(run.cid("join"), run.ended("join", 130, 130))
    assert run.state.committed == run.w(120)
    assert run.parked() == {130: {"right", "join"}}

    run.heartbeat(run.cid("out"), run.report("out", 185, 180))
    assert run.state.committed == run.w(130)
    assert run.alive() == {"out"}
    assert run.removed() == ["left", "right", "join"]
    assert run.parked() == {}
    assert run.op("out").inputs == [] and run.op("out").state == OperatorState.ACTIVE
    assert run.state.state == "RUNNING"


def test_downstream_left_without_inputs_waits_for_its_own_shutdown():
    #   src(c1) ──▶ up(c2) ──▶ out(c3)        checkpoints every 10 windows
    # window k:     60   70
    #   src         ●────●|           shuts down at 70 (final checkpoint 70)
    #   up          ●────● cw70       finished 70, its END_STREAM not reported yet: ACTIVE
    #   out         ●────● cw70
    # committed 70 → src removed; up has no inputs but is ACTIVE → stays.
    # up reports SHUTDOWN at 70 → removed at once (committed 70, out at 70); then out likewise.
    run = Run(LINEAR)
    run.deploy()
    run.everyone(65, 60)
    run.heartbeat(run.cid("src"), run.ended("src", 70, 70))
    run.heartbeat(run.cid("up"), run.report("up", 70, 70))
    run.heartbeat(run.cid("out"), run.report("out", 70, 70))
    assert run.state.committed == run.w(70)
    assert run.alive() == {"up", "out"}
    assert run.op("up").inputs == [] and run.op("up").state == OperatorState.ACTIVE

    run.heartbeat(run.cid("up"), run.report("up", 70))
    assert run.alive() == {"up", "out"}  # still running, still in the plan

    response, _ = run.heartbeat(run.cid("up"), run.ended("up", 70))
    assert run.alive() == {"out"}
    assert list(response.undeploy_request) == [run.id("up")] and response.shutdown
    run.heartbeat(run.cid("out"), run.ended("out", 70))
    assert run.alive() == set() and run.state.state == "SUCCEEDED"


def test_empty_container_is_released_and_not_recovered_when_it_exits():
    # after partition_zero_removed, c1 holds nothing:
    #   c1 heartbeat → undeploy src[0] + shutdown (RELEASED); again → shutdown;
    #   c1 exits     → no replacement, no kill, no restart counted.
    run = Run(PARTITIONED)
    partition_zero_removed(run)
    c1 = run.cid("src[0]")
    assert run.state.info()["containers"] == 4

    response, _ = run.heartbeat(c1)
    assert list(response.undeploy_request) == [run.id("src[0]")] and response.shutdown
    assert run.state.plan.containers[c1].state == "RELEASED"
    assert run.state.info()["containers"] == 3
    response, _ = run.heartbeat(c1)
    assert response.shutdown and not response.undeploy_request and not response.deploy_request

    instructions = run.exited(c1)
    assert not [i for i in instructions if isinstance(i, (LaunchContainer, KillContainer, Finish))]
    assert run.state.plan.containers[c1].state == "RELEASED"
    assert run.state.info()["restarts"] == {}
    assert len(run.state.plan.containers) == 4  # no replacement was planned
    with pytest.raises(UnknownContainer):
        run.state.init_context(c1)


def test_operator_reported_where_the_plan_does_not_place_it_gets_an_undeploy_request():
    #   src(c1) ──▶ up(c2) ──▶ out(c3)
    # c2 reports up (its own), src (planned in c1) and operator 99 (unknown)
    # → c2 is told to undeploy src and 99; the plan and src's bookkeeping are untouched.
    run = Run(LINEAR)
    run.deploy()
    run.everyone(65, 60)
    response, _ = run.heartbeat(run.cid("up"), run.report("up", 70), run.report("src", 300, 240),
                                run.report(99, 300, 240))
    assert sorted(response.undeploy_request) == sorted([run.id("src"), 99])
    assert run.op("up").current_window == run.w(70)
    src = run.op("src")
    assert (src.container, src.state) == (run.cid("src"), OperatorState.ACTIVE)
    assert src.checkpoints == [run.w(60)] and src.current_window == run.w(65)
    assert run.alive() == {"src", "up", "out"} and run.removed() == []
    assert not response.shutdown
    # the container that does hold src is not told to undeploy it
    response, _ = run.heartbeat(run.cid("src"), run.report("src", 70))
    assert not response.undeploy_request


def test_active_operator_missing_from_its_containers_heartbeat_is_a_failure_recovered():
    #   src(c1) ──▶ up(c2) ──▶ out(c3)
    # 1. deployed but not yet reported (DEPLOYING): omitted from a heartbeat → kept
    # 2. ACTIVE, then omitted from c2's heartbeat: it did not shut down (that is reported), so it
    #    stays in the plan, counts a failure and is redeployed from its checkpoint in a new
    #    container (c2 killed); the application goes on
    run = Run(LINEAR)
    c1 = run.cid("src")
    response, _ = run.heartbeat(c1)
    assert [d.id for d in response.deploy_request] == [run.id("src")]
    run.heartbeat(c1)  # the agent has not started it yet
    assert run.op("src").state == OperatorState.DEPLOYING and run.removed() == []

    run.deploy()
    run.everyone(65, 60)
    c2 = run.cid("up")
    run.heartbeat(c2)
    assert run.alive() == {"src", "up", "out"} and run.state.info()["removed"] == []
    up = run.op("up")
    assert up.state == OperatorState.PENDING_DEPLOY and up.restarts == 1 and up.container != c2
    assert run.state.plan.containers[c2].state == "LOST"
    assert run.state.info()["failures"]["up"]["count"] == 1
    assert [i.source_id for i in run.op("out").inputs] == [run.id("up")]
    assert run.state.state == "RUNNING"


def test_application_succeeds_when_every_operator_is_gone():
    #   src(c1) ──▶ up(c2) ──▶ out(c3)
    # window k:     60   70
    #   src         ●────●|
    #   up          ●────●|
    #   out         ●────●|
    # c1: src SHUTDOWN → parked (committed 60); c2: up SHUTDOWN → parked;
    # c3: out SHUTDOWN → committed 70 → src, up, out all removed in this cycle → SUCCEEDED.
    # Every container is told to shut down; Finish once the last one has exited.
    run = Run(LINEAR)
    run.deploy()
    run.everyone(65, 60)
    run.heartbeat(run.cid("src"), run.ended("src", 70, 70))
    run.heartbeat(run.cid("up"), run.ended("up", 70, 70))
    assert run.parked() == {70: {"src", "up"}}
    assert run.state.state == "RUNNING"

    response, instructions = run.heartbeat(run.cid("out"), run.ended("out", 70, 70))
    assert run.state.committed == run.w(70)
    assert run.alive() == set()
    assert run.removed() == ["src", "up", "out"]
    assert run.state.state == "SUCCEEDED"
    assert run.state.info()["state"] == "SUCCEEDED"
    assert response.shutdown
    assert not [i for i in instructions if isinstance(i, Finish)]  # containers still running

    for name in ("src", "up"):
        response, _ = run.heartbeat(run.cid(name))
        assert response.shutdown
    assert run.exited(run.cid("src")) == []
    assert run.exited(run.cid("up")) == []
    (finish,) = [i for i in run.exited(run.cid("out")) if isinstance(i, Finish)]
    assert finish.state == "SUCCEEDED"


# ================================================================ known bugs

def test_container_local_sink_that_ends_alone_does_not_freeze_the_committed_window():
    #   src ═CONTAINER_LOCAL═▶ out        (one container)
    # window k:     60   70   120   180
    #   src         ●─────────●─────●──▶     keeps running
    #   out         ●────●|                  ShutdownException at 70: final checkpoint 70
    # out's state is final from 70 on, so out is removable once committed ≥ 70, and after
    # that the committed window follows src (120, 180).
    # Bug: common checkpoints of {src, out} stay {60}: committed is stuck at 60.
    run = Run(LOCAL_SINK)
    run.deploy()
    c1 = run.cid("src")
    run.heartbeat(c1, run.report("src", 65, 60), run.report("out", 65, 60))
    assert run.state.committed == run.w(60)
    run.heartbeat(c1, run.report("src", 75), run.ended("out", 70, 70))
    run.heartbeat(c1, run.report("src", 125, 120))
    run.heartbeat(c1, run.report("src", 185, 180))
    run.heartbeat(c1, run.report("src", 190))
    assert "out" not in run.alive()
    assert run.state.committed >= run.w(120)


def test_join_whose_container_local_input_ends_first_still_succeeds():
    #   src ═CONTAINER_LOCAL═▶ join.left     (src + join in c1)
    #   src2(c2) ─────────────▶ join.right
    # window k:     60   70   120   180  200
    #   src         ●────●|
    #   src2        ●─────────●─────●────●|
    #   join        ●─────────●─────●────●|
    # expected: src removed once committed ≥ 70; src2 and join at 200; SUCCEEDED.
    run = Run(LOCAL_JOIN)
    run.deploy()
    c1, c2 = run.cid("src"), run.cid("src2")
    assert run.cid("join") == c1
    run.heartbeat(c2, run.report("src2", 65, 60))
    run.heartbeat(c1, run.report("src", 65, 60), run.report("join", 65, 60))
    assert run.state.committed == run.w(60)
    run.heartbeat(c1, run.ended("src", 70, 70), run.report("join", 75))
    for k in (120, 180):
        run.heartbeat(c2, run.report("src2", k + 5, k))
        run.heartbeat(c1, run.report("join", k + 5, k))
    run.heartbeat(c2, run.ended("src2", 200, 200))
    run.heartbeat(c1, run.ended("join", 200, 200))
    run.heartbeat(c1)
    run.heartbeat(c2)
    assert "src" not in run.alive()
    assert run.state.state == "SUCCEEDED"


def test_a_reader_of_its_own_inputs_is_told_when_an_upstream_ended():
    """The master names an ended upstream in the heartbeat response (never "absent means ended").

    window k:            60    70        120
      src[0]  (c1)       ●─────●|                  shuts down at 70, removed once committed
      src[1]  (c2)       ●───────────────●──▶
      reader  (c3)       ●───────────────●──▶      told: src[0] ended at 70
    """
    run = Run(SELF_READER)
    assert not [op for op in run.state.plan.operators.values() if op.kind == "UNIFIER"]
    run.deploy()
    run.everyone(65, 60)
    response, _ = run.heartbeat(run.cid("reader"), run.report("reader", 65, 60))
    assert dict(response.upstream_windows) == {run.id("src[0]"): run.w(65), run.id("src[1]"): run.w(65)}
    assert dict(response.ended_upstreams) == {}

    run.heartbeat(run.cid("src[0]"), run.ended("src[0]", 70, 70))
    response, _ = run.heartbeat(run.cid("reader"), run.report("reader", 65, 60))
    assert run.parked() == {70: {"src[0]"}}
    assert dict(response.ended_upstreams) == {}  # parked, not removed: not yet said to have ended

    run.heartbeat(run.cid("src[1]"), run.report("src[1]", 125, 120))
    run.heartbeat(run.cid("reader"), run.report("reader", 125, 120))
    assert "src[0]" not in run.alive() and run.state.committed == run.w(70)
    response, _ = run.heartbeat(run.cid("reader"), run.report("reader", 125, 120))
    assert dict(response.upstream_windows) == {run.id("src[1]"): run.w(125)}
    assert dict(response.ended_upstreams) == {run.id("src[0]"): run.w(70)}
