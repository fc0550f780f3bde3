"""A stream is partitioned by one key: partitioned readers asking for different keys are refused."""

from __future__ import annotations

import pytest

from stram.master.spec import AppSpec, SpecError

SPEC = """
name: keys
operators:
  src: {{class: stram.operators.io:JsonLinesReader, properties: {{path: in.jsonl, timestamp_field: ts}}}}
  a: {{class: stram.operators.window:WindowedAggregate, partitions: 2,
      properties: {{key_field: user, window: {{kind: tumbling, size_ms: 1000}}}}}}
  b: {{class: stram.operators.window:WindowedAggregate, partitions: {b_parts},
      properties: {{key_field: {b_key}, window: {{kind: tumbling, size_ms: 1000}}}}}}
streams:
  s: {{from: src.output, to: [a.input, b.input]}}
"""


def test_two_partitioned_readers_with_different_keys_are_refused():
    with pytest.raises(SpecError) as err:
        AppSpec.from_yaml(SPEC.format(b_parts=2, b_key="page"), "keys.yaml")
    text = str(err.value)
    assert "streams.s" in text and "'a' by field 'user'" in text and "'b' by field 'page'" in text


@pytest.mark.parametrize("b_parts, b_key", [(2, "user"), (1, "page")])
def test_one_key_or_an_unpartitioned_reader_is_fine(b_parts, b_key):
    spec = AppSpec.from_yaml(SPEC.format(b_parts=b_parts, b_key=b_key), "keys.yaml")
    assert spec.operators["b"].partitions == b_parts
