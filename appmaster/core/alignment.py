"""Watermark alignment: how far each input operator of a ``WATERMARK_ALIGNMENT_GROUP`` may run ahead.

Two sources feeding a join read at their own pace; the one that covers event time faster (fewer
rows per second of event time, as NEXMark's auctions against its bids) runs ahead, and what it sent
waits in the join's state until the other catches up: all of it, when it reads to its end first.
Flink bounds this by pausing a source whose watermark is more than a drift ahead of its group's
lowest. Here the master, which hears every operator's watermark in the heartbeats, answers each
container with a ceiling per aligned input operator: the lowest watermark of the *other* live
members of its group, each carried forward at its pace to the next heartbeat, plus its
``WATERMARK_MAX_DRIFT_MILLIS``. Leaving the operator itself out keeps the slowest member from being
paused by its own stale report; a member that shut down, is idle or reached the end of time holds
nobody back, and one with no watermark yet holds the others at their first rows. The container's
engine stops calling the operator's ``emit_tuples`` while its watermark is above its ceiling,
closing windows empty.

Members in the same container are left out of each other's ceilings here: the container bounds them
by one another itself, by the same rules, from their current watermarks at every call
(``Node._local_ceiling``), instead of at the heartbeats' pace (a second of wall time, in which a
NEXMark bid source covers about 30 s of event time). The tighter of the two ceilings holds.
"""

from __future__ import annotations

from typing import Any, Iterable

from stram.common.watermarks import IDLE, MAX_WATERMARK, MIN_WATERMARK
from stram.master.core.plan import OperatorState

__all__ = ["GROUP", "DRIFT", "ceilings", "groups"]

GROUP = "WATERMARK_ALIGNMENT_GROUP"
DRIFT = "WATERMARK_MAX_DRIFT_MILLIS"
#: A member's watermark that holds nobody back: idle, or the end of its input.
_UNBOUNDING = (IDLE, MAX_WATERMARK)
#: The longest wall time a member's watermark is carried forward from its last report.
AHEAD_MS = 5_000


def groups(books: Any) -> dict[str, list[int]]:
    """The plan's aligned input operators by group (kept while the plan's operators stay the same)."""
    operators = books.plan.operators
    key = (id(books.plan), len(operators), next(reversed(operators), None) if operators else None)
    cached = books.alignment_groups
    if cached is not None and cached[0] == key:
        return cached[1]
    found: dict[str, list[int]] = {}
    for op in operators.values():
        group = op.attributes.get(GROUP) if op.kind == "INPUT" else None
        if group:
            found.setdefault(str(group), []).append(op.id)
    books.alignment_groups = (key, found)
    return found


def ceilings(books: Any, op_ids: Iterable[int], now: int | None = None, ahead_ms: int = 0) -> dict[int, int] | None:
    """Per aligned input operator among ``op_ids``: the watermark it may run to (MAX_WATERMARK:
    unbounded; MIN_WATERMARK while a peer has no watermark yet). None when none of them is aligned.
    ``now`` (epoch ms): each other member's watermark is taken where it will be ``ahead_ms`` later (the
    next heartbeat) at the pace it has been moving (:func:`_estimate`), so that the heartbeats' delay
    does not hold the others behind the slowest."""
    members = groups(books)
    if not members:
        return None
    operators = books.plan.operators
    out: dict[int, int] | None = None
    for op_id in op_ids:
        op = operators.get(op_id)
        group = op.attributes.get(GROUP) if op is not None and op.kind == "INPUT" else None
        if not group:
            continue
        if out is None:
            out = {}
        lowest, waiting = None, False
        for other_id in members.get(str(group), ()):
            other = operators.get(other_id)
            if other_id == op_id or other is None or other.state == OperatorState.SHUTDOWN or (
                    op.container and other.container == op.container):  # beside it: the container aligns them
                continue
            seen = books.window_history.get(other_id)
            mark = seen.watermark if seen is not None else None
            if mark is None or mark == MIN_WATERMARK:
                waiting = True
            elif mark not in _UNBOUNDING:
                mark = _estimate(books, other_id, mark, now, ahead_ms)
                lowest = mark if lowest is None else min(lowest, mark)
        if waiting:  # a peer has no watermark yet: its first one sets the pace
            out[op_id] = MIN_WATERMARK
        elif lowest is not None:
            out[op_id] = lowest + int(op.attributes.get(DRIFT) or 0)
        else:
            out[op_id] = MAX_WATERMARK
    return out


def _estimate(books: Any, op_id: int, mark: int, now: int | None, ahead_ms: int = 0) -> int:
    """Where an operator's watermark ``mark``, its last reported one, will be ``ahead_ms`` after ``now``:
    plus its pace (event ms per wall ms, between its last two changes of watermark) times the time since
    (at most :data:`AHEAD_MS`)."""
    if now is None:
        return mark
    paces = books.alignment_paces
    last = paces.get(op_id)
    if last is None or mark < last[0]:
        paces[op_id] = (mark, now, 0.0)
        return mark
    last_mark, last_now, pace = last
    if mark > last_mark:
        if now > last_now:
            pace = (mark - last_mark) / (now - last_now)
        paces[op_id] = last = (mark, now, pace)
    return mark + int(pace * min(now + ahead_ms - last[1], AHEAD_MS))
