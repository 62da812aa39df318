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


def _without_glibc() -> bool:
    """Whether glibc's malloc is not this process's (another C library or allocator),
    where a warm does nothing and says so, which this checks."""
    if heap._libc() is not None:
        return False
    assert heap.warm(8) == 0.0 and getattr(heap._local, "warmth", None) is None
    return True


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


class _Recording:
    """glibc's malloc and free, with the size of each block asked for noted."""

    def __init__(self, libc, fail: bool = False) -> None:
        self.libc, self.fail, self.sizes = libc, fail, []

    def malloc(self, size):
        self.sizes.append(size)
        return None if self.fail else self.libc.malloc(size)

    def free(self, block):
        self.libc.free(block)

    def asked(self):
        """The sizes asked for, in order, each once."""
        return list(dict.fromkeys(self.sizes))


def _mallinfo(field: str) -> int:
    """A field of glibc's ``mallinfo2``: ``uordblks``, the bytes malloc has handed out and
    not had back; ``fordblks``, the free bytes its arenas hold."""
    info = heap._libc().mallinfo2
    names = ("arena", "ordblks", "smblks", "hblks", "hblkhd", "usmblks", "fsmblks",
             "uordblks", "fordblks", "keepcost")  # fmt: skip

    class Info(ctypes.Structure):
        _fields_ = [(name, ctypes.c_size_t) for name in names]

    info.restype = Info
    return getattr(info(), field)


def test_a_warm_grows_in_the_largest_blocks_the_arena_takes(monkeypatch):
    if _without_glibc():
        return
    recording = _Recording(heap._libc())
    monkeypatch.setattr(heap, "_libc", lambda: recording)
    assert _in_a_thread(lambda: heap.warm(32)) > 0.0
    assert recording.asked() == [120 * 1024]  # glibc's default mmap threshold is 128 KiB


def test_a_warm_that_gets_no_memory_keeps_nothing_and_says_so(monkeypatch):
    if _without_glibc():
        return
    recording = _Recording(heap._libc(), fail=True)
    monkeypatch.setattr(heap, "_libc", lambda: recording)
    assert _in_a_thread(lambda: (heap.warm(32), getattr(heap._local, "warmth", None))) == (
        0.0,
        None,
    )
    assert recording.sizes == [120 * 1024]


def test_an_interrupted_warm_gives_back_what_it_grew(monkeypatch):
    if _without_glibc():
        return
    memset, calls = ctypes.memset, []

    def interrupted(block, value, size):
        calls.append(size)
        if len(calls) == 200:  # 23 MiB in
            raise KeyboardInterrupt
        return memset(block, value, size)

    monkeypatch.setattr(heap.ctypes, "memset", interrupted)

    def run():
        before = _mallinfo("uordblks")
        try:
            heap.warm(64)
        except KeyboardInterrupt:
            return _mallinfo("uordblks") - before, getattr(heap._local, "warmth", None)
        raise AssertionError("the interrupt went nowhere")

    grown, warmth = _in_a_thread(run)
    monkeypatch.undo()
    assert len(calls) == 200 and warmth is None
    assert abs(grown) < 1024 * 1024, grown


_UNDER_A_LOWER_THRESHOLD = """
import sys
sys.path[:0] = [{tests!r}, {root!r}]
from test_heap import _Recording, _allocate_and_write, _in_a_thread
from jaxtune._tuning.sweep import heap

recording = _Recording(heap._libc())
heap._libc = lambda: recording
cold = _in_a_thread(lambda: _allocate_and_write(48))
def warmed():
    recording.sizes.clear()
    assert heap.warm(64) > 0.0
    asked = recording.asked()
    return asked, _allocate_and_write(48)
asked, warm = _in_a_thread(warmed)
print(asked == [122880, 65536, 16384], cold, warm)
"""


