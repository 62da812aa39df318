"""Messages built from exceptions never end in an empty reason (docs/errors.md, "Errors and
warnings": a message says what arrived and what to do)."""

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
