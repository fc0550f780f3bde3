"""Watermark alignment: the ceilings the master sends aligned input operators (stram.master.core.alignment)."""

from __future__ import annotations

from types import SimpleNamespace

import pytest

from stram.common.watermarks import IDLE, MAX_WATERMARK, MIN_WATERMARK
from stram.master.core import alignment
from stram.master.core.plan import OperatorState

T0 = 1_700_000_000_000


def books(*ops, marks=None, containers=None):
    operators = {}
    for op_id, group, kind, drift in ops:
        attrs = {"WATERMARK_ALIGNMENT_GROUP": group} if group else {}
        if drift is not None:
            attrs["WATERMARK_MAX_DRIFT_MILLIS"] = drift
        operators[op_id] = SimpleNamespace(id=op_id, kind=kind, attributes=attrs, state=OperatorState.ACTIVE,
                                           container=(containers or {}).get(op_id, f"container_{op_id:06d}"))
    history = {op_id: SimpleNamespace(watermark=mark) for op_id, mark in (marks or {}).items()}
    return SimpleNamespace(plan=SimpleNamespace(operators=operators), window_history=history, alignment_groups=None,
                           alignment_paces={})


def test_the_one_ahead_is_bounded_by_the_slowest_other_and_the_slowest_by_nobody():
    b = books((1, "g", "INPUT", 1000), (2, "g", "INPUT", 1000), (3, "g", "INPUT", 500), (4, None, "GENERIC", None),
              marks={1: T0 + 50_000, 2: T0 + 10_000, 3: T0 + 20_000})
    got = alignment.ceilings(b, [1, 2, 3, 4])
    assert got == {1: T0 + 10_000 + 1000, 2: T0 + 20_000 + 1000, 3: T0 + 10_000 + 500}
    assert alignment.ceilings(b, [4]) is None  # a container with no aligned operator: nothing to send


def test_groups_are_apart_and_a_plan_without_any_sends_none():
    b = books((1, "a", "INPUT", 0), (2, "b", "INPUT", 0), (3, "a", "INPUT", 0),
              marks={1: T0 + 9, 2: T0 + 1, 3: T0 + 5})
    assert alignment.ceilings(b, [1, 2, 3]) == {1: T0 + 5, 2: MAX_WATERMARK, 3: T0 + 9}
    assert alignment.ceilings(books((1, None, "INPUT", None)), [1]) is None


@pytest.mark.parametrize("mark", [IDLE, MAX_WATERMARK])
def test_an_idle_or_finished_peer_holds_nobody_back(mark):
    b = books((1, "g", "INPUT", 0), (2, "g", "INPUT", 0), marks={1: T0, 2: mark})
    assert alignment.ceilings(b, [1]) == {1: MAX_WATERMARK}


def test_a_peer_that_shut_down_holds_nobody_back():
    b = books((1, "g", "INPUT", 0), (2, "g", "INPUT", 0), marks={1: T0, 2: T0 - 5})
    b.plan.operators[2].state = OperatorState.SHUTDOWN
    assert alignment.ceilings(b, [1]) == {1: MAX_WATERMARK}


@pytest.mark.parametrize("marks", [{1: T0}, {1: T0, 2: MIN_WATERMARK}])
def test_a_peer_without_a_watermark_yet_holds_the_others_at_their_first_rows(marks):
    b = books((1, "g", "INPUT", 0), (2, "g", "INPUT", 0), marks=marks)
    assert alignment.ceilings(b, [1]) == {1: MIN_WATERMARK}


def test_a_peer_is_taken_where_its_pace_brings_it_by_the_next_heartbeat():
    b = books((1, "g", "INPUT", 100), (2, "g", "INPUT", 100), marks={1: T0 + 500_000, 2: T0})
    now = 1_000_000
    assert alignment.ceilings(b, [1], now, 1000) == {1: T0 + 100}  # no pace known yet
    b.window_history[2].watermark = T0 + 30_000  # 30 s of event time in 1 s of wall time
    assert alignment.ceilings(b, [1], now + 1000, 1000) == {1: T0 + 30_000 + 30_000 + 100}
    # half a second later, no new report: carried forward at that pace, for at most AHEAD_MS
    assert alignment.ceilings(b, [1], now + 1500, 1000) == {1: T0 + 30_000 + 45_000 + 100}
    far = alignment.ceilings(b, [1], now + 60_000, 1000)[1]
    assert far == T0 + 30_000 + 30 * alignment.AHEAD_MS + 100


def test_the_group_map_follows_the_plan():
    b = books((1, "g", "INPUT", 0), marks={1: T0})
    assert alignment.groups(b) == {"g": [1]}
    b.plan.operators[2] = SimpleNamespace(id=2, kind="INPUT", attributes={"WATERMARK_ALIGNMENT_GROUP": "g"},
                                          state=OperatorState.ACTIVE, container="container_000002")
    assert alignment.groups(b) == {"g": [1, 2]}


def test_members_in_one_container_are_left_to_it_and_the_others_still_count():
    # 1 and 2 side by side (the container aligns them at every call), 3 elsewhere
    b = books((1, "g", "INPUT", 100), (2, "g", "INPUT", 100), (3, "g", "INPUT", 100),
              marks={1: T0 + 50_000, 2: T0 + 10_000, 3: T0 + 30_000},
              containers={1: "container_000001", 2: "container_000001", 3: "container_000002"})
    assert alignment.ceilings(b, [1, 2, 3]) == {1: T0 + 30_100, 2: T0 + 30_100, 3: T0 + 10_100}
    # all of a group in one container: nothing left for the master to bound, even a peer not started yet
    b = books((1, "g", "INPUT", 0), (2, "g", "INPUT", 0), marks={1: T0},
              containers={1: "container_000001", 2: "container_000001"})
    assert alignment.ceilings(b, [1, 2]) == {1: MAX_WATERMARK, 2: MAX_WATERMARK}
