"""Both sides. Deciding a sweep's winner from interleaved rounds, so that noise cannot flip it.

The configs that may win are timed in rounds, each once a round in a rotated order, and a
config's time in a round is its fastest call there (interference only ever adds time).
Two configs are compared by their per-round time ratios: the median ratio estimates how
much slower one is, and the order statistics of the ratios give a distribution-free 95 %
confidence interval of that median (the sign test's interval).

The candidate is the config with the best estimate, or, among the configs shown
equivalent to it (the 99 % interval inside ``1 ± tie_within`` and the 95 % interval
holding 1: an interval that excludes 1 shows a difference, however small, and a device
timer on a quiet chip shows 3 % to within a fraction of a percent), the one that wins a
tie: the default, else the earliest in the space, so repeated sweeps agree. Against the
candidate, another config is

- **tied** when shown equivalent to the best estimate;
- **slower** when the 99 % interval of its ratio over the candidate lies above 1: it
  leaves the rounds and cannot win;
- **not faster** when its 99 % interval holds no ratio below ``1 / (1 + tie_within)``
  and its 95 % interval does not lie wholly below 1, and it would lose a tie to the
  candidate: more rounds could not change what is stored;
- **undecided** otherwise.

Each verdict that ends a race (tied, slower, not faster) takes its bounds from the 99 %
interval, because the rounds look again after every round: at 95 % alone, two calls of tens
of µs 1.2x apart were called a tie about once in 20 sweeps. The 99 % interval needs 8
rounds (:func:`rounds_to_show`).

With nothing undecided the candidate is stored (``tie`` when a rival was shown
equivalent, else ``clear``). When the rounds run out with a question still open, the candidate
is stored, or the undecided rival whose second fastest round beat the candidate's by more
than ``tie_within`` (the fastest such: interference only adds time, and one round alone can
be quick by chance), and the outcome says
``undecided``, with the closest undecided rival's ratio and interval against it. A stored config is never one the rounds measured slower than the default.
So a verdict never contradicts the interval it is shown with: a tie's interval holds 1,
and a rival whose 99 % interval lies above 1 is slower, never undecided.
"""

from __future__ import annotations

import dataclasses
import statistics
from collections.abc import Collection, Mapping, Sequence
from typing import Any, Literal

from ..._core.errors import TuningFailedError
from ..._core.vocabulary import Config, Failure, Measurement, config_id
from .intervals import SLOWER_LEVEL, envelope, ratio_interval
from .intervals import rank as _rank
from .samples import TimingOptions
from .search import Searched

__all__ = [
    "Decision",
    "Margin",
    "SweepOutcome",
    "decide",
    "finish",
    "in_space_order",
    "leaders",
    "rounds_to_show",
    "second_look",
    "stay_after_second_look",
]

Result = Measurement | Failure
#: How a winner was decided: ``clear`` (every rival shown slower, or not faster by more
#: than ``tie_within`` while it would lose a tie), ``tie`` (rivals shown
#: equivalent within ``tie_within``), ``undecided`` (the rounds ran out with a rival
#: neither shown slower nor equivalent: the candidate won, or a rival whose second fastest
#: round was more than ``tie_within`` faster), ``single`` (one config ran,
#: or the configs were never timed side by side).
DecisionKind = Literal["clear", "tie", "undecided", "single"]
#: Why a decision stored a config other than its candidate (:attr:`Decision.kept`).
Kept = Literal["envelope", "default"]

#: ``LEVEL``, ``SLOWER_LEVEL`` and :func:`ratio_interval` live in :mod:`.intervals` (no JAX
#: there, so the cache commands can show the intervals a decision used).


@dataclasses.dataclass(frozen=True, kw_only=True, slots=True)
class Margin:
    """How the closest rival compares with the stored config: its time over the stored
    config's time (median of the per-round ratios) and that median's 95 % interval
    (``None`` with too few rounds for one)."""

    rival: Config
    ratio: float
    low: float | None
    high: float | None
    #: Why the stored config is not the candidate (:attr:`Decision.kept`), or ``None``.
    kept: Kept | None = None


