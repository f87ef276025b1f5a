"""TEST DOUBLE side of the device's dump files (not CANN code): writes what the runtime writes.

File layout: ``[uint64 little-endian header length][DumpData protobuf][tensor bytes: inputs, then outputs,
each its ``size`` long]`` (msaccucmp ``dump_parse/big_dump_data.py:135-149``; mindstudio-probe adump
``AclDumpDataProcessor.cpp``). The schema is declared here, independently of ascendpipe's hand-written
reader, with protobuf's own descriptor classes (so the bytes are protobuf's real encoding), from the
documented fields: ``DumpData {version=1, dump_time=2, output=3, input=4, buffer=5, op_name=6}``,
``OpOutput/OpInput {data_type=1, format=2, shape=3, data=4, size=5, original_shape=6, sub_format=7}``,
``Shape {repeated uint64 dim=1}`` (package ``toolkit.dumpdata``).

Storage layouts are written element by element from their index formulas (CANN 900 ``atlasatc_16_0025``
item 8; the ``aclFormat`` reference): C padded up to C1*C0 with zeros, C0 = 16 (fp16/fp32) or 32 (int8).
"""

from __future__ import annotations

import struct

import numpy as np

# aclFormat numbers (AscendCL API reference ``aclFormat``), which the dump's ``format`` field carries
FORMAT = {"NCHW": 0, "NHWC": 1, "ND": 2, "NC1HWC0": 3, "FRACTAL_Z": 4, "FRACTAL_NZ": 29, "NCDHW": 30,
          "NDC1HWC0": 32, "FRACTAL_Z_3D": 33}
# OutputDataType (toolkit.dumpdata): DT_FLOAT = 1, DT_FLOAT16 = 2, DT_INT8 = 3, DT_UINT8 = 4, DT_INT32 = 7,
# DT_INT64 = 8, DT_BOOL = 11, DT_DOUBLE = 12, DT_BF16 = 27
DATA_TYPE = {"float32": 1, "float16": 2, "int8": 3, "uint8": 4, "int16": 5, "uint16": 6, "int32": 7, "int64": 8,
             "uint32": 9, "uint64": 10, "bool": 11, "float64": 12, "bfloat16": 27}

_CLASS = None


def _dump_class():
    global _CLASS
    if _CLASS is not None:
        return _CLASS
    from google.protobuf import descriptor_pb2, descriptor_pool

    fd = descriptor_pb2.FileDescriptorProto(name="double_dumpdata.proto", package="toolkit.dumpdata", syntax="proto3")
    F = descriptor_pb2.FieldDescriptorProto
    shape = fd.message_type.add(name="Shape")
    shape.field.add(name="dim", number=1, type=F.TYPE_UINT64, label=F.LABEL_REPEATED)
    for name in ("OpOutput", "OpInput"):
        m = fd.message_type.add(name=name)
        m.field.add(name="data_type", number=1, type=F.TYPE_INT32, label=F.LABEL_OPTIONAL)  # an enum on the wire
        m.field.add(name="format", number=2, type=F.TYPE_INT32, label=F.LABEL_OPTIONAL)
        m.field.add(name="shape", number=3, type=F.TYPE_MESSAGE, type_name=".toolkit.dumpdata.Shape",
                    label=F.LABEL_OPTIONAL)
        m.field.add(name="data", number=4, type=F.TYPE_BYTES, label=F.LABEL_OPTIONAL)
        m.field.add(name="size", number=5, type=F.TYPE_UINT64, label=F.LABEL_OPTIONAL)
        m.field.add(name="original_shape", number=6, type=F.TYPE_MESSAGE, type_name=".toolkit.dumpdata.Shape",
                    label=F.LABEL_OPTIONAL)
        m.field.add(name="sub_format", number=7, type=F.TYPE_INT32, label=F.LABEL_OPTIONAL)
    dump = fd.message_type.add(name="DumpData")
    dump.field.add(name="version", number=1, type=F.TYPE_STRING, label=F.LABEL_OPTIONAL)
    dump.field.add(name="dump_time", number=2, type=F.TYPE_UINT64, label=F.LABEL_OPTIONAL)
    dump.field.add(name="output", number=3, type=F.TYPE_MESSAGE, type_name=".toolkit.dumpdata.OpOutput",
                   label=F.LABEL_REPEATED)
    dump.field.add(name="input", number=4, type=F.TYPE_MESSAGE, type_name=".toolkit.dumpdata.OpInput",
                   label=F.LABEL_REPEATED)
    dump.field.add(name="op_name", number=6, type=F.TYPE_STRING, label=F.LABEL_OPTIONAL)
    pool = descriptor_pool.DescriptorPool()
    pool.Add(fd)
    desc = pool.FindMessageTypeByName("toolkit.dumpdata.DumpData")
    try:
        from google.protobuf.message_factory import GetMessageClass

        _CLASS = GetMessageClass(desc)
    except ImportError:  # protobuf < 4.22
        from google.protobuf import message_factory

        _CLASS = message_factory.MessageFactory(pool).GetPrototype(desc)
    return _CLASS


