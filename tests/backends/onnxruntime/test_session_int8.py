"""int8 (QDQ) models run as the device computes them: int8 products summed without saturation.

onnxruntime's x86 int8 kernels sum u8*s8 pairs in int16 on CPUs without VNNI (AVX2), which
saturates for large activations and weights: the classify int8 model lost 15 points of Top-1 on such
a CPU. The emulation's sessions keep QDQ as fake-quant (dequantize, then fp32 kernels), whose result
is the exact int32 sum. This model puts every pair sum at 2 * 255 * 127, past int16's 32767.
"""

from __future__ import annotations

import numpy as np
import onnx
from onnx import TensorProto, helper, numpy_helper

from ascendpipe.backends.onnxruntime.session import make_session


def _qdq_matmul(path, k: int):
    scale = numpy_helper.from_array(np.array(1.0, np.float32), "scale")
    zero = numpy_helper.from_array(np.array(0, np.int8), "zero")
    weight = numpy_helper.from_array(np.full((k, 4), 127, np.int8), "w_q")
    nodes = [
        helper.make_node("QuantizeLinear", ["x", "scale", "zero"], ["x_q"], name="x_quant"),
        helper.make_node("DequantizeLinear", ["x_q", "scale", "zero"], ["x_dq"], name="x_dequant"),
        helper.make_node("DequantizeLinear", ["w_q", "scale", "zero"], ["w_dq"], name="w_dequant"),
        helper.make_node("MatMul", ["x_dq", "w_dq"], ["y"], name="matmul"),
    ]
    graph = helper.make_graph(nodes, "qdq", [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, k])],
                              [helper.make_tensor_value_info("y", TensorProto.FLOAT, [1, 4])],
                              initializer=[scale, zero, weight])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 13)])
    onnx.save(model, str(path))


def test_int8_products_are_summed_without_saturation(tmp_path):
    k = 64
    _qdq_matmul(tmp_path / "model.onnx", k)
    x = np.full((1, k), 127.0, np.float32)
    y = make_session(tmp_path / "model.onnx").run(None, {"x": x})[0]
    np.testing.assert_array_equal(y, np.full((1, 4), 127.0 * 127.0 * k, np.float32))
