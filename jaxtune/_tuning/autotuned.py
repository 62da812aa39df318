"""An ``@autotuned`` kernel: key -> lookup -> (on a miss, in tune mode) sweep -> call.

The config is chosen at trace time from abstract shapes, so under ``jax.jit`` the choice
costs nothing after the first trace. :class:`Autotuned` holds the decorator's options and
the call itself, and wires the rest, each in a module named for its job:

- :mod:`.options`: the options checked when a kernel is decorated, and the timing presets
  that ``effort=`` names;
- :mod:`.lookup`: the lookup order (:func:`~.lookup.choose`), scope to default;
- :mod:`.kernel_sweep`: a sweep's task (the pass timed, the timing effort, the budget) and
  running it into a cache entry;
- :mod:`.profile_hook`: the marker each call runs under, and what a profile asks of the
  kernel through it;
- :mod:`.eager`: eager calls through one ``jax.jit`` per kernel whose trace makes the same
  choice, so an eager call costs what jit's dispatch costs.
"""

from __future__ import annotations

import functools
import inspect
from collections.abc import Callable, Iterable, Mapping
from typing import Any, Generic, ParamSpec, TypeVar

import jax

from .._core import settings as _settings
from .._core.arrays import is_array
from .._core.vocabulary import Choice, Entry
from .._distributed import agree as _agree
from .._program.markers import Mark
from . import kernel_sweep as _kernel_sweep
from . import lookup as _lookup
from . import profile_hook as _profile_hook
from . import record as _record
from . import values as _values
from .buckets import Buckets
from .digest import KernelCode
from .eager import EagerCalls, bump_generation, under_differentiation
from .kernel_sweep import differentiated_calls, is_differentiated
from .naming import kernel_id_for
from .options import (
    validate_callable,
    validate_check,
    validate_effort,
    validate_nearest,
    validate_static_argnames,
    validate_timeout,
    validate_timer,
    validate_timing,
)
from .result import TuningResult
from .signature import Signature, is_tracing
from .space import ConfigSpec
from .sweep.runner import prestart_child
from .sweep.search import Budget, strategy_of
from .sweep.work import SweepTask

__all__ = ["Autotuned", "registry", "retrace_jitted_functions"]

P = ParamSpec("P")
R = TypeVar("R")

_REGISTRY: dict[str, Autotuned[Any, Any]] = {}


def registry() -> dict[str, Autotuned[Any, Any]]:
    """Every ``@autotuned`` kernel defined in this process, by kernel id."""
    return dict(_REGISTRY)


def retrace_jitted_functions() -> None:
    """Makes every jitted function re-trace on its next call (functions jitted, or merely
    lowered as ``jaxtune.tune`` and ``locate`` do, then pick the new configs)."""
    bump_generation()
    _agree.new_round()


