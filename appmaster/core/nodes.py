"""Nodes that lose containers: counted, blacklisted for a while, back in use afterwards.

A container that ends abnormally and was not stopped by the master, or that the master gave up on
because it went silent (no heartbeat, or never started), counts a failure of its
node (``books.node_failures``); so does one lost with its node (the launcher's
:data:`~stram.master.launch.local.NODE_LOST_EXIT`), even when the master had given it up
already. MAX_CONSECUTIVE_CONTAINER_FAILURES_FOR_BLACKLIST failures in a row blacklist the
node (``books.blacklist``: host -> until, wall-clock millis) for
BLACKLISTED_NODE_REMOVAL_TIME_MILLIS: the planner asks for new containers elsewhere
(``avoid``). A container that runs fine on a node (it ends cleanly, or it was launched after
the node's last failure and has run for :func:`fine_after_millis`) starts the node's count
again.

Never every known node (``books.cluster_nodes``, the nodes of failures and of live
containers): when the blacklist would hold them all, the one blacklisted longest is let out
again, with a line in the events (locally there is one node: it is never blacklisted).
"""

from __future__ import annotations

import time
from typing import Any

from stram.master.core.books import Books
from stram.master.core.lifecycle import note
from stram.master.core.plan import ContainerState, PTContainer
from stram.master.launch.local import NODE_LOST_EXIT

__all__ = ["container_ended", "count_failure", "watch_nodes", "blacklisted_nodes", "fine_after_millis"]

MAX_FAILURES = "MAX_CONSECUTIVE_CONTAINER_FAILURES_FOR_BLACKLIST"
REMOVAL_MILLIS = "BLACKLISTED_NODE_REMOVAL_TIME_MILLIS"


def container_ended(books: Books, container: PTContainer, node: str | None, exit_code: int | None, now: int,
                    stopped_by_master: bool) -> None:
    """Count ``container``'s end for its ``node`` (the launcher's, else its heartbeats' host)."""
    node = node or container.host
    if not node:
        return
    if exit_code == NODE_LOST_EXIT:
        count_failure(books, node, now, f"{container.id} lost with its node")
    elif not stopped_by_master and exit_code != 0:
        count_failure(books, node, now, f"{container.id} exited with code {exit_code}")
    elif exit_code == 0:
        _fine(books, node)


def count_failure(books: Books, node: str, now: int, what: str) -> None:
    """One more failure of ``node``; the blacklist when it reaches MAX_CONSECUTIVE_CONTAINER_FAILURES_FOR_BLACKLIST."""
    books.node_failed_millis[node] = now
    if node in books.blacklist:
        return
    failures = books.node_failures[node] = books.node_failures.get(node, 0) + 1
    if failures < int(books.attr(MAX_FAILURES)):
        return
    books.blacklist[node] = now + int(books.attr(REMOVAL_MILLIS))
    known = _known_nodes(books)
    # never every known node: the oldest entry (the smallest "until": all get the same removal time) goes
    oldest = min(books.blacklist, key=lambda h: (books.blacklist[h], h != node, h)) \
        if known <= set(books.blacklist) else None
    if oldest == node:
        del books.blacklist[node]
        books.node_failures.pop(node, None)
        note(books, now, "blacklist", f"node {node} not blacklisted after {failures} container failures (last: "
                                      f"{what}): every known node would be ({', '.join(sorted(known))})")
        return
    note(books, now, "blacklist", f"node {node} blacklisted after {failures} container failures (last: {what}) "
                                  f"until {_clock(books.blacklist[node])}")
    if oldest is not None:
        del books.blacklist[oldest]
        books.node_failures.pop(oldest, None)
        note(books, now, "blacklist", f"node {oldest} back in use: every known node would be blacklisted "
                                      f"({', '.join(sorted(known))}); the one blacklisted longest is let out")


def watch_nodes(books: Books, now: int) -> None:
    """On the clock: blacklist entries past their time end; nodes with containers running fine start
    their count again."""
    for host in [h for h, until in books.blacklist.items() if until <= now]:
        del books.blacklist[host]
        books.node_failures.pop(host, None)
        note(books, now, "blacklist", f"node {host} back in use ({REMOVAL_MILLIS}={books.attr(REMOVAL_MILLIS)})")
    if not books.node_failures:
        return
    fine_after = fine_after_millis(books)
    for c in books.plan.containers.values():
        if c.state == ContainerState.RUNNING and c.host in books.node_failures and c.host not in books.blacklist \
                and c.launch_at > books.node_failed_millis.get(c.host, 0) and now - c.launch_at >= fine_after:
            _fine(books, c.host)


def fine_after_millis(books: Books) -> int:
    """How long a container launched after its node's last failure runs before the node counts as fine
    again: twice HEARTBEAT_TIMEOUT_MILLIS (a container failing at start is seen within it)."""
    return 2 * int(books.attr("HEARTBEAT_TIMEOUT_MILLIS"))


def blacklisted_nodes(books: Books) -> list[dict[str, Any]]:
    """``[{host, failures, until}]`` of the blacklist (REST info ``blacklistedNodes``)."""
    return [{"host": h, "failures": books.node_failures.get(h, 0), "until": until}
            for h, until in sorted(books.blacklist.items())]


def _fine(books: Books, node: str) -> None:
    if node in books.blacklist:  # it stays until its time ends, with the failures that put it there
        return
    books.node_failures.pop(node, None)
    books.node_failed_millis.pop(node, None)


def _known_nodes(books: Books) -> set[str]:
    known = {h for h, _ in books.cluster_nodes} | set(books.node_failures) | set(books.blacklist)
    known |= {c.host for c in books.plan.containers.values() if c.host and c.state == ContainerState.RUNNING}
    return known


def _clock(millis: int) -> str:
    return time.strftime("%Y-%m-%d %H:%M:%S UTC", time.gmtime(millis / 1000))
