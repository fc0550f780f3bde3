"""The operators a flow's generic steps compile to: a user function applied a batch at a time.

Each takes its function as the property ``fn``, text made by
:func:`stram.common.pickled.dumps` (cloudpickle, by value), and loads it in
``setup`` into a transient attribute. The engine hands them whole batches
(:mod:`stram.agent.engine.batch`), so a map over a batch is one list
comprehension around the user's function and one ``emit_batch``.

* :class:`Map`, :class:`Filter`, :class:`FlatMap`, :class:`Inspect`: per record;
* :class:`MapBatches`: per batch, as a ``pyarrow.RecordBatch``;
* :class:`Branch`: records for which ``fn`` holds go to ``output``, the others to ``rest``;
* :class:`Union`: up to eight inputs merged into one output;
* :class:`KeyedReduce`: a running fold per key, emitted at each streaming window's end.
"""

from __future__ import annotations

import copy
from typing import Any, Callable, Optional

from stram.common import pickled
from stram.operator import FatalError, InputPort, Operator, OperatorContext, OutputPort

__all__ = ["Map", "Filter", "FlatMap", "MapBatches", "Inspect", "Branch", "Union", "UNION_INPUTS", "KeyedReduce",
           "Aggregator", "identity"]

#: How many input ports a :class:`Union` has (``input0`` .. ``input7``).
UNION_INPUTS = 8


def load_function(name: str, prop: str, text: Optional[str], required: bool = True) -> Optional[Callable]:
    """The function pickled in property ``prop`` of operator ``name``.

    Raises
    ------
    FatalError
        The property is missing (when ``required``), cannot be unpickled, or holds no callable:
        restarting cannot fix the spec.
    """
    if not text:
        if required:
            raise FatalError(f"operator {name!r}: property {prop!r} is missing (a function pickled by "
                             f"stram.common.pickled.dumps; a flow sets it)")
        return None
    try:
        fn = pickled.loads(text)
    except Exception as exc:  # noqa: BLE001 - any failure to unpickle is the same spec problem
        raise FatalError(f"operator {name!r}: property {prop!r} cannot be unpickled here: "
                         f"{type(exc).__name__}: {exc} (a function from a module this process cannot import? "
                         f"define it in the app file, which travels by value)") from None
    if not callable(fn):
        raise FatalError(f"operator {name!r}: property {prop!r} holds a {type(fn).__name__}, not a function")
    return fn


class _FunctionOperator(Operator):
    """One input, one output, and a user function in ``fn``."""

    input = InputPort()
    output = OutputPort()
    #: The user's function, pickled (stram.common.pickled).
    fn: Optional[str] = None
    transient = ("_fn",)

    def __init__(self) -> None:
        self._fn: Callable = _unset

    def setup(self, context: OperatorContext) -> None:
        self._fn = load_function(context.name, "fn", self.fn)


def _unset(*args: Any) -> Any:
    raise FatalError("the operator's function was not loaded: setup() was not called")


class Map(_FunctionOperator):
    """Emits ``fn(record)`` for every record."""

    def process_input(self, record: Any) -> None:
        self.output.emit(self._fn(record))

    def process_batch(self, records: list) -> None:
        fn = self._fn
        self.output.emit_batch([fn(r) for r in records])


class Filter(_FunctionOperator):
    """Emits the records for which ``fn(record)`` is true."""

    def process_input(self, record: Any) -> None:
        if self._fn(record):
            self.output.emit(record)

    def process_batch(self, records: list) -> None:
        fn = self._fn
        self.output.emit_batch([r for r in records if fn(r)])


class FlatMap(_FunctionOperator):
    """Emits every item of the iterable ``fn(record)`` (none for an empty one)."""

    def process_input(self, record: Any) -> None:
        self.output.emit_batch(list(self._fn(record)))

    def process_batch(self, records: list) -> None:
        fn = self._fn
        self.output.emit_batch([item for r in records for item in fn(r)])


class Inspect(_FunctionOperator):
    """Calls ``fn(record)`` for every record (to log or count) and passes the records on unchanged."""

    def process_input(self, record: Any) -> None:
        self._fn(record)
        self.output.emit(record)

    def process_batch(self, records: list) -> None:
        fn = self._fn
        for r in records:
            fn(r)
        self.output.emit_batch(records)


class MapBatches(_FunctionOperator):
    """Calls ``fn`` with each batch of dict records as one ``pyarrow.RecordBatch`` (columns from the first
    record's keys) and emits the rows of the ``RecordBatch`` (or ``Table``) it returns, as dicts."""

    transient = ("_fn", "_name")

    def setup(self, context: OperatorContext) -> None:
        super().setup(context)
        self._name = context.name

    def process_input(self, record: Any) -> None:
        self.process_batch([record])

    def process_batch(self, records: list) -> None:
        if not records:
            return
        import pyarrow as pa

        bad = next((r for r in records if not isinstance(r, dict)), None)
        if bad is not None:
            raise FatalError(f"operator {self._name!r} (map_batches) takes dict records, got a "
                             f"{type(bad).__name__}: {bad!r:.200}")
        result = self._fn(pa.RecordBatch.from_pylist(records))
        if not isinstance(result, (pa.RecordBatch, pa.Table)):
            raise FatalError(f"operator {self._name!r} (map_batches): its function must return a "
                             f"pyarrow.RecordBatch or Table, returned a {type(result).__name__}")
        self.output.emit_batch(result.to_pylist())


