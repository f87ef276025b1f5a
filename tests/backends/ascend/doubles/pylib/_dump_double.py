"""TEST DOUBLE side of the device's dump files (not CANN code): writes what the runtime writes.

File layout: ``[uint64 little-endian header length][DumpData protobuf][tensor bytes: inputs, then outputs,
then buffers, each its ``size`` long]`` (msaccucmp ``dump_parse/big_dump_data.py:135-149`` reads the length,
``:48`` and ``:188-197`` the bytes in that order; mindstudio-probe adump ``AclDumpDataProcessor.cpp``).

The schema is declared here, independently of ascendpipe's hand-written reader, with protobuf's own
descriptor classes (so the bytes are protobuf's real encoding), field for field from the published
``toolkit.dumpdata`` schema, MindSpore ``mindspore/ccsrc/debug/debugger/dump_data.proto`` (``space`` from
GraphEngine ``metadef/proto/dump_task.proto``):

- ``DumpData {version=1 string, dump_time=2 uint64, output=3 OpOutput*, input=4 OpInput*, buffer=5 OpBuffer*,
  op_name=6 string, space=7 Workspace*}``
- ``OpOutput {data_type=1, format=2, shape=3 Shape, original_op=4 OriginalOp, data=5 bytes, size=6 uint64,
  original_shape=7 Shape, sub_format=8 int32}``
- ``OpInput {data_type=1, format=2, shape=3 Shape, data=4 bytes, size=5 uint64, original_shape=6 Shape,
  sub_format=7 int32}``
- ``OriginalOp {name=1 string, output_index=2 uint32, data_type=3, format=4}``
- ``OpBuffer {buffer_type=1, data=2 bytes, size=3 uint64}``; ``Workspace {type=1, data_addr=2 bytes, size=3 uint64}``
- ``Shape {dim=1 repeated uint64}``

The enums (``OutputDataType``, ``OutputFormat``, ``BufferType``, ``SpaceType``) are declared int32: the
same varint on the wire. Storage layouts are written element by element from their index formulas (CANN
900 ``atlasatc_16_0025`` item 8; the ``aclFormat`` reference): C padded up to C1*C0 with zeros, C0 = 16
(fp16/fp32) or 32 (int8).
"""

from __future__ import annotations

import struct

import numpy as np

# aclFormat numbers (AscendCL API reference ``aclFormat``; OutputFormat in dump_data.proto), which the
# dump's ``format`` field carries
FORMAT = {"NCHW": 0, "NHWC": 1, "ND": 2, "NC1HWC0": 3, "FRACTAL_Z": 4, "HWCN": 16, "NDHWC": 27,
          "FRACTAL_NZ": 29, "NCDHW": 30, "NDC1HWC0": 32, "FRACTAL_Z_3D": 33}
# OutputDataType (toolkit.dumpdata): DT_FLOAT = 1, DT_FLOAT16 = 2, DT_INT8 = 3, DT_UINT8 = 4, DT_INT32 = 7,
# DT_INT64 = 8, DT_BOOL = 11, DT_DOUBLE = 12, DT_BF16 = 27
DATA_TYPE = {"float32": 1, "float16": 2, "int8": 3, "uint8": 4, "int16": 5, "uint16": 6, "int32": 7, "int64": 8,
             "uint32": 9, "uint64": 10, "bool": 11, "float64": 12, "bfloat16": 27}

_CLASS = None


def _message_class(pool, name: str):
    desc = pool.FindMessageTypeByName(name)
    try:
        from google.protobuf.message_factory import GetMessageClass

        return GetMessageClass(desc)
    except ImportError:  # protobuf < 4.22
        from google.protobuf import message_factory

        return message_factory.MessageFactory(pool).GetPrototype(desc)


