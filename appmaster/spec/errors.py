"""SpecError: the one error a spec that cannot run raises, naming its file, key path and fix."""

from __future__ import annotations

from typing import Any

from stram.common.errors import UserError

__all__ = ["SpecError"]


class SpecError(UserError, ValueError):
    """A spec that cannot run: where (file and key path) and why (with how to fix it).

    Parameters
    ----------
    source:
        The spec's file, or ``<string>``/``<dict>``.
    key_path:
        Dotted path of the offending key (``operators.split.partitions``), or
        ``-D <key>`` for a bad override, or ``""`` for whole-file problems.
    reason:
        What is wrong and how to fix it.
    """

    def __init__(self, source: str, key_path: str, reason: str) -> None:
        self.source = source
        self.key_path = key_path
        self.reason = reason
        super().__init__(str(self))

    def __str__(self) -> str:
        if self.key_path:
            return f"{self.source}: {self.key_path}: {self.reason}"
        return f"{self.source}: {self.reason}"

    def __reduce__(self) -> tuple[Any, ...]:
        return (type(self), (self.source, self.key_path, self.reason))
