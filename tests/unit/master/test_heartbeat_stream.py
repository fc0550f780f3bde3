"""Heartbeats over one long-lived call (HeartbeatStream): the agent's Umbilical against the real server."""

from __future__ import annotations

import threading
import time
from concurrent import futures

import grpc
import pytest

from stram import wire as proto
from stram.agent.umbilical import Umbilical
from stram.common.secret import container_credential
from stram.master.core.state import DeleteCheckpoints, Finish, KillContainer, LaunchContainer, MasterState
from stram.master.process.master import Dispatcher
from stram.master.spec import AppSpec
from stram.master.umbilical.front import FrontServer, create_front
from stram.master.umbilical.server import UmbilicalServicer, create_server

TOKEN = "stream-token"
C1, C2 = "container_000001", "container_000002"

SPEC = """
name: stream-test
attributes: {HEARTBEAT_INTERVAL_MILLIS: 700}
operators:
  reader: {class: "stram.operators.io:LineReader", properties: {path: specs/data/words.txt}}
  out: {class: "stram.operators.io:JsonLinesOutput", properties: {path: /tmp/stream-out}}
streams:
  lines: {from: reader.output, to: [out.input]}
"""


class Master:
    """A MasterState behind the real umbilical server; ``hold`` keeps the dispatcher from answering."""

    def __init__(self, tmp_path, tls_identity=None, batched: bool = False, front: bool = False) -> None:
        self.state = MasterState(AppSpec.from_yaml(SPEC), "app-test", f"file://{tmp_path}", TOKEN,
                                 1_700_000_000_000, 0)
        self.lock = threading.RLock()
        self.dispatcher = Dispatcher(self.state, self.lock, dict.fromkeys(
            (LaunchContainer, KillContainer, DeleteCheckpoints, Finish), lambda ins: None))
        self.seen: list[str] = []
        self.hold = threading.Event()
        self.hold.set()

        def dispatch(event):
            self.hold.wait(30)
            self.seen.append(type(event).__name__)
            return self.dispatcher.dispatch(event)

        #: batched: the sizes of the batches the server handed over (Dispatcher.dispatch_many)
        self.batches: list[int] = []

        self.entered = threading.Event()

        def dispatch_many(events):
            self.entered.set()
            self.hold.wait(30)
            self.batches.append(len(events))
            self.seen.extend(type(event).__name__ for event in events)
            return self.dispatcher.dispatch_many(events)

        self.servicer = UmbilicalServicer(dispatch, TOKEN, dispatch_many if batched else None)
        self.server, self.port = (create_front if front else create_server)(
            self.servicer, host="127.0.0.1", tls_identity=tls_identity)
        assert isinstance(self.server, FrontServer) == front
        (tmp_path / "heartbeatUri").write_text(f"127.0.0.1:{self.port}")

    def stop(self) -> None:
        self.server.stop(None)


@pytest.fixture(params=[False, True], ids=["in-process", "front-process"])
def front(request) -> bool:
    """The umbilical served in the master's process, or by its front process (stram.master.umbilical.front)."""
    return request.param


@pytest.fixture()
def master(tmp_path, front):
    m = Master(tmp_path, front=front)
    yield m
    m.stop()


def agent(tmp_path, container_id: str, credential_of: str | None = None, timeout: float = 5.0) -> Umbilical:
    u = Umbilical(f"file://{tmp_path}", container_credential(TOKEN, credential_of or container_id),
                  timeout=timeout, container_id=credential_of or container_id)
    u.connect(wait=5)
    return u


def heartbeat(container_id: str, port: int = 0) -> proto.ContainerHeartbeat:
    return proto.ContainerHeartbeat(container_id=container_id, buffer_server_host="127.0.0.1",
                                    buffer_server_port=port, jvm_name=f"1@{container_id}")


def test_heartbeats_go_over_one_call_and_each_gets_its_own_response_in_order(tmp_path, master):
    u = agent(tmp_path, C1)
    try:
        first = u.call("ProcessHeartbeat", heartbeat(C1, 4242))
        assert {d.name for d in first.deploy_request} == {"reader"}
        stream = u._stream
        assert stream is not None and u.streaming
        ids = [d.id for d in first.deploy_request]
        for k in range(1, 20):
            hb = heartbeat(C1, 4242)
            hb.container_stats.operators.add(node_id=ids[0], state=proto.OperatorHeartbeat.ACTIVE,
                                             current_window_id=master.state.initial_window + k)
            response = u.call("ProcessHeartbeat", hb)
            assert not response.deploy_request and response.heartbeat_interval_millis == 700
            # the response is this heartbeat's: the master has seen window k, no later one
            assert master.state.plan.operators[ids[0]].current_window == master.state.initial_window + k
        assert u._stream is stream  # one call all along
        assert master.seen.count("Heartbeat") == 20
    finally:
        u.close()


