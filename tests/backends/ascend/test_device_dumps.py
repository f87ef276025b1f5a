"""The device's own dump files: DumpData header + tensor bytes, each tensor in its storage layout.

Dumps are made from known arrays by the double's writer (tests/backends/ascend/doubles/pylib/_dump_double.py:
protobuf's own encoder over a schema declared there, the layouts written element by element from their index
formulas), independently of ascendpipe's hand-written reader (backends/ascend/dump_data.py, device_layout.py).
"""

from __future__ import annotations

import json
import re
import struct
import sys

import numpy as np
import pytest

from ascendpipe.backends.ascend import device_layout
from ascendpipe.backends.ascend.acl_dump import device_tensor
from ascendpipe.backends.ascend.dump_data import DumpFormatError, read_dump_bytes
from ascendpipe.compare.writers import terminal_text
from tests.backends.ascend.conftest import PYLIB

sys.path.insert(0, str(PYLIB))
import _dump_double as dd  # noqa: E402

RNG = np.random.default_rng(7)


def _roundtrip(array, fmt, *, dtype_name=None, inline=False):
    raw = dd.encode("op/x", [dd.tensor_fields(array, fmt, dtype_name=dtype_name)], inline=inline)
    rec = read_dump_bytes(raw)
    assert rec.op_name == "op/x" and len(rec.outputs) == 1
    return rec.outputs[0], device_tensor(rec.outputs[0])


