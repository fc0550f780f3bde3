"""The core's one edge to the wire: protobuf messages made from the core's own values.

Only this module of :mod:`stram.master.core` imports :mod:`stram.wire`. The rest of
the core decides on its plain values (the plan's operators and containers, ids,
windows, lists) and hands them here to become what agents read: a heartbeat
response (:func:`heartbeat_response`), an init context (:func:`init_context`), an
operator's deploy info (:func:`deploy_info`).

What comes in is read where it arrives: a ``ContainerHeartbeat`` is read field by
field by the heartbeat's handler (:mod:`stram.master.core.heartbeat`), never copied
into other objects first (the hot path: 2,000 containers of 10 operators send
2,000 a second), and its operators' states compare with :data:`REPORTED_ACTIVE`,
:data:`REPORTED_SHUTDOWN` and :data:`REPORTED_FAILED`.
"""

from __future__ import annotations

import functools
import json
from typing import Any, Iterable, Mapping

from stram import wire as proto
from stram.common.imports import load_class
from stram.common.secret import buffer_server_key, scoped_credential
from stram.master.core.plan import PhysicalPlan, PTOperator

__all__ = ["REPORTED_ACTIVE", "REPORTED_SHUTDOWN", "REPORTED_FAILED", "SHUTDOWN_OPERATOR", "heartbeat_response",
           "init_context", "deploy_info", "attribute_json"]

#: An operator's state as its heartbeat reports it (``OperatorHeartbeat.state``).
REPORTED_ACTIVE = proto.OperatorHeartbeat.ACTIVE
REPORTED_SHUTDOWN = proto.OperatorHeartbeat.SHUTDOWN
REPORTED_FAILED = proto.OperatorHeartbeat.FAILED
#: The request asking an input operator to end its stream (a node request's type, by name).
SHUTDOWN_OPERATOR = "SHUTDOWN_OPERATOR"

_LOCALITY = {"THREAD_LOCAL": proto.THREAD_LOCAL, "CONTAINER_LOCAL": proto.CONTAINER_LOCAL}
_OP_TYPE = {kind: proto.OperatorDeployInfo.OperatorType.Value(kind) for kind in ("INPUT", "GENERIC", "UNIFIER", "OIO")}
_REQUEST_TYPE = proto.StramToNodeRequest.RequestType.Value


def heartbeat_response(interval: int, committed: int, shutdown: bool = False, stack_trace_required: bool = False,
                       undeploy: Iterable[int] = (), resets: Iterable[str] = (),
                       node_requests: Iterable[tuple[int, str]] = (), upstream_windows: Mapping[int, int] | None = None,
                       ended_upstreams: Mapping[int, int] | None = None,
                       deploys: Iterable[Any] = (),
                       watermark_ceilings: Mapping[int, int] | None = None) -> proto.ContainerHeartbeatResponse:
    """A ``ContainerHeartbeatResponse``: the interval to the next heartbeat, the committed window, and
    what the container must do (shut down, send its stack, undeploy or deploy operators (``deploys``:
    :func:`deploy_info`'s), reset publishers, pass ``(operator id, request type)`` requests on;
    ``watermark_ceilings``: :mod:`.alignment`'s)."""
    response = proto.ContainerHeartbeatResponse(heartbeat_interval_millis=interval, committed_window_id=committed)
    if shutdown:
        response.shutdown = True
    if stack_trace_required:
        response.stack_trace_required = True
    if undeploy:
        response.undeploy_request.extend(undeploy)
    if resets:
        response.reset_publishers.extend(resets)
    if node_requests:
        response.node_requests.extend(proto.StramToNodeRequest(operator_id=op_id, request_type=_REQUEST_TYPE(kind))
                                      for op_id, kind in node_requests)
    if upstream_windows:
        response.upstream_windows.update(upstream_windows)
    if ended_upstreams:
        response.ended_upstreams.update(ended_upstreams)
    if deploys:
        response.deploy_request.extend(deploys)
    if watermark_ceilings:
        response.watermark_ceilings.update(watermark_ceilings)
    return response


@functools.lru_cache(maxsize=4096)
def _json_scalar(kind: type, value: Any) -> str:
    return json.dumps(value)


def attribute_json(value: Any) -> str:
    """``json.dumps(value)``; a str, int, bool or None once per distinct value (a deploy of
    20,000 operators encodes the same few attribute values 100,000 times). Not floats: 0.0 and
    -0.0 are equal keys with different JSON."""
    kind = type(value)
    if kind is str or kind is int or kind is bool or value is None:
        return _json_scalar(kind, value)  # by type too: True and 1 are equal keys, not the same JSON
    return json.dumps(value)


