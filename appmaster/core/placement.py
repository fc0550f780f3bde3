"""Where a container asks to run: wanted hosts and racks, node label, hosts to avoid, and whether YARN may
place it elsewhere (relax).

Rules, from the spec and the plan:

- a stream NODE_LOCAL (RACK_LOCAL) between operators in different containers: both containers on one
  node (rack). A container follows the host of a peer that runs (or was asked for); when none of its
  node group has one, the group gets the least loaded known node. The pairs are the physical streams:
  a NODE_LOCAL stream that fans in, or is keyed (every partition feeds every partition), puts them all
  on one node;
- AFFINITY NODE_LOCAL rules are node groups too (partition i with partition i when the operators have
  the same partition count, else all of them on one node); CONTAINER_LOCAL affinity is the plan's
  (:func:`stram.master.core.plan.PhysicalPlan.from_spec` puts them in one container);
- ANTI_AFFINITY: the hosts where peers run or were asked for are avoided, and the container gets a host
  of its own. With too few nodes a ``relax: true`` rule is dropped for the rest (said in the event log),
  a ``relax: false`` rule fails the application, naming the rule (:func:`check` before anything starts);
- LOCALITY_HOST passes through (after the hosts chosen here), NODE_LABEL is the container's label,
  blacklisted hosts (``books.blacklist``: host -> until millis) are always avoided.

Without known nodes (``books.cluster_nodes`` empty: local mode, or a cluster too big for pinned
services) nothing is chosen: hosts are LOCALITY_HOST's, racks are none.

The rules are read into a :class:`Shape` once per shape of the plan; a launch then costs the size of
the container's own groups, never a pass over every container (but for the load of the nodes, counted
once per clock value, and only when a node must be picked).
"""

from __future__ import annotations

import collections
from dataclasses import dataclass, field
from typing import Any, Iterable

from stram.master.core.plan import ALIVE, ContainerState, PTContainer
from stram.master.spec.affinity import AffinityRule, resolve_rules

__all__ = ["Placement", "Shape", "choose", "check", "blacklisted"]


@dataclass(frozen=True)
class Placement:
    """What a container asks for (the fields of :class:`~stram.master.core.instructions.LaunchContainer`)."""

    hosts: tuple[str, ...] = ()
    racks: tuple[str, ...] = ()
    node_label: str | None = None
    avoid: tuple[str, ...] = ()
    relax: bool = True
    #: A ``relax: false`` rule that cannot hold: the application fails with this diagnostic.
    error: str = ""
    #: Lines for the event log (a rule relaxed).
    notes: tuple[str, ...] = ()


@dataclass
class _Anti:
    """An ANTI_AFFINITY rule over the plan: container id -> the sides it holds (operator names; for a lone
    operator, its partitions), two containers being peers when they hold no side in common."""

    rule: AffinityRule
    sides: dict[str, frozenset[Any]] = field(default_factory=dict)

    @property
    def needs(self) -> int:
        """Nodes the rule needs: one per side."""
        return len(set().union(*self.sides.values())) if self.sides else 0

    def peers(self, cid: str) -> Iterable[str]:
        mine = self.sides.get(cid, frozenset())
        return (c for c, theirs in self.sides.items() if c != cid and not theirs & mine)


