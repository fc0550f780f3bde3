"""Receivers: push-based sources run as input operators, with blocks, backpressure and a write-ahead log.

This follows Spark Streaming's receiver path (ReceiverSupervisor → BlockGenerator
→ block handler / write-ahead log), fitted to stram's windows::

    receiver thread --store()--> BlockGenerator --every BLOCK_INTERVAL_MILLIS--> bounded queue
                                                                                      |
           pushing thread: WAL write, hand the block over, on_block_stored() (ack) |
                                                                                      v
    output port <--emit_tuples()-- ready blocks <-------------------------------------+

* A :class:`Receiver` is an input operator: ``class: container.receivers:SocketTextReceiver``
  goes straight into a spec. Its code implements ``on_start()`` (must not block:
  start a thread) and ``on_stop()``, and calls ``store``/``store_many`` from its
  own threads, ``restart(reason, error)`` when the source breaks and
  ``stop(reason)`` when it is done.
* The :class:`ReceiverSupervisor` runs ``on_start``/``on_stop`` on its own thread
  and restarts the receiver with a doubling backoff; past
  ``RECEIVER_MAX_RESTARTS`` failures in a row the operator raises
  :class:`~container.operator.FatalError` and the application fails.
* The :class:`BlockGenerator` cuts stored items into blocks; at most
  ``block_queue_capacity`` blocks wait between cutting and emission, beyond that
  ``store`` blocks (backpressure, never a drop).
* With ``RECEIVER_WAL`` on, the :class:`WriteAheadLog` keeps every block in
  ``APP_PATH/wal/<operator id>/<block seq>`` before it is acknowledged or
  emitted, and records which window emitted which blocks. A redeployed receiver
  re-emits exactly those blocks in exactly those windows after its checkpoint,
  then the blocks it had stored but not emitted, and only then restarts the
  source: with ``PROCESSING_MODE: EXACTLY_ONCE`` every acknowledged item
  reaches the outputs once.
"""

from __future__ import annotations

import collections
import enum
import logging
import pickle
import socket
import threading
import time
from dataclasses import dataclass, field
from typing import Any, Callable, ClassVar, Iterable

import pyarrow.fs as pafs

from container import fs
from container.operator import (FatalError, InputOperator, OperatorContext, OutputPort,
                                ShutdownException)

__all__ = [
    "Block",
    "BlockGenerator",
    "GeneratorStopped",
    "WriteAheadLog",
    "SupervisorState",
    "ReceiverSupervisor",
    "ReceiverInputOperator",
    "Receiver",
    "SocketTextReceiver",
    "DirectoryReceiver",
]

logger = logging.getLogger("container.receivers")


def _describe(reason: str, error: BaseException | None = None) -> str:
    """One line: the reason and, when given, the error's type and message."""
    text = reason if error is None else f"{reason}: {type(error).__name__}: {error}"
    return " ".join(text.split())


# ---------------------------------------------------------------- blocks

@dataclass
class Block:
    """Items stored together: the unit of the write-ahead log, acknowledgement and emission."""

    #: Position in the receiver's block sequence (increasing, never reused with the WAL on).
    seq: int
    #: The stored items, in store order.
    items: list[Any]
    #: What ``store_many(..., metadata=...)`` attached to these items.
    metadata: list[Any] = field(default_factory=list)
    #: Items stored in this process up to and including this block (0 for blocks read back from the WAL).
    items_through: int = 0
    #: ``time.monotonic()`` when the block was cut.
    created: float = 0.0


class GeneratorStopped(RuntimeError):
    """``store`` after the receiver's operator was torn down: the item has nowhere to go."""


