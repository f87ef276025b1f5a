"""The device's own dump files, read directly: ``[uint64 LE header length][DumpData protobuf][tensor bytes]``.

Pure (bytes in, numpy out). The file layout: msaccucmp (mindstudio-probe 26.2.0) reads the header length
first (``msaccucmp/dump_parse/big_dump_data.py:135-149``), then each tensor's ``size`` bytes, in the order
inputs, outputs, buffers, workspaces (``big_dump_data.py:48`` ``data_types``, read at ``:188-197``). The
message, ``toolkit.dumpdata.DumpData``, as published in MindSpore's
``mindspore/ccsrc/debug/debugger/dump_data.proto`` (``space`` from GraphEngine's
``metadef/proto/dump_task.proto``); every field of it is read, by these numbers:

    DumpData   { string version = 1; uint64 dump_time = 2; repeated OpOutput output = 3;
                 repeated OpInput input = 4; repeated OpBuffer buffer = 5; string op_name = 6;
                 repeated Workspace space = 7; }
    OpOutput   { OutputDataType data_type = 1; OutputFormat format = 2; Shape shape = 3;
                 OriginalOp original_op = 4; bytes data = 5; uint64 size = 6; Shape original_shape = 7;
                 int32 sub_format = 8; }
    OpInput    { OutputDataType data_type = 1; OutputFormat format = 2; Shape shape = 3; bytes data = 4;
                 uint64 size = 5; Shape original_shape = 6; int32 sub_format = 7; }
    OriginalOp { string name = 1; uint32 output_index = 2; OutputDataType data_type = 3; OutputFormat format = 4; }
    OpBuffer   { BufferType buffer_type = 1; bytes data = 2; uint64 size = 3; }
    Workspace  { SpaceType type = 1; bytes data_addr = 2; uint64 size = 3; }
    Shape      { repeated uint64 dim = 1; }

OpOutput and OpInput number their fields differently (``original_op`` is output-only): each has its own table.
The wire format is parsed by hand (``protowire``): no generated module, and fields a newer CANN adds are
skipped. An older dump that carries each tensor inline (``data`` set, nothing after the header) is read too.

A header that parses but cannot describe tensors of this file (a dim that is negative or whose product
overflows, a ``size`` past the end, more tensors than :data:`MAX_TENSORS`) is a :class:`DumpFormatError`
naming the field (``output[2].shape.dim[1]``), raised before any tensor is read.
"""

from __future__ import annotations

import math
import struct
from dataclasses import dataclass, field

import numpy as np

from ascendpipe.protowire import WireError, field_spans, varint

# OutputDataType (toolkit.dumpdata), the dump's numbering (not aclDataType's)
DTYPES: dict[int, tuple[str, str]] = {  # enum -> (name in our index, numpy dtype it is read as)
    1: ("float32", "<f4"), 2: ("float16", "<f2"), 3: ("int8", "i1"), 4: ("uint8", "u1"), 5: ("int16", "<i2"),
    6: ("uint16", "<u2"), 7: ("int32", "<i4"), 8: ("int64", "<i8"), 9: ("uint32", "<u4"), 10: ("uint64", "<u8"),
    11: ("bool", "?"), 12: ("float64", "<f8"), 27: ("bfloat16", "<u2"),
}
DTYPE_NAMES = {0: "DT_UNDEFINED", 13: "DT_STRING", 14: "DT_DUAL_SUB_INT8", 15: "DT_DUAL_SUB_UINT8",
               16: "DT_COMPLEX64", 17: "DT_COMPLEX128", 18: "DT_QINT8", 19: "DT_QINT16", 20: "DT_QINT32",
               21: "DT_QUINT8", 22: "DT_QUINT16", 23: "DT_RESOURCE", 24: "DT_STRING_REF", 25: "DT_DUAL",
               26: "DT_VARIANT", 28: "DT_INT4", 29: "DT_UINT1", 30: "DT_INT2", 31: "DT_UINT2"}
HEADER_LEN = struct.Struct("<Q")

# field numbers, per message (dump_data.proto); a name -> number table each, so the two tensor messages'
# different numbering cannot be mixed up
OUTPUT_FIELDS = {"data_type": 1, "format": 2, "shape": 3, "original_op": 4, "data": 5, "size": 6,
                 "original_shape": 7, "sub_format": 8}
