"""The master's journal: what a new master attempt needs, as a versioned JSON document.

``APP_PATH/journal/snapshot`` holds one document, rewritten whole and atomically
(a temporary file, then a move, through ``pyarrow.fs``; on HDFS, whose move onto a
file deletes it first, by way of ``snapshot.next``: :func:`stram.common.fs.replace_file`); between two snapshots
the master appends what changed to a log (:mod:`stram.master.journal.log`), before
it acts on what it records (a heartbeat response, a checkpoint deletion, a launch).
It is plain data, not a pickle of the plan's classes, so a journal says what it
holds and a stram that cannot read it says so::

    {"version": 1,
     "app_id": "...", "attempt": 1, "start_window_millis": ..., "committed": <window>,
     "state": "RUNNING", "diagnostics": "", "started_millis": ...,
     "shutdown_requested": false,
     "shutdown_operators": [[<window>, [<operator id>, ...]], ...],
     "removed": [{...}, ...], "errors": [{...}, ...],
     "plan": {"next_operator_id": 9, "next_container_number": 6,
              "operators": [{"id": 1, "name": "reader", "state": "ACTIVE", "checkpoints": [...],
                             "inputs": [{"port": "input", "source_id": 1, ...}], ...}, ...],
              "containers": [{"id": "container_000001", "state": "RUNNING",
                              "operators": [1, 2], "buffer_server": ["host", 4242], ...}, ...]}}

Operators, their inputs and containers carry every field of
:class:`~stram.master.core.plan.PTOperator`, :class:`~stram.master.core.plan.PTInput` and
:class:`~stram.master.core.plan.PTContainer` under the field's name (sets as sorted lists,
states as their names). The top-level keys are written by
:meth:`stram.master.core.state.MasterState.snapshot` and read back by
:meth:`~stram.master.core.state.MasterState.restore`; this module owns the version, the
plan's encoding and the file.
"""

from __future__ import annotations

import dataclasses
import json
from typing import Any, Callable

import orjson

from stram.common import apppath, fs, jsonbytes
from stram.common.errors import StramError
from stram.master.core.changes import untracked
from stram.master.core.plan import ContainerState, OperatorState, PhysicalPlan, PTContainer, PTInput, PTOperator

__all__ = ["VERSION", "JournalVersionError", "journal_uri", "encode", "decode", "check_version", "plan_objects",
           "write_journal", "read_journal", "plan_to_doc", "plan_from_doc"]

#: The journal version this stram writes and reads.
VERSION = 1

#: Pickle streams (protocol 2 and later) start with this byte: a journal from before version 1.
_PICKLE_PROTO = b"\x80"


class JournalVersionError(StramError):
    """A journal this stram cannot read: a newer or unknown version, a legacy pickle, or
    not a journal at all. The message says what was found and which version this stram reads."""


def journal_uri(app_path: str) -> str:
    """Where an application's journal lives."""
    return apppath.journal(app_path)


# ---------------------------------------------------------------- bytes

def encode(doc: dict[str, Any]) -> bytes:
    """The journal's bytes (checks the document is a journal this stram writes)."""
    check_version(doc)
    return dumps(doc)


def dumps(doc: Any) -> bytes:
    """Compact JSON of a journal document or log record (orjson: a tenth of the standard encoder's
    time, which the master spends under its lock; what orjson refuses, an integer past 64 bits,
    the standard way). The plan's operators and containers may be in it as they are
    (:func:`plan_objects`): written as :func:`plan_to_doc` writes them."""
    try:
        return orjson.dumps(doc, default=_sorted_set, option=orjson.OPT_NON_STR_KEYS)
    except TypeError:
        return json.dumps(doc, separators=(",", ":"), default=_plain_object).encode()


def _sorted_set(value: Any) -> Any:
    """orjson's fallback: a set (a container's operators) as its sorted list, as :func:`plain_data` makes it."""
    if isinstance(value, (set, frozenset)):
        return sorted(value)
    raise TypeError(f"{type(value).__name__} is not JSON")


