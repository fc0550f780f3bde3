"""Live repartitioning: change a logical operator's partition count while the application runs.

The decisions are pure and the I/O stays in :mod:`stram.master.process.master`.
A request is a ``ScaleRequest`` event handled by :mod:`~stram.master.core.repartition`,
which calls into this module; the functions here read the state only through
:class:`StateView` and change nothing:

1. :func:`plan_scale` checks a request against the state, picks the window ``c``
   the new partitions start after, and builds the new physical plan on a copy of
   the current one. It refuses, with a :class:`ScaleRefused` (a ``ValueError``)
   that says why, anything it cannot do safely; nothing has changed then.
2. The master (instruction ``SplitCheckpoints``) reads the old partitions'
   checkpoints at ``c`` (:attr:`ScaleChange.reads`), :func:`split_states`
   redistributes them over the new partitions with the operator class's
   ``split_state`` (keys dealt out by ``owner_of(count)``), and the master writes
   them as the new partitions' checkpoints at ``c``.
3. The state installs the new plan (event ``ScaleStatesWritten``) and replies with
   what was done (:func:`scale_result`, a :class:`ScaleResult`; the event log says it
   with :func:`scale_messages`), with instructions to launch the new partitions'
   containers and delete the old partitions' checkpoints.

The window ``c`` is the newest checkpoint that every current partition has saved,
not older than any partition's recovery checkpoint (its file still exists) and
not newer than the recovery checkpoint of any operator directly downstream (those
restart from their own recovery checkpoints and must be fed from there by the new
partitions, which publish from ``c + 1``; for an input operator, whose replay differs
from its first run, exactly the recovery checkpoint of everything it redeploys, see
:meth:`~stram.master.core.plan.PhysicalPlan.checkpoint_groups`). ``c`` is at least the
committed window, so the upstream buffer servers still hold every window the new
partitions subscribe to; the new partitions' recovery checkpoint is ``c``, so the
committed window cannot pass it before they have checkpointed again.

What changes: the old partitions (and the unifiers merging them, and an
upstream operator's unifier feeding a single old partition) leave the plan and
are undeployed; their containers, left empty, are released in their next
heartbeat. ``count`` new partitions (new operator ids, partition keys and mask of
``count``) run in new containers. The downstream operators, everything
downstream of them and their in-container partners are redeployed in place from
their recovery checkpoints (the affected set of recovery), so their old
subscriptions close and new ones open. Upstream operators keep running, unless a
publisher tags its payloads with too few hash bits for the new partition mask
(:data:`stram.master.core.plan.PUBLISHER_TAG_MASK` gives 16 partitions of headroom; an
unpartitioned stream has none): then that upstream operator is redeployed with a
wider tag mask too, and the result says so (``upstream_redeployed``).

The stats listener hook (DAG attribute ``STATS_LISTENER``) gets a read-only
view of per-operator stats from :func:`stats_view` and may answer
``{operator: partition count}``; :func:`listener_requests` checks the answer.
"""

from __future__ import annotations

import copy
from dataclasses import dataclass, field
from types import MappingProxyType
from typing import Any, Mapping, Protocol

from stram.common.imports import load_class
from stram.common.partition import owner_of, partition_keys, partition_mask
from stram.master.core.plan import (INLINE_LOCALITIES, ContainerState, OperatorState, PhysicalPlan, PTContainer,
                                    PTInput, PTOperator, affected_operators, port_codec, unifier_class_name)
from stram.master.spec.limits import MAX_PARTITIONS

__all__ = ["ScaleRefused", "StateWrite", "ScaleChange", "ScaleResult", "OperatorStats", "StateView", "plan_scale",
           "split_states", "scale_result", "scale_messages", "stats_view", "listener_requests", "MAX_PARTITIONS"]


class StateView(Protocol):
    """What this module reads of the master's books (:class:`stram.master.core.books.Books`), and all it reads.

    Nothing here changes the state: :func:`plan_scale` builds the new plan on a copy,
    and the state's scale handler installs it (:mod:`stram.master.core.repartition`).
    """

    spec: Any
    plan: PhysicalPlan
    state: str                   #: the application's state (RUNNING, ...)
    app_id: str
    shutdown_requested: bool
    initial_window: int
    window_history: Mapping[int, Any]

    def attr(self, name: str) -> Any: ...

    def journal_key(self) -> tuple: ...


