"""``@jaxtune.profiled`` and ``jaxtune.profile``: capture a trace with the right flags,
attribute device time to kernels, report FLOP/s, bandwidth and roofline bound.

Capture runs in the child process, whose flags are set before JAX starts; a function that
cannot be re-imported is captured in this process instead, and the profile says which
profiling flags were missing then.
"""

from __future__ import annotations

import contextlib
import dataclasses
import functools
import os
import pathlib
import re
import sys
import tempfile
import time
import traceback
from collections.abc import Callable, Iterator, Mapping
from typing import Any, Generic, ParamSpec, TypeVar, overload

import jax
import numpy as np

from .._core import flags as _flags
from .._core import settings as _settings
from .._core.errors import JaxtuneError, JaxtuneWarning, warn_once
from .._core.errors import warn as _warn
from .._core.vocabulary import CaptureInfo, PallasKernel, ProfileOptions
from .._core.xspace.tracing import tracer_options
from .._program import markers as _markers
from .._program.locate import sites_in_module
from . import calls as _calls
from . import llo as _llo
from .hlo import hlo_fusions, hlo_ops
from .llo_figures import lines as llo_lines
from .report import Profile, read_space, report_from_trace
from .sidecar import FAILED_FILE

__all__ = [
    "Profiled",
    "capture",
    "profile",
    "profiled",
]

P = ParamSpec("P")
R = TypeVar("R")


def _concrete(value: Any, seed: int) -> Any:
    from .._core.arrays import random_leaf

    rng = np.random.default_rng(seed)

    def leaf(x: Any) -> Any:
        if isinstance(x, jax.ShapeDtypeStruct):
            return jax.numpy.asarray(random_leaf(x, rng))
        return x

    return jax.tree_util.tree_map(leaf, value)


def _missing_flags(platform: str, options: ProfileOptions) -> tuple[str, ...]:
    """The profiling flags ``options`` ask for on ``platform`` that this process's
    variables lack (a capture here cannot have them)."""
    wanted = _flags.profile_flags(
        platform, llo=options.llo, custom_call_tracing=options.custom_call_tracing
    )
    missing: list[str] = []
    for var, flags in wanted.items():
        have = {f.name: f for f in _flags.inspect(os.environ.get(var, "")).flags}
        missing.extend(str(f) for f in flags if f.name not in have)
    return tuple(missing)


def capture(
    fn: Callable[..., Any],
    args: tuple[Any, ...],
    kwargs: Mapping[str, Any],
    options: ProfileOptions,
) -> CaptureInfo:
    """Compiles ``fn``, warms it up (``options.warmup`` calls, at least 2), traces
    ``options.iters`` calls into ``options.logdir`` (runs wherever it is called: the child,
    or this process). Returns what the parent needs to attribute the trace: the HLO op
    map, the kernel sites with their cost estimates, the hints."""
    logdir = options.logdir or tempfile.mkdtemp(prefix="jaxtune-profile-")
    args = _concrete(args, 0)
    kwargs = _concrete(dict(kwargs), 1)
    jitted: Any = fn if hasattr(fn, "lower") else jax.jit(fn)
    start = time.perf_counter()
    lowered = jitted.lower(*args, **kwargs)
    compiled = lowered.compile()
    compile_s = time.perf_counter() - start
    arguments = _arguments_per_call(lowered, args, kwargs)
    for _ in range(max(options.warmup, 2)):
        call_args, call_kwargs = arguments()
        jax.block_until_ready(compiled(*call_args, **call_kwargs))
    start = time.perf_counter()
    with jax.profiler.trace(logdir, profiler_options=tracer_options(hlo_proto=True)):
        for _ in range(options.iters):
            call_args, call_kwargs = arguments()
            jax.block_until_ready(compiled(*call_args, **call_kwargs))
    run_s = time.perf_counter() - start
    device = jax.devices()[0]
    calls = _markers.pallas_calls(jax.make_jaxpr(jitted)(*args, **kwargs))
    sites = sites_in_module(lowered.compiler_ir("stablehlo"), device.platform, calls)
    hlo_text = compiled.as_text()
    hints, recorded = _calls.hints(sites)
    configs = _calls.configs(sites, device.device_kind)
    return CaptureInfo(
        logdir=logdir,
        platform=device.platform,
        device_kind=device.device_kind,
        hlo=hlo_ops(hlo_text),
        fusions=hlo_fusions(hlo_text),
        kernels=tuple(_kernel_record(c) for c in calls),
        autotuned=_calls.autotuned_counts(sites),
        costs={s.name: s.cost_estimate for s in sites if s.cost_estimate},
        sources=_sources(sites, calls),
        hints=hints,
        calls=tuple(recorded),
        configs=configs,
        timings={"compile_s": compile_s, "run_s": run_s},
        env={k: os.environ.get(k) for k in ("XLA_FLAGS", "LIBTPU_INIT_ARGS", "JAX_PLATFORMS")},
    )


