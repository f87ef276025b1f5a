"""The device's own dump files, read directly: ``[uint64 LE header length][DumpData protobuf][tensor bytes]``.

Pure (bytes in, numpy out). The schema is declared here from the documented fields, not copied from a
package (sources: the file layout, msaccucmp ``dump_parse/big_dump_data.py:135-149`` reads the header
length and mindstudio-probe's adump ``AclDumpDataProcessor.cpp`` walks each tensor's ``size``; the message
``toolkit.dumpdata.DumpData`` as published in CANN's and MindSpore's public repos):

    DumpData  { string version = 1; uint64 dump_time = 2; repeated OpOutput output = 3;
                repeated OpInput input = 4; repeated OpBuffer buffer = 5; string op_name = 6; }
    OpOutput / OpInput { OutputDataType data_type = 1; OutputFormat format = 2; Shape shape = 3;
                bytes data = 4; uint64 size = 5; Shape original_shape = 6; int32 sub_format = 7; }
    Shape     { repeated uint64 dim = 1; }

The protobuf wire format is parsed by hand (varint / 64-bit / length-delimited / 32-bit fields, packed
or unpacked repeated dims): it needs no generated module and tolerates fields a newer CANN adds.
An older dump that carries each tensor inline (``data`` set, nothing after the header) is read too.
"""

from __future__ import annotations

import struct
from dataclasses import dataclass, field

import numpy as np

from ascendpipe.protowire import WireError, field_values, varint

# OutputDataType (toolkit.dumpdata), the dump's numbering (not aclDataType's): DT_FLOAT = 1, DT_FLOAT16 = 2,
# DT_INT8 = 3, ..., DT_DOUBLE = 12, DT_BF16 = 27
DTYPES: dict[int, tuple[str, str]] = {  # enum -> (name in our index, numpy dtype it is read as)
    1: ("float32", "<f4"), 2: ("float16", "<f2"), 3: ("int8", "i1"), 4: ("uint8", "u1"), 5: ("int16", "<i2"),
    6: ("uint16", "<u2"), 7: ("int32", "<i4"), 8: ("int64", "<i8"), 9: ("uint32", "<u4"), 10: ("uint64", "<u8"),
    11: ("bool", "?"), 12: ("float64", "<f8"), 27: ("bfloat16", "<u2"),
}
DTYPE_NAMES = {0: "DT_UNDEFINED", 13: "DT_STRING", 14: "DT_DUAL_SUB_INT8", 15: "DT_DUAL_SUB_UINT8",
               16: "DT_COMPLEX64", 17: "DT_COMPLEX128", 18: "DT_QINT8", 19: "DT_QINT16", 20: "DT_QINT32",
               21: "DT_QUINT8", 22: "DT_QUINT16", 23: "DT_RESOURCE", 24: "DT_STRING_REF", 25: "DT_DUAL",
               26: "DT_VARIANT", 28: "DT_UNDEFINED", 29: "DT_INT4"}
HEADER_LEN = struct.Struct("<Q")


class DumpFormatError(ValueError):
    """The file is not a DumpData dump (bad header length, truncated field, sizes that do not add up)."""


@dataclass
class DumpTensor:
    data_type: int
    format: int
    shape: list[int]
    original_shape: list[int]
    size: int
    sub_format: int = 0
    data: bytes = b""

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
        flat = np.frombuffer(self.data, dtype=np.dtype(known[1]))
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


def _varint(buf: bytes, pos: int) -> tuple[int, int]:
    try:
        return varint(buf, pos)
    except WireError as exc:
        raise DumpFormatError(f"{exc} in the dump header") from None


def fields(buf: bytes) -> list[tuple[int, int, object]]:
    """(field number, wire type, value) of one message; a length-delimited value is its bytes."""
    try:
        return field_values(buf)
    except WireError as exc:
        raise DumpFormatError(f"{exc} in the dump header") from None


def _shape(buf: bytes) -> list[int]:
    dims: list[int] = []
    for number, wire, value in fields(buf):
        if number != 1:
            continue
        if wire == 2:  # packed (proto3's default for repeated scalars)
            pos = 0
            while pos < len(value):
                dim, pos = _varint(value, pos)
                dims.append(dim)
        elif wire == 0:
            dims.append(value)
    return dims


def _tensor(buf: bytes) -> DumpTensor:
    t = DumpTensor(data_type=0, format=0, shape=[], original_shape=[], size=0)
    for number, wire, value in fields(buf):
        if number == 1 and wire == 0:
            t.data_type = value
        elif number == 2 and wire == 0:
            t.format = value
        elif number == 3 and wire == 2:
            t.shape = _shape(value)
        elif number == 4 and wire == 2:
            t.data = bytes(value)
        elif number == 5 and wire == 0:
            t.size = value
        elif number == 6 and wire == 2:
            t.original_shape = _shape(value)
        elif number == 7 and wire == 0:
            t.sub_format = value
    return t


def parse_header(buf: bytes) -> DumpRecord:
    rec = DumpRecord()
    for number, wire, value in fields(buf):
        if number == 1 and wire == 2:
            rec.version = bytes(value).decode("utf-8", "replace")
        elif number == 2 and wire == 0:
            rec.dump_time = value
        elif number == 3 and wire == 2:
            rec.outputs.append(_tensor(value))
        elif number == 4 and wire == 2:
            rec.inputs.append(_tensor(value))
        elif number == 6 and wire == 2:
            rec.op_name = bytes(value).decode("utf-8", "replace")
    return rec


def read_dump_bytes(raw: bytes) -> DumpRecord:
    """A whole dump file: the header, then each tensor's ``size`` bytes, inputs first, then outputs."""
    if len(raw) < HEADER_LEN.size:
        raise DumpFormatError(f"{len(raw)} bytes: shorter than the 8-byte header length")
    (length,) = HEADER_LEN.unpack_from(raw)
    if length > len(raw) - HEADER_LEN.size:
        raise DumpFormatError(f"header length {length} is larger than the file ({len(raw)} bytes)")
    rec = parse_header(raw[HEADER_LEN.size:HEADER_LEN.size + length])
    pos = HEADER_LEN.size + length
    for tensor in rec.inputs + rec.outputs:
        if tensor.data:  # an older dump holds the bytes inline
            continue
        if pos + tensor.size > len(raw):
            raise DumpFormatError(f"tensor data runs past the end of the file ({pos} + {tensor.size} > {len(raw)})")
        tensor.data = raw[pos:pos + tensor.size]
        pos += tensor.size
    return rec