@pytest.mark.parametrize("channels", [8, 16, 33])
@pytest.mark.parametrize("dtype", ["float32", "float16", "int8"])
def test_nc1hwc0_feature_maps_come_back_nchw_without_padding(channels, dtype):
    x = (RNG.standard_normal((2, channels, 3, 5)) * 40).astype(dtype)
    tensor, (back, reason) = _roundtrip(x, "NC1HWC0")
    c0 = 32 if dtype == "int8" else 16
    assert tensor.shape == [2, -(-channels // c0), 3, 5, c0] and tensor.original_shape == [2, channels, 3, 5]
    assert reason is None and back.dtype == np.dtype(dtype) and back.shape == x.shape
    np.testing.assert_array_equal(back, x)
    # read as if NCHW (what msaccucmp convert without -f hands over), the same values are scrambled
    if channels == 16 and dtype == "float32":
        naive = np.frombuffer(tensor.data, np.float32).reshape(x.shape)
        cos = float(np.dot(naive.ravel(), x.ravel()) / np.linalg.norm(naive) / np.linalg.norm(x))
        assert cos < 0.5


def test_ndc1hwc0_fractal_z_and_fractal_nz():
    vol = RNG.standard_normal((1, 20, 2, 3, 3)).astype(np.float32)
    weights = RNG.standard_normal((20, 33, 3, 3)).astype(np.float16)
    matrix = RNG.standard_normal((2, 20, 33)).astype(np.float32)
    for array, fmt, stored in ((vol, "NDC1HWC0", [1, 2, 2, 3, 3, 16]), (weights, "FRACTAL_Z", [3 * 9, 2, 16, 16]),
                               (matrix, "FRACTAL_NZ", [2, 3, 2, 16, 16])):
        tensor, (back, reason) = _roundtrip(array, fmt)
        assert tensor.shape == stored and device_layout.format_name(tensor.format) == fmt
        assert reason is None and back.dtype == array.dtype
        np.testing.assert_array_equal(back, array)


def test_bf16_inline_data_and_plain_layouts():
    x = RNG.standard_normal((4, 6)).astype(np.float32)
    bits = (x.view(np.uint32) & 0xFFFF0000).view(np.float32)  # what bf16 keeps
    tensor, (back, reason) = _roundtrip(x, "ND", dtype_name="bfloat16", inline=True)
    assert tensor.dtype_name == "bfloat16" and reason is None
    np.testing.assert_array_equal(back, bits)


def test_a_0d_tensor_comes_back_0d_as_the_golden_holds_it():
    tensor, (back, reason) = _roundtrip(np.array(2.5, np.float32), "ND")
    assert tensor.shape == [] and tensor.original_shape == [] and reason is None
    assert back.shape == () and back.dtype == np.float32 and float(back) == 2.5


def test_a_format_that_cannot_be_converted_is_named_not_guessed():
    w = RNG.standard_normal((4, 4, 2, 3, 3)).astype(np.float32)
    tensor, (back, reason) = _roundtrip(w, "FRACTAL_Z_3D")
    assert reason == "device format FRACTAL_Z_3D" and back.shape == w.shape
    # 5HD whose original shape its dumped shape cannot hold: named, not sliced at random
    t = dd.tensor_fields(RNG.standard_normal((1, 8, 2, 2)).astype(np.float32), "NC1HWC0")
    t["original_shape"] = [1, 40, 2, 2]
    _, reason = device_tensor(read_dump_bytes(dd.encode("op", [t])).outputs[0])
    assert reason.startswith("device format NC1HWC0: dumped shape [1, 1, 2, 2, 16] does not hold original shape")


def test_a_dtype_that_cannot_be_read_is_named():
    t = dd.tensor_fields(np.ones((2, 4), np.float64), "ND")
    t["data_type"] = 16  # DT_COMPLEX64: 16 bytes a value, not read
    tensor = read_dump_bytes(dd.encode("op", [t])).outputs[0]
    back, reason = device_tensor(tensor)
    assert reason == "device dtype DT_COMPLEX64" and back.dtype == np.uint8 and back.size == 64


def test_a_cut_file_is_an_error():
    raw = dd.encode("op", [dd.tensor_fields(np.ones((1, 16, 2, 2), np.float32), "NC1HWC0")])
    with pytest.raises(DumpFormatError, match="runs past the end"):
        read_dump_bytes(raw[:-10])
    with pytest.raises(DumpFormatError, match="header length"):
        read_dump_bytes(b"\xff" * 8 + raw[8:])


# ---- the whole path: the ais_bench double writes binary dumps; compare@fp32 reads them ----

def build_layout_model(path):
    """Convs of 8 (fused with its Relu), 16 and 33 channels, a weight as a tensor, an fp16 and an int8 tensor,
    a MatMul, and a side output scaled past fp16's range."""
    import onnx
    from onnx import TensorProto, helper, numpy_helper

    r = np.random.default_rng(1)
    init = [numpy_helper.from_array((r.standard_normal((8, 3, 3, 3)) * 0.3).astype(np.float32), "w8v"),
            numpy_helper.from_array((r.standard_normal((16, 8, 3, 3)) * 0.2).astype(np.float32), "w16"),
            numpy_helper.from_array((r.standard_normal((33, 16, 1, 1)) * 0.2).astype(np.float32), "w33"),
            numpy_helper.from_array(np.array(0.05, np.float32), "qs"), numpy_helper.from_array(np.array(0, np.int8), "qz"),
            numpy_helper.from_array((r.standard_normal((33, 20)) * 0.2).astype(np.float32), "wm"),
            numpy_helper.from_array(np.array(3e4, np.float32), "k")]
    nodes = [
        helper.make_node("Identity", ["w8v"], ["w8"], name="wconst"),  # the weight as an op output
        helper.make_node("Conv", ["x", "w8"], ["c8"], name="conv8", pads=[1, 1, 1, 1]),
        helper.make_node("Relu", ["c8"], ["r8"], name="relu8"),
        helper.make_node("Conv", ["r8", "w16"], ["c16"], name="conv16", pads=[1, 1, 1, 1]),
        helper.make_node("Conv", ["c16", "w33"], ["c33"], name="conv33"),
        helper.make_node("Cast", ["c33"], ["h"], name="tohalf", to=TensorProto.FLOAT16),
        helper.make_node("Cast", ["h"], ["hf"], name="tofloat", to=TensorProto.FLOAT),
        helper.make_node("QuantizeLinear", ["hf", "qs", "qz"], ["q"], name="quant"),
        helper.make_node("DequantizeLinear", ["q", "qs", "qz"], ["dq"], name="dequant"),
        helper.make_node("GlobalAveragePool", ["dq"], ["g"], name="gap"),
        helper.make_node("Flatten", ["g"], ["f"], name="flat"),
        helper.make_node("MatMul", ["f", "wm"], ["out"], name="mm"),
        helper.make_node("Mul", ["c16", "k"], ["big"], name="scale"),
    ]
    graph = helper.make_graph(nodes, "layouts", [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 3, 6, 6])],
                              [helper.make_tensor_value_info("out", TensorProto.FLOAT, [1, 20]),
                               helper.make_tensor_value_info("big", TensorProto.FLOAT, [1, 16, 6, 6])], init)
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 13)])
    model.ir_version = 8
    onnx.save(model, str(path))
    return path


@pytest.fixture(scope="module")
def layout_om(cann_env, tmp_path_factory):
    from ascendpipe.backends.ascend import stages
    from tests.backends.ascend.conftest import _context_factory

    root = tmp_path_factory.mktemp("layouts")
    model = build_layout_model(root / "layouts.onnx")
    np.save(root / "x.npy", np.random.default_rng(3).standard_normal((1, 3, 6, 6)).astype(np.float32))
    factory = _context_factory(root)
    ctx = next(factory)("convert", "convert", {"soc_version": "Ascend310P3"}, inputs={"model": model})
    stages.convert(ctx)
    yield ctx.out_dir, model, root / "x.npy"
    next(factory, None)


