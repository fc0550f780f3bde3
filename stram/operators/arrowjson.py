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
    import orjson
    import pyarrow.compute as pc
    names = batch.schema.names
    if len(set(names)) != len(names):  # as a dict would hold it: the last column of a name wins
        last = {name: i for i, name in enumerate(names)}
        keep = sorted(last.values())
        batch = pa.RecordBatch.from_arrays([batch.column(i) for i in keep], [names[i] for i in keep])
        names = batch.schema.names
    if not names:
        return pa.array(["{}\n"] * batch.num_rows, pa.string())
    pieces: list[Any] = []   # literal texts and string arrays, in order, for one element-wise join
    literal = "{"
    for i, name in enumerate(names):
        literal += ("," if i else "") + orjson.dumps(str(name)).decode() + ":"
        text, quoted = _column_text(batch.column(i), encode_value, pa, pc)
        if quoted:  # the quotes go into the literals beside it: no pass of its own over the column
            literal += '"'
        pieces += [literal, text]
        literal = '"' if quoted else ""
    pieces.append(literal + "}\n")
    return pc.binary_join_element_wise(*pieces, "")


def _column_text(col: Any, encode_value: Callable[[Any], bytes], pa: Any, pc: Any) -> tuple[Any, bool]:
    """Each value of ``col`` as JSON text (a string array without nulls), or, ``True`` second, a
    string column whose values need only quotes around them."""
    kind = col.type
    if pa.types.is_dictionary(kind):
        col = col.dictionary_decode()
        kind = col.type
    if pa.types.is_integer(kind) or pa.types.is_boolean(kind):
        text = pc.cast(col, pa.string())
    elif pa.types.is_floating(kind) and not pa.types.is_float16(kind):
        text = pc.cast(col, pa.string())
        # a whole number is written without a fraction ("3", "1e+22"): without an exponent it would
        # read back as an int, so it gets a ".0"; "nan" and "inf" are not JSON
        whole = pc.equal(col, pc.floor(col))
        if pc.any(whole).as_py():
            bare = pc.and_(whole, pc.invert(pc.match_substring(text, "e")))
            if pc.any(bare).as_py():
                text = pc.replace_with_mask(text, bare, pc.binary_join_element_wise(pc.filter(text, bare), ".0", ""))
        finite = pc.is_finite(col)
        if not pc.all(finite).as_py():
            text = pc.if_else(finite, text, "null")
    elif (pa.types.is_string(kind) or pa.types.is_large_string(kind)) and not col.null_count \
            and not _needs_escapes(col):
        return (col.cast(pa.string()) if pa.types.is_large_string(kind) else col), True
    elif pa.types.is_null(kind):
        return pa.array(["null"] * len(col), pa.string()), False
    else:  # strings with nulls or JSON's escapes (rare in data), and every other type
        return _each(col, encode_value, pa), False
    return (text.fill_null("null") if text.null_count else text), False


#: Every byte a JSON string holds as it is: not a control character, a quote or a backslash.
_PLAIN = bytes(b for b in range(256) if b >= 0x20 and b not in b'"\\')


def _needs_escapes(col: Any) -> bool:
    """Whether a string column's values hold a byte JSON escapes (one pass over its characters)."""
    import pyarrow as pa
    _, offsets, data = col.buffers()[:3]
    if data is None:
        return False
    ends = memoryview(offsets).cast("q" if pa.types.is_large_string(col.type) else "i")
    first, last = ends[col.offset], ends[col.offset + len(col)]
    return bool(memoryview(data)[first:last].tobytes().translate(None, _PLAIN))


def _each(col: Any, encode_value: Callable[[Any], bytes], pa: Any) -> Any:
    """The column value by value through ``encode_value`` (its types as a dict of the row holds them)."""
    return pa.array([encode_value(value).decode() for value in col.to_pylist()], pa.string())
