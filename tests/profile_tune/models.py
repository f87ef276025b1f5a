"""Small ONNX models built with onnx.helper for the profile/tune tests."""

from __future__ import annotations

from pathlib import Path

import numpy as np


def _save(graph, path: Path) -> Path:
    import onnx
    from onnx import helper

    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    model.ir_version = 8
    onnx.checker.check_model(model)
    onnx.save(model, str(path))
    return path


def conv_chain(path: Path, *, channels: int = 16, size: int = 32, batch: int = 2) -> Path:
    """Conv -> Relu -> Conv -> Relu -> GlobalAveragePool -> Flatten -> Gemm: cube and vector ops."""
    from onnx import TensorProto, helper, numpy_helper

    rng = np.random.default_rng(0)

    def const(name, shape):
        return numpy_helper.from_array((rng.standard_normal(shape) * 0.1).astype(np.float32), name)

    inits = [const("w1", (channels, 3, 3, 3)), const("b1", (channels,)),
             const("w2", (channels, channels, 3, 3)), const("b2", (channels,)),
             const("fc_w", (channels, 10)), const("fc_b", (10,))]
    nodes = [
        helper.make_node("Conv", ["x", "w1", "b1"], ["c1"], name="conv1", pads=[1, 1, 1, 1]),
        helper.make_node("Relu", ["c1"], ["r1"], name="relu1"),
        helper.make_node("Conv", ["r1", "w2", "b2"], ["c2"], name="conv2", pads=[1, 1, 1, 1]),
        helper.make_node("Relu", ["c2"], ["r2"], name="relu2"),
        helper.make_node("GlobalAveragePool", ["r2"], ["gap"], name="gap"),
        helper.make_node("Flatten", ["gap"], ["flat"], name="flatten"),
        helper.make_node("Gemm", ["flat", "fc_w", "fc_b"], ["y"], name="fc"),
    ]
    graph = helper.make_graph(nodes, "conv_chain",
                              [helper.make_tensor_value_info("x", TensorProto.FLOAT, [batch, 3, size, size])],
                              [helper.make_tensor_value_info("y", TensorProto.FLOAT, [batch, 10])], inits)
    return _save(graph, path)


def constant_heavy(path: Path, *, n_const: int = 6, size: int = 192, batch: int = 4) -> Path:
    """A model with a known slow setting: a chain of MatMuls over constants only. Constant folding
    (any level above ORT_DISABLE_ALL) computes it once at load; ORT_DISABLE_ALL recomputes it on
    every run, ~n_const * size^3 * 2 flops against the x-path's batch * size^2 * 2."""
    from onnx import TensorProto, helper, numpy_helper

    rng = np.random.default_rng(0)
    inits = [numpy_helper.from_array((rng.standard_normal((size, size)) / np.sqrt(size)).astype(np.float32), f"c{i}")
             for i in range(n_const + 1)]
    nodes, prev = [], "c0"
    for i in range(1, n_const + 1):
        nodes.append(helper.make_node("MatMul", [prev, f"c{i}"], [f"k{i}"], name=f"const_mm{i}"))
        prev = f"k{i}"
    nodes += [helper.make_node("MatMul", ["x", prev], ["h"], name="mm_x"),
              helper.make_node("Relu", ["h"], ["y"], name="relu")]
    graph = helper.make_graph(nodes, "constant_heavy",
                              [helper.make_tensor_value_info("x", TensorProto.FLOAT, [batch, size])],
                              [helper.make_tensor_value_info("y", TensorProto.FLOAT, [batch, size])], inits)
    return _save(graph, path)