def init_context(container_id: str, start_window_millis: int, interval: int, window_millis: int,
                 checkpoint_windows: int, app_id: str, app_name: str, app_path: str, token: str,
                 attributes: Mapping[str, Any]) -> proto.StreamingContainerContext:
    """A container's ``StreamingContainerContext``: who it is, the windows' clock, its buffer server's
    key (derived from the application's ``token``) and the DAG ``attributes`` (as JSON)."""
    ctx = proto.StreamingContainerContext(
        container_id=container_id, start_window_millis=start_window_millis, heartbeat_interval_millis=interval,
        streaming_window_size_millis=window_millis, checkpoint_window_count=checkpoint_windows,
        deploy_buffer_server=True, app_id=app_id, app_name=app_name, app_path=app_path,
        buffer_server_token=buffer_server_key(token, container_id).encode())
    for name, value in attributes.items():
        ctx.attributes[name] = attribute_json(value)
    return ctx


def deploy_info(plan: PhysicalPlan, op: PTOperator, token: str, downstream: list[int],
                tag_masks: Mapping[str, int]) -> proto.OperatorDeployInfo:
    """``op``'s ``OperatorDeployInfo`` (its inputs' sources must be placed): its inputs (inline, or a
    remote publisher's buffer server with a credential for that one stream), its outputs (tagged with
    ``tag_masks``, published on its own buffer server when a subscriber is in another container)
    and its checkpoint. ``downstream``: the operators ``op`` feeds."""
    info = proto.OperatorDeployInfo(id=op.id, type=_OP_TYPE[op.kind], name=op.name, class_name=op.class_name,
                                    partition_index=op.partition_index,
                                    partition_count=op.partition_count)
    info.checkpoint.window_id = op.recovery_checkpoint
    for k, v in op.properties.items():
        info.properties[k] = attribute_json(v)
    for k, v in op.attributes.items():
        info.context_attributes[k] = attribute_json(v)
    if op.resume_window > op.recovery_checkpoint + 1:
        info.context_attributes["RESUME_FROM_WINDOW"] = json.dumps(op.resume_window)
    for inp in op.inputs:
        src = plan.operators[inp.source_id]
        d = info.inputs.add(port_name=inp.port, declared_stream_id=inp.stream,
                            source_node_id=inp.source_id, source_port_name=inp.source_port)
        d.stream_codecs[0] = inp.codec
        if plan.is_inline(op, inp):
            d.locality = _LOCALITY["THREAD_LOCAL" if inp.locality == "THREAD_LOCAL" and op.kind == "OIO"
                                   else "CONTAINER_LOCAL"]
        else:
            host, port = plan.containers[src.container].buffer_server or ("", 0)
            d.buffer_server_host, d.buffer_server_port = host, port
            # good for this one stream on that one server (stram.common.secret)
            d.buffer_server_token = scoped_credential(
                buffer_server_key(token, src.container), "subscribe",
                f"{inp.source_id}.{inp.source_port}").encode()
            d.partition_mask = inp.partition_mask
            d.partition_keys.extend(inp.partition_keys)
    for port, stream in op.outputs.items():
        subscribers = [(d, i) for d in downstream
                       for i in plan.operators[d].inputs if i.source_id == op.id and i.source_port == port]
        remote = any(not plan.is_inline(plan.operators[d], i) for d, i in subscribers)
        out = info.outputs.add(port_name=port, declared_stream_id=stream, remote=remote,
                               partition_mask=tag_masks[port])
        if remote:
            host, bport = plan.containers[op.container].buffer_server or ("", 0)
            out.buffer_server_host, out.buffer_server_port = host, bport
            out.buffer_server_token = scoped_credential(
                buffer_server_key(token, op.container), "publish", f"{op.id}.{port}").encode()
        out.stream_codecs[0] = subscribers[0][1].codec if subscribers else "pickle"
        key = _partition_key(plan, subscribers)
        if key:
            out.context_attributes[PARTITION_KEY] = key
    return info


#: Output deploy info's context attribute naming the key the port's tuples are partitioned by
#: (:func:`stram.common.partition.key_function`); absent: the default key.
PARTITION_KEY = "PARTITION_KEY"


def _partition_key(plan: PhysicalPlan, subscribers: list) -> str | None:
    """The key spec the partitioned subscribers of a port ask for (the first that asks)."""
    for d, inp in subscribers:
        if not inp.partition_mask:
            continue
        down = plan.operators[d]
        try:
            cls = _operator_class(down.class_name)
        except Exception:  # noqa: BLE001 - the spec check loaded it already; a class gone is no key
            continue
        key = cls.partition_key(down.properties, inp.port) if hasattr(cls, "partition_key") else None
        if key:
            return key
    return None


@functools.lru_cache(maxsize=256)
def _operator_class(class_name: str) -> type:
    return load_class(class_name)
