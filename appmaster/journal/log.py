"""The journal as a snapshot and an append-only log of what changed since it.

Rewriting the whole state before every heartbeat response costs time in the
size of the plan (megabytes of JSON at a few thousand operators). The
:class:`JournalWriter` writes ``APP_PATH/journal/snapshot`` (the document of
:mod:`stram.master.journal.document`, with ``"log_generation": g``) when the plan's shape
changes (operators or containers added or removed, operators moved or
rewired) and on its first write; in between it appends to ``journal/log-<g>``
one JSON line per write with the fields that changed::

    {"ops": {"7": {"checkpoints": [...], "current_window": ...}},
     "containers": {"container_000003": {"last_heartbeat_millis": ...}},
     "top": {"committed": ...}, "removed": [{...}]}

Which operators and containers changed comes from the marks of the plan's
journal tracker (:attr:`stram.master.core.changes.PlanChanges.journal`), so a heartbeat
costs the size of what it changed. Progress figures (:data:`stram.master.core.changes.VOLATILE`: current windows,
the heartbeat and window clocks) do not mark an object: they are written with
its next other change and in every snapshot, and a restored master resets the
clocks and reads a current window as a lower bound until the next heartbeat.

When the log has grown past :attr:`JournalWriter.compact_bytes` (twice the
snapshot), the writer goes on in ``log-<g+1>`` and a process of its own
(:mod:`stram.master.journal.compactor`) makes snapshot g+1 of snapshot g and its log, so
the master's lock is never held for it; until that snapshot is in place,
readers replay both logs. :func:`replay` applies a log to its snapshot;
:func:`read_journal` returns the document a full snapshot written now would hold. A last line
without its newline (a write cut short) was never acknowledged, and is
ignored; a write that fails (a full disk) is cut off the file again, so the
master's retry appends a whole line.

Durability is the same as the snapshot's: the line is written (``os.write``
on a local file system; an append stream closed after each line elsewhere)
under the master's lock, before the response that depends on it leaves.
"""

from __future__ import annotations

import logging
import os
from typing import Any, Callable, Protocol

from stram.common import apppath, fs
from stram.master.core.plan import PTContainer, PTOperator
from stram.master.core.statedoc import fields_doc
from stram.master.journal import document as journal

log = logging.getLogger("stram.master.journal")

__all__ = ["JournalWriter", "read_journal", "replay", "log_uri", "top_doc", "compact", "compact_here", "Compaction"]

def log_uri(app_path: str, generation: int) -> str:
    """The log of the snapshot of ``generation``."""
    return fs.join(app_path, apppath.JOURNAL, f"log-{generation}")


def top_doc(state: Any) -> dict[str, Any]:
    """The journal's top-level fields but ``plan`` and ``removed`` (as :meth:`MasterState.snapshot`)."""
    return {"version": journal.VERSION, "app_id": state.app_id, "attempt": state.attempt,
            "start_window_millis": state.start_window_millis, "committed": state.committed,
            "shutdown_operators": [[w, list(ids)] for w, ids in sorted(state.shutdown_operators.items())],
            "state": state.state, "diagnostics": state.diagnostics, "started_millis": state.started_millis,
            "errors": [{**e, "operators": list(e["operators"])} for e in state.errors],
            "shutdown_requested": state.shutdown_requested,
            "node_failures": dict(state.node_failures), "blacklist": dict(state.blacklist)}


def _hot(obj: Any) -> dict[str, Any]:
    """An operator's or a container's fields that change while it runs, as plain data."""
    if isinstance(obj, PTOperator):
        return {"container": obj.container, "state": obj.state.value, "checkpoints": list(obj.checkpoints),
                "recovery_checkpoint": obj.recovery_checkpoint, "current_window": obj.current_window,
                "shutdown_window": obj.shutdown_window, "restarts": obj.restarts, "last_error": obj.last_error,
                "window_advanced_millis": obj.window_advanced_millis, "resume_window": obj.resume_window,
                "publisher_masks": dict(obj.publisher_masks)}
    return fields_doc(obj)


def _cold(obj: PTOperator) -> tuple:
    """The identities of an operator's cold containers (its ids and names never change)."""
    return id(obj.properties), id(obj.attributes), id(obj.inputs), id(obj.outputs)


