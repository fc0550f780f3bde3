"""What the master tells agents: a container's init context and an operator's deploy info.

A mixin of :class:`~stram.master.core.state.MasterState`: both are built from the
plan (placements, buffer servers, partition masks, recovery checkpoints).
"""

from __future__ import annotations

import functools
import json
from typing import Any

from stram import wire as proto
from stram.common.secret import buffer_server_key, scoped_credential
from stram.master.core.changes import structure
from stram.master.core.events import UnknownContainer
from stram.master.core.plan import PTOperator
from stram.master.core.recovery import GONE

__all__ = ["DAG_ATTRIBUTES", "DeployMessages"]

#: The DAG attributes sent in every init context (an agent takes any other from the attribute table).
DAG_ATTRIBUTES = (
    "STREAMING_WINDOW_SIZE_MILLIS", "HEARTBEAT_INTERVAL_MILLIS", "HEARTBEAT_TIMEOUT_MILLIS",
    "HEARTBEAT_MAX_INTERVAL_MILLIS", "CHECKPOINT_WINDOW_COUNT", "TIMEOUT_WINDOW_COUNT", "PROCESSING_MODE",
    "RECOVERY_ATTEMPTS", "BUFFER_MEMORY_MB", "BUFFER_LAG_MB", "BUFFER_SPOOLING", "CONTAINERS_MAX_COUNT",
    "CONTAINER_MEMORY_MB",
    "BLOCK_INTERVAL_MILLIS", "RECEIVER_WAL", "RECEIVER_MAX_RESTARTS", "DEBUG",
    "RETRY_DETERMINISTIC_FAILURES", "DISK_FULL_TIMEOUT_SECS", "END_TIMEOUT_SECS",
)

_LOCALITY = {"THREAD_LOCAL": proto.THREAD_LOCAL, "CONTAINER_LOCAL": proto.CONTAINER_LOCAL}
_OP_TYPE = {kind: proto.OperatorDeployInfo.OperatorType.Value(kind) for kind in ("INPUT", "GENERIC", "UNIFIER", "OIO")}


@functools.lru_cache(maxsize=4096)
def _json_scalar(kind: type, value: Any) -> str:
    return json.dumps(value)


def _json(value: Any) -> str:
    """``json.dumps(value)``; a str, int, bool or None once per distinct value (a deploy of
    20,000 operators encodes the same few attribute values 100,000 times). Not floats: 0.0 and
    -0.0 are equal keys with different JSON."""
    kind = type(value)
    if kind is str or kind is int or kind is bool or value is None:
        return _json_scalar(kind, value)  # by type too: True and 1 are equal keys, not the same JSON
    return json.dumps(value)


