"""The umbilical protocol, driven through the real gRPC server with the real client."""

from __future__ import annotations

import json
import threading

import grpc
import pytest

from stram import wire as proto
from stram.common.secret import buffer_server_key, container_credential, scoped_credential
from stram.master.core.state import DeleteCheckpoints, Finish, KillContainer, LaunchContainer, MasterState
from stram.master.process.master import Dispatcher
from stram.master.spec import AppSpec
from stram.master.umbilical.server import MAX_MESSAGE_BYTES, UmbilicalServicer, create_server

TOKEN = "s3cret-token"

SPEC = """
name: proto-test
attributes:
  STREAMING_WINDOW_SIZE_MILLIS: 250
  HEARTBEAT_INTERVAL_MILLIS: 700
  CHECKPOINT_WINDOW_COUNT: 7
  PROCESSING_MODE: EXACTLY_ONCE
operators:
  reader: {class: "stram.operators.io:LineReader", properties: {path: specs/data/words.txt}}
  split: {class: "stram.operators.text:WordSplitter"}
  out: {class: "stram.operators.io:JsonLinesOutput", properties: {path: /tmp/proto-out}}
streams:
  lines: {from: reader.output, to: [split.input], locality: CONTAINER_LOCAL}
  words: {from: split.output, to: [out.input]}
"""


@pytest.fixture()
def umbilical():
    spec = AppSpec.from_yaml(SPEC)
    state = MasterState(spec, "app-test", "file:///tmp/app-test", TOKEN, 1_700_000_000_000, 0)
    executed = []
    dispatcher = Dispatcher(state, threading.RLock(), dict.fromkeys(
        (LaunchContainer, KillContainer, DeleteCheckpoints, Finish), executed.append))
    servicer = UmbilicalServicer(dispatcher.dispatch, TOKEN)
    server, port = create_server(servicer, host="127.0.0.1")
    channel = grpc.insecure_channel(f"127.0.0.1:{port}")
    stub = proto.StreamingContainerUmbilicalStub(channel)
    yield state, stub, channel, executed
    channel.close()
    server.stop(None)


def call(stub, method, request, token=TOKEN):
    return getattr(stub, method)(request, metadata=((proto.TOKEN_METADATA_KEY, token),), timeout=5)


def test_init_context_matches_spec_attributes(umbilical):
    state, stub, _, _ = umbilical
    ctx = call(stub, "GetInitContext", proto.InitContextRequest(container_id="container_000001"))
    assert ctx.streaming_window_size_millis == 250
    assert ctx.heartbeat_interval_millis == 700
    assert ctx.checkpoint_window_count == 7
    assert ctx.deploy_buffer_server
    assert ctx.start_window_millis % 1000 == 0
    assert json.loads(ctx.attributes["PROCESSING_MODE"]) == "EXACTLY_ONCE"
    # the key of this container's own buffer server, derived from (not equal to) the token
    assert ctx.buffer_server_token == buffer_server_key(TOKEN, "container_000001").encode() != TOKEN.encode()
    assert ctx.app_path == "file:///tmp/app-test"


def test_first_heartbeat_gets_deploy_request(umbilical):
    state, stub, _, _ = umbilical
    hb = proto.ContainerHeartbeat(container_id="container_000001", buffer_server_host="127.0.0.1",
                                  buffer_server_port=4242)
    response = call(stub, "ProcessHeartbeat", hb)
    assert not response.shutdown
    deployed = {d.name: d for d in response.deploy_request}
    assert set(deployed) == {"reader", "split"}
    assert deployed["reader"].type == proto.OperatorDeployInfo.INPUT
    (inp,) = deployed["split"].inputs
    assert inp.locality == proto.CONTAINER_LOCAL and inp.source_node_id == deployed["reader"].id
    assert deployed["split"].outputs[0].remote  # "out" lives in another container
    assert response.committed_window_id == state.initial_window
    assert response.heartbeat_interval_millis == 700
    # the second heartbeat does not deploy again
    assert not call(stub, "ProcessHeartbeat", hb).deploy_request


