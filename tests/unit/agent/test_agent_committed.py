"""An operator that ended still gets the newest committed window (container/agent.py).

An operator's thread takes committed windows between windows. A heartbeat's
answer that reaches the agent after the operator's last window, but before the
master has heard of its end, used to queue the committed window for a thread
that was gone. When the next answers carried the same window (the last one),
an exactly-once output never made its last windows final: a Kafka output
left them unpublished and the application still ended SUCCEEDED with part of
its output. Real engine nodes, driven by hand-made heartbeat responses.
"""

from __future__ import annotations

import time

from stram import wire as proto
from stram.agent.agent import Agent
from stram.agent.engine.node import Node, NodeState
from stram.agent.engine.streams import QueueSink
from stram.common.windows import initial_window
from stram.operator import InputOperator, InputPort, Operator, OperatorContext, OutputPort, ShutdownException

WINDOWS = 3


class Windows(InputOperator):
    """Emits one tuple in each of WINDOWS windows, then ends."""

    output = OutputPort()

    def __init__(self) -> None:
        self.emitted = 0
        self.in_window = False

    def begin_window(self, window_id: int) -> None:
        self.in_window = True

    def emit_tuples(self) -> None:
        if self.emitted >= WINDOWS:
            raise ShutdownException("done")
        if self.in_window:
            self.output.emit(self.emitted)
            self.emitted += 1
            self.in_window = False


class Output(Operator):
    """Records the windows it saw, and every committed() and teardown() call in order."""

    input = InputPort()

    def __init__(self) -> None:
        self.windows: list[int] = []
        self.calls: list[tuple[str, int]] = []

    def begin_window(self, window_id: int) -> None:
        self.windows.append(window_id)

    def process_input(self, t) -> None:  # noqa: ANN001
        pass

    def committed(self, window_id: int) -> None:
        self.calls.append(("committed", window_id))

    def teardown(self) -> None:
        self.calls.append(("teardown", 0))


def ended_output(tmp_path) -> tuple[Agent, Node, Output]:
    """An agent whose output operator ran WINDOWS windows and ended; the master has not heard of it."""
    agent = Agent("container_000002", str(tmp_path), "credential", host="127.0.0.1", work_dir=str(tmp_path))
    agent.log = lambda msg, level="INFO": None
    errors: list = []
    agent.report_error = lambda ops, msg: errors.append((ops, msg))
    start = initial_window(int(time.time() * 1000))

    def node(op_id: int, op: Operator, kind: str) -> Node:
        ctx = OperatorContext(id=op_id, name=type(op).__name__, streaming_window_size_millis=20,
                              attributes={"PROCESSING_MODE": "EXACTLY_ONCE"})
        return Node(op_id, ctx.name, op, ctx, kind, start, 1000, None)

    out = Output()
    source, sink = node(1, Windows(), "INPUT"), node(2, out, "GENERIC")
    source.outputs["output"].add_sink(QueueSink(sink, sink.add_source("input")))
    sink.start()
    source.start()
    assert sink.stopped.wait(30) and source.stopped.wait(5)
    assert sink.state == NodeState.SHUTDOWN, sink.error
    assert len(out.windows) >= WINDOWS and not errors
    agent.nodes[sink.id] = sink
    return agent, sink, out


def test_an_ended_operator_gets_the_committed_window_that_came_while_it_was_ending(tmp_path):
    agent, sink, out = ended_output(tmp_path)
    last = out.windows[-1]
    # the answer to a heartbeat sent before the operator ended: the master saw its last checkpoint
    agent._apply(proto.ContainerHeartbeatResponse(committed_window_id=last))
    # the next heartbeat said SHUTDOWN; its answer carries the same (final) committed window
    agent._reported_shutdown.add(sink.id)
    agent._apply(proto.ContainerHeartbeatResponse(committed_window_id=last))
    assert sink.id in agent.finished
    assert out.calls == [("committed", last)]
    # later answers do not repeat it; a newer window is passed on
    agent._apply(proto.ContainerHeartbeatResponse(committed_window_id=last))
    agent._apply(proto.ContainerHeartbeatResponse(committed_window_id=last + 1))
    assert out.calls == [("committed", last), ("committed", last + 1)]


def test_an_operator_undeployed_before_its_end_was_reported_gets_committed_before_teardown(tmp_path):
    agent, sink, out = ended_output(tmp_path)
    last = out.windows[-1]
    agent._apply(proto.ContainerHeartbeatResponse(committed_window_id=last))
    agent._undeploy(sink.id)  # the application ended (shutdown) before the SHUTDOWN was reported
    agent._await_teardown(sink.id)
    assert out.calls == [("committed", last), ("teardown", 0)]


def test_a_running_operator_takes_committed_windows_on_its_own_thread_only(tmp_path):
    """Nothing changes for an operator still running: the value waits for its thread."""
    agent, sink, out = ended_output(tmp_path)
    sink.state = NodeState.ACTIVE  # as if it were still running
    agent._apply(proto.ContainerHeartbeatResponse(committed_window_id=out.windows[-1]))
    assert out.calls == [] and list(sink.requests) == [("committed", out.windows[-1])]


def test_a_deploy_wakes_the_heartbeat_loop_at_once(tmp_path):
    """The heartbeat after a deploy goes at once, not an interval later: the master hears the new
    operators are ACTIVE (and a deploy ends) without waiting out the interval."""
    agent = Agent("container_000002", str(tmp_path), "credential", host="127.0.0.1", work_dir=str(tmp_path))
    deployed: list = []
    agent._deploy = deployed.append
    agent._apply(proto.ContainerHeartbeatResponse(committed_window_id=5))
    assert not agent._wake.is_set() and deployed == []
    agent._apply(proto.ContainerHeartbeatResponse(deploy_request=[proto.OperatorDeployInfo(id=7, name="o")]))
    assert [[i.id for i in infos] for infos in deployed] == [[7]]
    assert agent._wake.is_set()
