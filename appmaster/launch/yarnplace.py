"""Which Skein service a container request goes to: a pinned one (a node, a rack, a node label) or the general one.

Skein 0.8 places containers per service, so the client adds services pinned to each node
(``container@<host>``), rack (``container@rack=<rack>``) and node label
(``container@label=<label>``) of each container shape (:mod:`stram.common.skeinkeys`).
:class:`PinnedServices` reads them from the application's spec and picks one per
:class:`~stram.master.launch.local.ContainerRequest`:

1. a node label the request asks for: that label's service;
2. the first wanted host (``hosts``) not in ``avoid`` that has a pinned service;
3. a wanted rack: its service, or, when an avoided host is in that rack, the least used
   host of the rack not avoided;
4. with hosts to avoid (the blacklist): the least used pinned host not avoided;
5. else the general service (YARN puts it anywhere).

The choice says whether it was asked for (1-3: the request's ``relax`` decides what
happens when it is not allocated in time) or only steers away from the blacklist (4:
always relaxed).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Mapping

from stram.common.skeinkeys import RACK_ENV, parse_service

__all__ = ["Choice", "PinnedServices"]


@dataclass(frozen=True)
class Choice:
    """A service for a request: its name, where it pins (``"host 127.0.0.3"``; "" for the general
    service), whether the request asked for that place (not only to avoid hosts), and the host
    when it pins one."""

    service: str
    where: str = ""
    wanted: bool = False
    host: str | None = None


class PinnedServices:
    """The pinned services of each general container service, by host, rack and label.

    Parameters
    ----------
    services:
        Skein service name -> ``skein.Service`` (or any object with ``env``): the application's services.
    """

    def __init__(self, services: Mapping[str, Any]) -> None:
        #: general service -> kind ("host", "rack", "label") -> value -> pinned service name
        self.by_base: dict[str, dict[str, dict[str, str]]] = {}
        #: host -> rack, from the services pinned to hosts ("" when the client did not say)
        self.racks: dict[str, str] = {}
        for name, svc in services.items():
            base, kind, value = parse_service(name)
            if not kind:
                continue
            self.by_base.setdefault(base, {}).setdefault(kind, {})[value] = name
            if kind == "host":
                self.racks[value] = str((getattr(svc, "env", None) or {}).get(RACK_ENV, ""))

    def names(self) -> list[str]:
        """Every pinned service's name."""
        return [n for kinds in self.by_base.values() for values in kinds.values() for n in values.values()]

    def nodes(self) -> list[tuple[str, str]]:
        """(host, rack) of every node some service is pinned to."""
        return sorted(self.racks.items())

    def choose(self, base: str, request: Any, usage: Mapping[str, int]) -> Choice:
        """The service for ``request`` (a ContainerRequest) of shape ``base`` (a general service name);
        ``usage``: host -> containers this application holds or asked for there."""
        pinned = self.by_base.get(base, {})
        hosts, racks, labels = pinned.get("host", {}), pinned.get("rack", {}), pinned.get("label", {})
        avoid = set(request.avoid or ())
        label = getattr(request, "node_label", None)
        if label and label in labels:
            return Choice(labels[label], f"node label {label}", True)
        for host in request.hosts or ():
            if host not in avoid and host in hosts:
                return Choice(hosts[host], f"host {host}", True, host)
        for rack in getattr(request, "racks", ()) or ():
            if avoid & {h for h, r in self.racks.items() if r == rack}:
                host = _least_used([h for h in hosts if self.racks.get(h) == rack and h not in avoid], usage)
                if host is not None:
                    return Choice(hosts[host], f"host {host} (rack {rack})", True, host)
            elif rack in racks:
                return Choice(racks[rack], f"rack {rack}", True)
        if avoid:
            host = _least_used([h for h in hosts if h not in avoid], usage)
            if host is not None:
                return Choice(hosts[host], f"host {host} (avoiding {', '.join(sorted(avoid))})", False, host)
        return Choice(base)


def _least_used(hosts: list[str], usage: Mapping[str, int]) -> str | None:
    """The host with the fewest of this application's containers (ties: the first by name)."""
    return min(sorted(hosts), key=lambda h: usage.get(h, 0)) if hosts else None
