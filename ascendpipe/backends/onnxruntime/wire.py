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
from ascendpipe.protowire import WireError, field_spans as fields  # noqa: F401 (callers catch WireError)

_MODEL_GRAPH = 7  # ModelProto.graph
_GRAPH_INITIALIZER = 5  # GraphProto.initializer
_TENSOR_NAME = 8  # TensorProto.name


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
    out = bytearray()
    value = (number << 3) | _LEN
    for item in (value, size):
        while True:
            low = item & 0x7F
            item >>= 7
            if item:
                out.append(low | 0x80)
            else:
                out.append(low)
                break
    return bytes(out)


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
