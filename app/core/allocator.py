"""Large buffers given back to the system when they are freed (glibc's malloc on Linux).

glibc serves an allocation above its mmap threshold (128 KiB at start) with a mapping of its own
and unmaps it when freed; but each such free raises the threshold to the size just freed (up to
32 MiB), so from then on buffers of that size come from the heap and stay in the process when
freed. The window receives every run's KV state from the engine child (10–20 MiB each) and its
resident memory grew by about 180 MiB over its first ten runs that way, never given back
(tests/ui/test_soak.py). A fixed threshold (``mallopt(M_MMAP_THRESHOLD, …)``, which also turns
the raising off) keeps every large buffer a mapping of its own.
"""

from __future__ import annotations

import ctypes
import ctypes.util
import sys

M_MMAP_THRESHOLD = -3  # glibc's <malloc.h>
THRESHOLD = 128 * 1024  # glibc's own starting value


def return_large_frees() -> bool:
    """Fix glibc's mmap threshold for this process; False where there is no glibc (macOS,
    Windows, musl), whose allocators do not keep freed large buffers this way."""
    if not sys.platform.startswith("linux"):
        return False
    try:
        libc = ctypes.CDLL(ctypes.util.find_library("c") or "libc.so.6")
        mallopt = libc.mallopt
    except (OSError, AttributeError):
        return False
    mallopt.argtypes, mallopt.restype = (ctypes.c_int, ctypes.c_int), ctypes.c_int
    return bool(mallopt(M_MMAP_THRESHOLD, THRESHOLD))