def _compare(make_ctx, layout_om, monkeypatch, env: dict, name="compare__fp32", *, with_doc=False):
    from ascendpipe.stages.compare import CompareKind

    for key, value in env.items():
        monkeypatch.setenv(key, value)
    out, model, x = layout_om
    ctx = make_ctx(name, "compare", {"msit": "off", "dump_keep": "all"}, inputs={"golden": model, "target": out, "inputs": x},
                   upstream={"target": ("convert", "convert", out)})
    result = CompareKind().run(ctx)
    rows = json.loads((ctx.out_dir / "result.json").read_text())["rows"]
    index = json.loads((ctx.out_dir / "target_dump/index.json").read_text())
    found = result, {r["tensor"]: r for r in rows}, {t["name"]: t for t in index["tensors"]}
    return (*found, json.loads((ctx.out_dir / "result.json").read_text())) if with_doc else found


def test_compare_fp32_reads_every_device_layout_as_the_golden(cann_env, layout_om, make_ctx, monkeypatch):
    result, rows, dumped = _compare(make_ctx, layout_om, monkeypatch, {"CANN_DOUBLE_DUMP_FORMAT": "wconst=FRACTAL_Z"})
    layouts = {name: (t["device_format"], t["device_shape"], t["dtype"]) for name, t in dumped.items() if "device_format" in t}
    assert layouts["w8"] == ("FRACTAL_Z", [9, 1, 16, 16], "float32")
    assert layouts["r8"] == ("NC1HWC0", [1, 1, 6, 6, 16], "float32")  # C = 8, padded to 16
    assert layouts["c16"] == ("NC1HWC0", [1, 1, 6, 6, 16], "float32")
    assert layouts["c33"] == ("NC1HWC0", [1, 3, 6, 6, 16], "float32")
    assert layouts["h"] == ("NC1HWC0", [1, 3, 6, 6, 16], "float16")
    assert layouts["q"] == ("NC1HWC0", [1, 2, 6, 6, 32], "int8")  # C0 = 32 for int8
    assert layouts["out"] == ("FRACTAL_NZ", [2, 1, 16, 16], "float32")  # [1, 20]: N1 = 2, M1 = 1
    # the fused conv8+relu8 output maps to relu8's tensor through _datadump_origin_name
    assert rows["r8"]["op_name"] == "conv8" and rows["r8"]["golden_ops"] == ["conv8", "relu8"]
    both = {t: r for t, r in rows.items() if r["side"] == "both"}
    assert {"w8", "r8", "c16", "c33", "h", "hf", "q", "dq", "g", "f", "out", "big"} <= set(both)
    assert {t: f"{r['cosine']:.6f}" for t, r in both.items()} == {t: "1.000000" for t in both}
    assert all(r["max_abs_error"] == 0.0 for r in both.values()) and result.metrics["failed_ops"] == 0


def test_a_real_fp16_difference_is_still_found(cann_env, layout_om, make_ctx, monkeypatch):
    # the device ran 'scale' in fp16: 16 channels x 3e4 pass 65504, stored NC1HWC0 as fp16
    result, rows, dumped = _compare(make_ctx, layout_om, monkeypatch, {"CANN_DOUBLE_DUMP_FP16": "scale"},
                                    name="compare__fp16")
    assert dumped["big"]["device_format"] == "NC1HWC0" and dumped["big"]["dtype"] == "float16"
    assert rows["big"]["failed"] and rows["big"]["overflow"] == "target"
    assert [t for t, r in rows.items() if r["failed"]] == ["big"]
    assert f"{rows['c16']['cosine']:.6f}" == "1.000000"


def test_a_layout_not_converted_reads_not_compared(cann_env, layout_om, make_ctx, monkeypatch):
    result, rows, dumped, doc = _compare(make_ctx, layout_om, monkeypatch,
                                         {"CANN_DOUBLE_DUMP_FORMAT": "conv16=FRACTAL_Z_3D"}, name="compare__z3d",
                                         with_doc=True)
    row = rows["c16"]
    assert dumped["c16"]["not_compared"] == "device format FRACTAL_Z_3D"
    assert "not compared (device format FRACTAL_Z_3D)" in row["note"]
    assert row["cosine"] is None and row["max_abs_error"] is None and not row["failed"]
    assert row["not_compared"] == "device format FRACTAL_Z_3D"
    assert f"{rows['c33']['cosine']:.6f}" == "1.000000"
    assert doc["summary"]["not_compared"] == 1 and "1 tensor not compared (device layout)" in doc["verdict"]
    text = terminal_text(doc)
    assert "1 tensors not compared: the device dump's layout was not read as the golden's" in text
    assert "no op fails the thresholds, but 1 tensors were not compared" in text


