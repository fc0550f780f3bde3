"""The operator API: what application code subclasses to run inside stram.

An operator declares its ports as class attributes and its properties as
annotated class attributes::

    class Upper(Operator):
        input = InputPort()
        output = OutputPort()
        prefix: str = ""

        def process_input(self, tuple):
            self.output.emit(self.prefix + tuple.upper())

Lifecycle, called by the container agent on the operator's thread:
``setup(context)``, then per window ``begin_window(window_id)``, the tuple
handlers (``process_<port>(tuple)`` by default, or a batch at a time:
``process_<port>_batch(tuples)``, see :mod:`stram.agent.engine.batch`), ``end_window()``; ``teardown()`` at the
end. Input operators also get ``emit_tuples()`` called repeatedly inside each
window. ``checkpointed(window_id)`` follows a saved checkpoint and
``committed(window_id)`` a window that can never be processed again.
``ShutdownException`` from any of them ends the operator gracefully.

Operator state (what a checkpoint saves) is the instance's attributes minus
its ports and the names listed in the class attribute ``transient``.
"""

from __future__ import annotations

import typing
from dataclasses import dataclass, field
from typing import Any, Callable, ClassVar

from stram.common.errors import FatalError

__all__ = [
    "Operator",
    "InputOperator",
    "InputPort",
    "OutputPort",
    "ShutdownException",
    "FatalError",
    "OperatorContext",
    "InputConnection",
    "PassThroughUnifier",
    "operator_ports",
    "operator_properties",
]


class ShutdownException(Exception):
    """Raised by an operator to end itself (and, at the inputs, its stream)."""


@dataclass
class InputConnection:
    """Where an operator that reads its inputs itself finds one input stream's data."""

    #: The operator's input port and the declared stream feeding it.
    port: str
    stream: str
    #: The upstream physical operator and its publisher id on the buffer server (``<id>.<port>``).
    source_node_id: int
    publisher: str
    #: The upstream container's buffer server; empty / 0 when the stream stays in one container.
    host: str
    port_number: int
    token: bytes
    #: Partition mask and keys this partition receives (mask 0: everything).
    mask: int = 0
    keys: list[int] = field(default_factory=list)
    #: The stream's codec name.
    codec: str = "pickle"
    #: The application's TLS certificate (PEM) to trust on the buffer server; None: TLS is off.
    tls_cert: bytes | None = None


@dataclass
class OperatorContext:
    """What an operator learns about itself in ``setup``."""

    #: Physical operator id, unique in the application.
    id: int
    #: Logical operator name from the spec.
    name: str
    #: Index of this partition and the number of partitions of the operator.
    partition_index: int = 0
    partition_count: int = 1
    #: Operator attributes merged over the DAG attributes.
    attributes: dict[str, Any] = field(default_factory=dict)
    #: File-system URI of the application directory.
    app_path: str = ""
    app_id: str = ""
    #: Local working directory of the container.
    work_dir: str = ""
    #: Window the operator resumes after (its checkpoint), or the initial one.
    checkpoint_window: int = -1
    streaming_window_size_millis: int = 500
    #: Emits a metric in this window's stats (Apex's AutoMetric).
    set_metric: Callable[[str, Any], None] = lambda name, value: None
    #: Sends a line to the master's log.
    log: Callable[[str], None] = lambda msg: None
    #: For operators with ``external_inputs``: where each input stream's data lives.
    inputs: list[InputConnection] = field(default_factory=list)
    #: For operators with ``external_inputs``: declare everything up to a window
    #: durable (saves the state as that window's checkpoint).
    report_checkpoint: Callable[[int], None] = lambda window_id: None
    #: For operators with ``external_inputs``: the last window each upstream
    #: operator finished, as the master last saw it (operator id -> window id).
    upstream_windows: Callable[[], dict[int, int]] = lambda: {}
    #: Input operators: the event-time watermark (epoch ms) this operator's output has reached,
    #: sent downstream at the end of the window (see :mod:`stram.common.watermarks`; monotone:
    #: a lower value than before is ignored, except ``IDLE``, which a later record's value ends).
    emit_watermark: Callable[[int], None] = lambda watermark: None
    #: For operators with ``external_inputs``: upstream operators whose stream
    #: ended, with its last window, as the master told (operator id -> window id).
    ended_upstreams: Callable[[], dict[int, int]] = lambda: {}


