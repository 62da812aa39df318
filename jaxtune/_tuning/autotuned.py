"""An ``@autotuned`` kernel: key -> lookup -> (on a miss, in tune mode) sweep -> call.

The config is chosen at trace time from abstract shapes, so under ``jax.jit`` the choice
costs nothing after the first trace. An eager call goes through one ``jax.jit`` per kernel
whose trace makes the same choice (see :mod:`.eager`), so it costs what jit's dispatch
costs, plus one check that the settings' variables did not change.
"""

from __future__ import annotations

import contextlib
import contextvars
import functools
import inspect
import threading
import warnings
from collections.abc import Callable, Iterable, Iterator, Mapping
from typing import Any, Generic, ParamSpec, TypeVar

import jax

from .._core import settings as _config
from .._core.arrays import is_array
from .._core.errors import JaxtuneWarning, MissError, TuningFailedError
from .._core.vocabulary import Choice, Entry
from .._distributed import agree as _agree
from .._program import markers as _markers
from . import lookup as _lookup
from . import record as _record
from .buckets import Buckets
from .digest import KernelCode
from .eager import bump_generation, eager_jit, renew_on_cache_change, under_differentiation
from .naming import kernel_id_for
from .options import (
    validate_callable,
    validate_check,
    validate_nearest,
    validate_static_argnames,
    validate_timeout,
    validate_timer,
    validate_timing,
)
from .result import TuningResult
from .signature import Signature, is_tracing
from .space import ConfigSpec
from .store import cache as _cache
from .store import shared as _shared
from .sweep import timing as _timing
from .sweep.entry import make_entry
from .sweep.plan import SweepPlan, SweepTask
from .sweep.runner import default_runner, prestart_child
from .sweep.search import Budget, budget_setting, strategy_of
from .sweep.shard import SweepSharing
from .sweep.stats import SweepOutcome
from .sweep.timing import TimingOptions

__all__ = ["Autotuned", "registry", "retrace_jitted_functions"]

P = ParamSpec("P")
R = TypeVar("R")

_REGISTRY: dict[str, Autotuned[Any, Any]] = {}
#: Whether the call being looked up was traced under ``jax.grad``/``jax.vjp`` (so that
#: ``timing="auto"`` times forward and backward).
_DIFFERENTIATED: contextvars.ContextVar[bool] = contextvars.ContextVar(
    "jaxtune_differentiated", default=False
)
#: Tracer types of JAX's differentiation (``jax.grad`` and ``jax.vjp`` linearize).
_AD_TRACERS = frozenset({"JVPTracer", "LinearizeTracer"})


_MSG_MISS = (
    "jaxtune has no tuned config for {kernel} with key {key} on {kind} (no scope, cache, "
    "packaged or nearest entry), and JAXTUNE_ON_MISS says a miss is not to pass silently. "
    "Tune it: run the program once with `jaxtune tune -- python your_program.py` (or "
    "JAXTUNE_MODE=tune), or call jaxtune.tune(step, *args) ahead of time; ship the cache "
    "with `jaxtune cache export`. JAXTUNE_ON_MISS=default runs the default config instead."
)


def is_differentiated(leaves: Iterable[Any]) -> bool:
    """Whether any of ``leaves`` is a tracer of ``jax.grad``/``jax.vjp``/``jax.jvp``."""
    return any(type(leaf).__name__ in _AD_TRACERS for leaf in leaves)