def test_a_compare_that_could_compare_nothing_says_so(cann_env, layout_om, make_ctx, monkeypatch):
    every_op = ",".join(f"{op}=FRACTAL_Z_3D" for op in ("wconst", "conv8", "conv16", "conv33", "tohalf", "tofloat",
                                                        "quant", "dequant", "gap", "flat", "mm", "scale"))
    result, rows, dumped, doc = _compare(make_ctx, layout_om, monkeypatch, {"CANN_DOUBLE_DUMP_FORMAT": every_op},
                                         name="compare__none", with_doc=True)
    paired = [r for r in rows.values() if r["side"] == "both"]
    assert paired and all(r["not_compared"] == "device format FRACTAL_Z_3D" for r in paired)
    assert doc["verdict"].startswith(f"nothing could be compared: all {len(paired)} paired tensors were not compared")
    assert not doc["verdict"].startswith("every output passes")
    text = terminal_text(doc)
    assert "nothing could be compared" in text and "no op fails the thresholds" not in text


# ---- the schema: reader, double and protobuf's own decoding of the published .proto agree ----

# The messages of toolkit.dumpdata as published (MindSpore mindspore/ccsrc/debug/debugger/dump_data.proto;
# Workspace/space from GraphEngine metadef/proto/dump_task.proto), declared here apart from both the reader
# (dump_data.py) and the double (_dump_double.py); the enums keep only the values this test names (proto3
# enums are open: any other number decodes as itself).
PUBLISHED_SCHEMA = """
enum OutputDataType { DT_UNDEFINED = 0; DT_FLOAT = 1; DT_FLOAT16 = 2; DT_INT8 = 3; DT_BF16 = 27; }
enum OutputFormat { FORMAT_NCHW = 0; FORMAT_ND = 2; FORMAT_NC1HWC0 = 3; FORMAT_FRACTAL_Z = 4; FORMAT_FRACTAL_NZ = 29; }
enum BufferType { L1 = 0; }
enum SpaceType { LOG = 0; }
message OriginalOp { string name = 1; uint32 output_index = 2; OutputDataType data_type = 3; OutputFormat format = 4; }
message Shape { repeated uint64 dim = 1; }
message OpOutput { OutputDataType data_type = 1; OutputFormat format = 2; Shape shape = 3; OriginalOp original_op = 4;
                   bytes data = 5; uint64 size = 6; Shape original_shape = 7; int32 sub_format = 8; }
message OpInput { OutputDataType data_type = 1; OutputFormat format = 2; Shape shape = 3; bytes data = 4;
                  uint64 size = 5; Shape original_shape = 6; int32 sub_format = 7; }
message OpBuffer { BufferType buffer_type = 1; bytes data = 2; uint64 size = 3; }
message Workspace { SpaceType type = 1; bytes data_addr = 2; uint64 size = 3; }
message DumpData { string version = 1; uint64 dump_time = 2; repeated OpOutput output = 3; repeated OpInput input = 4;
                   repeated OpBuffer buffer = 5; string op_name = 6; repeated Workspace space = 7; }
"""


def _published_class():
    """protobuf's DumpData class, its descriptor built from PUBLISHED_SCHEMA's text (no protoc)."""
    import re

    from google.protobuf import descriptor_pb2, descriptor_pool

    F = descriptor_pb2.FieldDescriptorProto
    scalars = {"string": F.TYPE_STRING, "bytes": F.TYPE_BYTES, "uint64": F.TYPE_UINT64, "uint32": F.TYPE_UINT32,
               "int32": F.TYPE_INT32}
    fd = descriptor_pb2.FileDescriptorProto(name="published_dumpdata.proto", package="toolkit.dumpdata",
                                            syntax="proto3")
    enums = set()
    for name, body in re.findall(r"enum (\w+) \{([^}]*)\}", PUBLISHED_SCHEMA):
        enum = fd.enum_type.add(name=name)
        enums.add(name)
        for value_name, number in re.findall(r"(\w+) = (\d+);", body):
            enum.value.add(name=value_name, number=int(number))
    for name, body in re.findall(r"message (\w+) \{([^}]*)\}", PUBLISHED_SCHEMA):
        message = fd.message_type.add(name=name)
        for repeated, kind, field_name, number in re.findall(r"(repeated )?(\w+) (\w+) = (\d+);", body):
            label = F.LABEL_REPEATED if repeated else F.LABEL_OPTIONAL
            if kind in scalars:
                message.field.add(name=field_name, number=int(number), type=scalars[kind], label=label)
            else:
                message.field.add(name=field_name, number=int(number), label=label,
                                  type=F.TYPE_ENUM if kind in enums else F.TYPE_MESSAGE,
                                  type_name=f".toolkit.dumpdata.{kind}")
    pool = descriptor_pool.DescriptorPool()
    pool.Add(fd)
    return dd._message_class(pool, "toolkit.dumpdata.DumpData")