INPUT_FIELDS = {"data_type": 1, "format": 2, "shape": 3, "data": 4, "size": 5, "original_shape": 6, "sub_format": 7}
ORIGINAL_OP_FIELDS = {"name": 1, "output_index": 2, "data_type": 3, "format": 4}
BUFFER_FIELDS = {"buffer_type": 1, "data": 2, "size": 3}
SPACE_FIELDS = {"type": 1, "data_addr": 2, "size": 3}
DUMP_FIELDS = {"version": 1, "dump_time": 2, "output": 3, "input": 4, "buffer": 5, "op_name": 6, "space": 7}

# One file's tensors (inputs, outputs, buffers and workspaces together). Each output becomes one .npy file:
# a header listing millions of (empty) tensors is refused before anything is written. A real op has a few
# outputs and at most a few thousand inputs (a Concat's); 10,000 leaves room for both.
MAX_TENSORS = 10_000
_INT64_MAX = (1 << 63) - 1
# No Ascend device holds a tensor of 1 TiB: the largest memory of one Ascend chip is 144 GB (Ascend 950DT's
# HiZQ 2.0 HBM, as announced at Huawei Connect 2025, reported at http://www.ppuip.com/new/709275131282723840),
# far under it. Dims whose non-zero product needs that much are no device tensor's whatever its bytes say:
# an empty [2^40, 0] float32 claims no byte (it read as an empty tensor, and compare passed it), a tensor
# listed without its bytes (size 0) or an original_shape claims none of this file's.
MAX_DEVICE_TENSOR_BYTES = 1 << 40


class DumpFormatError(ValueError):
    """The file is not a DumpData dump (bad header length, truncated field, sizes that do not add up);
    ``field`` names the header field at fault (``output[0].size``), where one is."""

    def __init__(self, message: str, field: str | None = None):
        super().__init__(message)
        self.field = field


@dataclass
class OriginalOp:
    """The original (pre-fusion) op a fused kernel's output stands for, as the runtime records it."""

    name: str = ""
    output_index: int = 0
    data_type: int = 0
    format: int = 0


@dataclass
class DumpTensor:
    data_type: int
    format: int
    shape: list[int]
    original_shape: list[int]
    size: int
    sub_format: int = 0
    data: bytes = b""
    original_op: OriginalOp | None = None  # outputs only
    where: str = ""  # 'output[2]': the field path errors name
    offset: int = -1  # where its bytes start in the file (-1: inline in the header)

    @property
    def dtype_name(self) -> str:
        known = DTYPES.get(self.data_type)
        return known[0] if known else DTYPE_NAMES.get(self.data_type, f"data_type {self.data_type}")

    def array(self) -> np.ndarray:
        """The tensor's values, flat, in the dtype it was dumped in (bfloat16 widened exactly to float32:
        its bits are float32's upper half)."""
        known = DTYPES.get(self.data_type)
        if known is None:
            raise DumpFormatError(f"dtype {self.dtype_name} cannot be read")
        dtype = np.dtype(known[1])
        usable = len(self.data) - len(self.data) % dtype.itemsize  # a ragged tail is never a value
        flat = np.frombuffer(self.data[:usable], dtype=dtype)
        if self.data_type == 27:
            return (flat.astype(np.uint32) << 16).view(np.float32)
        return flat.copy()


@dataclass
class DumpRecord:
    op_name: str = ""
    version: str = ""
    dump_time: int = 0
    inputs: list[DumpTensor] = field(default_factory=list)
    outputs: list[DumpTensor] = field(default_factory=list)
    buffer_sizes: list[int] = field(default_factory=list)  # OpBuffer.size, bytes after the outputs'
    space_sizes: list[int] = field(default_factory=list)  # Workspace.size, bytes after the buffers'


def _signed32(value: int) -> int:
    """An int32 / enum field: a negative value is written as a 10-byte varint (two's complement in 64 bits)."""
    value &= (1 << 64) - 1
    return value - (1 << 64) if value >= 1 << 63 else value


def _fields(buf, where: str):
    try:
        for number, wire, start, end in field_spans(buf, 0, len(buf)):
            yield number, wire, (varint(buf, start)[0] if wire == 0 else buf[start:end])
    except WireError as exc:
        raise DumpFormatError(f"{exc} in {where or 'the dump header'}", where or None) from None


