"""What a test does when a real server or tool it needs cannot be had: skip, or fail under CI.

A CI run (``CI=true``) must prove the real paths, so there the test fails with the reason.
"""

from __future__ import annotations

import os
from typing import NoReturn

import pytest


def missing(need: str, reason: str) -> NoReturn:
    """Skip the calling test for want of ``need`` (saying ``reason``); with ``CI=true`` fail it."""
    if os.environ.get("CI", "").lower() in ("1", "true", "yes"):
        pytest.fail(f"{need} is needed and CI=true: {reason}", pytrace=False)
    pytest.skip(f"{need} is missing: {reason}")