def _assert_same_tensor(decoded, ours, *, output: bool):
    assert (ours.data_type, ours.format, ours.size, ours.sub_format) == (
        decoded.data_type, decoded.format, decoded.size, decoded.sub_format)
    assert ours.shape == list(decoded.shape.dim) and ours.original_shape == list(decoded.original_shape.dim)
    if output and decoded.HasField("original_op"):
        o = decoded.original_op
        assert (ours.original_op.name, ours.original_op.output_index, ours.original_op.data_type,
                ours.original_op.format) == (o.name, o.output_index, o.data_type, o.format)
    elif output:
        assert ours.original_op is None


def test_the_doubles_files_decode_by_the_published_schema_as_the_reader_reads_them():
    w = (RNG.standard_normal((20, 3, 3, 3)) * 3).astype(np.float16)
    y = RNG.standard_normal((1, 17, 2, 3)).astype(np.float32)
    m = RNG.standard_normal((5, 20)).astype(np.float32)
    outputs = [dd.tensor_fields(y, "NC1HWC0", original_op=("relu8", 0)),
               dd.tensor_fields(m, "FRACTAL_NZ", original_op=("gemm", 1))]
    inputs = [dd.tensor_fields(w, "FRACTAL_Z", sub_format=2), dd.tensor_fields(y, "NC1HWC0")]
    raw = dd.encode("conv8", outputs, inputs, dump_time=1700000000123456, buffers=[b"\x01" * 24])
    (length,) = struct.unpack_from("<Q", raw)
    decoded = _published_class()()
    decoded.ParseFromString(raw[8:8 + length])
    ours = read_dump_bytes(raw)
    assert (ours.op_name, ours.version, ours.dump_time) == (decoded.op_name, decoded.version, decoded.dump_time)
    assert decoded.op_name == "conv8" and decoded.dump_time == 1700000000123456
    assert len(ours.outputs) == len(decoded.output) == 2 and len(ours.inputs) == len(decoded.input) == 2
    for a, b in zip(decoded.output, ours.outputs):
        _assert_same_tensor(a, b, output=True)
    for a, b in zip(decoded.input, ours.inputs):
        _assert_same_tensor(a, b, output=False)
    assert decoded.output[0].original_op.name == "relu8" and decoded.output[1].original_op.output_index == 1
    assert decoded.input[0].sub_format == 2 and decoded.output[1].size == 2 * 1 * 16 * 16 * 4  # [N1, M1, 16, 16]
    assert ours.buffer_sizes == [b.size for b in decoded.buffer] == [24]
    # the bytes after the header, inputs then outputs, each its size: what the double wrote
    pos = 8 + length
    for tensor, fields in zip(ours.inputs + ours.outputs, inputs + outputs):
        assert tensor.data == fields["data"] == raw[pos:pos + fields["size"]]
        pos += fields["size"]
    assert raw[pos:] == b"\x01" * 24


def test_the_reader_reads_every_published_field_protobuf_encodes():
    """A message built by protobuf from the published schema alone (not by the double): every field set,
    a negative sub_format, a workspace, a field number the schema does not have (a newer CANN's)."""
    msg = _published_class()()
    msg.version, msg.dump_time, msg.op_name = "2.0", 42, "fused/op"
    out = msg.output.add()
    out.data_type, out.format, out.size, out.sub_format = 27, 29, 4, -3
    out.shape.dim.extend([1, 1, 1, 2])
    out.original_shape.dim.extend([1, 2])
    out.original_op.name, out.original_op.output_index, out.original_op.data_type, out.original_op.format = "mm", 7, 1, 2
    inp = msg.input.add()
    inp.data_type, inp.format, inp.size, inp.sub_format = 3, 2, 3, 5
    inp.shape.dim.extend([3])
    inp.original_shape.dim.extend([3])
    msg.buffer.add(size=2)
    msg.space.add(size=1)
    header = msg.SerializeToString() + b"\xf8\x01\x05"  # field 31, varint 5: unknown to the schema, skipped
    raw = struct.pack("<Q", len(header)) + header + b"\x01\x02\x03" + b"\x80\x3f\x00\x40" + b"\x00" * 3
    rec = read_dump_bytes(raw)
    (o,), (i,) = rec.outputs, rec.inputs
    assert (rec.version, rec.dump_time, rec.op_name) == ("2.0", 42, "fused/op")
    assert (o.data_type, o.format, o.size, o.sub_format, o.shape, o.original_shape) == (27, 29, 4, -3, [1, 1, 1, 2], [1, 2])
    assert (o.original_op.name, o.original_op.output_index, o.original_op.data_type, o.original_op.format) == ("mm", 7, 1, 2)
    assert (i.data_type, i.format, i.size, i.sub_format, i.shape, i.original_op) == (3, 2, 3, 5, [3], None)
    assert i.data == b"\x01\x02\x03" and o.array().tolist() == [1.0, 2.0]  # bf16 0x3f80, 0x4000
    assert rec.buffer_sizes == [2] and rec.space_sizes == [1]