@dataclasses.dataclass(frozen=True, kw_only=True, slots=True)
class SweepOutcome:
    """Every measured config's measurement or failure (space order), the winner, the
    default, what the search did and how the winner was decided."""

    measurements: tuple[Result, ...]
    best: Measurement
    default: Result
    searched: Searched | None = None
    decision: DecisionKind = "single"
    #: The closest rival of the stored config, for ``tie`` and ``undecided`` decisions and
    #: (the runner-up) for ``clear`` ones.
    margin: Margin | None = None
    #: Where the sweep's time went, in seconds per phase (see :mod:`.breakdown`).
    phases: Mapping[str, float] = dataclasses.field(default_factory=dict)

    @property
    def tie(self) -> bool:
        """Whether the stored config won a tie (rivals shown equivalent to it)."""
        return self.decision == "tie"

    def times(self) -> tuple[float, float | None]:
        """``(stored config's time, default's time)`` in µs (``None`` when the default
        failed). When both were timed in the rounds: the stored config's median per-round
        time, and the default's as that times the median of the per-round ratios (the
        estimator the decision used, so the speedup is the ratio the decision saw, inside
        its interval); else the medians of their samples."""
        best, default = self.best, self.default
        if not isinstance(default, Measurement):
            return best.median_us, None
        if best.rounds_us and default.rounds_us:
            if default.config == best.config:
                return best.time_us, best.time_us
            ratio = ratio_interval(default.rounds_us, best.rounds_us)[0]
            return best.time_us, best.time_us * ratio
        return best.median_us, default.median_us


def rounds_to_show() -> int:
    """The fewest rounds whose interval can show a config slower (8 at 99 %)."""
    return next(n for n in range(1, 100) if _rank(n, SLOWER_LEVEL) > 0)


Verdict = Literal["best", "slower", "tied", "not faster", "undecided"]


@dataclasses.dataclass(frozen=True, kw_only=True, slots=True)
class Decision:
    """The state of the rounds: the config with the best estimate, each config's verdict
    against it, the config to store, and whether the question is closed."""

    best: str
    verdicts: Mapping[str, Verdict]
    pick: str
    kind: DecisionKind
    margin: tuple[str, float, float | None, float | None] | None
    #: Why the pick is not the candidate: ``"envelope"`` (an undecided rival's second
    #: fastest round beat the candidate's by more than ``tie_within``), ``"default"`` (the
    #: rounds measured the pick slower than the default, which is kept); ``None``.
    kept: Kept | None = None

    @property
    def settled(self) -> bool:
        """No rival is undecided: more rounds could not change the pick."""
        return all(v != "undecided" for v in self.verdicts.values())

    @property
    def racing(self) -> list[str]:
        """The configs that need more rounds: the best and the undecided."""
        return [c for c, v in self.verdicts.items() if v in ("best", "undecided")]


def _best(rounds: Mapping[str, Sequence[float]], order: Sequence[str]) -> str:
    """The config no other beats in the median per-round ratio (a few steps from the
    lowest median time; the earliest on exact ties)."""
    best = min(order, key=lambda c: (statistics.median(rounds[c]), order.index(c)))
    for _ in order:
        better = [
            c for c in order if c != best and ratio_interval(rounds[c], rounds[best])[0] < 1.0
        ]
        if not better:
            break
        best = min(better, key=lambda c: ratio_interval(rounds[c], rounds[best])[0])
    return best


