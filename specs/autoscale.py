"""Example stats listener: give the word counter more partitions when it gets busy.

Named in a spec as ``STATS_LISTENER: specs.autoscale:scale_count`` (see
``specs/autoscale_wordcount.yaml``). About once a second the master calls
``scale_count(stats)`` with a read-only mapping ``{operator name:
stram.master.core.scaling.OperatorStats}`` (partitions, partitions running, tuples per
second in and out, latest window) and applies the partition counts it returns
(``{operator: count}``; ``None`` changes nothing) the way ``stram scale`` does.
A request the master cannot carry out yet (no common checkpoint, partitions
still deploying) is logged and asked again a second later.

This one only ever scales up, so the short lull after a repartitioning (new
partitions start with no history) never makes it flap.
"""

from __future__ import annotations

import math
import os
from typing import Any, Mapping

#: The operator this listener scales.
OPERATOR = "count"
#: Words per second one partition of the counter should handle.
WORDS_PER_PARTITION = float(os.environ.get("STRAM_AUTOSCALE_WORDS_PER_PARTITION", "1500"))
#: Never more partitions than this.
MAX_PARTITIONS = int(os.environ.get("STRAM_AUTOSCALE_MAX_PARTITIONS", "4"))


def scale_count(stats: Mapping[str, Any]) -> dict[str, int] | None:
    """``{"count": n}`` when the counter's input rate needs more partitions than it has."""
    op = stats.get(OPERATOR)
    if op is None or op.active < op.partitions:
        return None  # gone, or still being (re)deployed: its rates mean nothing yet
    wanted = min(MAX_PARTITIONS, math.ceil(op.input_tuples_per_sec / WORDS_PER_PARTITION))
    if wanted > op.partitions:
        return {OPERATOR: wanted}
    return None
