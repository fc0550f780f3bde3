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
states as their names). The document, its version and the plan's encoding are the
core's (:mod:`stram.master.core.statedoc`, re-exported here: :data:`VERSION`,
:func:`plan_to_doc` ...): :meth:`stram.master.core.state.MasterState.snapshot` writes it and
:meth:`~stram.master.core.state.MasterState.restore` reads it back. This module owns its
bytes and the file.
"""

from __future__ import annotations

import dataclasses
import json
from typing import Any

import orjson

from stram.common import apppath, fs, jsonbytes
from stram.master.core.statedoc import (VERSION, JournalVersionError, check_version, plain_data, plan_from_doc,
                                        plan_objects, plan_to_doc)

__all__ = ["VERSION", "JournalVersionError", "journal_uri", "encode", "decode", "check_version", "plan_objects",
           "write_journal", "read_journal", "plan_to_doc", "plan_from_doc"]

#: Pickle streams (protocol 2 and later) start with this byte: a journal from before version 1.
_PICKLE_PROTO = b"\x80"


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