class BlockGenerator:
    """Cuts stored items into blocks every interval and queues them, boundedly, for pushing.

    A block counts against ``capacity`` from when it is cut until
    :meth:`release` (the operator emitted it). While ``capacity`` blocks are
    outstanding, ``add``/``add_many`` wait and the timer does not cut: the
    receiver is slowed down, nothing is dropped.

    Parameters
    ----------
    interval_millis:
        Block interval (``BLOCK_INTERVAL_MILLIS``).
    capacity:
        Most blocks between cutting and release.
    first_seq:
        Sequence number of the first block cut.
    """

    def __init__(self, interval_millis: int = 200, capacity: int = 10, first_seq: int = 0) -> None:
        self.interval = max(int(interval_millis), 1) / 1000
        self.capacity = max(int(capacity), 1)
        #: Items added since this generator was created.
        self.items_added = 0
        #: Blocks cut since this generator was created.
        self.blocks_cut = 0
        self._next_seq = first_seq
        self._cond = threading.Condition()
        self._buffer: list[Any] = []
        self._metadata: list[Any] = []
        self._blocks: collections.deque[Block] = collections.deque()
        self._outstanding = 0
        self._stopped = False
        self._halt = threading.Event()
        self._timer: threading.Thread | None = None

    # -- storing side --------------------------------------------------------
    def add(self, item: Any) -> None:
        """Add one item; waits while the block queue is full."""
        with self._cond:
            self._wait_for_room()
            self._buffer.append(item)
            self.items_added += 1

    def add_many(self, items: Iterable[Any], metadata: Any = None) -> None:
        """Add items (all into the same block); ``metadata`` travels with that block.

        With ``metadata`` an empty ``items`` still makes a block (e.g. "this
        empty file is done").
        """
        items = list(items)
        with self._cond:
            self._wait_for_room()
            self._buffer.extend(items)
            self.items_added += len(items)
            if metadata is not None:
                self._metadata.append(metadata)

    def _wait_for_room(self) -> None:
        while self._outstanding >= self.capacity and not self._stopped:
            self._cond.wait(0.1)
        if self._stopped:
            raise GeneratorStopped("the receiver's operator stopped; the item has nowhere to go")

    # -- cutting -------------------------------------------------------------
    def start(self) -> None:
        """Start the block interval timer."""
        if self._timer is None:
            self._timer = threading.Thread(target=self._tick, daemon=True, name="block-generator")
            self._timer.start()

    def _tick(self) -> None:
        due = time.monotonic() + self.interval
        while not self._halt.wait(max(0.0, due - time.monotonic())):
            self.cut()
            due += self.interval
            now = time.monotonic()
            if due <= now:  # fell behind (e.g. the process was paused): no burst of cuts
                due = now + self.interval

    def cut(self) -> Block | None:
        """Cut what was added since the last cut into a block, if any and if there is room."""
        with self._cond:
            if not (self._buffer or self._metadata) or self._outstanding >= self.capacity:
                return None
            block = Block(self._next_seq, self._buffer, self._metadata, self.items_added,
                          time.monotonic())
            self._buffer, self._metadata = [], []
            self._next_seq += 1
            self._outstanding += 1
            self.blocks_cut += 1
            self._blocks.append(block)
            self._cond.notify_all()
            return block

    # -- pushing side --------------------------------------------------------
    def take(self, timeout: float | None = None) -> Block | None:
        """The oldest cut block not taken yet, waiting up to ``timeout``; None if none came."""
        deadline = None if timeout is None else time.monotonic() + timeout
        with self._cond:
            while not self._blocks:
                left = None if deadline is None else deadline - time.monotonic()
                if self._stopped or (left is not None and left <= 0):
                    return None
                self._cond.wait(left)
            return self._blocks.popleft()

    def release(self, count: int = 1) -> None:
        """``count`` taken blocks were emitted: room for as many new ones."""
        with self._cond:
            self._outstanding = max(0, self._outstanding - count)
            self._cond.notify_all()

    # -- state ---------------------------------------------------------------
    @property
    def outstanding(self) -> int:
        """Blocks cut and not yet released."""
        return self._outstanding

    @property
    def idle(self) -> bool:
        """Nothing buffered and no block outstanding."""
        with self._cond:
            return not (self._buffer or self._metadata) and self._outstanding == 0

    def stop(self) -> None:
        """Stop the timer and refuse further items (waiting ``add`` calls raise)."""
        self._halt.set()
        with self._cond:
            self._stopped = True
            self._cond.notify_all()
        if self._timer is not None and self._timer is not threading.current_thread():
            self._timer.join(2.0)


# ---------------------------------------------------------------- write-ahead log

