"""The columns of a line's events (:func:`xplane.event_columns`): taken whole from the
events merged into one message, they equal what decoding the events one by one gives,
whatever a writer left out (a zero offset, a zero duration), repeated or added."""

from __future__ import annotations

import numpy as np
import pytest

from jaxtune._core.xspace import schema, xplane

_FIELDS = {1: "metadata_id", 2: "offset_ps", 3: "duration_ps", 5: "num_occurrences"}


def _event(*fields: tuple[int, int], stats: bytes = b"") -> bytes:
    """An XEvent: ``(field number, value)`` in the order given, each written once more when
    repeated (serialized messages concatenated are read as one)."""
    body = b"".join(schema.EventLite(**{_FIELDS[f]: v}).SerializeToString() for f, v in fields)
    if stats:
        body += schema.LineEvents(events=[stats]).SerializeToString()  # field 4, as an event's
    return body


def _line(*events: bytes) -> bytes:
    return (
        schema.LineHead(name=b"XLA Ops").SerializeToString()
        + schema.LineEvents(events=list(events)).SerializeToString()
    )


def _one_by_one(data: bytes) -> list[list[int]]:
    return [
        [e.offset_ps, e.duration_ps, e.metadata_id] for e in schema.LineLite.FromString(data).events
    ]


STAT = b"\x08\x05\x20\x07"  # metadata_id 5, int64_value 7


def _full(i: int) -> bytes:
    return _event((1, 1 + i % 3), (2, 10 * i + 5), (3, 4 + i), stats=STAT)


# Lines whose columns come out of the merged message.
WHOLE = {
    "every field in every event": _line(*(_full(i) for i in range(20))),
    "fields in another order": _line(
        _event((3, 4), (2, 9), (1, 2)), _event((2, 20), (3, 1), (1, 1))
    ),
    "first event at offset 0, left out": _line(
        _event((1, 1), (3, 5)), *(_full(i) for i in range(1, 9))
    ),
    "three first events at offset 0": _line(*([_event((1, 2), (3, 0x7FFF))] * 3), _full(4)),
    "negative and huge values": _line(_event((1, 1 << 40), (2, -5), (3, -1)), _full(3)),
    "no events": _line(),
}

# Lines the merged message would misplace or misread: read event by event.
ONE_BY_ONE = {
    "a zero duration left out in the middle": _line(_full(0), _event((1, 1), (2, 30)), _full(2)),
    "a metadata id 0 left out": _line(_full(0), _event((2, 30), (3, 4))),
    "an offset left out after the first": _line(_full(0), _event((1, 1), (3, 5)), _full(2)),
    "a field held twice (the last wins)": _line(_event((1, 1), (2, 3), (3, 4), (3, 9)), _full(1)),
    "num_occurrences instead of an offset": _line(_full(0), _event((1, 1), (5, 3), (3, 2))),
    "an empty event": _line(_full(0), _event(), _full(2)),
    "more leading offsets left out than are looked at": _line(
        *([_event((1, 2), (3, 3))] * 70), _full(70)
    ),
}


@pytest.mark.parametrize("case", sorted(WHOLE))
def test_merged_columns_equal_the_events_one_by_one(case):
    data = WHOLE[case]
    cols = xplane.event_columns(data)
    assert cols.dtype == np.int64 and cols.shape == (len(_one_by_one(data)), 3)
    assert cols.tolist() == _one_by_one(data)
    assert xplane._merged_columns(data) is not None  # taken whole, not event by event


@pytest.mark.parametrize("case", sorted(ONE_BY_ONE))
def test_lines_that_would_not_line_up_are_read_event_by_event(case):
    data = ONE_BY_ONE[case]
    assert xplane._merged_columns(data) is None
    assert xplane.event_columns(data).tolist() == _one_by_one(data)


def test_the_events_columns_of_a_damaged_line_raise_decode_error():
    truncated = _line(_full(0)) + b"\x22\x05\x08\x01\x10"
    with pytest.raises(xplane.DecodeError, match="malformed XLine"):
        xplane.event_columns(truncated)
