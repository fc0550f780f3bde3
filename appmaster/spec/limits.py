"""The size limits of an application, in one place: partitions per operator and name lengths.

The spec checks (:mod:`stram.master.spec.build`) and ``stram scale``
(:mod:`stram.master.core.scaling`) both read them; README's spec section documents them.
"""

from __future__ import annotations

__all__ = ["MAX_PARTITIONS", "MAX_NAME_LENGTH"]

#: The most partitions one logical operator may have (``partitions: N`` and ``stram scale``).
MAX_PARTITIONS = 256
#: The longest name of an application, an operator or a stream, in characters.
MAX_NAME_LENGTH = 128
