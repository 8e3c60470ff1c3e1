"""Protobuf's wire format, read only as far as a message's top-level fields: a large
message's repeated message field kept as its encoded bytes and decoded one element at a
time (`LazyMessages`), so that its parse never lives whole.

A parsed message keeps every message inside it alive (upb allocates them all in one arena
per parse, larger than the encoded bytes): a handler that keeps one container's message
of a parsed Synchronize keeps all of them. Decoding each element on its own gives each
its own arena, dropped with it.
"""

from __future__ import annotations

from array import array
from collections.abc import Iterator
from dataclasses import dataclass, field
from typing import Generic, TypeVar

from google.protobuf.message import DecodeError, Message

_M = TypeVar("_M", bound=Message)
# Encoded protobuf: a frame's data is a bytearray, a request's payload a view of it.
Encoded = bytes | bytearray | memoryview

VARINT, FIXED64, LENGTH_DELIMITED, FIXED32 = 0, 1, 2, 5
_MAX_VARINT_BITS = 64


def _varint(data: Encoded, pos: int) -> tuple[int, int]:
    """The varint at `pos` and the position after it; DecodeError when it is cut short
    or longer than 64 bits."""
    result = shift = 0
    end = len(data)
    while pos < end:
        byte = data[pos]
        pos += 1
        result |= (byte & 0x7F) << shift
        if byte < 0x80:
            return result, pos
        shift += 7
        if shift >= _MAX_VARINT_BITS:
            raise DecodeError("varint longer than 64 bits")
    raise DecodeError("truncated varint")


@dataclass(slots=True)
class WireFields:
    """A message's top-level fields as found in its encoded bytes: where each
    length-delimited one lies (field number -> start and end offsets, in turn) and each
    varint field's last value (proto3's rule for a repeated scalar read as one)."""

    spans: dict[int, array[int]] = field(default_factory=dict)
    varints: dict[int, int] = field(default_factory=dict)

    def each(self, number: int) -> Iterator[tuple[int, int]]:
        """Start and end offsets of each occurrence of length-delimited field `number`."""
        spans = self.spans.get(number, ())
        flat = iter(spans)
        return zip(flat, flat, strict=True)

    def count(self, number: int) -> int:
        """How many times length-delimited field `number` occurs."""
        spans = self.spans.get(number)
        return len(spans) // 2 if spans is not None else 0


def read_fields(data: Encoded) -> WireFields:
    """Walk `data`'s top-level fields without decoding any; DecodeError when they do not
    tile it (a tag, a length or a fixed field cut short, a group, an unknown wire type)."""
    found = WireFields()
    pos, end = 0, len(data)
    while pos < end:
        tag, pos = _varint(data, pos)
        number, wire_type = tag >> 3, tag & 7
        if number == 0:
            raise DecodeError("field number 0")
        if wire_type == LENGTH_DELIMITED:
            length, pos = _varint(data, pos)
            stop = pos + length
            if stop > end:
                raise DecodeError(f"field {number} runs past the end of the message")
            spans = found.spans.get(number)
            if spans is None:
                spans = found.spans[number] = array("q")
            spans.append(pos)
            spans.append(stop)
            pos = stop
        elif wire_type == VARINT:
            found.varints[number], pos = _varint(data, pos)
        elif wire_type in (FIXED64, FIXED32):
            pos += 8 if wire_type == FIXED64 else 4
            if pos > end:
                raise DecodeError(f"field {number} runs past the end of the message")
        else:
            raise DecodeError(f"field {number} has wire type {wire_type}")
    return found


class LazyMessages(Generic[_M]):
    """A repeated message field of one or more encoded messages, decoded element by
    element each time it is iterated: nothing of it is kept between two elements but the
    encoded bytes. Iterate it once per pass and keep what a pass needs of an element, not
    the element (a kept element is one decode's arena, not the whole request's)."""

    __slots__ = ("_cls", "_count", "_parts")

    def __init__(self, cls: type[_M]) -> None:
        self._cls = cls
        self._parts: list[tuple[Encoded, array[int]]] = []
        self._count = 0

    @classmethod
    def of(
        cls, message: type[_M], data: Encoded, fields: WireFields, number: int
    ) -> LazyMessages[_M]:
        """Field `number` of the encoded message `data` (`fields`: its fields)."""
        found = LazyMessages(message)
        found.add(data, fields.spans.get(number, array("q")))
        return found

    def add(self, data: Encoded, spans: array[int]) -> None:
        """The elements of one encoded message (`spans`: their start and end offsets)."""
        if spans:
            self._parts.append((data, spans))
            self._count += len(spans) // 2

    def extend(self, other: LazyMessages[_M]) -> None:
        """`other`'s elements after these."""
        self._parts.extend(other._parts)
        self._count += other._count

    def __len__(self) -> int:
        return self._count

    def __iter__(self) -> Iterator[_M]:
        decode = self._cls.FromString
        for data, spans in self._parts:
            with memoryview(data) as view:
                for i in range(0, len(spans), 2):
                    # (protobuf's stubs say bytes; upb decodes any buffer, uncopied)
                    yield decode(view[spans[i] : spans[i + 1]])  # type: ignore[arg-type]