def _arguments_per_call(
    lowered: Any, args: tuple[Any, ...], kwargs: Mapping[str, Any]
) -> Callable[[], tuple[tuple[Any, ...], Mapping[str, Any]]]:
    """What each call of the capture is given: the caller's own arguments, except those the
    function donates (``jax.jit(step, donate_argnums=0)``), which are device-side copies
    made afresh for every call. A donated buffer is consumed by the one call it is passed
    to: given the caller's arrays, the warm-up would delete them (and fail on its second
    call), and the program's next step would find them gone.

    The copies are ``jax.device_put(..., may_alias=False)``: a buffer copy that keeps the
    array's sharding and is not an XLA program (``jnp.array(x, copy=True)`` is one, and its
    ``copy`` ops would show in a CPU trace among the function's).
    Only one set of copies is alive at a time (each becomes its call's output, dropped
    before the next), so a capture needs at most the donated arrays' size again.
    """
    info = getattr(lowered, "args_info", None)
    donated = [bool(getattr(a, "donated", False)) for a in jax.tree_util.tree_leaves(info)]
    if not any(donated):
        return lambda: (args, kwargs)
    leaves, treedef = jax.tree_util.tree_flatten((args, kwargs))
    structure: Any = jax.tree_util.tree_structure(info)
    if structure != treedef:
        # Static arguments are not in ``args_info``: copy every array then, to be safe.
        donated = [True] * len(leaves)
    where = [i for i, (x, d) in enumerate(zip(leaves, donated, strict=True)) if d]
    where = [i for i in where if isinstance(leaves[i], jax.Array)]

    def fresh() -> tuple[tuple[Any, ...], Mapping[str, Any]]:
        copies = jax.device_put([leaves[i] for i in where], may_alias=False)
        call = list(leaves)
        for i, copy in zip(where, copies, strict=True):
            call[i] = copy
        return jax.tree_util.tree_unflatten(treedef, call)

    return fresh


def _sources(sites: Any, calls: list[_markers.PallasCall]) -> dict[str, str]:
    """Each kernel's ``file:line`` (by jaxtune kernel id, or Pallas kernel name): a Pallas
    kernel's ``pallas_call`` line as the jaxpr tells it (a custom call's location names
    the line of the function around it under autodiff, one line for all three of flash
    attention's kernels), else its site's."""
    found = {(s.kernel_id or s.name): s.source for s in sites if s.source}
    found.update({c.name: c.source for c in calls if c.source})
    return found


def _kernel_record(call: _markers.PallasCall) -> PallasKernel:
    """A Pallas call as a capture keeps it (it travels from the child and into the
    sidecar)."""
    return PallasKernel(
        name=call.name,
        scope=call.scope,
        per_step=call.per_step,
        io_bytes=call.io_bytes,
        cost_estimate=call.cost_estimate,
        source=call.source,
        call_site=call.call_site,
        inside=call.inside,
    )


