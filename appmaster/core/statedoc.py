"""The master's state as a plain, versioned document (what the journal holds), and back.

:func:`state_doc` writes the top-level fields of a journal document of
:data:`VERSION` from the master's :class:`~stram.master.core.books.Books` (the
plan's operators, inputs and containers with every field, under the field's name:
:func:`plan_to_doc`); :func:`restore_books` reads them back into a new attempt's
books, :func:`plan_from_doc` the plan. A document that is not of :data:`VERSION`
is refused (:func:`check_version`, :class:`JournalVersionError`). The core owns the
document; the journal (:mod:`stram.master.journal`) encodes it, writes it down and
reads it back.
"""

from __future__ import annotations

import dataclasses
from typing import Any, Callable

from stram.common.errors import StramError
from stram.master.core.books import Books
from stram.master.core.changes import untracked
from stram.master.core.plan import ContainerState, OperatorState, PhysicalPlan, PTContainer, PTInput, PTOperator

__all__ = ["VERSION", "JournalVersionError", "check_version", "state_doc", "restore_books", "plan_to_doc",
           "plan_objects", "plan_from_doc", "plain_data", "fields_doc"]

#: The journal version this stram writes and reads.
VERSION = 1


class JournalVersionError(StramError):
    """A journal this stram cannot read: a newer or unknown version, a legacy pickle, or
    not a journal at all. The message says what was found and which version this stram reads."""


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


# ---------------------------------------------------------------- the state

def state_doc(books: Books, objects: bool = False) -> dict[str, Any]:
    """What the journal holds of ``books``: enough for a new master attempt to carry on.

    A plain, JSON-ready document that shares nothing with the books. With ``objects``, its plan
    holds the operators and containers themselves (:func:`plan_objects`): only to be encoded at
    once, under the master's lock.
    """
    return {"version": VERSION, "app_id": books.app_id, "attempt": books.attempt,
            "start_window_millis": books.start_window_millis, "committed": books.committed,
            "plan": plan_objects(books.plan) if objects else plan_to_doc(books.plan),
            "shutdown_operators": [[w, list(ids)] for w, ids in sorted(books.shutdown_operators.items())],
            "state": books.state, "diagnostics": books.diagnostics,
            "started_millis": books.started_millis, "removed": [dict(r) for r in books.removed],
            "errors": [{**e, "operators": list(e["operators"])} for e in books.errors],
            "shutdown_requested": books.shutdown_requested,
            "node_failures": dict(books.node_failures), "blacklist": dict(books.blacklist)}


def restore_books(books: Books, doc: dict[str, Any]) -> None:
    """Set the fields of a new attempt's ``books`` (made with the document's identity and plan)
    from a previous attempt's document (:func:`state_doc`): the next attempt.

    Raises
    ------
    KeyError, TypeError, ValueError
        A field is missing or of the wrong kind.
    """
    books.attempt = int(doc["attempt"]) + 1
    books.committed = int(doc["committed"])
    books.shutdown_operators = {int(w): [int(i) for i in ids] for w, ids in doc["shutdown_operators"]}
    books.state = str(doc["state"])
    books.diagnostics = str(doc["diagnostics"])
    books.started_millis = int(doc["started_millis"])
    books.removed = [dict(r) for r in doc["removed"]]
    books.errors.extend(dict(e) for e in doc["errors"])
    books.shutdown_requested = bool(doc["shutdown_requested"])
    # the nodes' books (a journal of a stram before them has none: nothing blacklisted)
    books.node_failures = {str(h): int(n) for h, n in (doc.get("node_failures") or {}).items()}
    books.blacklist = {str(h): int(t) for h, t in (doc.get("blacklist") or {}).items()}


# ---------------------------------------------------------------- the plan

def plan_to_doc(plan: PhysicalPlan) -> dict[str, Any]:
    """The physical plan as plain data (every field of its operators, inputs and containers)."""
    return {"next_operator_id": plan.next_operator_id, "next_container_number": plan.next_container_number,
            "operators": [fields_doc(op) for op in plan.operators.values()],
            "containers": [fields_doc(c) for c in plan.containers.values()]}


def plan_objects(plan: PhysicalPlan) -> dict[str, Any]:
    """:func:`plan_to_doc` with the operators and containers themselves in it, for the journal to encode
    at once (:func:`stram.master.journal.document.encode`, under the master's lock): the same bytes, a
    third of the time (orjson writes their fields itself: 86-95 ms of CPU for 20,000 operators, not
    296-300; ``bench/profile_heartbeats.py --reads``)."""
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
                plan.put_operator(_from_doc(PTOperator, d, _OPERATOR_FIELDS))
            for d in doc["containers"]:
                plan.put_container(_from_doc(PTContainer, d, _CONTAINER_FIELDS))
        plan.next_operator_id = int(doc["next_operator_id"])
        plan.next_container_number = int(doc["next_container_number"])
    except (KeyError, TypeError, ValueError) as exc:
        raise JournalVersionError(f"the journal's plan does not match journal version {VERSION} "
                                  f"({type(exc).__name__}: {exc})") from None
    return plan


_AS_IS = frozenset({int, str, bool, float, type(None), dict})


def plain_data(value: Any) -> Any:
    """A field's value as JSON-ready data (states as their names, sets as sorted lists)."""
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
        return fields_doc(value)
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


def fields_doc(obj: Any) -> dict[str, Any]:
    """Every field of a dataclass (an operator, an input, a container) as plain data."""
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