class JournalWriter:
    """Writes one application's journal: snapshots and the log between them.

    Parameters
    ----------
    app_path:
        The application's directory URI.
    generation:
        The generation of the journal found at start (0: none); the first write is a
        snapshot of the next one.
    compactor:
        Starts the compaction of a generation (:class:`Compaction`); default :func:`compact_here`.
    """

    def __init__(self, app_path: str, generation: int = 0,
                 compactor: Callable[[str, int], Compaction] | None = None) -> None:
        self.app_path = app_path
        self.generation = generation
        #: Starts a compaction (the master's: :func:`stram.master.journal.compactor.start`, another process;
        #: by default :func:`compact_here`, in this thread).
        self.compactor = compactor or compact_here
        #: The compaction under way: snapshot ``generation - 1`` and its log becoming snapshot ``generation``.
        self._compacting: Compaction | None = None
        #: Bytes of log after which the next write is a snapshot (at least twice the snapshot).
        self.compact_bytes = 8 << 20
        self.min_compact_bytes = 8 << 20
        #: ... and at least this many times the size of the last snapshot.
        self.compact_ratio = 2.0
        self._plan: Any = None
        self._key: tuple = ()
        self._epoch = -1
        self._ops: dict[int, dict[str, Any]] = {}
        self._cold: dict[int, tuple] = {}
        self._containers: dict[str, dict[str, Any]] = {}
        self._top: dict[str, Any] = {}
        self._removed = 0
        self._log_bytes = 0
        self._fd: int | None = None
        self._fd_size = 0
        self._is_local: bool | None = None
        #: Bytes of the last write (0: nothing had changed); snapshots written, log lines written.
        self.last_bytes = 0
        self.snapshots = 0
        self.lines = 0
        #: Snapshots the compactor made because the log was long (counted in ``snapshots`` too).
        self.compactions = 0
        #: Generations of logs that the next snapshot makes obsolete besides its predecessor's
        #: (that of a compaction which failed or was stopped).
        self._old_logs: set[int] = set()

    # ------------------------------------------------------------ writing
    def write(self, state: Any) -> int:
        """Journal what changed in ``state`` since the last write (the caller holds the master's lock);
        the bytes written. Raises OSError (a full disk) with nothing recorded as written."""
        if self._compacting is not None:
            self._reap()
        plan = state.plan
        tracker = plan.changes.journal
        key = (plan.changes.structure, len(plan.operators), len(plan.containers), plan.next_operator_id,
               plan.next_container_number)
        ops, containers = plan.operators, plan.containers
        dirty = tracker.take(lambda obj: ops.get(getattr(obj, "id", None)) is obj
                             or containers.get(getattr(obj, "id", None)) is obj)
        if (plan is not self._plan or key != self._key or tracker.epoch != self._epoch
                or len(state.removed) < self._removed or not self._local()):
            try:
                self.last_bytes = self._snapshot(state)
            except BaseException:
                self._plan = None  # the next write is a snapshot again
                raise
            self._plan, self._key, self._epoch = plan, key, tracker.epoch
            return self.last_bytes
        record: dict[str, Any] = {}
        new_ops: dict[int, dict[str, Any]] = {}
        new_containers: dict[str, dict[str, Any]] = {}
        for obj in dirty:
            if isinstance(obj, PTOperator):
                if _cold(obj) != self._cold[obj.id]:
                    self._plan = None  # a field that changes only with the plan's shape: a snapshot
                    return self.write(state)
                doc, before = _hot(obj), self._ops[obj.id]
                diff = {k: v for k, v in doc.items() if before.get(k) != v}
                if diff:
                    record.setdefault("ops", {})[str(obj.id)] = diff
                    new_ops[obj.id] = doc
            elif isinstance(obj, PTContainer):
                doc, before = _hot(obj), self._containers[obj.id]
                diff = {k: v for k, v in doc.items() if before.get(k) != v}
                if diff:
                    record.setdefault("containers", {})[obj.id] = diff
                    new_containers[obj.id] = doc
        top = top_doc(state)
        diff = {k: v for k, v in top.items() if self._top.get(k) != v}
        if diff:
            record["top"] = diff
        if len(state.removed) > self._removed:
            record["removed"] = [dict(r) for r in state.removed[self._removed:]]
        if not record:
            self.last_bytes = 0
            return 0
        if self._log_bytes >= self.compact_bytes and self._compacting is None:
            self._rotate()  # the log is long: this line starts the next one, compacted meanwhile
        line = journal.dumps(record) + b"\n"
        try:
            self._append(line)
        except BaseException:
            for obj in dirty:  # not written: still changed
                tracker.mark(obj)
            raise
        self._remember(new_ops, new_containers, top, len(state.removed))
        self._log_bytes += len(line)
        self.lines += 1
        self.last_bytes = len(line)
        return len(line)

    def _remember(self, ops: dict[int, dict[str, Any]], containers: dict[str, dict[str, Any]],
                  top: dict[str, Any], removed: int) -> None:
        """What the journal holds now, for the diffs of the next write (and a compaction)."""
        self._ops.update(ops)
        self._containers.update(containers)
        self._top = top
        self._removed = removed

    def _snapshot(self, state: Any) -> int:
        """A snapshot of the live state (:meth:`MasterState.snapshot`); the journal's caches anew."""
        doc = state.snapshot(objects=True)  # encoded at once, in _write_snapshot
        size = self._write_snapshot(doc)
        plan = state.plan
        self._ops = {op.id: _hot(op) for op in plan.operators.values()}
        self._cold = {op.id: _cold(op) for op in plan.operators.values()}
        self._containers = {c.id: _hot(c) for c in plan.containers.values()}
        self._top = top_doc(state)
        self._removed = len(state.removed)
        return size

    def _rotate(self) -> None:
        """Start log g+1 and the compaction of snapshot g with log g into snapshot g+1 (another
        process: a snapshot of 20,000 operators encoded here held the master's lock 115-150 ms)."""
        old = self.generation
        fs.delete(log_uri(self.app_path, old + 1))  # a stale one
        self._close()
        self.generation = old + 1
        self._log_bytes = 0
        try:
            self._compacting = self.compactor(self.app_path, old)
        except Exception as exc:  # noqa: BLE001 - no process (out of memory, say): a snapshot instead
            log.warning("could not start the compaction of the journal's generation %d (%s): the next "
                        "write is a snapshot of the master's state", old, exc)
            self._old_logs.add(old)
            self._plan = None
            return
        self._reap()

    def _reap(self) -> None:
        """Finish the compaction if it has ended: its old log deleted, or (it failed) the next write a
        snapshot of the live state. Until then readers replay both logs."""
        code = self._compacting.poll()
        if code is None:
            return
        self._compacting = None
        if code != 0:
            log.warning("the compaction of the journal's generation %d failed (exit code %s): the next "
                        "write is a snapshot of the master's state", self.generation - 1, code)
            self._old_logs.add(self.generation - 1)
            self._plan = None
            return
        try:
            fs.delete(log_uri(self.app_path, self.generation - 1))
        except OSError:
            pass  # an old log is never read once its successor's snapshot is in place
        size = os.path.getsize(fs.local_path(journal.journal_uri(self.app_path)))
        self.compact_bytes = max(self.min_compact_bytes, int(self.compact_ratio * size))
        self.snapshots += 1
        self.compactions += 1

    def _cancel(self) -> bool:
        """Stop the compaction under way (a snapshot of the live state replaces what it would write);
        whether there was one."""
        running, self._compacting = self._compacting, None
        if running is None:
            return False
        running.kill()
        running.wait()
        self._old_logs.add(self.generation - 1)
        return True

    def _write_snapshot(self, doc: dict[str, Any]) -> int:
        """Write ``doc`` as the snapshot of the next generation, whose log starts empty."""
        self._cancel()  # (what it would write comes before this snapshot)
        generation = self.generation + 1
        local = self._local()  # elsewhere no log is ever written: nothing to delete
        if local:
            fs.delete(log_uri(self.app_path, generation))  # a stale one (never the snapshot's)
        doc["log_generation"] = generation
        data = journal.encode(doc)
        fs.replace_file(journal.journal_uri(self.app_path), data)
        self._close()
        if self.generation and local:
            for old in sorted({self.generation, *self._old_logs}):
                try:
                    fs.delete(log_uri(self.app_path, old))
                except OSError:
                    pass  # an old log is never read: its snapshot is gone
        self._old_logs.clear()
        self.generation = generation
        self._log_bytes = 0
        self.compact_bytes = max(self.min_compact_bytes, int(self.compact_ratio * len(data)))
        self.snapshots += 1
        return len(data)

    def _local(self) -> bool:
        """Whether the journal is on the local file system, where a log line is one ``os.write``.

        Elsewhere (HDFS) every write is a snapshot, written atomically, as before the log existed:
        HDFS appends only to a file that exists, and an append per heartbeat would open a lease and
        a write pipeline each time."""
        if self._is_local is None:
            self._is_local = fs.local_path(journal.journal_uri(self.app_path)) is not None
        return self._is_local

    def _append(self, line: bytes) -> None:
        uri = log_uri(self.app_path, self.generation)
        path = fs.local_path(uri)
        if path is not None:
            if self._fd is None:
                self._fd = os.open(path, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o644)
                self._fd_size = os.fstat(self._fd).st_size
            size = self._fd_size
            try:
                written = os.write(self._fd, line)
                if written != len(line):
                    raise OSError(28, "No space left on device (a short write of the journal's log)")
            except OSError:
                os.ftruncate(self._fd, size)  # no torn line for the retry to append after
                raise
            self._fd_size = size + written
            return
        raise AssertionError(f"a journal log line for {uri}: only local journals keep a log")

    def _close(self) -> None:
        if self._fd is not None:
            os.close(self._fd)
            self._fd = None

    def close(self) -> None:
        """Close the log (the master ends); a compaction under way is stopped (readers replay both logs)."""
        self._cancel()
        self._close()


