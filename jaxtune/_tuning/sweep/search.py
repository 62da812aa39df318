"""Both sides. Which configs a sweep measures: search strategies under a budget.

A strategy looks at what has been measured so far (:class:`SearchState`) and proposes the
next configs; a :class:`Search` hands them out in batches (:meth:`Search.next_batch`,
then :meth:`Search.record` of their results) until the strategy has nothing more to propose
or the :class:`Budget` (configs and/or seconds) is spent. The caller measures each batch
(the sweep's driver, through the runner: this process or the child); nothing here knows
where configs run. :func:`run_search` is the same loop around a ``measure`` function.

Strategies: ``"exhaustive"`` (every config, in space order), ``"random"`` (a seeded
permutation), ``"coordinate"`` (coordinate descent from the default), ``"model"`` (a
random start, then configs an additive model of log time predicts fast, mixed with the
neighbours of the best so far) and ``"auto"`` (exhaustive when the budget covers the space,
``"model"`` above that).
"""

from __future__ import annotations

import dataclasses
import math
import time
from collections.abc import Callable, Mapping, Sequence
from typing import Any, ClassVar, Protocol, runtime_checkable

import numpy as np

from ..._core import settings as _settings
from ..._core.errors import ConfigSpaceError
from ..._core.vocabulary import Config

__all__ = [
    "DEFAULT_CONFIGS",
    "STRATEGIES",
    "Budget",
    "Coordinate",
    "Exhaustive",
    "Model",
    "Random",
    "Search",
    "SearchState",
    "Searched",
    "Strategy",
    "budget_setting",
    "configs_to_measure",
    "run_search",
]


#: Configs a budgeted strategy measures when neither ``budget=`` nor ``JAXTUNE_BUDGET`` says.
DEFAULT_CONFIGS = 64
#: With a seconds budget, batches stay this small so that the clock is checked often.
_SECONDS_BATCH = 8


@dataclasses.dataclass(frozen=True, kw_only=True, slots=True)
class Budget:
    """How much a sweep may measure: at most ``configs`` configs and/or ``seconds`` seconds.

    Either or both may be set; ``Budget()`` means the strategy's own. The sweep keeps the
    best config found when the budget runs out.

    Examples:
        >>> import jaxtune
        >>> jaxtune.Budget(configs=32, seconds=60.0)
        Budget(configs=32, seconds=60.0)
    """

    #: Written as ``[configs, seconds]`` in a plan (:mod:`jaxtune._core.typed`).
    WIRE_AS_LIST: ClassVar = True

    configs: int | None = None
    seconds: float | None = None

    def __post_init__(self) -> None:
        c, s = self.configs, self.seconds
        if c is not None and (isinstance(c, bool) or not isinstance(c, int) or c < 1):
            raise ConfigSpaceError(
                f"Budget(configs={c!r}): configs must be a positive int, such as 64."
            )
        ok_seconds = isinstance(s, (int, float)) and not isinstance(s, bool)
        if s is not None and not (ok_seconds and s > 0 and math.isfinite(s)):
            raise ConfigSpaceError(
                f"Budget(seconds={s!r}): seconds must be a positive number, such as 120."
            )

    @classmethod
    def of(cls, value: Any) -> Budget | None:
        """A budget from ``budget=``: ``None``, an int (configs) or a :class:`Budget`.

        Raises:
            ConfigSpaceError: anything else.
        """
        if value is None or isinstance(value, Budget):
            return value
        if isinstance(value, int) and not isinstance(value, bool):
            return cls(configs=value)
        raise ConfigSpaceError(
            f"budget={value!r}: expected an int (configs to measure) or "
            "jaxtune.Budget(configs=..., seconds=...)."
        )


@dataclasses.dataclass(frozen=True, kw_only=True, slots=True)
class SearchState:
    """What a strategy sees: the space, what was measured, and what the budget allows.

    ``times`` maps the index of every measured config to its median time in µs, or ``None``
    when it failed; ``remaining`` is how many more configs the budget allows.
    """

    space: tuple[Mapping[str, Any], ...]
    default: int | None
    times: Mapping[int, float | None]
    remaining: int
    budget: int

    def unmeasured(self) -> list[int]:
        """Indices not measured yet, in space order."""
        return [i for i in range(len(self.space)) if i not in self.times]

    def best(self) -> int | None:
        """The index of the fastest config measured so far (``None``: none worked)."""
        ok = [(t, i) for i, t in self.times.items() if t is not None]
        return min(ok)[1] if ok else None

    def neighbours(self, index: int) -> list[int]:
        """Indices of the configs that differ from ``index`` in exactly one knob."""
        center = self.space[index]
        return [
            i
            for i, config in enumerate(self.space)
            if i != index
            and len(config) == len(center)
            and sum(config.get(k, _MISSING) != v for k, v in center.items()) == 1
        ]


