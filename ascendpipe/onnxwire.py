"""Where each initializer's bytes lie in a serialised ONNX model (protobuf wire format, pure logic).

A segment of a dump is a sub-model holding only the weights its nodes read. Copying those weights
out of a parsed model (protobuf message copies, then serialisation) cost more than the runs they
feed (0.13 s of a 1 s ResNet-18 dump); slicing them out of the file's bytes is one memcpy each.
Protobuf messages concatenate: a field written after a message is merged into it, so
``ModelProto(header) + graph field(GraphProto(nodes, inputs, outputs) + initializer fields)``
is the sub-model.
"""

from __future__ import annotations

from ascendpipe.protowire import LEN as _LEN
from ascendpipe.protowire import varint
from ascendpipe.protowire import WireError, field_spans as fields  # noqa: F401 (callers catch WireError)

_MODEL_GRAPH = 7  # ModelProto.graph
_GRAPH_INITIALIZER = 5  # GraphProto.initializer
_TENSOR_SEGMENT = 3  # TensorProto.segment
_TENSOR_NAME = 8  # TensorProto.name
_TENSOR_RAW_DATA = 9  # TensorProto.raw_data
_TENSOR_EXTERNAL_DATA = 13  # TensorProto.external_data (StringStringEntryProto: key 1, value 2)
_TENSOR_DATA_LOCATION = 14  # TensorProto.data_location (EXTERNAL = 1)
_EXTERNAL = 1  # TensorProto.DataLocation.EXTERNAL
REFERENCE_MIN_BYTES = 1024  # smaller weights stay inline (as onnx's convert_model_to_external_data does)


def initializer_spans(model: bytes) -> dict[str, tuple[int, int]]:
    """name -> (start, end) of each initializer's serialised TensorProto in ``model``'s bytes."""
    spans = {}
    for number, kind, start, end in fields(model, 0, len(model)):
        if number != _MODEL_GRAPH or kind != _LEN:
            continue
        for g_number, g_kind, g_start, g_end in fields(model, start, end):
            if g_number != _GRAPH_INITIALIZER or g_kind != _LEN:
                continue
            name = ""
            for t_number, t_kind, t_start, t_end in fields(model, g_start, g_end):
                if t_number == _TENSOR_NAME and t_kind == _LEN:
                    name = bytes(model[t_start:t_end]).decode("utf-8")
            spans[name] = (g_start, g_end)
    return spans


def _field_header(number: int, size: int) -> bytes:
    return _varint_bytes((number << 3) | _LEN) + _varint_bytes(size)


def join_model(header: bytes, graph: bytes, tensors: list) -> bytes:
    """A serialised ModelProto: ``header`` (a ModelProto without a graph), ``graph`` (a GraphProto
    without initializers) and ``tensors`` (serialised TensorProtos, e.g. memoryview slices) appended
    as the graph's initializers."""
    parts = [graph]
    for tensor in tensors:
        parts.append(_field_header(_GRAPH_INITIALIZER, len(tensor)))
        parts.append(tensor)
    size = sum(len(p) for p in parts)
    return b"".join([header, _field_header(_MODEL_GRAPH, size), *parts])


def _varint_bytes(value: int) -> bytes:
    out = bytearray()
    while True:
        low = value & 0x7F
        value >>= 7
        if value:
            out.append(low | 0x80)
        else:
            out.append(low)
            return bytes(out)


def _string_entry(key: str, value: str) -> bytes:
    """An external_data entry (StringStringEntryProto: key 1, value 2) as a TensorProto field."""
    key_bytes, value_bytes = key.encode(), value.encode()
    entry = _field_header(1, len(key_bytes)) + key_bytes + _field_header(2, len(value_bytes)) + value_bytes
    return _field_header(_TENSOR_EXTERNAL_DATA, len(entry)) + entry