# ---------------------------------------------------------------- reading

def replay(doc: dict[str, Any], log: bytes) -> dict[str, Any]:
    """``doc`` (a snapshot) with the log's lines applied; a last line cut short is ignored.

    Raises
    ------
    stram.master.journal.document.JournalVersionError
        A line is not a record of this journal.
    """
    ops = {d["id"]: d for d in doc["plan"]["operators"]}
    containers = {d["id"]: d for d in doc["plan"]["containers"]}
    lines = log.split(b"\n")
    for n, line in enumerate(lines[:-1]):  # the part after the last newline was never acknowledged
        try:
            record = journal.loads(line)
            for op_id, fields in record.get("ops", {}).items():
                ops[int(op_id)].update(fields)
            for cid, fields in record.get("containers", {}).items():
                containers[cid].update(fields)
            doc.update(record.get("top", {}))
            doc["removed"].extend(record.get("removed", []))
        except (ValueError, KeyError, TypeError, AttributeError) as exc:
            raise journal.JournalVersionError(f"line {n + 1} of the journal's log is not a journal record "
                                              f"({type(exc).__name__}: {exc})") from None
    return doc


def read_journal(app_path: str) -> dict[str, Any] | None:
    """The journal document (snapshot and log), or None when the application has none yet.

    Its ``log_generation`` (0 for a journal without a log) is the generation the next
    :class:`JournalWriter` follows.
    """
    doc = journal.read_journal(app_path)
    if doc is None:
        return None
    generation = int(doc.get("log_generation") or 0)
    doc["log_generation"] = generation
    if generation:
        uri = log_uri(app_path, generation)
        if fs.exists(uri):
            doc = replay(doc, fs.read_bytes(uri))
        # a compaction of this snapshot and its log was under way (stram.master.journal.compactor): the writer
        # went on in the next log, which holds what came after
        uri = log_uri(app_path, generation + 1)
        if fs.exists(uri):
            doc = replay(doc, fs.read_bytes(uri))
            doc["log_generation"] = generation + 1
    return doc


