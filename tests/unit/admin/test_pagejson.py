"""The operators page written by OperatorPage is the JSON that operator_rows gives, for awkward values too."""

from __future__ import annotations

import json
import random
from types import SimpleNamespace

import orjson
import pytest

from stram.common.watermarks import IDLE, MAX_WATERMARK, MIN_WATERMARK
from stram.master.admin.pagejson import OperatorPage
from stram.master.core.reports import operator_rows, watermark_view


def _op(i: int, kind: str = "GENERIC", label: str | None = None) -> SimpleNamespace:
    return SimpleNamespace(id=i, name=f"o{i % 7}", label=label or f"o{i % 7}[{i}]", kind=kind, partition_index=i % 5)


def _copy(op, rng: random.Random) -> tuple:
    windows = rng.choice([None, (0.0, 0, 0, None), (rng.random() * 1e6, rng.randrange(1 << 40), 3,
                                                       rng.choice([None, {}, {"lag": 1.5, "ok": True, "n": [1, 2]},
                                                                   {"z": "é\n\"quoted\"", "a": None}]))])
    error = rng.choice(["", None, "Traceback...\n  File x\nValueError: bad \"input\" \u2603\n\n"])
    return (op, rng.choice(["ACTIVE", "PENDING_DEPLOY", "FAILED"]), rng.choice([0, (1 << 63) - 1, 7714766736934830088]),
            rng.choice([0, -1, 123]), rng.choice([None, "container_000001", 'odd "id"']), rng.randrange(5), error,
            rng.random() < 0.5, rng.random() < 0.2, windows,
            (rng.randrange(1 << 50), rng.randrange(1 << 50), rng.randrange(100), rng.choice([0, 450_000, 10**15])),
            watermark_view(rng.choice([None, IDLE, MIN_WATERMARK, MAX_WATERMARK, 0, -5, 1_795_472_418_379]),
                           1_795_472_420_000))


def _page(page: OperatorPage, copies: list[tuple]) -> list:
    return json.loads(b"[" + page.rows(copies) + b"]")


@pytest.mark.parametrize("seed", range(20))
def test_rows_equal_operator_rows_encoded_by_orjson(seed):
    rng = random.Random(seed)
    ops = [_op(i, rng.choice(["INPUT", "GENERIC", "UNIFIER"])) for i in range(60)]
    copies = [_copy(op, rng) for op in ops]
    page = OperatorPage()
    want = json.loads(orjson.dumps(operator_rows(copies), option=orjson.OPT_SORT_KEYS))
    assert _page(page, copies) == want
    assert _page(page, copies) == want  # from the kept fixed fields
    # the keys in orjson's order too: the same text but for how floats are spelled
    assert [list(row) for row in _page(page, copies)] == [sorted(row) for row in want]


def test_an_operator_planned_anew_under_its_id_is_written_with_its_new_fields():
    rng = random.Random(1)
    page = OperatorPage()
    old = _op(3, label="first[0]")
    assert _page(page, [_copy(old, rng)])[0]["label"] == "first[0]"
    new = _op(3, kind="UNIFIER", label="second#unifier")
    (row,) = _page(page, [_copy(new, rng)])
    assert (row["label"], row["kind"], row["partition"]) == ("second#unifier", "UNIFIER", None)


def test_a_value_orjson_refuses_raises_type_error_for_the_standard_encoder():
    rng = random.Random(2)
    op = _op(1)
    copy = list(_copy(op, rng))
    copy[9] = (1.0, 1, 1, {"huge": 1 << 70})
    with pytest.raises(TypeError):
        OperatorPage().rows([tuple(copy)])


def test_a_rate_that_is_not_finite_is_null_as_orjson_writes_it():
    rng = random.Random(3)
    copy = list(_copy(_op(1), rng))
    copy[9] = (float("inf"), 1, 1, None)
    (row,) = _page(OperatorPage(), [tuple(copy)])
    assert row["tuples_per_sec"] is None
    assert OperatorPage().rows([]) == b""