def _plain_object(value: Any) -> Any:
    """The standard encoder's fallback: an operator, container or set as :func:`plain_data` makes it."""
    if isinstance(value, (set, frozenset)) or (dataclasses.is_dataclass(value) and not isinstance(value, type)):
        return plain_data(value)
    raise TypeError(f"{type(value).__name__} is not JSON")


#: JSON from bytes (orjson where it is exact, the standard decoder elsewhere). Raises ValueError.
loads = jsonbytes.loads


def decode(data: bytes, where: str = "the journal") -> dict[str, Any]:
    """A journal document from its bytes.

    Raises
    ------
    JournalVersionError
        ``data`` is a legacy pickle, not a JSON object, or of another version.
    """
    if data[:1] == _PICKLE_PROTO:
        raise JournalVersionError(f"{where} is a pickle written by an older stram (before journal version 1); "
                                  f"this stram reads journal version {VERSION} (JSON) and cannot resume from it")
    try:
        doc = loads(data)
    except (UnicodeDecodeError, ValueError) as exc:
        raise JournalVersionError(f"{where} is not a stram journal (not JSON: {exc}); "
                                  f"this stram reads journal version {VERSION}") from None
    check_version(doc, where)
    return doc


def check_version(doc: Any, where: str = "the journal") -> None:
    """Refuse a document that is not a journal of :data:`VERSION`."""
    if not isinstance(doc, dict):
        raise JournalVersionError(f"{where} is not a stram journal (a JSON {type(doc).__name__}, "
                                  f"not an object); this stram reads journal version {VERSION}")
    if "version" not in doc:
        raise JournalVersionError(f"{where} is not a stram journal (no \"version\"); "
                                  f"this stram reads journal version {VERSION}")
    found = doc["version"]
    if found != VERSION or isinstance(found, bool):
        newer = isinstance(found, int) and not isinstance(found, bool) and found > VERSION
        raise JournalVersionError(f"{where} is journal version {found!r}"
                                  f"{' (written by a newer stram)' if newer else ''}; "
                                  f"this stram reads journal version {VERSION}")


# ---------------------------------------------------------------- the file

def write_journal(app_path: str, doc: dict[str, Any]) -> None:
    """Replace the journal, never leaving it missing (:func:`stram.common.fs.replace_file`)."""
    fs.replace_file(journal_uri(app_path), encode(doc))


def read_journal(app_path: str) -> dict[str, Any] | None:
    """The journal document, or None when the application has none yet.

    Raises
    ------
    JournalVersionError
        The journal is one this stram cannot read.
    """
    uri = journal_uri(app_path)
    data = fs.read_replaced(uri)
    if data is None:
        return None
    return decode(data, where=f"journal {uri}")


# ---------------------------------------------------------------- the plan

def plan_to_doc(plan: PhysicalPlan) -> dict[str, Any]:
    """The physical plan as plain data (every field of its operators, inputs and containers)."""
    return {"next_operator_id": plan.next_operator_id, "next_container_number": plan.next_container_number,
            "operators": [_to_doc(op) for op in plan.operators.values()],
            "containers": [_to_doc(c) for c in plan.containers.values()]}


def plan_objects(plan: PhysicalPlan) -> dict[str, Any]:
    """:func:`plan_to_doc` with the operators and containers themselves in it, for :func:`encode` at
    once (under the master's lock): the same bytes, a third of the time (orjson writes their
    fields itself: 86-95 ms of CPU for 20,000 operators, not 296-300; ``bench/profile_heartbeats.py --reads``)."""
    return {"next_operator_id": plan.next_operator_id, "next_container_number": plan.next_container_number,
            "operators": list(plan.operators.values()), "containers": list(plan.containers.values())}


