"""The built-in receivers: :class:`SocketTextReceiver` and :class:`DirectoryReceiver`.

Both are ready to name in a spec (``class: stram.receivers:SocketTextReceiver``)
and show how a :class:`~stram.receivers.operator.Receiver` is written: a
thread started in ``on_start`` that calls ``store`` and asks for a
``restart`` when its source breaks.
"""

from __future__ import annotations

import socket
import threading
import time

from stram.common import fs
from stram.operator import OperatorContext
from stram.receivers.blocks import Block, GeneratorStopped
from stram.receivers.operator import Receiver

__all__ = ["SocketTextReceiver", "DirectoryReceiver"]


class SocketTextReceiver(Receiver):
    """Receives UTF-8 text lines from a TCP server; one item per line (without its newline).

    Like Spark's socket receiver it connects, reads until the stream ends and
    then reconnects (a restart with backoff), also after connection errors.

    With ``ack`` on, after each block is stored (durable with ``RECEIVER_WAL``)
    it writes ``ACK <n>\\n`` back on the connection, where ``n`` counts the
    lines of this connection stored so far. A source that resends, on every new
    connection, what was not acknowledged loses nothing; with the WAL and
    ``PROCESSING_MODE: EXACTLY_ONCE`` every acknowledged line reaches the
    outputs exactly once. At the end of a stream the receiver waits (up to
    ``ack_wait_seconds``) for the last acknowledgement before closing.
    """

    host: str = "localhost"
    port: int = 9999
    ack: bool = False
    ack_wait_seconds: float = 10.0
    transient = ("_sock", "_thread", "_cond", "_base", "_acked")

    def __init__(self) -> None:
        self._sock: socket.socket | None = None
        self._thread: threading.Thread | None = None
        self._cond = threading.Condition()
        #: items_stored() when the current connection opened
        self._base = 0
        #: lines of the current connection acknowledged
        self._acked = 0

    def on_start(self) -> None:
        self._thread = threading.Thread(target=self._receive, daemon=True,
                                        name=f"socket-receiver-{self.host}:{self.port}")
        self._thread.start()

    def on_stop(self) -> None:
        with self._cond:
            sock, self._sock = self._sock, None
        _close(sock)
        thread = self._thread
        if thread is not None and thread is not threading.current_thread():
            thread.join(5.0)

    def _receive(self) -> None:
        where = f"{self.host}:{self.port}"
        try:
            sock = socket.create_connection((self.host, self.port), timeout=10)
        except OSError as exc:
            self.restart(f"error connecting to {where}", exc)
            return
        sock.settimeout(None)
        with self._cond:
            self._sock, self._base, self._acked = sock, self.items_stored(), 0
        try:
            if self.is_stopped():
                return
            rest = b""
            while not self.is_stopped():
                chunk = sock.recv(1 << 16)
                if not chunk:
                    break
                lines = (rest + chunk).split(b"\n")
                rest = lines.pop()
                if lines:
                    self.store_many([line.decode("utf-8", "replace").rstrip("\r") for line in lines])
            else:
                return  # stopped or restarting
            if rest:
                self.store(rest.decode("utf-8", "replace").rstrip("\r"))
            self._await_last_ack()
            self.restart(f"socket data stream from {where} had no more data")
        except GeneratorStopped:
            return
        except OSError as exc:
            if not self.is_stopped():
                self.restart(f"error receiving from {where}", exc)
        finally:
            with self._cond:
                if self._sock is sock:
                    self._sock = None
            _close(sock)

    def _await_last_ack(self) -> None:
        if not self.ack:
            return
        target = self.items_stored() - self._base
        deadline = time.monotonic() + self.ack_wait_seconds
        with self._cond:
            while self._acked < target and not self.is_stopped() and time.monotonic() < deadline:
                self._cond.wait(0.05)

    def on_block_stored(self, block: Block) -> None:
        if not self.ack:
            return
        with self._cond:
            sock, count = self._sock, block.items_through - self._base
            if sock is None or count <= self._acked:
                return  # an earlier connection's lines, or nothing new
            try:
                sock.sendall(f"ACK {count}\n".encode())
            except OSError:
                return  # the connection is gone; the source resends what it did not see acknowledged
            self._acked = count
            self._cond.notify_all()


def _close(sock: socket.socket | None) -> None:
    if sock is None:
        return
    try:
        sock.shutdown(socket.SHUT_RDWR)  # wakes a thread blocked in recv()
    except OSError:
        pass
    sock.close()


class DirectoryReceiver(Receiver):
    """Emits the lines of every file that appears in a directory, each file once.

    ``path`` is a directory (a local path or a ``pyarrow.fs`` URI). Every
    ``poll_millis`` the receiver lists it and reads each new regular file
    whose name does not start with ``.`` or ``_`` (write files elsewhere, or
    under such a name, and rename them in when complete). A file's lines
    travel in one block together with its name; the file is *finished* when
    that block is emitted. The finished files are checkpointed state, so after
    a restart (with ``RECEIVER_WAL``: exactly once) no file is read twice.
    """

    path: str = ""
    poll_millis: int = 200
    transient = ("_claimed", "_thread")

    def __init__(self) -> None:
        #: Names of files whose lines were emitted.
        self.finished: set[str] = set()
        self._claimed: set[str] = set()
        self._thread: threading.Thread | None = None

    def setup(self, context: OperatorContext) -> None:
        if not self.path:
            raise ValueError("DirectoryReceiver needs the property 'path' (a directory to watch)")
        super().setup(context)

    def on_start(self) -> None:
        self._thread = threading.Thread(target=self._poll, daemon=True,
                                        name=f"directory-receiver-{self.path}")
        self._thread.start()

    def on_stop(self) -> None:
        thread = self._thread
        if thread is not None and thread is not threading.current_thread():
            thread.join(5.0)

    def _poll(self) -> None:
        try:
            while not self.is_stopped():
                for name in self._new_files():
                    if self.is_stopped():
                        return
                    data = fs.read_bytes(fs.join(self.path, name))
                    self.store_many(data.decode("utf-8", "replace").splitlines(), metadata={"file": name})
                    self._claimed.add(name)
                deadline = time.monotonic() + self.poll_millis / 1000
                while not self.is_stopped() and time.monotonic() < deadline:
                    time.sleep(min(0.05, self.poll_millis / 1000))
        except GeneratorStopped:
            return
        except Exception as exc:  # noqa: BLE001 - file system errors: try again after a backoff
            if not self.is_stopped():
                self.restart(f"error reading directory {self.path}", exc)

    def _new_files(self) -> list[str]:
        names = sorted(info.base_name for info in fs.list_dir(self.path)
                       if info.type == fs.FileType.File)
        return [n for n in names if not n.startswith((".", "_"))
                and n not in self._claimed and n not in self.finished]

    def on_block_emitted(self, block: Block) -> None:
        for meta in block.metadata:
            if isinstance(meta, dict) and "file" in meta:
                self.finished.add(meta["file"])
