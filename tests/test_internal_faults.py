"""A fault in jaxtune's own code surfaces as a bug in jaxtune, with its traceback and a
note that says so; only what is the input's fault is blamed on the input.

Covers docs/profiling.md, "Reading a trace: Profile.from_trace" (damage is a
ProfileError; a sidecar of wrong kinds is ignored with a note; any other exception is a
bug in jaxtune, never called damage) and docs/isolation.md, "When a config fails" (a
config fails by what its kernel, JAX's lowering or its run raise; a fault of the sweep
engine's own is not recorded against any config).

Each internal fault is injected by replacing a jaxtune function with one that raises; the
real damage beside it (a truncated trace, a malformed sidecar, a kernel that raises while
compiling or running) is still reported as the input's.
"""

from __future__ import annotations

import inspect
import re
import traceback

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from hostile.traces import TPU_TRACE
from jax.profiler import ProfileData

import jaxtune
from jaxtune._core.codec import packb, unpackb
from jaxtune._core.vocabulary import (
    CaptureInfo,
    Choice,
    Failure,
    Measurement,
    PallasKernel,
    RanConfig,
    RecordedCall,
)
from jaxtune._profiling import report as _report
from jaxtune._profiling import sidecar as _sidecar
from jaxtune._tuning.signature import Signature
from jaxtune._tuning.sweep import compile as _compile
from jaxtune._tuning.sweep import drive as _sweep
from jaxtune._tuning.sweep import timers as _timers
from jaxtune._tuning.sweep.same_program import Programs
from jaxtune._tuning.sweep.work import SweepPlan, SweepTask

TPU_BYTES = ProfileData.text_proto_to_serialized_xspace(TPU_TRACE)
CONFIG = {"block_q": 256, "block_k": 128}

#: What a capture of the TPU trace's program knew, as a capture writes it beside the trace.
INFO = CaptureInfo(
    platform="tpu",
    device_kind="TPU v5 lite",
    hlo={"fusion.1": ("jit(step)/dot_general", None)},
    fusions={"fusion.1": ["jit(step)/dot_general"]},
    kernels=(
        PallasKernel(
            name="tiled_matmul",
            scope=("jit(step)", "pallas_call"),
            per_step=1,
            io_bytes=4096,
            cost_estimate={"flops": 2e9, "bytes_accessed": 1e6, "transcendentals": 0.0},
            source="model.py:12",
            call_site="model.py:40",
            inside=None,
        ),
    ),
    autotuned={"lib.mm": 1},
    costs={"tiled_matmul": {"flops": 2e9, "bytes_accessed": 1e6}},
    sources={"tiled_matmul": "model.py:12"},
    hints={"lib.mm": {"flops": 1e9, "bytes": 2e6}},
    calls=(RecordedCall(kernel="lib.mm", key="f32[8]", config=dict(CONFIG), source="cache"),),
    configs={"lib.mm": RanConfig(config=dict(CONFIG), speedup=2.5)},
    timings={"compile_s": 1.5, "run_s": 0.25},
    env={"XLA_FLAGS": None},
)


def _trace_with_sidecar(tmp_path, info=INFO):
    path = tmp_path / "t.xplane.pb"
    path.write_bytes(TPU_BYTES)
    _sidecar.remember(tmp_path, info, 2)
    assert (tmp_path / _sidecar.INFO_FILE).is_file()
    return path


def _frames(e: BaseException) -> list[str]:
    return [f.name for f in traceback.extract_tb(e.__traceback__)]


# -- the report: a fault of the analysis is never a malformed sidecar or a damaged trace --


def test_a_sidecar_as_a_capture_writes_it_reads_back_whole():
    info, iterations = _sidecar.read_sidecar(unpackb(packb({**INFO.to_dict(), "iterations": 2})))
    assert info == INFO and iterations == 2


def _only_with_the_sidecar(real, fault, field):
    """``real``, except that it raises ``fault`` when given the sidecar's ``field``: a bug
    that only the sidecar's values reach (a retry without the sidecar would hide it)."""

    def stage(*args, **kwargs):
        if kwargs.get(field):
            raise fault
        return real(*args, **kwargs)

    return stage


