"""The master's GIL switch interval: short while containers connect at scale, the interpreter's own otherwise."""

import pytest

from stram.master.process.housekeeping import SWITCH_CONNECTING, SWITCH_MIN_CONTAINERS, switch_interval

DEFAULT = 0.005


@pytest.mark.parametrize("live, streams, want", [
    (SWITCH_MIN_CONTAINERS, 0, SWITCH_CONNECTING),                              # start-up
    (2000, 1999, SWITCH_CONNECTING),                                            # one still connecting
    (2000, 2000, DEFAULT),                                                      # every one connected
    (2000, 2003, DEFAULT),                                                      # replaced ones' streams not yet ended
    (SWITCH_MIN_CONTAINERS - 1, 0, DEFAULT),                                    # small: never
    (0, 0, DEFAULT),
])
def test_switch_interval(live, streams, want):
    assert switch_interval(live, streams, DEFAULT) == want


def test_connecting_is_shorter_than_cpythons_default():
    assert SWITCH_CONNECTING < DEFAULT
