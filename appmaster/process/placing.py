"""Between the master's core and its launcher, for placement: requests, ends and the nodes.

The core decides where containers should go (``LaunchContainer``'s hosts, racks, node
label, hosts to avoid) and counts the nodes' failures (:mod:`stram.master.core.nodes`);
the launcher knows the cluster's nodes and where YARN put each container. These few
functions carry one to the other, so the master's process stays a dispatcher.
"""

from __future__ import annotations

import logging
import os
from typing import Any

from stram.common.skeinkeys import PLACEMENT_NOTE_ENV
from stram.master.core.books import Books
from stram.master.core.events import ContainerExited
from stram.master.core.lifecycle import note
from stram.master.launch.local import ContainerRequest, Launcher

__all__ = ["prepare", "container_request", "exited"]

log = logging.getLogger("stram.master.process.placing")


def prepare(books: Books, launcher: Launcher, spec: Any, now: int) -> None:
    """At the master's start: the nodes the launcher can place on into the books, its placement timeout
    from the spec, and why the client pinned no service (a warning in the events)."""
    try:  # (a stand-in launcher of a test may lack the placement calls: no placement)
        books.cluster_nodes = list(getattr(launcher, "nodes", list)())
    except Exception:  # noqa: BLE001 - no placement: containers go anywhere
        log.warning("the launcher could not say which nodes it places on", exc_info=True)
    if hasattr(launcher, "placement_timeout_millis"):
        launcher.placement_timeout_millis = int(spec.attribute("PLACEMENT_TIMEOUT_MILLIS"))
    if os.environ.get(PLACEMENT_NOTE_ENV):
        note(books, now, "placement", f"warning: {os.environ[PLACEMENT_NOTE_ENV]}")


def container_request(ins: Any, env: dict[str, str]) -> ContainerRequest:
    """The launcher's request for a ``LaunchContainer`` (its placement, blacklisted hosts among those
    to avoid, decided by :mod:`stram.master.core.placement`)."""
    return ContainerRequest(ins.container_id, ins.memory_mb, ins.vcores, tuple(ins.hosts), env,
                            racks=tuple(ins.racks), node_label=ins.node_label, avoid=tuple(ins.avoid),
                            relax=ins.relax)


def exited(launcher: Launcher, container_id: str, exit_code: int | None, now: int) -> ContainerExited:
    """The event of a container the launcher saw end: with the node it ran on and, when it could not be
    placed as asked, why."""
    node_of, unplaceable = getattr(launcher, "node_of", None), getattr(launcher, "unplaceable", None)
    return ContainerExited(container_id, exit_code, now, node=node_of(container_id) if node_of else None,
                           unplaceable=(unplaceable(container_id) if unplaceable else None) or "")
