"""The protobuf wire format, read by hand (pure logic): varints and the fields of one message.

Two readers use it: ONNX's (``onnxwire``: where each initializer's bytes lie in an ONNX file, for
the dump's weight slicing and graph-only reads) and the device dump reader (``backends.ascend.dump_data``: the runtime's
``DumpData`` files). Neither needs a generated message class, and both must refuse bytes that are
not the message they expect rather than read past them.
"""

from __future__ import annotations

LEN = 2  # wire type of a length-delimited field (bytes, strings, messages, packed repeated scalars)


class WireError(ValueError):
    """The bytes are not a protobuf message as expected."""


def varint(buf, pos: int) -> tuple[int, int]:
    """The varint at ``buf[pos]`` and the position after it."""
    value, shift = 0, 0
    while True:
        if pos >= len(buf) or shift > 63:
            raise WireError("truncated varint")
        byte = buf[pos]
        pos += 1
        value |= (byte & 0x7F) << shift
        if not byte & 0x80:
            return value, pos
        shift += 7


def field_spans(buf, start: int, end: int):
    """(field number, wire type, payload start, payload end) of each field in ``buf[start:end]``;
    a varint's payload span is its encoded bytes."""
    pos = start
    while pos < end:
        key, pos = varint(buf, pos)
        number, kind = key >> 3, key & 7
        if kind == 0:
            _, after = varint(buf, pos)
        elif kind == 1:
            after = pos + 8
        elif kind == LEN:
            size, pos = varint(buf, pos)
            after = pos + size
        elif kind == 5:
            after = pos + 4
        else:  # groups (wire types 3, 4): in neither ONNX's schema nor DumpData's
            raise WireError(f"unsupported wire type {kind} (field {number})")
        if after > end:
            raise WireError(f"field {number} runs past its message")
        yield number, kind, pos, after
        pos = after


def field_values(buf) -> list[tuple[int, int, object]]:
    """(field number, wire type, value) of each field of one message: a varint's value is its number,
    any other field's value its bytes."""
    return [(number, kind, varint(buf, start)[0] if kind == 0 else buf[start:end])
            for number, kind, start, end in field_spans(buf, 0, len(buf))]
