"""The committed window, kept up to date from what changed (not recomputed over the whole plan).

:func:`stram.master.core.rules.recovery_checkpoints` is the rule: each checkpoint group
(:meth:`~stram.master.core.plan.PhysicalPlan.checkpoint_groups`: operators joined by
streams, cut only at operators that read their inputs themselves) gets the
newest checkpoint all its members accept that is not after the recovery
checkpoints of its downstream operators. On a DAG of groups that is one value per group,
computed downstream first, so a heartbeat that changed the checkpoints (or
the state) of a few operators changes only their groups and, while the values
move, the groups upstream of them. :class:`CommittedWindow` keeps the groups,
their values and the operators' recovery checkpoints; it recomputes the
groups reached from the changed operators (the marks of the plan's
committed-window tracker, :attr:`stram.master.core.changes.PlanChanges.committed`)
and starts over from the rule itself when the plan's shape changed
(operators added, removed, moved or rewired), when the marks were forgotten,
or when the groups form a cycle.

The result equals the full recomputation after every event; tests check it on
drawn plans and event sequences (tests/unit/master/test_committed_incremental.py).
"""

from __future__ import annotations

import heapq
from typing import Any

from stram.master.core.instructions import DeleteCheckpoints, Instruction
from stram.master.core.plan import OperatorState, PhysicalPlan, PTOperator
from stram.master.core.rules import recovery_checkpoints

__all__ = ["CommittedWindow"]

#: Bits of a heap entry below its window: the operator's id (ids count up from 1, never near 2**48).
_ID_BITS = 48
_ID_MASK = (1 << _ID_BITS) - 1


def _entry(window: int, op_id: int) -> int:
    """An operator's recovery checkpoint and id as one heap entry, ordered as the pair would be.
    An int: the cyclic garbage collector tracks a tuple until it scans it (a tuple reused from the
    free list, uncounted); the heap holds one per recovery checkpoint since its last rebuild."""
    return (window << _ID_BITS) | op_id


