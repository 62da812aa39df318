"""The sweep thread's malloc heap, grown ahead of a device trace's first stop
(jaxtune._tuning.sweep.heap): the next allocations of that thread reuse it instead of
faulting in new pages, and it is done once per thread."""

from __future__ import annotations

import ctypes
import threading

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
