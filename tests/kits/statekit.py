"""The pure MasterState harness: labels, hand-written heartbeats and :class:`StateRun`."""

from __future__ import annotations

from stram import wire as proto
from stram.master.core import scaling
from stram.master.core.plan import OperatorState, PTOperator
from stram.master.core.state import MasterState, Reply, ScaleRequest, SplitCheckpoints
from stram.master.launch.local import Launcher
from stram.master.spec import AppSpec


def label(op: PTOperator) -> str:
    """How the tests name a physical operator: its label, or "unifier"."""
    return "unifier" if op.kind == "UNIFIER" else op.label


def container_heartbeat(container_id: str, reports) -> proto.ContainerHeartbeat:  # noqa: ANN001
    """A heartbeat from ``container_id`` carrying operator ``reports``, with a buffer server."""
    hb = proto.ContainerHeartbeat(container_id=container_id, buffer_server_host="127.0.0.1",
                                  buffer_server_port=40000 + int(container_id.rsplit("_", 1)[1]),
                                  jvm_name=f"1@{container_id}")
    hb.container_stats.container_id = container_id
    hb.container_stats.operators.extend(reports)
    return hb


#: Start of window index 0 in the pure tests (whole seconds).
START_MILLIS = 1_700_000_000_000
ACTIVE = proto.OperatorHeartbeat.ACTIVE
SHUTDOWN = proto.OperatorHeartbeat.SHUTDOWN


class StateRun:
    """A MasterState driven by hand-written heartbeats; ``validate_state()`` after every step.

    Operators are named by label (``count[1]``, ``unifier``); the names seen at
    the start are remembered, so an operator removed later can still be named.
    Windows are offsets from the initial window: ``w(7)`` is window index 6.
    """

    def __init__(self, text: str, app_id: str = "app-test", token: str = "test-token") -> None:
        self._attach(MasterState(AppSpec.from_yaml(text), app_id, f"file:///tmp/{app_id}", token,
                                 START_MILLIS, 0))

    @classmethod
    def around(cls, state: MasterState) -> "StateRun":
        """Drive a state made elsewhere (a real AppMaster's) the same way; starts it."""
        run = cls.__new__(cls)
        run._attach(state)
        return run

    def _attach(self, state: MasterState) -> None:
        self.state = state
        self.base = self.state.initial_window
        self.now = 0
        #: committed window of every heartbeat response, in order
        self.committed_seen: list[int] = []
        self.ids: dict[str, int] = {label(op): op.id for op in self.state.plan.operators.values()}
        self.containers: dict[str, str] = {label(op): op.container or ""
                                           for op in self.state.plan.operators.values()}
        self.state.start(0)
        self.state.validate_state()

    # -- names
    def w(self, k: int) -> int:
        return self.base + k

    def op(self, name: str) -> PTOperator:
        """The live operator labelled ``name`` (one only), else the one first known by that name."""
        live = [op for op in self.state.plan.operators.values() if label(op) == name]
        if len(live) == 1:
            return live[0]
        if live:
            raise KeyError(f"{name} names {len(live)} operators")
        return self.state.plan.operators[self.ids[name]]

    def ops(self, name: str) -> list[PTOperator]:
        """Partitions of a logical operator (or every unifier, for "unifier")."""
        if name == "unifier":
            return [op for op in self.state.plan.operators.values() if op.kind == "UNIFIER"]
        return self.state.plan.partitions(name)

    def id(self, name: str) -> int:
        live = [op.id for op in self.state.plan.operators.values() if label(op) == name]
        return live[0] if len(live) == 1 else self.ids[name]

    def cid(self, name: str) -> str:
        live = [op for op in self.state.plan.operators.values() if label(op) == name]
        return (live[0].container or "") if len(live) == 1 else self.containers[name]

    def rec(self, name: str) -> int:
        """An operator's recovery checkpoint as a window offset."""
        return self.op(name).recovery_checkpoint - self.base

    def alive(self) -> set[str]:
        return {label(op) for op in self.state.plan.operators.values()}

    def removed(self) -> list[str]:
        return [r["label"].split("#")[0] if ".unifier" in r["label"] else r["label"]
                for r in self.state.info()["removed"]]

    def parked(self) -> dict[int, set[str]]:
        """shutdown_operators as {window offset: labels}."""
        ops = self.state.plan.operators
        return {w - self.base: {label(ops[i]) for i in ids} for w, ids in self.state.shutdown_operators.items()}

    # -- stimuli
    def report(self, name: str | int, cw: int = 0, *saved: int, state: int = ACTIVE) -> proto.OperatorHeartbeat:
        """One operator's part of a heartbeat: finished window ``cw``, checkpoints ``saved``."""
        node_id = name if isinstance(name, int) else self.id(name)
        return proto.OperatorHeartbeat(node_id=node_id, state=state, current_window_id=self.w(cw),
                                       saved_checkpoints=[self.w(k) for k in saved])

    def ended(self, name: str, cw: int, *saved: int) -> proto.OperatorHeartbeat:
        """The one SHUTDOWN report of an operator that ended at window ``cw``."""
        return self.report(name, cw, *saved, state=SHUTDOWN)

    def heartbeat(self, container_id: str, *reports: proto.OperatorHeartbeat):
        self.now += 1000
        hb = container_heartbeat(container_id, reports)
        container = self.state.plan.containers.get(container_id)
        if container is not None and container.pid:  # the process launched as the container speaks
            hb.jvm_name = f"{container.pid}@{container_id}"
        response, instructions = self.state.heartbeat(hb, self.now)
        self.state.validate_state()
        self.committed_seen.append(response.committed_window_id)
        return response, instructions

    def exited(self, container_id: str, code: int = 1):
        self.now += 1000
        instructions = self.state.container_exited(container_id, code, self.now)
        self.state.validate_state()
        return instructions

    def deploy(self) -> None:
        """Heartbeats until every operator is deployed; then every container reports them ACTIVE."""
        plan = self.state.plan
        live = [c for c in plan.containers.values() if c.state not in ("LOST", "RELEASED")]
        for _ in range(len(live) + 2):
            for c in live:  # running operators keep reporting (a missing one would leave the plan)
                self.heartbeat(c.id, *(self.report(o, plan.operators[o].current_window - self.base)
                                       for o in sorted(c.operators)
                                       if plan.operators[o].state == OperatorState.ACTIVE))
            if all(op.state != OperatorState.PENDING_DEPLOY for op in plan.operators.values()):
                break
        assert all(op.state == OperatorState.DEPLOYING for op in plan.operators.values()
                   if op.state != OperatorState.ACTIVE)
        for c in live:
            if c.operators:
                self.heartbeat(c.id, *(self.report(o, plan.operators[o].current_window - self.base)
                                       for o in sorted(c.operators)))
        assert all(op.state == OperatorState.ACTIVE for op in plan.operators.values())

    def everyone(self, cw: int, *saved: int, skip: tuple[str, ...] = ()) -> None:
        """Every running container reports its operators at window ``cw`` with checkpoints ``saved``
        (none for the operators named in ``skip``)."""
        for c in list(self.state.plan.containers.values()):
            ops = [self.state.plan.operators[o] for o in sorted(c.operators)]
            if ops and c.state == "RUNNING":
                self.heartbeat(c.id, *(self.report(op.id, cw, *(() if op.name in skip else saved))
                                       for op in ops))

    def scale(self, name: str, count: int, states: dict | None = None):
        """ScaleRequest → split the states → ScaleStatesWritten, as AppMaster.scale does (no files)."""
        instructions = self.state.handle(ScaleRequest(name, count, self.now))
        written = {}
        for ins in [i for i in instructions if isinstance(i, SplitCheckpoints)]:
            old = {key: (states or {}).get(key[0], {"totals": {}}) for key in ins.change.reads}
            written = scaling.split_states(ins.change, old)
            instructions = self.state.handle(ins.then)
        (result,) = [i.value for i in instructions if isinstance(i, Reply)]
        self.state.validate_state()
        return result.to_dict(), [i for i in instructions if not isinstance(i, Reply)], written