def decide(
    rounds: Mapping[str, Sequence[float]],
    order: Sequence[str],
    *,
    default: str | None,
    tie_within: float,
    out: Collection[str] = (),
) -> Decision:
    """The decision from each config's per-round times (``rounds[cid][i]``: round ``i``;
    configs that left the rounds have fewer). ``order`` lists the configs earliest in the
    space first; ``default`` is the default config's id when it ran in the rounds; ``out``
    holds configs that already left the rounds (shown slower)."""
    live = [c for c in order if rounds.get(c) and c not in out]
    best = _best(rounds, live)

    def ahead(a: str, b: str) -> bool:
        """Whether ``a`` wins a tie against ``b``: the default, else the earlier."""
        if default in (a, b):
            return a == default
        return live.index(a) < live.index(b)

    def equivalent(a: str, b: str) -> bool:
        # A tie ends the race and is looked for after every round: its band is held by the
        # stricter interval, as "slower" is (at 95 % alone, a race of 1.2x-apart calls of
        # tens of µs, looked at after every round, was called a tie about once in 20
        # sweeps), and the interval shown holds 1.
        _, low, high = ratio_interval(rounds[a], rounds[b], SLOWER_LEVEL)
        _, shown_low, shown_high = ratio_interval(rounds[a], rounds[b])
        return (
            low is not None
            and high is not None
            and shown_low is not None
            and shown_high is not None
            and 1 / (1 + tie_within) <= low
            and high <= 1 + tie_within
            and shown_low <= 1.0 <= shown_high
        )

    # The candidate: the config that wins a tie among those shown equivalent to the best.
    candidate = best
    for c in live:
        if c != best and ahead(c, candidate) and equivalent(c, best):
            candidate = c
    verdicts: dict[str, Verdict] = {c: "slower" for c in order if c in out and rounds.get(c)}
    for c in live:
        if c == candidate:
            verdicts[c] = "best"
            continue
        if c == best or equivalent(c, best):
            verdicts[c] = "tied"
            continue
        # Verdicts that end the race are looked for after every round: their bounds come
        # from the stricter interval; "not shown faster" from the interval shown.
        strict_low = ratio_interval(rounds[c], rounds[candidate], SLOWER_LEVEL)[1]
        high = ratio_interval(rounds[c], rounds[candidate])[2]
        if strict_low is not None and strict_low > 1:
            # Shown slower: an interval above 1 is never shown equivalent later, so a
            # rival that would win a tie is out as well.
            verdicts[c] = "slower"
        elif (
            not ahead(c, candidate)
            and strict_low is not None
            and high is not None
            and strict_low >= 1 / (1 + tie_within)
            and high >= 1.0
        ):
            # Not faster than the candidate by more than tie_within, not shown faster,
            # and it would lose a tie to it: however the question ends, it is not stored.
            verdicts[c] = "not faster"
        else:
            verdicts[c] = "undecided"
    undecided = [c for c in live if verdicts[c] == "undecided"]
    kind: DecisionKind
    if undecided:
        # The candidate, not the best estimate: the open questions are against it, and so
        # are the verdicts and the interval the outcome shows. Unless an undecided rival's
        # second fastest round beat the candidate's by more than tie_within: other work on the
        # machine only adds time, so where the rounds' ratios spread too wide to decide,
        # the lower envelope still tells configs that far apart (a busy 2-core machine,
        # the Pallas matmul 1.29x apart: the per-round medians stored the slower once in
        # 20 sweeps, the fastest rounds never). One quick round is not an envelope: each
        # config's second fastest counts (CI, a Flax step in interpret mode: one round of
        # the slower config at half its usual time stored it, 1.52x the best).
        fastest = {c: envelope(rounds[c]) for c in (candidate, *undecided)}
        quicker = [c for c in undecided if fastest[c] * (1 + tie_within) < fastest[candidate]]
        pick = min(quicker, key=fastest.__getitem__) if quicker else candidate
        kind = "undecided"
        kept: Kept | None = "envelope" if quicker else None
    elif any(v == "tied" for v in verdicts.values()):
        pick, kind, kept = candidate, "tie", None
    else:
        pick, kind, kept = candidate, ("clear" if len(verdicts) > 1 else "single"), None
    # Never store what the rounds measured slower than the default.
    if (
        default in live
        and pick != default
        and ratio_interval(rounds[pick], rounds[default])[0] > 1.0
    ):
        pick, kept = default, "default"
    margin = _margin(rounds, [c for c in order if c in verdicts], pick, verdicts, kind)
    return Decision(best=best, verdicts=verdicts, pick=pick, kind=kind, margin=margin, kept=kept)


def _margin(
    rounds: Mapping[str, Sequence[float]],
    live: Sequence[str],
    pick: str,
    verdicts: Mapping[str, Verdict],
    kind: DecisionKind,
) -> tuple[str, float, float | None, float | None] | None:
    """The closest rival of ``pick`` (among the undecided for an undecided decision, the
    tied for a tie, everyone else otherwise) and its ratio over ``pick``. The candidate
    (``best``) is a rival too where the pick is not it: the default, kept because the
    rounds measured the candidate slower than it (an undecided race of near-equal configs
    whose medians disagree with their per-round ratios), must still say what it was
    undecided against."""
    among = {"undecided": ("best", "undecided"), "tie": ("best", "tied")}.get(kind)
    rivals = [c for c in live if c != pick and (among is None or verdicts[c] in among)]
    if not rivals:
        return None
    scored = {c: ratio_interval(rounds[c], rounds[pick]) for c in rivals}
    if kind == "tie":
        # A tied rival was shown equivalent to the best estimate, and its interval against
        # the pick may not hold 1: a tie is shown with one that does (the best estimate's
        # does, where the pick is not it).
        holding = [c for c in rivals if _holds_1(*scored[c][1:])]
        rivals = holding or rivals
    closest = min(rivals, key=lambda c: scored[c][0])
    return (closest, *scored[closest])


