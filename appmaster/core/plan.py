"""The physical plan: partitions, unifiers, locality groups and containers.

Built from a validated :class:`stram.master.spec.AppSpec` (the logical plan).
Pure data and functions: no sockets, no files, no clocks. A plan owns the
trackers of what changed in it (:class:`~stram.master.core.changes.PlanChanges`,
its ``changes``): the operators and containers it takes in report to them.
"""

from __future__ import annotations

import enum
import logging
import time
from dataclasses import dataclass, field
from typing import Any, Iterable

from stram.common.partition import partition_keys, partition_mask
from stram.master.core.changes import PlanChanges, Tracked, attach, touch, untracked
from stram.master.spec.affinity import resolve_rules

__all__ = ["OperatorState", "ContainerState", "PTInput", "PTOperator", "PTContainer", "PhysicalPlan",
           "INLINE_LOCALITIES", "ALIVE", "GONE", "affected_operators"]

INLINE_LOCALITIES = ("THREAD_LOCAL", "CONTAINER_LOCAL")

log = logging.getLogger("stram.master.core.plan")
#: Plans with more physical operators than this log their progress (the master's log).
BIG_PLAN = 200

#: Publishers feeding partitioned subscribers tag payloads with at least this many hash bits,
#: so that an operator can be repartitioned to up to 16 partitions while its upstream runs on.
PUBLISHER_TAG_MASK = 0xF


class OperatorState(enum.StrEnum):
    """Life of a physical operator on the master (str-valued: JSON, the admin API and the
    journal show the names)."""

    PENDING_DEPLOY = "PENDING_DEPLOY"   #: waiting for its container to ask
    DEPLOYING = "DEPLOYING"             #: sent in a deploy request, not yet reported
    ACTIVE = "ACTIVE"                   #: reported running
    SHUTDOWN = "SHUTDOWN"               #: ended (ShutdownException / END_STREAM); parked
    FAILED = "FAILED"                   #: reported failed; awaiting recovery


class ContainerState(enum.StrEnum):
    """Life of a container on the master (str-valued, like :class:`OperatorState`)."""

    WAITING = "WAITING"     #: restart backoff: launched once the clock passes ``launch_at``
    PENDING = "PENDING"     #: launch asked, the agent has not heartbeated yet
    RUNNING = "RUNNING"     #: the agent heartbeats
    LOST = "LOST"           #: exited, timed out or killed; its operators went elsewhere
    RELEASED = "RELEASED"   #: no longer needed (emptied, or the application ended)


#: Containers with a process the master asked for and may still have to stop.
ALIVE = (ContainerState.PENDING, ContainerState.RUNNING)
#: Containers that will never run operators again.
GONE = (ContainerState.LOST, ContainerState.RELEASED)


@dataclass(slots=True)
class PTInput:
    """One upstream source of an input port of a physical operator."""

    port: str
    stream: str
    source_id: int
    source_port: str
    #: Declared locality of the stream (None: across containers allowed).
    locality: str | None = None
    partition_mask: int = 0
    partition_keys: tuple[int, ...] = ()
    codec: str = "pickle"


@dataclass(slots=True)
class PTOperator(Tracked):
    """A physical operator: one partition of a logical operator, or a unifier."""

    id: int
    name: str
    kind: str  #: INPUT, GENERIC, UNIFIER or OIO
    class_name: str
    properties: dict[str, Any] = field(default_factory=dict)
    attributes: dict[str, Any] = field(default_factory=dict)
    partition_index: int = 0
    partition_count: int = 1
    inputs: list[PTInput] = field(default_factory=list)
    #: output port -> stream name
    outputs: dict[str, str] = field(default_factory=dict)
    #: For a unifier: the logical operator whose partitions it merges.
    unifies: str | None = None
    container: str | None = None
    state: OperatorState = OperatorState.PENDING_DEPLOY
    #: Windows of the checkpoints this operator has saved, ascending.
    checkpoints: list[int] = field(default_factory=list)
    #: Window this operator would restart from (state after that window).
    recovery_checkpoint: int = -1
    #: Last window the operator reported finished.
    current_window: int = -1
    #: The window the operator shut down at (state SHUTDOWN).
    shutdown_window: int | None = None
    restarts: int = 0
    last_error: str = ""
    #: Wall-clock millis when current_window last advanced.
    window_advanced_millis: int = 0
    #: AT_MOST_ONCE recovery: subscribe from this window instead of replaying.
    resume_window: int = 0
    #: Output port -> tag mask its publisher was last deployed with (subscribers may not exceed it).
    publisher_masks: dict[str, int] = field(default_factory=dict)

    @property
    def label(self) -> str:
        if self.kind == "UNIFIER":
            return f"{self.name}#{self.id}"
        if self.partition_count > 1:
            return f"{self.name}[{self.partition_index}]"
        return self.name

    @property
    def source_ids(self) -> set[int]:
        return {i.source_id for i in self.inputs}