class WriteAheadLog:
    """One receiver's blocks, and which window emitted them, under a directory URI.

    Layout (every write atomic, through :mod:`container.fs`)::

        <root>/<seq>                        a block: pickle of (seq, items, metadata)
        <root>/windows/<window id>.<seq>    window <window id> emitted blocks up to <seq>

    Blocks are emitted in sequence order, so the last sequence number per
    window is the whole mapping: window w emitted the blocks after the
    previous window's last, up to its own.
    """

    def __init__(self, root: str) -> None:
        self.root = root
        self._windows = fs.join(root, "windows")
        #: window id -> index entry names written or found for it
        self._entries: dict[int, list[str]] = {}

    def _block_uri(self, seq: int) -> str:
        return fs.join(self.root, str(seq))

    def write(self, block: Block) -> None:
        """Make a block durable."""
        data = pickle.dumps((block.seq, block.items, block.metadata), protocol=pickle.HIGHEST_PROTOCOL)
        fs.write_atomic(self._block_uri(block.seq), data)

    def read(self, seq: int) -> Block:
        """A block written before (possibly by an earlier container)."""
        stored_seq, items, metadata = pickle.loads(fs.read_bytes(self._block_uri(seq)))
        return Block(stored_seq, items, metadata)

    def remove_partial_writes(self) -> None:
        """Delete temporary files a killed writer left behind (call before writing)."""
        for directory in (self.root, self._windows):
            for info in fs.list_dir(directory):
                if info.base_name.startswith("._tmp-"):
                    fs.delete(fs.join(directory, info.base_name))

    def block_seqs(self) -> list[int]:
        """Sequence numbers of the blocks in the log, ascending."""
        return sorted(int(info.base_name) for info in fs.list_dir(self.root)
                      if info.type == pafs.FileType.File and info.base_name.isdigit())

    def record_window(self, window_id: int, last_seq: int) -> None:
        """Window ``window_id`` emits blocks up to ``last_seq`` (written before they are emitted)."""
        name = f"{window_id}.{last_seq}"
        fs.write_atomic(fs.join(self._windows, name), b"")
        self._entries.setdefault(window_id, []).append(name)

    def window_index(self) -> dict[int, int]:
        """Window id -> the last block seq it emitted, from the entries on disk."""
        index: dict[int, int] = {}
        for info in fs.list_dir(self._windows):
            window, dot, seq = info.base_name.partition(".")
            if info.type != pafs.FileType.File or not dot or not window.isdigit() or not seq.isdigit():
                continue
            w, s = int(window), int(seq)
            index[w] = max(index.get(w, -1), s)
            self._entries.setdefault(w, []).append(info.base_name)
        return index

    def delete_blocks(self, first: int, last: int) -> None:
        """Delete blocks ``first``..``last`` (those missing already are skipped)."""
        for seq in range(first, last + 1):
            fs.delete(self._block_uri(seq))

    def forget_windows(self, through: int) -> None:
        """Delete the index entries of windows up to ``through``."""
        for window in sorted(w for w in self._entries if w <= through):
            for name in self._entries.pop(window):
                fs.delete(fs.join(self._windows, name))


# ---------------------------------------------------------------- supervisor

class SupervisorState(str, enum.Enum):
    """Lifecycle of a supervised receiver."""

    INITIALIZED = "INITIALIZED"
    STARTED = "STARTED"
    RESTARTING = "RESTARTING"
    #: ``stop(reason)``: the receiver is done; the stream ends once everything is emitted.
    STOPPED = "STOPPED"
    #: Too many failures in a row, or ``stop(reason, error)``: the application fails.
    FAILED = "FAILED"
    #: The operator was torn down.
    SHUT_DOWN = "SHUT_DOWN"


_FINAL = (SupervisorState.STOPPED, SupervisorState.FAILED, SupervisorState.SHUT_DOWN)
_REQUEST_RANK = {"restart": 0, "stop": 1, "shutdown": 2}


