"""The umbilical's front process (stram.master.umbilical.front): real gRPC calls into a real child process, relayed
to the master's servicer in this one.

tests/unit/master/test_heartbeat_stream.py runs its every test against the front too, and
tests/e2e/local/test_security_e2e.py a real application served by one; this file holds what only the front
has: its relay of every kind of answer, garbled requests, what it tells the master besides the
calls (stream counts, answer times, its log lines), and its end with the master.
"""

from __future__ import annotations

import logging
import threading
import time

import grpc
import pytest

from stram import wire as proto
from stram.common.secret import container_credential
from stram.master.core.events import MasterPaused
from stram.master.core.state import UnknownContainer
from stram.master.umbilical.front import FrontServer
from stram.master.umbilical.server import UmbilicalServicer

TOKEN = "front-token"
C1, C2 = "container_000001", "container_000002"


class Pacer:
    def __init__(self) -> None:
        self.seen: list[float] = []

    def observe(self, seconds: float) -> None:
        self.seen.append(seconds)


class Served:
    """A FrontServer whose dispatcher answers as ``answer`` says (by event type)."""

    def __init__(self) -> None:
        self.events: list[object] = []
        self.paused = False
        self.pacer = Pacer()

        def dispatch(event):
            self.events.append(event)
            if self.paused:
                raise MasterPaused("paused: no space left on device writing the journal")
            name = type(event).__name__
            if name == "InitContextRequest":
                if event.container_id == C2:
                    raise UnknownContainer(event.container_id)
                return proto.StreamingContainerContext(container_id=event.container_id, heartbeat_interval_millis=77)
            if name == "Heartbeat":
                return proto.ContainerHeartbeatResponse(heartbeat_interval_millis=len(self.events))
            return None

        self.servicer = UmbilicalServicer(dispatch, TOKEN, pacer=self.pacer)
        self.server = FrontServer(self.servicer, "127.0.0.1", 0)
        self.channel = grpc.insecure_channel(f"127.0.0.1:{self.server.port}")
        self.stub = proto.StreamingContainerUmbilicalStub(self.channel)

    def close(self) -> None:
        self.channel.close()
        self.server.stop(0)


@pytest.fixture()
def served():
    s = Served()
    yield s
    s.close()


def md(container_id: str, of: str | None = None) -> tuple:
    return ((proto.TOKEN_METADATA_KEY, container_credential(TOKEN, of or container_id)),
            (proto.CONTAINER_METADATA_KEY, container_id))


def test_every_kind_of_answer_comes_back_through_the_front(served):
    ctx = served.stub.GetInitContext(proto.InitContextRequest(container_id=C1), metadata=md(C1), timeout=10)
    assert ctx.container_id == C1 and ctx.heartbeat_interval_millis == 77
    with pytest.raises(grpc.RpcError) as err:  # the servicer's own refusal, made in the master
        served.stub.GetInitContext(proto.InitContextRequest(container_id=C2), metadata=md(C2), timeout=10)
    assert err.value.code() == grpc.StatusCode.NOT_FOUND and C2 in err.value.details()
    with pytest.raises(grpc.RpcError) as err:  # another container's credential
        served.stub.GetInitContext(proto.InitContextRequest(container_id=C1), metadata=md(C2, of=C2)[:1]
                                   + ((proto.CONTAINER_METADATA_KEY, C2),), timeout=10)
    assert err.value.code() == grpc.StatusCode.PERMISSION_DENIED
    with pytest.raises(grpc.RpcError) as err:  # the front's own credential check
        served.stub.GetInitContext(proto.InitContextRequest(container_id=C1),
                                   metadata=((proto.TOKEN_METADATA_KEY, "x" * 64), (proto.CONTAINER_METADATA_KEY, C1)),
                                   timeout=10)
    assert err.value.code() == grpc.StatusCode.UNAUTHENTICATED
    # unary heartbeats, a log line and an error report
    assert served.stub.ProcessHeartbeat(proto.ContainerHeartbeat(container_id=C1), metadata=md(C1),
                                        timeout=10).heartbeat_interval_millis > 0
    served.stub.Log(proto.LogRequest(container_id=C1, level="INFO", msg="hello"), metadata=md(C1), timeout=10)
    served.stub.ReportError(proto.ReportErrorRequest(container_id=C1, operators=[3], msg="boom"), metadata=md(C1),
                            timeout=10)
    kinds = [type(e).__name__ for e in served.events]
    assert kinds == ["InitContextRequest", "InitContextRequest", "Heartbeat", "ErrorReport"]
    # while the master waits for space: UNAVAILABLE, saying why
    served.paused = True
    with pytest.raises(grpc.RpcError) as err:
        served.stub.ProcessHeartbeat(proto.ContainerHeartbeat(container_id=C1), metadata=md(C1), timeout=10)
    assert err.value.code() == grpc.StatusCode.UNAVAILABLE and "no space left" in err.value.details()