@dataclass(slots=True)
class PTContainer(Tracked):
    """A container group: operators that run in one process."""

    id: str
    operators: set[int] = field(default_factory=set)
    state: ContainerState = ContainerState.PENDING
    host: str = ""
    buffer_server: tuple[str, int] | None = None
    last_heartbeat_millis: int = 0
    process: str = ""
    #: The process the launcher started for it (0: not known) and its start time
    #: (``psutil`` create_time): what a new master attempt checks before taking it over.
    pid: int = 0
    process_started: float = 0.0
    memory_mb: int = 0
    vcores: int = 1
    #: Given up on because it went silent (no heartbeat, or never started): when its process is seen
    #: to end, that counts against its node (a node lost with its containers looks like this first).
    unresponsive: bool = False
    #: Killed because someone asked (``stram kill-container``): its end is not its node's failure.
    kill_requested: bool = False
    #: Operators placed here but not yet sent in a deploy request.
    pending_deploy: set[int] = field(default_factory=set)
    #: WAITING containers: launch once the clock passes this (restart backoff); PENDING
    #: containers: when the launch was asked.
    launch_at: int = 0
    #: Memory the agent last reported using (MB).
    memory_used_mb: int = 0
    #: The agent's buffer-server publishers as last reported: name -> memory_bytes,
    #: spilled_bytes, windows, first_window, last_window.
    publishers: dict[str, dict[str, int]] = field(default_factory=dict)
    #: After the end: the operators its last heartbeat said were still ending ("name (id)").
    ending: list[str] = field(default_factory=list)