def _shape(buf, where: str) -> list[int]:
    dims: list[int] = []
    for number, wire, value in _fields(buf, where):
        if number != 1:
            continue
        if wire == 2:  # packed (proto3's default for repeated scalars)
            pos = 0
            while pos < len(value):
                try:
                    dim, pos = varint(value, pos)
                except WireError as exc:
                    raise DumpFormatError(f"{exc} in {where}", where) from None
                dims.append(dim)
        elif wire == 0:
            dims.append(value)
    for k, dim in enumerate(dims):
        if dim > _INT64_MAX:  # uint64 on the wire: a -1 written by a signed writer reads 2**64 - 1
            raise DumpFormatError(f"{where}.dim[{k}] = {dim - (1 << 64)}: a dim cannot be negative", f"{where}.dim[{k}]")
    return dims


def _original_op(buf, where: str) -> OriginalOp:
    op = OriginalOp()
    for number, wire, value in _fields(buf, where):
        if number == ORIGINAL_OP_FIELDS["name"] and wire == 2:
            op.name = bytes(value).decode("utf-8", "replace")
        elif number == ORIGINAL_OP_FIELDS["output_index"] and wire == 0:
            op.output_index = value & 0xFFFFFFFF
        elif number == ORIGINAL_OP_FIELDS["data_type"] and wire == 0:
            op.data_type = _signed32(value)
        elif number == ORIGINAL_OP_FIELDS["format"] and wire == 0:
            op.format = _signed32(value)
    return op


def _tensor(buf, numbers: dict[str, int], where: str) -> DumpTensor:
    t = DumpTensor(data_type=0, format=0, shape=[], original_shape=[], size=0, where=where)
    for number, wire, value in _fields(buf, where):
        if wire == 0:
            if number == numbers["data_type"]:
                t.data_type = _signed32(value)
            elif number == numbers["format"]:
                t.format = _signed32(value)
            elif number == numbers["size"]:
                t.size = value
            elif number == numbers["sub_format"]:
                t.sub_format = _signed32(value)
        elif wire == 2:
            if number == numbers["shape"]:
                t.shape = _shape(value, f"{where}.shape")
            elif number == numbers["original_shape"]:
                t.original_shape = _shape(value, f"{where}.original_shape")
            elif number == numbers["data"]:
                t.data = bytes(value)
            elif number == numbers.get("original_op"):
                t.original_op = _original_op(value, f"{where}.original_op")
    return t


def _size_only(buf, numbers: dict[str, int], where: str) -> int:
    return next((value for number, wire, value in _fields(buf, where) if number == numbers["size"] and wire == 0), 0)


def parse_header(buf) -> DumpRecord:
    """The DumpData message; refused (before any tensor is built) when it lists more than MAX_TENSORS tensors."""
    rec = DumpRecord()
    parts: list[tuple[int, object]] = []
    for number, wire, value in _fields(buf, ""):
        if wire == 2 and number in (3, 4, 5, 7):
            parts.append((number, value))
            if len(parts) > MAX_TENSORS:
                raise DumpFormatError(f"the header lists more than {MAX_TENSORS} tensors (inputs, outputs, buffers "
                                      "and workspaces): not a dump of one op", "output")
        elif number == DUMP_FIELDS["version"] and wire == 2:
            rec.version = bytes(value).decode("utf-8", "replace")
        elif number == DUMP_FIELDS["dump_time"] and wire == 0:
            rec.dump_time = value
        elif number == DUMP_FIELDS["op_name"] and wire == 2:
            rec.op_name = bytes(value).decode("utf-8", "replace")
    for number, value in parts:
        if number == DUMP_FIELDS["output"]:
            rec.outputs.append(_tensor(value, OUTPUT_FIELDS, f"output[{len(rec.outputs)}]"))
        elif number == DUMP_FIELDS["input"]:
            rec.inputs.append(_tensor(value, INPUT_FIELDS, f"input[{len(rec.inputs)}]"))
        elif number == DUMP_FIELDS["buffer"]:
            rec.buffer_sizes.append(_size_only(value, BUFFER_FIELDS, f"buffer[{len(rec.buffer_sizes)}]"))
        else:
            rec.space_sizes.append(_size_only(value, SPACE_FIELDS, f"space[{len(rec.space_sizes)}]"))
    return rec