class ScaleRefused(ValueError):
    """A repartitioning request that cannot be carried out (nothing was changed).

    ``transient`` refusals (no common checkpoint yet, operators still deploying)
    may succeed when asked again a little later.
    """

    def __init__(self, message: str, transient: bool = False) -> None:
        super().__init__(message)
        self.transient = transient


@dataclass(frozen=True)
class StateWrite:
    """A checkpoint the master writes before the new plan goes live.

    ``how`` is ``"split"`` (partition ``index`` of the states of ``sources`` split
    over the new partitions), ``"copy"`` (the state of ``sources[0]`` at ``window``)
    or ``"fresh"`` (a new instance of ``class_name``).
    """

    operator_id: int
    window: int
    how: str
    sources: tuple[int, ...] = ()
    index: int = 0
    class_name: str = ""


@dataclass
class ScaleChange:
    """A checked repartitioning, computed on a copy of the plan (see :func:`plan_scale`)."""

    name: str
    class_name: str
    old_count: int
    count: int
    #: The window the new partitions start after (-1: nothing to do).
    window: int = -1
    #: The new physical plan (None: the operator has ``count`` partitions already).
    plan: PhysicalPlan | None = None
    #: MasterState.journal_key() when the change was computed (a stale change is refused).
    base_key: tuple = ()
    #: Old partition ids, by partition index.
    old_ids: list[int] = field(default_factory=list)
    #: Unifiers leaving with the old partitions (theirs, and upstream unifiers feeding them).
    old_unifiers: list[int] = field(default_factory=list)
    #: New partition ids, by partition index.
    new_ids: list[int] = field(default_factory=list)
    new_unifiers: list[int] = field(default_factory=list)
    #: Operators redeployed in place from their recovery checkpoints.
    redeploy: set[int] = field(default_factory=set)
    #: Upstream operators redeployed because their publisher's tag mask was too narrow.
    upstream_redeployed: list[int] = field(default_factory=list)
    launch: list[str] = field(default_factory=list)
    release: list[str] = field(default_factory=list)
    #: Checkpoints the master writes (new ids) and the ones it reads for them (old ids).
    writes: list[StateWrite] = field(default_factory=list)
    reads: list[tuple[int, int]] = field(default_factory=list)

    @property
    def verb(self) -> str:
        """"3 → 5 partitions"."""
        return f"{self.old_count} → {self.count} partitions"


@dataclass
class ScaleResult:
    """What a repartitioning did (returned by ``AppMaster.scale`` and the admin API)."""

    operator: str
    old_count: int
    count: int
    changed: bool
    window: int = -1
    removed: list[dict[str, Any]] = field(default_factory=list)
    added: list[dict[str, Any]] = field(default_factory=list)
    unifiers_removed: list[str] = field(default_factory=list)
    unifiers_added: list[str] = field(default_factory=list)
    containers_launched: list[str] = field(default_factory=list)
    containers_released: list[str] = field(default_factory=list)
    redeployed: list[dict[str, Any]] = field(default_factory=list)
    upstream_redeployed: list[str] = field(default_factory=list)

    def to_dict(self) -> dict[str, Any]:
        return {"operator": self.operator, "from": self.old_count, "to": self.count,
                "changed": self.changed, "window": self.window,
                "window_hex": _w(self.window) if self.window >= 0 else "",
                "removed": self.removed, "added": self.added,
                "unifiers_removed": self.unifiers_removed, "unifiers_added": self.unifiers_added,
                "containers_launched": self.containers_launched,
                "containers_released": self.containers_released,
                "redeployed": self.redeployed, "upstream_redeployed": self.upstream_redeployed}


# ---------------------------------------------------------------- the decision