@pytest.mark.child
def test_a_warm_under_a_lowered_mmap_threshold_goes_on_in_smaller_blocks():
    """Blocks glibc maps on their own warm nothing: under ``MALLOC_MMAP_THRESHOLD_`` of
    32 KiB, a 120 KiB or 64 KiB block is given back as soon as one is mapped, and the
    growth goes on in 16 KiB blocks, which warm."""
    if _without_glibc():
        return
    out = _run(_UNDER_A_LOWER_THRESHOLD, MALLOC_MMAP_THRESHOLD_=str(32 * 1024))
    took_smaller, cold, warm = out.split()
    assert took_smaller == "True"
    assert int(cold) > 8000
    assert int(warm) < int(cold) / 4, (warm, cold)


_UNDER_AN_ADDRESS_SPACE_LIMIT = """
import resource, sys
sys.path[:0] = [{tests!r}, {root!r}]
from test_heap import _in_a_thread, _mallinfo
from jaxtune._tuning.sweep import heap

with open("/proc/self/status") as f:
    size = next(int(line.split()[1]) * 1024 for line in f if line.startswith("VmSize:"))
resource.setrlimit(resource.RLIMIT_AS, (size + 400 * 1024 * 1024, resource.RLIM_INFINITY))
def warmed():
    seconds = heap.warm(512)
    kept = heap._local.warmth.mib if hasattr(heap._local, "warmth") else 0
    return seconds, kept, _mallinfo("fordblks") // 2**20
print(*_in_a_thread(warmed))
"""


@pytest.mark.child
def test_a_warm_keeps_what_it_grew_where_the_address_space_runs_out():
    """Under ``RLIMIT_AS`` (a sweep child's ``memory_limit``), a thread's arena cannot take
    another heap, and glibc maps the next blocks on their own: what was grown is kept."""
    if _without_glibc():
        return
    seconds, mib, free_mib = _run(_UNDER_AN_ADDRESS_SPACE_LIMIT).split()
    assert float(seconds) > 0.0 and int(mib) == 512
    assert int(free_mib) > 128, free_mib  # grown, freed and kept for the thread


def _run(script: str, **env: str) -> str:
    import pathlib

    tests = pathlib.Path(__file__).parent
    out = subprocess.run(
        [sys.executable, "-c", script.format(tests=str(tests), root=str(tests.parent))],
        env={**os.environ, **env},
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert out.returncode == 0, out.stderr
    return out.stdout


@pytest.fixture
def libc_again(monkeypatch):
    """``heap._libc()`` asked again, under the test's patches; after the test, with them
    undone, asked afresh (glibc again)."""

    def again():
        heap._libc.cache_clear()
        return heap._libc()

    yield again
    monkeypatch.undo()
    assert again() is not None


def test_nothing_is_warmed_where_another_allocator_is_preloaded(monkeypatch, libc_again):
    """Its blocks are not glibc's: their size words cannot be read, and their heap is not
    the one a trace's stop would grow."""
    if _without_glibc():
        return
    real = ctypes.CDLL

    class Preloaded:  # the process's malloc, not glibc's
        malloc = real("libc.so.6").calloc

    monkeypatch.setattr(
        heap.ctypes, "CDLL", lambda name, *a, **k: Preloaded() if name is None else real(name)
    )
    assert libc_again() is None
    assert _in_a_thread(lambda: heap.warm(8)) == 0.0


def test_nothing_is_warmed_without_a_readable_glibc(monkeypatch, libc_again):
    """Where glibc's library will not load by name (a static build, a port whose C
    library is named otherwise), or its memory tagging is on (a block's size word, read
    through the block's tagged pointer, would fault), nothing is done."""
    if _without_glibc():
        return
    real = ctypes.CDLL

    def unnamed(name, *a, **k):
        if name == "libc.so.6":
            raise OSError("libc.so.6: cannot open shared object file")
        return real(name)

    monkeypatch.setattr(heap.ctypes, "CDLL", unnamed)
    assert libc_again() is None
    monkeypatch.undo()
    monkeypatch.setenv("GLIBC_TUNABLES", "glibc.malloc.check=0:glibc.mem.tagging=1")
    assert libc_again() is None
    assert _in_a_thread(lambda: heap.warm(8)) == 0.0
