"""Round trips of the stream codecs (pickle and Arrow IPC)."""

from __future__ import annotations

import datetime
import decimal

import pyarrow as pa
import pytest

from stram.agent.engine.codec import ArrowCodec, Codec, PickleCodec, get_codec


def test_get_codec_by_name():
    assert isinstance(get_codec("pickle"), PickleCodec)
    assert isinstance(get_codec("arrow"), ArrowCodec)
    assert get_codec("pickle").name == "pickle" and get_codec("arrow").name == "arrow"
    assert all(isinstance(get_codec(n), Codec) for n in ("pickle", "arrow"))


def test_get_codec_unknown_name_lists_known_ones():
    with pytest.raises(ValueError) as err:
        get_codec("x")
    assert str(err.value) == "unknown stream codec 'x'; known: arrow, pickle"


def test_pickle_round_trip_of_mixed_tuples():
    tuples = [
        "word", b"\x00bytes", 42, -1 << 70, 3.5, None, True,
        ("a", 1, (2.0, None)), {"key": "k", "count": 3, "total": 9}, [1, [2, [3]]],
        {1, 2}, frozenset("ab"), decimal.Decimal("1.10"), datetime.date(2024, 1, 2),
        "ünïcödé ✓" * 10, bytearray(b"ba"), "",
    ]
    codec = PickleCodec()
    data = codec.encode(tuples)
    assert isinstance(data, bytes)
    assert codec.decode(data) == tuples
    assert codec.decode(memoryview(data)) == tuples      # decodes any bytes-like
    assert codec.decode(codec.encode([])) == []


def test_pickle_is_protocol_5_of_the_whole_batch():
    data = PickleCodec().encode(["a", "b"])
    assert data[:2] == b"\x80\x05"


def _batch(n: int, start: int = 0) -> pa.RecordBatch:
    return pa.record_batch({
        "id": pa.array(range(start, start + n), pa.int64()),
        "value": pa.array([i / 3 for i in range(n)], pa.float64()),
        "name": pa.array([f"n{i:046d}" for i in range(n)], pa.string()),
    })


def test_arrow_round_trip_one_schema_is_a_plain_ipc_stream():
    batches = [_batch(100), _batch(5, 100), _batch(0, 105)]
    codec = ArrowCodec()
    data = codec.encode(batches)
    assert isinstance(data, bytes)
    out = codec.decode(data)
    assert len(out) == 3 and all(isinstance(b, pa.RecordBatch) for b in out)
    assert all(a.equals(b) for a, b in zip(batches, out))
    # any Arrow reader can read it
    assert pa.ipc.open_stream(data).read_all().num_rows == 105


def test_arrow_parts_are_the_batches_own_buffers():
    """encode_parts copies no column of big batches: its big pieces are the record batches'
    buffers, the rest small metadata, and joined they are encode's bytes (a plain IPC stream,
    mixed schemas too)."""
    batches = [_batch(5000), _batch(6000, 5000)]
    assert min(b.get_total_buffer_size() for b in batches) > ArrowCodec.COPY_BELOW
    codec = ArrowCodec()
    parts = codec.encode_parts(batches)
    owned = {b.address for batch in batches for col in batch.columns for b in col.buffers() if b is not None}
    big = [p for p in parts if len(p) >= 1024]
    assert big and all(isinstance(p, pa.Buffer) and p.address in owned for p in big)
    assert all(isinstance(p, bytes) for p in parts if len(p) < 1024)
    assert b"".join(parts) == codec.encode(batches)
    assert pa.ipc.open_stream(b"".join(parts)).read_all().num_rows == 11000
    mixed = [_batch(1500), pa.record_batch({"w": ["x"] * 2000}), _batch(2, 1500)]
    out = codec.decode(b"".join(codec.encode_parts(mixed)))
    assert all(a.equals(b) for a, b in zip(mixed, out)) and len(out) == 3
    assert PickleCodec().encode_parts(["a"]) == (PickleCodec().encode(["a"]),)


