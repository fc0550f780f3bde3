"""The master's pure rules: recovery checkpoints (and so the committed window) and restart backoff."""

from __future__ import annotations

from stram.master.core.plan import OperatorState, PhysicalPlan

__all__ = ["recovery_checkpoints", "restart_backoff_millis"]


def recovery_checkpoints(plan: PhysicalPlan, initial: int) -> dict[int, int]:
    """Each operator's recovery checkpoint; the committed window is their minimum.

    Operators in one :meth:`~stram.master.core.plan.PhysicalPlan.checkpoint_groups` group
    (joined by streams; a replayed input is not its first run, nor is anything
    after it) share their newest common checkpoint. Across the streams of an
    operator that reads its inputs itself, Apex's rule: walking downstream-first,
    a group's checkpoint is not after the minimum recovery checkpoint of its
    downstream operators. Operators with no usable checkpoint get ``initial``
    (start from scratch).
    """
    ops = plan.operators
    groups = plan.checkpoint_groups()
    downstream = plan.downstream_map()

    def ended(m: int) -> int | None:
        """The window a shut-down operator ended at (its state no longer changes after it)."""
        op = ops[m]
        return op.shutdown_window if op.state == OperatorState.SHUTDOWN else None

    def acceptable(c: int, m: int) -> bool:
        w = ended(m)
        return c in ops[m].checkpoints or (w is not None and c >= w and w in ops[m].checkpoints)

    group_value: dict[frozenset[int], int] = {}
    for group in set(groups.values()):
        candidates = {c for m in group for c in ops[m].checkpoints}
        group_value[group] = max((c for c in candidates if all(acceptable(c, m) for m in group)),
                                 default=initial)

    def member_value(m: int) -> int:
        value = group_value[groups[m]]
        w = ended(m)
        return min(value, w) if w is not None and value != initial else value

    changed = True
    while changed:
        changed = False
        for group in set(groups.values()):
            limit = min((member_value(d) for m in group for d in downstream[m] if d not in group),
                        default=None)
            candidates = {c for m in group for c in ops[m].checkpoints}
            value = max((c for c in candidates if (limit is None or c <= limit)
                         and all(acceptable(c, m) for m in group)), default=initial)
            value = min(value, group_value[group])
            if value != group_value[group]:
                group_value[group] = value
                changed = True
    return {op_id: member_value(op_id) for op_id in ops}


def restart_backoff_millis(restarts: int) -> int:
    """Delay before relaunching after the n-th restart: none for the first, then doubling to 30 s."""
    if restarts <= 1:
        return 0
    return min(250 * 2 ** (restarts - 2), 30_000)
