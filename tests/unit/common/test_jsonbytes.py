"""jsonbytes.loads reads what json.loads reads, integers of any size exactly, at orjson's speed where it can."""

from __future__ import annotations

import json

import pytest

from stram.common import jsonbytes


@pytest.mark.parametrize("value", [0, -1, 2**63 - 1, -(2**63), 2**64 - 1, 2**64, -(2**63) - 1, -(10**18) - 7,
                                   10**30, -(10**30), 7714766736934830088])
def test_integers_of_any_size_are_read_exactly(value):
    for text in (b"%d" % value, b'{"a": [%d, 1.5, "x"]}' % value, b"[%d]" % value):
        got = jsonbytes.loads(text)
        assert got == json.loads(text)
        found = got if isinstance(got, int) else (got["a"][0] if isinstance(got, dict) else got[0])
        assert type(found) is int and found == value


def test_what_orjson_refuses_is_read_by_the_standard_decoder_and_garbage_is_a_value_error():
    assert jsonbytes.loads(b'{"x": NaN}')["x"] != jsonbytes.loads(b'{"x": NaN}')["x"]
    assert jsonbytes.loads(b'"-12345678901234567890 in a string"') == "-12345678901234567890 in a string"
    with pytest.raises(ValueError):
        jsonbytes.loads(b'{"x": ')
