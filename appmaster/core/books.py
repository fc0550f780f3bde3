"""The master's books for one application: every field its state holds, typed.

:class:`Books` is the state the core's parts work on: the heartbeat
(:mod:`~stram.master.core.heartbeat`), recovery, the blocked-operator diagnostic,
safe removal, the end of the application, the deploy messages and the reports are
functions over it, called by name. :class:`~stram.master.core.state.MasterState` is
these books with the event table: it holds nothing else.

The small records the books keep live here too: the event log's lines
(:class:`LogEntry`) and the stack requests of blocked operators (:class:`BlockedWait`).
"""

from __future__ import annotations

import collections
from dataclasses import dataclass
from typing import Any

from stram.common.attributes import default as attribute_default
from stram.common.windows import initial_window
from stram.master.core.committed import CommittedWindow
from stram.master.core.history import OperatorTotals, WindowHistory
from stram.master.core.pacing import HeartbeatPacer
from stram.master.core.plan import PhysicalPlan

__all__ = ["Books", "LogEntry", "BlockedWait", "DAG_ATTRIBUTES"]

#: The DAG attributes the books hold and send in every init context (an agent takes any other
#: from the attribute table).
DAG_ATTRIBUTES = (
    "STREAMING_WINDOW_SIZE_MILLIS", "HEARTBEAT_INTERVAL_MILLIS", "HEARTBEAT_TIMEOUT_MILLIS",
    "HEARTBEAT_MAX_INTERVAL_MILLIS", "CHECKPOINT_WINDOW_COUNT", "TIMEOUT_WINDOW_COUNT", "PROCESSING_MODE",
    "RECOVERY_ATTEMPTS", "BUFFER_MEMORY_MB", "BUFFER_LAG_MB", "BUFFER_SPOOLING", "CONTAINERS_MAX_COUNT",
    "CONTAINER_MEMORY_MB",
    "BLOCK_INTERVAL_MILLIS", "RECEIVER_WAL", "RECEIVER_MAX_RESTARTS", "DEBUG",
    "RETRY_DETERMINISTIC_FAILURES", "DISK_FULL_TIMEOUT_SECS", "END_TIMEOUT_SECS",
    "MAX_CONSECUTIVE_CONTAINER_FAILURES_FOR_BLACKLIST", "BLACKLISTED_NODE_REMOVAL_TIME_MILLIS",
)


@dataclass
class LogEntry:
    """One line of the application's event log (``info()["events"]``)."""

    millis: int
    kind: str
    text: str


@dataclass
class BlockedWait:
    """A blocked operator whose container was asked for its stack."""

    container: str
    #: The stack request's number (see :func:`stram.master.core.diagnose.stack_trace`).
    seq: int
    #: Restart without the stack after this time (wall-clock millis).
    deadline: int
    #: How long it had finished no window when it was declared blocked, ms.
    stalled: int


