"""Messages built from exceptions never end in an empty reason (docs/errors.md, "Errors and
warnings": a message says what arrived and what to do)."""

import traceback

import pytest

import jaxtune
from jaxtune._core.errors import describe


class StackError(Exception):
    pass


def test_an_exception_without_a_message_is_named_alone():
    assert describe(StackError()) == "StackError"
    assert describe(StackError("  ")) == "StackError"
    assert describe(KeyError("x")) == "KeyError: 'x'"


def test_a_failed_configs_reason_is_never_empty():
    from jaxtune._tuning.sweep.check import reason

    assert reason(StackError()) == "StackError"
    assert reason(StackError("first\nsecond")) == "StackError: first ... second"


def test_a_warning_from_jaxtunes_own_thread_keeps_its_stacklevel():
    """No user frame above a thread of jaxtune's (only the standard library's thread
    code): the warning keeps its ``stacklevel``, here the frame that called ``warn``."""
    import functools
    import threading
    import warnings

    from jaxtune._core.errors import JaxtuneWarning, warn

    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        thread = threading.Thread(target=functools.partial(warn, "from a thread", stacklevel=1))
        thread.start()
        thread.join()
        warn("from here", stacklevel=1)
    assert [(w.category, str(w.message)) for w in caught] == [
        (JaxtuneWarning, "from a thread"),
        (JaxtuneWarning, "from here"),
    ]
    assert caught[0].filename == threading.__file__
    assert caught[1].filename == __file__


@pytest.mark.parametrize("name", [n for n in jaxtune.__all__ if n.endswith(("Error", "Warning"))])
def test_a_public_exception_is_named_by_its_public_name(name):
    """A traceback prints `jaxtune.SettingsError: ...`, the name users import and catch."""
    cls = getattr(jaxtune, name)
    assert f"{cls.__module__}.{cls.__qualname__}" == f"jaxtune.{name}"
    assert traceback.format_exception_only(cls("x"))[-1] == f"jaxtune.{name}: x\n"