class PhysicalPlan:
    """Physical operators and the containers they are placed in."""

    def __init__(self) -> None:
        self.operators: dict[int, PTOperator] = {}
        self.containers: dict[str, PTContainer] = {}
        #: The id the next operator added gets (ids are never reused).
        self.next_operator_id = 1
        #: The number of the next container id (``container_000001`` ...; never reused).
        self.next_container_number = 1
        #: What changed in this plan, for its readers (the journal, the committed window); the
        #: committed window follows operators only (a container's state is not an operator's).
        self.changes = PlanChanges(committed_types=(PTOperator,))

    # ------------------------------------------------------------- building
    @classmethod
    def from_spec(cls, spec: Any, initial_checkpoint: int = -1,
                  max_containers: int | None = None) -> "PhysicalPlan":
        """Partitions, unifiers and container placement for a logical plan."""
        with untracked():  # a new plan: whoever reads it reads it whole
            return cls._from_spec(spec, initial_checkpoint, max_containers)

    @classmethod
    def _from_spec(cls, spec: Any, initial_checkpoint: int, max_containers: int | None) -> "PhysicalPlan":
        plan = cls()
        started = time.monotonic()
        total = sum(o.partitions for o in spec.operators.values())
        big = total > BIG_PLAN
        if big:
            log.info("planning %d partitions of %d operators", total, len(spec.operators))
        parts: dict[str, list[PTOperator]] = {}
        for name in spec.topological_order():
            ospec = spec.operators[name]
            op_cls = ospec.load_class()
            from stram.operator import InputOperator
            kind = "INPUT" if issubclass(op_cls, InputOperator) else "GENERIC"
            n = ospec.partitions
            attrs = _operator_attributes(spec, name)
            parts[name] = [plan.add_operator(PTOperator(
                id=0, name=name, kind=kind, class_name=ospec.class_name,
                properties=dict(ospec.properties), attributes=attrs,
                partition_index=i, partition_count=n,
                checkpoints=[], recovery_checkpoint=initial_checkpoint,
                current_window=initial_checkpoint)) for i in range(n)]
        thread_groups: list[set[int]] = []
        groups: list[set[int]] = []
        for sname, stream in spec.streams.items():
            upstream = parts[stream.source.operator]
            up_cls = spec.operators[stream.source.operator].load_class()
            codec = stream.codec or port_codec(up_cls, stream.source.port)
            for sink in stream.sinks:
                downstream = parts[sink.operator]
                port_attrs = spec.operators[sink.operator].port_attributes.get(sink.port, {})
                parallel = bool(port_attrs.get("PARTITION_PARALLEL")) and len(upstream) == len(downstream)
                loc = stream.locality if stream.locality in INLINE_LOCALITIES else None
                if parallel or (loc and len(upstream) == len(downstream)):
                    for up, down in zip(upstream, downstream):
                        down.inputs.append(PTInput(sink.port, sname, up.id, stream.source.port, loc, codec=codec))
                        if loc:
                            (thread_groups if loc == "THREAD_LOCAL" else groups).append({up.id, down.id})
                elif len(downstream) == 1 and len(upstream) > 1 and not getattr(
                        spec.operators[sink.operator].load_class(), "external_inputs", False):
                    # (an operator reading its inputs itself gets every upstream partition: no unifier)
                    down = downstream[0]
                    unifier = plan.add_operator(PTOperator(
                        id=0, name=f"{stream.source.operator}.{stream.source.port}.unifier", kind="UNIFIER",
                        class_name=unifier_class_name(up_cls), attributes=dict(down.attributes),
                        unifies=stream.source.operator, recovery_checkpoint=initial_checkpoint,
                        current_window=initial_checkpoint))
                    for up in upstream:
                        unifier.inputs.append(PTInput("input", sname, up.id, stream.source.port, None, codec=codec))
                    unifier.outputs["output"] = sname
                    down.inputs.append(PTInput(sink.port, sname, unifier.id, "output", "THREAD_LOCAL", codec=codec))
                    thread_groups.append({unifier.id, down.id})
                else:
                    n = len(downstream)
                    mask = partition_mask(n)
                    for j, down in enumerate(downstream):
                        keys = tuple(partition_keys(n, j)) if n > 1 else ()
                        for up in upstream:
                            down.inputs.append(PTInput(sink.port, sname, up.id, stream.source.port, None,
                                                       mask if n > 1 else 0, keys, codec))
            for up in upstream:
                up.outputs[stream.source.port] = sname
            if big:
                log.info("planning: stream %s wired (%d physical operators so far, %.2f s)",
                         sname, len(plan.operators), time.monotonic() - started)
        groups += _container_affinity(spec, parts)
        for op in plan.operators.values():
            if op.kind == "GENERIC" and op.inputs and all(
                    i.locality == "THREAD_LOCAL" for i in op.inputs):
                op.kind = "OIO"
        plan._place(thread_groups + groups, max_containers)
        if big:
            log.info("planned %d physical operators in %d containers in %.2f s", len(plan.operators),
                     len(plan.containers), time.monotonic() - started)
        return plan

    def add_operator(self, op: PTOperator) -> PTOperator:
        """Add a new operator under the next operator id (assigned to ``op.id``); ``op``."""
        op.id = self.next_operator_id
        self.next_operator_id += 1
        return self.put_operator(op)

    def put_operator(self, op: PTOperator) -> PTOperator:
        """Hold ``op`` under its own id; from now on its changes mark this plan's trackers."""
        self.operators[op.id] = op
        attach(op, self.changes)
        touch(op)
        return op

    def put_container(self, container: PTContainer) -> PTContainer:
        """Hold ``container`` under its own id; from now on its changes mark this plan's trackers."""
        self.containers[container.id] = container
        attach(container, self.changes)
        touch(container)
        return container

    def new_container_id(self) -> str:
        cid = f"container_{self.next_container_number:06d}"
        self.next_container_number += 1
        return cid

    def _place(self, links: Iterable[set[int]], max_containers: int | None) -> None:
        """One container per locality group, merged down to ``max_containers`` (round robin: a
        stage's partitions spread over the containers, beside the next stage's). Merged containers
        feed each other both ways, and keyed streams run inside one: see :func:`_inline` and
        :func:`stram.master.core.heartbeat.deployable`."""
        sets = _DisjointSets(self.operators)
        for link in links:
            first, *rest = sorted(link)
            for other in rest:
                sets.join(other, first)
        groups: dict[int, list[int]] = {}
        for op_id in sorted(self.operators):
            groups.setdefault(sets.find(op_id), []).append(op_id)
        ordered = list(groups.values())
        if max_containers and len(ordered) > max_containers:
            merged: list[list[int]] = [[] for _ in range(max_containers)]
            for i, members in enumerate(ordered):
                merged[i % max_containers].extend(members)
            ordered = merged
        for members in ordered:
            container = self.put_container(PTContainer(id=self.new_container_id()))
            for op_id in members:
                self.assign(op_id, container.id)

    def assign(self, op_id: int, container_id: str) -> None:
        op = self.operators[op_id]
        if op.container and op.container in self.containers:
            self.containers[op.container].operators.discard(op_id)
            self.containers[op.container].pending_deploy.discard(op_id)
            touch(self.containers[op.container])
        op.container = container_id
        container = self.containers[container_id]
        container.operators.add(op_id)
        container.pending_deploy.add(op_id)
        touch(container)
        container.memory_mb = max(container.memory_mb, int(op.attributes.get("CONTAINER_MEMORY_MB", 0) or 0))
        container.vcores = max(container.vcores, int(op.attributes.get("VCORES", 1) or 1))

    # ------------------------------------------------------------- queries
    def downstream(self, op_id: int) -> list[int]:
        """Operators with an input fed by ``op_id``."""
        return [o.id for o in self.operators.values() if op_id in o.source_ids]

    def downstream_map(self) -> dict[int, list[int]]:
        """Every operator's :meth:`downstream` at once, in one pass over the inputs."""
        out: dict[int, list[int]] = {op_id: [] for op_id in self.operators}
        for op in self.operators.values():
            for src in op.source_ids:
                if src in out:
                    out[src].append(op.id)
        return out

    def inline_groups(self) -> dict[int, frozenset[int]]:
        """Every operator's :meth:`inline_group` at once (one pass over the inputs)."""
        return self._groups(across_containers=False)

    def checkpoint_groups(self) -> dict[int, frozenset[int]]:
        """The groups whose members share one recovery checkpoint: operators joined by streams, except
        streams into or out of an operator that reads its input streams itself.

        An input operator's replay is not its first run (a Kafka reader restarted after window ``c``
        puts other records in windows ``c+1, c+2, ...`` than before), so neither is the replay of
        anything downstream of it. An operator restarting after a later window than its upstream
        would skip replayed windows it never saw, or see records again: everything an input feeds,
        directly or not, must restart with it from one common checkpoint, and every operator is
        downstream of some input. (Apex's rule, an operator's newest checkpoint not after its
        downstream's, is exact only for inputs that replay the same windows.)

        Operators that read their input streams themselves (an input operator with inputs, such as a
        Spark pipeline) report the windows their own engine committed, never common with others:
        their streams keep Apex's rule.
        """
        return self._groups(across_containers=True)

    def _groups(self, across_containers: bool) -> dict[int, frozenset[int]]:
        ops = self.operators
        sets = _DisjointSets(ops)
        for op in ops.values():
            for inp in op.inputs:
                source = ops.get(inp.source_id)
                if source is not None and (_inline(source, op, inp) or (
                        across_containers and not _reads_itself(source) and not _reads_itself(op))):
                    sets.join(inp.source_id, op.id)
        members: dict[int, set[int]] = {}
        for op_id in ops:
            members.setdefault(sets.find(op_id), set()).add(op_id)
        groups = {root: frozenset(ids) for root, ids in members.items()}
        return {op_id: groups[sets.find(op_id)] for op_id in ops}

    def upstream(self, op_id: int) -> list[int]:
        op = self.operators.get(op_id)
        return sorted(op.source_ids & self.operators.keys()) if op else []

    def inline_group(self, op_id: int) -> set[int]:
        """Operators connected to ``op_id`` by streams that stay in one container."""
        group = {op_id}
        frontier = [op_id]
        while frontier:
            current = self.operators[frontier.pop()]
            neighbours = [i.source_id for i in current.inputs if self.is_inline(current, i)]
            neighbours += [d for d in self.downstream(current.id)
                           if any(i.source_id == current.id and self.is_inline(self.operators[d], i)
                                  for i in self.operators[d].inputs)]
            for n in neighbours:
                if n in self.operators and n not in group:
                    group.add(n)
                    frontier.append(n)
        return group

    def is_inline(self, op: PTOperator, inp: PTInput) -> bool:
        """Whether an input stays inside the container (no buffer server): see :func:`_inline`."""
        source = self.operators.get(inp.source_id)
        return source is not None and _inline(source, op, inp)

    def output_mask(self, op_id: int, port: str, downstream: list[int] | None = None) -> int:
        """Tag mask of an output port's publisher: 0 when no subscriber is partitioned, else the
        largest subscriber mask widened to :data:`PUBLISHER_TAG_MASK` (headroom for repartitioning).
        ``downstream``: :meth:`downstream` of ``op_id`` when the caller has it."""
        masks = [i.partition_mask for d in (self.downstream(op_id) if downstream is None else downstream)
                 for i in self.operators[d].inputs if i.source_id == op_id and i.source_port == port]
        widest = max(masks, default=0)
        return widest | PUBLISHER_TAG_MASK if widest else 0

    def partitions(self, name: str) -> list[PTOperator]:
        """The physical partitions of a logical operator (no unifiers), by partition index."""
        return sorted((op for op in self.operators.values() if op.name == name and op.kind != "UNIFIER"),
                      key=lambda op: (op.partition_index, op.id))

    def to_dict(self) -> dict[str, Any]:
        """A JSON-ready description (journal and admin API)."""
        return {
            "operators": [_op_dict(op) for op in self.operators.values()],
            "containers": [{"id": c.id, "operators": sorted(c.operators), "state": c.state,
                            "host": c.host, "buffer_server": list(c.buffer_server) if c.buffer_server else None,
                            "memory_mb": c.memory_mb, "vcores": c.vcores}
                           for c in self.containers.values()],
        }


