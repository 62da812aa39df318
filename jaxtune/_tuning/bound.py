"""One call of an ``@autotuned`` kernel as a value: :class:`BoundCall`.

A bound call holds the kernel's options (:class:`KernelOptions`), the call's
:class:`~.signature.Signature`, its pruned space and its default config. Everything jaxtune
decides about the call is one of its methods, so a call can be followed here from its
lookup to the entry written:

- :meth:`BoundCall.choose`: the lookup order, in one place (its steps are the docstring's);
  the cache layers it reads are :mod:`.lookup`'s;
- :meth:`BoundCall.sweep_task` and :meth:`BoundCall.sweep`: the sweep of the call (the pass
  timed, the kernel's timing effort, budget and timer), run into an entry the caches keep;
- :meth:`BoundCall.recorded_call`: the call as a recording (``jaxtune tune --``) and a
  profile's sidecar keep it, with the sweep request that tunes it in a child;
- :meth:`BoundCall.mark`: the marker the call runs under, which maps back, in this process,
  to the call (what a profile asks of it: :meth:`BoundCall.cost_hint`,
  :meth:`BoundCall.recorded_call`, :meth:`BoundCall.tuned_speedup`).

:class:`KernelOptions` is the kernel as the decorator checked it, and binds a call's
arguments into a bound call (the pruned space worked out once per shapes).
"""

from __future__ import annotations

import dataclasses
import inspect
import threading
from collections.abc import Callable, Iterable, Mapping, Sequence
from typing import Any

from .._core import settings as _settings
from .._core.errors import (
    CacheError,
    JaxtuneError,
    JaxtuneWarning,
    MissError,
    SynthesisedValuesWarning,
    TuningFailedError,
    warn_once,
)
from .._core.errors import warn as _warn
from .._core.vocabulary import (
    Choice,
    Entry,
    Measurement,
    RecordedCall,
    Stale,
    StaleReason,
    SweepValues,
    WorkHint,
    config_id,
)
from .._distributed import agree as _agree
from .._program import markers as _markers
from . import lookup as _lookup
from . import staleness as _staleness
from . import sweep_rules as _sweep_rules
from .buckets import Buckets
from .digest import KernelCode
from .options import timing_options
from .signature import Signature
from .space import ConfigSpec
from .state import TUNING_STATE
from .store import cache as _cache
from .sweep.inputs import (
    SYNTHESISED_TEXT,
    describe_values,
    summarise,
    synthesised_ints,
    value_sources,
)
from .sweep.runner import default_runner
from .sweep.search import Budget, budget_setting
from .sweep.shard import SweepSharing
from .sweep.stats import SweepOutcome
from .sweep.work import SweepPlan, SweepTask

__all__ = ["BoundCall", "KernelOptions", "Misses", "marked_call"]

#: Why a call has no tuned config: none at all, or only one tuned for other code.
_WHY_NONE = "no scope, cache, packaged or nearest entry"
_WHY_STALE = (
    "its {layer} entry is stale: it was tuned for other code of the kernel (code changed: "
    "the kernel, a function or Pallas kernel body it reaches, or a module-level constant it "
    "reads, was edited since), and no other layer has a current one"
)

_MSG_MISS = (
    "jaxtune has {what} for {kernel} with key {key} on {kind} ({why}), and "
    "JAXTUNE_ON_MISS says a miss is not to pass silently. "
    "Tune it: run the program once with `jaxtune tune -- python your_program.py` (or "
    "JAXTUNE_MODE=tune), or call jaxtune.tune(step, *args) ahead of time; ship the cache "
    "with `jaxtune cache export`. JAXTUNE_ON_MISS=default runs the default config instead."
)