class Shape:
    """The placement rules read over one shape of the plan (containers and their operators)."""

    def __init__(self, books: Any) -> None:
        plan, spec = books.plan, books.spec
        ops = plan.operators
        stream_locality = {name: s.locality for name, s in getattr(spec, "streams", {}).items()}
        self.rules = resolve_rules(spec)
        parent: dict[str, str] = {}
        self.rack_peers: dict[str, set[str]] = collections.defaultdict(set)
        #: container id -> LOCALITY_HOST of its operators; its NODE_LABEL
        self.wanted: dict[str, tuple[str, ...]] = {}
        self.labels: dict[str, str] = {}
        #: containers of AFFINITY rules with relax: false
        self.strict: set[str] = set()

        def find(c: str) -> str:
            while parent.get(c, c) != c:
                parent[c] = parent.get(parent[c], parent[c])
                c = parent[c]
            return c

        def join(a: str, b: str) -> None:
            parent.setdefault(a, a)
            parent.setdefault(b, b)
            ra, rb = find(a), find(b)
            if ra != rb:
                parent[max(ra, rb)] = min(ra, rb)

        wanted: dict[str, set[str]] = collections.defaultdict(set)
        for op in ops.values():
            cid = op.container
            if cid is None:
                continue
            host = op.attributes.get("LOCALITY_HOST")
            if host:
                wanted[cid].add(str(host))
            label = op.attributes.get("NODE_LABEL")
            if label and (cid not in self.labels or str(label) < self.labels[cid]):
                self.labels[cid] = str(label)
            for inp in op.inputs:
                source = ops.get(inp.source_id)
                if source is None or source.container is None or source.container == cid:
                    continue
                locality = stream_locality.get(inp.stream)
                if locality == "NODE_LOCAL":
                    join(cid, source.container)
                elif locality == "RACK_LOCAL":
                    self.rack_peers[cid].add(source.container)
                    self.rack_peers[source.container].add(cid)
        self.wanted = {cid: tuple(sorted(hosts)) for cid, hosts in wanted.items()}
        by_name: dict[str, list[Any]] = collections.defaultdict(list)
        for op in ops.values():
            if op.kind != "UNIFIER" and op.container is not None:
                by_name[op.name].append(op)
        for members in by_name.values():
            members.sort(key=lambda o: (o.partition_index, o.id))
        self.antis: list[_Anti] = []
        for rule in self.rules:
            if rule.type == "AFFINITY" and rule.locality == "NODE_LOCAL":
                lists = [by_name.get(name, []) for name in rule.operators]
                if len({len(x) for x in lists}) == 1:
                    pairs = [[o.container for o in group] for group in zip(*lists)]
                else:
                    pairs = [[o.container for x in lists for o in x]]
                for containers in pairs:
                    for other in containers[1:]:
                        join(other, containers[0])
            if rule.type == "AFFINITY" and not rule.relax:
                self.strict.update(o.container for name in rule.operators for o in by_name.get(name, []))
            if rule.type == "ANTI_AFFINITY":
                anti = _Anti(rule)
                lone = len(rule.operators) == 1
                sides: dict[str, set[Any]] = collections.defaultdict(set)
                for name in rule.operators:
                    for o in by_name.get(name, []):
                        sides[o.container].add(o.id if lone else name)
                anti.sides = {c: frozenset(s) for c, s in sides.items()}
                self.antis.append(anti)
        groups: dict[str, list[str]] = collections.defaultdict(list)
        for cid in sorted(parent):
            groups[find(cid)].append(cid)
        #: container id -> every container of its node group (itself included), in id order
        self.node_group: dict[str, list[str]] = {cid: members for members in groups.values() if len(members) > 1
                                                 for cid in members}
        #: container id -> indexes into :attr:`antis` of the rules it is in
        self.anti: dict[str, list[int]] = collections.defaultdict(list)
        for k, anti in enumerate(self.antis):
            for cid in anti.sides:
                self.anti[cid].append(k)

    @property
    def has_rules(self) -> bool:
        """Anything here that only known nodes can honour."""
        return bool(self.node_group or self.rack_peers or self.antis)


class _State:
    """What placement remembers between launches: the hosts (racks) it asked for, the rules it relaxed,
    and the nodes' load at the last clock value."""

    def __init__(self) -> None:
        self.shape: tuple[Any, Shape] | None = None
        self.chosen: dict[str, str] = {}
        self.chosen_rack: dict[str, str] = {}
        self.relaxed: set[int] = set()
        self.unplaced_noted = False
        self.load: tuple[int, collections.Counter[str]] | None = None


def _state(books: Any) -> _State:
    """The books' placement memory (``books.placement``; made on first use)."""
    state = getattr(books, "placement", None)
    if state is None:
        state = _State()
        books.placement = state
    return state


def _shape(books: Any, state: _State) -> Shape:
    plan = books.plan
    key = (id(plan), id(books.spec), plan.changes.structure, len(plan.operators), plan.next_operator_id,
           plan.next_container_number)
    if state.shape is None or state.shape[0] != key:
        state.shape = (key, Shape(books))
    return state.shape[1]


def blacklisted(books: Any, now: int) -> set[str]:
    """Hosts blacklisted at ``now``."""
    return {host for host, until in books.blacklist.items() if until > now}


def _host_of(books: Any, state: _State, cid: str) -> str:
    """Where a live container runs (a RUNNING one's own host) or was asked to ("" : not known)."""
    c: PTContainer | None = books.plan.containers.get(cid)
    if c is None or c.state not in ALIVE:
        return ""
    if c.state == ContainerState.RUNNING and c.host:
        return c.host
    return state.chosen.get(cid, "")


def _load(books: Any, state: _State, now: int) -> collections.Counter[str]:
    """Live containers per host, counted once per clock value (then kept up to date by the picks)."""
    if state.load is None or state.load[0] != now:
        counts: collections.Counter[str] = collections.Counter()
        for c in books.plan.containers.values():
            host = _host_of(books, state, c.id)
            if host:
                counts[host] += 1
        state.load = (now, counts)
    return state.load[1]


