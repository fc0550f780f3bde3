"""The container's heaps: keep the memory that big frames come and go in (glibc's ``mallopt``), and
collect cyclic garbage less often (:func:`tune_gc`).

A buffer-server stream allocates and frees a frame of about a megabyte for every
batch it publishes or receives (``stram.agent.engine.streams.FRAME_TARGET_BYTES``). glibc's
defaults serve such a block from a fresh ``mmap`` until the first one is freed,
and give the top of the heap back to the kernel as soon as 128 KiB of it is
free, so the next frame faults in and zeroes new pages all over again: with
4 KiB strings, the publisher spent more time on that than on pickling. Fixed
thresholds keep frames of up to :data:`MMAP_THRESHOLD` in the heap and keep up
to :data:`TRIM_THRESHOLD` of freed heap for the next ones (docs/performance.md
gives the gain). The peak memory is unchanged; freed memory goes back to the kernel once more than
:data:`TRIM_THRESHOLD` of it lies at the top of the heap.

Only glibc has these knobs: elsewhere (musl, macOS, a malloc preloaded in its
place) :func:`tune` does nothing.
"""

from __future__ import annotations

import gc
import logging

log = logging.getLogger("stram.agent.engine.heap")

# mallopt parameters (glibc's malloc.h)
_M_TRIM_THRESHOLD = -1
_M_MMAP_THRESHOLD = -3

#: Blocks up to this size come from the heap, not from an mmap of their own (glibc's dynamic
#: threshold tops out here too, but only after a block that size has been freed).
MMAP_THRESHOLD = 32 << 20
#: Freed memory at the top of the heap kept for the next allocations.
TRIM_THRESHOLD = 64 << 20


def tune() -> bool:
    """Set the thresholds above in this process; whether the C library took them."""
    try:
        import ctypes

        mallopt = ctypes.CDLL(None).mallopt  # the process's own symbols: the C library's malloc
    except (OSError, AttributeError):
        return False
    mallopt.argtypes, mallopt.restype = [ctypes.c_int, ctypes.c_int], ctypes.c_int
    taken = bool(mallopt(_M_MMAP_THRESHOLD, MMAP_THRESHOLD)) and bool(mallopt(_M_TRIM_THRESHOLD, TRIM_THRESHOLD))
    if not taken:
        log.debug("the C library refused the heap thresholds; its defaults stay")
    return taken


#: Allocations between young collections of the cyclic garbage collector in a container (Python's
#: default: 700), and the collections of each generation between collections of the next.
GC_THRESHOLDS = (50_000, 20, 100)


def tune_gc() -> None:
    """Collect cyclic garbage less often in this process (a container's).

    Operators keep state of many small objects (a join's records, a window's accumulators): with
    Python's defaults the collector scanned them again and again while they grew, a cost paid on
    every allocation of a record (docs/performance.md has the figures).
    Streaming code makes little cyclic garbage; reference counting frees the rest at once.
    """
    gc.set_threshold(*GC_THRESHOLDS)
