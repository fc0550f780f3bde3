"""Heartbeat pacing (stram.master.core.pacing): the interval stretches while answers queue, and comes back."""

from __future__ import annotations

import collections
import random
import sys
import threading
import time
from pathlib import Path

from stram import wire as proto
from stram.agent.umbilical import Umbilical
from stram.common.secret import container_credential
from stram.master.core.pacing import MIN_SLOW, SLOW_SECONDS, HeartbeatPacer
from stram.master.core.state import (DeleteCheckpoints, Finish, Heartbeat, InitContextRequest, KillContainer,
                                     LaunchContainer, MasterState, Reply, Start)
from stram.master.process.master import Dispatcher
from stram.master.spec import AppSpec
from stram.master.umbilical.server import UmbilicalServicer, create_server



class Clock:
    def __init__(self) -> None:
        self.now = 100.0

    def __call__(self) -> float:
        return self.now


def run_period(pacer: HeartbeatPacer, clock: Clock, answers: list[float]) -> int:
    """One period of ``answers`` (seconds each), the last one after the period ended; the interval then."""
    for seconds in answers[:-1]:
        pacer.observe(seconds)
    clock.now += max(1.0, pacer.interval_ms / 1000) + 0.01
    pacer.observe(answers[-1])
    return pacer.interval_ms


SLOW = SLOW_SECONDS * 4
QUICK = SLOW_SECONDS / 4


def stretch(pacer: HeartbeatPacer, clock: Clock, periods: int) -> int:
    """``periods`` periods of slow answers only; the interval then."""
    for _ in range(periods):
        run_period(pacer, clock, [SLOW] * MIN_SLOW)
    return pacer.interval_ms


def test_slow_answers_stretch_the_interval_by_half_per_period_up_to_its_ceiling():
    clock = Clock()
    pacer = HeartbeatPacer(1000, 6000, clock)
    answers = [SLOW] * MIN_SLOW + [QUICK] * (9 * MIN_SLOW)  # 10% slow: more than the 5% allowed
    seen = [run_period(pacer, clock, answers) for _ in range(7)]
    assert seen == [1500, 2250, 3375, 5062, 6000, 6000, 6000]


def test_answers_none_of_them_slow_bring_it_back_to_the_configured_interval_and_no_lower():
    clock = Clock()
    pacer = HeartbeatPacer(1000, 6000, clock)
    assert stretch(pacer, clock, 5) == 6000
    seen = [run_period(pacer, clock, [SLOW_SECONDS * 0.9] * 500) for _ in range(30)]
    assert seen[0] == 5400 and seen == sorted(seen, reverse=True)
    assert seen[-1] == 1000 and min(seen) == 1000


def test_a_few_slow_answers_hold_it_where_it_is():
    clock = Clock()
    pacer = HeartbeatPacer(1000, 6000, clock)
    assert stretch(pacer, clock, 1) == 1500
    # 2% slow, a garbage collection, not a master behind: neither stretched nor shrunk
    few = [SLOW] * MIN_SLOW + [QUICK] * (49 * MIN_SLOW)
    assert [run_period(pacer, clock, few) for _ in range(5)] == [1500] * 5


def test_a_small_application_whose_few_answers_were_slow_keeps_its_interval():
    clock = Clock()
    pacer = HeartbeatPacer(1000, 10000, clock)
    # a few containers, every answer slow (a loaded machine, say): not a master behind
    assert [run_period(pacer, clock, [SLOW] * (MIN_SLOW - 1)) for _ in range(5)] == [1000] * 5


def test_a_period_lasts_at_least_one_interval():
    clock = Clock()
    pacer = HeartbeatPacer(1000, 30000, clock)
    assert stretch(pacer, clock, 4) == 5062
    clock.now += 4.0  # less than the interval: the period goes on, whatever the answers
    for _ in range(MIN_SLOW):
        pacer.observe(SLOW)
    assert pacer.interval_ms == 5062
    clock.now += 1.1
    pacer.observe(SLOW)
    assert pacer.interval_ms == 7593


