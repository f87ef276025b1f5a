"""The device's own dump files: DumpData header + tensor bytes, each tensor in its storage layout.

Dumps are made from known arrays by the double's writer (tests/backends/ascend/doubles/pylib/_dump_double.py:
protobuf's own encoder over a schema declared there, the layouts written element by element from their index
formulas), independently of ascendpipe's hand-written reader (backends/ascend/dump_data.py, device_layout.py).
"""

from __future__ import annotations

import json
import sys

import numpy as np
import pytest

from ascendpipe.backends.ascend import device_layout
from ascendpipe.backends.ascend.acl_dump import device_tensor
from ascendpipe.backends.ascend.dump_data import DumpFormatError, read_dump_bytes
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


def _compare(make_ctx, layout_om, monkeypatch, env: dict, name="compare__fp32"):
    from ascendpipe.stages.compare import CompareKind

    for key, value in env.items():
        monkeypatch.setenv(key, value)
    out, model, x = layout_om
    ctx = make_ctx(name, "compare", {"msit": "off", "dump_keep": "all"}, inputs={"golden": model, "target": out, "inputs": x},
                   upstream={"target": ("convert", "convert", out)})
    result = CompareKind().run(ctx)
    rows = json.loads((ctx.out_dir / "result.json").read_text())["rows"]
    index = json.loads((ctx.out_dir / "target_dump/index.json").read_text())
    return result, {r["tensor"]: r for r in rows}, {t["name"]: t for t in index["tensors"]}


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
    result, rows, dumped = _compare(make_ctx, layout_om, monkeypatch, {"CANN_DOUBLE_DUMP_FORMAT": "conv16=FRACTAL_Z_3D"},
                                    name="compare__z3d")
    row = rows["c16"]
    assert dumped["c16"]["not_compared"] == "device format FRACTAL_Z_3D"
    assert "not compared (device format FRACTAL_Z_3D)" in row["note"]
    assert row["cosine"] is None and row["max_abs_error"] is None and not row["failed"]
    assert f"{rows['c33']['cosine']:.6f}" == "1.000000"