class _Port:
    """Base of declared ports; ``__set_name__`` records the declared name."""

    name: str = ""

    def __set_name__(self, owner: type, name: str) -> None:
        self.name = name

    def bind(self, operator: "Operator") -> "_Port":
        raise NotImplementedError


class InputPort(_Port):
    """An input port.

    Parameters
    ----------
    process:
        Name of the operator method handling each tuple; default
        ``process_<port name>``.
    key:
        Function giving a tuple's partitioning key; default: a dict's
        ``"key"``, a tuple's first field, else the tuple itself.
    codec:
        Stream codec name for data arriving through the buffer server
        (``"pickle"`` default, ``"arrow"`` for ``pyarrow.RecordBatch`` tuples).
    optional:
        The port may stay unconnected.
    """

    def __init__(self, process: str | None = None, key: Callable[[Any], Any] | None = None,
                 codec: str = "pickle", optional: bool = False) -> None:
        self.process = process
        self.key = key
        self.codec = codec
        self.optional = optional

    @property
    def handler_name(self) -> str:
        return self.process or f"process_{self.name}"

    def bind(self, operator: "Operator") -> "InputPort":
        return self  # input ports keep no per-instance state


class OutputPort(_Port):
    """An output port; ``emit(tuple)`` sends a tuple downstream, ``emit_batch(tuples)`` a list of them.

    The container agent replaces ``emit`` and ``emit_batch`` on the instance's
    bound port with the stream's batch; an unconnected output port drops what
    it is given. ``emit_batch`` sends the tuples in order, like ``emit`` on
    each (it copies the list: the caller may reuse it).
    """

    def __init__(self, codec: str = "pickle", optional: bool = True) -> None:
        self.codec = codec
        self.optional = optional

    def bind(self, operator: "Operator") -> "OutputPort":
        bound = OutputPort.__new__(OutputPort)
        bound.__dict__.update(self.__dict__)
        return bound

    def emit(self, tuple: Any) -> None:  # replaced per instance by the agent
        pass

    def emit_batch(self, tuples: Any) -> None:  # replaced per instance by the agent
        emit = self.emit
        for t in tuples:
            emit(t)