def test_a_deploy_waiting_for_an_upstream_container_asks_again_soon(umbilical):
    """container_000002's writer subscribes to container_000001's buffer server: until that one runs,
    its heartbeats get no deploy and ask for the next one within DEPLOY_POLL_MILLIS, not 700 ms."""
    from stram.master.core.heartbeat import DEPLOY_POLL_MILLIS
    _, stub, _, _ = umbilical
    second = proto.ContainerHeartbeat(container_id="container_000002", buffer_server_host="127.0.0.1",
                                      buffer_server_port=4343)
    early = call(stub, "ProcessHeartbeat", second)
    assert not early.deploy_request and early.heartbeat_interval_millis == DEPLOY_POLL_MILLIS < 700
    call(stub, "ProcessHeartbeat", proto.ContainerHeartbeat(container_id="container_000001",
                                                            buffer_server_host="127.0.0.1", buffer_server_port=4242))
    ready = call(stub, "ProcessHeartbeat", second)
    assert [d.name for d in ready.deploy_request] == ["out"] and ready.heartbeat_interval_millis == 700


def test_unknown_container_is_told_to_shut_down(umbilical):
    _, stub, _, _ = umbilical
    response = call(stub, "ProcessHeartbeat", proto.ContainerHeartbeat(container_id="container_999999"))
    assert response.shutdown
    with pytest.raises(grpc.RpcError) as err:
        call(stub, "GetInitContext", proto.InitContextRequest(container_id="nobody"))
    assert err.value.code() == grpc.StatusCode.NOT_FOUND


def test_wrong_or_missing_token_refused(umbilical, caplog):
    _, stub, channel, _ = umbilical
    for token in ("wrong", ""):
        with pytest.raises(grpc.RpcError) as err:
            call(stub, "ProcessHeartbeat", proto.ContainerHeartbeat(container_id="container_000001"), token=token)
        assert err.value.code() == grpc.StatusCode.UNAUTHENTICATED
    assert "refused call" in caplog.text
    # still serving
    assert call(stub, "GetInitContext", proto.InitContextRequest(container_id="container_000001")).app_id


def as_container(stub, method, request, container_id, credential=None):
    credential = container_credential(TOKEN, container_id) if credential is None else credential
    return getattr(stub, method)(request, metadata=((proto.TOKEN_METADATA_KEY, credential),
                                                    (proto.CONTAINER_METADATA_KEY, container_id)), timeout=5)


def test_a_container_is_served_with_its_own_credential_and_only_for_itself(umbilical, caplog):
    state, stub, _, _ = umbilical
    first = call(stub, "ProcessHeartbeat", proto.ContainerHeartbeat(container_id="container_000001"))
    second = [c for c in state.plan.containers if c != "container_000001"][0]
    mine = proto.ContainerHeartbeat(container_id="container_000001", buffer_server_host="127.0.0.1",
                                    buffer_server_port=4242)
    assert not as_container(stub, "ProcessHeartbeat", mine, "container_000001").shutdown
    assert as_container(stub, "GetInitContext", proto.InitContextRequest(container_id="container_000001"),
                        "container_000001").container_id == "container_000001"
    # a leaked container credential cannot speak for another container: no forged heartbeat,
    # no init context (its buffer-server key), no errors or logs in its name
    before = state.plan.containers[second].last_heartbeat_millis
    for method, request in (("ProcessHeartbeat", proto.ContainerHeartbeat(container_id=second)),
                            ("GetInitContext", proto.InitContextRequest(container_id=second)),
                            ("ReportError", proto.ReportErrorRequest(container_id=second, msg="forged")),
                            ("Log", proto.LogRequest(container_id=second, msg="forged"))):
        with pytest.raises(grpc.RpcError) as err:
            as_container(stub, method, request, "container_000001")
        assert err.value.code() == grpc.StatusCode.PERMISSION_DENIED, method
        assert "does not speak for" in err.value.details()
    assert state.plan.containers[second].last_heartbeat_millis == before
    assert not state.info()["errors"]
    # nor can it be passed off as that container's credential, nor the token's as anyone's
    for credential in (container_credential(TOKEN, "container_000001"), TOKEN, "", "x" * 64):
        with pytest.raises(grpc.RpcError) as err:
            as_container(stub, "ProcessHeartbeat", proto.ContainerHeartbeat(container_id=second), second,
                         credential=credential)
        assert err.value.code() == grpc.StatusCode.UNAUTHENTICATED
    assert "container 'container_000002'" in caplog.text or second in caplog.text
    # the right one still works
    assert not as_container(stub, "ProcessHeartbeat", proto.ContainerHeartbeat(container_id=second), second).shutdown
    assert first is not None