class Branch(_FunctionOperator):
    """Records for which ``fn(record)`` is true go to ``output``, the others to ``rest``."""

    rest = OutputPort()

    def process_input(self, record: Any) -> None:
        (self.output if self._fn(record) else self.rest).emit(record)

    def process_batch(self, records: list) -> None:
        fn = self._fn
        yes: list = []
        no: list = []
        for r in records:
            (yes if fn(r) else no).append(r)
        if yes:
            self.output.emit_batch(yes)
        if no:
            self.rest.emit_batch(no)


class Union(Operator):
    """Merges the records of its connected inputs (``input0`` .. ``input7``) into ``output``, unchanged."""

    output = OutputPort()

    def _pass(self, record: Any) -> None:
        self.output.emit(record)

    def _pass_batch(self, records: list) -> None:
        self.output.emit_batch(records)


def _union_ports() -> None:
    """Declares Union's input ports and their handlers (eight alike, so made in a loop)."""
    for i in range(UNION_INPUTS):
        port = InputPort(optional=True)
        port.__set_name__(Union, f"input{i}")
        setattr(Union, f"input{i}", port)
        setattr(Union, f"process_input{i}", Union._pass)
        setattr(Union, f"process_input{i}_batch", Union._pass_batch)


_union_ports()


class KeyedReduce(Operator):
    """A running fold per key: ``acc = fn(acc, record)``, starting from ``init`` (a copy per key) or, with
    no ``init``, from the key's first record. At each streaming window's end it emits
    ``{"key": k, "value": acc}`` for every key whose ``acc`` changed in that window.

    The accumulators are checkpointed state; partitioned by the same key, each partition owns its keys
    (:meth:`split_state` deals them out when the partition count changes).
    """

    input = InputPort()
    output = OutputPort()
    #: The key: a dict field, or a pickled function record -> key.
    key_field: Optional[str] = None
    key_fn: Optional[str] = None
    #: The pickled reducer ``fn(acc, record) -> acc``.
    fn: Optional[str] = None
    #: The pickled initial value (None: reduce, the first record starts the accumulator).
    init: Optional[str] = None
    transient = ("_fn", "_key", "_init", "_changed", "_name")

    def __init__(self) -> None:
        #: key -> accumulator.
        self.accs: dict[Any, Any] = {}
        #: Keys whose accumulator changed in this window, in the order they first did (a dict: the
        #: window's rows come out in the same order when it is replayed after a recovery).
        self._changed: dict[Any, None] = {}

    @classmethod
    def partition_key(cls, properties: dict[str, Any], port: str) -> str | None:
        if properties.get("key_field"):
            return "field:" + properties["key_field"]
        return properties.get("key_fn") or None

    def setup(self, context: OperatorContext) -> None:
        self._name = context.name
        self._fn = load_function(context.name, "fn", self.fn)
        if bool(self.key_field) == bool(self.key_fn):
            raise FatalError(f"operator {context.name!r}: set exactly one of the properties 'key_field' and "
                             f"'key_fn' (got {'both' if self.key_field else 'neither'})")
        self._key = self._field_key(self.key_field) if self.key_field else load_function(
            context.name, "key_fn", self.key_fn)
        self._init = None
        if self.init is not None:
            try:
                self._init = (pickled.loads(self.init),)
            except Exception as exc:  # noqa: BLE001
                raise FatalError(f"operator {context.name!r}: property 'init' cannot be unpickled: "
                                 f"{type(exc).__name__}: {exc}") from None
        self._changed = {}

    def _field_key(self, field: str) -> Callable[[Any], Any]:
        def key(record: Any) -> Any:
            try:
                return record[field]
            except (KeyError, TypeError, IndexError):
                raise FatalError(f"operator {self._name!r}: a record has no field {field!r} (property "
                                 f"'key_field'): {record!r:.200}") from None
        return key

    def set_state(self, state: dict[str, Any]) -> None:
        super().set_state(state)
        self._changed = {}

    def process_input(self, record: Any) -> None:
        self.process_batch([record])

    def process_batch(self, records: list) -> None:
        key, fn, accs, changed = self._key, self._fn, self.accs, self._changed
        init = self._init
        for r in records:
            k = key(r)
            if k in accs:
                accs[k] = fn(accs[k], r)
            elif init is None:
                accs[k] = r
            else:
                accs[k] = fn(copy.deepcopy(init[0]), r)
            changed[k] = None

    def end_window(self) -> None:
        if self._changed:
            accs = self.accs
            self.output.emit_batch([{"key": k, "value": accs[k]} for k in self._changed])
            self._changed = {}

    @classmethod
    def split_state(cls, states: list[dict[str, Any]], count: int,
                    owner: Callable[[Any], int]) -> list[dict[str, Any]]:
        """Every key's accumulator to the new partition that owns the key."""
        new: list[dict[str, Any]] = [{"accs": {}} for _ in range(count)]
        for state in states:
            for key, acc in state.get("accs", {}).items():
                new[owner(key)]["accs"][key] = acc
        return new


def identity(value: Any) -> Any:
    """The default ``result`` of an :class:`Aggregator`: the accumulator itself."""
    return value


class Aggregator:
    """A custom windowed fold (``WindowedStream.fold``), pickled into the ``aggregator`` property: the
    window operator calls ``create()``, ``add(acc, record)``, ``merge(a, b)`` (None unless given; session
    windows need it) and ``result(acc)``."""

    def __init__(self, create: Callable[[], Any], add: Callable[[Any, Any], Any],
                 merge: Optional[Callable[[Any, Any], Any]] = None,
                 result: Optional[Callable[[Any], Any]] = None) -> None:
        self.create = create
        self.add = add
        self.merge = merge
        self.result = result or identity

    def __repr__(self) -> str:
        return f"Aggregator(create={self.create!r}, add={self.add!r}, merge={self.merge!r}, result={self.result!r})"
