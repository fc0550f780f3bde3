"""Stable partitioning of tuples by key, shared by master and agents.

Python's ``hash()`` of ``str`` is salted per process, so partitioning uses
CRC-32 of the key's bytes: the same key lands in the same partition in every
container and after every restart. Integers are mixed (Fibonacci hashing: the
top bits of the key times 2^64 / golden ratio), not taken as they are: ids often
share their low bits (NEXMark's hot auctions are all even), and the partition
mask keeps only the low bits of the hash.
"""

from __future__ import annotations

import zlib
from typing import Any, Callable

__all__ = ["default_key", "partition_hash", "partition_mask", "partition_keys", "owner_of", "key_function",
           "key_field", "arrow_tags", "FIELD_KEY"]


def default_key(tuple: Any) -> Any:
    """A dict's ``"key"``, a tuple's first field, else the tuple itself."""
    if isinstance(tuple, dict):
        return tuple.get("key")
    if isinstance(tuple, tuple_type) and tuple:
        return tuple[0]
    return tuple


tuple_type = tuple
_U64 = (1 << 64) - 1
#: 2^64 / the golden ratio, odd: multiplying by it spreads any run of integers over the top bits.
_GOLDEN = 0x9E3779B97F4A7C15


def partition_hash(key: Any) -> int:
    """A non-negative 31-bit hash of a key that is the same in every process."""
    if isinstance(key, str):
        return zlib.crc32(key.encode("utf-8", "surrogatepass")) & 0x7FFFFFFF
    if isinstance(key, bool) or key is None:
        return int(bool(key))
    if isinstance(key, int):
        return (((key & _U64) * _GOLDEN) & _U64) >> 33
    if isinstance(key, (bytes, bytearray, memoryview)):
        return zlib.crc32(key) & 0x7FFFFFFF
    return zlib.crc32(repr(key).encode()) & 0x7FFFFFFF


def partition_mask(count: int) -> int:
    """Smallest all-ones mask with at least ``count`` values (Apex's partition mask)."""
    if count <= 1:
        return 0
    return (1 << (count - 1).bit_length()) - 1


def partition_keys(count: int, index: int) -> list[int]:
    """Masked hash values that partition ``index`` of ``count`` owns."""
    return list(range(index, partition_mask(count) + 1, count)) if count > 1 else [0]


def owner_of(count: int, key_fn: Callable[[Any], Any] = lambda k: k) -> Callable[[Any], int]:
    """A function mapping a key to the index of the partition that owns it."""
    mask = partition_mask(count)
    return lambda key: (partition_hash(key_fn(key)) & mask) % count if count > 1 else 0


#: A key spec naming a record field: ``"field:auction"`` partitions dicts by ``record["auction"]``.
FIELD_KEY = "field:"


def key_function(spec: str | None) -> Callable[[Any], Any]:
    """The key function a stream's publisher partitions by, from the spec the downstream operator
    gave (:meth:`stram.operator.Operator.partition_key`): ``None`` or ``""`` the default key,
    ``"field:NAME"`` a dict field (a tuple's item when NAME is a number), or pickled text
    (:mod:`stram.common.pickled`) holding a function."""
    if not spec:
        return default_key
    if spec.startswith(FIELD_KEY):
        name = spec[len(FIELD_KEY):]
        if name.isdigit():
            index = int(name)
            return lambda t: t[index]
        return lambda t: t.get(name) if isinstance(t, dict) else getattr(t, name, None)
    from stram.common import pickled  # only where a flow passed a function
    return pickled.loads(spec)


def key_field(spec: str | None) -> str | None:
    """The field a ``"field:NAME"`` key spec names (None for any other spec)."""
    return spec[len(FIELD_KEY):] if spec and spec.startswith(FIELD_KEY) else None


def arrow_tags(batch: Any, field: str, mask: int) -> Any:
    """Each row's partition tag (:func:`partition_hash` of its ``field`` & ``mask``) for an Arrow batch,
    as a ``pyarrow`` array: integers masked column-wise, strings hashed once per distinct value, other
    types row by row. A batch without the field: every row's key is None."""
    import pyarrow as pa
    import pyarrow.compute as pc
    if field not in batch.schema.names:
        return pa.repeat(partition_hash(None) & mask, batch.num_rows)
    col = batch.column(field)
    if isinstance(col, pa.ChunkedArray):
        col = col.combine_chunks()
    if pa.types.is_integer(col.type):  # partition_hash's mixing in uint64 arithmetic (it wraps)
        bits = col.cast(pa.int64()).cast(pa.uint64(), safe=False)  # two's complement, as key & _U64
        mixed = pc.shift_right(pc.multiply(bits, pa.scalar(_GOLDEN, pa.uint64())), pa.scalar(33, pa.uint64()))
        tags = pc.bit_wise_and(mixed, pa.scalar(mask, pa.uint64())).cast(pa.int64())
        return pc.fill_null(tags, partition_hash(None) & mask) if tags.null_count else tags
    if pa.types.is_string(col.type) or pa.types.is_large_string(col.type):
        coded = col.dictionary_encode()
        tags = pa.array([partition_hash(v) & mask for v in coded.dictionary.to_pylist()], pa.int64())
        return pc.fill_null(pc.take(tags, coded.indices), partition_hash(None) & mask)
    return pa.array([partition_hash(v) & mask for v in col.to_pylist()], pa.int64())
