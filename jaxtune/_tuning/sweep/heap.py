"""A warm malloc heap for the thread that stops a device timer's traces.

Stopping a trace on a TPU, libtpu copies the HLO of each program that ran in it and builds
its module (for its utilization counters), which allocates much memory in small pieces.
The first stop of a thread grows that thread's malloc arena as it goes, and on the lent TPU
v5e's host (a sandboxed VM) that growth, not the work, took most of the stop: the first
capture of a sweep of Tokamax's ragged_dot (32 programs) stopped in 10.5-11.1 s, 8 s of it
inside ``malloc``, where the next captures of as many programs stopped in 1.1-1.7 s
(native stacks sampled in the stop, ``tools/tpu/native_symbols.py``, 2026-12-07). With
the arena grown and written beforehand, 1 GiB in 3.1 s, the first stop took 1.7 s. Grown
beside twelve compiling threads, whose page faults it waits behind, 512 MiB took 11.5 s:
:meth:`~.measure.Stopwatch.ready` says when it pays.

:func:`warm` does that on the calling thread: allocates the memory in blocks below glibc's
mmap threshold (so they come from the thread's arena), writes them, and frees all but
the last. The free blocks lie under that one, so glibc keeps them for the thread's next
allocations instead of giving them back to the system; they are given back once the
thread ends (or warms again, larger): an inline sweep's thread at the sweep's end, and a
sweep child's, which handles its requests on its main thread, when the child exits (the
memory counts against the child's ``memory_limit`` meanwhile). Only with glibc, the C
library of the hosts TPUs are attached to; elsewhere nothing is done.
"""

from __future__ import annotations

import ctypes
import functools
import platform
import threading
import time
from typing import Any

__all__ = ["MIB_PER_PROGRAM", "warm"]

#: The heap :func:`warm` grows for each program a trace will hold (the first capture of
#: Tokamax's ragged_dot, 32 programs: 16 MiB each, 512 MiB).
MIB_PER_PROGRAM = 16

#: Blocks of this size come from the thread's arena: glibc's mmap threshold starts at 128
#: KiB and only grows (a threshold set lower, ``MALLOC_MMAP_THRESHOLD_``, is rarely
#: below this).
_BLOCK = 16 * 1024

_local = threading.local()


@functools.cache
def _libc() -> Any:
    """glibc, with the signatures :func:`warm` calls; ``None`` elsewhere."""
    if platform.system() != "Linux" or platform.libc_ver()[0] != "glibc":
        return None
    libc = ctypes.CDLL(None)  # the process's own malloc (an allocator preloaded over glibc's)
    libc.malloc.restype = ctypes.c_void_p
    libc.malloc.argtypes = [ctypes.c_size_t]
    libc.free.restype = None
    libc.free.argtypes = [ctypes.c_void_p]
    return libc


class _Warmth:
    """The small block that keeps this thread's warm heap, freed with it (a thread's
    locals go when the thread ends)."""

    def __init__(self, libc: Any, guard: int, mib: int) -> None:
        self.libc, self.guard, self.mib = libc, guard, mib

    def __del__(self) -> None:
        self.libc.free(self.guard)


def warm(mib: int) -> float:
    """Grows the calling thread's malloc heap by ``mib`` MiB, written and kept free for
    its next allocations (see the module's docstring); returns the seconds it took, 0.0
    where it had been done (as large) already or cannot be done here."""
    libc = _libc()
    held: _Warmth | None = getattr(_local, "warmth", None)
    if libc is None or mib <= 0 or (held is not None and held.mib >= mib):
        return 0.0
    start = time.perf_counter()
    blocks = []
    try:
        # One block more than asked: the last, from the top of the heap once what was free
        # before is used up, stays allocated above the others.
        for _ in range(mib * 1024 * 1024 // _BLOCK + 1):
            block = libc.malloc(_BLOCK)
            if not block:
                break  # what there is stays warm
            ctypes.memset(block, 0, _BLOCK)
            blocks.append(block)
        guard = blocks.pop() if blocks else None
    finally:
        for block in blocks:
            libc.free(block)
    if guard:
        _local.warmth = _Warmth(libc, guard, mib)  # frees the smaller one it replaces
    return time.perf_counter() - start