# ---- damaged headers: located errors, before anything is written ----

def _raw_with(mutate, outputs=None):
    msg = dd._dump_class()()
    fields = outputs or [dd.tensor_fields(np.ones((1, 16, 2, 2), np.float32), "NC1HWC0")]
    tail = b""
    for t in fields:
        item = msg.output.add()
        item.data_type, item.format, item.size = t["data_type"], t["format"], t["size"]
        item.shape.dim.extend(t["shape"])
        item.original_shape.dim.extend(t["original_shape"])
        tail += t["data"]
    mutate(msg)
    header = msg.SerializeToString()
    return struct.pack("<Q", len(header)) + header + tail


@pytest.mark.parametrize("mutate, field, words", [
    (lambda m: m.output[0].shape.dim.__setitem__(1, (1 << 64) - 1), "output[0].shape.dim[1]", "= -1: a dim cannot be negative"),
    (lambda m: m.output[0].original_shape.dim.__setitem__(0, (1 << 64) - 5), "output[0].original_shape.dim[0]", "negative"),
    (lambda m: m.output[0].shape.dim.extend([1 << 40, 1 << 40]), "output[0].shape", "overflow int64"),
    (lambda m: m.output[0].shape.dim.__setitem__(2, 1 << 30), "output[0].shape", "more than the whole file"),
    (lambda m: setattr(m.output[0], "size", 1 << 20), "output[0].size", "runs past the end"),
    (lambda m: m.buffer.add(size=9), "buffer[0].size", "runs past the end"),
])
def test_a_header_that_cannot_be_this_files_tensors_names_the_field(mutate, field, words):
    with pytest.raises(DumpFormatError, match=re.escape(words)) as caught:
        read_dump_bytes(_raw_with(mutate))
    assert caught.value.field == field and field in str(caught.value)


def _empty_tensor_raw(shape, original, size=64):
    """One float32 output whose header says ``shape`` / ``original`` over ``size`` bytes of data."""
    msg = dd._dump_class()()
    item = msg.output.add()
    item.data_type, item.format, item.size = 1, 2, size  # float32, ND
    item.shape.dim.extend(shape)
    item.original_shape.dim.extend(original)
    header = msg.SerializeToString()
    return struct.pack("<Q", len(header)) + header + b"\0" * size


@pytest.mark.parametrize("shape, original, size, field", [
    ([1 << 40, 0], [], 64, "output[0].shape.dim[0]"),  # empty, so it claimed no byte: read as an empty tensor
    ([0], [1 << 40, 0], 64, "output[0].original_shape.dim[0]"),  # reshaped to [2^40, 0]: an empty tensor
    ([16], [1 << 40], 64, "output[0].original_shape.dim[0]"),
    ([1 << 40], [], 0, "output[0].shape.dim[0]"),  # listed without its bytes
])
def test_dims_no_device_holds_are_refused_naming_the_field(shape, original, size, field):
    with pytest.raises(DumpFormatError) as caught:
        read_dump_bytes(_empty_tensor_raw(shape, original, size))
    assert caught.value.field == field
    assert str(caught.value).startswith(f"{field} = 1099511627776: the shape ")
    assert str(caught.value).endswith("more than any Ascend device's memory: not a tensor the device dumped")
    # an empty tensor of a model's own dims (a prefill's empty KV cache) still reads, as an empty tensor
    rec = read_dump_bytes(_empty_tensor_raw([1, 32, 0, 128], [1, 32, 0, 128], 0))
    array, reason = device_tensor(rec.outputs[0])
    assert reason is None and array.shape == (1, 32, 0, 128)


