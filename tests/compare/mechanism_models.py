"""Small ONNX models, one per failure mechanism compare names (issue 30), with inputs that trigger it.

- ``log_eps``: an audio front end's ``Log(x*x + 1e-10)`` behind layout ops: in fp16 the 1e-10 and the
  squares below 6e-8 (40% of them) flush to 0, and Log gives -inf: an underflow, fixed by {Add, Log}.
- ``attention_mask``: scores + an additive mask holding float32's lowest value where masked (Where),
  then Softmax: fp16 turns the mask into -inf, Softmax absorbs it, the output passes.
- ``qdq_matmul``: x -> Q/DQ -> MatMul(DQ(int8 weights)) -> Q/DQ: the requantised output differs from
  the golden by at most one quantisation step.
- ``global_sum``: a ReduceSum over 4096 features (beyond 65504) feeding a MatMul: keep_dtype works only
  on a SoC whose cube unit reads fp32 (Ascend910B1), not on the 310 family (docs/emulation.md).
Weights are seeded.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np

from tests.modelzoo import _const, _save

EPS = 1e-10


def log_eps_model(path: Path | str, frames: int = 16, bins: int = 32) -> Path:
    """x [1, bins, frames] -> Transpose -> Mul(x, x) -> Reshape -> Add(1e-10) -> Log -> Pad -> MatMul -> y."""
    from onnx import TensorProto, helper

    w = (np.random.default_rng(3).standard_normal((bins, 8)) / np.sqrt(bins)).astype(np.float32)
    nodes = [
        helper.make_node("Transpose", ["x"], ["xt"], name="transpose", perm=[0, 2, 1]),
        helper.make_node("Mul", ["xt", "xt"], ["power"], name="power"),
        helper.make_node("Reshape", ["power", "shape"], ["power2"], name="reshape"),
        helper.make_node("Add", ["power2", "eps"], ["power_eps"], name="add_eps"),
        helper.make_node("Log", ["power_eps"], ["logmel"], name="log"),
        helper.make_node("Pad", ["logmel", "pads"], ["padded"], name="pad"),
        helper.make_node("MatMul", ["padded", "w"], ["y"], name="proj"),
    ]
    graph = helper.make_graph(
        nodes, "log_eps", [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, bins, frames])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, [frames + 2, 8])],
        initializer=[_const("eps", np.float32(EPS)), _const("shape", np.array([frames, bins], np.int64)),
                     _const("pads", np.array([1, 0, 1, 0], np.int64)), _const("w", w)])
    return _save(graph, path)


def log_eps_inputs(seed: int = 0, frames: int = 16, bins: int = 32) -> dict[str, np.ndarray]:
    """Magnitudes log-uniform over 1e-6..1: 40% have squares below fp16's smallest subnormal."""
    rng = np.random.default_rng(seed)
    magnitude = 10.0 ** rng.uniform(-6, 0, (1, bins, frames))
    return {"x": (magnitude * rng.choice([-1.0, 1.0], magnitude.shape)).astype(np.float32)}


def attention_mask_model(path: Path | str, seq: int = 8, dim: int = 16) -> Path:
    """q, k, v [1, seq, dim] and a 0/1 mask [1, 1, seq]: Softmax(q k^T / 4 + Where(mask, 0, lowest)) v."""
    from onnx import TensorProto, helper

    lowest = np.finfo(np.float32).min
    nodes = [
        helper.make_node("Transpose", ["k"], ["kt"], name="k_t", perm=[0, 2, 1]),
        helper.make_node("MatMul", ["q", "kt"], ["qk"], name="scores"),
        helper.make_node("Mul", ["qk", "scale"], ["scaled"], name="scale"),
        helper.make_node("Cast", ["mask"], ["keep"], name="mask_bool", to=TensorProto.BOOL),
        helper.make_node("Where", ["keep", "zero", "lowest"], ["bias"], name="mask_bias"),
        helper.make_node("Add", ["scaled", "bias"], ["masked"], name="add_mask"),
        helper.make_node("Softmax", ["masked"], ["probs"], name="softmax", axis=-1),
        helper.make_node("MatMul", ["probs", "v"], ["context"], name="context"),
    ]
    specs = [helper.make_tensor_value_info(n, TensorProto.FLOAT, [1, seq, dim]) for n in ("q", "k", "v")]
    specs.append(helper.make_tensor_value_info("mask", TensorProto.FLOAT, [1, 1, seq]))
    graph = helper.make_graph(
        nodes, "attention_mask", specs, [helper.make_tensor_value_info("context", TensorProto.FLOAT, [1, seq, dim])],
        initializer=[_const("scale", np.float32(0.25)), _const("zero", np.float32(0.0)),
                     _const("lowest", np.float32(lowest))])
    return _save(graph, path)