class Autotuned(Generic[P, R]):
    """A kernel wrapped by :func:`autotuned`. Call it like the kernel it wraps.

    ``__wrapped__`` keeps the kernel's full type ``Callable[P, R]``. A call returns ``R``;
    its arguments are not checked against ``P``, because the config keywords that ``P``
    requires are the ones jaxtune fills in (a type checker cannot drop keywords from a
    ParamSpec).
    """

    __wrapped__: Callable[P, R]

    def __init__(
        self,
        fn: Callable[P, R],
        *,
        configs: Any,
        default: Mapping[str, Any] | Callable[..., Mapping[str, Any]] | None,
        prune: Callable[..., bool] | None,
        key: Callable[..., Any] | None,
        name: str | None,
        version: Any,
        check: Any,
        inputs: Callable[..., Any] | None,
        static_argnames: Iterable[str],
        timeout: float | None,
        flops: float | Callable[..., float] | None,
        bytes: float | Callable[..., float] | None,
        search: Any = "auto",
        budget: int | Budget | None = None,
        timer: str | None = None,
        timing: str = "auto",
        effort: str = "full",
        nearest: bool = False,
        buckets: Any = None,
    ) -> None:
        functools.update_wrapper(self, fn)
        self.__wrapped__ = fn
        self.kernel_id = kernel_id_for(fn, name)
        self.spec = ConfigSpec(fn, configs, prune=prune, default=default, kernel=self.kernel_id)
        self.version = "" if version is None else str(version)
        #: The digest of the kernel's code, worked out on first use (version= overrides it).
        self.code = KernelCode(fn, enabled=version is None)
        self.check = validate_check(check)
        self.inputs = validate_callable("inputs", inputs)
        self.key_fn = validate_callable("key", key)
        self.signature = inspect.signature(fn)
        self.static_argnames = validate_static_argnames(fn, self.signature, static_argnames)
        self.buckets = Buckets.of(buckets, self.signature, self.static_argnames)
        self.timeout = validate_timeout(timeout)
        self.flops = flops
        self.bytes = bytes
        self.timer = validate_timer(timer)
        self.timing = validate_timing(timing)
        #: The timing preset of this kernel's sweeps (see :data:`.options.EFFORTS`).
        self.effort = validate_effort(effort)
        #: What this process swept in retune mode, and the misses it warned about.
        self.retunes = _kernel_sweep.Retunes()
        self.misses = _lookup.Misses()
        names = self._known_config_names()
        # Eager calls go straight to jit's C++ dispatch (see eager.py). With static
        # arguments they go through _call first, which names an unhashable one.
        self._eager = EagerCalls(
            self,
            fn,
            self._inside,
            (*self.static_argnames, *(sorted(names) if names else ())),
            fast=names is not None and not self.static_argnames,
        )
        self._jitted: dict[str, Callable[..., R]] = {}
        #: The pruned space and default per (shapes, statics): prune runs once per shape.
        self._spaces: dict[Any, tuple[list[dict[str, Any]], dict[str, Any]]] = {}
        strategy_of(search)  # validates the name or object now, not at the first sweep
        self.search = search
        self.budget = Budget.of(budget)
        self.nearest = validate_nearest(nearest)
        prestart_child(self.__wrapped__)
        _REGISTRY[self.kernel_id] = self

    def __repr__(self) -> str:
        return f"<jaxtune.autotuned {self.kernel_id}>"

    def __get__(self, obj: Any, objtype: Any = None) -> Any:
        return self if obj is None else functools.partial(self, obj)

    # -- arguments ---------------------------------------------------------------------

    def _known_config_names(self) -> frozenset[str] | None:
        """The config keywords when the decorator tells them, else ``None``."""
        if self.spec.names is not None:
            return self.spec.names
        if isinstance(self.spec.default, Mapping):
            return frozenset(self.spec.default)
        return None

    def _config_names(self, kwargs: Mapping[str, Any]) -> frozenset[str]:
        names = self._known_config_names()
        if names is not None:
            return names
        # A callable space: config keywords are the keywords that hold no array.
        return frozenset(
            k
            for k, v in kwargs.items()
            if k not in self.static_argnames
            and not any(is_array(leaf) for leaf in jax.tree_util.tree_leaves(v))
        )

    def bind(self, args: tuple[Any, ...], kwargs: Mapping[str, Any]) -> Signature:
        """The call's arguments split into arrays and static values, with its key."""
        return Signature.bind(
            self.signature,
            args,
            kwargs,
            static_argnames=self.static_argnames,
            config_names=frozenset(),
            key_fn=self.key_fn,
            buckets=self.buckets,
        )

    def space_and_default(self, sig: Signature) -> tuple[list[dict[str, Any]], dict[str, Any]]:
        """The pruned space and the default config for a bound call (worked out once per
        shapes and static values; ``prune`` and a callable space must be pure)."""
        memo = (sig.shapes, sig.statics)
        known = self._spaces.get(memo)
        if known is None:
            args, kwargs = sig.call_arguments(abstract=True)
            space = self.spec.space(args, kwargs, call=sig.key)
            known = (space, self.spec.default_config(space, args, kwargs, call=sig.key))
            if len(self._spaces) >= 1024:
                self._spaces.clear()
            self._spaces[memo] = known
        return [dict(c) for c in known[0]], dict(known[1])

    # -- lookup --------------------------------------------------------------------------

    def _choose(self, sig: Signature, *, sweep: bool) -> Choice:
        choice = _lookup.choose(self, sig, sweep=sweep)
        if sig.actual is not None:  # a bucket's config, made safe for the actual shape
            choice = _lookup.within_bucket(self, sig, choice)
        if sweep:
            _record.note(self, sig, choice)
        return choice

    # -- sweeps ----------------------------------------------------------------------------

    def sweep_timing(self) -> str:
        """The pass a sweep of this kernel started now would time: ``forward`` or
        ``vjp``."""
        return _kernel_sweep.pass_now(self.timing)

    def sweep_task(
        self,
        sig: Signature,
        space: list[dict[str, Any]],
        default: dict[str, Any],
        *,
        differentiated: bool = False,
    ) -> SweepTask:
        """The sweep of this kernel for a bound call, over ``space`` (``differentiated``:
        the call was traced under ``jax.grad``/``jax.vjp``, so ``timing="auto"`` times
        forward and backward)."""
        return _kernel_sweep.task(self, sig, space, default, differentiated=differentiated)

    # -- calls ---------------------------------------------------------------------------

    def _explicit(self, kwargs: dict[str, Any]) -> dict[str, Any] | None:
        names = self._config_names(kwargs)
        given = {k: kwargs[k] for k in names if k in kwargs}
        return given or None

    def _explicit_call(
        self, args: tuple[Any, ...], kwargs: dict[str, Any], explicit: dict[str, Any]
    ) -> tuple[Signature, dict[str, Any], Choice]:
        """A call that passes config keywords (``explicit``): the call bound without them,
        its other arguments, and the config it runs with (the default, with the keywords
        given over it)."""
        rest = {k: v for k, v in kwargs.items() if k not in explicit}
        sig = self.bind(args, rest)
        _, default = self.space_and_default(sig)
        return sig, rest, Choice(config={**default, **explicit}, source="explicit", key=sig.key)

    def __call__(self, *args: Any, **kwargs: Any) -> R:
        # Only for kernels with static arguments or config keywords known at trace time
        # only; the others' class calls the eager jit directly (see eager.EagerCalls).
        return self._call(*args, **kwargs)

    def _call(self, *args: Any, **kwargs: Any) -> R:
        if is_tracing(jax.tree_util.tree_leaves((args, kwargs))):
            return self._inside(*args, **kwargs)
        explicit = self._explicit(kwargs) if kwargs else None
        if explicit is not None:
            sig, rest, choice = self._explicit_call(args, kwargs, explicit)
            return self._jit_for(sig, choice)(*args, **rest)
        self.bind(args, kwargs)  # jaxtune's own messages for arguments jit would reject
        out: R = self._eager.call(*args, **kwargs)
        return out

    def _inside(self, *args: Any, **kwargs: Any) -> R:
        """A call inside a trace: the caller's, or the eager jit's own (which must not call
        the eager jit again: a kernel without array arguments has no tracer to tell)."""
        explicit = self._explicit(kwargs) if kwargs else None
        if explicit is None:
            return self._traced(args, kwargs)
        sig, rest, choice = self._explicit_call(args, kwargs, explicit)
        with jax.named_scope(self._marker(sig, choice)):
            return self.__wrapped__(*args, **rest, **choice.config)

    def _traced(self, args: tuple[Any, ...], kwargs: dict[str, Any]) -> R:
        """The kernel called with the config chosen for these (traced) arguments."""
        sig = self.bind(args, kwargs)
        leaves = jax.tree_util.tree_leaves((args, kwargs))
        differentiated = (
            is_differentiated(leaves)
            or _kernel_sweep.differentiated_now()
            or under_differentiation()
        )
        # An eager call in tune mode: a sweep runs on the caller's own arrays.
        chosen_for = _values.eager_signature(self, sig) or sig
        with differentiated_calls(differentiated):
            choice = self._choose(chosen_for, sweep=True)
        _values.capture(self, sig)  # for a recording or jaxtune.tune: the values it runs
        if not differentiated and self._may_learn_differentiation(choice):
            return self._watched(sig, args, kwargs, choice)
        return self._run(sig, choice, differentiated, args, kwargs)

    def _run(
        self,
        sig: Signature,
        choice: Choice,
        differentiated: bool,
        args: tuple[Any, ...],
        kwargs: Mapping[str, Any],
    ) -> R:
        with jax.named_scope(self._marker(sig, choice, differentiated=differentiated)):
            return self.__wrapped__(*args, **kwargs, **choice.config)

    def _may_learn_differentiation(self, choice: Choice) -> bool:
        """Whether a call traced without JAX's differentiation in sight must find out if it
        is differentiated later: ``jax.grad(jax.jit(f))`` traces ``f`` before the gradient
        is taken. Only a sweep (tune mode) or a recording (``jaxtune tune --``) acts on
        it, and only for ``timing="auto"`` and a config that a sweep decides."""
        if self.timing != "auto" or choice.source in ("explicit", "scope"):
            return False
        settings = _settings.settings()
        if settings.record:  # the recording says which pass each call runs
            return True
        if settings.mode not in ("tune", "retune"):
            return False
        return choice.entry is None or choice.entry.timing != "vjp"

    def _watched(
        self, sig: Signature, args: tuple[Any, ...], kwargs: dict[str, Any], choice: Choice
    ) -> R:
        """The call under a ``jax.custom_jvp`` whose rule runs only when JAX differentiates
        it: the rule chooses again as a differentiated call (a sweep of forward and
        backward in tune mode, a recorded differentiated call) and computes the forward and
        its tangent with that config. Without differentiation the program is the call
        itself. The traced leaves are the rule's inputs; the rest stays as it was given."""
        leaves, tree = jax.tree_util.tree_flatten((args, kwargs))
        traced = [i for i, leaf in enumerate(leaves) if isinstance(leaf, jax.core.Tracer)]

        def call(chosen: Choice, differentiated: bool, *values: Any) -> Any:
            full = list(leaves)
            for i, v in zip(traced, values, strict=True):
                full[i] = v
            a, k = jax.tree_util.tree_unflatten(tree, full)
            return self._run(sig, chosen, differentiated, a, k)

        @jax.custom_jvp
        def forward(*values: Any) -> Any:
            return call(choice, False, *values)

        @forward.defjvp
        def differentiated(primals: Any, tangents: Any) -> Any:
            with differentiated_calls(True):
                chosen = self._choose(sig, sweep=True)
            return jax.jvp(functools.partial(call, chosen, True), primals, tangents)

        out: R = forward(*(leaves[i] for i in traced))
        return out

    def _marker(self, sig: Signature, choice: Choice, *, differentiated: bool = False) -> str:
        return _profile_hook.mark_call(self, sig, choice, differentiated=differentiated)

    def _jit_for(self, sig: Signature, choice: Choice) -> Callable[..., R]:
        """A jit of the kernel with an explicit config bound (one per config and key)."""
        marker = self._marker(sig, choice)
        jitted = self._jitted.get(marker)
        if jitted is None:
            names = tuple(n for n in self.static_argnames if n in self.signature.parameters)
            fn, config = self.__wrapped__, dict(choice.config)

            # wraps() gives jit the kernel's signature, to place static arguments.
            @functools.wraps(fn)
            def marked(*args: Any, **kwargs: Any) -> R:
                with jax.named_scope(marker):
                    return fn(*args, **kwargs, **config)

            jitted = jax.jit(marked, static_argnames=names)
            self._jitted[marker] = jitted
        return jitted

    # -- public methods --------------------------------------------------------------------

    def config_for(self, *args: Any, **kwargs: Any) -> Choice:
        """The config a call with these arguments would use, and its source; never sweeps.

        Arguments may be arrays or ``jax.ShapeDtypeStruct``.
        """
        explicit = self._explicit(kwargs)
        if explicit is not None:
            return self._explicit_call(args, kwargs, explicit)[2]
        return self._choose(self.bind(args, kwargs), sweep=False)

    def space(self, *args: Any, **kwargs: Any) -> list[dict[str, Any]]:
        """The configs ``prune`` keeps for these arguments, in sweep order."""
        sig = self.bind(args, kwargs)
        return self.space_and_default(sig.actual or sig)[0]

    def tune(self, *args: Any, **kwargs: Any) -> TuningResult:
        """Sweeps the space for these arguments now (whatever ``JAXTUNE_MODE`` says), writes
        the user cache and returns the result.

        Arguments may be arrays or ``jax.ShapeDtypeStruct`` (then inputs are generated).

        Raises:
            TuningFailedError: every config failed; the message lists each reason.
        """
        sig = self.bind(args, kwargs)
        space, default = self.space_and_default(sig)
        entry = _kernel_sweep.run(self, sig, space, default, _lookup.device_kind())
        retrace_jitted_functions()
        return TuningResult.of(entry)

    def tune_on(
        self,
        args: tuple[Any, ...],
        kwargs: Mapping[str, Any],
        more: Iterable[Any] = (),
    ) -> TuningResult:
        """:meth:`tune` on the values a program ran the call with: ``args``/``kwargs``,
        and ``more`` value sets of the same call (:class:`~.values.Captured`), timed
        together as a mix."""
        sig = self.bind(tuple(args), dict(kwargs))
        sets = []
        for other in more:
            bound = self.bind(tuple(other.args), dict(other.kwargs))
            sets.append({name: bound.value(name) for name in bound.dynamic})
        space, default = self.space_and_default(sig)
        entry = _kernel_sweep.run(self, sig, space, default, _lookup.device_kind(), value_sets=sets)
        retrace_jitted_functions()
        return TuningResult.of(entry)

    def current_entry(self, *args: Any, **kwargs: Any) -> Entry | None:
        """The entry of the user or a packaged cache that a call with these arguments
        would use and a sweep now would keep: for this kernel version, in the space, and
        timed for the pass a sweep would time now (a forward entry does not answer a
        differentiated call); ``None`` otherwise."""
        return _lookup.current_entry(self, self.bind(args, kwargs))

    def cost_hint(self, *args: Any, **kwargs: Any) -> dict[str, float] | None:
        """The ``flops=`` / ``bytes=`` hints evaluated for these arguments (for roofline
        reports), or ``None`` when the decorator gave none."""
        return _profile_hook.cost_hint(self, self.bind(args, kwargs))

    def recorded_call(self, mark: Mark) -> dict[str, Any]:
        """The recorded call behind a marker of this kernel's (what ``jaxtune tune
        --from-profile`` replays), for a profile's sidecar."""
        return _record.frame_for_mark(self, mark)

    def tuned_speedup(self, key: str, config: Mapping[str, Any], device_kind: str) -> float | None:
        """The speedup over the default that the user cache measured for ``key`` on
        ``device_kind``, when its entry stored ``config`` (``None`` otherwise: a default,
        an entry of another config, or a cache that cannot say)."""
        return _profile_hook.tuned_speedup(self, key, config, device_kind)