class Operator:
    """Base class of every operator.

    Subclasses declare ports and properties as class attributes; see the
    module docstring. Properties are the annotated, public class attributes.
    """

    #: Names of instance attributes left out of checkpoints.
    transient: ClassVar[tuple[str, ...]] = ()
    #: Operator class merging the outputs of this operator's partitions
    #: (``None``: a pass-through unifier).
    unifier_class: ClassVar[type | None] = None
    #: The operator reads its input streams itself (``context.inputs``) instead
    #: of having tuples delivered, and reports its own checkpoints through
    #: ``context.report_checkpoint`` (e.g. a Spark query's committed offsets).
    #: Such an operator is an InputOperator as far as windows go.
    external_inputs: ClassVar[bool] = False
    #: Properties holding an input's event-time field, by the input port they are about (e.g.
    #: ``{"timestamp_field": "input"}``): a spec that leaves one unset gets the ``timestamp_field``
    #: of the nearest upstream source that sets one.
    event_time_inputs: ClassVar[dict[str, str]] = {}

    def __new__(cls, *args: Any, **kwargs: Any) -> "Operator":
        self = super().__new__(cls)
        for name, port in operator_ports(cls).items():
            self.__dict__[name] = port.bind(self)
        return self

    # -- lifecycle ---------------------------------------------------------
    def setup(self, context: OperatorContext) -> None:
        """Called once on the operator's thread before the first window."""

    def begin_window(self, window_id: int) -> None:
        """Called at the start of every window."""

    def end_window(self) -> None:
        """Called at the end of every window."""

    def teardown(self) -> None:
        """Called once when the operator is undeployed or shuts down."""

    def checkpointed(self, window_id: int) -> None:
        """The state after ``window_id`` has been saved."""

    def committed(self, window_id: int) -> None:
        """Windows up to ``window_id`` will never be processed again."""

    # on_watermark(self, watermark: int) -> None, when a class defines it: the input watermark
    # (the minimum over the inputs, see stram.common.watermarks) advanced; called at the end of
    # a streaming window, before end_window, so what it emits goes out in that window, ahead of
    # the watermark itself, which the engine then forwards downstream.

    # -- partitioning ------------------------------------------------------
    @classmethod
    def partition_key(cls, properties: dict[str, Any], port: str) -> str | None:
        """How tuples arriving on ``port`` are partitioned when this operator has partitions,
        given its properties: ``None`` for the default key (a dict's ``"key"``, a tuple's first
        field, else the tuple), ``"field:NAME"`` for a dict field, or pickled text
        (:mod:`stram.common.pickled`) holding a key function."""
        return None

    # -- state -------------------------------------------------------------
    def get_state(self) -> dict[str, Any]:
        """The state a checkpoint saves: attributes minus ports and transient ones."""
        skip = set(operator_ports(type(self))) | set(self.transient)
        return {k: v for k, v in self.__dict__.items() if k not in skip}

    def set_state(self, state: dict[str, Any]) -> None:
        """Restore what ``get_state`` returned."""
        self.__dict__.update(state)

    # -- repartitioning ----------------------------------------------------
    @classmethod
    def split_state(cls, states: list[dict[str, Any]], count: int,
                    owner: Callable[[Any], int]) -> list[dict[str, Any]]:
        """Redistribute the states of the old partitions over ``count`` new ones.

        ``owner(key)`` gives the new partition index of a key. The default keeps
        the first partition's state for every new partition (stateless or
        replicated operators); keyed operators override it.
        """
        base = states[0] if states else {}
        return [dict(base) for _ in range(count)]


class InputOperator(Operator):
    """An operator with no inputs that produces tuples in ``emit_tuples``."""

    def emit_tuples(self) -> None:
        """Called repeatedly inside a window; emit what is available and return."""
        raise NotImplementedError

    # An input operator may define ``request_shutdown()``: on ``shutdown-app`` it
    # is called between windows instead of ending the stream at once, and the
    # operator raises ShutdownException from emit_tuples once it has drained.


class PassThroughUnifier(Operator):
    """Merges the outputs of a partitioned operator unchanged."""

    input = InputPort()
    output = OutputPort()

    def process_input(self, tuple: Any) -> None:
        self.output.emit(tuple)

    def process_batch(self, tuples: list) -> None:
        self.output.emit_batch(tuples)


# ---------------------------------------------------------------- reflection

def operator_ports(cls: type) -> dict[str, _Port]:
    """Declared ports of an operator class, by name, in declaration order."""
    cached = cls.__dict__.get("_stram_ports")
    if cached is not None:
        return cached
    ports: dict[str, _Port] = {}
    for klass in reversed(cls.__mro__):
        for name, value in vars(klass).items():
            if isinstance(value, _Port):
                ports[name] = value
            elif name in ports:
                del ports[name]
    cls._stram_ports = ports  # type: ignore[attr-defined]
    return ports


def operator_properties(cls: type) -> dict[str, Any]:
    """Properties of an operator class: public annotated class attributes -> type."""
    props: dict[str, Any] = {}
    for klass in reversed(cls.__mro__):
        if klass is object:
            continue
        try:
            hints = typing.get_type_hints(klass)
        except Exception:  # unresolvable forward references: use raw annotations
            hints = dict(getattr(klass, "__annotations__", {}))
        for name in klass.__dict__.get("__annotations__", {}):
            if name.startswith("_"):
                continue
            hint = hints.get(name)
            if typing.get_origin(hint) is ClassVar or hint is ClassVar:
                continue
            props[name] = hint
    return props


def input_ports(cls: type) -> dict[str, InputPort]:
    return {n: p for n, p in operator_ports(cls).items() if isinstance(p, InputPort)}


def output_ports(cls: type) -> dict[str, OutputPort]:
    return {n: p for n, p in operator_ports(cls).items() if isinstance(p, OutputPort)}