_MISSING = object()


@runtime_checkable
class Strategy(Protocol):
    """A search strategy: proposes which configs to measure next.

    ``propose`` returns indices into ``state.space``; measured ones are skipped, the list
    is cut to the budget, and an empty proposal ends the search. A strategy should be
    deterministic for a given state, so repeated sweeps measure the same configs.

    Examples:
        >>> class EveryOther:
        ...     name = "every-other"
        ...
        ...     def propose(self, state):
        ...         return [i for i in state.unmeasured() if i % 2 == 0]
        >>> isinstance(EveryOther(), Strategy)
        True
    """

    name: str

    def propose(self, state: SearchState) -> Sequence[int]: ...


class Exhaustive:
    """Every config of the space, in space order."""

    name = "exhaustive"

    def propose(self, state: SearchState) -> Sequence[int]:
        return state.unmeasured()


class Random:
    """Configs in a permutation fixed by ``seed`` (the default first)."""

    name = "random"

    def __init__(self, seed: int = 0) -> None:
        self.seed = seed

    def propose(self, state: SearchState) -> Sequence[int]:
        order = np.random.default_rng(self.seed).permutation(len(state.space)).tolist()
        if state.default is not None:
            order.remove(state.default)
            order.insert(0, state.default)
        return [i for i in order if i not in state.times]


class Coordinate:
    """Coordinate descent from the default: measure every config one knob away from the
    best so far, move to the best, repeat; stops at a config none of whose neighbours is
    faster (a local optimum), or when the budget runs out."""

    name = "coordinate"

    def propose(self, state: SearchState) -> Sequence[int]:
        best = state.best()
        if best is None:
            start = state.default if state.default is not None else 0
            return [start] if start not in state.times else state.unmeasured()[:1]
        return [i for i in state.neighbours(best) if i not in state.times]