class Misses:
    """What ``JAXTUNE_ON_MISS`` says a traced call of one kernel with no tuned config does:
    nothing (``default``), one warning per device kind and key (``warn``), or
    :class:`~jaxtune.MissError` (``error``)."""

    def __init__(self) -> None:
        self._warned: set[tuple[str, str]] = set()
        self._lock = threading.Lock()

    def missed(self, kernel: str, kind: str, key: str, on_miss: str, *, stale: str = "") -> None:
        """Acts on a miss of ``kernel`` for ``key`` on ``kind`` (``stale``: the layer whose
        entry was passed over as tuned for other code, if any).

        Raises:
            MissError: ``on_miss`` is ``error``.
        """
        if on_miss == "default":
            return
        what, why = (
            ("only a stale tuned config", _WHY_STALE.format(layer=stale))
            if stale
            else ("no tuned config", _WHY_NONE)
        )
        text = _MSG_MISS.format(
            what=what, kernel=kernel, key=key or "(no arguments)", kind=kind, why=why
        )
        if on_miss == "error":
            raise MissError(text)
        with self._lock:
            if (kind, key) in self._warned:
                return
            self._warned.add((kind, key))
        # Names the user's line; without one, the frame: missed <- the order <- choose <-
        # the kernel's lookup <- its trace <- the call.
        _warn(text, JaxtuneWarning, stacklevel=6)


#: The warning of a sweep on made-up integer or boolean values (see :meth:`BoundCall.sweep`).
SYNTHESISED_WARNING = (
    "jaxtune: {kernel} ({key}) is swept on synthesised values for its integer/boolean "
    "argument(s) {names} ({how}): this flow has only their shapes. Their values often "
    "decide the work (group sizes, lengths, ids, loop counts, masks), so the config stored "
    "may be wrong for the program's values. Give the sweep real values: run the program "
    "under `jaxtune tune -- python prog.py` (it records the values each call runs), call "
    "the kernel or jaxtune.tune(fn, *arrays) with real arrays outside jax.jit, or give "
    "@autotuned(inputs=...) a builder of valid values (docs/values.md)."
)

_MSG_BUCKET = (
    "jaxtune: {kernel}'s config {config} for the bucket {key} is one prune rejects for the "
    "shape {actual}; that call uses {instead} instead, as does every other shape of the "
    "bucket that prune rejects it for (said once per bucket). Give the bucket boundaries "
    "that prune accepts alike, or tune without buckets for such shapes."
)

#: Pruned spaces kept per kernel (per shapes and static values) before the memo starts over.
_SPACES_KEPT = 1024