def affected_operators(plan: PhysicalPlan, failed: Iterable[int]) -> set[int]:
    """Operators to redeploy when ``failed`` are lost: them, everything downstream,
    and the operators sharing an in-container stream with any of those."""
    affected: set[int] = set()
    downstream, groups = plan.downstream_map(), plan.inline_groups()
    frontier = list(failed)
    while frontier:
        op_id = frontier.pop()
        if op_id in affected or op_id not in plan.operators:
            continue
        affected.add(op_id)
        frontier.extend(downstream[op_id])
        frontier.extend(groups[op_id])
    return affected


def _op_dict(op: PTOperator) -> dict[str, Any]:
    return {
        "id": op.id, "name": op.name, "label": op.label, "kind": op.kind, "class": op.class_name,
        "partition": [op.partition_index, op.partition_count], "container": op.container,
        "state": op.state.value, "current_window": op.current_window,
        "recovery_checkpoint": op.recovery_checkpoint, "checkpoints": list(op.checkpoints),
        "shutdown_window": op.shutdown_window, "restarts": op.restarts, "last_error": op.last_error,
        "inputs": [{"port": i.port, "stream": i.stream, "source": i.source_id, "source_port": i.source_port,
                    "locality": i.locality, "mask": i.partition_mask, "keys": list(i.partition_keys)}
                   for i in op.inputs],
        "outputs": dict(op.outputs),
    }