def attention_mask_inputs(seed: int = 0, seq: int = 8, dim: int = 16) -> dict[str, np.ndarray]:
    rng = np.random.default_rng(seed)
    feeds = {n: rng.standard_normal((1, seq, dim)).astype(np.float32) for n in ("q", "k", "v")}
    mask = np.ones((1, 1, seq), np.float32)
    mask[..., seq // 2:] = 0.0  # the padding half of the sequence
    feeds["mask"] = mask
    return feeds


def qdq_matmul_model(path: Path | str, rows: int = 16, inner: int = 32, cols: int = 16, y_scale: float = 6.0 / 127) -> Path:
    """x -> QuantizeLinear/DequantizeLinear -> MatMul(DequantizeLinear(int8 W)) -> QuantizeLinear/DequantizeLinear."""
    from onnx import TensorProto, helper

    rng = np.random.default_rng(5)
    w = (rng.standard_normal((inner, cols)) / np.sqrt(inner)).astype(np.float32)
    w_scale = np.float32(np.abs(w).max() / 127)
    w_q = np.clip(np.round(w / w_scale), -127, 127).astype(np.int8)
    nodes = [
        helper.make_node("QuantizeLinear", ["x", "x_scale", "x_zero"], ["x_q"], name="x_quant"),
        helper.make_node("DequantizeLinear", ["x_q", "x_scale", "x_zero"], ["x_dq"], name="x_dequant"),
        helper.make_node("DequantizeLinear", ["w_q", "w_scale", "w_zero"], ["w_dq"], name="w_dequant"),
        helper.make_node("MatMul", ["x_dq", "w_dq"], ["mm"], name="matmul"),
        helper.make_node("QuantizeLinear", ["mm", "y_scale", "y_zero"], ["y_q"], name="y_quant"),
        helper.make_node("DequantizeLinear", ["y_q", "y_scale", "y_zero"], ["y"], name="y_dequant"),
    ]
    graph = helper.make_graph(
        nodes, "qdq_matmul", [helper.make_tensor_value_info("x", TensorProto.FLOAT, [rows, inner])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, [rows, cols])],
        initializer=[_const("x_scale", np.float32(4.0 / 127)), _const("x_zero", np.int8(0)), _const("w_q", w_q),
                     _const("w_scale", w_scale), _const("w_zero", np.int8(0)),
                     _const("y_scale", np.float32(y_scale)), _const("y_zero", np.int8(0))])
    return _save(graph, path, opset=13)


def qdq_matmul_inputs(seed: int = 0, rows: int = 16, inner: int = 32) -> dict[str, np.ndarray]:
    return {"x": np.random.default_rng(seed).standard_normal((rows, inner)).astype(np.float32)}


def global_sum_model(path: Path | str, features: int = 4096, classes: int = 4) -> Path:
    """x [N, features] -> ReduceSum(axis 1) -> MatMul(W [1, classes], small) -> y: the sum exceeds 65504."""
    from onnx import TensorProto, helper

    w = (np.arange(1, classes + 1, dtype=np.float32) * 1e-3).reshape(1, classes)
    nodes = [
        helper.make_node("ReduceSum", ["x", "axes"], ["total"], name="total", keepdims=1),
        helper.make_node("MatMul", ["total", "w"], ["y"], name="head"),
    ]
    graph = helper.make_graph(
        nodes, "global_sum", [helper.make_tensor_value_info("x", TensorProto.FLOAT, ["N", features])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, ["N", classes])],
        initializer=[_const("axes", np.array([1], np.int64)), _const("w", w)])
    return _save(graph, path)


def global_sum_inputs(seed: int = 0, batch: int = 2, features: int = 4096) -> dict[str, np.ndarray]:
    """Values 20..40: sums near 1.2e5, beyond fp16's 65504."""
    return {"x": np.random.default_rng(seed).uniform(20, 40, (batch, features)).astype(np.float32)}
