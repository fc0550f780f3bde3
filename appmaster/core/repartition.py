"""Repartitioning as the state lives it: a request checked, then the new plan installed.

Functions over the master's :class:`~stram.master.core.books.Books`, the handlers of
:class:`ScaleRequest` and :class:`ScaleStatesWritten`. The decision and the new plan
are :mod:`stram.master.core.scaling`'s (pure: it reads the state and builds the new
plan on a copy); between the two events the master writes the new partitions'
checkpoints (:class:`SplitCheckpoints`).
"""

from __future__ import annotations

from stram.master.core import scaling
from stram.master.core.books import Books
from stram.master.core.events import ScaleRequest, ScaleStatesWritten
from stram.master.core.instructions import DeleteCheckpoints, Instruction, Reply, SplitCheckpoints
from stram.master.core.lifecycle import launch, note
from stram.master.core.plan import ALIVE
from stram.master.core.recovery import redeploy_in_place, reset_for_redeploy
from stram.master.core.scaling import ScaleRefused, ScaleResult

__all__ = ["handle_scale_request", "handle_scale_states_written"]


def handle_scale_request(books: Books, ev: ScaleRequest) -> list[Instruction]:
    """Check the request (:func:`stram.master.core.scaling.plan_scale`, pure: it reads this state and
    builds the new plan on a copy); the new partitions' checkpoints are written next."""
    change = scaling.plan_scale(books, ev.name, ev.count)
    if change.plan is None:
        return [Reply(ScaleResult(change.name, change.old_count, change.count, changed=False))]
    return [SplitCheckpoints(change, then=ScaleStatesWritten(change, ev.now, ev.source))]


def handle_scale_states_written(books: Books, ev: ScaleStatesWritten) -> list[Instruction]:
    """Install a change whose checkpoints are written; reply with what was done.

    Old operators get undeploy requests (their emptied containers are released in
    their next heartbeat), the affected operators are redeployed in place, and the
    instructions launch the new containers and delete the old partitions' checkpoints.
    """
    change, now = ev.change, ev.now
    if books.journal_key() != change.base_key:
        raise ScaleRefused(f"the application changed while repartitioning {change.name} was prepared; "
                           f"try again", transient=True)
    old_plan, books.plan = books.plan, change.plan
    deletions: list[Instruction] = []
    for rid in change.old_ids + change.old_unifiers:
        op = old_plan.operators[rid]
        container = books.plan.containers.get(op.container or "")
        if container is not None and container.state in ALIVE:
            books.undeploy[container.id].add(rid)
        books.removed.append({"id": rid, "label": op.label, "window": change.window,
                              "committed": books.committed, "millis": now,
                              "reason": f"repartitioned {change.name} ({change.verb})"})
        books.window_history.pop(rid, None)
        books.blocked.discard(rid)
        if op.checkpoints:
            deletions.append(DeleteCheckpoints(rid, tuple(op.checkpoints)))
    fresh = set(change.new_ids) | set(change.new_unifiers)
    for op_id in sorted(change.redeploy):
        op = books.plan.operators[op_id]
        redeploy_in_place(books, op)
        reset_for_redeploy(books, op, change.redeploy | fresh)
    launches = [launch(books, books.plan.containers[cid], now) for cid in change.launch]
    result = scaling.scale_result(change, old_plan, books.plan)
    for text in scaling.scale_messages(change, result, ev.source):
        note(books, now, "scale", text)
    return [*launches, *deletions, Reply(result)]
