"""The incremental committed window (appmaster/core/committed.py) equals the full recomputation.

Pure tests: drawn applications (tests/kits/randomplans.py) and drawn event
sequences drive two MasterStates with the same events: one keeps its
recovery checkpoints with :class:`stram.master.core.committed.CommittedWindow`
(from what changed), the other recomputes them over the whole plan after
every heartbeat with :func:`stram.master.core.rules.recovery_checkpoints` (what
the master did before). After every event both states, their committed
windows, recovery checkpoints, checkpoint deletions and responses are equal.
"""

from __future__ import annotations

import random
import sys
from pathlib import Path

import pytest


from randomplans import Driver, handle, new_state, random_spec  # noqa: E402

from stram.master.core.committed import CommittedWindow  # noqa: E402
from stram.master.core.rules import recovery_checkpoints  # noqa: E402
from stram.master.core.state import DeleteCheckpoints, MasterState, Reply, Start  # noqa: E402


class FullRecomputation:
    """The committed window as the master computed it before: the rule over the whole plan."""

    def update(self, state: MasterState) -> list:
        if not state.plan.operators:
            return []
        rec = recovery_checkpoints(state.plan, state.initial_window)
        instructions = []
        for op_id, window in rec.items():
            op = state.plan.operators[op_id]
            if window > op.recovery_checkpoint:
                op.recovery_checkpoint = window
            old = tuple(c for c in op.checkpoints if c < op.recovery_checkpoint)
            if old:
                op.checkpoints = [c for c in op.checkpoints if c >= op.recovery_checkpoint]
                instructions.append(DeleteCheckpoints(op_id, old))
        state.committed = max(state.committed, min(op.recovery_checkpoint for op in state.plan.operators.values()))
        return instructions


def _outcome(instructions: list | None) -> object:
    if instructions is None:
        return None
    deletions = sorted((i.operator_id, i.windows) for i in instructions if isinstance(i, DeleteCheckpoints))
    replies = [i.value.SerializeToString(deterministic=True) if hasattr(i.value, "SerializeToString")
               else repr(i.value) for i in instructions if isinstance(i, Reply)]
    others = sorted(repr(i) for i in instructions if not isinstance(i, (DeleteCheckpoints, Reply)))
    return deletions, replies, others


def _run(seed: int, events: int) -> tuple[int, int]:
    rng = random.Random(seed)
    text = random_spec(rng)
    live, reference = new_state(text), new_state(text)
    reference.committed_window = FullRecomputation()
    assert isinstance(live.committed_window, CommittedWindow)
    assert _outcome(live.handle(Start(0))) == _outcome(reference.handle(Start(0)))
    driver = Driver(live, rng)
    for step in range(events):
        for event in driver.events():
            got, want = handle(live, event), handle(reference, event)
            where = f"seed {seed}, event {step} ({type(event).__name__})\n{text}"
            assert _outcome(got) == _outcome(want), where
            assert live.committed == reference.committed, where
            assert {i: (op.recovery_checkpoint, op.checkpoints) for i, op in live.plan.operators.items()} == \
                {i: (op.recovery_checkpoint, op.checkpoints) for i, op in reference.plan.operators.items()}, where
            if step % 10 == 9 or step == events - 1:  # the whole state now and then (it is slower)
                assert live.snapshot() == reference.snapshot(), where
                live.validate_state()
            if got is not None:
                driver.follow(event, got)
    return live.committed_window.incremental_updates, live.committed_window.full_updates


@pytest.mark.parametrize("block", range(3))
def test_incremental_committed_window_equals_full_recomputation(block: int) -> None:
    """240 drawn applications (fixed seeds), 80 events each."""
    incremental = full = 0
    for seed in range(block * 80, block * 80 + 80):
        i, f = _run(seed, 80)
        incremental, full = incremental + i, full + f
    assert incremental > 2 * full  # the drawn sequences do exercise the incremental path


def test_committed_window_moves_in_drawn_sequences() -> None:
    """The drawn sequences commit windows (the comparison is not of states that never move)."""
    moved = 0
    for seed in range(30):
        rng = random.Random(seed)
        state = new_state(random_spec(rng))
        handle(state, Start(0))
        driver = Driver(state, rng)
        for _ in range(160):  # every operator of a connected plan must reach a common checkpoint
            for event in driver.events():
                out = handle(state, event)
                if out is not None:
                    driver.follow(event, out)
        moved += state.committed > state.initial_window
    assert moved >= 15