#: Faults of the analysis reached only with the sidecar's values: the stage replaced, the
#: fault, and the sidecar field that reaches it.
ANALYSIS_FAULTS = {
    "attribution": ("attribute", KeyError("flops"), "costs"),
    "classifier": ("classifier", TypeError("unhashable type: 'list'"), "kernels"),
    "walk": ("walk", AttributeError("'tuple' object has no attribute 'name'"), "hlo"),
}


@pytest.mark.parametrize("stage", sorted(ANALYSIS_FAULTS))
def test_a_fault_reached_through_a_good_sidecar_is_a_bug_not_a_malformed_sidecar(
    tmp_path, monkeypatch, stage
):
    name, fault, field = ANALYSIS_FAULTS[stage]
    path = _trace_with_sidecar(tmp_path)
    if name == "walk":  # positional: walk(plane, owner_of, hlo, programs, ...)

        def walk(plane, owner_of, hlo=None, *rest, **kwargs):
            if hlo:
                raise fault
            return real(plane, owner_of, hlo, *rest, **kwargs)

        real, replacement = _report.walk, walk
    else:
        replacement = _only_with_the_sidecar(getattr(_report, name), fault, field)
    monkeypatch.setattr(_report, name, replacement)
    with pytest.raises(type(fault)) as caught:
        jaxtune.Profile.from_trace(path)
    assert caught.value is fault and not isinstance(caught.value, jaxtune.JaxtuneError)
    assert caught.value.__notes__ == [_report.INTERNAL_FAULT.format(path=path)]
    assert "this is a bug in jaxtune" in caught.value.__notes__[0]
    # The traceback reaches the fault where it was raised.
    assert _frames(caught.value)[-1] in ("stage", "walk")


def test_the_same_sidecar_without_the_fault_gives_the_report(tmp_path):
    profile = jaxtune.Profile.from_trace(_trace_with_sidecar(tmp_path))
    assert not any("malformed" in n for n in profile.notes), profile.notes
    assert profile.iterations == 2 and profile.device_kind == "TPU v5 lite"


#: Sidecars of the wrong kinds, and what the note names.
MALFORMED = {
    "a kernel named by a number": ({"kernels": [{"name": 7, "scope": []}]}, "kernels[0].name"),
    "a kernel without its scope": ({"kernels": [{"name": "k"}]}, "kernels[0].scope"),
    "a count that is text": (
        {"kernels": [{"name": "k", "scope": [], "per_step": "2"}]},
        "kernels[0].per_step",
    ),
    "an hlo entry that is no pair": ({"hlo": {"fusion.1": "dot"}}, "hlo['fusion.1']"),
    "a fusion of numbers": ({"fusions": {"fusion.1": [1, 2]}}, "fusions['fusion.1']"),
    "a cost that is text": ({"costs": {"k": {"flops": "many"}}}, "costs['k']"),
    "a hint that is a list": ({"hints": {"lib.mm": [1.0]}}, "hints['lib.mm']"),
    "a source that is a number": ({"sources": {"k": 3}}, "sources['k']"),
    "a config that is a list": ({"configs": {"lib.mm": {"config": [1]}}}, "configs['lib.mm']"),
    "a recorded call's config": (
        {
            "calls": [
                {"t": "call", "kernel": "k", "key": "f32[8]", "source": "cache", "config": "x"}
            ]
        },
        "calls[0].config",
    ),
    "a recorded call of no kernel": ({"calls": [{"config": {}}]}, "calls[0].kernel: missing"),
    "iterations that are text": ({"iterations": "two"}, "iterations"),
    "iterations below zero": ({"iterations": -1}, "iterations: expected a count"),
    "a kernel's cost that is a bool": (
        {"kernels": [{"name": "k", "scope": [], "cost_estimate": {"flops": True}}]},
        "kernels[0].cost_estimate['flops']: expected a number",
    ),
    "a config that ran, of no plain values": (
        {"configs": {"lib.mm": {"config": {"block": {"nested": 1}}}}},
        "configs['lib.mm'].config: expected a config of plain values",
    ),
    "a speedup that is text": (
        {"configs": {"lib.mm": {"config": {}, "speedup": "fast"}}},
        "configs['lib.mm'].speedup",
    ),
    "a sidecar of a later version": ({"v": 2}, "written by a newer jaxtune"),
    "a field of the wrong kind": ({"kernels": 5}, "capture info's kernels: expected a list"),
}