def profile(
    fn: Callable[..., Any],
    *args: Any,
    iters: int = 5,
    warmup: int = 2,
    llo: bool = True,
    custom_call_tracing: bool = False,
    logdir: str | os.PathLike[str] | None = None,
    **kwargs: Any,
) -> Profile:
    """Captures a trace of ``fn(*args, **kwargs)`` and attributes device time to kernels.

    Runs in a child process with the profiling flags for the platform set before JAX
    starts (``llo=True``, the default, registers LLO debug info on TPU and then runs
    xprof's LLO analysis on the trace: ``Profile.llo``, a modelled static schedule per
    kernel, or one line saying why there is none; ``custom_call_tracing=True`` also traces
    inside custom calls). Warms up ``warmup`` (at least 2) calls, traces ``iters``, keeps
    the trace in ``logdir`` (a new temporary directory by default). Arguments may be arrays or ``jax.ShapeDtypeStruct``.

    Raises:
        ProfileError: the capture failed (the message holds the child's stderr).
        FlagError: the installed libtpu lacks a requested profiling flag.

    Examples:
        >>> import jax.numpy as jnp, jaxtune
        >>> p = jaxtune.profile(lambda x: jnp.sin(x) * 2, jnp.ones(8))  # doctest: +SKIP
        >>> print(p.table())  # doctest: +SKIP
    """
    options = ProfileOptions(
        iters=iters,
        warmup=warmup,
        llo=llo,
        custom_call_tracing=custom_call_tracing,
        logdir=str(logdir) if logdir else None,
    )
    return _capture_and_report(getattr(fn, "__wrapped_profiled__", fn), args, kwargs, options)


def _capture_and_report(
    raw: Callable[..., Any],
    args: tuple[Any, ...],
    kwargs: Mapping[str, Any],
    options: ProfileOptions,
    *,
    here: bool = False,
    before_llo: Callable[[Profile], contextlib.AbstractContextManager[None]] | None = None,
) -> Profile:
    """The one profile path (:func:`profile`, ``fn.profile()`` and the automatic profile of
    ``JAXTUNE_PROFILE=1``): the capture, in the child unless ``here`` (or unless it cannot
    run there: then here, naming the flags that could not take effect), its report, and
    xprof's LLO analysis of the trace when ``options.llo`` asks for it (entered through
    ``before_llo(report)`` on TPU, where it can take a while: the automatic profile shows
    the report first)."""
    options = dataclasses.replace(
        options, logdir=options.logdir or tempfile.mkdtemp(prefix="jaxtune-profile-")
    )
    target = str(options.logdir)
    info = None if here else _capture_in_child(raw, args, kwargs, options)
    missing: tuple[str, ...] = ()
    if info is None:
        info = capture(raw, args, kwargs, options)
        missing = _missing_flags(info.platform, options)
    # Read once for the report and the LLO analysis both.
    space = read_space(target) if options.llo else None
    result = report_from_trace(target, info=info, iterations=options.iters, space=space)
    result = dataclasses.replace(result, missing_flags=missing)
    if not options.llo:
        return result
    shown = before_llo(result) if before_llo is not None and result.platform == "tpu" else None
    with shown or contextlib.nullcontext():
        return _llo.attach(result, target, space=space)


def _holds_tpu() -> bool:
    """Whether this process already started JAX's TPU backend (the chip is then its own:
    no child could open it)."""
    from .._isolation.devices import parent_backend

    return _flags.normalise_platform(parent_backend()) == "tpu"