def _pick(books: Any, state: _State, order: list[str], exclude: set[str], now: int) -> str:
    """The least loaded known node not excluded (first in the launcher's order on a tie); "" : none."""
    load = _load(books, state, now)
    best, best_load = "", 0
    for host in order:  # in order: the first of the least loaded wins
        if host not in exclude and (not best or load[host] < best_load):
            best, best_load = host, load[host]
    return best


def _usable(books: Any, now: int) -> list[str]:
    black = blacklisted(books, now)
    return [h for h, _ in books.cluster_nodes if h not in black]


def check(books: Any, now: int) -> tuple[str, list[str]]:
    """Before anything starts: the diagnostic of a ``relax: false`` anti-affinity rule the known nodes cannot
    hold ("" : none), and event-log lines for the rules that will be relaxed."""
    state = _state(books)
    shape = _shape(books, state)
    nodes = books.cluster_nodes
    if not nodes:
        if shape.has_rules and not state.unplaced_noted:
            state.unplaced_noted = True
            return "", ["placement rules not applied: the launcher knows no nodes to place on (placement relaxed)"]
        return "", []
    usable = _usable(books, now)
    notes = []
    for k, anti in enumerate(shape.antis):
        rule = anti.rule
        together = [c for c, s in anti.sides.items() if len(s) > 1]
        if together:
            text = (f"{rule.what}: {together[0]} holds more than one of them (CONTAINERS_MAX_COUNT packs them "
                    f"together)")
        elif anti.needs > len(usable):
            text = (f"{rule.what} needs {anti.needs} nodes, the cluster has {len(usable)}"
                    + (f" ({len(nodes) - len(usable)} blacklisted)" if len(usable) < len(nodes) else ""))
        else:
            continue
        if not rule.relax:
            return text + " (relax: false)", notes
        state.relaxed.add(k)
        notes.append(text + ": placed as far apart as the nodes allow (relax: true)")
    return "", notes


def choose(books: Any, container: PTContainer, now: int) -> Placement:
    """The placement of ``container``, about to be launched at ``now`` (remembered for its peers)."""
    state = _state(books)
    shape = _shape(books, state)
    cid = container.id
    wanted = shape.wanted.get(cid, ())
    label = shape.labels.get(cid)
    nodes = books.cluster_nodes
    black = blacklisted(books, now)
    state.chosen.pop(cid, None)
    state.chosen_rack.pop(cid, None)
    if not nodes:
        return Placement(wanted, (), label, tuple(sorted(black)), True)
    order = [h for h, _ in nodes]
    rack_of = dict(nodes)
    exclude = set(black)
    relax = cid not in shape.strict
    error, notes = "", []
    usable = len([h for h in order if h not in black])
    for k in shape.anti.get(cid, ()):
        anti = shape.antis[k]
        taken = {h for h in (_host_of(books, state, p) for p in anti.peers(cid)) if h}
        if not [h for h in order if h not in exclude and h not in taken]:
            if anti.rule.relax:
                if k not in state.relaxed:
                    state.relaxed.add(k)
                    notes.append(f"{anti.rule.what} needs {anti.needs} nodes, the cluster has {usable} usable: "
                                 f"{cid} placed without it (relax: true)")
                continue
            error = (f"{anti.rule.what} needs {anti.needs} nodes, the cluster has {usable} usable "
                     f"({len(order) - usable} blacklisted): no node left for {cid} (relax: false)")
            continue
        exclude |= taken
        relax = relax and anti.rule.relax
    host = ""
    group = shape.node_group.get(cid)
    if group:
        host = next((h for h in (_host_of(books, state, m) for m in group if m != cid) if h), "")
        if host in exclude:
            notes.append(f"{cid}: its node-local peers are on {host}, which it must avoid: placed apart")
            host = ""
        host = host or _pick(books, state, order, exclude, now)
    elif shape.anti.get(cid) and not wanted:
        host = _pick(books, state, order, exclude, now)
    racks: tuple[str, ...] = ()
    if not host and shape.rack_peers.get(cid):
        rack = next((r for r in ((rack_of.get(_host_of(books, state, p)) or state.chosen_rack.get(p))
                                 for p in sorted(shape.rack_peers[cid])) if r), None)
        if rack is None:
            first = _pick(books, state, order, exclude, now)
            rack = rack_of.get(first) if first else None
        if rack:
            racks = (rack,)
            state.chosen_rack[cid] = rack
    if host:
        state.chosen[cid] = host
        if state.load is not None and state.load[0] == now:
            state.load[1][host] += 1
    hosts = ((host,) if host else ()) + tuple(h for h in wanted if h != host)
    return Placement(hosts, racks, label, tuple(sorted(exclude)), relax, error, tuple(notes))