def _container_affinity(spec: Any, parts: dict[str, list[PTOperator]]) -> list[set[int]]:
    """CONTAINER_LOCAL AFFINITY rules: partition i of each operator listed in one container (the spec
    check made their partition counts equal), like a CONTAINER_LOCAL stream would."""
    links: list[set[int]] = []
    for rule in resolve_rules(spec):
        if rule.type == "AFFINITY" and rule.locality == "CONTAINER_LOCAL":
            for members in zip(*(parts[name] for name in rule.operators)):
                links.append({op.id for op in members})
    return links


def _operator_attributes(spec: Any, name: str) -> dict[str, Any]:
    """DAG attributes overlaid with the operator's own (what its context sees)."""
    merged = dict(spec.attributes)
    merged.update(spec.operators[name].attributes)
    return merged


def port_codec(op_cls: type, port: str) -> str:
    from stram.operator import operator_ports
    p = operator_ports(op_cls).get(port)
    return getattr(p, "codec", "pickle") or "pickle"


def unifier_class_name(op_cls: type) -> str:
    unifier = getattr(op_cls, "unifier_class", None)
    if unifier is None:
        return "stram.operator:PassThroughUnifier"
    return f"{unifier.__module__}:{unifier.__qualname__}"


def _inline(source: PTOperator, op: PTOperator, inp: PTInput) -> bool:
    """Whether ``op`` gets its input ``inp`` from ``source`` in its own process, not from a buffer server.

    Only when both run in one container, and not even then for a partitioned input (an inline stream
    hands over everything its source emits; the buffer server picks out the partition's keys) or for
    an operator that reads its input streams itself (it reads them from a buffer server). Packing
    (CONTAINERS_MAX_COUNT) puts such streams' ends in one container: they go through its own buffer
    server, as across containers.
    """
    return source.container == op.container and not inp.partition_mask and not _reads_itself(op)


def _reads_itself(op: PTOperator) -> bool:
    """An input operator with input streams: it reads them itself (and checkpoints on its own)."""
    return op.kind == "INPUT" and bool(op.inputs)


class _DisjointSets:
    """Union-find over operator ids (path halving): which operators end up in one group."""

    def __init__(self, ids: Iterable[int]) -> None:
        self.parent = {i: i for i in ids}

    def find(self, x: int) -> int:
        parent = self.parent
        while parent[x] != x:
            parent[x] = parent[parent[x]]
            x = parent[x]
        return x

    def join(self, a: int, b: int) -> None:
        """Put ``a``'s group into ``b``'s."""
        self.parent[self.find(a)] = self.find(b)
