"""A flood of unauthenticated 4 MiB calls is refused without the umbilical server's memory or log growing with it.

2,000 calls carry 8 GB of requests; the server's resident memory stays within
50 MiB of where it started (1.2-1.8 MiB measured) and its log within a cap. The
server refuses a call without a credential from its headers, with a handler
that never reads the request, and keeps HTTP/2's flow-control window small
(no BDP probing): a refused call's body is not taken in beyond 64 KiB. With
either measure alone, 18-164 MiB were measured.

The server (stram.master.umbilical.server, the master's own) runs in a process of its own so
that its resident memory is measured alone; the flood comes from this process
over real gRPC on loopback, with the request as raw bytes (a client need not
send valid protobuf to cost the server memory).
"""

from __future__ import annotations

import concurrent.futures
import subprocess
import sys
import textwrap

import grpc
import psutil
import pytest
from conftest import ROOT

from stram import wire as proto

TOKEN = "flood-test-token"
CALLS = 2000
PAYLOAD = b"\x0a" * ((4 << 20) - 1024)  # just under the server's 4 MiB receive limit

SERVER = textwrap.dedent(f"""
    import sys, logging
    logging.basicConfig(level=logging.INFO, stream=sys.stderr)
    from stram.master.umbilical.server import UmbilicalServicer, create_server
    from stram.master.core.state import UnknownContainer

    def dispatch(event):
        raise UnknownContainer("nobody")
    server, port = create_server(UmbilicalServicer(dispatch, {TOKEN!r}), host="127.0.0.1", workers=8)
    print(port, flush=True)
    sys.stdin.read()  # until the test closes it
    server.stop(0)
""")


def test_unauthenticated_4mib_calls_leave_the_masters_memory_and_log_flat(tmp_path):
    log_path = tmp_path / "server.log"
    with open(log_path, "wb") as log_file:
        server = subprocess.Popen([sys.executable, "-c", SERVER], cwd=ROOT, stdin=subprocess.PIPE,
                                  stdout=subprocess.PIPE, stderr=log_file, text=True)
    try:
        port = int(server.stdout.readline())
        channel = grpc.insecure_channel(f"127.0.0.1:{port}", options=[("grpc.max_send_message_length", 8 << 20)])
        heartbeat = channel.unary_unary("/stram.StreamingContainerUmbilical/ProcessHeartbeat",
                                        request_serializer=None, response_deserializer=None)

        def call(token: str | None) -> grpc.StatusCode:
            metadata = ((proto.TOKEN_METADATA_KEY, token),) if token is not None else ()
            try:
                heartbeat(PAYLOAD, metadata=metadata, timeout=30)
            except grpc.RpcError as exc:
                return exc.code()
            return grpc.StatusCode.OK

        for _ in range(20):  # warm up: the server's threads and buffers exist before the baseline
            assert call("wrong") == grpc.StatusCode.UNAUTHENTICATED
        before = psutil.Process(server.pid).memory_info().rss
        with concurrent.futures.ThreadPoolExecutor(8) as pool:
            codes = list(pool.map(call, ["wrong" if i % 2 else None for i in range(CALLS)]))
        after = psutil.Process(server.pid).memory_info().rss
        assert set(codes) == {grpc.StatusCode.UNAUTHENTICATED}
        assert after - before < 50 << 20, f"RSS grew {(after - before) >> 20} MiB"
        # the server still serves the token's holder: a garbled heartbeat with the token is parsed (and refused
        # as not protobuf), an init context for an unknown container is NOT_FOUND
        init = channel.unary_unary("/stram.StreamingContainerUmbilical/GetInitContext",
                                   request_serializer=proto.InitContextRequest.SerializeToString,
                                   response_deserializer=proto.StreamingContainerContext.FromString)
        with pytest.raises(grpc.RpcError) as err:
            init(proto.InitContextRequest(container_id="c9"), metadata=((proto.TOKEN_METADATA_KEY, TOKEN),),
                 timeout=10)
        assert err.value.code() == grpc.StatusCode.NOT_FOUND
        channel.close()
    finally:
        server.stdin.close()
        server.wait(30)
    log_text = log_path.read_text()
    assert "refused call from" in log_text
    assert len(log_text) < 64 << 10, f"the server's log grew to {len(log_text)} bytes"
