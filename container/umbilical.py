"""The agent's client of the master: finds it through ``heartbeatUri``, heartbeats over a stream.

Heartbeats go over one long-lived ``HeartbeatStream`` call (a stream message
costs the master about a third of a unary call); each waits for its response
for the call's timeout, and any failure drops the stream, which the next
heartbeat opens again. Other calls (init context, logs, errors) are unary.
"""

from __future__ import annotations

import logging
import queue
import threading
import time
from typing import Any

import grpc

from stram import wire as proto
from stram.common import apppath, fs, tls
from stram.common.logsetup import rate_limit

log = logging.getLogger("stram.agent.agent")
rate_limit(log, burst=5, interval=10.0)  # reconnect warnings and the like: repeats are counted

__all__ = ["Umbilical", "MasterGone", "StreamError", "COMPLAIN_SECONDS"]


class MasterGone(Exception):
    """The master could not be reached for longer than the heartbeat timeout."""


#: Seconds between two log lines saying the same thing about an unreachable master.
COMPLAIN_SECONDS = 5.0
#: Seconds a container waits for a missing ``heartbeatUri`` before it says so (its master writes
#: the file just after launching it).
QUIET_SECONDS = 2.0


class Umbilical:
    """The agent's client of the master; re-reads heartbeatUri when the master moves.

    While it cannot find its master it says why (no ``heartbeatUri`` at the
    URI, or the address in it refusing calls), at most once every
    :data:`COMPLAIN_SECONDS` for the same reason.
    """

    def __init__(self, app_path: str, token: str, timeout: float = 10.0, container_id: str | None = None) -> None:
        self.app_path = app_path
        # a container's own credential names its container; the application token (tools) does not
        self.metadata: tuple[tuple[str, str], ...] = ((proto.TOKEN_METADATA_KEY, token),) + (
            ((proto.CONTAINER_METADATA_KEY, container_id),) if container_id is not None else ())
        self.timeout = timeout
        self.address = ""
        #: The application's TLS certificate (None: TLS is off), read with the address.
        self.cert: bytes | None = None
        self.channel: grpc.Channel | None = None
        self.stub: proto.StreamingContainerUmbilicalStub | None = None
        self._complained: tuple[str, float] = ("", -COMPLAIN_SECONDS)
        #: Heartbeats go over one long-lived HeartbeatStream call (False: unary ProcessHeartbeat calls,
        #: after a master that does not serve the stream).
        self.streaming = True
        self._stream: _HeartbeatCall | None = None
        self._stream_lock = threading.Lock()

    def complain(self, why: str) -> None:
        """Log why the master cannot be reached (rate-limited: a new reason, or once per
        :data:`COMPLAIN_SECONDS`)."""
        now = time.monotonic()
        last, at = self._complained
        if why != last or now - at >= COMPLAIN_SECONDS:
            self._complained = (why, now)
            log.warning("cannot reach the master: %s; retrying", why)

    def connect(self, wait: float = 120.0) -> None:
        """Read ``APP_PATH/heartbeatUri`` (retrying with backoff) and open a channel."""
        uri = apppath.file(self.app_path, apppath.HEARTBEAT_URI)
        started = time.monotonic()
        deadline = started + wait
        delay = 0.05
        while True:
            try:
                address = fs.read_bytes(uri).decode().strip()
                break
            except (FileNotFoundError, OSError) as exc:
                # a new master launches its containers before it writes heartbeatUri (their start-up
                # overlaps its own): a file missing for the first moments is no reason to complain
                now = time.monotonic()
                if now - started >= QUIET_SECONDS or now > deadline or not isinstance(exc, FileNotFoundError):
                    self.complain(f"no heartbeatUri at {uri}"
                                  + ("" if isinstance(exc, FileNotFoundError) else f" ({exc})"))
                if now > deadline:
                    raise MasterGone(f"no master address at {uri} after {wait:.0f}s")
                time.sleep(delay)
                delay = min(delay * 2, 1.0)
        if address != self.address or self.channel is None:
            if self.channel is not None:
                self.channel.close()
            self.address = address
            # TLS when the master keeps a certificate (written before heartbeatUri): trust it alone
            self.cert = tls.load_certificate(self.app_path)
            self.channel = (grpc.secure_channel(address, tls.grpc_channel_credentials(self.cert),
                                                options=tls.GRPC_CHANNEL_OPTIONS)
                            if self.cert else grpc.insecure_channel(address))
            self.stub = proto.StreamingContainerUmbilicalStub(self.channel)

    def call(self, method: str, request: Any, timeout: float | None = None) -> Any:
        """``method`` with ``request``; a heartbeat goes over the heartbeat stream.

        Raises
        ------
        grpc.RpcError
            The call failed, or no heartbeat response came within ``timeout`` s (DEADLINE_EXCEEDED).
        """
        if method == "ProcessHeartbeat" and self.streaming:
            return self.heartbeat(request, timeout or self.timeout)
        return getattr(self.stub, method)(request, metadata=self.metadata, timeout=timeout or self.timeout)

    def heartbeat(self, request: proto.ContainerHeartbeat, timeout: float) -> proto.ContainerHeartbeatResponse:
        """One heartbeat over the stream, opened on first use and after any failure.

        A heartbeat whose response does not come within ``timeout`` s drops the
        stream (a late response can never answer a later heartbeat).
        """
        with self._stream_lock:
            stream = self._stream
            if stream is None or stream.channel is not self.channel:
                if stream is not None:
                    stream.close()
                stream = self._stream = _HeartbeatCall(self.channel, self.stub, self.metadata)
            stream.requests.put(request)
            try:
                answer = stream.responses.get(timeout=timeout)
            except queue.Empty:
                answer = StreamError(grpc.StatusCode.DEADLINE_EXCEEDED,
                                     f"no heartbeat response within {timeout:g} s")
            if isinstance(answer, grpc.RpcError):
                stream.close()
                self._stream = None
                if answer.code() == grpc.StatusCode.UNIMPLEMENTED:  # a master without the stream
                    self.streaming = False
                    return self.call("ProcessHeartbeat", request, timeout)
                raise answer
            return answer

    def close(self) -> None:
        """Close the heartbeat stream and the channel."""
        with self._stream_lock:
            if self._stream is not None:
                self._stream.close()
                self._stream = None
        if self.channel is not None:
            self.channel.close()