class Books:
    """All of the master's bookkeeping for one application.

    Parameters
    ----------
    spec:
        The validated application spec.
    app_id, app_path, token:
        Identity of the application, its directory URI and its secret.
    start_window_millis:
        Start of window index 0; whole seconds, so window ids line up.
    now:
        Wall-clock millis: when the application started.
    plan:
        The physical plan (a restored one); None: planned from ``spec``.
    pacer:
        Stretches the heartbeat interval while answers queue (:mod:`stram.master.core.pacing`);
        None: containers are asked for HEARTBEAT_INTERVAL_MILLIS, always.
    """

    def __init__(self, spec: Any, app_id: str, app_path: str, token: str, start_window_millis: int, now: int,
                 plan: PhysicalPlan | None = None, pacer: HeartbeatPacer | None = None) -> None:
        self.spec = spec
        self.app_id = app_id
        self.app_path = app_path
        self.token = token
        self.start_window_millis = start_window_millis - start_window_millis % 1000
        #: Window before the first one: "no checkpoint yet".
        self.initial_window = initial_window(self.start_window_millis)
        self.attributes: dict[str, Any] = {name: spec.attribute(name) for name in DAG_ATTRIBUTES}
        self.plan: PhysicalPlan = plan if plan is not None else PhysicalPlan.from_spec(
            spec, self.initial_window, self.attributes.get("CONTAINERS_MAX_COUNT"))
        self.pacer: HeartbeatPacer | None = pacer
        #: What placement remembers between launches (:mod:`stram.master.core.placement`; made on first use).
        self.placement: Any = None
        #: The newest window no failure can make the application process again; never goes backward.
        self.committed = self.initial_window
        #: Keeps recovery checkpoints and :attr:`committed` up to date (``update(books)``).
        self.committed_window = CommittedWindow()
        #: window id -> operators that shut down in that window, awaiting safe removal.
        self.shutdown_operators: dict[int, list[int]] = {}
        #: RUNNING, then SUCCEEDED, FAILED or KILLED.
        self.state = "RUNNING"
        self.diagnostics = ""
        self.started_millis = now
        self.finished_millis = 0
        self.events: collections.deque[LogEntry] = collections.deque(maxlen=500)
        self.errors: collections.deque[dict[str, Any]] = collections.deque(maxlen=100)
        self.removed: list[dict[str, Any]] = []
        #: per container: operator ids to undeploy, publishers to reset, requests to its operators
        #: (``(operator id, request type)``), in its next heartbeat response
        self.undeploy: dict[str, set[int]] = collections.defaultdict(set)
        self.resets: dict[str, set[str]] = collections.defaultdict(set)
        self.node_requests: dict[str, list[Any]] = collections.defaultdict(list)
        #: operator id -> its last windows, oldest first
        self.window_history: dict[int, WindowHistory] = collections.defaultdict(WindowHistory)
        #: Operators that finished no window for TIMEOUT_WINDOW_COUNT windows.
        self.blocked: set[int] = set()
        #: operator id -> what it did in this master attempt (counters: never go backward)
        self.totals: dict[int, OperatorTotals] = collections.defaultdict(OperatorTotals)
        #: Containers lost or restarted and their operators redeployed, in this master attempt.
        self.recoveries = 0
        #: container id -> its newest stack trace: {"container", "seq", "millis", "threads"}
        self.stack_traces: dict[str, dict[str, Any]] = {}
        #: Number of the last stack request (any container).
        self.stack_seq = 0
        #: container id -> newest request number it was asked for / sent in a response
        self.stack_wanted: dict[str, int] = {}
        self.stack_sent: dict[str, int] = {}
        #: blocked operator id -> its stack request
        self.blocked_waits: dict[int, BlockedWait] = {}
        #: When every operator was last scanned for blocked ones, and the least time until the next scan.
        self.blocked_scanned: int | None = None
        self.blocked_every = 0
        #: label -> the operator's last failure (error line, window, count), for info and progress
        self.failures: dict[str, dict[str, Any]] = {}
        #: container id -> what its writes wait for (no space left), from its heartbeats
        self.paused: dict[str, str] = {}
        self.shutdown_requested = False
        self.heartbeats = 0
        #: Master attempt (a restarted master resumes from the journal with attempt + 1).
        self.attempt = 1
        #: Finish was returned (it is returned once).
        self.finish_sent = False
        #: The committed window the watchdog last saw move, and when (:func:`~.recovery.watch_committed`).
        self.committed_seen = (self.committed, now)
        #: Why the committed window has not moved for long, naming the operator that holds it back ("": it moves).
        self.stalled = ""
        #: Nodes (:mod:`stram.master.core.nodes`): host -> its containers' failures in a row, and when
        #: the last one was (wall-clock millis); host -> until when it is blacklisted (journaled); the
        #: (host, rack) pairs the launcher can place on ([]: no placement, e.g. locally).
        self.node_failures: dict[str, int] = {}
        self.node_failed_millis: dict[str, int] = {}
        self.blacklist: dict[str, int] = {}
        self.cluster_nodes: list[tuple[str, str]] = []
        #: (plan, its shape's key, its downstream map), kept while the plan's shape stays
        #: (:func:`stram.master.core.deploy.downstream_map`).
        self.downstream_cache: tuple[PhysicalPlan, tuple, dict[int, list[int]]] | None = None
        #: Watermark alignment (:mod:`stram.master.core.alignment`): (the plan's key, aligned input operators
        #: by group), and per operator (its last watermark, when it was seen, event ms per wall ms since).
        self.alignment_groups: tuple[tuple, dict[str, list[int]]] | None = None
        self.alignment_paces: dict[int, tuple[int, int, float]] = {}

    def attr(self, name: str) -> Any:
        """A DAG attribute; its default for one an older master's journal does not hold."""
        return self.attributes[name] if name in self.attributes else attribute_default(name)

    def journal_key(self) -> tuple:
        """Changes when anything a restarted master must know has changed."""
        return (self.state, self.committed, self.shutdown_requested,
                tuple((op.id, op.recovery_checkpoint, op.state.value, op.container, op.restarts)
                      for op in self.plan.operators.values()),
                tuple((c.id, c.state, c.pid, c.process_started) for c in self.plan.containers.values()),
                tuple((w, tuple(ids)) for w, ids in sorted(self.shutdown_operators.items())))
