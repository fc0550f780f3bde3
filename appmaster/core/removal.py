"""Safe removal: operators that ended leave the plan once nothing can need them again.

Functions over the master's :class:`~stram.master.core.books.Books`. An operator
that shut down at window ``w`` (its stream ended) is parked in
``shutdown_operators`` until ``w`` is committed and every downstream operator
finished ``w``; then it leaves the plan (:func:`remove_operator`: its downstream
operators' inputs, its container's group), and so do downstream unifiers and
ended operators left without inputs. An operator a heartbeat no longer reports
leaves the plan the same way.
"""

from __future__ import annotations

from stram.master.core.books import Books
from stram.master.core.changes import touch
from stram.master.core.lifecycle import note, window_hex
from stram.master.core.plan import ALIVE, OperatorState, PTOperator

__all__ = ["process_shutdown_operators", "remove_terminated_partition", "remove_operator"]


def process_shutdown_operators(books: Books, now: int) -> None:
    """Remove parked operators once their window is committed and downstream caught up."""
    parked, operators = books.shutdown_operators, books.plan.operators
    for window in sorted(parked):
        if window > books.committed:
            break
        for op_id in list(parked.get(window, ())):
            if op_id not in parked.get(window, ()):
                continue  # removed already, as a downstream left without inputs
            op = operators.get(op_id)
            if op is None:
                parked[window].remove(op_id)
            elif all(operators[d].current_window >= window for d in books.plan.downstream(op_id)):
                remove_terminated_partition(books, op, now)
        if not parked.get(window):
            parked.pop(window, None)


def remove_terminated_partition(books: Books, op: PTOperator, now: int) -> None:
    """Remove a shut-down partition, then downstream operators left without inputs."""
    downstream = books.plan.downstream(op.id)
    remove_operator(books, op, now, reason=f"shut down at window {window_hex(op.shutdown_window or 0)}")
    for d_id in downstream:
        d = books.plan.operators.get(d_id)
        if d is None or d.inputs:
            continue
        if d.kind == "UNIFIER" or (d.state == OperatorState.SHUTDOWN
                                   and (d.shutdown_window or 0) <= books.committed):
            remove_terminated_partition(books, d, now)


def remove_operator(books: Books, op: PTOperator, now: int, reason: str) -> None:
    """removePTOperator: inputs at downstream, itself from its container group."""
    plan = books.plan
    for d_id in plan.downstream(op.id):
        d = plan.operators[d_id]
        d.inputs = [i for i in d.inputs if i.source_id != op.id]
    plan.operators.pop(op.id, None)
    for window, ids in list(books.shutdown_operators.items()):
        if op.id in ids:
            ids.remove(op.id)
        if not ids:
            books.shutdown_operators.pop(window, None)
    container = plan.containers.get(op.container or "")
    if container is not None:
        container.operators.discard(op.id)
        container.pending_deploy.discard(op.id)
        touch(container)
        if container.state in ALIVE:
            books.undeploy[container.id].add(op.id)
    books.removed.append({"id": op.id, "label": op.label, "window": op.shutdown_window,
                          "committed": books.committed, "reason": reason, "millis": now})
    note(books, now, "remove", f"removed operator {op.label} ({op.id}): {reason}; "
                               f"committed window {window_hex(books.committed)}")