def test_a_dump_folder_holding_a_2_40_dim_is_a_user_error_naming_the_file_and_field(tmp_path):
    from ascendpipe.backends.ascend.acl_dump import OpNaming, index_from_device_dumps
    from ascendpipe.errors import UserError

    leaf = tmp_path / "leaf"
    leaf.mkdir()
    (leaf / "Relu.r.1.0.1700000000000001").write_bytes(_empty_tensor_raw([1 << 40, 0], []))
    with pytest.raises(UserError) as caught:
        index_from_device_dumps(leaf, tmp_path / "out", OpNaming.from_om({}), model="m.om", feeds={})
    err = caught.value
    assert err.location.file.endswith("Relu.r.1.0.1700000000000001") and err.location.field == "output[0].shape.dim[0]"
    assert str(err).startswith(f"{leaf / 'Relu.r.1.0.1700000000000001'}: cannot read the device dump "
                               "Relu.r.1.0.1700000000000001: output[0].shape.dim[0] = 1099511627776: the shape "
                               "[1099511627776, 0] is empty, but with its empty axis at one it would hold ")
    assert not (tmp_path / "out").exists()


def test_two_million_tensors_in_one_header_are_refused_quickly():
    import time

    empty = dd.tensor_fields(np.zeros((0,), np.float32), "ND")
    one = dd.encode("op", [empty])
    (length,) = struct.unpack_from("<Q", one)
    body = one[8:8 + length]
    output = body[body.index(b"\x1a"):]  # the output field (3, length-delimited) is last: op_name is written first
    header = body[:body.index(b"\x1a")] + output * 2_000_000
    start = time.perf_counter()
    with pytest.raises(DumpFormatError, match="more than 10000 tensors"):
        read_dump_bytes(struct.pack("<Q", len(header)) + header)
    assert time.perf_counter() - start < 5  # refused from the field count, long before 2M tensors are built


def test_a_damaged_file_in_a_dump_folder_is_a_located_user_error_and_nothing_is_written(tmp_path):
    from ascendpipe.backends.ascend.acl_dump import OpNaming, index_from_device_dumps
    from ascendpipe.errors import UserError

    leaf = tmp_path / "leaf"
    leaf.mkdir()
    good = dd.encode("a", [dd.tensor_fields(np.ones((1, 4, 2, 2), np.float32), "NC1HWC0")])
    (leaf / "Conv2D.a.1.0.1700000000000001").write_bytes(good)
    (leaf / "Relu.b.2.0.1700000000000002").write_bytes(_raw_with(lambda m: m.output[0].shape.dim.__setitem__(0, (1 << 64) - 1)))
    out = tmp_path / "out"
    with pytest.raises(UserError) as caught:
        index_from_device_dumps(leaf, out, OpNaming.from_om({}), model="m.om", feeds={"x": np.ones(2, np.float32)})
    err = caught.value
    assert "Relu.b.2.0.1700000000000002" in str(err) and "output[0].shape.dim[0] = -1" in str(err)
    assert err.location.file.endswith("Relu.b.2.0.1700000000000002") and err.location.field == "output[0].shape.dim[0]"
    assert not out.exists()  # the headers are checked before any file is written


# ---- group conv weights, fused outputs' original_op ----

def test_a_group_conv_weight_is_not_compared_even_where_its_shape_fits_the_plain_layout():
    w = RNG.standard_normal((32, 8, 3, 3)).astype(np.float16)  # groups = 2 of 16 in-channels: a plain shape fits
    tensor = read_dump_bytes(dd.encode("conv", [dd.tensor_fields(w, "FRACTAL_Z", sub_format=2)])).outputs[0]
    back, reason = device_tensor(tensor)
    assert reason == "group conv: device format FRACTAL_Z with sub_format 2 (groups)" and back.shape == tuple(tensor.shape)
    # sub_format 0 / 1 (no groups): the plain weight layout
    tensor = read_dump_bytes(dd.encode("conv", [dd.tensor_fields(w, "FRACTAL_Z", sub_format=1)])).outputs[0]
    back, reason = device_tensor(tensor)
    assert reason is None
    np.testing.assert_array_equal(back, w)


def _leaf_with_fused_conv(tmp_path, origin=("relu8", 0)):
    leaf = tmp_path / "leaf"
    leaf.mkdir()
    y = np.maximum(RNG.standard_normal((1, 8, 3, 3)).astype(np.float32), 0)
    raw = dd.encode("conv8", [dd.tensor_fields(y, "NC1HWC0", original_op=origin)])
    (leaf / "Conv2D.conv8.1.0.1700000000000001").write_bytes(raw)
    return leaf, y