def test_the_ceiling_is_the_attribute_and_never_past_a_third_of_the_timeout():
    def attrs(**values):
        table = {"HEARTBEAT_INTERVAL_MILLIS": 1000, "HEARTBEAT_TIMEOUT_MILLIS": 30000,
                 "HEARTBEAT_MAX_INTERVAL_MILLIS": None, **values}
        return table.__getitem__
    assert HeartbeatPacer.for_attributes(attrs()).max_ms == 10000
    assert HeartbeatPacer.for_attributes(attrs(HEARTBEAT_MAX_INTERVAL_MILLIS=4000)).max_ms == 4000
    assert HeartbeatPacer.for_attributes(attrs(HEARTBEAT_MAX_INTERVAL_MILLIS=60000)).max_ms == 10000
    # as the master makes it: from its state's attributes, which must hold this one
    spec = AppSpec.from_yaml(SPEC.replace("{HEARTBEAT_INTERVAL_MILLIS: 1000}",
                                          "{HEARTBEAT_INTERVAL_MILLIS: 1000, HEARTBEAT_MAX_INTERVAL_MILLIS: 2500}"))
    state = MasterState(spec, "app", "file:///tmp/paced", "tok", T0, T0)
    assert HeartbeatPacer.for_attributes(state.attr).max_ms == 2500
    clock = Clock()
    fixed = HeartbeatPacer.for_attributes(attrs(HEARTBEAT_MAX_INTERVAL_MILLIS=1000), clock)
    assert [stretch(fixed, clock, 1) for _ in range(3)] == [1000] * 3


SPEC = """
name: paced
attributes: {HEARTBEAT_INTERVAL_MILLIS: 1000}
operators:
  src: {class: spec_fixture_ops:Source}
  out: {class: spec_fixture_ops:Sink}
streams:
  a: {from: src.output, to: [out.input]}
"""
T0 = 1_700_000_000_000


def test_containers_are_asked_for_the_paced_interval_but_one_being_deployed_for_the_configured_one():
    clock = Clock()
    state = MasterState(AppSpec.from_yaml(SPEC), "app", "file:///tmp/paced", "tok", T0, T0,
                        pacer=HeartbeatPacer(1000, 10000, clock))
    state.handle(Start(T0))
    assert stretch(state.pacer, clock, 3) == 3375
    (cid, *_) = sorted(state.plan.containers)
    (ctx,) = [i.value for i in state.handle(InitContextRequest(cid)) if isinstance(i, Reply)]
    assert ctx.heartbeat_interval_millis == 1000  # not deployed yet: its first heartbeat deploys it

    def beat(now: int, reports=()) -> proto.ContainerHeartbeatResponse:
        hb = proto.ContainerHeartbeat(container_id=cid, buffer_server_host="h", buffer_server_port=1)
        for op_id in reports:
            hb.container_stats.operators.add(node_id=op_id, state=proto.OperatorHeartbeat.ACTIVE)
        (response,) = [i.value for i in state.handle(Heartbeat(hb, now)) if isinstance(i, Reply)]
        return response

    first = beat(T0 + 10)
    assert first.deploy_request and first.heartbeat_interval_millis == 1000  # its report ends the deploy
    later = beat(T0 + 1000, [d.id for d in first.deploy_request])
    assert not later.deploy_request and later.heartbeat_interval_millis == state.pacer.ask_ms(cid, T0 + 1000)
    assert 3375 // 2 <= later.heartbeat_interval_millis < 3375 * 3 // 2  # in its slot
    assert state.info(brief=True)["heartbeat_interval_millis"] == 3375


class Recording:
    def __init__(self) -> None:
        self.seen: list[float] = []

    def observe(self, seconds: float) -> None:
        self.seen.append(seconds)

    @property
    def interval_ms(self) -> int:
        return 1000

    def ask_ms(self, container_id: str, now_ms: int) -> int:
        return 1000


