"""Tuples of a stream as ``pyarrow`` record batches in exactly the schema declared for it.

Dict tuples map to the schema by field name, tuples and lists by position;
Arrow record batches and tables (the ``arrow`` codec) are cast to it; bare
values fill a one-column schema. Anything that does not fit raises
:class:`~stram.spark.errors.StramSchemaError`.
"""

from __future__ import annotations

from typing import Any

from stram.spark.errors import StramSchemaError


def rows_to_batch(tuples: list, arrow_schema: Any, names: list[str], where: str) -> Any:
    """One ``pyarrow.RecordBatch`` of ``tuples`` in exactly ``arrow_schema``."""
    import pyarrow as pa

    first = tuples[0]
    try:
        if isinstance(first, dict):
            missing = [n for n in names if n not in first]
            if missing:
                raise StramSchemaError(f"{where}: tuple {_short(first)} has no field(s) {missing} of the "
                                       f"declared schema ({', '.join(names)})")
            try:  # column by column: about twice as fast as from_pylist
                columns = [[t[n] for t in tuples] for n in names]
            except KeyError as exc:
                raise StramSchemaError(f"{where}: a tuple has no field {exc} of the declared schema "
                                       f"({', '.join(names)})") from None
            return pa.RecordBatch.from_arrays(
                [pa.array(col, type=f.type) for col, f in zip(columns, arrow_schema)], schema=arrow_schema)
        if isinstance(first, (tuple, list)):
            if len(first) != len(names):
                raise StramSchemaError(f"{where}: tuple {_short(first)} has {len(first)} fields, the declared "
                                       f"schema {len(names)} ({', '.join(names)})")
            columns = list(zip(*tuples))
            return pa.RecordBatch.from_arrays(
                [pa.array(col, type=f.type) for col, f in zip(columns, arrow_schema)], schema=arrow_schema)
        if isinstance(first, (pa.RecordBatch, pa.Table)):
            return [_cast_batch(b, arrow_schema, names, where) for t in tuples
                    for b in (t.to_batches() if isinstance(t, pa.Table) else [t])]
        if len(names) == 1:
            return pa.RecordBatch.from_arrays([pa.array(tuples, type=arrow_schema[0].type)], schema=arrow_schema)
        raise StramSchemaError(f"{where}: tuple {_short(first)} of type {type(first).__name__} does not fit the "
                               f"declared schema ({', '.join(names)}); emit dicts (by field name), tuples "
                               f"(by position) or Arrow record batches")
    except StramSchemaError:
        raise
    except (pa.ArrowException, TypeError, ValueError, OverflowError) as exc:
        raise StramSchemaError(f"{where}: tuples do not match the declared schema {_schema_text(arrow_schema)}: "
                               f"{type(exc).__name__}: {exc} (first tuple: {_short(first)})") from None


def _cast_batch(batch: Any, arrow_schema: Any, names: list[str], where: str) -> Any:
    import pyarrow as pa

    missing = [n for n in names if n not in batch.schema.names]
    if missing:
        raise StramSchemaError(f"{where}: record batch with columns {batch.schema.names} lacks {missing} of the "
                               f"declared schema ({', '.join(names)})")
    if batch.schema.equals(arrow_schema):
        return batch
    try:
        columns = [batch.column(n).cast(f.type) for n, f in zip(names, arrow_schema)]
        return pa.RecordBatch.from_arrays(columns, schema=arrow_schema)
    except (pa.ArrowException, TypeError, ValueError) as exc:
        raise StramSchemaError(f"{where}: record batch schema {_schema_text(batch.schema)} does not cast to the "
                               f"declared schema {_schema_text(arrow_schema)}: {exc}") from None


def _schema_text(schema: Any) -> str:
    return "(" + ", ".join(f"{f.name} {f.type}" for f in schema) + ")"


def _short(value: Any, limit: int = 160) -> str:
    text = repr(value)
    return text if len(text) <= limit else text[:limit] + "..."