@pytest.mark.parametrize("case", sorted(MALFORMED))
def test_a_malformed_sidecar_is_still_ignored_with_a_note(tmp_path, case):
    raw, named = MALFORMED[case]
    path = tmp_path / "t.xplane.pb"
    path.write_bytes(TPU_BYTES)
    plain = jaxtune.Profile.from_trace(path)
    (tmp_path / _sidecar.INFO_FILE).write_bytes(packb(raw))
    with pytest.raises(_sidecar.SidecarError, match=re.escape(named)):
        _sidecar.read_sidecar(raw)
    profile = jaxtune.Profile.from_trace(path)
    note = profile.notes[0]
    assert note.startswith(f"{_sidecar.INFO_FILE} beside this trace is malformed (") and named in (
        note
    ), note
    assert note.endswith("); ignored")
    assert [k.name for k in profile.kernels] == [k.name for k in plain.kernels]


def test_a_truncated_trace_is_still_a_profile_error(tmp_path):
    path = tmp_path / "t.xplane.pb"
    path.write_bytes(TPU_BYTES[: len(TPU_BYTES) // 2])
    with pytest.raises(jaxtune.ProfileError, match=str(path)) as caught:
        jaxtune.Profile.from_trace(path)
    assert str(caught.value).startswith(f"{path} is a damaged XSpace trace (")
    assert str(caught.value).endswith("); capture it again.")


# -- the sweep engine: a fault of its own is never a config's failure ----------------------


@pytest.fixture
def quick(monkeypatch):
    """Short timing: these tests are about who is blamed, not about speed."""
    from jaxtune._tuning.sweep import samples as _samples

    chosen = _samples.TimingOptions(min_time_s=0.001, min_samples=2, max_samples=4, rounds=1)
    monkeypatch.setattr(_samples, "DEFAULT", chosen)
    return chosen


def _task(fn, configs, options, *, check="auto"):
    x = jnp.arange(8.0)
    sig = Signature.bind(
        inspect.signature(fn),
        (x,),
        {},
        static_argnames=frozenset(),
        config_names=frozenset(),
    )
    plan = SweepPlan(
        kernel="k",
        key=sig.key,
        configs=tuple(configs),
        default=configs[0],
        options=options,
    )
    return SweepTask(plan=plan, fn=fn, signature=sig, check=check)


def scale(x, *, c):
    return x * c


CONFIGS = [{"c": 1.0}, {"c": 2.0}, {"c": 3.0}]


def test_a_fault_in_the_compile_threads_bookkeeping_surfaces_as_a_bug(monkeypatch, quick):
    """The compiling thread hands the fault to the thread waiting on it, which raises it:
    every config is heard of, none is recorded as failing to compile."""
    real = Programs.module
    fault = TypeError("module names got a config they cannot name")

    def broken_module(self, config):
        if config == CONFIGS[1]:
            raise fault
        return real(self, config)

    monkeypatch.setattr(Programs, "module", broken_module)
    with pytest.raises(TypeError) as caught:
        _sweep.run_sweep(_task(scale, CONFIGS, quick))
    assert caught.value is fault and not isinstance(caught.value, jaxtune.JaxtuneError)
    assert caught.value.__notes__ == [_compile.ENGINE_FAULT.format(config="c=2.0")]
    assert "this is a bug in jaxtune, not a failure of the config" in caught.value.__notes__[0]
    assert "broken_module" in _frames(caught.value)


def test_a_fault_of_jaxtunes_own_code_inside_the_traced_call_is_not_a_lowering_failure(
    monkeypatch, quick
):
    """``call_arguments`` runs while JAX traces each config's call: its fault comes out of
    ``lower()`` like the kernel's own exceptions, and is still told apart from them."""
    real = Signature.call_arguments

    def call_arguments(self, *args, **kwargs):
        if "replace" in kwargs:
            raise KeyError("x")  # each config's trace meets its own
        return real(self, *args, **kwargs)

    monkeypatch.setattr(Signature, "call_arguments", call_arguments)
    with pytest.raises(KeyError, match=r"^'x'") as caught:
        _sweep.run_sweep(_task(scale, CONFIGS, quick))
    (note,) = caught.value.__notes__
    configs = "|".join(re.escape(f"c={c['c']}") for c in CONFIGS)
    pattern = re.escape(_compile.ENGINE_FAULT).replace(re.escape("{config}"), f"({configs})")
    assert re.fullmatch(pattern, note), note
    assert "call_arguments" in _frames(caught.value)


def test_a_fault_of_the_timer_around_a_call_is_not_the_configs_failure(monkeypatch, quick):
    fault = TypeError("unsupported operand type(s) for +: 'float' and 'NoneType'")

    def broken_timer(self, run, *args, **kwargs):
        run()  # the config's call works; the timer's arithmetic around it does not
        raise fault

    monkeypatch.setattr(_timers.WallTimer, "_timed_calls", broken_timer)
    with pytest.raises(TypeError) as caught:
        _sweep.run_sweep(_task(scale, CONFIGS, quick), timer=_timers.WallTimer())
    assert caught.value is fault
    assert caught.value.__notes__ == [_compile.ENGINE_FAULT.format(config="c=1.0")]
    assert "broken_timer" in _frames(caught.value)


def test_an_interrupt_while_compiling_goes_up_as_itself(monkeypatch, quick):
    def interrupted(self, config):
        raise KeyboardInterrupt

    monkeypatch.setattr(Programs, "module", interrupted)
    with pytest.raises(KeyboardInterrupt) as caught:
        _sweep.run_sweep(_task(scale, CONFIGS, quick))
    assert not getattr(caught.value, "__notes__", None)


def _fails_on_call(n):
    """A host callback that raises on its ``n``-th call (a kernel that fails at run time)."""
    calls = [0]

    def host(v):
        calls[0] += 1
        if calls[0] >= n:
            raise RuntimeError("the kernel's run failed")
        return np.asarray(v)

    return host


def test_the_kernels_own_failures_are_still_the_configs(quick):
    """Raising while tracing (compile), on the first call (run) and while being timed (run):
    each is that config's Failure, the others are measured."""
    late = _fails_on_call(3)
    first = _fails_on_call(1)

    def kernel(x, *, mode):
        if mode == "no_lowering":
            raise ValueError("block 3 does not divide 8")
        if mode == "first_call":
            return jax.pure_callback(first, jax.ShapeDtypeStruct(x.shape, x.dtype), x)
        if mode == "late_call":
            return jax.pure_callback(late, jax.ShapeDtypeStruct(x.shape, x.dtype), x)
        return x * 2

    configs = [{"mode": m} for m in ("ok", "no_lowering", "first_call", "late_call")]
    out = _sweep.run_sweep(_task(kernel, configs, quick, check=False), timer=_timers.WallTimer())
    by = {m.config["mode"]: m for m in out.measurements}
    assert isinstance(by["ok"], Measurement)
    assert isinstance(by["no_lowering"], Failure) and by["no_lowering"].stage == "compile"
    assert "block 3 does not divide 8" in by["no_lowering"].reason
    for mode in ("first_call", "late_call"):
        assert isinstance(by[mode], Failure) and by[mode].stage == "run", by[mode]
        assert "the kernel's run failed" in by[mode].reason


# -- elsewhere: what a broad except used to swallow ------------------------------------


class _Client:
    """A coordination-service client whose calls raise ``error``."""

    def __init__(self, error):
        self.error = error

    def key_value_set_bytes(self, key, value, allow_overwrite):
        raise self.error

    def blocking_key_value_get_bytes(self, key, timeout_ms):
        raise self.error


def test_the_shared_stores_faults_are_told_from_the_clients():
    from jaxtune._distributed import coordination as _coordination

    def store(error):
        return _coordination.CoordinationKeyValue(_Client(error), 0, 2)

    assert store(RuntimeError("ALREADY_EXISTS: key")).publish("k", b"v") is False
    with pytest.raises(_coordination.KeyValueLostError, match="UNAVAILABLE"):
        store(RuntimeError("UNAVAILABLE: the service went away")).publish("k", b"v")
    with pytest.raises(_coordination.KeyValueTimeoutError):
        store(RuntimeError("DEADLINE_EXCEEDED: waited")).wait("k", 1.0)
    # A wrong argument of jaxtune's is a bug, not a lost store.
    fault = TypeError("key_value_set_bytes(): incompatible function arguments")
    with pytest.raises(TypeError) as caught:
        store(fault).publish("k", b"v")
    assert caught.value is fault
    with pytest.raises(TypeError):
        store(TypeError("bad timeout")).wait("k", 1.0)


def test_a_fault_of_the_cache_lookup_is_not_taken_for_an_untuned_call(monkeypatch):
    from jaxtune._cli import from_profile as _from_profile

    frame = RecordedCall(kernel="lib.mm", device_kind="cpu", key="f32[8]", source="default")
    assert _from_profile.tuned_here(frame) is False  # nothing tuned yet

    class Cache:
        def __init__(self, error):
            self.error = error

        def lookup(self, *args, **kwargs):
            raise self.error

    monkeypatch.setattr(_from_profile._cache, "user_cache", lambda: Cache(jaxtune.CacheError("x")))
    assert _from_profile.tuned_here(frame) is False  # a cache that cannot be read
    fault = TypeError("'NoneType' object is not subscriptable")
    monkeypatch.setattr(_from_profile._cache, "user_cache", lambda: Cache(fault))
    with pytest.raises(TypeError) as caught:
        _from_profile.tuned_here(frame)
    assert caught.value is fault


def test_a_fault_of_the_lookup_behind_a_profiles_recorded_call_surfaces(monkeypatch):
    from jaxtune._tuning.bound import BoundCall

    @jaxtune.autotuned(configs={"c": [1, 2]}, name="tests.faults.recorded")
    def kernel(x, *, c):
        return x * c

    call = kernel.options.bound(kernel.options.bind((jax.ShapeDtypeStruct((4,), jnp.float32),), {}))
    # A profile's mark keeps the config and where it came from, not the entry.
    choice = Choice(config={"c": 1}, source="cache", key=call.sig.key)

    def failing(error):
        def choose(self, *, traced):
            raise error

        return choose

    # A cache that cannot say loses only the label of the pass its entry timed.
    monkeypatch.setattr(BoundCall, "choose", failing(jaxtune.CacheError("unreadable")))
    assert call.recorded_call(choice).entry_timing == ""
    fault = AttributeError("'Entry' object has no attribute 'timing'")
    monkeypatch.setattr(BoundCall, "choose", failing(fault))
    with pytest.raises(AttributeError) as caught:
        call.recorded_call(choice)
    assert caught.value is fault


def test_a_failed_auto_profile_keeps_its_traceback_beside_the_warning(tmp_path, monkeypatch):
    from jaxtune._profiling import profiled as _profiled

    monkeypatch.setenv("JAXTUNE_PROFILE", "1")
    monkeypatch.setenv("JAXTUNE_PROFILE_DIR", str(tmp_path))
    fault = KeyError("flops")

    def broken_capture(*args, **kwargs):
        raise fault

    monkeypatch.setattr(_profiled, "capture", broken_capture)

    @jaxtune.profiled
    def step(x):
        return x + 1

    with pytest.warns(
        jaxtune.JaxtuneWarning, match=r"^jaxtune could not profile \S*step: 'flops'$"
    ):
        assert float(step(jnp.ones(2))[0]) == 2.0  # the program runs on
    (failed,) = tmp_path.glob(f"*/{_profiled.FAILED_FILE}")
    text = failed.read_text()
    assert re.match(r"jaxtune could not profile \S*step: 'flops'$", text.splitlines()[0])
    assert "Traceback (most recent call last)" in text and "broken_capture" in text
