"""The receiver as an input operator: the :class:`Receiver` API and what runs it.

:class:`Receiver` is what receiver code subclasses (``on_start``, ``on_stop``,
``store``, ``restart``, ``stop``). Its base :class:`ReceiverInputOperator` is
the operator half: setup builds a :class:`_Runtime` (block generator,
supervisor, write-ahead log, the pushing thread), windows emit the blocks,
recovery replays the log, committed windows delete it.
"""

from __future__ import annotations

import collections
import logging
import threading
import time
from typing import Any, ClassVar, Iterable

from stram.common import apppath
from stram.operator import FatalError, InputOperator, OperatorContext, OutputPort, ShutdownException
from stram.receivers.blocks import Block, BlockGenerator
from stram.receivers.supervisor import ReceiverSupervisor, SupervisorState, describe
from stram.receivers.wal import WriteAheadLog

__all__ = ["ReceiverInputOperator", "Receiver"]

#: One logger for the whole package, under the name it always had.
logger = logging.getLogger("stram.receivers")


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
            self.wal = WriteAheadLog(apppath.wal(context.app_path, context.id))
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
        #: The window whose blocks were last recorded in the WAL's index.
        self._recorded_window = -1
        self.rate_samples: collections.deque[tuple[float, int]] = collections.deque()

    def _recover(self, cursor: int, checkpoint: int) -> int:
        """Plan the replay from the WAL; returns the next block seq to use."""
        assert self.wal is not None
        self.wal.remove_partial_writes()
        seqs = self.wal.block_seqs()
        index = self.wal.window_index()
        self.replay = {w: s for w, s in index.items() if w > checkpoint and s > cursor}
        replayed_through = max(self.replay.values(), default=cursor)
        # windows up to the newest one the last run ended (empty ones too) replay as they were
        ended = self.wal.ended_window()
        self.replay_through = max([checkpoint, *self.replay] + ([ended] if ended > checkpoint else []))
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
                logger.warning("receiver %s: on_block_stored failed: %s", self.label, describe("", exc))

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
            self._recorded_window = self.window
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
        if self.wal is not None and self.window > self.replay_through and self._recorded_window != self.window:
            self.wal.mark_ended(self.window)  # empty: a replay must not fill it (downstream may be past it)
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