class DeployMessages:
    """The messages to agents that :class:`~stram.master.core.state.MasterState` builds."""

    plan: Any
    token: str
    #: The master's :class:`stram.master.core.pacing.HeartbeatPacer` (None: the configured interval, always).
    pacer: Any = None

    def _downstream_map(self) -> dict[int, list[int]]:
        """The plan's :meth:`~stram.master.core.plan.PhysicalPlan.downstream_map`, kept while its shape
        stays (deploying a plan of n operators reads it n times)."""
        plan = self.plan
        key = (structure(), len(plan.operators), plan.next_operator_id, plan.next_container_number)
        cached = getattr(self, "_downstream_cache", None)
        if cached is None or cached[0] is not plan or cached[1] != key:
            cached = self._downstream_cache = (plan, key, plan.downstream_map())
        return cached[2]

    def heartbeat_interval_millis(self) -> int:
        """The heartbeat interval to ask containers for: the pacer's, else HEARTBEAT_INTERVAL_MILLIS."""
        if self.pacer is not None:
            return self.pacer.interval_ms
        return int(self.attr("HEARTBEAT_INTERVAL_MILLIS"))  # type: ignore[attr-defined]

    def asked_interval_millis(self, container_id: str, now: int, sent: int = 0) -> int:
        """The interval the answer at ``now`` to ``container_id``'s heartbeat sent at ``sent`` asks
        for: the pacer's, in the container's slot (:meth:`HeartbeatPacer.ask_ms`)."""
        return self.pacer.ask_ms(container_id, now, sent) if self.pacer is not None \
            else self.heartbeat_interval_millis()

    def init_context(self, container_id: str) -> proto.StreamingContainerContext:
        """A container's init context (a query: changes nothing).

        Raises
        ------
        UnknownContainer
            The plan does not know the container, or it was lost or released.
        """
        container = self.plan.containers.get(container_id)
        if container is None or container.state in GONE:
            raise UnknownContainer(container_id)
        ctx = proto.StreamingContainerContext(
            container_id=container_id, start_window_millis=self.start_window_millis,
            # the configured interval, not the paced one: its first heartbeat is answered with its deploy
            heartbeat_interval_millis=int(self.attr("HEARTBEAT_INTERVAL_MILLIS")),
            streaming_window_size_millis=int(self.attr("STREAMING_WINDOW_SIZE_MILLIS")),
            checkpoint_window_count=int(self.attr("CHECKPOINT_WINDOW_COUNT")),
            deploy_buffer_server=True, app_id=self.app_id, app_name=self.spec.name,
            app_path=self.app_path,
            buffer_server_token=buffer_server_key(self.token, container_id).encode())
        for name, value in self.attributes.items():
            ctx.attributes[name] = _json(value)
        return ctx

    def deploy_info(self, op: PTOperator) -> proto.OperatorDeployInfo:
        """The deploy request for one operator (its inputs' sources must be placed)."""
        plan = self.plan
        info = proto.OperatorDeployInfo(id=op.id, type=_OP_TYPE[op.kind], name=op.name, class_name=op.class_name,
                                        partition_index=op.partition_index,
                                        partition_count=op.partition_count)
        info.checkpoint.window_id = op.recovery_checkpoint
        for k, v in op.properties.items():
            info.properties[k] = _json(v)
        for k, v in op.attributes.items():
            info.context_attributes[k] = _json(v)
        if op.resume_window > op.recovery_checkpoint + 1:
            info.context_attributes["RESUME_FROM_WINDOW"] = json.dumps(op.resume_window)
        for inp in op.inputs:
            src = plan.operators[inp.source_id]
            d = info.inputs.add(port_name=inp.port, declared_stream_id=inp.stream,
                                source_node_id=inp.source_id, source_port_name=inp.source_port)
            d.stream_codecs[0] = inp.codec
            if src.container == op.container:
                d.locality = _LOCALITY["THREAD_LOCAL" if inp.locality == "THREAD_LOCAL" and op.kind == "OIO"
                                       else "CONTAINER_LOCAL"]
            else:
                host, port = plan.containers[src.container].buffer_server or ("", 0)
                d.buffer_server_host, d.buffer_server_port = host, port
                # good for this one stream on that one server (stram.common.secret)
                d.buffer_server_token = scoped_credential(
                    buffer_server_key(self.token, src.container), "subscribe",
                    f"{inp.source_id}.{inp.source_port}").encode()
                d.partition_mask = inp.partition_mask
                d.partition_keys.extend(inp.partition_keys)
        downstream = self._downstream_map().get(op.id, []) if op.outputs else []
        for port, stream in op.outputs.items():
            subscribers = [(d, i) for d in downstream
                           for i in plan.operators[d].inputs if i.source_id == op.id and i.source_port == port]
            remote = any(plan.operators[d].container != op.container for d, _ in subscribers)
            tag_mask = plan.output_mask(op.id, port, downstream)
            op.publisher_masks = {**op.publisher_masks, port: tag_mask}  # what the running publisher tags with
            out = info.outputs.add(port_name=port, declared_stream_id=stream, remote=remote,
                                   partition_mask=tag_mask)
            if remote:
                host, bport = plan.containers[op.container].buffer_server or ("", 0)
                out.buffer_server_host, out.buffer_server_port = host, bport
                out.buffer_server_token = scoped_credential(
                    buffer_server_key(self.token, op.container), "publish", f"{op.id}.{port}").encode()
            out.stream_codecs[0] = subscribers[0][1].codec if subscribers else "pickle"
        return info