def _dump_class():
    global _CLASS
    if _CLASS is not None:
        return _CLASS
    from google.protobuf import descriptor_pb2, descriptor_pool

    fd = descriptor_pb2.FileDescriptorProto(name="double_dumpdata.proto", package="toolkit.dumpdata", syntax="proto3")
    F = descriptor_pb2.FieldDescriptorProto
    kinds = {"int32": F.TYPE_INT32, "uint32": F.TYPE_UINT32, "uint64": F.TYPE_UINT64, "string": F.TYPE_STRING,
             "bytes": F.TYPE_BYTES}

    def message(name, fields):
        m = fd.message_type.add(name=name)
        for field_name, number, kind in fields:
            repeated = kind.endswith("*")
            kind = kind.rstrip("*")
            label = F.LABEL_REPEATED if repeated else F.LABEL_OPTIONAL
            if kind in kinds:
                m.field.add(name=field_name, number=number, type=kinds[kind], label=label)
            else:
                m.field.add(name=field_name, number=number, type=F.TYPE_MESSAGE, label=label,
                            type_name=f".toolkit.dumpdata.{kind}")

    message("Shape", [("dim", 1, "uint64*")])
    message("OriginalOp", [("name", 1, "string"), ("output_index", 2, "uint32"), ("data_type", 3, "int32"),
                           ("format", 4, "int32")])
    message("OpOutput", [("data_type", 1, "int32"), ("format", 2, "int32"), ("shape", 3, "Shape"),
                         ("original_op", 4, "OriginalOp"), ("data", 5, "bytes"), ("size", 6, "uint64"),
                         ("original_shape", 7, "Shape"), ("sub_format", 8, "int32")])
    message("OpInput", [("data_type", 1, "int32"), ("format", 2, "int32"), ("shape", 3, "Shape"), ("data", 4, "bytes"),
                        ("size", 5, "uint64"), ("original_shape", 6, "Shape"), ("sub_format", 7, "int32")])
    message("OpBuffer", [("buffer_type", 1, "int32"), ("data", 2, "bytes"), ("size", 3, "uint64")])
    message("Workspace", [("type", 1, "int32"), ("data_addr", 2, "bytes"), ("size", 3, "uint64")])
    message("DumpData", [("version", 1, "string"), ("dump_time", 2, "uint64"), ("output", 3, "OpOutput*"),
                         ("input", 4, "OpInput*"), ("buffer", 5, "OpBuffer*"), ("op_name", 6, "string"),
                         ("space", 7, "Workspace*")])
    pool = descriptor_pool.DescriptorPool()
    pool.Add(fd)
    _CLASS = _message_class(pool, "toolkit.dumpdata.DumpData")
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


def tensor_fields(array: np.ndarray, fmt: str, *, dtype_name: str | None = None, sub_format: int = 0,
                  original_op: tuple[str, int] | None = None) -> dict:
    """One tensor's fields: ``original_op`` (name, output index) is written for outputs only (OpInput has none)."""
    stored = storage(array, fmt)
    name = dtype_name or str(stored.dtype)
    if name == "bfloat16":  # the upper half of each float32's bits
        data = (np.ascontiguousarray(stored, dtype=np.float32).view(np.uint32) >> 16).astype("<u2").tobytes()
    else:
        data = np.ascontiguousarray(stored).astype(stored.dtype.newbyteorder("<")).tobytes()
    return {"data_type": DATA_TYPE[name], "format": FORMAT[fmt], "shape": list(stored.shape),
            "original_shape": list(np.shape(array)), "size": len(data), "data": data, "sub_format": sub_format,
            "original_op": original_op}


def encode(op_name: str, outputs: list[dict], inputs: list[dict] | None = None, *, dump_time: int = 0,
           inline: bool = False, buffers: list[bytes] | None = None, version: str = "2.0") -> bytes:
    """The dump file's bytes; ``inline``: the tensors inside the header (an older runtime's layout);
    ``buffers``: OpBuffer (L1) contents, written after the outputs."""
    msg = _dump_class()()
    msg.version, msg.dump_time, msg.op_name = version, dump_time, op_name
    tail = b""
    for container, tensors in ((msg.input, inputs or []), (msg.output, outputs)):
        for t in tensors:
            item = container.add()
            item.data_type, item.format, item.size = t["data_type"], t["format"], t["size"]
            item.shape.dim.extend(t["shape"])
            item.original_shape.dim.extend(t["original_shape"])
            item.sub_format = t.get("sub_format") or 0
            if t.get("original_op") and container is msg.output:
                item.original_op.name, item.original_op.output_index = t["original_op"]
                item.original_op.data_type, item.original_op.format = t["data_type"], t["format"]
            if inline:
                item.data = t["data"]
            else:
                tail += t["data"]
    for data in buffers or []:
        buffer = msg.buffer.add()
        buffer.buffer_type, buffer.size = 0, len(data)  # L1
        tail += data
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