class ReceiverSupervisor:
    """Starts a receiver, restarts it with backoff when it asks, stops it (Spark's ReceiverSupervisor).

    ``on_start``/``on_stop`` run on the supervisor's own thread. A restart
    (asked by the receiver, or an exception from ``on_start``) calls
    ``on_stop``, waits ``min(initial * 2 ** (failures - 1), longest)`` and
    calls ``on_start`` again. Failures count in a row: a receiver that stored
    something since its last start begins again at one. Past ``max_restarts``
    failures in a row the supervisor gives up: :attr:`state` becomes FAILED and
    :attr:`fatal` says why.

    Parameters
    ----------
    receiver:
        Anything with ``on_start()`` and ``on_stop()``.
    progress:
        Returns a number that grows while the receiver makes progress
        (items stored); default: never.
    label:
        Names the receiver in messages.
    max_restarts:
        ``RECEIVER_MAX_RESTARTS``.
    backoff:
        (first, longest) delay before a restart, in seconds.
    log:
        Where restart messages go.
    """

    def __init__(self, receiver: Any, progress: Callable[[], int] = lambda: 0, *,
                 label: str = "receiver", max_restarts: int = 10,
                 backoff: tuple[float, float] = (0.1, 5.0),
                 log: Callable[[str], None] | None = None) -> None:
        self.receiver = receiver
        self.label = label
        self.max_restarts = int(max_restarts)
        self.backoff = backoff
        self.state = SupervisorState.INITIALIZED
        #: Restarts done so far.
        self.restarts = 0
        #: Failures since the receiver last made progress.
        self.failures = 0
        #: The last restart's reason and error, one line.
        self.last_error = ""
        #: Why the application must fail (state FAILED), else None.
        self.fatal: str | None = None
        #: Why the receiver stopped (state STOPPED).
        self.stop_reason = ""
        self._progress = progress
        self._log = log or (lambda msg: logger.info("%s", msg))
        self._cond = threading.Condition()
        self._request: tuple[str, str, BaseException | None] | None = None
        self._receiving = False
        self._thread: threading.Thread | None = None

    @property
    def receiving(self) -> bool:
        """The receiver is started and no restart or stop is under way."""
        return self._receiving

    def backoff_delay(self, failures: int) -> float:
        """Seconds to wait before restarting after ``failures`` failures in a row."""
        first, longest = self.backoff
        return min(first * 2 ** max(failures - 1, 0), longest)

    def start(self) -> None:
        """Start the receiver on the supervisor's thread."""
        with self._cond:
            if self._thread is not None or self.state in _FINAL:
                return
            self._thread = threading.Thread(target=self._run, daemon=True,
                                            name=f"receiver-supervisor-{self.label}")
        self._thread.start()

    def request_restart(self, reason: str, error: BaseException | None = None) -> None:
        """Stop the receiver and start it again after the backoff."""
        self._post("restart", reason, error)

    def request_stop(self, reason: str, error: BaseException | None = None) -> None:
        """Stop the receiver for good; with an ``error`` the application fails."""
        self._post("stop", reason, error)

    def request_shutdown(self) -> None:
        """Stop the receiver because its operator is going away."""
        self._post("shutdown", "the operator is shutting down", None)

    def join(self, timeout: float | None = None) -> None:
        """Wait for the supervisor's thread to end (after a stop or shutdown)."""
        thread = self._thread
        if thread is not None and thread is not threading.current_thread():
            thread.join(timeout)

    def _post(self, kind: str, reason: str, error: BaseException | None) -> None:
        with self._cond:
            if self.state in _FINAL:
                return
            self._receiving = False
            if self._thread is None and kind != "restart":
                self._finish(kind, reason, error)  # never started: nothing to stop
                return
            if self._request is None or _REQUEST_RANK[kind] > _REQUEST_RANK[self._request[0]]:
                self._request = (kind, reason, error)
            self._cond.notify_all()

    def _run(self) -> None:
        delay = 0.0
        while True:
            with self._cond:
                deadline = time.monotonic() + delay
                while self._request is None or self._request[0] == "restart":
                    left = deadline - time.monotonic()
                    if left <= 0:
                        break
                    self._cond.wait(left)
                if self._request is not None and self._request[0] != "restart":
                    self._finish(*self._request)
                    return
                self._request = None  # a restart asked during the backoff is this one
                self.state = SupervisorState.STARTED
                self._receiving = True
            mark = self._progress()
            try:
                self.receiver.on_start()
            except Exception as exc:  # noqa: BLE001 - receiver code may raise anything
                self._post("restart", "error starting receiver", exc)
            with self._cond:
                while self._request is None:
                    self._cond.wait()
                kind, reason, error = self._request
                if kind == "restart":
                    self._request = None
                self._receiving = False
            self._stop_receiver()
            if kind != "restart":
                with self._cond:
                    self._finish(kind, reason, error)
                return
            self.failures = 1 if self._progress() > mark else self.failures + 1
            self.last_error = _describe(reason, error)
            if self.failures > self.max_restarts:
                with self._cond:
                    self.state = SupervisorState.FAILED
                    self.fatal = (f"receiver {self.label} failed {self.failures} times in a row "
                                  f"(RECEIVER_MAX_RESTARTS={self.max_restarts}); last error: "
                                  f"{self.last_error}")
                self._log(self.fatal)
                return
            self.restarts += 1
            delay = self.backoff_delay(self.failures)
            with self._cond:
                if self.state not in _FINAL:
                    self.state = SupervisorState.RESTARTING
            self._log(f"receiver {self.label}: restart {self.restarts} in {delay:.2f}s: {self.last_error}")

    def _stop_receiver(self) -> None:
        try:
            self.receiver.on_stop()
        except Exception as exc:  # noqa: BLE001
            logger.warning("receiver %s: on_stop failed: %s", self.label, _describe("", exc))

    def _finish(self, kind: str, reason: str, error: BaseException | None) -> None:
        """Final state for a stop or shutdown request (``_cond`` held)."""
        self._request = None
        self._receiving = False
        if kind == "shutdown":
            self.state = SupervisorState.SHUT_DOWN
        elif error is not None:
            self.state = SupervisorState.FAILED
            self.last_error = _describe(reason, error)
            self.fatal = f"receiver {self.label} stopped: {self.last_error}"
        else:
            self.state = SupervisorState.STOPPED
            self.stop_reason = reason
        self._cond.notify_all()