# ---------------------------------------------------------------- compaction

def compact(app_path: str, generation: int) -> int:
    """Write snapshot ``generation + 1``: snapshot ``generation`` with its log replayed; its bytes.

    Raises
    ------
    ValueError
        The snapshot in place is not of ``generation`` (the master wrote another meanwhile).
    OSError
        It could not be read or written (nothing was replaced).
    stram.master.journal.document.JournalVersionError
        The snapshot or a line of the log is not a journal this stram reads.
    """
    target = journal.journal_uri(app_path)
    path = fs.local_path(target)
    before = _identity(path)
    doc = journal.read_journal(app_path)
    if doc is None or int(doc.get("log_generation") or 0) != generation:
        found = None if doc is None else doc.get("log_generation")
        raise ValueError(f"the journal's snapshot is of generation {found}, not {generation}")
    uri = log_uri(app_path, generation)
    if fs.exists(uri):
        doc = replay(doc, fs.read_bytes(uri))
    doc["log_generation"] = generation + 1
    data = journal.encode(doc)
    if _identity(path) != before:  # a master wrote a snapshot of its own meanwhile: it is newer
        raise ValueError("the journal's snapshot was replaced while it was being compacted")
    fs.replace_file(target, data)
    return len(data)


def _identity(path: str | None) -> tuple[int, int] | None:
    """The inode and modification time of a local file (a replaced file is a new inode)."""
    if path is None:
        return None
    st = os.stat(path)
    return st.st_ino, st.st_mtime_ns


class Compaction(Protocol):
    """A compaction under way: :class:`subprocess.Popen`'s ``poll``, ``kill`` and ``wait``."""

    def poll(self) -> int | None: ...

    def kill(self) -> None: ...

    def wait(self, timeout: float | None = None) -> int: ...


class _Done:
    """A compaction that has ended (:func:`compact_here`)."""

    def __init__(self, code: int) -> None:
        self.code = code

    def poll(self) -> int:
        return self.code

    def kill(self) -> None:
        pass

    def wait(self, timeout: float | None = None) -> int:
        return self.code


def compact_here(app_path: str, generation: int) -> Compaction:
    """Compact ``generation`` in this thread, before returning (a writer's default; the master's
    starts :mod:`stram.master.journal.compactor`)."""
    try:
        compact(app_path, generation)
        return _Done(0)
    except Exception:  # noqa: BLE001 - reported as the process would report it: an exit code
        log.exception("the compaction of the journal's generation %d failed", generation)
        return _Done(1)