def plan_scale(state: StateView, name: str, count: int) -> ScaleChange:
    """Check a request to give logical operator ``name`` ``count`` partitions; the change.

    Pure: the current plan is not touched (the new one is built on a copy).

    Raises
    ------
    ScaleRefused
        The request cannot be carried out now or at all; the message says why.
    """
    spec = state.spec
    plan: PhysicalPlan = state.plan
    if state.state != "RUNNING":
        raise ScaleRefused(f"application {state.app_id} is {state.state}; only a running "
                           f"application can be repartitioned")
    if state.shutdown_requested:
        raise ScaleRefused(f"application {state.app_id} is shutting down; not repartitioning {name}")
    if isinstance(count, bool) or not isinstance(count, int):
        raise ScaleRefused(f"partition count must be an integer, got {count!r}")
    if count < 1:
        raise ScaleRefused(f"partition count must be at least 1, got {count}")
    if count > MAX_PARTITIONS:
        raise ScaleRefused(f"partition count must be at most {MAX_PARTITIONS}, got {count}")
    if name not in spec.operators:
        unifier = next((op for op in plan.operators.values() if op.kind == "UNIFIER" and op.name == name),
                       None)
        if unifier is not None:
            raise ScaleRefused(f"{name!r} is a unifier (it merges the partitions of {unifier.unifies!r}); "
                               f"unifiers follow their operator: scale {unifier.unifies!r} instead")
        raise ScaleRefused(f"no operator {name!r} in application {spec.name} "
                           f"(operators: {', '.join(spec.operators)})")
    ospec = spec.operators[name]
    op_cls = ospec.load_class()
    from stram.operator import InputOperator, Operator
    if getattr(op_cls, "external_inputs", False):
        raise ScaleRefused(f"operator {name} reads its input streams itself ({op_cls.__name__}."
                           f"external_inputs); its partitions cannot change while it runs")
    if issubclass(op_cls, InputOperator) and \
            getattr(op_cls.split_state, "__func__", None) is Operator.split_state.__func__:
        raise ScaleRefused(f"operator {name} is an input operator and {op_cls.__name__} does not define "
                           f"split_state(); input operators are repartitioned only when their class "
                           f"says how to split their state")
    for port, stream in spec.input_streams(name).items():
        if stream.locality in INLINE_LOCALITIES:
            raise ScaleRefused(f"operator {name} is {stream.locality} with its upstream "
                               f"{stream.source.operator} (stream {stream.name}); only operators whose "
                               f"streams cross containers can be repartitioned")
        if spec.port_attribute(name, port, "PARTITION_PARALLEL"):
            raise ScaleRefused(f"operator {name} is partitioned in parallel with its upstream "
                               f"{stream.source.operator} (PARTITION_PARALLEL on {name}.{port}); "
                               f"scale them together by relaunching")
    for port, stream in spec.output_streams(name).items():
        for sink in stream.sinks:
            if stream.locality in INLINE_LOCALITIES:
                raise ScaleRefused(f"operator {name} is {stream.locality} with its downstream "
                                   f"{sink.operator} (stream {stream.name}); only operators whose "
                                   f"streams cross containers can be repartitioned")
            if spec.port_attribute(sink.operator, sink.port, "PARTITION_PARALLEL"):
                raise ScaleRefused(f"operator {name}'s downstream {sink.operator} follows its partitioning "
                                   f"(PARTITION_PARALLEL on {sink.operator}.{sink.port}); scale them "
                                   f"together by relaunching")
    parts = plan.partitions(name)
    if not parts:
        raise ScaleRefused(f"operator {name} has no partitions left (they shut down)")
    change = ScaleChange(name=name, class_name=ospec.class_name, old_count=len(parts), count=count)
    if count == len(parts):
        return change
    for p in parts:
        if p.state != OperatorState.ACTIVE:
            raise ScaleRefused(f"partition {p.label} ({p.id}) of {name} is {p.state.value}; "
                               f"try again when every partition is running", transient=True)
    old_ids = [p.id for p in parts]
    up_unifiers = sorted({u for p in old_ids for u in plan.upstream(p)
                          if plan.operators[u].kind == "UNIFIER" and set(plan.downstream(u)) <= set(old_ids)})
    own_unifiers = sorted(op.id for op in plan.operators.values() if op.kind == "UNIFIER" and op.unifies == name)
    for p in parts:  # (CONTAINERS_MAX_COUNT packs operators together, joined by streams or not)
        others = set(plan.containers[p.container].operators if p.container in plan.containers else ()) \
            - {p.id} - set(up_unifiers)
        if others:
            labels = ", ".join(plan.operators[o].label for o in sorted(others))
            raise ScaleRefused(f"partition {p.label} ({p.id}) of {name} shares container {p.container} with "
                               f"{labels}; only operators in containers of their own can be repartitioned")

    # -- the window: newest common checkpoint in [max recovery, min downstream recovery]
    low = max(p.recovery_checkpoint for p in parts)
    downstream = {d for p in old_ids for d in plan.downstream(p)}
    high = min((plan.operators[d].recovery_checkpoint for d in downstream), default=None)
    common = set(parts[0].checkpoints).intersection(*(p.checkpoints for p in parts[1:]))
    usable = [c for c in common if c >= low and (high is None or c <= high) and c > state.initial_window]
    if not usable:
        raise ScaleRefused(f"no common checkpoint of {name} yet; try again in a few seconds", transient=True)
    window = max(usable)

    # -- the new plan, on a copy
    new = copy.deepcopy(plan)
    base_ops = plan.operators
    old_set = set(old_ids) | set(own_unifiers) | set(up_unifiers)
    # old own unifier per (stream, downstream operator): its state moves to the new unifier
    old_unifier_for: dict[tuple[str, int], int] = {}
    for u in own_unifiers:
        for d in plan.downstream(u):
            for inp in base_ops[d].inputs:
                if inp.source_id == u:
                    old_unifier_for[(inp.stream, d)] = u
    # a partitioned downstream keeps its own mask and keys per stream
    down_keys: dict[tuple[str, int], tuple[int, tuple[int, ...]]] = {}
    for d in downstream:
        for inp in base_ops[d].inputs:
            if inp.source_id in old_set:
                down_keys.setdefault((inp.stream, d), (inp.partition_mask, tuple(inp.partition_keys)))
    emptied: set[str] = set()
    for rid in sorted(old_set):
        op = new.operators.pop(rid)
        container = new.containers.get(op.container or "")
        if container is not None:
            container.operators.discard(rid)
            container.pending_deploy.discard(rid)
            if not container.operators:
                emptied.add(container.id)
    for op in new.operators.values():
        op.inputs = [i for i in op.inputs if i.source_id not in old_set]

    template = parts[0]
    kind = "INPUT" if issubclass(op_cls, InputOperator) else "GENERIC"
    mask = partition_mask(count)
    new_parts: list[PTOperator] = []
    for k in range(count):
        cid = new.new_container_id()
        new.put_container(PTContainer(id=cid))
        op = new.add_operator(PTOperator(
            id=0, name=name, kind=kind, class_name=template.class_name,
            properties=copy.deepcopy(template.properties), attributes=dict(template.attributes),
            partition_index=k, partition_count=count, checkpoints=[window],
            recovery_checkpoint=window, current_window=window))
        new.assign(op.id, cid)
        new_parts.append(op)
        change.launch.append(cid)
    new_unifiers: list[int] = []
    writes: list[StateWrite] = [StateWrite(op.id, window, "split", tuple(old_ids), op.partition_index)
                                for op in new_parts]
    republish: set[int] = set()

    # inputs: from the same upstream operators, with the new mask and keys
    for port, stream in spec.input_streams(name).items():
        src = stream.source
        ups = new.partitions(src.operator)
        if not ups:
            continue
        codec = stream.codec or port_codec(spec.operators[src.operator].load_class(), src.port)
        if count == 1 and len(ups) > 1:
            (op,) = new_parts
            unifier = new.add_operator(PTOperator(
                id=0, name=f"{src.operator}.{src.port}.unifier", kind="UNIFIER",
                class_name=unifier_class_name(spec.operators[src.operator].load_class()),
                attributes=dict(op.attributes), unifies=src.operator, checkpoints=[window],
                recovery_checkpoint=window, current_window=window))
            for up in ups:
                unifier.inputs.append(PTInput("input", stream.name, up.id, src.port, None, codec=codec))
            unifier.outputs["output"] = stream.name
            op.inputs.append(PTInput(port, stream.name, unifier.id, "output", "THREAD_LOCAL", codec=codec))
            new.assign(unifier.id, op.container or "")
            new_unifiers.append(unifier.id)
            writes.append(StateWrite(unifier.id, window, "fresh", class_name=unifier.class_name))
            continue
        for op in new_parts:
            keys = tuple(partition_keys(count, op.partition_index)) if count > 1 else ()
            for up in ups:
                op.inputs.append(PTInput(port, stream.name, up.id, src.port, None, mask, keys, codec))
        if count > 1:
            for up in ups:
                tags = up.publisher_masks.get(src.port)
                if tags is None:
                    tags = plan.output_mask(up.id, src.port)
                if mask & ~tags:
                    republish.add(up.id)

    # outputs: a unifier for an unpartitioned downstream, else the downstream's own keys
    for port, stream in spec.output_streams(name).items():
        for op in new_parts:
            op.outputs[port] = stream.name
        codec = stream.codec or port_codec(op_cls, port)
        for sink in stream.sinks:
            downs = new.partitions(sink.operator)
            reads_itself = getattr(spec.operators[sink.operator].load_class(), "external_inputs", False)
            if len(downs) == 1 and count > 1 and not reads_itself:  # (as PhysicalPlan.from_spec does)
                (down,) = downs
                unifier = new.add_operator(PTOperator(
                    id=0, name=f"{name}.{port}.unifier", kind="UNIFIER", class_name=unifier_class_name(op_cls),
                    attributes=dict(down.attributes), unifies=name, checkpoints=[down.recovery_checkpoint],
                    recovery_checkpoint=down.recovery_checkpoint, current_window=down.recovery_checkpoint))
                for op in new_parts:
                    unifier.inputs.append(PTInput("input", stream.name, op.id, port, None, codec=codec))
                unifier.outputs["output"] = stream.name
                down.inputs.append(PTInput(sink.port, stream.name, unifier.id, "output", "THREAD_LOCAL",
                                           codec=codec))
                new.assign(unifier.id, down.container or "")
                new_unifiers.append(unifier.id)
                old_u = old_unifier_for.get((stream.name, down.id))
                r = down.recovery_checkpoint
                if old_u is not None and (r in base_ops[old_u].checkpoints
                                          or r == base_ops[old_u].recovery_checkpoint):
                    writes.append(StateWrite(unifier.id, r, "copy", (old_u,)))
                else:
                    writes.append(StateWrite(unifier.id, r, "fresh", class_name=unifier.class_name))
                continue
            for down in downs:
                if len(downs) > 1:
                    dmask, dkeys = down_keys.get((stream.name, down.id)) or (
                        partition_mask(down.partition_count),
                        tuple(partition_keys(down.partition_count, down.partition_index)))
                else:
                    dmask, dkeys = 0, ()
                for op in new_parts:
                    down.inputs.append(PTInput(sink.port, stream.name, op.id, port, None, dmask, dkeys, codec))
    for op in new.operators.values():
        if op.kind in ("GENERIC", "OIO"):
            op.kind = "OIO" if op.inputs and all(i.locality == "THREAD_LOCAL" for i in op.inputs) else "GENERIC"

    fresh = {op.id for op in new_parts} | set(new_unifiers)
    redeploy = affected_operators(new, fresh | republish) - fresh
    for op_id in sorted(redeploy):
        op = base_ops.get(op_id)
        if op is None or op.state != OperatorState.ACTIVE:
            what = op.state.value if op is not None else "not deployed"
            raise ScaleRefused(f"operator {new.operators[op_id].label} ({op_id}), which repartitioning {name} "
                               f"redeploys, is {what}; try again once it runs", transient=True)
    if kind == "INPUT" and any(base_ops[o].recovery_checkpoint != window for o in redeploy):  # see above
        raise ScaleRefused(f"what {name} feeds does not restart from window {_w(window)} as {name} would; "
                           f"try again in a few seconds", transient=True)
    limit = state.attr("CONTAINERS_MAX_COUNT")
    if limit:
        live = [c for c in new.containers.values()
                if c.operators and c.state in (ContainerState.PENDING, ContainerState.RUNNING,
                                               ContainerState.WAITING)]
        if len(live) + len(change.launch) > int(limit):
            raise ScaleRefused(f"{count} partitions of {name} need {len(live) + len(change.launch)} "
                               f"containers; CONTAINERS_MAX_COUNT is {limit}")

    change.window = window
    change.plan = new
    change.base_key = state.journal_key()
    change.old_ids = old_ids
    change.old_unifiers = sorted(set(own_unifiers) | set(up_unifiers))
    change.new_ids = [op.id for op in new_parts]
    change.new_unifiers = new_unifiers
    change.redeploy = redeploy
    change.upstream_redeployed = sorted(republish)
    change.release = sorted(emptied)
    change.writes = writes
    change.reads = sorted({(s, w.window) for w in writes if w.how in ("split", "copy") for s in w.sources})
    return change