def test_a_stream_is_answered_in_order_and_the_master_hears_the_streams_and_the_answer_times(served):
    ready = threading.Semaphore(0)

    def feed():  # a heartbeat each time one is let go; the call stays open meanwhile
        while True:
            ready.acquire()
            yield proto.ContainerHeartbeat(container_id=C1)
    call = served.stub.HeartbeatStream(feed(), metadata=md(C1))
    answers = []
    for _ in range(5):
        ready.release()
        answers.append(next(call).heartbeat_interval_millis)
    assert answers == sorted(answers) and len(set(answers)) == 5  # each its own answer, in order
    assert served.servicer.open_streams == 1
    assert len(served.pacer.seen) >= 4 and all(0 <= s < 10 for s in served.pacer.seen)
    call.cancel()
    deadline = time.monotonic() + 10
    while served.servicer.open_streams and time.monotonic() < deadline:
        time.sleep(0.02)
    assert served.servicer.open_streams == 0  # told without a call


def test_a_garbled_request_gets_invalid_argument_and_the_rest_goes_on(served, caplog):
    garbled = served.channel.unary_unary("/stram.StreamingContainerUmbilical/GetInitContext")
    with caplog.at_level(logging.WARNING, logger="stram.master.umbilical.front"):
        with pytest.raises(grpc.RpcError) as err:
            garbled(b"\xff\xff\xff\xff not a protobuf", metadata=md(C1), timeout=10)
    assert err.value.code() == grpc.StatusCode.INVALID_ARGUMENT
    assert any("malformed GetInitContext request" in r.getMessage() for r in caplog.records)
    ctx = served.stub.GetInitContext(proto.InitContextRequest(container_id=C1), metadata=md(C1), timeout=10)
    assert ctx.container_id == C1


def test_the_fronts_log_lines_reach_the_masters_log(served, caplog):
    with caplog.at_level(logging.WARNING, logger="stram.master.umbilical.server"):
        with pytest.raises(grpc.RpcError):
            served.stub.GetInitContext(proto.InitContextRequest(container_id=C1), metadata=(), timeout=10)
        deadline = time.monotonic() + 10
        while not any("refused call" in r.getMessage() for r in caplog.records) and time.monotonic() < deadline:
            time.sleep(0.02)
    assert any("refused call" in r.getMessage() and "missing" in r.getMessage() for r in caplog.records)


def test_the_front_ends_with_the_master():
    """A master that dies (its end of the socket closes, no stop said) takes its front with it."""
    s = Served()
    try:
        assert s.server.proc.poll() is None
        s.server._stopping = True
        s.server.sock.shutdown(2)  # what the master's death does to the socket
        s.server.proc.wait(10)
        assert s.server.proc.returncode == 0
    finally:
        s.channel.close()
        s.server.sock.close()


def test_a_front_that_ends_unasked_is_replaced_and_the_calls_go_on():
    moved: list[int] = []
    s = Served()
    s.server.on_restart = moved.append
    try:
        first_pid, port = s.server.proc.pid, s.server.port
        s.server.proc.kill()
        deadline = time.monotonic() + 20
        while not s.server.replaced and time.monotonic() < deadline:
            time.sleep(0.05)
        assert s.server.replaced == 1 and s.server.proc.pid != first_pid and s.server.proc.poll() is None
        # on its port again (free once the killed one was gone), else on another the master is told
        assert (s.server.port == port and not moved) or moved == [s.server.port]
        with grpc.insecure_channel(f"127.0.0.1:{s.server.port}") as channel:
            ctx = proto.StreamingContainerUmbilicalStub(channel).GetInitContext(
                proto.InitContextRequest(container_id=C1), metadata=md(C1), timeout=10)
        assert ctx.container_id == C1
    finally:
        s.close()


def test_calls_the_master_was_handling_when_it_went_get_unavailable_at_once():
    """A master that dies holding a batch: its calls fail at once (their agents retry), not at their deadline."""
    s = Served()
    entered, release = threading.Event(), threading.Event()
    dispatch = s.servicer.dispatch

    def stuck(event):
        entered.set()
        release.wait(30)
        return dispatch(event)
    s.servicer.dispatch = stuck
    result: dict[str, object] = {}

    def call():
        try:
            s.stub.GetInitContext(proto.InitContextRequest(container_id=C1), metadata=md(C1), timeout=20)
        except grpc.RpcError as exc:
            result["code"] = exc.code()
    caller = threading.Thread(target=call)
    try:
        caller.start()
        assert entered.wait(10)
        t0 = time.monotonic()
        s.server._stopping = True
        s.server.sock.shutdown(2)  # the master's end goes, with the call in its hands
        caller.join(15)
        assert result.get("code") == grpc.StatusCode.UNAVAILABLE
        assert time.monotonic() - t0 < 15  # not the call's 20 s deadline
    finally:
        release.set()
        caller.join(5)
        s.channel.close()
        s.server.proc.wait(10)
