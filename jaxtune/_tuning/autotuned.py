"""An ``@autotuned`` kernel: key -> bound call -> its config (on a miss, in tune mode, a
sweep) -> the kernel called with it.

The config is chosen at trace time from abstract shapes, so under ``jax.jit`` the choice
costs nothing after the first trace. :class:`Autotuned` is the callable the decorator
returns: it checks the decorator's options into a :class:`~.bound.KernelOptions` and, for
each call, binds the arguments into a :class:`~.bound.BoundCall`, the value whose methods
decide everything about the call (the lookup order, the sweep, the recorded call, the
profile mark). What stays here is the call itself:

- explicit config keywords, and the jit of a call that gives them;
- a call inside a trace, and one that JAX differentiates only later (a ``jax.custom_jvp``
  that chooses again as a differentiated call);
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
from .._core.vocabulary import Choice
from .._distributed import agree as _agree
from . import record as _record
from . import values as _values
from .bound import BoundCall, KernelOptions
from .buckets import Buckets
from .digest import KernelCode
from .eager import EagerCalls, bump_generation
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
from .state import TUNING_STATE
from .sweep.runner import prestart_child
from .sweep.search import Budget, strategy_of
from .sweep_rules import (
    differentiated_calls,
    differentiated_now,
    is_differentiated,
    under_differentiation,
)

__all__ = ["Autotuned", "registry", "retrace_jitted_functions"]

P = ParamSpec("P")
R = TypeVar("R")

_REGISTRY: dict[str, Autotuned[Any, Any]] = TUNING_STATE.keep(
    "kernels",
    dict,
    "every @autotuned kernel defined in this process, by kernel id",
    never_reset="kernels register where they are defined, mostly at their module's import",
)


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
        # Checked in the order the options are documented: the first mistake is reported.
        self.spec = ConfigSpec(fn, configs, prune=prune, default=default, kernel=self.kernel_id)
        checked, given = validate_check(check), validate_callable("inputs", inputs)
        key_fn = validate_callable("key", key)
        self.signature = inspect.signature(fn)
        self.static_argnames = validate_static_argnames(fn, self.signature, static_argnames)
        bucketed = Buckets.of(buckets, self.signature, self.static_argnames)
        seconds, timer, timing = (
            validate_timeout(timeout),
            validate_timer(timer),
            validate_timing(timing),
        )
        # The timing preset of this kernel's sweeps (see .options.EFFORTS).
        effort = validate_effort(effort)
        strategy_of(search)  # validates the name or object now, not at the first sweep
        #: The kernel as its calls need it: the function and the options checked.
        self.options = KernelOptions(
            fn=fn,
            kernel_id=self.kernel_id,
            spec=self.spec,
            signature=self.signature,
            static_argnames=self.static_argnames,
            key_fn=key_fn,
            buckets=bucketed,
            version="" if version is None else str(version),
            # The digest of the kernel's code, worked out on first use (version= overrides it).
            code=KernelCode(fn, enabled=version is None),
            search=search,
            budget=Budget.of(budget),
            nearest=validate_nearest(nearest),
            flops=flops,
            bytes=bytes,
            check=checked,
            inputs=given,
            timeout=seconds,
            timer=timer,
            timing=timing,
            effort=effort,
        )
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

    # -- lookup --------------------------------------------------------------------------

    def _choose(self, sig: Signature, *, traced: bool) -> tuple[BoundCall, Choice]:
        """The call bound as ``sig`` and its config: the lookup order, made safe for the
        actual shape of a bucketed call, noted for a recording and ``JAXTUNE_VERBOSE``."""
        call = self.options.bound(sig)
        choice = call.choose(traced=traced)
        if traced:
            _record.note(call, choice)
        return call, choice

    # -- calls ---------------------------------------------------------------------------

    def _explicit(self, kwargs: dict[str, Any]) -> dict[str, Any] | None:
        names = self._config_names(kwargs)
        given = {k: kwargs[k] for k in names if k in kwargs}
        return given or None

    def _explicit_call(
        self, args: tuple[Any, ...], kwargs: dict[str, Any], explicit: dict[str, Any]
    ) -> tuple[BoundCall, dict[str, Any], Choice]:
        """A call that passes config keywords (``explicit``): the call bound without them,
        its other arguments, and the config it runs with (the default, with the keywords
        given over it)."""
        rest = {k: v for k, v in kwargs.items() if k not in explicit}
        call = self.options.bound(self.options.bind(args, rest))
        config = {**call.default, **explicit}
        return call, rest, Choice(config=config, source="explicit", key=call.sig.key)

    def __call__(self, *args: Any, **kwargs: Any) -> R:
        # Only for kernels with static arguments or config keywords known at trace time
        # only; the others' class calls the eager jit directly (see eager.EagerCalls).
        return self._call(*args, **kwargs)

    def _call(self, *args: Any, **kwargs: Any) -> R:
        if is_tracing(jax.tree_util.tree_leaves((args, kwargs))):
            return self._inside(*args, **kwargs)
        explicit = self._explicit(kwargs) if kwargs else None
        if explicit is not None:
            call, rest, choice = self._explicit_call(args, kwargs, explicit)
            return self._jit_for(call, choice)(*args, **rest)
        self.options.bind(args, kwargs)  # jaxtune's own messages for arguments jit would reject
        out: R = self._eager.call(*args, **kwargs)
        return out

    def _inside(self, *args: Any, **kwargs: Any) -> R:
        """A call inside a trace: the caller's, or the eager jit's own (which must not call
        the eager jit again: a kernel without array arguments has no tracer to tell)."""
        explicit = self._explicit(kwargs) if kwargs else None
        if explicit is None:
            return self._traced(args, kwargs)
        call, rest, choice = self._explicit_call(args, kwargs, explicit)
        _record.report(call.kernel.kernel_id, call.sig.key, choice)
        with jax.named_scope(call.mark(choice)):
            return self.__wrapped__(*args, **rest, **choice.config)

    def _traced(self, args: tuple[Any, ...], kwargs: dict[str, Any]) -> R:
        """The kernel called with the config chosen for these (traced) arguments."""
        sig = self.options.bind(args, kwargs)
        leaves = jax.tree_util.tree_leaves((args, kwargs))
        differentiated = (
            is_differentiated(leaves) or differentiated_now() or under_differentiation()
        )
        # An eager call in tune mode: a sweep runs on the caller's own arrays.
        chosen_for = _values.eager_signature(self.options, sig) or sig
        with differentiated_calls(differentiated):
            call, choice = self._choose(chosen_for, traced=True)
        if chosen_for is not sig:  # the call as traced runs, and may be differentiated later
            call = self.options.bound(sig)
        _values.collect(self.options, sig)  # for a recording or jaxtune.tune: the values it runs
        if not differentiated and self._may_learn_differentiation(choice):
            return self._watched(call, args, kwargs, choice)
        return self._run(call, choice, differentiated, args, kwargs)

    def _run(
        self,
        call: BoundCall,
        choice: Choice,
        differentiated: bool,
        args: tuple[Any, ...],
        kwargs: Mapping[str, Any],
    ) -> R:
        with jax.named_scope(call.mark(choice, differentiated=differentiated)):
            return self.__wrapped__(*args, **kwargs, **choice.config)

    def _may_learn_differentiation(self, choice: Choice) -> bool:
        """Whether a call traced without JAX's differentiation in sight must find out if it
        is differentiated later: ``jax.grad(jax.jit(f))`` traces ``f`` before the gradient
        is taken. Only a sweep (tune mode) or a recording (``jaxtune tune --``) acts on
        it, and only for ``timing="auto"`` and a config that a sweep decides."""
        if self.options.timing != "auto" or choice.source in ("explicit", "scope"):
            return False
        settings = _settings.settings()
        if settings.record:  # the recording says which pass each call runs
            return True
        if settings.mode not in ("tune", "retune"):
            return False
        return choice.entry is None or choice.entry.timing != "vjp"

    def _watched(
        self, call: BoundCall, args: tuple[Any, ...], kwargs: dict[str, Any], choice: Choice
    ) -> R:
        """The call under a ``jax.custom_jvp`` whose rule runs only when JAX differentiates
        it: the rule chooses again as a differentiated call (a sweep of forward and
        backward in tune mode, a recorded differentiated call) and computes the forward and
        its tangent with that config. Without differentiation the program is the call
        itself. The traced leaves are the rule's inputs; the rest stays as it was given."""
        leaves, tree = jax.tree_util.tree_flatten((args, kwargs))
        traced = [i for i, leaf in enumerate(leaves) if isinstance(leaf, jax.core.Tracer)]

        def run(chosen: Choice, differentiated: bool, *values: Any) -> Any:
            full = list(leaves)
            for i, v in zip(traced, values, strict=True):
                full[i] = v
            a, k = jax.tree_util.tree_unflatten(tree, full)
            return self._run(call, chosen, differentiated, a, k)

        @jax.custom_jvp
        def forward(*values: Any) -> Any:
            return run(choice, False, *values)

        @forward.defjvp
        def differentiated(primals: Any, tangents: Any) -> Any:
            with differentiated_calls(True):
                _, chosen = self._choose(call.sig, traced=True)
            return jax.jvp(functools.partial(run, chosen, True), primals, tangents)

        out: R = forward(*(leaves[i] for i in traced))
        return out

    def _jit_for(self, call: BoundCall, choice: Choice) -> Callable[..., R]:
        """A jit of the kernel with an explicit config bound (one per config and key)."""
        marker = call.mark(choice)
        jitted = self._jitted.get(marker)
        if jitted is None:
            names = tuple(n for n in self.static_argnames if n in self.signature.parameters)
            fn, config = self.__wrapped__, dict(choice.config)

            # wraps() gives jit the kernel's signature, to place static arguments.
            @functools.wraps(fn)
            def marked(*args: Any, **kwargs: Any) -> R:
                _record.report(call.kernel.kernel_id, call.sig.key, choice)  # as it traces
                with jax.named_scope(marker):
                    return fn(*args, **kwargs, **config)

            jitted = jax.jit(marked, static_argnames=names)
            self._jitted[marker] = jitted
        return jitted

    # -- public methods --------------------------------------------------------------------

    def config_for(self, *args: Any, **kwargs: Any) -> Choice:
        """The config a call with these arguments would use, and its source; never sweeps.

        Arguments may be arrays or ``jax.ShapeDtypeStruct``. Printed, the answer shows the
        entry behind it with its measurements counted (``measurements=<540>``);
        ``choice.entry.measurements`` holds them all.
        """
        explicit = self._explicit(kwargs)
        if explicit is not None:
            return self._explicit_call(args, kwargs, explicit)[2]
        return self._choose(self.options.bind(args, kwargs), traced=False)[1]

    def space(self, *args: Any, **kwargs: Any) -> list[dict[str, Any]]:
        """The configs ``prune`` keeps for these arguments, in sweep order."""
        sig = self.options.bind(args, kwargs)
        return [dict(c) for c in self.options.bound(sig.actual or sig).space]

    def tune(self, *args: Any, **kwargs: Any) -> TuningResult:
        """Sweeps the space for these arguments now (whatever ``JAXTUNE_MODE`` says), writes
        the user cache and returns the result.

        Arguments may be arrays or ``jax.ShapeDtypeStruct`` (then inputs are generated).

        Raises:
            TuningFailedError: every config failed; the message lists each reason.
        """
        return self.tune_on(args, kwargs)

    def tune_on(
        self,
        args: tuple[Any, ...],
        kwargs: Mapping[str, Any],
        more: Iterable[Any] = (),
    ) -> TuningResult:
        """:meth:`tune` on the values a program ran the call with: ``args``/``kwargs``,
        and ``more`` value sets of the same call (:class:`~.values.Collected`), timed
        together as a mix."""
        entry = self.options.sweep(args, kwargs, more)
        retrace_jitted_functions()
        return TuningResult.of(entry)

    def cost_hint(self, *args: Any, **kwargs: Any) -> dict[str, float] | None:
        """The ``flops=`` / ``bytes=`` hints evaluated for these arguments (for roofline
        reports), or ``None`` when the decorator gave none."""
        return self.options.cost_hint(self.options.bind(args, kwargs))