# ---------------------------------------------------------------- the operator side

class ReceiverInputOperator(InputOperator):
    """The operator half of a receiver: blocks in, windows out, the WAL, recovery.

    Subclass :class:`Receiver`, not this. Its checkpointed state adds one
    number to the subclass's own: ``_block_cursor``, the last block emitted.
    Subclasses overriding ``setup``, ``begin_window``, ``end_window``,
    ``committed`` or ``teardown`` must call ``super()``.

    Attributes read from the context: ``BLOCK_INTERVAL_MILLIS`` (200),
    ``RECEIVER_WAL`` (false), ``RECEIVER_MAX_RESTARTS`` (10).
    """

    output = OutputPort()
    #: Blocks that may wait between cutting and emission before ``store`` blocks.
    block_queue_capacity: ClassVar[int] = 10
    #: (first, longest) delay in seconds before restarting the receiver; doubles in between.
    restart_backoff: ClassVar[tuple[float, float]] = (0.1, 5.0)

    def __new__(cls, *args: Any, **kwargs: Any) -> "ReceiverInputOperator":
        self = super().__new__(cls, *args, **kwargs)
        #: Sequence number of the last block emitted (checkpointed: the WAL position).
        self.__dict__["_block_cursor"] = -1
        self.__dict__["_rx"] = None
        return self

    # -- hooks the receiver implements ---------------------------------------
    def on_start(self) -> None:
        """Start receiving: open connections, start threads. Must not block."""
        raise NotImplementedError(f"{type(self).__name__} must implement on_start()")

    def on_stop(self) -> None:
        """Stop receiving: close what ``on_start`` opened, end its threads."""

    def on_block_stored(self, block: Block) -> None:
        """Acknowledgement hook: ``block`` is stored and will be emitted.

        Called on the pushing thread, in block order. With ``RECEIVER_WAL``
        on, the block is durable in the write-ahead log: a source that
        acknowledges (a message queue, a reliable socket protocol) may now
        forget ``block``'s items. With the WAL off, a lost container loses
        the block.
        """

    def on_block_emitted(self, block: Block) -> None:
        """``block``'s items were just emitted (live or replayed from the WAL).

        Called on the operator's thread: the place to update checkpointed
        receiver state (e.g. "this file is done") so it matches what the
        windows carried.
        """

    # -- state ---------------------------------------------------------------
    def get_state(self) -> dict[str, Any]:
        state = super().get_state()
        state.pop("_rx", None)
        return state

    # -- lifecycle -----------------------------------------------------------
    def setup(self, context: OperatorContext) -> None:
        self._rx = _Runtime(self, context)

    def begin_window(self, window_id: int) -> None:
        self._rx.window = window_id

    def emit_tuples(self) -> None:
        self._rx.emit()

    def end_window(self) -> None:
        self._rx.end_window()

    def committed(self, window_id: int) -> None:
        if self._rx is not None:
            self._rx.committed(window_id)

    def teardown(self) -> None:
        if self._rx is not None:
            self._rx.close()