def _holds_1(low: float | None, high: float | None) -> bool:
    return low is not None and high is not None and low <= 1.0 <= high


def leaders(
    results: Mapping[str, Result],
    options: TimingOptions,
    space: Sequence[Config] = (),
    default: Config | None = None,
) -> list[Config]:
    """The configs to time in interleaved rounds after a first pass: those whose fastest
    sample is within ``leader_window`` of the best one's (at most ``leaders``, fastest
    first), plus the earliest config of ``space`` when its fastest sample is within
    ``tie_window`` of the best one's (a tie may go to it), and the ``default`` whatever
    its first pass measured (the stored config must be shown faster than the default, and
    the entry's speedup comes from their rounds); nothing when fewer than two qualify. The
    others get a :func:`second_look` in the first rounds before they are ruled out."""
    live = [m for m in results.values() if isinstance(m, Measurement) and not m.dropped]
    if len(live) < 2:
        return []
    # The first pass is short: a config's fastest sample ranks it better than its median
    # when noise only ever slows calls down (another process, a slow mode of the machine).
    best = min(live, key=lambda m: m.min_us)
    near = sorted(
        (m for m in live if m.min_us <= best.min_us * options.leader_window),
        key=lambda m: m.min_us,
    )
    front = near[: options.leaders]
    plausible = best.min_us * options.tie_window
    rank = {config_id(c): i for i, c in enumerate(space)}
    extra: list[Measurement] = []
    in_space = [m for m in live if config_id(m.config) in rank and m.min_us <= plausible]
    if in_space:
        extra.append(min(in_space, key=lambda m: rank[config_id(m.config)]))
    if default is not None:
        extra += [m for m in live if m.config == default]
    for m in extra:
        if m not in front:
            front.append(m)
    return [dict(m.config) for m in front] if len(front) >= 2 else []


def second_look(
    results: Mapping[str, Result], front: Sequence[Config], *, within: float | None = None
) -> list[Config]:
    """The configs the first pass measured outside ``front`` (the leaders), dropped early
    or not, fastest sample first (those not dropped before the dropped; not a config timed
    as another's program, ``same_as``): each gets a second
    look in the first rounds, side by side with the leaders, before it is ruled out. A first
    pass times one config at a time, a few milliseconds each: a burst of other work on the
    machine can cover all of a config's samples there and none of its rivals'. With
    ``within`` (a device timer's samples, which such a burst does not lengthen), only
    those whose fastest sample is within that factor of the best measured's."""
    chosen = {config_id(c) for c in front}
    measured = [
        m
        for m in results.values()
        if isinstance(m, Measurement) and config_id(m.config) not in chosen and m.same_as is None
    ]
    if within is not None:
        times = [m.min_us for m in results.values() if isinstance(m, Measurement)]
        bar = min(times) * within if times else 0.0
        measured = [m for m in measured if m.min_us <= bar]
    measured.sort(key=lambda m: (m.dropped, m.min_us))
    return [dict(m.config) for m in measured]


def stay_after_second_look(
    rounds: Mapping[str, Sequence[float]],
    second: Collection[str],
    *,
    count: int,
    tie_within: float,
) -> set[str]:
    """The configs of ``second`` (on a second look) that race on after the rounds of the
    look (``rounds``: each config's per-round times there, the leaders' and theirs),
    compared by their fastest round (other work on the machine only adds time, and the
    configs of a round met the same spells of it): those faster by more than
    ``tie_within`` than the ``count``-th fastest leader (the slowest, with fewer). One
    left out is at most ``tie_within`` faster than the fastest leader, as the look measured
    them. When fewer than two configs would race, the fastest of ``second`` races too."""
    fastest = {c: min(r) for c, r in rounds.items() if r}
    leading = sorted(t for c, t in fastest.items() if c not in second)
    looked = sorted((c for c in fastest if c in second), key=lambda c: (fastest[c], c))
    if not leading:
        return set(looked[:count])
    bar = leading[min(count, len(leading)) - 1]
    stay = {c for c in looked if fastest[c] * (1 + tie_within) < bar}
    if len(leading) + len(stay) < 2 and looked:
        stay.add(looked[0])
    return stay