def c0_of(dtype) -> int:
    return 32 if np.dtype(dtype).itemsize == 1 else 16


def _ceil(a: int, b: int) -> int:
    return -(-a // b)


def storage(array: np.ndarray, fmt: str) -> np.ndarray:
    """``array`` laid out as the device stores it in ``fmt`` (zero padding), by the index formulas."""
    a = np.asarray(array)
    c0 = c0_of(a.dtype)
    if fmt == "NC1HWC0":  # (n, c, h, w) -> (n, c // C0, h, w, c % C0)
        n, c, h, w = a.shape
        out = np.zeros((n, _ceil(c, c0), h, w, c0), a.dtype)
        for ch in range(c):
            out[:, ch // c0, :, :, ch % c0] = a[:, ch]
        return out
    if fmt == "NDC1HWC0":  # (n, c, d, h, w) -> (n, d, c // C0, h, w, c % C0)
        n, c, d, h, w = a.shape
        out = np.zeros((n, d, _ceil(c, c0), h, w, c0), a.dtype)
        for ch in range(c):
            out[:, :, ch // c0, :, :, ch % c0] = a[:, ch]
        return out
    if fmt == "FRACTAL_Z":  # (co, ci, kh, kw) -> ((ci // C0) * Kh * Kw + kh * Kw + kw, co // 16, co % 16, ci % C0)
        cout, cin, kh, kw = a.shape
        out = np.zeros((_ceil(cin, c0) * kh * kw, _ceil(cout, 16), 16, c0), a.dtype)
        co, ci, y, x = np.indices(a.shape)
        out[(ci // c0) * kh * kw + y * kw + x, co // 16, co % 16, ci % c0] = a
        return out
    if fmt == "FRACTAL_NZ":  # (..., m, n) -> (..., n // C0, m // 16, m % 16, n % C0)
        *batch, m, n = a.shape
        out = np.zeros((*batch, _ceil(n, c0), _ceil(m, 16), 16, c0), a.dtype)
        for i in range(m):
            for j in range(n):
                out[..., j // c0, i // 16, i % 16, j % c0] = a[..., i, j]
        return out
    return a  # NCHW / ND / NCDHW, and the formats the double leaves as they are


def tensor_fields(array: np.ndarray, fmt: str, *, dtype_name: str | None = None) -> dict:
    stored = storage(array, fmt)
    name = dtype_name or str(stored.dtype)
    if name == "bfloat16":  # the upper half of each float32's bits
        data = (np.ascontiguousarray(stored, dtype=np.float32).view(np.uint32) >> 16).astype("<u2").tobytes()
    else:
        data = np.ascontiguousarray(stored).astype(stored.dtype.newbyteorder("<")).tobytes()
    return {"data_type": DATA_TYPE[name], "format": FORMAT[fmt], "shape": list(stored.shape),
            "original_shape": list(np.shape(array)), "size": len(data), "data": data}


def encode(op_name: str, outputs: list[dict], inputs: list[dict] | None = None, *, dump_time: int = 0,
           inline: bool = False) -> bytes:
    """The dump file's bytes; ``inline``: the tensors inside the header (an older runtime's layout)."""
    msg = _dump_class()()
    msg.version, msg.dump_time, msg.op_name = "2.0", dump_time, op_name
    tail = b""
    for container, tensors in ((msg.input, inputs or []), (msg.output, outputs)):
        for t in tensors:
            item = container.add()
            item.data_type, item.format, item.size = t["data_type"], t["format"], t["size"]
            item.shape.dim.extend(t["shape"])
            item.original_shape.dim.extend(t["original_shape"])
            if inline:
                item.data = t["data"]
            else:
                tail += t["data"]
    header = msg.SerializeToString()
    return struct.pack("<Q", len(header)) + header + tail


def device_format(array: np.ndarray, op_type: str) -> str:
    """The layout the double stores an output in: feature maps 5HD/6HD, matmul results FRACTAL_NZ, else ND."""
    if np.ndim(array) == 4:
        return "NC1HWC0"
    if np.ndim(array) == 5:
        return "NDC1HWC0"
    if np.ndim(array) == 2 and op_type in ("MatMulV2", "MatMul", "Gemm"):
        return "FRACTAL_NZ"
    return "ND"