@dataclasses.dataclass(frozen=True, kw_only=True, slots=True, eq=False)
class KernelOptions:
    """An ``@autotuned`` kernel as its calls need it: the function, the decorator's options
    checked (:mod:`.options`), and what this process did with the kernel (its sweeps in
    retune mode, its miss warnings, its pruned spaces). Made once per kernel by
    :class:`~.autotuned.Autotuned`; equal only to itself."""

    fn: Callable[..., Any]
    kernel_id: str
    spec: ConfigSpec
    signature: inspect.Signature
    code: KernelCode
    static_argnames: frozenset[str] = frozenset()
    key_fn: Callable[..., Any] | None = None
    buckets: Buckets | None = None
    version: str = ""
    check: Any = "auto"
    inputs: Callable[..., Any] | None = None
    timeout: float | None = None
    search: Any = "auto"
    budget: Budget | None = None
    timer: str | None = None
    timing: str = "auto"
    effort: str = "full"
    nearest: bool = False
    flops: float | Callable[..., float] | None = None
    bytes: float | Callable[..., float] | None = None
    #: What this process swept the kernel for in retune mode.
    retunes: _sweep_rules.Retunes = dataclasses.field(default_factory=_sweep_rules.Retunes)
    #: The misses it warned about.
    misses: Misses = dataclasses.field(default_factory=Misses)
    #: The pruned space and default per (shapes, statics): prune runs once per shape.
    spaces: dict[Any, tuple[tuple[dict[str, Any], ...], dict[str, Any]]] = dataclasses.field(
        default_factory=dict, repr=False
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

    def bound(
        self,
        sig: Signature,
        space: Sequence[Mapping[str, Any]] | None = None,
        default: Mapping[str, Any] | None = None,
    ) -> BoundCall:
        """The call bound as ``sig``, over its pruned space and default (worked out once per
        shapes and static values; ``prune`` and a callable space must be pure), or over
        ``space`` and ``default`` when given (a sweep of some configs only).

        The pruned space is the one every call of these shapes shares (a mark keeps its
        call for the process's life): its configs are read, never changed."""
        pruned, chosen = self._pruned(sig) if space is None or default is None else ((), {})
        return BoundCall(
            kernel=self,
            sig=sig,
            space=pruned if space is None else tuple(dict(c) for c in space),
            default=dict(chosen if default is None else default),
            actual=None if sig.actual is None else self.bound(sig.actual),
        )

    def _pruned(self, sig: Signature) -> tuple[tuple[dict[str, Any], ...], dict[str, Any]]:
        """The pruned space and the default config for a call bound as ``sig``, worked out
        once per shapes and static values."""
        memo = (sig.shapes, sig.statics)
        known = self.spaces.get(memo)
        if known is None:
            args, kwargs = sig.call_arguments(abstract=True)
            pruned = self.spec.space(args, kwargs, call=sig.key)
            default = self.spec.default_config(pruned, args, kwargs, call=sig.key)
            known = (tuple(pruned), default)
            if len(self.spaces) >= _SPACES_KEPT:
                self.spaces.clear()
            self.spaces[memo] = known
        return known

    def cost_hint(self, sig: Signature) -> dict[str, float] | None:
        """The ``flops=`` / ``bytes=`` hints evaluated for a call bound as ``sig``, or
        ``None`` when the decorator gave none."""
        if self.flops is None and self.bytes is None:
            return None
        a, k = sig.call_arguments(abstract=True)
        out: dict[str, float] = {}
        for label, hint in (("flops", self.flops), ("bytes", self.bytes)):
            if hint is not None:
                out[label] = float(hint(*a, **k) if callable(hint) else hint)
        return out

    def sweep(
        self, args: tuple[Any, ...], kwargs: Mapping[str, Any], more: Iterable[Any] = ()
    ) -> Entry:
        """Sweeps the call with these arguments now (whatever ``JAXTUNE_MODE`` says) and
        returns its entry, kept by the caches; ``more``: further value sets of the same
        call (:class:`~.values.Collected`), timed with these as a mix.

        Raises:
            TuningFailedError: every config failed.
        """
        call = self.bound(self.bind(tuple(args), dict(kwargs)))
        sets = []
        for other in more:
            bound = self.bind(tuple(other.args), dict(other.kwargs))
            sets.append({name: bound.value(name) for name in bound.dynamic})
        return call.sweep(_lookup.device_kind(), value_sets=sets)


@dataclasses.dataclass(frozen=True, kw_only=True, slots=True)
class BoundCall:
    """One call of a kernel: its options, the call's signature, its pruned space and its
    default config, with the decisions about the call as methods (see the module).

    ``actual``: when ``sig`` stands for a bucket (``buckets=``), the call as it was made,
    bound over its own pruned space (:meth:`within_bucket`)."""

    kernel: KernelOptions
    sig: Signature
    space: tuple[dict[str, Any], ...]
    default: dict[str, Any]
    actual: BoundCall | None = None

    @property
    def fn(self) -> Callable[..., Any]:
        """The decorated function (its source lines locate the kernel's ops)."""
        return self.kernel.fn

    def _fit(self, **options: Any) -> _lookup.Fit:
        """The configs the call can run (its space and default), to check stored ones by."""
        return _lookup.Fit(
            self.kernel.kernel_id,
            self.kernel.version,
            [*self.space, self.default],
            code=self.kernel.code,
            **options,
        )

    # -- the lookup order ------------------------------------------------------------------

    def choose(self, *, traced: bool) -> Choice:
        """The config of the call, after explicit keywords: the lookup order, in one place.

        ``traced``: the call is being traced, so tune mode may sweep on a miss (and retune
        mode on a hit), a miss is what ``JAXTUNE_ON_MISS`` says, and a ``jax.distributed``
        job agrees on the answer; without it (``config_for``) the order never sweeps,
        answers with the agreed config once there is one, and a miss is silent.

        1. the innermost ``with TuningResult`` scope that has a usable entry (retune mode
           skips it for a key this process has not swept yet);
        2. cross-host agreement: process 0 runs steps 3 to 7 and the others adopt its
           answer;
        3. the user cache, then the shared store read through into it, then the packaged
           caches (:func:`~.lookup.cached_entry`): a usable entry, unless tune mode would
           replace it (stale, tuned for the forward pass of a differentiated call) or
           retune mode has not swept this key yet;
        4. in tune and retune mode, a sweep (:meth:`sweep`), whose entry the caches keep;
           if every config fails, one warning, and a stale entry passed over in step 3
           beats the default;
        5. the nearest tuned shape's config (``nearest=True`` or ``JAXTUNE_NEAREST=1``);
        6. a miss: what ``JAXTUNE_ON_MISS`` says (only for a traced call that does not
           sweep);
        7. the default config.

        ``JAXTUNE_MODE=off`` skips every cache (steps 3 and 5) and never sweeps. The answer
        is then made safe for the actual shape of a bucketed call (:meth:`within_bucket`).

        Raises:
            MissError: step 6, with ``JAXTUNE_ON_MISS=error``.
        """
        return self.within_bucket(self._in_order(traced=traced))

    def _in_order(self, *, traced: bool) -> Choice:
        """Steps 1 to 7 of :meth:`choose`, for the bound shape."""
        kernel, sig, space, default = self.kernel, self.sig, self.space, self.default
        kind = _lookup.device_kind()

        # 1. Scope. config_for never sweeps, so it answers what the scopes and caches hold
        # even in retune mode.
        if not (traced and kernel.retunes.pending(kind, sig.key, kernel.timing)):
            scoped = _lookup.scoped_entry(kernel.kernel_id, kind, sig.key, self._fit())
            if scoped is not None:
                return Choice(config=dict(scoped.config), source="scope", key=sig.key, entry=scoped)

        def rest(run_sweep: Callable[[SweepTask], SweepOutcome] | None) -> Choice:
            """Steps 3 to 7, sweeping through ``run_sweep`` (``None``: never)."""
            settings = _settings.settings()
            use_caches = settings.mode != "off"
            sweeping = run_sweep is not None and settings.mode in ("tune", "retune")
            # A sweep allowed now replaces a stale entry (another toolchain, new configs).
            fit = self._fit(swept=space, refresh=sweeping)
            # 3. User cache, shared store, packaged caches.
            retuning = run_sweep is not None and kernel.retunes.pending(
                kind, sig.key, kernel.timing
            )
            if use_caches and not retuning:
                found = _lookup.cached_entry(kernel.kernel_id, kind, sig.key, fit)
                if found is not None and not (sweeping and self._wrong_pass(found[0])):
                    entry, source = found
                    return Choice(
                        config=dict(entry.config),
                        source=source,
                        key=sig.key,
                        entry=entry,
                        stale=fit.last_stale,
                    )
            # 4. Sweep (tune and retune mode).
            if sweeping:
                try:
                    entry = self.sweep(kind, run_sweep=run_sweep)
                except TuningFailedError as e:
                    # Names the user's line; without one, the frame: the order <- choose <-
                    # the kernel's lookup <- its trace <- the call.
                    _warn(
                        f"jaxtune could not tune {kernel.kernel_id} for {sig.key}; falling "
                        f"back. {e}",
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
                    return Choice(
                        config=dict(entry.config), source="cache", key=sig.key, entry=entry
                    )
            # 5. Nearest tuned shape (opt-in).
            if use_caches and (kernel.nearest or settings.nearest):
                near = _lookup.nearest(kernel.kernel_id, kind, fit, sig.shapes, sig.statics)
                if near is not None:
                    return Choice(
                        config=dict(near.config), source="nearest", key=sig.key, entry=near
                    )
            # 6. Miss.
            if run_sweep is not None and use_caches and not sweeping:
                kernel.misses.missed(
                    kernel.kernel_id, kind, sig.key, settings.on_miss, stale=fit.code_stale
                )
            # 7. Default.
            return Choice(config=dict(default), source="default", key=sig.key)

        # 2. Agreement.
        if not traced:  # config_for: the agreed config once there is one, else this process's
            agreed = _agree.decided(kernel.kernel_id, kernel.version, sig.key, kind)
            return agreed or rest(None)
        runner = default_runner()
        if _agree.key_value() is None:  # one process: nothing to agree on
            return rest(runner.sweep)
        question = _agree.Question(
            kernel=kernel.kernel_id,
            key=sig.key,
            version=kernel.version,
            device_kind=kind,
            decide=rest,
            task=self.sweep_task,
            sharing=SweepSharing(runner),
        )
        return _agree.agree(question)

    def within_bucket(self, choice: Choice) -> Choice:
        """``choice``, made for the bucket the call stands for, made safe for the call
        itself (:attr:`actual`): a config of the actual shape's pruned space (or its
        default), never one its ``prune`` rejects. A stored config that is not becomes the
        fastest config the entry measured that is, else the actual shape's default, with
        one warning per bucket; a default becomes the actual shape's default."""
        actual = self.actual
        if actual is None or choice.source == "explicit":
            return choice
        if choice.source == "default":
            return Choice(config=dict(actual.default), source="default", key=choice.key)
        fit = _lookup.Fit(
            self.kernel.kernel_id, self.kernel.version, [*actual.space, actual.default]
        )
        if fit.holds(choice.config):
            return choice
        timed = [
            m
            for m in (choice.entry.measurements if choice.entry is not None else ())
            if isinstance(m, Measurement) and fit.holds(m.config)
        ]
        best = min(timed, key=lambda m: m.time_us, default=None)
        config = dict(best.config) if best is not None else dict(actual.default)
        instead = (
            f"{config_id(config)}, the fastest config the bucket's sweep measured that prune "
            "accepts"
            if best is not None
            else f"the default {config_id(config)}"
        )
        kernel = self.kernel.kernel_id
        seen = (kernel, _lookup.device_kind(), choice.key, "bucket", config_id(choice.config))
        text = _MSG_BUCKET.format(
            kernel=kernel,
            config=config_id(choice.config),
            key=choice.key,
            actual=actual.sig.key,
            instead=instead,
        )
        warn_once(("lookup", *seen), text, stacklevel=4)
        return Choice(config=config, source=choice.source, key=choice.key, entry=choice.entry)

    def current_entry(self) -> Entry | None:
        """The entry of the user or a packaged cache that the call would use and a sweep
        now would keep: for this kernel version, in the space, and timed for the pass a
        sweep would time now; ``None`` otherwise."""
        found = _lookup.cached_entry(
            self.kernel.kernel_id, _lookup.device_kind(), self.sig.key, self._fit()
        )
        if found is None or self._wrong_pass(found[0]):
            return None
        return found[0]

    def _wrong_pass(self, entry: Entry) -> bool:
        """Whether ``entry`` timed the wrong pass for a sweep of the call started now
        (:func:`~.staleness.wrong_pass`)."""
        timed_now = _sweep_rules.pass_now(self.kernel.timing)
        return _staleness.wrong_pass(entry.timing, timed_now) is not None

    def staleness(self, choice: Choice) -> Stale | None:
        """Why the entry behind the call's config, or the entry its lookup passed over, is
        stale (:func:`~.staleness.judge`'s reason: another toolchain, new configs in the
        space, code changed, config keys renamed, config outside the space); ``None`` when
        the call used a current entry or no entry exists (a plain miss)."""
        if choice.entry is not None and choice.source in ("cache", "packaged", "scope"):
            if choice.stale is not None:
                return choice.stale
            return _staleness.toolchain(choice.entry)
        if choice.source not in ("default", "nearest"):
            return None
        fit = self._fit()
        kernel, kind = self.kernel, _lookup.device_kind()
        passed_over = (StaleReason.KEYS, StaleReason.CODE, StaleReason.OUTSIDE)
        for layer in (_cache.user_cache(), *_cache.layers()):
            entry = layer.lookup(kernel.kernel_id, kind, self.sig.key, version=kernel.version)
            if entry is None:
                continue
            stale = next(
                _staleness.judge(
                    entry,
                    code_changed=fit.stale_code(entry),
                    names=fit.names,
                    space=fit.typed_space,
                ),
                None,
            )
            if stale is not None and stale.reason in passed_over:
                return stale
        return None

    # -- the sweep -------------------------------------------------------------------------

    def sweep_task(
        self, *, differentiated: bool = False, value_sets: Sequence[Mapping[str, Any]] = ()
    ) -> SweepTask:
        """The sweep of the call over its space (``differentiated``: the call was traced
        under ``jax.grad``/``jax.vjp``, so ``timing="auto"`` times forward and backward;
        ``value_sets``: further values of the call's dynamic arguments, timed with its own
        as a mix)."""
        kernel, sig = self.kernel, self.sig
        settings = _settings.settings()
        sets = [dict(values) for values in value_sets]
        summaries = [{n: summarise(sig.value(n)) for n in sig.dynamic}] if sets else []
        summaries += [{n: summarise(v) for n, v in values.items()} for values in sets]
        timed = (
            "vjp"
            if kernel.timing == "auto" and differentiated
            else _sweep_rules.pass_now(kernel.timing)
        )
        plan = SweepPlan(
            kernel=kernel.kernel_id,
            key=sig.key,
            configs=tuple(self.space),
            default=self.default,
            shapes=sig.shapes,
            statics=sig.statics,
            timeout_s=kernel.timeout or settings.timeout,
            options=timing_options(kernel.effort),
            verbose=settings.verbose,
            search=kernel.search,
            budget=kernel.budget or budget_setting(),
            timer=kernel.timer or settings.timer,
            timing=timed,
            values=self._values_and_work(summaries),
        )
        return SweepTask(
            plan=plan,
            fn=kernel.fn,
            signature=sig,
            check=kernel.check,
            inputs=kernel.inputs,
            value_sets=tuple(sets),
        )

    def _values_and_work(self, summaries: list[dict[str, str]]) -> SweepValues:
        """What the entry records of the values (:func:`~.sweep.inputs.describe_values`),
        with the work the kernel's ``flops=``/``bytes=`` hints count for the call
        (``work``: a time that implies more than the device's peak is flagged)."""
        values = describe_values(
            self.sig, inputs_given=self.kernel.inputs is not None, sets=summaries
        )
        try:
            work = self.cost_hint()
        except Exception:  # a hint that cannot count this call: no figure, as in a profile
            work = None
        if work:
            values = dataclasses.replace(
                values, work=WorkHint(flops=work.get("flops"), bytes=work.get("bytes"))
            )
        return values

    def sweep(
        self,
        kind: str,
        *,
        run_sweep: Callable[[SweepTask], SweepOutcome] | None = None,
        value_sets: Sequence[Mapping[str, Any]] = (),
    ) -> Entry:
        """Sweeps the call on device kind ``kind`` through ``run_sweep`` (default: the
        process's runner) and returns the entry, kept in the user cache and published to
        the shared store by the process that writes the cache (``value_sets``: see
        :meth:`sweep_task`). A sweep that makes up integer or boolean values warns once
        per kernel (:class:`~jaxtune.SynthesisedValuesWarning`).

        Raises:
            TuningFailedError: every config failed.
        """
        kernel, sig = self.kernel, self.sig
        swept = self.sweep_task(value_sets=value_sets)
        made_up = synthesised_ints(sig, value_sources(sig, inputs_given=swept.inputs is not None))
        if made_up:
            warn_once(
                ("synthesised", kernel.kernel_id),
                SYNTHESISED_WARNING.format(
                    kernel=kernel.kernel_id,
                    key=sig.key,
                    names=", ".join(made_up),
                    how=SYNTHESISED_TEXT,
                ),
                SynthesisedValuesWarning,
            )
        # No lock while user code runs: a kernel that calls itself would wait on its own lock.
        outcome = (run_sweep or default_runner().sweep)(swept)
        entry = _sweep_rules.save_entry(
            swept.plan, outcome, kind, kernel.version, code=kernel.code.value
        )
        kernel.retunes.done(kind, sig.key, swept.plan.timing)
        return entry

    # -- the recorded call -----------------------------------------------------------------

    def recorded_call(self, choice: Choice, *, differentiated: bool = False) -> RecordedCall:
        """The call as a recording keeps it: kernel id, key, shapes, where its config came
        from, why the entry it had is stale (:meth:`staleness`, its words and reason), the
        kernel's code digest, and the sweep request that tunes it in a child, without this
        process's variables (or ``error`` when the kernel cannot travel).

        A ``choice`` without its entry (a profile's mark keeps only the config and where it
        came from) gets it from the lookup, which never sweeps here, so the call names the
        pass the entry timed; a cache that cannot say only loses that label.
        ``differentiated``: the call runs its backward pass too (``timing="auto"`` times
        forward and backward, as a sweep in that program would)."""
        from .._isolation.devices import sweep_devices
        from .._isolation.wire import NotTransportable
        from .sweep.requests import SweepRequest, sweep_request

        if choice.entry is None and choice.source not in ("default", "explicit"):
            choice = self._with_entry(choice)
        devices = sweep_devices()
        stale = self.staleness(choice)
        call: RecordedCall[SweepRequest] = RecordedCall(
            kernel=self.kernel.kernel_id,
            key=self.sig.key,
            source=choice.source,
            # The pass the entry the config came from timed ("" without one): a forward
            # entry of a call that is differentiated is tuned again.
            entry_timing=choice.entry.timing if choice.entry is not None else "",
            config=dict(choice.config),
            device_kind=_lookup.device_kind(),
            version=self.kernel.version,
            shapes=self.sig.shapes,
            statics=self.sig.statics,
            devices=None if devices is None else tuple(devices),
            code=self.kernel.code.value,
            # The words for people, the reason for the commands that act on it.
            stale="" if stale is None else stale.text,
            stale_reason=None if stale is None else stale.reason,
        )
        try:
            task = self.sweep_task(differentiated=differentiated)
            return dataclasses.replace(
                call, timing=task.plan.timing, request=sweep_request(task).recorded()
            )
        except NotTransportable as e:
            return dataclasses.replace(call, error=str(e))

    def _with_entry(self, choice: Choice) -> Choice:
        """``choice`` with the entry behind its config, when the lookup finds that config."""
        try:
            found = self.choose(traced=False)
        except (JaxtuneError, OSError):  # a cache that cannot say (any other is a bug)
            return choice
        if dict(found.config) != dict(choice.config):
            return choice
        return dataclasses.replace(choice, entry=found.entry)

    # -- the profile mark ------------------------------------------------------------------

    def mark(self, choice: Choice, *, differentiated: bool = False) -> str:
        """The scope name the call runs under with ``choice`` (see
        :mod:`jaxtune._program.markers`); the call behind the mark, with abstract arguments,
        which outlive the trace, is kept for :func:`marked_call`."""
        abstract = self.abstract()
        args, kwargs = abstract.sig.call_arguments()
        mark = _markers.Mark(
            kernel=self.kernel.kernel_id,
            key=self.sig.key,
            config=dict(choice.config),
            source=choice.source,
            args=args,
            kwargs=kwargs,
            fn=self.fn,
            differentiated=differentiated,
        )
        with _MARKED_LOCK:
            _MARKED[_markers.digest(mark)] = abstract
        return _markers.mark(mark)

    def abstract(self) -> BoundCall:
        """The call with every array as its ``jax.ShapeDtypeStruct``."""
        return dataclasses.replace(
            self,
            sig=self.sig.abstract(),
            actual=None if self.actual is None else self.actual.abstract(),
        )

    def cost_hint(self) -> dict[str, float] | None:
        """The ``flops=`` / ``bytes=`` hints evaluated for the call, or ``None`` when the
        decorator gave none."""
        return self.kernel.cost_hint(self.sig)

    def tuned_speedup(self, config: Mapping[str, Any], device_kind: str) -> float | None:
        """The speedup over the default that the user cache measured for the call on
        ``device_kind``, when its entry stored ``config`` (``None`` otherwise: a default,
        an entry of another config, or a cache that cannot say)."""
        try:
            entry = _cache.user_cache().lookup(
                self.kernel.kernel_id, device_kind, self.sig.key, version=self.kernel.version
            )
        except (CacheError, OSError):  # a damaged or unreadable cache: the figure is a hint
            return None
        if entry is None or dict(entry.config) != dict(config):
            return None
        return float(entry.speedup) if entry.speedup else None


_MARKED_LOCK = threading.Lock()
_MARKED: dict[str, BoundCall] = TUNING_STATE.keep(
    "marked calls",
    dict,
    "the call behind each mark this process made, by the mark's digest",
    lock=_MARKED_LOCK,
)


def marked_call(digest: str) -> BoundCall | None:
    """The call behind a mark's digest (with abstract arguments), when this process made
    the mark: what a profile's capture (``jaxtune._profiling.calls``) and ``jaxtune.tune``
    ask of the calls they find in a program (cost hints, the recorded call, the tuned
    speedup, the current entry)."""
    with _MARKED_LOCK:
        return _MARKED.get(digest)
