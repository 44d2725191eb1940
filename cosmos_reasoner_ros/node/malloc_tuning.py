"""glibc malloc settings for a process that allocates and frees camera-sized arrays all day.

glibc serves allocations above M_MMAP_THRESHOLD with mmap and returns them to the kernel when freed, but by
default it raises that threshold each time such a block is freed (up to 32 MiB): after the first frames, every
frame-sized array (a 640x480 RGB frame is 900 kB) comes from the heap arenas instead, where freed frames stay
mapped, fragmented across one arena per thread. Fixing the threshold keeps frames out of the arenas
(measured in bench/soak.py). A no-op where glibc is absent.
"""

from __future__ import annotations

import ctypes
import ctypes.util

__all__ = ["tune_malloc"]

_M_TRIM_THRESHOLD = -1
_M_MMAP_THRESHOLD = -3
_M_ARENA_MAX = -8


def tune_malloc(mmap_threshold: int = 256 * 1024, arena_max: int = 4) -> bool:
    """Call once at start, before threads exist. True when glibc took the settings."""
    name = ctypes.util.find_library("c")
    if not name:
        return False
    try:
        libc = ctypes.CDLL(name)
        mallopt = libc.mallopt
    except (OSError, AttributeError):
        return False
    mallopt.argtypes, mallopt.restype = [ctypes.c_int, ctypes.c_int], ctypes.c_int
    ok = bool(mallopt(_M_MMAP_THRESHOLD, mmap_threshold))
    ok = bool(mallopt(_M_TRIM_THRESHOLD, 2 * mmap_threshold)) and ok
    return bool(mallopt(_M_ARENA_MAX, arena_max)) and ok