def test_deploy_info_hands_out_buffer_server_credentials_scoped_to_one_stream(umbilical):
    state, stub, _, _ = umbilical
    c1 = "container_000001"
    response = call(stub, "ProcessHeartbeat", proto.ContainerHeartbeat(
        container_id=c1, buffer_server_host="127.0.0.1", buffer_server_port=4242))
    split = {d.name: d for d in response.deploy_request}["split"]
    (out,) = split.outputs
    key = buffer_server_key(TOKEN, c1)
    assert out.buffer_server_token == scoped_credential(key, "publish", f"{split.id}.{out.port_name}").encode()
    c2 = [c for c in state.plan.containers if c != c1][0]
    response = call(stub, "ProcessHeartbeat", proto.ContainerHeartbeat(
        container_id=c2, buffer_server_host="127.0.0.1", buffer_server_port=4343))
    (inp,) = {d.name: d for d in response.deploy_request}["out"].inputs
    assert (inp.buffer_server_host, inp.buffer_server_port) == ("127.0.0.1", 4242)
    assert inp.buffer_server_token == scoped_credential(key, "subscribe", f"{split.id}.{out.port_name}").encode()
    assert inp.buffer_server_token not in (key.encode(), TOKEN.encode(), out.buffer_server_token)


def test_malformed_and_oversized_requests_fail_alone(umbilical):
    state, stub, channel, _ = umbilical
    raw = channel.unary_unary("/stram.StreamingContainerUmbilical/ProcessHeartbeat",
                              request_serializer=lambda b: b, response_deserializer=lambda b: b)
    md = ((proto.TOKEN_METADATA_KEY, TOKEN),)
    with pytest.raises(grpc.RpcError) as err:
        raw(b"\xff\xff\xff\xff garbage that is not a protobuf", metadata=md, timeout=5)
    assert err.value.code() in (grpc.StatusCode.INTERNAL, grpc.StatusCode.INVALID_ARGUMENT,
                                grpc.StatusCode.UNKNOWN)
    big = proto.LogRequest(container_id="container_000001", msg="x" * (MAX_MESSAGE_BYTES + 10))
    with pytest.raises(grpc.RpcError) as err:
        call(stub, "Log", big)
    assert err.value.code() == grpc.StatusCode.RESOURCE_EXHAUSTED
    # other calls keep working
    response = call(stub, "ProcessHeartbeat", proto.ContainerHeartbeat(container_id="container_000001"))
    assert not response.shutdown


def test_report_error_is_recorded(umbilical):
    state, stub, _, _ = umbilical
    call(stub, "ReportError", proto.ReportErrorRequest(container_id="container_000001", operators=[1],
                                                       msg="Traceback...\nValueError: boom"))
    errors = state.info()["errors"]
    assert errors and errors[-1]["msg"].endswith("ValueError: boom") and errors[-1]["operators"] == [1]