def _until(predicate, timeout: float = 10.0) -> bool:
    deadline = time.monotonic() + timeout
    while not predicate() and time.monotonic() < deadline:
        time.sleep(0.01)
    return predicate()


def test_the_servicer_counts_the_heartbeat_streams_open(tmp_path, master):
    """What the master's GIL switch interval goes by (stram.master.process.housekeeping.switch_interval)."""
    assert master.servicer.open_streams == 0
    one, two = agent(tmp_path, C1), agent(tmp_path, C2)
    try:
        one.call("ProcessHeartbeat", heartbeat(C1, 4242))
        two.call("ProcessHeartbeat", heartbeat(C2, 4243))
        assert master.servicer.open_streams == 2
        one.close()
        assert _until(lambda: master.servicer.open_streams == 1)
    finally:
        two.close()
    assert _until(lambda: master.servicer.open_streams == 0)


def test_a_stream_with_another_containers_credential_is_refused_and_changes_nothing(tmp_path, master):
    mine = agent(tmp_path, C1)
    forger = agent(tmp_path, C2, credential_of=C1)  # C1's credential, heartbeats in C2's name
    try:
        mine.call("ProcessHeartbeat", heartbeat(C1, 4242))
        before = master.state.plan.containers[C2].last_heartbeat_millis
        with pytest.raises(grpc.RpcError) as err:
            forger.call("ProcessHeartbeat", heartbeat(C2, 4343))
        assert err.value.code() == grpc.StatusCode.PERMISSION_DENIED
        assert master.state.plan.containers[C2].last_heartbeat_millis == before
        assert forger._stream is None  # dropped: the next heartbeat opens another call
        # a wrong credential is refused before any heartbeat is read
        wrong = Umbilical(f"file://{tmp_path}", "x" * 64, timeout=5, container_id=C2)
        wrong.connect(wait=5)
        with pytest.raises(grpc.RpcError) as err:
            wrong.call("ProcessHeartbeat", heartbeat(C2, 4343))
        assert err.value.code() == grpc.StatusCode.UNAUTHENTICATED
        wrong.close()
        # the rightful container's stream goes on
        assert not mine.call("ProcessHeartbeat", heartbeat(C1, 4242)).shutdown
    finally:
        mine.close()
        forger.close()


def test_no_response_in_time_drops_the_stream_and_a_late_one_never_answers_a_later_heartbeat(tmp_path, master):
    u = agent(tmp_path, C1, timeout=0.5)
    try:
        u.call("ProcessHeartbeat", heartbeat(C1, 4242))
        master.hold.clear()  # the master stops answering (its lock held elsewhere, say)
        with pytest.raises(grpc.RpcError) as err:
            u.call("ProcessHeartbeat", heartbeat(C1, 4242))
        assert err.value.code() == grpc.StatusCode.DEADLINE_EXCEEDED and u._stream is None
        master.hold.set()
        late = heartbeat(C1, 4242)
        late.container_stats.operators.add(node_id=99, state=proto.OperatorHeartbeat.ACTIVE)
        response = u.call("ProcessHeartbeat", late)  # on a new call: the answer to *this* heartbeat
        assert list(response.undeploy_request) == [99]
    finally:
        u.close()


def test_an_agent_heartbeats_unary_to_a_master_without_the_stream(tmp_path):
    """A master that does not serve HeartbeatStream (UNIMPLEMENTED): the agent goes on with unary calls."""
    state = MasterState(AppSpec.from_yaml(SPEC), "app-test", f"file://{tmp_path}", TOKEN, 1_700_000_000_000, 0)
    dispatcher = Dispatcher(state, threading.RLock(), dict.fromkeys(
        (LaunchContainer, KillContainer, DeleteCheckpoints, Finish), lambda ins: None))
    old = grpc.server(futures.ThreadPoolExecutor(2))
    proto.add_StreamingContainerUmbilicalServicer_to_server(UmbilicalServicer(dispatcher.dispatch, TOKEN), old)
    port = old.add_insecure_port("127.0.0.1:0")
    old.start()
    (tmp_path / "heartbeatUri").write_text(f"127.0.0.1:{port}")
    u = agent(tmp_path, C1)
    try:
        assert {d.name for d in u.call("ProcessHeartbeat", heartbeat(C1, 4242)).deploy_request} == {"reader"}
        assert not u.streaming
        assert not u.call("ProcessHeartbeat", heartbeat(C1, 4242)).deploy_request
        assert state.heartbeats == 2
    finally:
        u.close()
        old.stop(None)


