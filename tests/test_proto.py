"""The committed generated modules are exactly what proto/codegen.py makes now."""

from __future__ import annotations

import pathlib

from proto import codegen

PROTO_DIR = pathlib.Path(codegen.__file__).parent


def test_generated_modules_are_current(tmp_path):
    generated = codegen.generate(tmp_path)
    for path in generated:
        committed = PROTO_DIR / path.name
        assert committed.read_text() == path.read_text(), (
            f"{committed} is stale: run `python proto/codegen.py` and commit the result")


def test_seed_fields_present():
    import proto
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