def test_a_fused_output_maps_to_its_original_op_by_the_dumps_original_op_without_an_om_json(tmp_path):
    from ascendpipe.backends.ascend.acl_dump import OpNaming, index_from_device_dumps
    from ascendpipe.compare.mapping import pair_tensors

    leaf, y = _leaf_with_fused_conv(tmp_path)
    index = json.loads(index_from_device_dumps(leaf, tmp_path / "out", OpNaming.from_om({}), model="m.om",
                                               feeds={}).read_text())
    (entry,) = index["tensors"]
    assert entry["name"] == "conv8:output:0" and entry["origin"] == ["relu8", 0] and "not_compared" not in entry
    golden = [{"name": "c8", "op_name": "conv8", "topo_index": 0}, {"name": "r8", "op_name": "relu8", "topo_index": 1}]
    pairs = pair_tensors(golden, index["tensors"])
    assert [(p.golden and p.golden["name"], p.target and p.target["name"]) for p in pairs] == [
        ("r8", "conv8:output:0"), ("c8", None)]


def test_a_dumps_original_op_that_the_om_json_contradicts_is_not_compared(tmp_path):
    from ascendpipe.backends.ascend.acl_dump import OpNaming, index_from_device_dumps

    leaf, _ = _leaf_with_fused_conv(tmp_path, origin=("conv8", 0))
    naming = OpNaming.from_om({"conv8": "Conv2D"}, {}, {("conv8", 0): ("relu8", 0)})
    (entry,) = json.loads(index_from_device_dumps(leaf, tmp_path / "out", naming, model="m.om", feeds={}).read_text())["tensors"]
    assert entry["not_compared"] == ("the dump's original_op conv8:0 is not the OM JSON's _datadump_origin_name relu8:0")
    naming = OpNaming.from_om({"conv8": "Conv2D"}, {}, {("conv8", 0): ("conv8", 0)})
    (entry,) = json.loads(index_from_device_dumps(leaf, tmp_path / "out2", naming, model="m.om", feeds={}).read_text())["tensors"]
    assert "not_compared" not in entry and entry["origin"] == ["conv8", 0]


def test_without_the_om_json_the_dumps_original_op_pairs_the_fused_output(cann_env, layout_om, make_ctx, monkeypatch,
                                                                           tmp_path):
    """The device dump alone (no model.json, no fused_map.json beside it): conv8's fused output still pairs with
    relu8's tensor, through the original_op the runtime wrote, and reads as msaccucmp would compare it."""
    import shutil

    from ascendpipe.backends.onnxruntime.dump import dump_model
    from ascendpipe.compare.runner import compare_dumps

    _compare(make_ctx, layout_om, monkeypatch, {}, name="compare__origin")
    target = tmp_path / "target_alone"
    shutil.copytree(tmp_path / "build" / "compare__origin" / "target_dump", target)
    for name in ("model.json", "fused_map.json"):
        (target / name).unlink(missing_ok=True)
    index = json.loads((target / "index.json").read_text())
    for entry in index["tensors"]:  # named as index_from_device_dumps names them without an OM JSON
        if entry["op_type"] != "Input":
            k = [e for e in index["tensors"] if e["op_name"] == entry["op_name"]].index(entry)
            entry["name"] = f"{entry['op_name']}:output:{k}"
    assert next(e for e in index["tensors"] if e["op_name"] == "conv8")["origin"] == ["relu8", 0]
    (target / "index.json").write_text(json.dumps(index))
    _, model, x = layout_om
    golden = dump_model(model, {"x": np.load(x)}, tmp_path / "golden", fusions=False).parent
    rows = {r["tensor"]: r for r in compare_dumps(golden, target)["rows"]}
    fused = rows["conv8:output:0"]
    assert fused["golden_tensor"] == "r8" and f"{fused['cosine']:.6f}" == "1.000000"
    assert rows["c8"]["side"] == "golden_only"
    assert rows["conv16:output:0"]["golden_tensor"] == "c16" and rows["mm:output:0"]["golden_tensor"] == "out"
    assert all(r["side"] == "both" for t, r in rows.items() if t.endswith(":output:0"))


def test_a_damaged_device_dump_fails_the_compare_with_the_file_and_field(cann_env, layout_om, make_ctx, monkeypatch):
    from ascendpipe.errors import UserError

    with pytest.raises(UserError) as caught:
        _compare(make_ctx, layout_om, monkeypatch, {"CANN_DOUBLE_DUMP_NEGATIVE_DIM": "conv16"}, name="compare__bad")
    err = caught.value
    assert "output[0].shape.dim[0] = -1: a dim cannot be negative" in str(err)
    assert ".conv16." in err.location.file and err.location.field == "output[0].shape.dim[0]"