def test_a_stream_follows_the_master_to_its_new_address(tmp_path, front):
    first = Master(tmp_path, front=front)
    u = agent(tmp_path, C1, timeout=2)
    try:
        u.call("ProcessHeartbeat", heartbeat(C1, 4242))
        first.stop()
        with pytest.raises(grpc.RpcError):
            u.call("ProcessHeartbeat", heartbeat(C1, 4242))
        second = Master(tmp_path, front=front)  # a new attempt writes its address
        try:
            deadline = time.monotonic() + 10
            while True:
                u.connect(wait=5)
                try:
                    response = u.call("ProcessHeartbeat", heartbeat(C1, 4242))
                    break
                except grpc.RpcError:
                    assert time.monotonic() < deadline
                    time.sleep(0.1)
            assert {d.name for d in response.deploy_request} == {"reader"}
            assert u.address == f"127.0.0.1:{second.port}" and second.seen.count("Heartbeat") >= 1
        finally:
            second.stop()
    finally:
        u.close()


def test_heartbeat_stream_over_tls(tmp_path, front):
    from stram.common import tls
    identity = tls.load_or_make_identity(f"file://{tmp_path}", "app-test")  # where the agent finds it
    m = Master(tmp_path, tls_identity=identity, front=front)
    try:
        u = agent(tmp_path, C1)
        try:
            assert u.cert == identity.cert_pem
            for _ in range(3):
                assert not u.call("ProcessHeartbeat", heartbeat(C1, 4242)).shutdown
            assert u.streaming and m.seen.count("Heartbeat") == 3
        finally:
            u.close()
    finally:
        m.stop()


def test_heartbeats_arriving_together_are_handled_as_one_batch_each_answered_or_refused_alone(tmp_path, front):
    """While the master is busy, the streams' heartbeats wait and are handed over together (one
    lock hold, one journal write); each still gets its own response, and a refused one ends
    only its own call."""
    master = Master(tmp_path, batched=True, front=front)
    first, second, again = agent(tmp_path, C1), agent(tmp_path, C2), agent(tmp_path, C2)
    forger = agent(tmp_path, C2, credential_of=C1)
    answers: dict[str, object] = {}

    def call(name: str, u: Umbilical, hb: proto.ContainerHeartbeat) -> None:
        try:
            answers[name] = u.call("ProcessHeartbeat", hb)
        except grpc.RpcError as exc:
            answers[name] = exc.code()
    try:
        master.hold.clear()  # the master is busy: the first heartbeat's batch waits for it
        threads = [threading.Thread(target=call, args=("first", first, heartbeat(C1, 4242)))]
        threads[0].start()
        assert master.entered.wait(10)
        for name, u, hb in (("second", second, heartbeat(C2, 4343)), ("forged", forger, heartbeat(C2, 4444)),
                            ("again", again, heartbeat(C2, 4343))):
            threads.append(threading.Thread(target=call, args=(name, u, hb)))
            threads[-1].start()
        time.sleep(1.0)  # all three wait for the next batch
        master.hold.set()
        for t in threads:
            t.join(15)
        # the forged heartbeat is refused before the dispatcher: the second batch holds the other two
        assert master.batches == [1, 2] and master.seen == ["Heartbeat"] * 3
        assert answers["forged"] == grpc.StatusCode.PERMISSION_DENIED
        assert {d.name for d in answers["first"].deploy_request} == {"reader"}
        # each got the answer to its own heartbeat: the container's deploy went to one of them only
        deploys = sorted(len(answers[n].deploy_request) for n in ("second", "again"))
        assert deploys == [0, 1]
        assert master.state.plan.containers[C2].buffer_server == ("127.0.0.1", 4343)
        # the next heartbeats of the rightful streams go on
        assert not first.call("ProcessHeartbeat", heartbeat(C1, 4242)).shutdown
        assert not second.call("ProcessHeartbeat", heartbeat(C2, 4343)).shutdown
    finally:
        for u in (first, second, again, forger):
            u.close()
        master.stop()


def test_a_heartbeat_whose_call_ended_while_it_waited_is_never_handled(tmp_path, front):
    """The agent gave up on it (no answer in time) and will send another: the master must not
    act on the stale one later."""
    master = Master(tmp_path, batched=True, front=front)
    first, impatient = agent(tmp_path, C1), agent(tmp_path, C2, timeout=0.5)
    try:
        master.hold.clear()
        waiting = threading.Thread(target=lambda: first.call("ProcessHeartbeat", heartbeat(C1, 4242)))
        waiting.start()
        assert master.entered.wait(10)
        with pytest.raises(grpc.RpcError) as err:
            impatient.call("ProcessHeartbeat", heartbeat(C2, 4343))
        assert err.value.code() == grpc.StatusCode.DEADLINE_EXCEEDED
        time.sleep(0.5)  # the server has seen its call end
        master.hold.set()
        waiting.join(15)
        assert master.batches == [1] and master.seen == ["Heartbeat"]
        assert master.state.plan.containers[C2].buffer_server is None  # never heard of
        # its next heartbeat, on a new call, is handled
        assert {d.name for d in impatient.call("ProcessHeartbeat", heartbeat(C2, 4343)).deploy_request} == {"out"}
    finally:
        first.close()
        impatient.close()
        master.stop()
