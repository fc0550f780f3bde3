"""The committed generated modules are exactly what proto/codegen.py makes now."""

from __future__ import annotations

import pathlib

from stram.wire import codegen

PROTO_DIR = pathlib.Path(codegen.__file__).parent


def test_generated_modules_are_current(tmp_path):
    generated = codegen.generate(tmp_path)
    for path in generated:
        committed = PROTO_DIR / path.name
        assert committed.read_text() == path.read_text(), (
            f"{committed} is stale: run `python proto/codegen.py` and commit the result")


def test_seed_fields_present():
    from stram import wire as proto
    hb = proto.ContainerHeartbeat.DESCRIPTOR.fields_by_name
    for name in ("buffer_server_host", "buffer_server_port", "jvm_name", "memory_mb_free",
                 "restart_requested", "gc_collection_time", "gc_collection_count", "container_stats"):
        assert name in hb
    stats = proto.OperatorStats.DESCRIPTOR.fields_by_name
    for name in ("window_id", "checkpoint", "input_ports", "output_ports", "cpu_time_used",
                 "checkpoint_stats", "metrics"):
        assert name in stats
    resp = proto.ContainerHeartbeatResponse.DESCRIPTOR.fields_by_name
    for name in ("shutdown", "node_requests", "has_pending_requests", "undeploy_request",
                 "deploy_request", "committed_window_id", "stack_trace_required"):
        assert name in resp
    assert set(proto.OperatorDeployInfo.OperatorType.keys()) == {"INPUT", "UNIFIER", "GENERIC", "OIO"}
    assert set(proto.OperatorHeartbeat.DeployState.keys()) >= {"ACTIVE", "SHUTDOWN", "FAILED"}


def test_an_agent_sends_each_windows_port_totals_the_master_reads():
    """The agent's OperatorStats carry the totals over the ports; the master's fallback for an
    agent without them (port_totals) gives the same three numbers from the ports."""
    import collections
    import types

    from stram.agent.agent import Agent
    from stram.agent.engine.node import NodeState, WindowStats
    from stram.master.core.reports import port_totals
    agent = Agent.__new__(Agent)
    agent.interval = 1.0
    stats = collections.deque([
        WindowStats(window_id=7, checkpoint=5, input_counts={"a": 3, "b": 4}, output_counts={"out": 11, "err": 1},
                    end_window_timestamp=1_700_000_000_123, cpu_nanos=9, queue_size=2),
        WindowStats(window_id=8, checkpoint=5, input_counts={}, output_counts={"out": 2},
                    end_window_timestamp=1_700_000_000_456, cpu_nanos=9, queue_size=0)])
    node = types.SimpleNamespace(id=3, state=NodeState.ACTIVE, stats=stats, current_window=8, saved_checkpoints=[])
    ohb = agent._operator_heartbeat(node, 1_700_000_000_500)
    got = [(ws.tuples_in, ws.tuples_out, ws.end_window_millis) for ws in ohb.window_stats]
    assert got == [(7, 12, 1_700_000_000_123), (0, 2, 1_700_000_000_456)]
    assert [port_totals(ws) for ws in ohb.window_stats] == got