class StreamError(grpc.RpcError):
    """A heartbeat stream's failure seen by the agent itself (no response in time, the call ended)."""

    def __init__(self, code: grpc.StatusCode, details: str) -> None:
        super().__init__(details)
        self._code, self._details = code, details

    def code(self) -> grpc.StatusCode:
        return self._code

    def details(self) -> str:
        return self._details


class _HeartbeatCall:
    """One open ``HeartbeatStream`` call: heartbeats go in through a queue, a thread of its own
    puts each response (or the call's error) in another."""

    def __init__(self, channel: Any, stub: Any, metadata: Any) -> None:
        self.channel = channel
        self.requests: queue.SimpleQueue = queue.SimpleQueue()
        self.responses: queue.SimpleQueue = queue.SimpleQueue()
        self.call = stub.HeartbeatStream(iter(self.requests.get, None), metadata=metadata)
        threading.Thread(target=self._read, name="heartbeat-stream", daemon=True).start()

    def _read(self) -> None:
        try:
            for response in self.call:
                self.responses.put(response)
            self.responses.put(StreamError(grpc.StatusCode.UNAVAILABLE, "the master ended the heartbeat stream"))
        except grpc.RpcError as exc:
            self.responses.put(exc)
        except Exception as exc:  # noqa: BLE001 - the heartbeat waiting for a response learns of it
            self.responses.put(StreamError(grpc.StatusCode.UNKNOWN, f"heartbeat stream: {exc!r}"))

    def close(self) -> None:
        self.requests.put(None)  # ends the request iterator
        self.call.cancel()
