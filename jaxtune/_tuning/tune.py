"""``jaxtune.tune(fn, *args, **kwargs)``: tune every autotuned kernel a function reaches."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import jax

from .._core import settings as _settings
from .._core.arrays import is_array
from .._core.errors import JaxtuneWarning
from .._core.errors import warn as _warn
from .._program import markers as _markers
from .._program.locate import KernelSite, check_staged_call, locate
from . import values as _values
from .autotuned import retrace_jitted_functions
from .bound import BoundCall, marked_call
from .lookup import device_kind
from .record import finding_kernels
from .result import TuningResult
from .sweep.inputs import is_concrete
from .sweep.runner import prestart_child
from .sweep_rules import differentiated_calls

__all__ = ["tune"]


def tune(
    fn: Callable[..., Any] | jax.stages.Lowered | jax.stages.Traced,
    *args: Any,
    retune: bool = False,
    **kwargs: Any,
) -> TuningResult:
    """Tunes, ahead of time, every ``@autotuned`` kernel that ``fn`` reaches with these
    arguments and that has no current entry, once per distinct (kernel, key), and writes
    the user cache.

    The kernels are found in ``fn``'s lowered StableHLO (through nested jit, grad, vmap,
    scan and shard_map), each with the shapes it really sees there. A kernel whose entry
    in the user cache (or a packaged one) fits its space and was timed for the pass ``fn``
    runs is not swept again: its entry goes into the result as it is. ``retune=True`` (or
    ``JAXTUNE_MODE=retune``) sweeps every kernel. A kernel that ``fn`` differentiates is
    timed forward and backward (``timing="auto"``). Sweeps run in the child process
    unless ``JAXTUNE_ISOLATION=inline``. Raw Pallas kernels without a tuning space are
    listed in the result's ``untuned`` attribute (and reported in one warning).
    Afterwards jitted functions re-trace, so ``fn`` picks the new configs on its next call.

    Arguments may be arrays or ``jax.ShapeDtypeStruct``; ``retune`` is this function's
    own keyword, not passed to ``fn``. ``fn`` may also be what ``jax.jit(f).lower(*args)``
    or ``jax.jit(f).trace(*args)`` returns, given alone: its kernels are tuned as for
    ``f`` with those arguments (the marks its trace left map back to them in this
    process). That object keeps the configs it was traced with; trace or lower ``f``
    again to use the tuned ones.

    Raises:
        TuningFailedError: every config of some kernel failed.
        SignatureError: arguments given with a ``Lowered``/``Traced``.

    Examples:
        >>> import jax, jaxtune
        >>> from jaxtune.examples.chunked import chunked_logsumexp
        >>> x = jax.ShapeDtypeStruct((4, 4096), "float32")
        >>> result = jaxtune.tune(lambda v: chunked_logsumexp(v).sum(), x)  # doctest: +SKIP
        >>> sorted(k for k, _, _ in result)  # doctest: +SKIP
        ['jaxtune.examples.chunked_logsumexp']
    """
    # A Lowered or Traced holds its shapes: arguments with it are refused, naming tune.
    check_staged_call(fn, args, kwargs, "jaxtune.tune")
    # The sweep child starts while the kernels are found (lowering fn takes a while).
    prestart_child(sweeping=True)
    # Finding the kernels must not start sweeps of its own (as JAXTUNE_MODE=tune would).
    with _settings.override(mode="cached"), finding_kernels():
        sites = locate(fn, *args, **kwargs)
    result = TuningResult()
    # A kernel is differentiated when a site shows its scope under jvp (and its transpose,
    # the backward pass): then timing="auto" times forward and backward.
    differentiated: dict[tuple[str, str], bool] = {}
    marks: dict[tuple[str, str], _markers.Mark] = {}
    for site in sites:
        mark = _mark_of(site)
        if mark is None:
            continue
        marks.setdefault((mark.kernel, mark.key), mark)
        # From the program's name stack, not the mark: JAX reuses a kernel's trace made
        # under a gradient for a plain call of the same shapes, mark included.
        under_ad = _markers.differentiated(site.name_stack, mark.kernel)
        differentiated[mark.kernel, mark.key] = (
            differentiated.get((mark.kernel, mark.key), False) or under_ad
        )
    retune = retune or _settings.settings().mode == "retune"
    todo: dict[tuple[str, str], BoundCall] = {}
    for pair, mark in marks.items():
        call = marked_call(_markers.digest(mark))
        if call is None:  # a mark this process did not make
            continue
        with differentiated_calls(differentiated[pair]):
            current = None if retune else call.current_entry()
        if current is not None:
            result = result | TuningResult.of(current)
        else:
            todo[pair] = call
    collected = _run_for_values(fn, args, kwargs) if todo else {}
    for pair, call in todo.items():
        with differentiated_calls(differentiated[pair]):
            sets = collected.get(pair)
            if sets:  # the values the call ran with, when fn ran on the caller's arrays
                entry = call.kernel.sweep(sets[0].args, sets[0].kwargs, sets[1:])
            else:  # the shapes its trace saw
                entry = call.sweep(device_kind())
            result = result | TuningResult.of(entry)
    untuned = tuple(s for s in sites if s.kind == "pallas" and s.inside is None)
    if untuned:
        names = ", ".join(sorted({s.name for s in untuned}))
        _warn(
            f"jaxtune.tune found Pallas kernels without a tuning space: {names}. Wrap them "
            "in @jaxtune.autotuned(configs=...) to tune their block sizes.",
            JaxtuneWarning,
            stacklevel=2,
        )
    retrace_jitted_functions()
    return TuningResult(dict(result), untuned=untuned)


def _run_for_values(
    fn: Any, args: tuple[Any, ...], kwargs: dict[str, Any]
) -> dict[tuple[str, str], list[_values.Collected]]:
    """Runs ``fn`` once on the caller's arrays, jitted (so a step's ``donate_argnums``
    consumes nothing), with each autotuned call's values collected (:mod:`.values`): the
    value sets per (kernel, key). Nothing when ``fn`` is a ``Lowered``/``Traced`` or an
    argument is no array with values (a ``ShapeDtypeStruct``): the sweeps then make their
    values up, and say so."""
    leaves = jax.tree_util.tree_leaves((args, kwargs))
    if not leaves or not all(is_concrete(leaf) or not is_array(leaf) for leaf in leaves):
        return {}
    if isinstance(fn, (jax.stages.Lowered, jax.stages.Traced)):
        return {}
    quiet = _settings.override(mode="cached", on_miss="default")
    with quiet, finding_kernels(), _values.collecting() as sets:
        retrace_jitted_functions()  # the traces made so far carry no value callbacks
        try:
            jax.block_until_ready(jax.jit(lambda *a, **k: fn(*a, **k))(*args, **kwargs))
            jax.effects_barrier()
        except Exception:
            # fn does not run jitted as given (arguments static to it, outputs jit cannot
            # return): no values; the sweeps make theirs up, and warn for integers.
            return {}
        finally:
            retrace_jitted_functions()  # and the program's later ones carry none
    return dict(sets.sets)


def _mark_of(site: KernelSite) -> _markers.Mark | None:
    if site.kind != "autotuned":
        return None
    found = _markers.parse(site.name_stack)
    return _markers.lookup(found[-1].digest) if found else None
