"""Flow: an application written in Python, its sources, and its compilation into a spec.

A flow is built by calling methods: a source gives a :class:`~stram.flow.Stream`,
each stream method adds one operator. :meth:`Flow.to_spec` gives the spec
that a YAML file would hold (what ``stram launch app.py`` runs, exactly as it
runs a YAML spec); :meth:`Flow.compile` validates it as an
:class:`~stram.master.spec.AppSpec`.
"""

from __future__ import annotations

from typing import Any, Iterable

from stram.flow.errors import FlowError
from stram.flow.graph import Step, check_name, check_partitions, compile_spec
from stram.flow.stream import Stream, checked_properties, operator_class_name, snake
from stram.operator import InputOperator, output_ports

__all__ = ["Flow"]

#: The field the records of ``stram.operators.generate:DataGenerator`` carry their event time in.
GENERATED_TIME_FIELD = "ts"


class Flow:
    """A dataflow application.

    Parameters
    ----------
    name:
        The application's name.
    attributes:
        DAG attributes, as under ``attributes:`` in a spec (``STREAMING_WINDOW_SIZE_MILLIS``,
        ``PROCESSING_MODE``, ...).
    description:
        Free text kept in the spec.
    """

    def __init__(self, name: str, attributes: dict[str, Any] | None = None, description: str = "") -> None:
        if not isinstance(name, str) or not name.strip():
            raise FlowError(f"a flow needs a name (a non-empty string), got {name!r}")
        if attributes is not None and not isinstance(attributes, dict):
            raise FlowError(f"attributes must be a dict of attribute names to values, got {attributes!r:.60}")
        self.name = name
        self.attributes = dict(attributes or {})
        self.description = description
        self.steps: list[Step] = []

    def __repr__(self) -> str:
        return f"<Flow {self.name!r}: {len(self.steps)} steps>"

    def add_step(self, step: Step) -> None:
        """Add a step (what sources and stream methods do); its explicit name must be new."""
        if step.name and any(s.name == step.name for s in self.steps):
            raise FlowError(f"flow {self.name!r} already has a step named {step.name!r}")
        step.index = len(self.steps)
        self.steps.append(step)

    # -- sources ------------------------------------------------------------------
    def _source(self, kind: str, class_name: str, properties: dict[str, Any], name: Any, partitions: Any,
                event_time: str | None, outputs: tuple[str, ...] = ("output",), port: str = "output",
                align: str | None = None, max_drift_ms: int | None = None) -> Stream:
        step = Step(kind=kind, class_name=class_name, properties=properties, outputs=outputs, name=check_name(name),
                    partitions=check_partitions(partitions), event_time=event_time,
                    attributes=_alignment(kind, event_time, align, max_drift_ms))
        self.add_step(step)
        return Stream(self, step, port)

    def read_jsonl(self, path: str, timestamp_field: str | None = None, out_of_orderness_ms: int = 0,
                   records_per_window: int | None = None, idle_timeout_ms: int | None = None, partitions: int = 1,
                   *, name: Any = None, align: str | None = None, max_drift_ms: int | None = None) -> Stream:
        """The JSON objects of a file or a directory's files, one per line
        (``stram.operators.io:JsonLinesReader``). With ``timestamp_field`` the records' event time is that field
        (epoch ms) and the watermark trails the largest seen by ``out_of_orderness_ms``; windows downstream
        use it. ``align``: a watermark alignment group; the source pauses while its watermark is more than
        ``max_drift_ms`` (WATERMARK_MAX_DRIFT_MILLIS) ahead of the slowest other source of the group."""
        props: dict[str, Any] = {"path": path}
        if timestamp_field is not None:
            props["timestamp_field"] = timestamp_field
        if out_of_orderness_ms:
            props["out_of_orderness_ms"] = out_of_orderness_ms
        if records_per_window is not None:
            props["records_per_window"] = records_per_window
        if idle_timeout_ms is not None:
            props["idle_timeout_ms"] = idle_timeout_ms
        return self._source("read_jsonl", "stram.operators.io:JsonLinesReader", props, name, partitions,
                            timestamp_field, align=align, max_drift_ms=max_drift_ms)

    def read_parquet(self, path: str, timestamp_field: str | None = None, out_of_orderness_ms: int = 0,
                     columns: list[str] | None = None, records_per_window: int | None = None,
                     batch_rows: int | None = None, arrow: bool = False, partitions: int = 1, *,
                     name: Any = None, rate: float | None = None, start_report: str | None = None,
                     align: str | None = None, max_drift_ms: int | None = None) -> Stream:
        """The rows of a Parquet file as dicts (``stram.operators.parquet:ParquetInput``), only ``columns``
        if given; with ``arrow=True`` as ``pyarrow.RecordBatch`` objects of ``batch_rows`` rows instead (an
        Arrow stream). ``timestamp_field`` and ``out_of_orderness_ms`` as for :meth:`read_jsonl`; partition
        ``i`` of ``partitions`` reads stripes ``i``, ``i + partitions``, ... of ``batch_rows`` rows. ``rate``:
        replayed at that many rows per second of wall time (``start_report``: where each partition notes
        when it started; see the operator). ``align`` and ``max_drift_ms`` as for :meth:`read_jsonl`."""
        props: dict[str, Any] = {"path": path}
        if timestamp_field is not None:
            props["timestamp_field"] = timestamp_field
        if out_of_orderness_ms:
            props["out_of_orderness_ms"] = out_of_orderness_ms
        if columns is not None:
            if not isinstance(columns, (list, tuple)) or not all(isinstance(c, str) for c in columns):
                raise FlowError(f"read_parquet: columns takes a list of column names, got {columns!r:.80}")
            props["columns"] = list(columns)
        if records_per_window is not None:
            props["records_per_window"] = records_per_window
        if batch_rows is not None:
            props["batch_rows"] = batch_rows
        if arrow:
            props["arrow"] = True
        if rate is not None:
            props["rate"] = rate
        if start_report is not None:
            props["start_report"] = start_report
        return self._source("read_parquet", "stram.operators.parquet:ParquetInput", props, name, partitions,
                            timestamp_field, outputs=("output", "batches"), port="batches" if arrow else "output",
                            align=align, max_drift_ms=max_drift_ms)

    def read_lines(self, path: str, lines_per_window: int | None = None, *, name: Any = None) -> Stream:
        """Each line of a file, without its newline (``stram.operators.io:LineReader``)."""
        props: dict[str, Any] = {"path": path}
        if lines_per_window is not None:
            props["lines_per_window"] = lines_per_window
        return self._source("read_lines", "stram.operators.io:LineReader", props, name, None, None)

    def read_directory(self, path: str, *, name: Any = None, partitions: Any = None, **properties: Any) -> Stream:
        """The files of a directory (``stram.operators.files:DirectoryInput``, with ``properties``); a
        ``timestamp_field`` property is its records' event time."""
        props = {"path": path, **properties}
        return self._source("read_directory", "stram.operators.files:DirectoryInput", props, name, partitions,
                            properties.get("timestamp_field"))

    def generate(self, *, name: Any = None, partitions: Any = None, **properties: Any) -> Stream:
        """Generated records ``{"key", "value", "ts", "seq"}`` (``stram.operators.generate:DataGenerator``, with
        ``properties``); their event time is ``ts``."""
        return self._source("generate", "stram.operators.generate:DataGenerator", dict(properties), name,
                            partitions, GENERATED_TIME_FIELD)

    def source(self, operator: Any, port: str = "output", *, name: Any = None, partitions: Any = None,
               **properties: Any) -> Stream:
        """Any input operator (a class or ``"module:Class"``) with ``properties``; its output ``port``. A
        ``timestamp_field`` property is its records' event time."""
        class_name, cls = operator_class_name(operator)
        if not issubclass(cls, InputOperator):
            raise FlowError(f"{class_name} is not an InputOperator; a source must be one (feed other operators "
                            f"with stream.to(...))")
        outputs = tuple(output_ports(cls))
        if port not in outputs:
            raise FlowError(f"{class_name} has no output port {port!r} (its output ports: "
                            f"{', '.join(outputs) or 'none'})")
        props = checked_properties(class_name, cls, properties)
        return self._source(snake(cls.__name__), class_name, props, name, partitions,
                            properties.get("timestamp_field"), outputs, port)

    # -- compiling -------------------------------------------------------------------
    def to_spec(self) -> dict[str, Any]:
        """The spec as plain data (what a YAML spec file holds; ``AppSpec.from_dict`` takes it), functions
        pickled by value into text.

        Raises
        ------
        FlowError
            The flow has no steps, or a stream's readers ask for different localities.
        """
        return compile_spec(self.name, self.attributes, self.description, self.steps)

    def compile(self, overrides: Iterable[str] = (), source: str | None = None) -> Any:
        """The validated :class:`~stram.master.spec.AppSpec`, ``-D`` ``overrides`` applied.

        Raises
        ------
        SpecError
            The spec is invalid (an unknown property, a bad attribute value, ...).
        """
        from stram.master.spec import AppSpec
        return AppSpec.from_dict(self.to_spec(), source=source or f"<flow {self.name}>", overrides=overrides)


def _alignment(kind: str, event_time: str | None, align: Any, max_drift_ms: Any) -> dict[str, Any]:
    """A source's watermark-alignment attributes (``stram.master.core.alignment``)."""
    if align is None:
        if max_drift_ms is not None:
            raise FlowError(f"{kind}: max_drift_ms goes with align (the source's watermark alignment group)")
        return {}
    if not isinstance(align, str) or not align:
        raise FlowError(f"{kind}: align takes the name of a watermark alignment group, got {align!r:.60}")
    if event_time is None:
        raise FlowError(f"{kind}: align needs event time: give timestamp_field too")
    out: dict[str, Any] = {"WATERMARK_ALIGNMENT_GROUP": align}
    if max_drift_ms is not None:
        if isinstance(max_drift_ms, bool) or not isinstance(max_drift_ms, int) or max_drift_ms < 0:
            raise FlowError(f"{kind}: max_drift_ms takes milliseconds >= 0, got {max_drift_ms!r:.60}")
        out["WATERMARK_MAX_DRIFT_MILLIS"] = max_drift_ms
    return out
