"""How fast can a thread's malloc heap be grown on the lent TPU v5e's host (issue 57)?

The sweep's ``heap`` phase (``jaxtune/_tuning/sweep/heap.py``) grew 512 MiB in 16 KiB
blocks, each written, in 4.8 s before a ``--retune``'s first capture (2026-12-07), where the
bench's own growth of 1 GiB in 64 KiB blocks had taken 3.1 s. This times ways to grow it,
each on a fresh thread kept alive (so each gets a fresh arena), in one process that has
opened the chip as a sweep has, then the committed :func:`warm` on a main thread with and
without JAX:

    python3 tools/tpu/probe_heap.py [MiB]

One JSON line per way: seconds to grow, seconds to write it again (reused pages), and
whether the way's system call was refused.
"""

from __future__ import annotations

import ctypes
import json
import mmap
import os
import subprocess
import sys
import threading
import time

MIB = int(sys.argv[1]) if len(sys.argv) > 1 and sys.argv[1].isdigit() else 512
libc = ctypes.CDLL(None, use_errno=True)
libc.malloc.restype = ctypes.c_void_p
libc.malloc.argtypes = [ctypes.c_size_t]
libc.free.argtypes = [ctypes.c_void_p]
libc.madvise.argtypes = [ctypes.c_void_p, ctypes.c_size_t, ctypes.c_int]
libc.mlock.argtypes = [ctypes.c_void_p, ctypes.c_size_t]
libc.mmap.restype = ctypes.c_void_p
libc.mmap.argtypes = [
    ctypes.c_void_p,
    ctypes.c_size_t,
    ctypes.c_int,
    ctypes.c_int,
    ctypes.c_int,
    ctypes.c_long,
]
PAGE = 4096
MADV_POPULATE_WRITE = 23


def blocks(block: int, write: bool) -> list[int]:
    out = [libc.malloc(block) for _ in range(MIB * 1024 * 1024 // block)]
    if write:
        for b in out:
            ctypes.memset(b, 0, block)
    return out


def rewrite(out: list[int], block: int) -> float:
    at = time.perf_counter()
    for b in out:
        ctypes.memset(b, 1, block)
    return time.perf_counter() - at


def way_write(block: int, top_pad: int = 0):
    def run():
        if top_pad:
            libc.mallopt(-2, top_pad)  # M_TOP_PAD
        at = time.perf_counter()
        out = blocks(block, True)
        return time.perf_counter() - at, out, block, ""

    return run


def runs(out: list[int], block: int) -> list[tuple[int, int]]:
    """The blocks' pages, merged where adjacent (the arena's heaps need not be)."""
    merged: list[list[int]] = []
    for b in sorted(out):
        lo, hi = (b + PAGE - 1) // PAGE * PAGE, (b + block) // PAGE * PAGE
        if merged and lo - merged[-1][1] <= PAGE:
            merged[-1][1] = hi
        else:
            merged.append([lo, hi])
    return [(lo, hi) for lo, hi in merged if hi > lo]


def way_advise(call: str):
    def run():
        at = time.perf_counter()
        out = blocks(16384, False)
        refused = []
        for lo, hi in runs(out, 16384):
            rc = (
                libc.madvise(lo, hi - lo, MADV_POPULATE_WRITE)
                if call == "madvise"
                else libc.mlock(lo, hi - lo)
            )
            if rc != 0:
                refused.append(ctypes.get_errno())
        note = (
            f"{call} refused {len(refused)} of {len(runs(out, 16384))} runs, errno "
            f"{sorted(set(refused))}"
            if refused
            else f"{len(runs(out, 16384))} runs"
        )
        return time.perf_counter() - at, out, 16384, note

    return run


def way_mmap(populate: bool):
    def run():
        at = time.perf_counter()
        flags = mmap.MAP_PRIVATE | mmap.MAP_ANONYMOUS | (0x8000 if populate else 0)
        size = MIB * 1024 * 1024
        base = libc.mmap(None, size, mmap.PROT_READ | mmap.PROT_WRITE, flags, -1, 0)
        if not populate:
            ctypes.memset(base, 0, size)
        return time.perf_counter() - at, [base], size, ""

    return run


WAYS = {
    "write_16k": way_write(16384),
    "write_64k": way_write(65536),
    "write_120k": way_write(120 * 1024),
    "write_16k_top_pad_64m": way_write(16384, 64 << 20),
    "madvise_populate_16k": way_advise("madvise"),
    "mlock_16k": way_advise("mlock"),
    "mmap_touch": way_mmap(False),
    "mmap_populate": way_mmap(True),
}


def in_threads() -> None:
    import jax

    jax.devices()
    jax.block_until_ready(jax.jit(lambda x: x * 2)(jax.numpy.ones(1024)))
    keep = threading.Event()
    for name, way in WAYS.items():
        result: dict = {}

        def body(way=way, result=result):
            try:
                seconds, out, size, note = way()
                result.update(
                    grow_s=round(seconds, 3), again_s=round(rewrite(out, size), 3), note=note
                )
            except Exception as e:  # a probe: say what failed, go on
                result.update(error=repr(e))
            keep.wait()

        threading.Thread(target=body, daemon=True).start()
        while not result:
            time.sleep(0.05)
        print(
            json.dumps({"way": name, "where": "thread, JAX open", "mib": MIB, **result}), flush=True
        )


def committed(with_jax: bool) -> None:
    if with_jax:
        import jax

        jax.devices()
    from jaxtune._tuning.sweep import heap

    seconds = heap.warm(MIB)
    print(
        json.dumps(
            {
                "way": "heap.warm",
                "where": "main thread" + (", JAX open" if with_jax else ""),
                "mib": MIB,
                "grow_s": round(seconds, 3),
            }
        ),
        flush=True,
    )


if __name__ == "__main__":
    if "--threads" in sys.argv:
        in_threads()
    elif "--committed" in sys.argv:
        committed("--jax" in sys.argv)
    else:
        me = [sys.executable, os.path.abspath(__file__), str(MIB)]
        for extra in (["--committed", "--jax"], ["--committed"], ["--threads"]):
            subprocess.run(me + extra, check=False)
