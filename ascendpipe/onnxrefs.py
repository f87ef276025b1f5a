"""Every tensor of an ONNX file that keeps its data in another file (external data), read from the
file's bytes by hand (protobuf's wire format, pure logic: no onnx, no protobuf import).

One walk serves every reader: the strict resolution of each reference (``onnxexternal.references``),
a stage's key (the data files are inputs of every stage that reads the model: the no-op path must
not import onnx) and the dump cache's key. Where a tensor may hold external data is where onnx's
``external_data_helper._get_all_tensors`` and onnxruntime look: the initializers and sparse
initializers of the graph and of every If/Loop/Scan body, and the tensors of node attributes
(``Constant``'s ``value``) there and in the model's functions and training graphs. Field numbers
are onnx.proto's (onnx 1.23: ModelProto.graph 7, training_info 20, functions 25; GraphProto.node 1,
initializer 5, sparse_initializer 15; NodeProto.name 3, attribute 5; AttributeProto.t 5, g 6,
tensors 10, graphs 11, sparse_tensor 22, sparse_tensors 23; FunctionProto.node 7, attribute_proto
11; TrainingInfoProto.initialization 1, algorithm 2; SparseTensorProto.values 1, indices 2;
TensorProto.dims 1, data_type 2, name 8, external_data 13, data_location 14;
StringStringEntryProto.key 1, value 2).
"""

from __future__ import annotations

from ascendpipe.protowire import LEN, WireError, varint

EXTERNAL = 1  # TensorProto.DataLocation.EXTERNAL
MAX_DEPTH = 100  # protobuf's own default recursion limit: a deeper file does not parse in onnx either

_MODEL = {7: "graph", 20: "training", 25: "function"}
_GRAPH = {1: "node", 5: "tensor", 15: "sparse"}
_NODE = {5: "attribute"}
_ATTRIBUTE = {5: "tensor", 6: "graph", 10: "tensor", 11: "graph", 22: "sparse", 23: "sparse"}
_FUNCTION = {7: "node", 11: "attribute"}
_TRAINING = {1: "graph", 2: "graph"}
_SPARSE = {1: "tensor", 2: "tensor"}


class TensorRef:
    """One tensor whose data_location is EXTERNAL: its name, type, dims, its external_data entries
    as written (key, value) in order, and where it sits (``initializer``, ``node 'c' attribute``)."""

    __slots__ = ("name", "data_type", "dims", "entries", "where")

    def __init__(self, name: str, data_type: int, dims: tuple, entries: list, where: str):
        self.name, self.data_type, self.dims, self.entries, self.where = name, data_type, dims, entries, where

    def __repr__(self) -> str:
        return f"TensorRef({self.name!r}, {self.data_type}, {self.dims}, {self.entries})"


def _fields(buf, start: int, end: int):
    """(number, wire type, payload start, payload end) of each field of ``buf[start:end]``; groups
    (wire types 3/4, which protobuf still parses as unknown fields) are skipped whole."""
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
        elif kind == 3:
            after = _skip_group(buf, pos, end, number)
        else:
            raise WireError(f"unexpected wire type {kind} (field {number})")
        if after > end:
            raise WireError(f"field {number} runs past its message")
        yield number, kind, pos, after
        pos = after


def _skip_group(buf, pos: int, end: int, number: int) -> int:
    depth = 1
    while pos < end:
        key, pos = varint(buf, pos)
        kind = key & 7
        if kind == 0:
            _, pos = varint(buf, pos)
        elif kind == 1:
            pos += 8
        elif kind == LEN:
            size, pos = varint(buf, pos)
            pos += size
        elif kind == 5:
            pos += 4
        elif kind == 3:
            depth += 1
        elif kind == 4:
            depth -= 1
            if depth == 0:
                return pos
        else:
            raise WireError(f"unexpected wire type {kind} in group {number}")
        if depth > MAX_DEPTH:
            raise WireError("groups nested too deep")
    raise WireError(f"group {number} not closed")


def external_tensors(buf) -> list[TensorRef]:
    """Every tensor of the serialised ModelProto ``buf`` (bytes, memoryview or mmap) whose
    data_location is EXTERNAL, in file order. ``WireError`` where the bytes are not a protobuf
    message (the caller's ONNX parser then says what is wrong with the file)."""
    found: list[TensorRef] = []
    _walk(buf, 0, len(buf), _MODEL, found, "", 0)
    return found


def _walk(buf, start: int, end: int, table: dict, found: list, where: str, depth: int) -> None:
    if depth > MAX_DEPTH:
        raise WireError("messages nested deeper than protobuf parses")
    if table is _NODE:  # a node's tensors are named by the node (its name may follow its attributes)
        names = [_text(buf, s, e) for number, kind, s, e in _fields(buf, start, end) if number == 3 and kind == LEN]
        where = f"node '{names[-1]}' attribute" if names else "an unnamed node's attribute"
    for number, kind, f_start, f_end in _fields(buf, start, end):
        what = table.get(number)
        if what is None or kind != LEN:
            continue
        if what == "tensor":
            tensor = _tensor(buf, f_start, f_end, where or "initializer")
            if tensor is not None:
                found.append(tensor)
            continue
        sub = {"graph": _GRAPH, "training": _TRAINING, "function": _FUNCTION, "node": _NODE,
               "attribute": _ATTRIBUTE, "sparse": _SPARSE}[what]
        inner = f"{where or 'sparse initializer'}" if what == "sparse" else where
        _walk(buf, f_start, f_end, sub, found, "" if what == "graph" else inner, depth + 1)


def _text(buf, start: int, end: int) -> str:
    return bytes(buf[start:end]).decode("utf-8", errors="replace")


def _tensor(buf, start: int, end: int, where: str) -> TensorRef | None:
    """The TensorProto at ``buf[start:end]`` as a TensorRef when its data is external (the last
    data_location written wins, as protobuf merges a repeated scalar field), else None."""
    location, name, data_type, dims, entries = 0, "", 0, [], []
    for number, kind, f_start, f_end in _fields(buf, start, end):
        if number == 14 and kind == 0:
            location = varint(buf, f_start)[0]
        elif number == 8 and kind == LEN:
            name = _text(buf, f_start, f_end)
        elif number == 2 and kind == 0:
            data_type = varint(buf, f_start)[0]
        elif number == 1 and kind == 0:
            dims.append(_signed(varint(buf, f_start)[0]))
        elif number == 1 and kind == LEN:  # packed
            pos = f_start
            while pos < f_end:
                value, pos = varint(buf, pos)
                dims.append(_signed(value))
        elif number == 13 and kind == LEN:
            key = value = ""
            for e_number, e_kind, e_start, e_end in _fields(buf, f_start, f_end):
                if e_kind == LEN and e_number == 1:
                    key = _text(buf, e_start, e_end)
                elif e_kind == LEN and e_number == 2:
                    value = _text(buf, e_start, e_end)
            entries.append((key, value))
    if location != EXTERNAL:
        return None
    return TensorRef(name, data_type, tuple(dims), entries, where)


def _signed(value: int) -> int:
    """An int64 field's value (protobuf writes a negative one as its 64-bit two's complement)."""
    return value - (1 << 64) if value >= 1 << 63 else value