class _Runtime:
    """What a running receiver operator holds besides its state: generator, supervisor, WAL, threads."""

    def __init__(self, op: ReceiverInputOperator, context: OperatorContext) -> None:
        attrs = context.attributes
        self.op = op
        self.context = context
        self.label = f"'{context.name}' ({type(op).__name__}, operator {context.id})"
        self.window = context.checkpoint_window
        self.wal: WriteAheadLog | None = None
        #: Recovery: window -> last block seq it emitted, for windows after the checkpoint.
        self.replay: dict[int, int] = {}
        #: Recovery: the last window that emitted blocks before the crash.
        self.replay_through = context.checkpoint_window
        #: Recovery: blocks in the WAL that no window emitted yet (they go after replay_through).
        self.pending: list[int] = []
        #: (window, last block emitted through it), for deleting committed blocks.
        self.marks: collections.deque[tuple[int, int]] = collections.deque()
        self.wal_floor = 0
        first_seq = op._block_cursor + 1
        if attrs.get("RECEIVER_WAL"):
            if not context.app_path:
                raise ValueError(
                    f"receiver {self.label}: RECEIVER_WAL is on but the operator has no APP_PATH to "
                    f"write the write-ahead log under; run it in a launched application (which has "
                    f"one) or set RECEIVER_WAL: false")
            self.wal = WriteAheadLog(fs.join(context.app_path, "wal", str(context.id)))
            first_seq = self._recover(op._block_cursor, context.checkpoint_window)
        self.generator = BlockGenerator(int(attrs.get("BLOCK_INTERVAL_MILLIS") or 200),
                                        op.block_queue_capacity, first_seq)
        max_restarts = attrs.get("RECEIVER_MAX_RESTARTS")
        self.supervisor = ReceiverSupervisor(
            op, lambda: self.generator.items_added, label=f"'{context.name}' ({type(op).__name__})",
            max_restarts=10 if max_restarts is None else int(max_restarts),
            backoff=op.restart_backoff, log=context.log)
        self.ready: collections.deque[Block] = collections.deque()
        self.lock = threading.Lock()
        self.stored = threading.Condition()
        #: items_through of the last block handed to ``on_block_stored``
        self.stored_items = 0
        self.error: BaseException | None = None
        self.started = False
        self.closing = False
        self.pusher = threading.Thread(target=self._push, daemon=True, name=f"block-pusher-{context.id}")
        self.blocks_emitted = 0
        self.items_emitted = 0
        self.rate_samples: collections.deque[tuple[float, int]] = collections.deque()

    def _recover(self, cursor: int, checkpoint: int) -> int:
        """Plan the replay from the WAL; returns the next block seq to use."""
        assert self.wal is not None
        self.wal.remove_partial_writes()
        seqs = self.wal.block_seqs()
        index = self.wal.window_index()
        self.replay = {w: s for w, s in index.items() if w > checkpoint and s > cursor}
        replayed_through = max(self.replay.values(), default=cursor)
        self.replay_through = max(self.replay, default=checkpoint)
        self.pending = [s for s in seqs if s > replayed_through]
        self.marks.append((checkpoint, cursor))
        self.wal_floor = seqs[0] if seqs else cursor + 1
        if self.replay or self.pending:
            self.context.log(f"receiver {self.label}: replaying {len(self.replay)} windows up to block "
                             f"{replayed_through} and {len(self.pending)} stored blocks from the WAL")
        return max([cursor, *seqs]) + 1

    # -- the pushing thread ----------------------------------------------------
    def _push(self) -> None:
        """Blocks from the generator: WAL write, hand to the operator, acknowledge."""
        while not self.closing:
            block = self.generator.take(timeout=0.1)
            if block is None:
                continue
            if self.wal is not None and not self._write(block):
                return
            with self.lock:
                self.ready.append(block)
            with self.stored:
                self.stored_items = block.items_through
                self.stored.notify_all()
            try:
                self.op.on_block_stored(block)
            except Exception as exc:  # noqa: BLE001 - receiver code
                logger.warning("receiver %s: on_block_stored failed: %s", self.label, _describe("", exc))

    def _write(self, block: Block) -> bool:
        delay = 0.1
        for attempt in range(4):
            try:
                assert self.wal is not None
                self.wal.write(block)
                return True
            except Exception as exc:  # noqa: BLE001 - file system errors of any kind
                if attempt == 3 or self.closing:
                    self.error = exc
                    return False
                logger.warning("receiver %s: WAL write of block %d failed (%s); retrying",
                               self.label, block.seq, exc)
                time.sleep(delay)
                delay *= 2
        return False

    # -- the operator thread --------------------------------------------------
    def emit(self) -> None:
        """One ``emit_tuples`` call: replay, then stored-but-unemitted WAL blocks, then live blocks."""
        sup = self.supervisor
        if sup.fatal:
            raise FatalError(sup.fatal)
        if self.error is not None:
            raise RuntimeError(f"receiver {self.label}: writing the write-ahead log failed: "
                               f"{type(self.error).__name__}: {self.error}") from self.error
        if self.window <= self.replay_through:
            # A window emitted before the crash: exactly what it emitted then, however often
            # emit_tuples is called (downstream may have checkpointed it).
            due = [w for w in self.replay if w <= self.window]
            if due:
                last = max(self.replay.pop(w) for w in due)
                self._emit(self._read(range(self.op._block_cursor + 1, last + 1)), record=False)
            return
        if self.pending:
            blocks = self._read(self.pending)
            self.pending = []
            self._emit(blocks, record=True)
            return
        if not self.started:
            self.started = True
            self.generator.start()
            self.pusher.start()
            sup.start()
        with self.lock:
            blocks = list(self.ready)
            self.ready.clear()
        if blocks:
            self._emit(blocks, record=True)
            self.generator.release(len(blocks))
        elif sup.state == SupervisorState.STOPPED and self.generator.idle:
            raise ShutdownException(f"receiver {self.label} stopped: {sup.stop_reason}")

    def _read(self, seqs: Iterable[int]) -> list[Block]:
        assert self.wal is not None
        return [self.wal.read(seq) for seq in seqs]

    def _emit(self, blocks: list[Block], record: bool) -> None:
        if not blocks:
            return
        if record and self.wal is not None:
            self.wal.record_window(self.window, blocks[-1].seq)
        emit = self.op.output.emit
        for block in blocks:
            for item in block.items:
                emit(item)
            self.op._block_cursor = block.seq
            self.items_emitted += len(block.items)
            self.op.on_block_emitted(block)
        self.blocks_emitted += len(blocks)

    def end_window(self) -> None:
        cursor = self.op._block_cursor
        if self.wal is not None and (not self.marks or self.marks[-1][1] != cursor):
            self.marks.append((self.window, cursor))
        self.context.set_metric("receiver", self.stats())

    def committed(self, window_id: int) -> None:
        """Delete the WAL blocks and index entries of windows up to ``window_id``."""
        if self.wal is None:
            return
        through = None
        while self.marks and self.marks[0][0] <= window_id:
            through = self.marks.popleft()[1]
        if through is not None and through >= self.wal_floor:
            self.wal.delete_blocks(self.wal_floor, through)
            self.wal_floor = through + 1
        self.wal.forget_windows(window_id)

    def stats(self) -> dict[str, Any]:
        """The ``receiver`` metric of this window."""
        now, added = time.monotonic(), self.generator.items_added
        samples = self.rate_samples
        samples.append((now, added))
        while len(samples) > 2 and now - samples[1][0] >= 5.0:
            samples.popleft()
        then, before = samples[0]
        sup = self.supervisor
        return {
            "state": "REPLAYING" if self.window <= self.replay_through or self.pending else sup.state.value,
            "records_per_sec": round((added - before) / (now - then), 1) if now > then else 0.0,
            "records": added,
            "emitted": self.items_emitted,
            "blocks": self.blocks_emitted,
            "queue": self.generator.outstanding,
            "queue_capacity": self.generator.capacity,
            "queue_fill": round(self.generator.outstanding / self.generator.capacity, 2),
            "restarts": sup.restarts,
            "last_error": sup.last_error,
            "wal": self.wal is not None,
            "block_cursor": self.op._block_cursor,
        }

    def wait_stored(self, count: int, timeout: float | None) -> bool:
        deadline = None if timeout is None else time.monotonic() + timeout
        with self.stored:
            while self.stored_items < count and not self.closing:
                left = None if deadline is None else deadline - time.monotonic()
                if left is not None and left <= 0:
                    return False
                self.stored.wait(0.1 if left is None else min(left, 0.1))
            return self.stored_items >= count

    def close(self) -> None:
        self.closing = True
        self.supervisor.request_shutdown()  # is_stopped() is true from here on
        self.generator.stop()               # wakes stores waiting for room
        self.supervisor.join(5.0)
        if self.pusher.is_alive():
            self.pusher.join(2.0)