class Model:
    """Model-based search: a seeded random start (a quarter of the budget, at least 8),
    then rounds that measure the configs an additive model of log time (one term per knob
    value, fitted by ridge regression) predicts fastest, together with the unmeasured
    neighbours of the best config so far. Failed configs count as slow, and configs a
    second fit predicts will fail like them (the same knob values) come last."""

    name = "model"

    def __init__(self, seed: int = 0, start: float = 0.25) -> None:
        self.seed = seed
        self.start = start

    def propose(self, state: SearchState) -> Sequence[int]:
        todo = state.unmeasured()
        if not todo:
            return []
        start = max(8, math.ceil(self.start * state.budget))
        if len(state.times) < start:
            return list(Random(self.seed).propose(state))[: start - len(state.times)]
        batch = max(2, state.budget // 16)
        best = state.best()
        if len(todo) > MODEL_POOL:
            # Scores only a seeded sample of what is left: a budgeted search must not
            # touch every config of a huge space each round (10^6 took minutes).
            rng = np.random.default_rng(self.seed + len(state.times))
            todo = sorted(rng.choice(np.asarray(todo), MODEL_POOL, replace=False).tolist())
        # Configs like those that failed (a knob value Mosaic refuses, a tile too large
        # for VMEM) are proposed last: a second fit predicts failure from the same knobs.
        failing = set(_failing(state, todo))
        near = [i for i in _near(state, best, todo) if i not in failing] if best is not None else []
        predicted = _predict(state, todo)
        ranked = [todo[j] for j in np.argsort(predicted, kind="stable")]
        ranked = [i for i in ranked if i not in failing] + [i for i in ranked if i in failing]
        picks = list(dict.fromkeys([*ranked[: batch // 2], *near[: batch // 2], *ranked]))
        return picks[:batch]


#: Most unmeasured configs :class:`Model` scores in one round (a seeded sample of them
#: when more are left; all of them in smaller spaces).
MODEL_POOL = 4096


def _near(state: SearchState, best: int, todo: list[int]) -> list[int]:
    """The unmeasured configs among ``todo`` one knob away from ``best``."""
    center = state.space[best]
    return [
        i
        for i in todo
        if len(state.space[i]) == len(center)
        and sum(state.space[i].get(k, _MISSING) != v for k, v in center.items()) == 1
    ]


def _features(space: Sequence[Mapping[str, Any]]) -> np.ndarray:
    """One-hot columns, one per (knob, value) seen in the space, plus a constant."""
    columns: dict[tuple[str, str], int] = {}
    for config in space:
        for k, v in config.items():
            columns.setdefault((k, repr(v)), len(columns))
    x = np.zeros((len(space), len(columns) + 1))
    x[:, -1] = 1.0
    for row, config in enumerate(space):
        for k, v in config.items():
            x[row, columns[(k, repr(v))]] = 1.0
    return x


def _predict(state: SearchState, todo: list[int]) -> np.ndarray:
    """Predicted log time of each ``todo`` config from a ridge fit on the measured ones
    (features of those configs only, never of the whole space)."""
    measured = list(state.times)
    x = _features([state.space[i] for i in (*measured, *todo)])
    ok = [t for t in state.times.values() if t is not None]
    worst = math.log(max(ok)) + 1.0 if ok else 0.0
    y = np.array([math.log(t) if t is not None else worst for t in state.times.values()])
    a = x[: len(measured)]
    ridge = 1e-2 * np.eye(a.shape[1])
    coef = np.linalg.solve(a.T @ a + ridge, a.T @ y)
    return np.asarray(x[len(measured) :] @ coef)


def _failing(state: SearchState, todo: list[int]) -> list[int]:
    """Those of ``todo`` a ridge fit of the measured configs' failures (1 failed, 0 timed)
    on their knob values predicts more likely to fail than not; none before any failed."""
    if all(t is not None for t in state.times.values()):
        return []
    measured = list(state.times)
    x = _features([state.space[i] for i in (*measured, *todo)])
    y = np.array([1.0 if t is None else 0.0 for t in state.times.values()])
    a = x[: len(measured)]
    coef = np.linalg.solve(a.T @ a + 1e-2 * np.eye(a.shape[1]), a.T @ y)
    return [i for i, p in zip(todo, x[len(measured) :] @ coef, strict=True) if p > 0.5]


class Auto:
    """Exhaustive when the budget covers the pruned space, :class:`Model` above that."""

    name = "auto"

    def __init__(self) -> None:
        self.model = Model()

    def propose(self, state: SearchState) -> Sequence[int]:
        if state.budget >= len(state.space):
            return state.unmeasured()
        return self.model.propose(state)


STRATEGIES: dict[str, Callable[[], Strategy]] = {
    "auto": Auto,
    "exhaustive": Exhaustive,
    "random": Random,
    "coordinate": Coordinate,
    "model": Model,
}


def strategy_of(search: Any) -> Strategy:
    """The strategy for ``search=``: a name in :data:`STRATEGIES` or a strategy object.

    Raises:
        ConfigSpaceError: an unknown name, or an object without ``name`` and ``propose``.
    """
    if isinstance(search, str):
        make = STRATEGIES.get(search)
        if make is None:
            raise ConfigSpaceError(
                f"search={search!r} is not a strategy; expected one of "
                f"{', '.join(map(repr, STRATEGIES))} or an object with a `name` and a "
                "`propose(state)` method (jaxtune.Strategy)."
            )
        return make()
    if isinstance(search, Strategy) and isinstance(getattr(search, "name", None), str):
        return search
    raise ConfigSpaceError(
        f"search={search!r} ({type(search).__name__}) is not a strategy: give a name "
        f"({', '.join(map(repr, STRATEGIES))}) or an object with a `name` string and a "
        "`propose(state)` method (see jaxtune.Strategy)."
    )


def configs_to_measure(strategy: Strategy, budget: Budget | None, size: int) -> int:
    """How many configs of a ``size``-config space ``strategy`` may measure."""
    if budget is not None and budget.configs is not None:
        return min(size, budget.configs)
    if isinstance(strategy, Exhaustive) or (budget is not None and budget.seconds is not None):
        return size
    if isinstance(strategy, Auto) and size <= DEFAULT_CONFIGS:
        return size
    return min(size, DEFAULT_CONFIGS)


@dataclasses.dataclass(frozen=True, kw_only=True, slots=True)
class Searched:
    """What a search did: its strategy's name, configs measured, and the space's size."""

    strategy: str
    measured: int
    total: int


Measure = Callable[[list[Config]], Mapping[str, Any]]


class Search:
    """A search under way over ``space``: :meth:`next_batch` gives the configs
    ``strategy`` proposes next (``None`` once it stops or the budget is spent), and
    :meth:`record` takes their results (``Measurement | Failure`` by config id). The default
    is in the first batch (as the reference), also when outside the space. The caller
    measures each batch where it likes: nothing here calls back."""

    def __init__(
        self,
        space: Sequence[Config],
        default: Config,
        *,
        strategy: Strategy,
        budget: Budget | None,
        config_id: Callable[[Mapping[str, Any]], str],
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        # A config listed twice is one config (measured once, counted once).
        unique: dict[str, Config] = {}
        for c in space:
            unique.setdefault(config_id(c), c)
        self.space = list(unique.values())
        self.default = default
        self.strategy = strategy
        self._where = {cid: i for i, cid in enumerate(unique)}
        self._default_index = self._where.get(config_id(default))
        self._cap = configs_to_measure(strategy, budget, len(self.space))
        self._seconds = budget.seconds if budget is not None else None
        self._clock = clock
        self._start = clock()
        #: Every result recorded, by config id.
        self.results: dict[str, Any] = {}
        self._times: dict[int, float | None] = {}

    def next_batch(self) -> list[Config] | None:
        """The next configs to measure, or ``None`` when the search is over (asked again
        before :meth:`record`, the strategy proposes the same batch)."""
        times, cap, space = self._times, self._cap, self.space
        if len(times) >= cap or (
            self._seconds is not None and self._clock() - self._start >= self._seconds
        ):
            return None
        state = SearchState(
            space=tuple(space),
            default=self._default_index,
            times=dict(times),
            remaining=cap - len(times),
            budget=cap,
        )
        wanted = [i for i in self.strategy.propose(state) if 0 <= i < len(space) and i not in times]
        batch = list(dict.fromkeys(wanted))[: state.remaining]
        if self._seconds is not None:
            batch = batch[:_SECONDS_BATCH]
        if not batch:
            return None
        first = not self.results
        default_index = self._default_index
        if first and default_index is not None and default_index not in batch:
            # The default is the reference every other config is checked against.
            batch = [default_index, *batch[: state.remaining - 1]]
        configs = [dict(space[i]) for i in batch]
        if first and default_index is None:
            configs.insert(0, dict(self.default))
        return configs

    def record(self, got: Mapping[str, Any]) -> None:
        """The results of a batch (each config's ``Measurement | Failure`` by id)."""
        self.results.update(got)
        for cid, result in self.results.items():
            if cid in self._where:
                self._times[self._where[cid]] = _time_of(result)

    @property
    def searched(self) -> Searched:
        """How much of the space was measured, and by which strategy."""
        return Searched(
            strategy=self.strategy.name, measured=len(self._times), total=len(self.space)
        )


def run_search(
    space: Sequence[Config],
    default: Config,
    *,
    strategy: Strategy,
    budget: Budget | None,
    measure: Measure,
    config_id: Callable[[Mapping[str, Any]], str],
    clock: Callable[[], float] = time.monotonic,
) -> tuple[dict[str, Any], Searched]:
    """Measures what ``strategy`` proposes until it stops or the budget is spent
    (:class:`Search`, each batch measured by ``measure(configs)``)."""
    search = Search(
        space, default, strategy=strategy, budget=budget, config_id=config_id, clock=clock
    )
    while (configs := search.next_batch()) is not None:
        search.record(measure(configs))
    return search.results, search.searched


def _time_of(result: Any) -> float | None:
    median = getattr(result, "median_us", None)
    return float(median) if getattr(result, "ok", False) and median is not None else None


def budget_setting() -> Budget | None:
    """``JAXTUNE_BUDGET`` as a :class:`Budget` (``None`` when unset)."""
    value = _settings.settings().budget
    return None if value is None else Budget(configs=value[0], seconds=value[1])
