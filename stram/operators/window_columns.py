"""Columnar windows: :class:`~stram.operators.window.WindowedAggregate` fed Arrow batches.

For count, sum, min and max of a field per key in event-time tumbling or sliding windows (no
trigger), a batch is aggregated with ``pyarrow.compute`` per key and *pane* (the slide-long span
windows are made of: a pane lies wholly inside every window that holds its start), and the pane's
partial table is kept as it is. A window fires as one ``group_by`` over the partial tables of its
panes: no Python object per record, none per key until the results are made, and none at all with
``arrow_results`` (the window's results go out as one ``pyarrow.Table``).

State (checkpointed with the operator): pane start -> list of partial tables ``(key, value)``, and
the watermark windows were last fired at. Within a window, keys come out in the order their panes
were first filled (the order of first arrival for data in event-time order).
"""

from __future__ import annotations

from typing import Any

from stram.common.arrowtypes import is_arrow

__all__ = ["Columns", "usable", "joined", "results", "split"]

#: The aggregate that merges partial values, per aggregate (a count's partials are summed).
_MERGE = {"count": "sum", "sum": "sum", "min": "min", "max": "max"}
#: Partial tables a pane keeps before they are merged into one.
COMPACT_AT = 32
#: Rows queued before they are aggregated (also at each watermark and streaming window end): an
#: aggregation costs some fixed tens of microseconds per call, and a partitioned stream delivers
#: the sources' batches in small pieces.
PENDING_ROWS = 1 << 16
_INT64_MIN = -(1 << 63)


def usable(spec: Any, agg_code: str, fields: Any, agg_field: Any, trigger: Any) -> bool:
    """Whether an operator of this configuration can keep its windows as columns."""
    return (not spec.processing and not spec.session and trigger is None and agg_code in _MERGE
            and bool(fields.key_field) and bool(fields.ts_field) and (agg_code == "count" or bool(agg_field))
            and spec.size % spec.slide == 0)