def _capture_in_child(
    raw: Callable[..., Any], args: Any, kwargs: Any, options: ProfileOptions
) -> CaptureInfo | None:
    """What the child's capture returned, or ``None`` to capture here: inline isolation,
    a process that holds the TPU, or a function that cannot travel (each of the last two
    with one warning saying so)."""
    from .._isolation.wire import NotTransportable
    from .capture import profile_in_child

    if _settings.settings().isolation != "process":
        return None
    if _holds_tpu():
        # Under `jaxtune profile --` the program started with the flags: nothing is lost.
        missing = _missing_flags("tpu", options)
        if missing:
            warn_once(
                ("profile: tpu held",),
                "jaxtune.profile: this process already opened the TPU, and only one process "
                "can hold a TPU chip, so the capture runs here, where profiling flags set "
                f"after the chip started ({' '.join(missing)}) cannot take effect; the report "
                "names them. For a capture with them, run the program as `jaxtune profile -- "
                "python your_program.py`, or profile before this process first uses the TPU.",
                stacklevel=4,
            )
        return None
    try:
        return profile_in_child(raw, args, kwargs, options)
    except NotTransportable as e:
        _warn(
            f"jaxtune.profile: {getattr(raw, '__qualname__', raw)} cannot run in a child "
            f"process ({e}); capturing in this process, where the profiling flags can no "
            "longer take effect. Define it and the types of its arguments at module level "
            "to profile it in a child, or run the program as `jaxtune profile -- python "
            "your_program.py`, which sets the flags before JAX starts.",
            JaxtuneWarning,
            stacklevel=3,
        )
        return None


class Profiled(Generic[P, R]):
    """A function wrapped by :func:`profiled`; calling it calls the function, with the
    function's own parameter and return types."""

    def __init__(self, fn: Callable[P, R], options: ProfileOptions) -> None:
        functools.update_wrapper(self, fn)
        self.__wrapped_profiled__ = fn
        #: The decorator's options (see :func:`profiled`).
        self.options = options
        self._seen: set[Any] = set()

    def __repr__(self) -> str:
        return f"<jaxtune.profiled {getattr(self, '__qualname__', '?')}>"

    def profile(self, *args: Any, **kwargs: Any) -> Profile:
        """Captures a profile of one call with these arguments (see :func:`profile`).

        Keywords named like the decorator's options (``iters``, ``warmup``, ``llo``,
        ``custom_call_tracing``, ``logdir``) override them for this capture.
        """
        names = {f.name for f in dataclasses.fields(ProfileOptions)}
        overrides = {k: kwargs.pop(k) for k in list(kwargs) if k in names}
        if overrides.get("logdir"):
            overrides["logdir"] = str(overrides["logdir"])
        options = dataclasses.replace(self.options, **overrides)
        return _capture_and_report(self.__wrapped_profiled__, args, kwargs, options)

    def __call__(self, *args: P.args, **kwargs: P.kwargs) -> R:
        if _settings.settings().profile:
            self._auto_profile(args, kwargs)
        return self.__wrapped_profiled__(*args, **kwargs)

    def _auto_profile(self, args: tuple[Any, ...], kwargs: dict[str, Any]) -> None:
        leaves, treedef = jax.tree_util.tree_flatten((args, kwargs))
        if any(isinstance(x, jax.core.Tracer) for x in leaves):
            return
        signature = (
            treedef,
            tuple((getattr(x, "shape", None), str(getattr(x, "dtype", x))) for x in leaves),
        )
        if signature in self._seen:
            return
        self._seen.add(signature)
        name = re.sub(r"[^\w.-]+", "_", getattr(self, "__qualname__", "fn"))
        out: pathlib.Path | None = None
        try:
            out = _new_capture_dir(_settings.settings().profile_dir, name)
            options = dataclasses.replace(
                self.options,
                logdir=str(out / "trace"),
                # `jaxtune profile --no-llo` left the LLO flag out: no analysis, nothing missing.
                llo=self.options.llo and _settings.settings().profile_llo,
            )
            # The program is already running, so capture here: `jaxtune profile -- python`
            # set the flags before JAX started.
            result = _capture_and_report(
                self.__wrapped_profiled__,
                args,
                kwargs,
                options,
                here=True,
                before_llo=functools.partial(_shown_before_llo, name),
            )
            path = result.save(out / "report.json")
            if options.llo and result.platform == "tpu":  # its table came first
                print("\n".join(llo_lines(result.llo)), flush=True)
                print(f"jaxtune: report in {path}", flush=True)
                return
        except Exception as e:
            # The program runs on whatever failed (its function, or jaxtune); the traceback
            # is kept, so that a fault of jaxtune's own (its note says so) can be reported.
            message = f"jaxtune could not profile {name}: {e}"
            if out is not None:  # `jaxtune profile` tells a failed capture from none
                detail = "".join(traceback.format_exception(e))
                with contextlib.suppress(OSError):
                    (out / FAILED_FILE).write_text(f"{message}\n\n{detail}")
            _warn(message, JaxtuneWarning, stacklevel=3)
            return
        print(f"jaxtune: profiled {name}; report in {path}", flush=True)
        print(result.table(top=10), flush=True)