def split_states(change: ScaleChange, states: Mapping[tuple[int, int], dict[str, Any]]
                 ) -> dict[tuple[int, int], dict[str, Any]]:
    """The checkpoints to write: ``(new operator id, window) -> state``.

    ``states`` holds the old checkpoints named in ``change.reads``. The old
    partitions' states go through ``split_state(states, count, owner_of(count))``
    of the operator class; new unifiers get their predecessor's state or a fresh one.

    Raises
    ------
    ScaleRefused
        ``split_state`` failed or returned something else than ``count`` dicts.
    """
    if not change.writes:
        return {}
    op_cls = load_class(change.class_name)
    old = [states[(oid, change.window)] for oid in change.old_ids]
    try:
        split = op_cls.split_state(old, change.count, owner_of(change.count))
    except Exception as exc:  # noqa: BLE001 - operator code
        raise ScaleRefused(f"{op_cls.__name__}.split_state failed: {type(exc).__name__}: {exc}") from None
    split = list(split) if split is not None else []
    if len(split) != change.count or not all(isinstance(s, dict) for s in split):
        raise ScaleRefused(f"{op_cls.__name__}.split_state returned {len(split)} states for "
                           f"{change.count} partitions; expected a list of {change.count} dicts")
    out: dict[tuple[int, int], dict[str, Any]] = {}
    for w in change.writes:
        if w.how == "split":
            out[(w.operator_id, w.window)] = split[w.index]
        elif w.how == "copy":
            out[(w.operator_id, w.window)] = states[(w.sources[0], w.window)]
        else:
            out[(w.operator_id, w.window)] = load_class(w.class_name)().get_state()
    return out