class Columns:
    """The columnar path of one operator: :meth:`add` a batch, :meth:`fire` the windows a watermark closes."""

    def __init__(self, key: str, ts: str, value: str | None, code: str, size: int, slide: int, origin: int) -> None:
        self.key, self.ts, self.value, self.code = key, ts, value, code
        self.size, self.slide, self.origin = size, slide, origin
        #: Batches taken, not yet aggregated (:meth:`drain`), and their rows.
        self.pending: list = []
        self.pending_rows = 0

    def take(self, records: list) -> tuple[list, Any]:
        """Queue the Arrow batches among ``records``, dicts among them as a batch
        of their own; returns the dicts that make no batch, and why."""
        import pyarrow as pa
        batches = [x for x in records if is_arrow(x)]
        rows = [x for x in records if not is_arrow(x)]
        bad: list = []
        why = None
        if rows:
            try:
                batches.append(pa.Table.from_pylist(rows))
            except (pa.ArrowException, TypeError, ValueError, AttributeError) as exc:
                bad, why = rows, exc
        for b in batches:  # whole: late rows go out unchanged
            self.pending.append(b)
            self.pending_rows += b.num_rows
        return bad, why

    def drain(self, panes: dict[int, list], limit: int) -> tuple[list, list, list]:
        """:meth:`add` the queued batches, a call per run of one schema: (late batches, rows with a null
        key, time or value, (rows, exception) of the batches whose types differ from the state's)."""
        import pyarrow as pa
        batches, self.pending, self.pending_rows = self.pending, [], 0
        late: list = []
        odd: list = []
        failed: list = []
        for batch in joined(batches):
            try:
                gone, nulls = self.add(panes, batch, limit)
            except (pa.ArrowException, TypeError, ValueError) as exc:
                failed.append((batch.num_rows, exc))
                continue
            if gone is not None:
                late.append(gone)
            odd += nulls
        return late, odd, failed

    def add(self, panes: dict[int, list], batch: Any, limit: int) -> tuple[Any, list]:
        """Aggregate ``batch`` into ``panes`` (windows ending at or before ``limit`` are closed); return
        (its late rows as a batch or None, rows that are not well formed as dicts: null key, time or value)."""
        import pyarrow as pa
        import pyarrow.compute as pc
        names = [self.key, self.ts] + ([self.value] if self.code != "count" else [])
        if any(n not in batch.schema.names for n in names):
            return None, batch.to_pylist()
        cols = [batch.column(n) for n in names]
        odd: list = []
        if any(c.null_count for c in cols) or not pa.types.is_integer(cols[1].type):
            if not pa.types.is_integer(cols[1].type):
                return None, batch.to_pylist()
            valid = pc.and_(*[pc.is_valid(c) for c in cols]) if len(cols) > 1 else pc.is_valid(cols[0])
            odd = batch.filter(pc.invert(valid)).to_pylist()
            batch = batch.filter(valid)
            cols = [batch.column(n) for n in names]
        if not batch.num_rows:
            return None, odd
        t = cols[1]
        pane = pc.subtract(t, _mod(t, self.origin, self.slide))
        # rows whose latest window (the one starting at their pane) is closed are late, unchanged
        open_ = pc.greater(pc.add(pane, self.size), max(limit, _INT64_MIN))
        late = None
        if not pc.all(open_).as_py():
            late = batch.filter(pc.invert(open_))
            batch, pane = batch.filter(open_), pc.filter(pane, open_)
            cols = [batch.column(n) for n in names]
            if not batch.num_rows:
                return late, odd
        table = pa.table({"k": cols[0], "p": pane, **({"v": cols[2]} if self.code != "count" else {})})
        agg = [([], "count_all")] if self.code == "count" else [("v", self.code)]
        grouped = table.group_by(["k", "p"], use_threads=False).aggregate(agg)
        keys, starts, values = grouped.column("k"), grouped.column("p"), grouped.column(grouped.num_columns - 1)
        for s in pc.unique(starts).to_pylist():
            mask = pc.equal(starts, s)
            part = pa.table({"key": pc.filter(keys, mask), "value": pc.filter(values, mask)})
            lst = panes.setdefault(s, [])
            lst.append(part)
            if len(lst) >= COMPACT_AT:
                panes[s] = [self._merge(lst)]
        return late, odd

    def _merge(self, parts: list) -> Any:
        import pyarrow as pa
        table = pa.concat_tables(parts, promote_options="permissive") if len(parts) > 1 else parts[0]
        op = _MERGE[self.code]
        merged = table.group_by("key", use_threads=False).aggregate([("value", op)])
        return merged.select(["key", f"value_{op}"]).rename_columns(["key", "value"])

    def fire(self, panes: dict[int, list], mark: int, wm: int, lateness: int) -> list[tuple[int, Any]]:
        """The windows whose end + ``lateness`` passed ``wm`` but not ``mark`` (the watermark of the last
        firing), in (end, start) order, as (window start, table of key and value); panes no window
        still needs leave ``panes``."""
        if not panes:
            return []
        size, slide = self.size, self.slide
        starts = sorted({s - i * slide for s in panes for i in range(size // slide)})
        due = [w for w in starts if mark < w + size + lateness <= wm]
        out = []
        for w in due:
            parts = [t for s in range(w, w + size, slide) for t in panes.get(s, ())]
            if parts:
                out.append((w, self._merge(parts)))
        for s in [s for s in panes if s + size + lateness <= wm]:
            del panes[s]
        return out


def joined(batches: list) -> list:
    """Consecutive Arrow batches of one schema as one table (each :meth:`Columns.add` call costs some
    fixed tens of microseconds: a partitioned stream delivers pieces of the sources' batches)."""
    import pyarrow as pa
    out: list = []
    run: list = []
    for b in batches:
        if run and b.schema != run[0].schema:
            out.append(run[0] if len(run) == 1 else pa.Table.from_batches(run))
            run = []
        if isinstance(b, pa.Table):
            run.extend(b.to_batches())
        else:
            run.append(b)
    if run:
        out.append(run[0] if len(run) == 1 else pa.Table.from_batches(run))
    return out


def results(fired: list, size: int, arrow: bool) -> list:
    """:meth:`Columns.fire`'s windows as results: per window one ``pyarrow.Table`` (key, window_start,
    window_end, value) with ``arrow``, else its rows as dicts with those fields."""
    import pyarrow as pa
    out: list = []
    for s, table in fired:
        if arrow:
            n = table.num_rows
            out.append(pa.table({"key": table.column("key"), "window_start": pa.repeat(s, n),
                                 "window_end": pa.repeat(s + size, n), "value": table.column("value")}))
        else:
            out += [{"key": k, "window_start": s, "window_end": s + size, "value": v}
                    for k, v in zip(table.column("key").to_pylist(), table.column("value").to_pylist())]
    return out


def split(states: list[dict[int, list]], count: int, owner: Any) -> list[dict[int, list]]:
    """The panes of old partitions dealt out to ``count`` new ones by ``owner(key)``."""
    import pyarrow as pa
    import pyarrow.compute as pc
    new: list[dict[int, list]] = [{} for _ in range(count)]
    for panes in states:
        for s, parts in panes.items():
            for table in parts:
                owners = pa.array([owner(k) for k in table.column("key").to_pylist()])
                for i in range(count):
                    part = table.filter(pc.equal(owners, i))
                    if part.num_rows:
                        new[i].setdefault(s, []).append(part)
    return new


def _mod(t: Any, origin: int, slide: int) -> Any:
    """``(t - origin) mod slide``, non-negative (Python's ``%``) for any sign of ``t - origin``."""
    import pyarrow.compute as pc
    shifted = pc.subtract(t, origin) if origin else t
    r = pc.subtract(shifted, pc.multiply(pc.divide(shifted, slide), slide))  # truncating division
    return pc.if_else(pc.less(r, 0), pc.add(r, slide), r)
