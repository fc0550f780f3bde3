"""Drawn applications and event sequences for the pure MasterState tests of the incremental paths.

:func:`random_spec` draws a small DAG (sources, relays, a join, sinks; 1-3
partitions; streams inside a container or not); :class:`Driver` draws events
for a :class:`~stram.master.core.state.MasterState` as agents, the launcher and the
clock would send them (heartbeats with windows and checkpoints, operators
that shut down or fail, containers that exit, ticks, repartitioning) and
keeps its simulated agents in step with the responses.
"""

from __future__ import annotations

import random
from typing import Any

from statekit import START_MILLIS, container_heartbeat

from stram import wire as proto
from stram.master.core import scaling
from stram.master.core.events import ContainerExited, Heartbeat, MasterEvent, ScaleRequest, Tick
from stram.master.core.state import MasterState, Reply, SplitCheckpoints
from stram.master.spec import AppSpec

ACTIVE, SHUTDOWN, FAILED = (proto.OperatorHeartbeat.ACTIVE, proto.OperatorHeartbeat.SHUTDOWN,
                            proto.OperatorHeartbeat.FAILED)


def random_spec(rng: random.Random) -> str:
    """A valid spec text (drawn until the validator accepts one)."""
    while True:
        names: list[tuple[str, str, int]] = []  # (name, class, partitions)
        for i in range(rng.randint(1, 2)):
            names.append((f"src{i}", "Source", rng.randint(1, 3)))
        for i in range(rng.randint(0, 3)):
            names.append((f"mid{i}", "Upper", rng.randint(1, 3)))
        join = rng.random() < 0.3 and len(names) >= 2
        if join:
            names.append(("join", "Join", rng.randint(1, 2)))
        if rng.random() < 0.4:  # reads its input itself (as a Spark pipeline): Apex's rule on its stream
            names.append(("self0", "SelfReader", 1))
        for i in range(rng.randint(1, 2)):
            names.append((f"out{i}", "Sink", rng.randint(1, 3)))
        feeds: dict[str, list[str]] = {}  # upstream -> input ports it feeds
        for k, (name, cls, _) in enumerate(names):
            producers = [n for n, c, _ in names[:k] if c not in ("Sink", "SelfReader")]
            if cls == "Join":
                left, right = rng.sample(producers, 2)
                feeds.setdefault(left, []).append("join.left")
                feeds.setdefault(right, []).append("join.right")
            elif cls != "Source":
                feeds.setdefault(rng.choice(producers), []).append(f"{name}.input")
        lines = ["name: drawn", "attributes:", "  CHECKPOINT_WINDOW_COUNT: 2", "  HEARTBEAT_TIMEOUT_MILLIS: 8000",
                 "operators:"]
        lines += [f"  {n}: {{class: spec_fixture_ops:{c}, partitions: {p}}}" for n, c, p in names]
        lines.append("streams:")
        for k, (up, sinks) in enumerate(feeds.items()):
            locality = rng.choice(["", "", ", locality: CONTAINER_LOCAL", ", locality: THREAD_LOCAL"])
            lines.append(f"  s{k}: {{from: {up}.output, to: [{', '.join(sinks)}]{locality}}}")
        text = "\n".join(lines) + "\n"
        try:
            AppSpec.from_yaml(text)
        except Exception:  # noqa: BLE001 - a drawn combination the validator refuses: draw again
            continue
        return text


def new_state(text: str) -> MasterState:
    state = MasterState(AppSpec.from_yaml(text), "app-drawn", "file:///tmp/app-drawn", "tok", START_MILLIS, 0)
    return state


class Driver:
    """Draws the next event for a state and follows its answers as the agents would."""

    def __init__(self, state: MasterState, rng: random.Random) -> None:
        self.state = state
        self.rng = rng
        self.now = 0
        #: container id -> {operator id: its current window}
        self.agents: dict[str, dict[int, int]] = {}
        self.ended: set[int] = set()

    def events(self) -> list[MasterEvent]:
        """The next event (a scale request is two: the request and the written states)."""
        rng, state = self.rng, self.state
        self.now += rng.randint(50, 400)
        live = [c for c in state.plan.containers.values() if c.state in ("PENDING", "RUNNING")]
        roll = rng.random()
        if roll < 0.85 and live:  # mostly the container that waited longest
            live.sort(key=lambda c: c.last_heartbeat_millis)
            return [self._heartbeat(live[0].id if rng.random() < 0.7 else rng.choice(live).id)]
        if roll < 0.88 and live:
            cid = rng.choice(live).id
            self.agents.pop(cid, None)
            return [ContainerExited(cid, 1, self.now)]
        if roll < 0.9:
            names = sorted({op.name for op in state.plan.operators.values() if op.kind != "UNIFIER"})
            if names:
                return [ScaleRequest(rng.choice(names), rng.randint(1, 3), self.now)]
        return [Tick(self.now)]

    def _heartbeat(self, cid: str) -> Heartbeat:
        rng, base = self.rng, self.state.initial_window
        reports = []
        for op_id, window in sorted(self.agents.get(cid, {}).items()):
            op = self.state.plan.operators.get(op_id)
            new = window + rng.choice([0, 1, 1, 2, 3])
            saved = [w for w in range(window + 1, new + 1) if (w - base) % 2 == 0 and rng.random() < 0.95]
            kind = ACTIVE
            if op_id in self.ended:
                kind, new, saved = SHUTDOWN, window, []
            elif op is not None and op.kind == "INPUT" and rng.random() < 0.02:
                kind = SHUTDOWN
                self.ended.add(op_id)
            elif rng.random() < 0.003:
                kind = FAILED
            self.agents[cid][op_id] = new
            reports.append(proto.OperatorHeartbeat(node_id=op_id, state=kind, current_window_id=new,
                                                   saved_checkpoints=saved))
        return Heartbeat(container_heartbeat(cid, reports), self.now)

    def follow(self, event: MasterEvent, instructions: list[Any]) -> None:
        """What the agent of a heartbeat does with its response."""
        if not isinstance(event, Heartbeat):
            return
        cid = event.heartbeat.container_id
        (response,) = [i.value for i in instructions if isinstance(i, Reply)]
        agent = self.agents.setdefault(cid, {})
        for op_id in response.undeploy_request:
            agent.pop(op_id, None)
            self.ended.discard(op_id)
        for info in response.deploy_request:
            agent[info.id] = info.checkpoint.window_id
            self.ended.discard(info.id)
        if response.shutdown:
            self.agents.pop(cid, None)


def handle(state: MasterState, event: MasterEvent) -> list[Any] | None:
    """``state.handle(event)`` as the master's dispatcher does it (checkpoints split in memory);
    None when the event was refused (nothing changed)."""
    try:
        instructions = state.handle(event)
    except ValueError:  # a refused scale request
        return None
    out = []
    for ins in instructions:
        if isinstance(ins, SplitCheckpoints):
            scaling.split_states(ins.change, {key: {"totals": {}} for key in ins.change.reads})
            out += handle(state, ins.then) or []
        else:
            out.append(ins)
    return out