def scale_result(change: ScaleChange, old_plan: PhysicalPlan, new_plan: PhysicalPlan) -> ScaleResult:
    """What installing ``change`` (``old_plan`` → ``new_plan``, its checkpoints written) did."""
    result = ScaleResult(change.name, change.old_count, change.count, changed=True, window=change.window)
    for rid in change.old_ids + change.old_unifiers:
        op = old_plan.operators[rid]
        if op.kind == "UNIFIER":
            result.unifiers_removed.append(op.label)
        else:
            result.removed.append({"id": rid, "label": op.label, "container": op.container})
    ops = new_plan.operators
    for op_id in sorted(change.redeploy):
        op = ops[op_id]
        result.redeployed.append({"id": op_id, "label": op.label, "container": op.container,
                                  "checkpoint": op.recovery_checkpoint})
    for op_id in change.new_ids:
        op = ops[op_id]
        keys = sorted({k for i in op.inputs for k in i.partition_keys})
        result.added.append({"id": op_id, "label": op.label, "container": op.container,
                             "mask": partition_mask(change.count) if change.count > 1 else 0, "keys": keys})
    result.unifiers_added = [ops[u].label for u in change.new_unifiers]
    result.containers_launched = list(change.launch)
    result.containers_released = list(change.release)
    result.upstream_redeployed = [old_plan.operators[u].label for u in change.upstream_redeployed]
    return result


