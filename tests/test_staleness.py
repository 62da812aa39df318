"""One vocabulary of staleness (jaxtune._tuning.staleness): the reasons, their order, their
words, and the wrong-pass rule, as the lookup, recordings and ``jaxtune cache`` read them."""

from __future__ import annotations

import dataclasses

import pytest

from jaxtune._core import versions as _versions
from jaxtune._core.vocabulary import Entry, Measurement, StaleReason
from jaxtune._tuning import staleness as _staleness
from jaxtune._tuning.staleness import judge, means, reason_of, typed_config, wrong_pass


def _entry(**changes: object) -> Entry:
    now = _versions.toolchain()
    base = Entry(
        kernel="tests.staleness",
        device_kind="cpu",
        key="f32[8]",
        config={"block": 8},
        time_us=1.0,
        default_config={"block": 8},
        default_time_us=1.0,
        versions={k: now[k] for k in ("jax", "jaxlib", "libtpu")},
        created=123.0,
        space_size=2,
        measurements=tuple(
            Measurement(
                config={"block": b}, median_us=1.0, min_us=1.0, spread=0.0, samples=3, compile_s=0.0
            )
            for b in (8, 16)
        ),
    )
    return dataclasses.replace(base, **changes)


OLD_JAX = {"jax": "0.0.1", "jaxlib": "0.0.1", "libtpu": None}


def test_a_current_entry_has_no_reason() -> None:
    space = [{"block": 8}, {"block": 16}]
    found = judge(
        _entry(),
        code_changed=False,
        names=frozenset({"block"}),
        space=frozenset(typed_config(c) for c in space),
        swept=space,
    )
    assert list(found) == []


def test_every_reason_in_the_lookups_order_with_its_words() -> None:
    entry = _entry(config={"tile": 4}, versions=OLD_JAX)
    found = list(
        judge(
            entry,
            code_changed=True,
            names=frozenset({"block"}),
            space=frozenset(),
            swept=[{"block": 8}, {"block": 16}, {"block": 32}, {"block": 64}],
        )
    )
    assert [s.reason for s in found] == [
        StaleReason.KEYS,
        StaleReason.CODE,
        StaleReason.OUTSIDE,
        StaleReason.TOOLCHAIN,
        StaleReason.NEW_CONFIGS,
    ]
    texts = [s.text for s in found]
    assert texts[:3] == ["config keys renamed", "code changed", "config outside the space"]
    assert texts[3].startswith("tuned with another toolchain (jax 0.0.1, now ")
    assert texts[4] == "2 new configs in the space since it was tuned"
    # A recording keeps the words; they read back as their reason.
    assert [reason_of(t) for t in texts] == [s.reason for s in found]
    assert reason_of("") is None and reason_of("something else") is None


def test_the_command_line_judges_code_and_toolchain_only() -> None:
    """Without the space (jaxtune cache), only what can be told: the labels it prints."""
    found = judge(_entry(config={"tile": 4}, versions=OLD_JAX), code_changed=True)
    assert [s.reason.value for s in found] == ["code changed", "toolchain"]


def test_each_reason_has_its_own_meaning() -> None:
    """One table gives every reason what it means for an entry (`jaxtune cache import`)."""
    meanings = [means(r) for r in StaleReason]
    assert all(meanings) and len(set(meanings)) == len(StaleReason)


def test_the_first_reason_is_computed_alone() -> None:
    """The lookup asks for the first reason only: a later one is never worked out."""
    asked = []

    class Space:
        def __contains__(self, config):
            asked.append(config)
            return False

    found = judge(
        _entry(config={"tile": 4}),
        code_changed=False,
        names=frozenset({"block"}),
        space=Space(),
    )
    assert next(found).reason is StaleReason.KEYS
    assert asked == []
    assert next(found).reason is StaleReason.OUTSIDE and len(asked) == 1


def test_new_configs_when_the_entry_measured_part_of_its_space() -> None:
    """Measurements stripped: the sizes are compared."""
    entry = _entry(measurements=(), space_size=2)
    found = list(judge(entry, code_changed=False, swept=[{"block": b} for b in (1, 2, 3)]))
    assert [s.text for s in found] == ["1 new config in the space since it was tuned"]
    assert list(judge(_entry(space_size=0), code_changed=False, swept=[{"block": 1}])) == []


@pytest.mark.parametrize(
    ("entry_timing", "timed_now", "wrong"),
    [
        ("forward", "vjp", True),
        ("forward", "forward", False),
        ("vjp", "vjp", False),
        ("vjp", "forward", False),  # forward and backward answers a forward call too
        ("", "vjp", False),  # an entry older than the field
    ],
)
def test_the_wrong_pass_rule(entry_timing: str, timed_now: str, wrong: bool) -> None:
    found = wrong_pass(entry_timing, timed_now)
    assert (found is not None) == wrong
    if found is not None:
        assert found.reason is StaleReason.WRONG_PASS
        assert found.text == "timed the forward pass only; the call is differentiated"


def test_the_cli_and_the_lookup_ask_the_same_rule() -> None:
    """`jaxtune tune --` reads a recorded call's pass from its sweep request."""
    import dataclasses

    from jaxtune._cli.tune import had_config
    from jaxtune._core.vocabulary import RecordedCall

    record = RecordedCall(
        kernel="k",
        key="f32[8]",
        source="cache",
        request={"plan": {"timing": "vjp"}},
        entry_timing="forward",
    )
    assert record.timing == "vjp"
    assert not had_config(record)
    assert had_config(dataclasses.replace(record, entry_timing="vjp"))


@pytest.mark.parametrize(
    ("source", "stale", "reason", "had"),
    [
        ("cache", "", None, True),
        ("cache", "", StaleReason.TOOLCHAIN, False),  # the reason decides, not the words
        ("packaged", "3 new configs in the space since it was tuned", None, False),  # old
        ("scope", "tuned with another toolchain (jax 0.0.1, now 0.4.30)", None, True),
        ("default", "", None, False),
    ],
)
def test_tune_decides_a_recorded_call_had_a_config_by_its_reason(
    source: str, stale: str, reason: StaleReason | None, had: bool
) -> None:
    """`jaxtune tune --` keeps a call's config by `recorded_reason`, as `cache check` reads
    it: the reason a recording keeps, or in one written before it kept one, its words'."""
    from jaxtune._cli.tune import had_config
    from jaxtune._core.vocabulary import RecordedCall

    record = RecordedCall(
        kernel="k",
        key="f32[8]",
        source=source,
        stale=stale,
        stale_reason=reason,
    )
    assert had_config(record) is had


def test_toolchain_words() -> None:
    assert _staleness.toolchain(_entry()) is None
    assert _staleness.toolchain(_entry(versions={})) is None  # unknown: not stale
    old = _staleness.toolchain(_entry(versions=OLD_JAX))
    assert old is not None and old.reason is StaleReason.TOOLCHAIN
    assert old.text == _staleness.toolchain_text(OLD_JAX)
