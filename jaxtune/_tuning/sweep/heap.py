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
the last. The blocks are as large as the arena takes: 64 and 120 KiB blocks grew it 3x and
4.5x as fast as 16 KiB ones on the chip's host. The free blocks lie under that one, so glibc
keeps them for the thread's next allocations instead of giving them back to the system;
they are given back once the thread ends (or warms again, larger): an inline sweep's
thread at the sweep's end, and a sweep child's, which handles its requests on its main
thread, when the child exits (the memory counts against the child's ``memory_limit``
meanwhile). Only where glibc's malloc is the process's (glibc is the C library of the
hosts TPUs are attached to) and its memory tagging is off; elsewhere nothing is done.
"""

from __future__ import annotations

import ctypes
import functools
import os
import platform
import threading
import time
from typing import Any

__all__ = ["MIB_PER_PROGRAM", "warm"]

#: The heap :func:`warm` grows for each program a trace will hold (the first capture of
#: Tokamax's ragged_dot, 32 programs: 16 MiB each, 512 MiB).
MIB_PER_PROGRAM = 16

#: Block sizes to grow it in, largest first. A block glibc maps on its own instead (one at
#: or over its mmap threshold: 128 KiB at first, higher as the program frees mapped blocks,
#: lower where the program or ``MALLOC_MMAP_THRESHOLD_`` sets it; or any, once the arena
#: cannot grow) is given back, and the growth goes on in the next size. On the lent TPU
#: v5e's host, a fresh thread grew 512 MiB in 0.99 s in 120 KiB blocks, 1.4 s in 64 KiB
#: blocks and 4.4 s in 16 KiB blocks (``tools/tpu/probe_heap.py``, 2026-12-08).
_BLOCKS = (120 * 1024, 64 * 1024, 16 * 1024, 4 * 1024)

#: glibc's mark, in the size word just before a block, of a block mapped on its own.
_IS_MMAPPED = 0x2

_local = threading.local()


@functools.cache
def _libc() -> Any:
    """glibc, with the signatures :func:`warm` calls, where its malloc is the process's;
    ``None`` elsewhere (another C library, another allocator preloaded over glibc's, or
    glibc's memory tagging on)."""
    if platform.system() != "Linux" or platform.libc_ver()[0] != "glibc":
        return None
    if "glibc.mem.tagging" in os.environ.get("GLIBC_TUNABLES", ""):
        return None  # a block's size word has another tag than the block: not to be read
    try:
        libc, glibc = ctypes.CDLL(None), ctypes.CDLL("libc.so.6")
    except OSError:  # a static build, or a port whose C library has another name
        return None
    if (
        ctypes.cast(libc.malloc, ctypes.c_void_p).value
        != ctypes.cast(glibc.malloc, ctypes.c_void_p).value
    ):
        return None
    glibc.malloc.restype = ctypes.c_void_p
    glibc.malloc.argtypes = [ctypes.c_size_t]
    glibc.free.restype = None
    glibc.free.argtypes = [ctypes.c_void_p]
    return glibc


class _Warmth:
    """The small block that keeps this thread's warm heap, freed with it (a thread's
    locals go when the thread ends)."""

    def __init__(self, libc: Any, guard: int, mib: int) -> None:
        self.libc, self.guard, self.mib = libc, guard, mib

    def __del__(self) -> None:
        self.libc.free(self.guard)


def _grow(libc: Any, mib: int) -> list[int]:
    """Blocks from the arena, each written, until they hold more than ``mib`` MiB (the
    last one over it is the guard), in the largest of :data:`_BLOCKS` that the arena
    gives; fewer where it runs out. All freed on an interrupt, which goes on."""
    blocks: list[int] = []
    sizes = iter(_BLOCKS)
    size, held = next(sizes), 0
    try:
        while held <= mib * 1024 * 1024:
            block = libc.malloc(size)
            if not block:
                break  # what there is stays warm
            if ctypes.c_size_t.from_address(block - ctypes.sizeof(ctypes.c_size_t)).value & (
                _IS_MMAPPED
            ):
                libc.free(block)
                size = next(sizes, 0)
                if not size:
                    break
                continue
            blocks.append(block)
            ctypes.memset(block, 0, size)
            held += size
    except BaseException:
        _free(libc, blocks)
        raise
    return blocks


def _free(libc: Any, blocks: list[int]) -> None:
    while blocks:
        libc.free(blocks.pop())


def warm(mib: int) -> float:
    """Grows the calling thread's malloc heap by ``mib`` MiB, written and kept free for
    its next allocations (see the module's docstring); returns the seconds it took, 0.0
    where it had been done (as large) already or cannot be done here."""
    libc = _libc()
    held: _Warmth | None = getattr(_local, "warmth", None)
    if libc is None or mib <= 0 or (held is not None and held.mib >= mib):
        return 0.0
    start = time.perf_counter()
    blocks = _grow(libc, mib)
    if not blocks:
        return 0.0  # nothing from the arena: nothing warm
    # The last block, from the top of the heap once what was free before is used up,
    # stays allocated above the others.
    guard = blocks.pop()
    _free(libc, blocks)  # an interrupt here leaves the rest allocated until the process ends
    _local.warmth = _Warmth(libc, guard, mib)  # frees the smaller one it replaces
    return time.perf_counter() - start