def weights_by_reference(model, location: str, min_bytes: int = REFERENCE_MIN_BYTES) -> bytes | None:
    """``model``'s bytes (the file's, e.g. an mmap) with each initializer's ``raw_data`` of at least
    ``min_bytes`` replaced by a reference to where it lies in that file (``location``, its offset
    and length: ONNX external data), or None where that is not possible (weights already external,
    segmented tensors).

    The result is a small model: onnxruntime, told the file's folder, maps the weights from the file
    instead of parsing and copying them out of a buffer, and protobuf parses it without copying them
    either. The references hold the same bytes, so a session runs the same model.
    """
    try:
        return _by_reference(model, location, min_bytes)
    except WireError:
        return None  # not a model as protobuf writes it: the caller reads it whole, and onnx judges it


def _by_reference(model, location: str, min_bytes: int) -> bytes | None:
    parts: list = []
    for number, kind, start, end in fields(model, 0, len(model)):
        key_start = _key_start(model, start, number, kind, end)
        if number != _MODEL_GRAPH or kind != _LEN:
            parts.append(bytes(model[key_start:end]))
            continue
        graph: list = []
        run = start  # the start of the graph's bytes not yet copied
        for g_number, g_kind, g_start, g_end in fields(model, start, end):
            if g_number != _GRAPH_INITIALIZER or g_kind != _LEN:
                continue
            tensor = _referenced_tensor(model, g_start, g_end, location, min_bytes)
            if tensor is False:
                return None
            if tensor is None:
                continue
            graph.append(bytes(model[run:_key_start(model, g_start, g_number, g_kind, g_end)]))
            graph.append(_field_header(_GRAPH_INITIALIZER, len(tensor)) + tensor)
            run = g_end
        graph.append(bytes(model[run:end]))
        body = b"".join(graph)
        parts.append(_field_header(_MODEL_GRAPH, len(body)) + body)
    return b"".join(parts)


def _key_start(buf, payload_start: int, number: int, kind: int, payload_end: int) -> int:
    """Where the field whose payload starts at ``payload_start`` begins (its key and, for a
    length-delimited field, its length): the varints are re-encoded to measure them, as protobuf
    writes them minimally (a WireError where the bytes before are not that)."""
    head = _varint_bytes((number << 3) | kind)
    if kind == _LEN:
        head += _varint_bytes(payload_end - payload_start)
    begin = payload_start - len(head)
    if bytes(buf[begin:payload_start]) != head:
        raise WireError(f"field {number}: a key or length not written minimally")
    return begin


def _referenced_tensor(buf, start: int, end: int, location: str, min_bytes: int):
    """The TensorProto at ``buf[start:end]`` with its raw_data as a reference (bytes), None to keep
    it as it is (small, or its data not in raw_data), False where no reference can stand for it."""
    raw = None
    for number, kind, f_start, f_end in fields(buf, start, end):
        if number in (_TENSOR_EXTERNAL_DATA, _TENSOR_SEGMENT):
            return False
        # DEFAULT written out stays: the EXTERNAL appended after it wins (the last value of a field)
        if number == _TENSOR_DATA_LOCATION and (kind != 0 or varint(buf, f_start)[0] != 0):
            return False  # weights already external: the caller reads the model as before
        if number == _TENSOR_RAW_DATA and kind == _LEN:
            if raw is not None:
                return False  # a repeated raw_data (merged messages): the last one wins, keep it simple
            raw = (f_start, f_end)
    if raw is None or raw[1] - raw[0] < min_bytes:
        return None
    key = _key_start(buf, raw[0], _TENSOR_RAW_DATA, _LEN, raw[1])
    return b"".join([bytes(buf[start:key]), bytes(buf[raw[1]:end]),
                     _string_entry("location", location), _string_entry("offset", str(raw[0])),
                     _string_entry("length", str(raw[1] - raw[0])),
                     _varint_bytes(_TENSOR_DATA_LOCATION << 3) + _varint_bytes(_EXTERNAL)])
