"""The protobuf wire format, just enough to decode the messages a trace holds (the XSpace,
and the HLO protos on its metadata plane) without a protobuf dependency."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

__all__ = ["DecodeError", "fields", "signed", "text", "varint"]


class DecodeError(ValueError):
    """The bytes are not a well-formed message."""


def varint(buf: bytes, pos: int) -> tuple[int, int]:
    """``(value, position after it)`` of the varint at ``pos``."""
    result = 0
    shift = 0
    while True:
        try:
            b = buf[pos]
        except IndexError:
            raise DecodeError("truncated varint") from None
        pos += 1
        result |= (b & 0x7F) << shift
        if b < 0x80:
            return result, pos
        shift += 7
        if shift > 70:
            raise DecodeError("varint too long")


def fields(buf: bytes, pos: int, end: int) -> Iterator[tuple[int, int, Any]]:
    """``(field number, wire type, value)``; length-delimited values are ``(start, end)``."""
    while pos < end:
        key, pos = varint(buf, pos)
        field, wire = key >> 3, key & 7
        if wire == 0:
            value, pos = varint(buf, pos)
            yield field, 0, value
        elif wire == 2:
            length, pos = varint(buf, pos)
            if pos + length > end:
                raise DecodeError("length-delimited field runs past its message")
            yield field, 2, (pos, pos + length)
            pos += length
        elif wire == 1:
            yield field, 1, buf[pos : pos + 8]
            pos += 8
        elif wire == 5:
            yield field, 5, buf[pos : pos + 4]
            pos += 4
        else:
            raise DecodeError(f"unsupported wire type {wire}")


def signed(value: int) -> int:
    """A varint read as a two's-complement int64."""
    return value - (1 << 64) if value >= 1 << 63 else value


def text(buf: bytes, span: tuple[int, int]) -> str:
    """A string field (damaged UTF-8 replaced, never an error)."""
    return buf[span[0] : span[1]].decode("utf-8", errors="replace")
