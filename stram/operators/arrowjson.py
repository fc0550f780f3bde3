"""JSON lines of a ``pyarrow.RecordBatch``, built column by column with pyarrow compute.

:class:`stram.operators.io.JsonLinesOutput` writes an Arrow batch's rows with this instead of
turning each row into a dict and encoding it: each column becomes its rows' JSON texts at once
(integers and floats cast to text, strings quoted), and one element-wise join puts each row's
line together. A line reads back as the same values, of the same types, as the row's dict encoded
by the dict path (``io._to_json``): a float always has a ``.`` or an exponent, a NaN or infinity is
``null``, strings are UTF-8 with JSON's escapes. A column of any other type (timestamps, lists,
structs, binary, decimals) is encoded value by value through the dict path's encoder, so every
type reads back as it does there.
"""

from __future__ import annotations

from typing import Any, Callable

__all__ = ["json_lines", "SLICE_ROWS"]

#: Rows encoded per step: the joined lines stay far inside a string array's 2 GiB.
SLICE_ROWS = 65536


def json_lines(batch: Any, encode_value: Callable[[Any], bytes]) -> Any:
    """A ``pyarrow.StringArray``: row ``i``'s JSON object, ending in a newline, for every row of ``batch``.
    ``encode_value``: one value's JSON (the dict path's encoder), for columns not encoded here."""
    import pyarrow as pa
    if batch.num_rows > SLICE_ROWS:
        return pa.concat_arrays([json_lines(batch.slice(i, SLICE_ROWS), encode_value)
                                 for i in range(0, batch.num_rows, SLICE_ROWS)])
    import pyarrow.compute as pc
    import orjson
    names = batch.schema.names
    if len(set(names)) != len(names):  # as a dict would hold it: the last column of a name wins
        last = {name: i for i, name in enumerate(names)}
        keep = sorted(last.values())
        batch = pa.RecordBatch.from_arrays([batch.column(i) for i in keep], [names[i] for i in keep])
        names = batch.schema.names
    if not names:
        return pa.array(["{}\n"] * batch.num_rows, pa.string())
    pieces: list[Any] = []
    for i, name in enumerate(names):
        key = orjson.dumps(str(name)).decode()
        pieces.append(("{" if i == 0 else ",") + key + ":")
        pieces.append(_column_text(batch.column(i), encode_value, pa, pc))
    pieces.append("}\n")
    return pc.binary_join_element_wise(*pieces, "")


def _column_text(col: Any, encode_value: Callable[[Any], bytes], pa: Any, pc: Any) -> Any:
    """Each value of ``col`` as JSON text (a string array without nulls)."""
    kind = col.type
    if pa.types.is_dictionary(kind):
        col = col.dictionary_decode()
        kind = col.type
    if pa.types.is_integer(kind) or pa.types.is_boolean(kind):
        text = pc.cast(col, pa.string())
    elif pa.types.is_floating(kind) and not pa.types.is_float16(kind):
        text = pc.cast(col, pa.string())
        # a whole number reads back as an int without a ".0"; "nan" and "inf" are not JSON
        text = pc.if_else(pc.match_substring_regex(text, r"[.e]"), text, pc.binary_join_element_wise(text, ".0", ""))
        text = pc.if_else(pc.is_finite(col), text, "null")
    elif pa.types.is_string(kind) or pa.types.is_large_string(kind):
        if pc.any(pc.match_substring_regex(col, r'["\\\x00-\x1f]')).as_py():
            return _each(col, encode_value, pa)  # JSON's escapes: rare in data, left to the encoder
        text = pc.binary_join_element_wise('"', col, '"', "")
        if pa.types.is_large_string(kind):
            text = text.cast(pa.string())
    elif pa.types.is_null(kind):
        return pa.array(["null"] * len(col), pa.string())
    else:
        return _each(col, encode_value, pa)
    return text.fill_null("null") if text.null_count else text


def _each(col: Any, encode_value: Callable[[Any], bytes], pa: Any) -> Any:
    """The column value by value through ``encode_value`` (its types as a dict of the row holds them)."""
    return pa.array([encode_value(value).decode() for value in col.to_pylist()], pa.string())