def scale_messages(change: ScaleChange, result: ScaleResult, source: str = "request") -> list[str]:
    """The event-log lines (kind "scale") that say what a repartitioning did."""
    by = "" if source == "request" else f" (asked by the {source})"
    messages = [f"{change.name}: {change.verb} from window {_w(change.window)}{by}: removed "
                f"{_labels(result.removed)}; added {_labels(result.added)}"
                + (f"; unifiers {', '.join(result.unifiers_removed) or '-'} → "
                   f"{', '.join(result.unifiers_added) or '-'}"
                   if result.unifiers_removed or result.unifiers_added else "")
                + f"; launching {', '.join(change.launch)}"
                + (f"; releasing {', '.join(change.release)}" if change.release else "")]
    if result.upstream_redeployed:
        messages.append(f"{change.name}: upstream {', '.join(result.upstream_redeployed)} "
                        f"redeployed: its publisher tagged too few hash bits for "
                        f"{change.count} partitions")
    messages.append(f"{change.name}: redeploying " + (", ".join(
        f"{r['label']}@{_w(r['checkpoint'])}" for r in result.redeployed) or "nothing downstream"))
    return messages


# ---------------------------------------------------------------- the stats listener

@dataclass(frozen=True)
class OperatorStats:
    """One logical operator as the stats listener sees it (a snapshot; changing it changes nothing)."""

    name: str
    class_name: str
    #: Physical partitions now, and how many of them are running.
    partitions: int
    active: int
    #: Tuples per second over the recent windows, all partitions together
    #: (tuples out, or in for operators emitting nothing, as ``MasterState.throughput``).
    tuples_per_sec: float
    #: Tuples arriving per second, all partitions together.
    input_tuples_per_sec: float
    partition_tuples_per_sec: tuple[float, ...]
    #: Newest window any partition finished; the oldest recovery checkpoint.
    latest_window: int
    recovery_checkpoint: int


