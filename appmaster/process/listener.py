"""The DAG's STATS_LISTENER: the function the master calls with its operators' stats (at most once a
second) to ask for partition counts (:meth:`stram.master.process.master.AppMaster.poll_stats_listener`)."""

from __future__ import annotations

import logging
from typing import Any

from stram.common.imports import load_class

log = logging.getLogger("stram.master")

__all__ = ["load_listener"]


def load_listener(spec: Any) -> Any:
    """The DAG's STATS_LISTENER function, or None (a broken reference is logged, not fatal)."""
    try:
        ref = spec.attribute("STATS_LISTENER")
    except Exception:  # noqa: BLE001 - specs without the attribute
        return None
    if not ref:
        return None
    try:
        return load_class(ref)
    except Exception:  # noqa: BLE001
        log.exception("cannot load STATS_LISTENER %s; running without it", ref)
        return None
