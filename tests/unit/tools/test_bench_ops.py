"""The benchmarks' source (bench/bench_ops.py): Arrow batches in new memory each, or from a ring of distinct ones."""

from __future__ import annotations

from bench.bench_ops import BlastSource


def _source(**props) -> BlastSource:
    src = BlastSource()
    for name, value in {"arrow": True, "batch": 10, "size": 16, **props}.items():
        setattr(src, name, value)
    src.setup(None)
    return src


def _data_address(batch) -> int:
    return batch.column(0).buffers()[2].address


def test_a_fresh_batch_is_the_same_rows_in_new_memory_each_time():
    src = _source()
    first, second = src._fresh(), src._fresh()
    assert first.equals(src._payload) and second.equals(src._payload)
    assert len({_data_address(b) for b in (first, second, src._payload)}) == 3


def test_a_ring_sends_its_distinct_batches_in_turn():
    src = _source(ring=3)
    seen = []
    for _ in range(6):
        seen.append(src._fresh())
        src.sent += src.batch
    assert all(b.equals(src._payload) for b in seen)
    addresses = [_data_address(b) for b in seen]
    assert len(set(addresses)) == 3 and addresses[:3] == addresses[3:]
    assert _data_address(src._payload) not in addresses