def _check_dims(dims: list[int], itemsize: int, where: str) -> None:
    """Dims no device tensor has: their non-zero product, times the element size, at or past what any device
    holds (MAX_DEVICE_TENSOR_BYTES). Read before any byte: an empty tensor [2^40, 0] claims none, and a
    tensor listed without its bytes (size 0) or an original_shape claims none of this file's."""
    wide = math.prod(d for d in dims if d) * max(itemsize, 1)
    if wide >= MAX_DEVICE_TENSOR_BYTES:
        big = max(range(len(dims)), key=lambda k: dims[k])
        empty = " is empty, but with its empty axis at one it" if any(d == 0 for d in dims) else ""
        raise DumpFormatError(f"{where}.dim[{big}] = {dims[big]}: the shape {dims}{empty} would hold {wide} bytes, "
                              "more than any Ascend device's memory: not a tensor the device dumped",
                              f"{where}.dim[{big}]")


def _check_shape(tensor: DumpTensor, file_size: int) -> None:
    """A shape whose values could not fit in this file cannot be this file's tensor (an overflowing product),
    nor can dims no device holds (``_check_dims``)."""
    count = math.prod(tensor.shape)
    known = DTYPES.get(tensor.data_type)
    if count > _INT64_MAX:
        raise DumpFormatError(f"{tensor.where}.shape {tensor.shape}: {count} elements overflow int64",
                              f"{tensor.where}.shape")
    # a tensor listed without its bytes (size 0, no inline data) is not refused here: it reads "not compared"
    if known is not None and (tensor.size or tensor.data) and count * np.dtype(known[1]).itemsize > file_size:
        raise DumpFormatError(f"{tensor.where}.shape {tensor.shape}: {count} {known[0]} values need "
                              f"{count * np.dtype(known[1]).itemsize} bytes, more than the whole file "
                              f"({file_size} bytes)", f"{tensor.where}.shape")
    itemsize = np.dtype(known[1]).itemsize if known is not None else 1
    _check_dims(tensor.shape, itemsize, f"{tensor.where}.shape")
    _check_dims(tensor.original_shape, itemsize, f"{tensor.where}.original_shape")


def read_dump_header(head: bytes, file_size: int) -> DumpRecord:
    """The header of a dump file of ``file_size`` bytes, from its first bytes (at least the 8-byte length
    and the header); each tensor's ``offset`` set, every size and shape checked against the file."""
    if file_size < HEADER_LEN.size or len(head) < HEADER_LEN.size:
        raise DumpFormatError(f"{file_size} bytes: shorter than the 8-byte header length", "header length")
    (length,) = HEADER_LEN.unpack_from(head)
    if length > file_size - HEADER_LEN.size:
        raise DumpFormatError(f"header length {length} is larger than the file ({file_size} bytes)", "header length")
    if len(head) < HEADER_LEN.size + length:
        raise DumpFormatError(f"header length {length}: only {len(head) - HEADER_LEN.size} bytes of it read",
                              "header length")
    rec = parse_header(memoryview(head)[HEADER_LEN.size:HEADER_LEN.size + length])
    pos = HEADER_LEN.size + length
    for tensor in rec.inputs + rec.outputs:
        _check_shape(tensor, file_size)
        if tensor.data:  # an older dump holds the bytes inline
            continue
        if pos + tensor.size > file_size:
            raise DumpFormatError(f"{tensor.where}.size = {tensor.size}: the tensor data runs past the end of the "
                                  f"file ({pos} + {tensor.size} > {file_size})", f"{tensor.where}.size")
        tensor.offset = pos
        pos += tensor.size
    for kind, sizes in (("buffer", rec.buffer_sizes), ("space", rec.space_sizes)):
        for k, size in enumerate(sizes):
            if pos + size > file_size:
                raise DumpFormatError(f"{kind}[{k}].size = {size}: the data runs past the end of the file "
                                      f"({pos} + {size} > {file_size})", f"{kind}[{k}].size")
            pos += size
    return rec


def header_bytes_needed(first8: bytes) -> int:
    """How many bytes from the start of a file hold its header (the length and the message)."""
    if len(first8) < HEADER_LEN.size:
        return HEADER_LEN.size
    return HEADER_LEN.size + HEADER_LEN.unpack_from(first8)[0]


def read_dump_bytes(raw: bytes) -> DumpRecord:
    """A whole dump file: the header, then each tensor's ``size`` bytes, inputs first, then outputs."""
    rec = read_dump_header(raw, len(raw))
    for tensor in rec.inputs + rec.outputs:
        if tensor.offset >= 0:
            tensor.data = bytes(raw[tensor.offset:tensor.offset + tensor.size])
    return rec