@contextlib.contextmanager
def _shown_before_llo(name: str, result: Profile) -> Iterator[None]:
    """Shows ``result``'s table first, then xprof's LLO analysis of the trace (which can
    take a while on a big trace), begun and ended with a line on stderr."""
    print(f"jaxtune: profiled {name}", flush=True)
    print(result.table(top=10), flush=True)
    print(
        f"jaxtune: LLO analysis of {name}'s trace (xprof, in a child, at most "
        f"{_llo.LLO_TIMEOUT_S} s)...",
        file=sys.stderr,
        flush=True,
    )
    began = time.perf_counter()
    yield
    print(
        f"jaxtune: LLO analysis of {name} took {time.perf_counter() - began:.1f} s",
        file=sys.stderr,
        flush=True,
    )


def _new_capture_dir(root: pathlib.Path, name: str) -> pathlib.Path:
    """``root/<name>-<n>``, created, for the first ``n`` no capture has taken: a capture
    never writes over an earlier one (another run's, or another process's now)."""
    root.mkdir(parents=True, exist_ok=True)
    n = 1
    while True:
        try:
            (root / f"{name}-{n}").mkdir()
        except FileExistsError:
            n += 1
            continue
        return root / f"{name}-{n}"


@overload
def profiled(fn: Callable[P, R], /) -> Profiled[P, R]: ...


@overload
def profiled(
    *,
    iters: int = 5,
    warmup: int = 2,
    llo: bool = True,
    custom_call_tracing: bool = False,
    logdir: str | None = None,
) -> Callable[[Callable[P, R]], Profiled[P, R]]: ...


def profiled(
    fn: Callable[P, R] | None = None,
    /,
    *,
    iters: int = 5,
    warmup: int = 2,
    llo: bool = True,
    custom_call_tracing: bool = False,
    logdir: str | None = None,
) -> Profiled[P, R] | Callable[[Callable[P, R]], Profiled[P, R]]:
    """Marks a function for profiling; it still runs normally when called.

    ``fn.profile(*args)`` captures a trace and returns a :class:`Profile`. With
    ``JAXTUNE_PROFILE=1`` the first call per signature is profiled automatically and its
    report (``report.json``, ``report.txt`` and the trace) written under
    ``JAXTUNE_PROFILE_DIR``. Use bare (``@jaxtune.profiled``) or with options.

    Examples:
        >>> import jax, jax.numpy as jnp, jaxtune
        >>> @jaxtune.profiled(iters=3)
        ... def step(x):
        ...     return jnp.tanh(x).sum()
        >>> float(step(jnp.zeros(4)))
        0.0
    """
    if warmup < 0 or iters < 1:
        raise JaxtuneError(f"profiled needs iters >= 1 and warmup >= 0, got {iters}, {warmup}.")

    def wrap(f: Callable[P, R]) -> Profiled[P, R]:
        options = ProfileOptions(
            iters=iters,
            warmup=warmup,
            llo=llo,
            custom_call_tracing=custom_call_tracing,
            logdir=logdir,
        )
        return Profiled(f, options)

    return wrap(fn) if fn is not None else wrap