def wordcount(count: int = 3, split: int = 1, lines_locality: str = "CONTAINER_LOCAL",
              counts_locality: str | None = None, extra: str = "") -> str:
    lines = f", locality: {lines_locality}" if lines_locality else ""
    counts = f", locality: {counts_locality}" if counts_locality else ""
    return f"""
name: wc
attributes: {{PROCESSING_MODE: EXACTLY_ONCE{extra}}}
operators:
  reader: {{class: "stram.operators.io:LineReader", properties: {{path: x.txt}}}}
  split: {{class: "stram.operators.text:WordSplitter", partitions: {split}}}
  count: {{class: "stram.operators.aggregate:KeyCounter", partitions: {count}}}
  out: {{class: "stram.operators.io:JsonLinesOutput", properties: {{path: /tmp/x}}}}
streams:
  lines: {{from: reader.output, to: [split.input]{lines}}}
  words: {{from: split.output, to: [count.input]}}
  counts: {{from: count.output, to: [out.input]{counts}}}
"""


class FakeLauncher(Launcher):
    """Records the containers launched; starts no processes."""

    def __init__(self) -> None:
        self.launched: list[str] = []

    def launch(self, request) -> None:
        self.launched.append(request.container_id)

    def kill(self, container_id: str) -> None:
        pass

    def poll(self) -> list:
        return []

    def stop_all(self, grace: float = 5.0) -> None:
        pass

    def running(self) -> list[str]:
        return []
