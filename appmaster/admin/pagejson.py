"""The operators page written as JSON straight from the state's copies, without a dict per row.

The admin API's ``operators`` page (and ``stram list-operators``, the console)
is one row of twenty-two fields per physical operator. Built as dicts
(:func:`~stram.master.core.reports.operator_rows`) and encoded by orjson, 20,000 rows
took 67-99 ms of the master's interpreter, every heartbeat waiting for the
interpreter lock meanwhile. Here each row is one ``bytes %`` of a fixed
template: the fields that never change for an operator (id, name, label, kind,
partition) are encoded once and kept, strings that repeat (container ids,
states) are encoded once per text, and the rest are numbers: 45 ms, the same
JSON as :func:`~stram.master.core.reports.operator_rows` gives (keys sorted). CPU time,
``python bench/profile_heartbeats.py --containers 2000 --operators 10 --rounds 2 --reads``.
"""

from __future__ import annotations

import math
from typing import Any

import orjson

from stram.master.core.reports import last_line

__all__ = ["OperatorPage"]

# the row's keys in sorted order, as orjson's OPT_SORT_KEYS writes them; the two %s holes after
# current_window and metrics take an operator's fixed fields (id, kind, label / name, partition), the
# one after tuples_processed_total its watermark and lag (:func:`_watermark`)
_ROW = (b'{"blocked":%s,"container":%s,"cpu_seconds_total":%s,"current_window":%s,%s,"last_error":%s,'
        b'"last_window_tuples":[%d,%d],"metrics":%s,%s,"recovery_checkpoint":%s,"restarts":%d,'
        b'"state":%s,"tuples_in_total":%d,"tuples_out_total":%d,"tuples_per_sec":%s,'
        b'"tuples_processed_total":%d,%s,"windows_total":%d}')
_SORTED = orjson.OPT_SORT_KEYS | orjson.OPT_NON_STR_KEYS


def _number(value: Any) -> bytes:
    """An int or float (or None) as JSON; a float that is not finite is null, as orjson writes it."""
    if value is None:
        return b"null"
    if type(value) is float:
        return repr(value).encode() if math.isfinite(value) else b"null"
    return b"%d" % value


#: The watermark fields of a row without a watermark (most operators: no event time).
_NO_WATERMARK = b'"watermark":null,"watermark_lag_millis":null'


def _watermark(value: Any, lag: Any) -> bytes:
    """The watermark fields of a row (:func:`~stram.master.core.reports.watermark_view`'s pair):
    epoch millis and lag, or one of its words and null."""
    if type(value) is str:
        return b'"watermark":%s,"watermark_lag_millis":null' % orjson.dumps(value)
    return b'"watermark":%s,"watermark_lag_millis":%s' % (_number(value), _number(lag))


class OperatorPage:
    """Encodes chunks of :func:`~stram.master.core.reports.operator_copies` as rows of the page.

    One per admin API: it keeps each operator's encoded fixed fields (for as long as the
    operator object is the plan's) and the encoded texts of containers and states.
    """

    def __init__(self) -> None:
        self._fixed: dict[int, tuple[Any, bytes, bytes]] = {}
        self._texts: dict[Any, bytes] = {}

    def rows(self, copies: list[tuple]) -> bytes:
        """The rows of ``copies`` as JSON objects joined by commas (b"" for none).

        Raises TypeError where orjson refuses a value (a metric of an integer past 64 bits):
        the caller encodes those rows the standard way.
        """
        fixed, texts, dumps = self._fixed, self._texts, orjson.dumps
        if len(fixed) > 2 * len(copies) + 100_000:  # operators since removed
            fixed.clear()
        if len(texts) > 100_000:
            texts.clear()
        out = []
        append = out.append
        for (op, state, current, recovery, container, restarts, error, has_inputs, blocked, windows, totals,
             (watermark, lag)) in copies:
            tuples_in, tuples_out, count, cpu_nanos = totals
            throughput, last_in, last_out, metrics = windows if windows is not None else (0.0, 0, 0, None)
            known = fixed.get(op.id)
            if known is None or known[0] is not op:
                kind = op.kind
                known = fixed[op.id] = (
                    op, dumps({"id": op.id, "kind": kind, "label": op.label})[1:-1],
                    dumps({"name": op.name, "partition": None if kind == "UNIFIER" else op.partition_index})[1:-1])
            where = texts.get(container)
            if where is None:
                where = texts[container] = dumps(container)
            said = texts.get(state)
            if said is None:
                said = texts[state] = dumps(state)
            append(_ROW % (
                b"true" if blocked else b"false", where, _number(cpu_nanos / 1e9), _number(current), known[1],
                dumps(last_line(error)) if error else b'""', last_in, last_out,
                dumps(metrics, option=_SORTED) if metrics else b"{}", known[2], _number(recovery), restarts,
                said, tuples_in, tuples_out, _number(round(throughput, 1)),
                tuples_in if has_inputs else tuples_out,
                _NO_WATERMARK if watermark is None else _watermark(watermark, lag), count))
        return b",".join(out)
