"""What jaxtune keeps across calls: each layer's ``ProcessState`` lists its parts and puts
them back as a fresh process has them (``jaxtune/_core/state.py``)."""

from __future__ import annotations

import dataclasses
import functools
import importlib
import threading

import pytest

from jaxtune._core.state import CORE_STATE, ProcessState
from jaxtune._distributed.state import DISTRIBUTED_STATE
from jaxtune._isolation.state import ISOLATION_STATE
from jaxtune._profiling.state import PROFILING_STATE
from jaxtune._program.state import PROGRAM_STATE
from jaxtune._tuning.state import TUNING_STATE


@dataclasses.dataclass(slots=True)
class _Group:
    seen: set[str] = dataclasses.field(default_factory=set)
    counts: dict[str, int] = dataclasses.field(default_factory=dict)


def test_reset_empties_each_container_in_place_and_refills_it():
    state = ProcessState("probe")
    names = state.keep("names", dict, "names")
    seen = state.keep("seen", set, "seen")
    round_ = state.keep("round", lambda: [0], "the round")
    group = state.keep("group", _Group, "a group")
    names["a"], round_[0] = "b", 3
    seen.add("x")
    group.seen.add("y")
    group.counts["z"] = 1
    state.reset()
    assert (names, seen, round_) == ({}, set(), [0])
    assert group == _Group()  # the same object, its fields emptied


def test_reset_names_parts_and_leaves_the_others():
    state = ProcessState("probe")
    kept = state.keep("kept", list, "kept")
    gone = state.keep("gone", list, "gone")
    kept.append(1)
    gone.append(2)
    state.reset("gone")
    assert (kept, gone) == ([1], [])


def test_an_unknown_part_is_an_error_that_lists_the_parts():
    state = ProcessState("probe")
    state.keep("seen", set, "seen")
    with pytest.raises(KeyError, match="probe state has no part 'sen'; its parts: 'seen'"):
        state.reset("sen")


def test_hooks_registered_at_import_are_listed_but_never_reset():
    state = ProcessState("probe")
    hooks = state.keep("hooks", list, "called on change", never_reset="hooks registered at import")
    hooks.append(print)
    state.reset()
    state.reset("hooks")
    assert hooks == [print]
    assert state.parts() == {"hooks": "called on change (never reset: hooks registered at import)"}


def test_a_memo_is_cleared_and_a_reset_function_is_called():
    state = ProcessState("probe")
    calls: list[str] = []

    @state.memo("answer", "a memo")
    @functools.cache
    def answer() -> int:
        calls.append("answer")
        return 42

    @state.resets("children", "stops them")
    def stop() -> None:
        calls.append("stop")

    answer()
    answer()
    state.reset()
    answer()
    assert calls == ["answer", "stop", "answer"]


def test_a_reset_holds_the_lock_its_module_uses():
    state = ProcessState("probe")
    lock = threading.Lock()
    held: list[bool] = []

    class Seen(set[str]):
        def clear(self) -> None:
            held.append(lock.locked())
            super().clear()

    state.keep("seen", Seen, "seen", lock=lock)
    state.reset()
    assert held == [True] and not lock.locked()


def test_a_part_declared_twice_resets_both_copies():
    """A module run as ``__main__`` (the child's server) and imported by its name too
    declares its parts twice: both copies are reset."""
    state = ProcessState("probe")
    first = state.keep("warm", list, "warmed")
    second = state.keep("warm", list, "warmed")
    first.append(True)
    second.append(True)
    state.reset("warm")
    assert (first, second) == ([], [])
    assert list(state.parts()) == ["warm"]


def test_each_layer_lists_its_registries():
    for module in ("_isolation.prestart", "_profiling.mosaic_work", "_tuning.tune"):
        importlib.import_module(f"jaxtune.{module}")  # parts are declared at import

    assert {"warned", "settings read", "toolchain"} <= set(CORE_STATE.parts())
    assert {"marks", "source"} <= set(PROGRAM_STATE.parts())
    assert {"children", "started ahead", "log folders"} <= set(ISOLATION_STATE.parts())
    assert set(DISTRIBUTED_STATE.parts()) == {"decisions", "round"}
    assert {"packaged caches", "shared store", "marked calls", "kernels"} <= set(
        TUNING_STATE.parts()
    )
    assert set(PROFILING_STATE.parts()) == {"mosaic bodies"}


def test_a_warning_given_once_is_given_again_after_the_reset():
    from jaxtune._core.errors import JaxtuneWarning, warn_once

    key = ("test_state", "once")
    with pytest.warns(JaxtuneWarning, match="said"):
        assert warn_once(key, "said")
    assert not warn_once(key, "said")
    CORE_STATE.reset("warned")
    with pytest.warns(JaxtuneWarning, match="said"):
        assert warn_once(key, "said")
