"""FlowError: a mistake in a flow written with :mod:`stram.flow`, reported as ``error: ...`` by the CLI."""

from __future__ import annotations

from stram.common.errors import UserError

__all__ = ["FlowError"]


class FlowError(UserError, ValueError):
    """A flow that cannot compile: the message names the step and says how to fix it.

    A :class:`ValueError` too, so that callers building flows in plain Python
    can catch the usual type.
    """
