"""The sweep thread's malloc heap, grown ahead of a device trace's first stop
(jaxtune._tuning.sweep.heap): the next allocations of that thread reuse it instead of
faulting in new pages, and it is done once per thread."""

from __future__ import annotations

import ctypes
import os
import subprocess
import sys
import threading

import pytest

from jaxtune._tuning.sweep import heap
from jaxtune._tuning.sweep.timers import ProfilerTimer


def _faults() -> int:
    """The calling thread's minor page faults so far (Linux)."""
    with open("/proc/thread-self/stat") as f:
        return int(f.read().rpartition(")")[2].split()[7])


def _in_a_thread(fn):
    got = []
    thread = threading.Thread(target=lambda: got.append(fn()))
    thread.start()
    thread.join()
    return got[0]


def _allocate_and_write(mib: int) -> int:
    """Page faults of ``mib`` MiB allocated in 512-byte blocks, each written, on this
    thread (as a trace's stop allocates: many small pieces); the blocks are freed after."""
    libc = heap._libc()
    before = _faults()
    blocks = [libc.malloc(512) for _ in range(mib * 2048)]
    for block in blocks:
        ctypes.memset(block, 1, 512)
    faults = _faults() - before
    for block in blocks:
        libc.free(block)
    return faults


def test_a_warm_thread_allocates_without_faulting_in_new_pages():
    if heap._libc() is None:  # not glibc: nothing is done, and it says so
        assert heap.warm(64) == 0.0
        return
    cold = _in_a_thread(lambda: _allocate_and_write(48))

    def warmed():
        assert heap.warm(64) > 0.0
        return _allocate_and_write(48)

    warm = _in_a_thread(warmed)
    # 48 MiB are about 12,000 pages of 4 KiB: a cold thread faults each in.
    assert cold > 8000
    assert warm < cold / 4, (warm, cold)


def test_a_thread_warms_once_and_again_only_for_more():
    if heap._libc() is None:
        assert heap.warm(8) == 0.0
        return

    def twice():
        return heap.warm(8), heap.warm(8), heap.warm(4), heap.warm(16)

    first, again, smaller, larger = _in_a_thread(twice)
    assert first > 0.0 and larger > 0.0
    assert again == 0.0 and smaller == 0.0
    assert _in_a_thread(lambda: heap.warm(0)) == 0.0


def test_the_profiler_timer_warms_nothing_off_a_tpu(monkeypatch):
    warmed = []
    monkeypatch.setattr(heap, "warm", warmed.append)
    assert ProfilerTimer().ready(32) == 0.0  # CPU
    assert warmed == []
    monkeypatch.setattr("jax.default_backend", lambda: "tpu")
    monkeypatch.setattr(heap, "warm", lambda mib: warmed.append(mib) or 0.25)
    assert ProfilerTimer().ready(32) == 0.25
    assert warmed == [32 * heap.MIB_PER_PROGRAM]


def test_a_warm_grows_in_the_largest_blocks_the_arena_takes(monkeypatch):
    if heap._libc() is None:
        return
    sizes = []
    grow = heap._grow
    monkeypatch.setattr(heap, "_grow", lambda *a: sizes.append(a[2]) or grow(*a))
    assert _in_a_thread(lambda: heap.warm(32)) > 0.0
    assert sizes == [64 * 1024]  # glibc's default mmap threshold is 128 KiB


_UNDER_A_LOWER_THRESHOLD = """
import sys, threading
sys.path[:0] = [{tests!r}, {root!r}]
from test_heap import _allocate_and_write, _in_a_thread
from jaxtune._tuning.sweep import heap

sizes = []
grow = heap._grow
def noted(libc, mib, size):
    got = grow(libc, mib, size)
    sizes.append((size, got is not None))
    return got
heap._grow = noted
cold = _in_a_thread(lambda: _allocate_and_write(48))
def warmed():
    assert heap.warm(64) > 0.0
    return _allocate_and_write(48)
warm = _in_a_thread(warmed)
print(sizes == [(65536, False), (16384, True)], cold, warm)
"""


@pytest.mark.child
def test_a_warm_under_a_lowered_mmap_threshold_takes_smaller_blocks(tmp_path):
    """Blocks glibc maps on their own warm nothing: under ``MALLOC_MMAP_THRESHOLD_`` of
    32 KiB, 64 KiB blocks are given back as soon as one is mapped, and 16 KiB ones warm."""
    if heap._libc() is None:
        return
    import pathlib

    tests = pathlib.Path(__file__).parent
    script = _UNDER_A_LOWER_THRESHOLD.format(tests=str(tests), root=str(tests.parent))
    env = {**os.environ, "MALLOC_MMAP_THRESHOLD_": str(32 * 1024)}
    out = subprocess.run(
        [sys.executable, "-c", script], env=env, capture_output=True, text=True, timeout=120
    )
    assert out.returncode == 0, out.stderr
    took_smaller, cold, warm = out.stdout.split()
    assert took_smaller == "True"
    assert int(cold) > 8000
    assert int(warm) < int(cold) / 4, (warm, cold)


def test_nothing_is_warmed_where_another_allocator_is_preloaded(monkeypatch):
    """Its blocks are not glibc's: their size words cannot be read, and their heap is not
    the one a trace's stop would grow."""
    if heap._libc() is None:
        return
    real = ctypes.CDLL

    class Preloaded:  # the process's malloc, not glibc's
        malloc = real("libc.so.6").calloc

    monkeypatch.setattr(
        heap.ctypes, "CDLL", lambda name, *a, **k: Preloaded() if name is None else real(name)
    )
    heap._libc.cache_clear()
    try:
        assert heap._libc() is None
        assert _in_a_thread(lambda: heap.warm(8)) == 0.0
    finally:
        monkeypatch.undo()
        heap._libc.cache_clear()
    assert heap._libc() is not None
