"""What the master tells agents: a container's init context, an operator's deploy info, the interval.

Functions over the master's :class:`~stram.master.core.books.Books`: both messages
are decided from the plan (placements, buffer servers, partition masks, recovery
checkpoints) and made into wire messages by :mod:`stram.master.core.convert`.
"""

from __future__ import annotations

from typing import Any

from stram.master.core import convert
from stram.master.core.books import Books
from stram.master.core.events import InitContextRequest, UnknownContainer
from stram.master.core.instructions import Instruction, Reply
from stram.master.core.plan import GONE, PTOperator

__all__ = ["downstream_map", "heartbeat_interval_millis", "asked_interval_millis", "init_context",
           "handle_init_context_request", "deploy_info"]


def downstream_map(books: Books) -> dict[int, list[int]]:
    """The plan's :meth:`~stram.master.core.plan.PhysicalPlan.downstream_map`, kept while its shape
    stays (deploying a plan of n operators reads it n times)."""
    plan = books.plan
    key = (plan.changes.structure, len(plan.operators), plan.next_operator_id, plan.next_container_number)
    cached = books.downstream_cache
    if cached is None or cached[0] is not plan or cached[1] != key:
        cached = books.downstream_cache = (plan, key, plan.downstream_map())
    return cached[2]


def heartbeat_interval_millis(books: Books) -> int:
    """The heartbeat interval to ask containers for: the pacer's, else HEARTBEAT_INTERVAL_MILLIS."""
    if books.pacer is not None:
        return books.pacer.interval_ms
    return int(books.attr("HEARTBEAT_INTERVAL_MILLIS"))


def asked_interval_millis(books: Books, container_id: str, now: int, sent: int = 0) -> int:
    """The interval the answer at ``now`` to ``container_id``'s heartbeat sent at ``sent`` asks
    for: the pacer's, in the container's slot (:meth:`HeartbeatPacer.ask_ms`)."""
    return books.pacer.ask_ms(container_id, now, sent) if books.pacer is not None \
        else heartbeat_interval_millis(books)


def init_context(books: Books, container_id: str) -> Any:
    """A container's init context, a ``StreamingContainerContext`` (a query: changes nothing).

    Raises
    ------
    UnknownContainer
        The plan does not know the container, or it was lost or released.
    """
    container = books.plan.containers.get(container_id)
    if container is None or container.state in GONE:
        raise UnknownContainer(container_id)
    return convert.init_context(
        container_id, books.start_window_millis,
        # the configured interval, not the paced one: its first heartbeat is answered with its deploy
        int(books.attr("HEARTBEAT_INTERVAL_MILLIS")), int(books.attr("STREAMING_WINDOW_SIZE_MILLIS")),
        int(books.attr("CHECKPOINT_WINDOW_COUNT")), books.app_id, books.spec.name, books.app_path, books.token,
        books.attributes)


def handle_init_context_request(books: Books, ev: InitContextRequest) -> list[Instruction]:
    """A container agent asks for its init context (replied; raises :class:`UnknownContainer`)."""
    return [Reply(init_context(books, ev.container_id))]


def deploy_info(books: Books, op: PTOperator) -> Any:
    """The deploy request for one operator, an ``OperatorDeployInfo`` (its inputs' sources must be
    placed). Its outputs' tag masks become what its running publisher tags with
    (``op.publisher_masks``: subscribers may not exceed them)."""
    plan = books.plan
    downstream = downstream_map(books).get(op.id, []) if op.outputs else []
    masks = {port: plan.output_mask(op.id, port, downstream) for port in op.outputs}
    if masks:
        op.publisher_masks = {**op.publisher_masks, **masks}
    return convert.deploy_info(plan, op, books.token, downstream, masks)