def finish(
    plan: Any,
    results: Mapping[str, Result],
    searched: Searched | None = None,
    retimed: Collection[str] = (),
) -> SweepOutcome:
    """The outcome from every measured config's result (``plan`` is the ``SweepPlan``).

    When configs were ``retimed`` in interleaved rounds, the winner is one of them, decided
    by :func:`decide` from their per-round times. Otherwise (no rival within the leaders'
    window, a sweep split across hosts, or a single config) the winner is the config with
    the fastest sample, ``clear`` when it had rivals.

    Raises:
        TuningFailedError: no config of the space produced a usable measurement.
    """
    default_id = config_id(plan.default)
    # The default is a candidate like any config, also when the space lacks it.
    candidates = [*plan.configs, plan.default]
    ids = list(dict.fromkeys(config_id(c) for c in candidates))
    measured = [_as_partner(results[cid], results) for cid in ids if cid in results]
    timed = [m for m in measured if isinstance(m, Measurement)]
    default = results.get(default_id)
    ok = [m for m in timed if not m.dropped] or timed
    if not ok:
        raise TuningFailedError(
            f"every config of {plan.kernel} failed for {plan.key}:\n"
            + "\n".join(
                f"  {config_id(m.config)}: {m.stage}: {m.reason}"
                if isinstance(m, Failure)
                else f"  {config_id(m.config)}: dropped"
                for m in measured
            ),
            failures=measured,
        )
    # Configs that left the rounds (dropped there) are out, but still the pick's rivals.
    raced = {
        config_id(m.config): m for m in timed if config_id(m.config) in retimed and m.rounds_us
    }
    left = {cid for cid, m in raced.items() if m.dropped}
    options = plan.options
    if len(raced) > 1 and len(raced) > len(left):
        decision = decide(
            {cid: m.rounds_us for cid, m in raced.items()},
            in_space_order(raced, plan.configs),
            default=default_id if default_id in raced and default_id not in left else None,
            tie_within=options.tie_within,
            out=left,
        )
        best, kind = raced[decision.pick], decision.kind
        margin = None
        if decision.margin is not None:
            rival, ratio, low, high = decision.margin
            margin = Margin(
                rival=dict(raced[rival].config),
                ratio=ratio,
                low=low,
                high=high,
                kept=decision.kept,
            )
    else:
        # No rounds: one config ran, or the first pass left no rival within the leaders'
        # window; the fastest sample ranks (interference only adds time).
        best = min(ok, key=lambda m: m.min_us)
        rivals = sorted((m for m in ok if m is not best), key=lambda m: m.min_us)
        kind, margin = ("clear", None) if rivals else ("single", None)
        if rivals:
            ratio = rivals[0].min_us / best.min_us if best.min_us else 1.0
            margin = Margin(rival=dict(rivals[0].config), ratio=ratio, low=None, high=None)
    return SweepOutcome(
        measurements=tuple(measured),
        best=best,
        default=default if default is not None else best,
        searched=searched,
        decision=kind,
        margin=margin,
    )


def _as_partner(result: Result, results: Mapping[str, Result]) -> Result:
    """A config timed as another's program (``same_as``) with that config's timing as it
    ended, not as it stood when the twin was found: its time (``median_us``) is the one
    the partner shows (:attr:`~jaxtune.Measurement.time_us`: its rounds' median where it
    raced)."""
    if not isinstance(result, Measurement) or result.same_as is None:
        return result
    partner = results.get(config_id(result.same_as))
    if not isinstance(partner, Measurement):
        return result
    return dataclasses.replace(
        result,
        median_us=partner.time_us,
        min_us=partner.min_us,
        spread=partner.spread,
        samples=partner.samples,
        low_us=partner.low_us,
        high_us=partner.high_us,
    )


def in_space_order(cids: Collection[str], space: Sequence[Config]) -> list[str]:
    """``cids`` ordered as their configs come in ``space`` (others last, as given)."""
    rank = {config_id(c): i for i, c in enumerate(space)}
    return sorted(cids, key=lambda cid: rank.get(cid, len(rank)))