def stats_view(state: StateView) -> Mapping[str, OperatorStats]:
    """Per logical operator stats for the listener: a read-only mapping of snapshots."""
    view: dict[str, OperatorStats] = {}
    for name, ospec in state.spec.operators.items():
        parts = state.plan.partitions(name)
        if not parts:
            continue
        rates = tuple(round(_output_rate(state, p.id), 1) for p in parts)
        view[name] = OperatorStats(
            name=name, class_name=ospec.class_name, partitions=len(parts),
            active=sum(1 for p in parts if p.state == OperatorState.ACTIVE),
            tuples_per_sec=round(sum(rates), 1),
            input_tuples_per_sec=round(sum(_input_rate(state, p.id) for p in parts), 1),
            partition_tuples_per_sec=rates,
            latest_window=max(p.current_window for p in parts),
            recovery_checkpoint=min(p.recovery_checkpoint for p in parts))
    return MappingProxyType(view)


def listener_requests(view: Mapping[str, OperatorStats], answer: Any) -> list[tuple[str, int]]:
    """What a listener's answer asks for: ``(operator, count)`` pairs that change something.

    Raises
    ------
    ValueError
        The answer is neither None nor a mapping of operator names to integer counts.
    """
    if answer is None:
        return []
    if not isinstance(answer, Mapping):
        raise ValueError(f"the stats listener returned {type(answer).__name__}; expected "
                         f"{{operator: partition count}} or None")
    wanted = []
    for name, count in answer.items():
        if isinstance(count, bool) or not isinstance(count, int):
            raise ValueError(f"the stats listener asked for {count!r} partitions of {name!r}; "
                             f"expected an integer")
        current = view.get(name)
        if current is not None and current.partitions == count:
            continue
        wanted.append((str(name), count))
    return wanted


def _output_rate(state: StateView, op_id: int) -> float:
    history = state.window_history.get(op_id)  # tuples out a second (in, for an operator emitting none)
    return history.rate() if history else 0.0


def _input_rate(state: StateView, op_id: int) -> float:
    history = state.window_history.get(op_id)
    return history.rate(inputs_only=True) if history else 0.0


def _labels(rows: list[dict[str, Any]]) -> str:
    return ", ".join(f"{r['label']} ({r['id']})" for r in rows) or "-"


def _w(window: int) -> str:
    return f"{window & 0xFFFFFFFFFFFFFFFF:x}"