# ---------------------------------------------------------------- the receiver API

class Receiver(ReceiverInputOperator):
    """Base class of receivers: a push-based source run as an input operator.

    Implement ``on_start()`` (start a thread that reads the source and calls
    :meth:`store`; never block) and ``on_stop()``. Properties are annotated
    class attributes, as for operators; state (instance attributes minus
    ``transient`` names) is checkpointed with the operator. Keep threads,
    sockets and locks in ``transient``.

    Example::

        class Ticker(Receiver):
            every: float = 1.0
            transient = ("_thread",)

            def on_start(self):
                self._thread = threading.Thread(target=self._run, daemon=True)
                self._thread.start()

            def _run(self):
                while not self.is_stopped():
                    self.store(time.time())
                    time.sleep(self.every)

    Output: one tuple per stored item on the ``output`` port.
    """

    def _runtime(self) -> _Runtime:
        rt = self._rx
        if rt is None:
            raise RuntimeError(f"{type(self).__name__} is not running (store() before setup)")
        return rt

    def store(self, item: Any) -> None:
        """Store one item; it is emitted in a later window. Waits while the block queue is full.

        Raises
        ------
        GeneratorStopped
            The operator was torn down.
        """
        self._runtime().generator.add(item)

    def store_many(self, items: Iterable[Any], metadata: Any = None) -> None:
        """Store items together (they land in one block); ``metadata`` rides along with the block.

        The block's ``metadata`` list reaches :meth:`on_block_stored` and
        :meth:`on_block_emitted` (also when replayed from the WAL), so it can
        say what the items were, e.g. ``{"file": name}``.
        """
        self._runtime().generator.add_many(items, metadata)

    def restart(self, reason: str, error: BaseException | None = None) -> None:
        """Ask the supervisor to stop the receiver and start it again after a backoff.

        Returns at once; :meth:`is_stopped` is true from now until the
        restart. Failures in a row beyond ``RECEIVER_MAX_RESTARTS`` fail the
        application with ``reason`` and ``error``.
        """
        self._runtime().supervisor.request_restart(reason, error)

    def stop(self, reason: str, error: BaseException | None = None) -> None:
        """Stop receiving for good.

        Without ``error`` the stream ends gracefully once everything stored
        was emitted. With ``error`` the application fails (FatalError).
        """
        self._runtime().supervisor.request_stop(reason, error)

    def is_stopped(self) -> bool:
        """True unless the receiver is started and no restart or stop is under way."""
        rt = self._rx
        return rt is None or not rt.supervisor.receiving

    def items_stored(self) -> int:
        """Items stored since this container started (the counter ``Block.items_through`` uses)."""
        return self._runtime().generator.items_added

    def wait_stored(self, count: int, timeout: float | None = None) -> bool:
        """Wait until the first ``count`` items (as counted by :meth:`items_stored`) are in stored blocks.

        With the WAL on they are durable then. Returns False on timeout or
        when the operator is shutting down.
        """
        return self._runtime().wait_stored(count, timeout)


# ---------------------------------------------------------------- built-in receivers

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
                       if info.type == pafs.FileType.File)
        return [n for n in names if not n.startswith((".", "_"))
                and n not in self._claimed and n not in self.finished]

    def on_block_emitted(self, block: Block) -> None:
        for meta in block.metadata:
            if isinstance(meta, dict) and "file" in meta:
                self.finished.add(meta["file"])
