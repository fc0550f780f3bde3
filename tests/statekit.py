"""Shared pieces of the pure MasterState tests: labels and hand-written heartbeats."""

from __future__ import annotations

import proto
from appmaster.plan import PTOperator


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