def plan_from_doc(doc: dict[str, Any]) -> PhysicalPlan:
    """The physical plan :func:`plan_to_doc` wrote.

    Raises
    ------
    JournalVersionError
        A field is missing, unknown or of the wrong kind.
    """
    plan = PhysicalPlan()
    try:
        with untracked():  # a new plan: whoever reads it reads it whole
            for d in doc["operators"]:
                op = _from_doc(PTOperator, d, _OPERATOR_FIELDS)
                plan.operators[op.id] = op
            for d in doc["containers"]:
                container = _from_doc(PTContainer, d, _CONTAINER_FIELDS)
                plan.containers[container.id] = container
        plan.next_operator_id = int(doc["next_operator_id"])
        plan.next_container_number = int(doc["next_container_number"])
    except (KeyError, TypeError, ValueError) as exc:
        raise JournalVersionError(f"the journal's plan does not match journal version {VERSION} "
                                  f"({type(exc).__name__}: {exc})") from None
    return plan


_AS_IS = frozenset({int, str, bool, float, type(None), dict})


def plain_data(value: Any) -> Any:
    kind = type(value)
    if kind in _AS_IS:  # most fields of a snapshot: checked first, at half a million per snapshot
        return value
    if kind is list:
        return [plain_data(v) for v in value]
    if isinstance(value, (OperatorState, ContainerState)):
        return value.value
    if isinstance(value, (set, frozenset)):
        return sorted(value)
    if isinstance(value, tuple):
        return [plain_data(v) for v in value]
    if isinstance(value, list):
        return [plain_data(v) for v in value]
    if dataclasses.is_dataclass(value) and not isinstance(value, type):
        return _to_doc(value)
    return value  # str, int, None, and JSON values (properties, attributes, stats)


_FIELD_NAMES: dict[type, tuple[str, ...]] = {}
_FIELD_SETS: dict[type, frozenset[str]] = {}


def _field_names(cls: type) -> tuple[str, ...]:
    """A dataclass's field names, in its constructor's order (looked up once per class)."""
    names = _FIELD_NAMES.get(cls)
    if names is None:
        names = _FIELD_NAMES[cls] = tuple(f.name for f in dataclasses.fields(cls))
        _FIELD_SETS[cls] = frozenset(names)
    return names


def _to_doc(obj: Any) -> dict[str, Any]:
    return {name: plain_data(getattr(obj, name)) for name in _field_names(type(obj))}


_set = object.__setattr__


def _from_doc(cls: type, doc: dict[str, Any], convert: dict[str, Callable[[Any], Any]]) -> Any:
    order = _field_names(cls)
    names = _FIELD_SETS[cls]
    keys = doc.keys()
    if keys != names:
        unknown = keys - names
        if unknown:
            raise ValueError(f"{cls.__name__} has no field {', '.join(sorted(unknown))}")
        # a field left out: the class's default, or its TypeError
        return cls(**{k: convert[k](v) if k in convert else v for k, v in doc.items()})
    # every field: set as the constructor would, in its order, without
    # reporting each assignment to the change trackers (:mod:`stram.master.core.changes`): the restored
    # plan's marks are forgotten at once, and at 20,000 operators half a million of them took a
    # third of the restore
    obj = cls.__new__(cls)
    for name in order:
        value = doc[name]
        _set(obj, name, convert[name](value) if name in convert else value)
    return obj


def _pair(value: Any) -> tuple[str, int] | None:
    return (str(value[0]), int(value[1])) if value is not None else None


_INPUT_FIELDS: dict[str, Callable[[Any], Any]] = {"partition_keys": tuple}
_OPERATOR_FIELDS: dict[str, Callable[[Any], Any]] = {
    "state": OperatorState,
    "inputs": lambda inputs: [_from_doc(PTInput, i, _INPUT_FIELDS) for i in inputs],
}
_CONTAINER_FIELDS: dict[str, Callable[[Any], Any]] = {
    "state": ContainerState, "operators": set, "pending_deploy": set, "buffer_server": _pair,
}