@contextlib.contextmanager
def differentiated_calls(on: bool = True) -> Iterator[None]:
    """Within: sweeps of ``timing="auto"`` kernels time forward and backward."""
    token = _DIFFERENTIATED.set(on)
    try:
        yield
    finally:
        _DIFFERENTIATED.reset(token)


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
        #: Timing options of this kernel's sweeps (``None``: the defaults).
        self.timing_options: TimingOptions | None = None
        self.timer = validate_timer(timer)
        self.timing = validate_timing(timing)
        self._lock = threading.RLock()
        names = self._known_config_names()
        self._jit_static = (*self.static_argnames, *(sorted(names) if names else ()))
        self._fast = names is not None and not self.static_argnames
        if self._fast:
            # Eager calls go straight to jit's C++ dispatch (see eager.py). With
            # static arguments they go through _call first, which names an unhashable one.
            self.__class__ = type("Autotuned", (type(self),), {"__slots__": ()})
        self.renew_eager()
        renew_on_cache_change(self)
        self._jitted: dict[str, Callable[..., R]] = {}
        #: (device kind, key) -> the pass this process swept it for in retune mode.
        self._retuned: dict[tuple[str, str], str] = {}
        self._warned_misses: set[tuple[str, str]] = set()
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

    def renew_eager(self) -> None:
        """Replaces the eager jit with a fresh one (no traces), after a cache or a variable
        that decides the config changed."""
        self._eager_jit = eager_jit(self.__wrapped__, self._inside, self._jit_static)
        self._deciding = _config.fingerprint(_config.DECIDING)
        if self._fast:  # the per-kernel class of the short path: jit's C++ dispatch
            type(self).__call__ = staticmethod(self._eager_jit)  # type: ignore[method-assign]

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
        choice = self._lookup(sig, sweep=sweep)
        if sig.actual is not None:  # a bucket's config, made safe for the actual shape
            choice = _lookup.within_bucket(self, sig, choice)
        if sweep:
            _record.note(self, sig, choice)
        return choice

    def _lookup(self, sig: Signature, *, sweep: bool) -> Choice:
        kind = _lookup.device_kind()
        space, default = self.space_and_default(sig)
        # config_for never sweeps, so it answers what the caches hold even in retune mode.
        if not (sweep and self._retuning(kind, sig)):
            fit = _lookup.Fit(self.kernel_id, self.version, [*space, default], code=self.code)
            scoped = _lookup.scoped_entry(self.kernel_id, kind, sig.key, fit)
            if scoped is not None:
                return Choice(config=dict(scoped.config), source="scope", key=sig.key, entry=scoped)
        if not sweep:  # config_for: the agreed config once there is one, else this process's
            agreed = _agree.decided(self.kernel_id, self.version, sig.key, kind)
            return agreed or self._decide(sig, space, default, kind, measure=None)
        runner = default_runner()
        if _agree.store() is None:  # one process: nothing to agree on
            return self._decide(sig, space, default, kind, measure=runner.sweep)
        question = _agree.Question(
            kernel=self.kernel_id,
            key=sig.key,
            version=self.version,
            device_kind=kind,
            decide=lambda measure: self._decide(sig, space, default, kind, measure=measure),
            task=lambda: self.sweep_task(sig, space, default),
            sharing=SweepSharing(runner),
        )
        return _agree.agree(question)

    def _retuning(self, kind: str, sig: Signature) -> bool:
        if _config.settings().mode != "retune":
            return False
        swept = self._retuned.get((kind, sig.key))
        # A sweep of forward and backward also answers a call that runs the forward only.
        return swept is None or (swept == "forward" and self.sweep_timing() == "vjp")

    def sweep_timing(self) -> str:
        """The pass a sweep of this kernel started now would time: ``forward`` or
        ``vjp``."""
        if self.timing != "auto":
            return self.timing
        return "vjp" if _DIFFERENTIATED.get() else "forward"

    def _wrong_pass(self, entry: Entry) -> bool:
        """Whether a sweep allowed now should replace ``entry``: it timed the forward pass
        of a kernel whose call here is differentiated (``timing="auto"``)."""
        return self.timing == "auto" and entry.timing == "forward" and _DIFFERENTIATED.get()

    def _decide(
        self,
        sig: Signature,
        space: list[dict[str, Any]],
        default: dict[str, Any],
        kind: str,
        *,
        measure: Callable[[SweepTask], SweepOutcome] | None,
    ) -> Choice:
        """The lookup after the scopes: caches, a sweep through ``measure`` (on a miss in
        tune mode), nearest (for kernels that opt in), default."""
        settings = _config.settings()
        use_caches = settings.mode != "off"
        sweeping = measure is not None and settings.mode in ("tune", "retune")
        # A sweep allowed now replaces a stale entry (another toolchain, new configs).
        fit = _lookup.Fit(
            self.kernel_id,
            self.version,
            [*space, default],
            code=self.code,
            swept=space,
            refresh=sweeping,
        )
        if use_caches and not (measure is not None and self._retuning(kind, sig)):
            found = _lookup.cached_entry(self.kernel_id, kind, sig.key, fit)
            if found is not None and not (sweeping and self._wrong_pass(found[0])):
                entry, source = found
                return Choice(
                    config=dict(entry.config),
                    source=source,
                    key=sig.key,
                    entry=entry,
                    stale=fit.last_stale,
                )
        if sweeping:
            try:
                entry = self._sweep(sig, space, default, kind, measure=measure)
            except TuningFailedError as e:
                warnings.warn(
                    f"jaxtune could not tune {self.kernel_id} for {sig.key}; falling back. {e}",
                    JaxtuneWarning,
                    stacklevel=5,
                )
                if fit.stale_hit is not None:  # the stale entry beats the default
                    old, layer, why = fit.stale_hit
                    return Choice(
                        config=dict(old.config),
                        source="packaged" if layer == "packaged" else "cache",
                        key=sig.key,
                        entry=old,
                        stale=why,
                    )
            else:
                assert measure is not None
                return Choice(config=dict(entry.config), source="cache", key=sig.key, entry=entry)
        if use_caches and (self.nearest or settings.nearest):
            near = _lookup.nearest(self.kernel_id, kind, fit, sig.shapes, sig.statics)
            if near is not None:
                return Choice(config=dict(near.config), source="nearest", key=sig.key, entry=near)
        if measure is not None and use_caches and not sweeping:
            self._missed(sig, kind, settings.on_miss)
        return Choice(config=default, source="default", key=sig.key)

    def _missed(self, sig: Signature, kind: str, on_miss: str) -> None:
        """What ``JAXTUNE_ON_MISS`` says a traced call with no tuned config does: nothing
        (``default``), one warning per key (``warn``), or :class:`MissError`."""
        if on_miss == "default":
            return
        text = _MSG_MISS.format(kernel=self.kernel_id, key=sig.key or "(no arguments)", kind=kind)
        if on_miss == "error":
            raise MissError(text)
        with self._lock:
            if (kind, sig.key) in self._warned_misses:
                return
            self._warned_misses.add((kind, sig.key))
        warnings.warn(text, JaxtuneWarning, stacklevel=6)

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
        settings = _config.settings()
        timing = "vjp" if self.timing == "auto" and differentiated else self.sweep_timing()
        plan = SweepPlan(
            kernel=self.kernel_id,
            key=sig.key,
            configs=tuple(space),
            default=default,
            shapes=sig.shapes,
            statics=sig.statics,
            timeout_s=self.timeout or settings.timeout,
            options=self.timing_options or _timing.DEFAULT,
            verbose=settings.verbose,
            search=self.search,
            budget=self.budget or budget_setting(),
            timer=self.timer or settings.timer,
            timing=timing,
        )
        return SweepTask(
            plan=plan, fn=self.__wrapped__, signature=sig, check=self.check, inputs=self.inputs
        )

    def _sweep(
        self,
        sig: Signature,
        space: list[dict[str, Any]],
        default: dict[str, Any],
        kind: str,
        *,
        measure: Callable[[SweepTask], SweepOutcome] | None = None,
    ) -> Entry:
        task = self.sweep_task(sig, space, default)
        # No lock while user code runs: a kernel that calls itself would wait on its own lock.
        outcome = (measure or default_runner().sweep)(task)
        entry = make_entry(task.plan, outcome, kind, self.version, code=self.code.value)
        if _agree.may_write_cache():
            _cache.user_cache().keep([entry])
            _shared.publish([entry])
        with self._lock:
            self._retuned[kind, sig.key] = task.plan.timing
        return entry

    # -- calls ---------------------------------------------------------------------------

    def _explicit(self, kwargs: dict[str, Any]) -> dict[str, Any] | None:
        names = self._config_names(kwargs)
        given = {k: kwargs[k] for k in names if k in kwargs}
        return given or None

    def __call__(self, *args: Any, **kwargs: Any) -> R:
        # Only for kernels with static arguments or config keywords known at trace time
        # only; the others' class calls the eager jit directly (see __init__).
        return self._call(*args, **kwargs)

    def _call(self, *args: Any, **kwargs: Any) -> R:
        if is_tracing(jax.tree_util.tree_leaves((args, kwargs))):
            return self._inside(*args, **kwargs)
        explicit = self._explicit(kwargs) if kwargs else None
        if explicit is not None:
            rest = {k: v for k, v in kwargs.items() if k not in explicit}
            sig = self.bind(args, rest)
            _, default = self.space_and_default(sig)
            choice = Choice(config={**default, **explicit}, source="explicit", key=sig.key)
            return self._jit_for(sig, choice)(*args, **rest)
        self.bind(args, kwargs)  # jaxtune's own messages for arguments jit would reject
        if _config.fingerprint(_config.DECIDING) != self._deciding:
            self.renew_eager()  # a variable that decides the config changed (see eager.py)
        return self._eager_jit(*args, **kwargs)

    def _inside(self, *args: Any, **kwargs: Any) -> R:
        """A call inside a trace: the caller's, or the eager jit's own (which must not call
        the eager jit again: a kernel without array arguments has no tracer to tell)."""
        explicit = self._explicit(kwargs) if kwargs else None
        if explicit is None:
            return self._traced(args, kwargs)
        rest = {k: v for k, v in kwargs.items() if k not in explicit}
        sig = self.bind(args, rest)
        _, default = self.space_and_default(sig)
        choice = Choice(config={**default, **explicit}, source="explicit", key=sig.key)
        with jax.named_scope(self._marker(sig, choice)):
            return self.__wrapped__(*args, **rest, **choice.config)

    def _traced(self, args: tuple[Any, ...], kwargs: dict[str, Any]) -> R:
        """The kernel called with the config chosen for these (traced) arguments."""
        sig = self.bind(args, kwargs)
        leaves = jax.tree_util.tree_leaves((args, kwargs))
        differentiated = (
            is_differentiated(leaves) or _DIFFERENTIATED.get() or under_differentiation()
        )
        with differentiated_calls(differentiated):
            choice = self._choose(sig, sweep=True)
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
        settings = _config.settings()
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
        args, kwargs = sig.call_arguments(abstract=True)
        return _markers.mark(
            _markers.Mark(
                kernel=self.kernel_id,
                key=sig.key,
                config=dict(choice.config),
                source=choice.source,
                args=args,
                kwargs=kwargs,
                owner=self,
                differentiated=differentiated,
            )
        )

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
            rest = {k: v for k, v in kwargs.items() if k not in explicit}
            sig = self.bind(args, rest)
            _, default = self.space_and_default(sig)
            return Choice(config={**default, **explicit}, source="explicit", key=sig.key)
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
        entry = self._sweep(sig, space, default, _lookup.device_kind())
        retrace_jitted_functions()
        return TuningResult.of(entry)

    def current_entry(self, *args: Any, **kwargs: Any) -> Entry | None:
        """The entry of the user or a packaged cache that a call with these arguments
        would use and a sweep now would keep: for this kernel version, in the space, and
        timed for the pass a sweep would time now (a forward entry does not answer a
        differentiated call); ``None`` otherwise."""
        sig = self.bind(args, kwargs)
        space, default = self.space_and_default(sig)
        fit = _lookup.Fit(self.kernel_id, self.version, [*space, default], code=self.code)
        found = _lookup.cached_entry(self.kernel_id, _lookup.device_kind(), sig.key, fit)
        if found is None or self._wrong_pass(found[0]):
            return None
        return found[0]

    def cost_hint(self, *args: Any, **kwargs: Any) -> dict[str, float] | None:
        """The ``flops=`` / ``bytes=`` hints evaluated for these arguments (for roofline
        reports), or ``None`` when the decorator gave none."""
        if self.flops is None and self.bytes is None:
            return None
        sig = self.bind(args, kwargs)
        a, k = sig.call_arguments(abstract=True)
        out: dict[str, float] = {}
        for label, hint in (("flops", self.flops), ("bytes", self.bytes)):
            if hint is not None:
                out[label] = float(hint(*a, **k) if callable(hint) else hint)
        return out

    def recorded_call(self, mark: Any) -> dict[str, Any]:
        """The recorded call behind a marker of this kernel's (what ``jaxtune tune
        --from-profile`` replays), for a profile's sidecar."""
        return _record.frame_for_mark(mark)

    def tuned_speedup(self, key: str, config: Mapping[str, Any], device_kind: str) -> float | None:
        """The speedup over the default that the user cache measured for ``key`` on
        ``device_kind``, when its entry stored ``config`` (``None`` otherwise: a default,
        an entry of another config, or a cache that cannot say)."""
        try:
            entry = _cache.user_cache().lookup(
                self.kernel_id, device_kind, key, version=self.version
            )
        except Exception:  # a damaged or changed cache: the figure is only a hint
            return None
        if entry is None or dict(entry.config) != dict(config):
            return None
        return float(entry.speedup) if entry.speedup else None