class CommittedWindow:
    """Recovery checkpoints and the committed window of one :class:`~stram.master.core.state.MasterState`."""

    def __init__(self) -> None:
        self.plan: PhysicalPlan | None = None
        self.key: tuple = ()
        self.epoch = -1
        #: group root -> members; operator -> its group root
        self.members: dict[int, tuple[int, ...]] = {}
        self.group_of: dict[int, int] = {}
        #: group root -> operators outside it that members feed; -> groups feeding it
        self.down_ops: dict[int, tuple[int, ...]] = {}
        self.up_groups: dict[int, tuple[int, ...]] = {}
        #: group root -> position downstream-first (the order groups are recomputed in)
        self.order: dict[int, int] = {}
        self.value: dict[int, int] = {}
        #: group root -> {candidate window: index of the member last found not to accept it}
        self.witness: dict[int, dict[int, int]] = {}
        self.acyclic = False
        #: :func:`_entry` of each operator's recovery checkpoint (and older ones): the committed
        #: window is the smallest current one
        self.heap: list[int] = []
        #: how many times each path ran (for tests and the bench)
        self.full_updates = 0
        self.incremental_updates = 0

    # ------------------------------------------------------------ the update
    def update(self, state: Any) -> list[Instruction]:
        """Advance recovery checkpoints and ``state.committed``; the checkpoints to delete."""
        plan: PhysicalPlan = state.plan
        if not plan.operators:
            return []
        owned, tracker = plan.operators, plan.changes.committed
        dirty = tracker.take(lambda obj: isinstance(obj, PTOperator) and owned.get(obj.id) is obj)
        key = (plan.changes.structure, len(plan.operators), len(plan.containers), plan.next_operator_id,
               plan.next_container_number)
        if plan is not self.plan or key != self.key or tracker.epoch != self.epoch or not self.acyclic:
            self.plan, self.key, self.epoch = plan, key, tracker.epoch
            return self._full(state)
        self.incremental_updates += 1
        return self._incremental(state, dirty)

    def _full(self, state: Any) -> list[Instruction]:
        self.full_updates += 1
        plan = state.plan
        self._shape(plan)
        rec = recovery_checkpoints(plan, state.initial_window)
        for root, members in self.members.items():
            self.value[root] = self._group_value(plan, root, members, state.initial_window) if self.acyclic else 0
        instructions = self._apply(plan, rec, list(plan.operators))
        self.heap = [_entry(op.recovery_checkpoint, op.id) for op in plan.operators.values()]
        heapq.heapify(self.heap)
        self._commit(state)
        return instructions

    def _incremental(self, state: Any, dirty: list[PTOperator]) -> list[Instruction]:
        plan, initial = state.plan, state.initial_window
        dirty_roots = {self.group_of[op.id] for op in dirty}
        pending = set(dirty_roots)
        queue = [(self.order[g], g) for g in pending]
        heapq.heapify(queue)
        touched: set[int] = {op.id for op in dirty}
        while queue:
            _, root = heapq.heappop(queue)
            pending.discard(root)
            members = self.members[root]
            value = self._group_value(plan, root, members, initial)
            if value != self.value[root]:
                self.value[root] = value
                touched.update(members)
            elif root not in dirty_roots:
                continue
            # (a changed member's own value, as a shut-down one's, may move the groups upstream)
            for up in self.up_groups[root]:
                if up not in pending:
                    pending.add(up)
                    heapq.heappush(queue, (self.order[up], up))
        ids = sorted(touched)
        rec = {m: self._member_value(plan, m, initial) for m in ids}
        instructions = self._apply(plan, rec, ids)
        self._commit(state)
        return instructions

    def _apply(self, plan: PhysicalPlan, rec: dict[int, int], ids: list[int]) -> list[Instruction]:
        """The ratchet and the deletions of the committed window's update, for ``ids``."""
        instructions: list[Instruction] = []
        heap, journal = self.heap, plan.changes.journal
        for op_id in ids:
            op = plan.operators[op_id]
            window = rec[op_id]
            if window > op.recovery_checkpoint:
                op.recovery_checkpoint = window
                heapq.heappush(heap, _entry(window, op_id))
            checkpoints, kept = op.checkpoints, op.recovery_checkpoint
            if checkpoints and min(checkpoints) < kept:  # most touched operators have none older
                # not marked for the committed window, which has just weighed them: only for the
                # journal (marked, the next heartbeat's update would weigh this group again)
                object.__setattr__(op, "checkpoints", [c for c in checkpoints if c >= kept])
                journal.mark(op)
                instructions.append(DeleteCheckpoints(op_id, tuple(c for c in checkpoints if c < kept)))
        return instructions

    def _commit(self, state: Any) -> None:
        ops, heap = state.plan.operators, self.heap
        while heap and ((heap[0] & _ID_MASK) not in ops
                        or ops[heap[0] & _ID_MASK].recovery_checkpoint != heap[0] >> _ID_BITS):
            heapq.heappop(heap)  # an older recovery checkpoint of an operator (or a removed one)
        if len(heap) > 4 * len(ops) + 64:
            self.heap = heap = [_entry(op.recovery_checkpoint, op.id) for op in ops.values()]
            heapq.heapify(heap)
        committed = heap[0] >> _ID_BITS
        if committed > state.committed:
            state.committed = committed

    # ------------------------------------------------------------ the rule, per group
    def _group_value(self, plan: PhysicalPlan, root: int, members: tuple[int, ...], initial: int) -> int:
        """The rule's value for one group, without going over every member of a large group (all the
        operators of a connected application) for each heartbeat: a member that has not shut down
        accepts only its own checkpoints, so those are the candidates, and the member that last
        refused a candidate is asked first (most heartbeats change nothing: it still refuses)."""
        ops = plan.operators
        limit = min((self._member_value(plan, d, initial) for d in self.down_ops[root]), default=None)
        running = next((ops[m] for m in members if ops[m].state != OperatorState.SHUTDOWN), None)
        candidates = set(running.checkpoints) if running is not None else {
            c for m in members for c in ops[m].checkpoints}
        witness = self.witness.setdefault(root, {})
        n = len(members)
        for c in sorted(candidates, reverse=True):
            if limit is not None and c > limit:
                continue
            first = witness.get(c, 0)
            for i in range(n):
                k = first + i if first + i < n else first + i - n
                if not _acceptable(ops[members[k]], c):
                    witness[c] = k
                    break
            else:
                for old in [w for w in witness if w <= c]:
                    del witness[old]
                return c
        return initial

    def _member_value(self, plan: PhysicalPlan, m: int, initial: int) -> int:
        value = self.value[self.group_of[m]]
        op = plan.operators[m]
        w = op.shutdown_window if op.state == OperatorState.SHUTDOWN else None
        return min(value, w) if w is not None and value != initial else value

    # ------------------------------------------------------------ the plan's shape
    def _shape(self, plan: PhysicalPlan) -> None:
        groups = plan.checkpoint_groups()
        downstream = plan.downstream_map()
        self.group_of = {op_id: min(group) for op_id, group in groups.items()}
        self.members = {}
        for op_id in plan.operators:
            self.members.setdefault(self.group_of[op_id], ())
        for root in self.members:
            self.members[root] = tuple(sorted(groups[root]))
        down_groups: dict[int, set[int]] = {root: set() for root in self.members}
        up: dict[int, set[int]] = {root: set() for root in self.members}
        self.down_ops = {}
        for root, members in self.members.items():
            outside = sorted({d for m in members for d in downstream[m] if self.group_of[d] != root})
            self.down_ops[root] = tuple(outside)
            for d in outside:
                down_groups[root].add(self.group_of[d])
                up[self.group_of[d]].add(root)
        self.up_groups = {root: tuple(sorted(ups)) for root, ups in up.items()}
        # downstream first: a group comes after every group it feeds (Kahn's algorithm on the reverse)
        left = {root: len(down_groups[root]) for root in self.members}
        ready = sorted(root for root, n in left.items() if n == 0)
        self.order = {}
        while ready:
            root = ready.pop()
            self.order[root] = len(self.order)
            for u in self.up_groups[root]:
                left[u] -= 1
                if left[u] == 0:
                    ready.append(u)
        self.acyclic = len(self.order) == len(self.members)
        self.witness = {}
        if self.acyclic:  # values in order, so each group's downstream values are known
            self.value = {}
            by_order = sorted(self.members, key=self.order.__getitem__)
            self.members = {root: self.members[root] for root in by_order}


def _acceptable(op: PTOperator, c: int) -> bool:
    if c in op.checkpoints:
        return True
    w = op.shutdown_window if op.state == OperatorState.SHUTDOWN else None
    return w is not None and c >= w and w in op.checkpoints
