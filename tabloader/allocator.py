"""Keeping freed memory while partitions are processed, so that glibc does not hand it back to
the system after every partition and fault it in again for the next one.

Each partition allocates its columns afresh (1-4 MB arrays, tens of MB per partition). glibc
maps blocks above its mmap threshold (128 KB at first) on their own and unmaps them when
freed, and it returns the free top of its heaps to the system as soon as it exceeds its trim
threshold; both thresholds adapt upwards only to the largest block freed so far (a few MB),
while a partition frees tens of MB. So every partition's arrays came back as new pages: page
faults were a fifth of the CPU time of a Criteo workflow, and more than half the time of its
continuous chain (FillMissing >> Clip >> LogOp >> Normalize: 85 ms per partition, 28 ms
without the faults).

:func:`retained_freed_memory` sets both thresholds where glibc's adaptation stops (blocks up
to 32 MB come from the heaps, up to 64 MB of free heap is kept), once per process, and when
the last active block ends hands the free memory back at once (``malloc_trim``).

Nothing changes where glibc is not the allocator, where the user tuned it (``MALLOC_*``
variables or ``GLIBC_TUNABLES`` with ``glibc.malloc``), or with ``TABLOADER_MALLOC_TUNING=0``.

Example:
    >>> import numpy as np
    >>> with retained_freed_memory():
    ...     total = sum(float(np.ones(1 << 20).sum()) for _ in range(3))
    >>> total
    3145728.0
"""

from __future__ import annotations

import contextlib
import ctypes
import functools
import os
import sys
import threading
from typing import Any, Iterator

_M_TRIM_THRESHOLD = -1  # mallopt parameters, from glibc's malloc.h
_M_MMAP_THRESHOLD = -3

MMAP_THRESHOLD = 32 << 20  # glibc's DEFAULT_MMAP_THRESHOLD_MAX on 64-bit systems
TRIM_THRESHOLD = 2 * MMAP_THRESHOLD  # where glibc's adaptive trim threshold stops with it

_USER_SETTINGS = ("MALLOC_TRIM_THRESHOLD_", "MALLOC_MMAP_THRESHOLD_", "MALLOC_TOP_PAD_", "MALLOC_ARENA_MAX")

_lock = threading.Lock()
_active = 0
_tuned = False


def tuning_enabled() -> bool:
    """True when tabloader may tune glibc's allocator: glibc is the process's allocator, the
    user has not tuned it, and ``TABLOADER_MALLOC_TUNING`` is not ``0``.

    Example:
        >>> isinstance(tuning_enabled(), bool)
        True
    """
    if os.environ.get("TABLOADER_MALLOC_TUNING", "1") == "0":
        return False
    if any(name in os.environ for name in _USER_SETTINGS) or "glibc.malloc" in os.environ.get("GLIBC_TUNABLES", ""):
        return False
    return glibc_library() is not None


@functools.cache
def glibc_library() -> Any:
    """The process's C library when it is glibc (with ``mallopt`` and ``malloc_trim``), else None."""
    if not sys.platform.startswith("linux"):
        return None
    try:
        libc = ctypes.CDLL(None)
    except OSError:
        return None
    if not all(hasattr(libc, name) for name in ("gnu_get_libc_version", "mallopt", "malloc_trim")):
        return None  # musl and other C libraries
    return libc


@contextlib.contextmanager
def retained_freed_memory() -> Iterator[None]:
    """Keep freed memory for reuse inside the block (see the module's docstring); blocks may
    nest and run in several threads: the memory is handed back when the last one ends."""
    global _active, _tuned
    libc = glibc_library() if tuning_enabled() else None
    if libc is None:
        yield
        return
    with _lock:
        if not _tuned:
            libc.mallopt(_M_MMAP_THRESHOLD, MMAP_THRESHOLD)
            libc.mallopt(_M_TRIM_THRESHOLD, TRIM_THRESHOLD)
            _tuned = True
        _active += 1
    try:
        yield
    finally:
        with _lock:
            _active -= 1
            if _active == 0:
                libc.malloc_trim(0)


def hand_back_freed_memory() -> None:
    """Give the memory glibc holds freed back to the system now (``malloc_trim``), unless a
    :func:`retained_freed_memory` block is keeping it for reuse or tuning is off: after a large
    one-off structure is gone (the footers of thousands of files)."""
    libc = glibc_library() if tuning_enabled() else None
    if libc is None:
        return
    with _lock:
        if _active == 0:
            libc.malloc_trim(0)
