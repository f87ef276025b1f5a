"""bf16 and HF32 rounding, bit for bit against references written apart: ``ml_dtypes`` for bf16, a
mantissa mask-and-round on the fp32 bit pattern for HF32; both as numpy (weights) and as the ONNX
nodes the emulated model runs (activations), on edge values: ties, subnormals, inf/NaN, the largest
finite, signed zeros."""

from __future__ import annotations

import numpy as np
import pytest

from ascendpipe.precision import formats

ml_dtypes = pytest.importorskip("ml_dtypes", reason="ml_dtypes (installed with onnx) is the bf16 reference")


def mask_round(x: np.ndarray, mantissa: int) -> np.ndarray:
    """The reference: drop the low 23 - m bits of the fp32 pattern, rounding to nearest even (a carry
    may run into the exponent: the largest finite rounds up to inf); NaN stays NaN."""
    drop = 23 - mantissa
    u = np.asarray(x, np.float32).view(np.uint32).astype(np.uint64)
    half = (1 << (drop - 1)) - 1
    r = ((u + half + ((u >> drop) & 1)) & ~np.uint64((1 << drop) - 1)).astype(np.uint32).view(np.float32)
    return np.where(np.isnan(x), x, r)


def edge_values(mantissa: int) -> np.ndarray:
    drop = 23 - mantissa
    tie, below, above = 1 << (drop - 1), (1 << (drop - 1)) - 1, (1 << (drop - 1)) + 1
    bits = []
    for base in (0x3F800000, 0x3F800000 | (1 << drop), 0x00000000, 0x00000000 | (1 << drop), 0x00400000,
                 0x007FF000 & ~((1 << drop) - 1), 0x7F7FFFFF & ~((1 << drop) - 1), 0x42F60000):
        for low in (0, tie, below, above, (1 << drop) - 1):
            bits += [base | low, (base | low) | 0x80000000]
    bits += [0x7F7FFFFF, 0xFF7FFFFF, 0x00000001, 0x80000001, 0x007FFFFF, 0x00800000, 0x7F800000, 0xFF800000,
             0x7FC00000, 0x7F800001, 0xFFC00001, 0x80000000, 0x00000000]
    return np.array(bits, np.uint32).view(np.float32)


def random_values(n: int = 400_000) -> np.ndarray:
    rng = np.random.default_rng(41)
    return rng.integers(0, 2 ** 32, size=n, dtype=np.uint64).astype(np.uint32).view(np.float32)


def same_bits(a: np.ndarray, b: np.ndarray) -> np.ndarray:
    return (a.view(np.uint32) == b.view(np.uint32)) | (np.isnan(a) & np.isnan(b))


def test_reference_mask_round_on_known_values():
    # the reference itself, on values worked by hand: 1 + 2^-12 is HF32's tie between 1 and 1 + 2^-11
    assert mask_round(np.float32([1 + 2 ** -12]), 11)[0] == 1.0  # tie to even (1.0)
    assert mask_round(np.float32([1 + 3 * 2 ** -12]), 11)[0] == 1 + 2 ** -10  # tie to even (up)
    assert np.isinf(mask_round(np.float32([np.finfo(np.float32).max]), 11)[0])
    assert mask_round(np.float32([2 ** -149]), 11)[0] == 0.0
    assert mask_round(np.float32([2 ** -137]), 11)[0] == 2 ** -137  # HF32 keeps fp32's subnormal exponent


@pytest.mark.parametrize("fmt,mantissa", [("bfloat16", 7), ("hf32", 11), ("hf32", 10)])
def test_numpy_rounding_is_bit_exact(fmt, mantissa):
    x = np.concatenate([edge_values(mantissa), random_values()])
    got = formats.round_to(x, fmt, hf32_bits=mantissa)
    want = mask_round(x, mantissa)
    if fmt == "bfloat16":
        with np.errstate(all="ignore"):
            assert same_bits(want, x.astype(ml_dtypes.bfloat16).astype(np.float32)).all()  # the two references agree
    bad = ~same_bits(got, want)
    assert not bad.any(), (x[bad][:5].view(np.uint32), got[bad][:5], want[bad][:5])


def _rounding_model(fmt: str, opset: int, saturate: bool = False, hf32_bits: int = 11):
    from onnx import TensorProto, helper

    from ascendpipe.backends.onnxruntime.rounding import Rounding

    rounding = Rounding(saturate=saturate, opset=opset, hf32_bits=hf32_bits)
    nodes, _ = rounding.nodes("x", "y", "x", "in", fmt)
    graph = helper.make_graph(nodes, "g", [helper.make_tensor_value_info("x", TensorProto.FLOAT, [None])],
                              [helper.make_tensor_value_info("y", TensorProto.FLOAT, [None])])
    constants = rounding.write_constants(graph)
    for node in reversed(constants):
        graph.node.insert(0, node)
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", opset)])


@pytest.mark.parametrize("fmt,mantissa,opset", [("bfloat16", 7, 17), ("bfloat16", 7, 11), ("bfloat16", 7, 8), ("hf32", 11, 17),
                                                 ("hf32", 11, 11), ("hf32", 10, 17)])
@pytest.mark.parametrize("level", ["DISABLE_ALL", "ENABLE_ALL"])
def test_onnx_rounding_nodes_are_bit_exact(fmt, mantissa, opset, level):
    import onnx
    import onnxruntime as ort

    model = _rounding_model(fmt, opset, hf32_bits=mantissa)
    onnx.checker.check_model(model)
    options = ort.SessionOptions()
    options.graph_optimization_level = getattr(ort.GraphOptimizationLevel, f"ORT_{level}")
    session = ort.InferenceSession(model.SerializeToString(), options, providers=["CPUExecutionProvider"])
    x = np.concatenate([edge_values(mantissa), random_values()])
    got = session.run(None, {"x": x})[0]
    want = mask_round(x, mantissa)
    bad = ~same_bits(got, want)
    assert not bad.any(), (x[bad][:5].view(np.uint32), got[bad][:5], want[bad][:5])


@pytest.mark.parametrize("fmt", ["float16", "bfloat16", "hf32"])
def test_saturation_maps_nan_to_zero_and_inf_to_the_formats_max(fmt):
    import onnxruntime as ort

    top = formats.format_max(fmt)
    x = np.float32([np.nan, np.inf, -np.inf, 3.0e38, -3.0e38, 1.5, -np.nan])
    session = ort.InferenceSession(_rounding_model(fmt, 17, saturate=True).SerializeToString(),
                                   providers=["CPUExecutionProvider"])
    got = session.run(None, {"x": x})[0]
    big = np.float32(min(3.0e38, top))
    want = np.float32([0.0, top, -top, formats.round_to(np.float32([big]), fmt)[0], -formats.round_to(np.float32([big]), fmt)[0],
                       1.5, 0.0])
    assert np.array_equal(got, want), got
    assert np.array_equal(formats.saturate(x, fmt), np.clip(np.nan_to_num(x, nan=0.0), -top, top).astype(np.float32))
    assert formats.format_max("bfloat16") == float(ml_dtypes.finfo(ml_dtypes.bfloat16).max)
    assert formats.format_max("hf32") == (2 - 2 ** -11) * 2.0 ** 127