def _op_hb(node_id, state=proto.OperatorHeartbeat.ACTIVE, window=0):
    return proto.OperatorHeartbeat(node_id=node_id, state=state, current_window_id=window)


def test_unplanned_operator_is_undeployed_and_missing_one_recovered(umbilical):
    """processOperatorDeployStatus through the real server: extra → undeploy; an ACTIVE operator
    missing from a heartbeat has not shut down (that is reported): its container lost it, a failure
    counted and recovered from checkpoints, never a silent removal."""
    state, stub, _, _ = umbilical
    first = call(stub, "ProcessHeartbeat", proto.ContainerHeartbeat(
        container_id="container_000001", buffer_server_host="127.0.0.1", buffer_server_port=4242))
    ids = {d.name: d.id for d in first.deploy_request}
    w = state.initial_window + 3
    both = proto.ContainerHeartbeat(container_id="container_000001")
    both.container_stats.operators.extend([_op_hb(ids["reader"], window=w), _op_hb(ids["split"], window=w),
                                          _op_hb(999, window=w)])
    response = call(stub, "ProcessHeartbeat", both)
    assert list(response.undeploy_request) == [999]
    assert state.plan.operators[ids["split"]].state.value == "ACTIVE"
    # the next heartbeat omits "split": a failure of split, recovered (its container replaced)
    only_reader = proto.ContainerHeartbeat(container_id="container_000001")
    only_reader.container_stats.operators.append(_op_hb(ids["reader"], window=w + 1))
    call(stub, "ProcessHeartbeat", only_reader)
    split = state.plan.operators[ids["split"]]
    assert split.state.value == "PENDING_DEPLOY" and split.restarts == 1
    assert split.container != "container_000001" and state.plan.containers["container_000001"].state.value == "LOST"
    failure = state.info()["failures"]["split"]
    assert failure["count"] == 1 and "went missing from container_000001's heartbeat" in failure["error"]
    assert state.info()["removed"] == []
    out = next(op for op in state.plan.operators.values() if op.name == "out")
    assert [i.source_id for i in out.inputs] == [ids["split"]]  # still fed by split
    state.validate_state()


def test_umbilical_over_tls_serves_only_clients_that_trust_the_applications_certificate():
    from stram.common import tls
    spec = AppSpec.from_yaml(SPEC)
    state = MasterState(spec, "app-test", "file:///tmp/app-test", TOKEN, 1_700_000_000_000, 0)
    dispatcher = Dispatcher(state, threading.RLock(), dict.fromkeys(
        (LaunchContainer, KillContainer, DeleteCheckpoints, Finish), lambda ins: None))
    identity = tls.make_identity("app-test")
    server, port = create_server(UmbilicalServicer(dispatcher.dispatch, TOKEN), host="127.0.0.1",
                                 tls_identity=identity)
    request = proto.InitContextRequest(container_id="container_000001")
    try:
        with grpc.secure_channel(f"127.0.0.1:{port}", tls.grpc_channel_credentials(identity.cert_pem),
                                 options=tls.GRPC_CHANNEL_OPTIONS) as channel:
            ctx = as_container(proto.StreamingContainerUmbilicalStub(channel), "GetInitContext", request,
                               "container_000001")
            assert ctx.app_id == "app-test"
        # plain text is not spoken, and a client trusting another certificate does not connect
        other = tls.make_identity("other")
        for channel in (grpc.insecure_channel(f"127.0.0.1:{port}"),
                        grpc.secure_channel(f"127.0.0.1:{port}", tls.grpc_channel_credentials(other.cert_pem),
                                            options=tls.GRPC_CHANNEL_OPTIONS)):
            with channel, pytest.raises(grpc.RpcError) as err:
                as_container(proto.StreamingContainerUmbilicalStub(channel), "GetInitContext", request,
                             "container_000001")
            assert err.value.code() == grpc.StatusCode.UNAVAILABLE
    finally:
        server.stop(None)
