"""Thousands of containers calling at once are all served, none refused by gRPC's backlog protection.

gRPC's server keeps the calls its application has not yet taken in a pending
queue, and past 1,000 of them (``grpc.server.max_pending_requests``) refuses
new ones at random (CANCELLED), all of them past 3,000. The master's server
takes calls on its event loop, which waits whenever the master's one
interpreter is busy (a garbage collection, a batch of heartbeats): at 2,000
containers starting together, ``python -m bench.heartbeats.bench_heartbeats`` saw 15-200 of their
GetInitContext calls refused this way, and deploying took 51 s or never ended.
:func:`stram.master.umbilical.server.create_server` raises both limits
(:data:`stram.master.umbilical.server.MAX_PENDING_CALLS`). Here the server's event loop is
held busy while 2,500 calls arrive over real gRPC on loopback; every one must
be answered.
"""

from __future__ import annotations

import asyncio
import threading
import time

import grpc

from stram import wire as proto
from stram.common.secret import container_credential
from stram.master.umbilical.server import UmbilicalServicer, create_server

TOKEN = "burst-test-token"
CALLS = 2500


def test_a_burst_of_calls_while_the_server_is_busy_is_served_whole():
    lock = threading.Lock()

    def dispatch(event):
        with lock:  # one at a time, as the master's lock makes them
            return proto.StreamingContainerContext(container_id=event.container_id)

    server, port = create_server(UmbilicalServicer(dispatch, TOKEN), host="127.0.0.1")
    try:
        async def burst() -> dict[str, int]:
            codes: dict[str, int] = {}
            async with grpc.aio.insecure_channel(f"127.0.0.1:{port}") as channel:
                stub = proto.StreamingContainerUmbilicalStub(channel)
                await channel.channel_ready()

                async def one(i: int) -> None:
                    cid = f"container_{i:06d}"
                    metadata = ((proto.TOKEN_METADATA_KEY, container_credential(TOKEN, cid)),
                                (proto.CONTAINER_METADATA_KEY, cid))
                    try:
                        reply = await stub.GetInitContext(proto.InitContextRequest(container_id=cid),
                                                          metadata=metadata, timeout=60)
                        code = "OK" if reply.container_id == cid else "WRONG"
                    except grpc.aio.AioRpcError as exc:
                        code = exc.code().name
                    codes[code] = codes.get(code, 0) + 1

                # the server's event loop is busy (its interpreter elsewhere) while every call arrives
                server.loop.call_soon_threadsafe(time.sleep, 2.0)
                await asyncio.gather(*(one(i) for i in range(CALLS)))
            return codes

        assert asyncio.run(burst()) == {"OK": CALLS}
    finally:
        server.stop(0)
