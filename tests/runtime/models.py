"""Tiny ONNX models built with onnx.helper for the runtime tests, plus their numpy references."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import onnx
from onnx import TensorProto, helper, numpy_helper

OPSET = [helper.make_opsetid("", 17)]


def save(model: onnx.ModelProto, path: Path) -> Path:
    onnx.checker.check_model(model)
    onnx.save(model, str(path))
    return path


def linear_model(path: Path, batch="N", features=3, classes=2, seed=1):
    """y = relu(x @ w + b), with a second output 'head/score' = sum(y, axis=1). Returns (path, w, b)."""
    rng = np.random.default_rng(seed)
    w = rng.standard_normal((features, classes)).astype(np.float32)
    b = rng.standard_normal(classes).astype(np.float32)
    x = helper.make_tensor_value_info("x", TensorProto.FLOAT, [batch, features])
    y = helper.make_tensor_value_info("y", TensorProto.FLOAT, [batch, classes])
    s = helper.make_tensor_value_info("head/score", TensorProto.FLOAT, [batch])
    nodes = [
        helper.make_node("MatMul", ["x", "w"], ["mm"], name="matmul"),
        helper.make_node("Add", ["mm", "b"], ["pre"], name="add"),
        helper.make_node("Relu", ["pre"], ["y"], name="relu"),
        helper.make_node("ReduceSum", ["y", "axes"], ["head/score"], name="sum", keepdims=0),
    ]
    inits = [numpy_helper.from_array(w, "w"), numpy_helper.from_array(b, "b"),
             numpy_helper.from_array(np.array([1], np.int64), "axes")]
    graph = helper.make_graph(nodes, "linear", [x], [y, s], inits)
    return save(helper.make_model(graph, opset_imports=OPSET), path), w, b


def linear_reference(x, w, b):
    y = np.maximum(x @ w + b, 0)
    return y, y.sum(axis=1)


def conv_model(path: Path, seed=2):
    """Conv -> Relu -> Log -> Sqrt on [N,1,4,4]; ORT's default level fuses Conv+Relu."""
    rng = np.random.default_rng(seed)
    k = rng.standard_normal((2, 1, 3, 3)).astype(np.float32)
    x = helper.make_tensor_value_info("img", TensorProto.FLOAT, ["N", 1, 4, 4])
    out = helper.make_tensor_value_info("out", TensorProto.FLOAT, ["N", 2, 4, 4])
    nodes = [
        helper.make_node("Conv", ["img", "k"], ["c"], name="conv", pads=[1, 1, 1, 1]),
        helper.make_node("Relu", ["c"], ["r"], name="relu"),
        helper.make_node("Log", ["r"], ["l"], name="log"),  # log(0) = -inf where relu clipped
        helper.make_node("Sqrt", ["l"], ["out"], name="sqrt"),  # sqrt(negative) = nan
    ]
    graph = helper.make_graph(nodes, "conv", [x], [out], [numpy_helper.from_array(k, "k")])
    return save(helper.make_model(graph, opset_imports=OPSET), path), k


def conv2d_reference(x, k):
    n, _, h, wd = x.shape
    padded = np.pad(x, ((0, 0), (0, 0), (1, 1), (1, 1)))
    out = np.zeros((n, k.shape[0], h, wd), np.float64)
    for o in range(k.shape[0]):
        for i in range(h):
            for j in range(wd):
                out[:, o, i, j] = (padded[:, 0, i:i + 3, j:j + 3] * k[o, 0]).sum(axis=(1, 2))
    return out.astype(np.float32)


def emulated_model(path: Path):
    """Relu then Neg, with the Relu output rounded to fp16 by emulation casts, as convert writes it."""
    x = helper.make_tensor_value_info("x", TensorProto.FLOAT, ["N", 4])
    y = helper.make_tensor_value_info("y", TensorProto.FLOAT, ["N", 4])
    nodes = [
        helper.make_node("Relu", ["x"], ["r__raw"], name="relu"),
        helper.make_node("Cast", ["r__raw"], ["r__h"], name="ascendpipe_emu/relu/to16", to=TensorProto.FLOAT16),
        helper.make_node("Cast", ["r__h"], ["r"], name="ascendpipe_emu/relu/to32", to=TensorProto.FLOAT),
        helper.make_node("Neg", ["r"], ["y"], name="neg"),
    ]
    model = helper.make_model(helper.make_graph(nodes, "emu", [x], [y]), opset_imports=OPSET)
    meta = {"format": 1, "internal_tensors": ["r__raw", "r__h"],
            "tensor_producer": {"r": {"op_name": "relu", "op_type": "Relu"}}}
    helper.set_model_props(model, {"ascendpipe.emulation": json.dumps(meta)})
    return save(model, path)


def two_input_model(path: Path, batch=2):
    """out = a * b + 1 with a static batch."""
    a = helper.make_tensor_value_info("a", TensorProto.FLOAT, [batch, 3])
    b = helper.make_tensor_value_info("b", TensorProto.FLOAT, [batch, 3])
    out = helper.make_tensor_value_info("out", TensorProto.FLOAT, [batch, 3])
    nodes = [helper.make_node("Mul", ["a", "b"], ["m"], name="mul"),
             helper.make_node("Add", ["m", "one"], ["out"], name="add")]
    graph = helper.make_graph(nodes, "two", [a, b], [out], [numpy_helper.from_array(np.ones(1, np.float32), "one")])
    return save(helper.make_model(graph, opset_imports=OPSET), path)
