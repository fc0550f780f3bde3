"""stram.agent.engine.heap: an 8 MB block comes from the heap once the thresholds are set (glibc); the
cyclic collector's thresholds."""

from __future__ import annotations

import platform
import subprocess
import sys

import pytest

# allocates and frees an 8 MB block, then counts the blocks glibc serves from mmaps of their own
# while a second one is alive (mallinfo2().hblks)
PROBE = """
import ctypes, sys
sys.path.insert(0, {root!r})

class MallInfo2(ctypes.Structure):
    _fields_ = [(name, ctypes.c_size_t) for name in
                ("arena", "ordblks", "smblks", "hblks", "hblkhd", "usmblks", "fsmblks", "uordblks",
                 "fordblks", "keepcost")]

libc = ctypes.CDLL(None)
libc.mallinfo2.restype = MallInfo2
if {tune}:
    from stram.agent.engine import heap
    assert heap.tune()
before = libc.mallinfo2().hblks
block = bytearray(8 << 20)
print(libc.mallinfo2().hblks - before)
"""


def _mmapped_blocks(tune: bool) -> int:
    from conftest import ROOT
    root = str(ROOT)
    out = subprocess.run([sys.executable, "-c", PROBE.format(root=root, tune=tune)],
                         capture_output=True, text=True, timeout=60)
    assert out.returncode == 0, out.stderr
    return int(out.stdout)


@pytest.mark.skipif(platform.libc_ver()[0] != "glibc", reason="mallopt's thresholds are glibc's")
def test_an_8_mb_block_comes_from_the_heap_once_tuned():
    assert _mmapped_blocks(tune=False) == 1  # glibc's default: an mmap of its own
    assert _mmapped_blocks(tune=True) == 0


def test_tune_gc_makes_collections_rarer():
    import gc

    from stram.agent.engine import heap
    before = gc.get_threshold()
    try:
        heap.tune_gc()
        assert gc.get_threshold() == heap.GC_THRESHOLDS
        assert heap.GC_THRESHOLDS[0] > before[0] and heap.GC_THRESHOLDS[2] > before[2]
    finally:
        gc.set_threshold(*before)