def test_the_server_tells_the_pacer_how_long_each_streamed_heartbeat_took(tmp_path):
    state = MasterState(AppSpec.from_yaml(SPEC), "app", f"file://{tmp_path}", "tok", T0, T0)
    lock = threading.RLock()
    dispatcher = Dispatcher(state, lock, dict.fromkeys((LaunchContainer, KillContainer, DeleteCheckpoints, Finish),
                                                       lambda ins: None))
    state.handle(Start(T0))
    delay = [0.0]

    def slow_many(events):
        time.sleep(delay[0])
        return dispatcher.dispatch_many(events)

    pacer = Recording()
    server, port = create_server(UmbilicalServicer(dispatcher.dispatch, "tok", slow_many, pacer=pacer),
                                 host="127.0.0.1")
    (tmp_path / "heartbeatUri").write_text(f"127.0.0.1:{port}")
    (cid, *_) = sorted(state.plan.containers)
    u = Umbilical(f"file://{tmp_path}", container_credential("tok", cid), timeout=5, container_id=cid)
    try:
        u.connect(wait=5)
        hb = proto.ContainerHeartbeat(container_id=cid, buffer_server_host="127.0.0.1", buffer_server_port=1)
        u.call("ProcessHeartbeat", hb)
        delay[0] = 0.3
        u.call("ProcessHeartbeat", hb)
        assert u.streaming
        assert len(pacer.seen) == 2 and pacer.seen[0] < 0.3 <= pacer.seen[1] < 5
    finally:
        u.close()
        server.stop(None)


def test_the_interval_stretched_or_not_is_asked_for_in_slots_that_spread_containers_answered_together():
    clock = Clock()
    pacer = HeartbeatPacer(1000, 8000, clock)
    ids = [f"container_{i}" for i in range(2000)]
    # not stretched: in slots of the configured interval, asked for exactly it once in them
    fixed = [pacer.ask_ms(c, T0) for c in ids]
    assert min(fixed) >= 500 and max(fixed) < 1500
    assert min(collections.Counter((T0 + a) % 1000 // 100 for a in fixed).values()) >= 150
    assert {pacer.ask_ms(c, T0 + a) for c, a in zip(ids, fixed)} == {1000}
    # counted from the heartbeat's sending: a master's queue moves nobody out of its slot
    assert [pacer.ask_ms(c, T0 + 700, T0) for c in ids] == fixed
    assert stretch(pacer, clock, 4) == 5062
    period = 5062
    # answered together (a deploy, a stall): they come back spread evenly over the next interval
    asked = [pacer.ask_ms(c, T0) for c in ids]
    assert min(asked) >= period // 2 and max(asked) < period * 3 // 2
    tenths = collections.Counter((T0 + a) % period * 10 // period for a in asked)
    assert len(tenths) == 10 and min(tenths.values()) >= 150 and max(tenths.values()) <= 250
    # each in its own slot: answered again there, it is asked for one interval
    for c, a in zip(ids[:50], asked):
        assert pacer.ask_ms(c, T0 + a) == period
    # answered at random moments, the same slots
    draws = random.Random(5)
    for c, a in zip(ids[:200], asked):
        now = T0 + draws.randrange(10 * period)
        again = pacer.ask_ms(c, now)
        assert period // 2 <= again < period * 3 // 2 and (now + again) % period == (T0 + a) % period
    assert pacer.interval_ms == period  # what get-app-info shows: the interval itself
    # never below the configured interval, never above the ceiling
    narrow = HeartbeatPacer(1000, 1100, clock)
    stretch(narrow, clock, 1)
    assert narrow.interval_ms == 1100
    assert {1000, 1100} <= {narrow.ask_ms(c, T0) for c in ids} <= set(range(1000, 1101))
