"""Names the YARN client and the master inside YARN both use: Skein services, keys and tags.

The client writes them into the ``skein.ApplicationSpec`` it submits; the master's
launcher and the client's admin calls read them back. One place, so neither side
imports the other.

Pinned services: Skein 0.8 places containers per service (``nodes``, ``racks``,
``relax_locality``, ``node_label``), not per ``add_container`` call, so the client adds,
for each container shape ``<service>``, one service per node (``<service>@<host>``), per
rack (``<service>@rack=<rack>``) and per node label (``<service>@label=<label>``), which
the master's launcher picks from per request. ``=`` is in no host name, and Skein's driver
refuses service names with ``:`` (they become HDFS path names).
"""

from __future__ import annotations

__all__ = ["CONTAINER_SERVICE", "ADMIN_KEY", "PLACEMENT_NOTE_ENV", "RACK_ENV", "pinned_service", "parse_service"]

#: The Skein service whose instances are stram containers (extra shapes: ``container-<MB>mb-<N>vc``).
CONTAINER_SERVICE = "container"
#: The key, in a YARN application's Skein key-value store, of the admin API's HTTPS address
#: and certificate (JSON ``{"url", "cert"}``), published when TLS is on.
ADMIN_KEY = "stram.admin"
#: The master's environment variable saying why the client added no pinned services (a warning the
#: master puts in its events); unset when it added them or had no reason to.
PLACEMENT_NOTE_ENV = "STRAM_PLACEMENT_NOTE"
#: The environment variable of a service pinned to a node naming the node's rack (the client sets it,
#: the master's launcher reads it).
RACK_ENV = "STRAM_RACK"

_RACK = "rack="
_LABEL = "label="


def pinned_service(base: str, host: str | None = None, rack: str | None = None, label: str | None = None) -> str:
    """The name of ``base``'s service pinned to ``host``, ``rack`` or node ``label`` (exactly one)."""
    if sum(x is not None for x in (host, rack, label)) != 1:
        raise ValueError("a pinned service names exactly one of host, rack, label")
    if host is not None:
        return f"{base}@{host}"
    return f"{base}@{_RACK}{rack}" if rack is not None else f"{base}@{_LABEL}{label}"


def parse_service(name: str) -> tuple[str, str, str]:
    """``(base service, kind, value)`` of a service name: kind ``""`` (a general service, value ""),
    ``"host"``, ``"rack"`` or ``"label"`` (:func:`pinned_service`)."""
    base, sep, where = name.partition("@")
    if not sep:
        return name, "", ""
    if where.startswith(_RACK):
        return base, "rack", where[len(_RACK):]
    if where.startswith(_LABEL):
        return base, "label", where[len(_LABEL):]
    return base, "host", where