def test_arrow_small_runs_are_copied_by_arrow_into_the_same_stream():
    """A run under COPY_BELOW bytes is one Arrow-made buffer per batch between the schema message
    and the end of stream: the very bytes of the IPC writer's stream (read back by any reader);
    a schema with a dictionary, which that form cannot carry, goes through the writer."""
    codec = ArrowCodec()
    batches = [_batch(100), _batch(50, 100)]
    assert sum(b.get_total_buffer_size() for b in batches) < ArrowCodec.COPY_BELOW
    parts = codec.encode_parts(batches)
    assert len(parts) == 4 and all(isinstance(p, pa.Buffer) for p in parts[1:3])
    assert b"".join(parts) == b"".join(codec._one_stream(batches).pieces)
    assert pa.ipc.open_stream(b"".join(parts)).read_all().equals(pa.Table.from_batches(batches))
    tagged = _batch(3).replace_schema_metadata({"k": "v"})
    out = codec.decode(codec.encode([batches[0], tagged, batches[1]]))
    assert [b.schema.metadata for b in out] == [None, {b"k": b"v"}, None]
    assert all(a.equals(b) for a, b in zip([batches[0], tagged, batches[1]], out))
    coded = pa.record_batch({"k": pa.array(["a", "b", "a"]).dictionary_encode(),
                             "m": pa.array([[("x", "y")], [], [("x", "z")]],
                                           pa.map_(pa.string(), pa.dictionary(pa.int8(), pa.string())))})
    for run in ([coded, coded], [batches[0], coded]):
        assert all(a.equals(b) for a, b in zip(run, codec.decode(codec.encode(run))))


def test_arrow_parts_copy_a_small_slice_of_a_big_allocation():
    """A batch sliced out of a big one, or decoded from a received frame and passed on, would keep
    the whole allocation alive by reference: its pieces are copied; a batch of its own is not."""
    def kept(parts: tuple) -> list[tuple[int, int]]:
        """(size, size of the allocation kept alive) of each piece kept by reference."""
        out = []
        for p in parts:
            if isinstance(p, pa.Buffer):
                root = p
                while root.parent is not None:
                    root = root.parent
                out.append((p.size, root.size))
        return out

    codec = ArrowCodec()
    big = _batch(100_000)
    small = big.slice(500, 1000)
    parts = codec.encode_parts([small])
    assert all(alloc <= 2 * size for size, alloc in kept(parts))
    assert sum(map(len, parts)) < 200_000  # the slice's bytes, not the big batch's
    assert codec.decode(b"".join(parts))[0].equals(small)
    passed_on = codec.decode(memoryview(bytearray(codec.encode([big]))))[0].slice(0, 1000)
    assert all(alloc <= 2 * size for size, alloc in kept(codec.encode_parts([passed_on])))
    assert kept(codec.encode_parts([big]))  # a batch of its own: by reference


def test_arrow_round_trip_mixed_schemas_keeps_order():
    other = pa.record_batch({"word": ["a", "b"]})
    batches = [_batch(3), other, other, _batch(2, 3)]
    codec = ArrowCodec()
    out = codec.decode(codec.encode(batches))
    assert [b.schema for b in out] == [b.schema for b in batches]
    assert all(a.equals(b) for a, b in zip(batches, out))


def test_arrow_accepts_tables_and_empty_lists():
    codec = ArrowCodec()
    table = pa.Table.from_batches([_batch(4), _batch(4, 4)])
    out = codec.decode(codec.encode([table]))
    assert pa.Table.from_batches(out).equals(table)
    assert codec.encode([]) == b"" and codec.decode(b"") == []


def test_arrow_rejects_non_batches():
    with pytest.raises(TypeError, match="RecordBatch"):
        ArrowCodec().encode([{"a": 1}])


def test_arrow_truncated_mixed_data_is_an_error():
    codec = ArrowCodec()
    data = codec.encode([_batch(3), pa.record_batch({"w": ["x"]})])
    with pytest.raises((ValueError, pa.ArrowInvalid)):
        codec.decode(data[:-20])
