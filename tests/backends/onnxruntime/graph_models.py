"""Small ONNX models for ATC's ONNX graph fusions (the decomposed LayerNorm, the erf GELU), built as
PyTorch exports write them, with knobs that break one check of the pass at a time."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import onnx
from onnx import TensorProto, helper, numpy_helper


def _save(nodes, inputs, outputs, inits, path, opset):
    graph = helper.make_graph(nodes, "g", inputs, outputs, inits)
    onnx.save(helper.make_model(graph, opset_imports=[helper.make_opsetid("", opset)]), str(path))
    return Path(path)


def layer_norm_model(path, shape=(1, 16, 64), *, affine=True, cast=False, eps=1e-5, exponent=2.0, keepdims=1,
                     gamma_first=False, gamma_shape=None, extra_sub_reader=False, axes=(-1,), seed=0, opset=13,
                     two_subs=False, square_by_mul=False, producer=True):
    """x -> [Relu 'pre'] -> ReduceMean -> Sub -> [Cast] -> Pow(2) -> ReduceMean -> Add(eps) -> Sqrt -> Div
    [-> Mul(gamma) -> Add(beta)]: torch's decomposed LayerNorm (opset < 17). ``two_subs``: x - mean computed
    twice (LayerNormONNXMULFusionPass's shape); ``gamma_first``: Mul(gamma, div)."""
    rng = np.random.default_rng(seed)
    d = shape[-1]
    inits = [numpy_helper.from_array(np.float32(exponent), "two"), numpy_helper.from_array(np.float32(eps), "eps")]
    src = "x"
    nodes = []
    if producer:
        nodes.append(helper.make_node("Relu", ["x"], ["xr"], name="/pre/Relu"))
        src = "xr"
    nodes.append(helper.make_node("ReduceMean", [src], ["mean"], name="/ln/ReduceMean", axes=list(axes),
                                  keepdims=keepdims))
    nodes.append(helper.make_node("Sub", [src, "mean"], ["centred"], name="/ln/Sub"))
    sq_in = "centred"
    div_in = "centred"
    if two_subs:
        nodes.append(helper.make_node("Sub", [src, "mean"], ["centred2"], name="/ln/Sub_1"))
        sq_in = "centred2"
    if cast:
        nodes.append(helper.make_node("Cast", ["centred"], ["centred_f"], name="/ln/Cast", to=TensorProto.FLOAT))
        sq_in = "centred_f"
    if square_by_mul:
        nodes.append(helper.make_node("Mul", [sq_in, sq_in], ["sq"], name="/ln/Pow"))
    else:
        nodes.append(helper.make_node("Pow", [sq_in, "two"], ["sq"], name="/ln/Pow"))
    nodes += [helper.make_node("ReduceMean", ["sq"], ["var"], name="/ln/ReduceMean_1", axes=list(axes), keepdims=1),
              helper.make_node("Add", ["var", "eps"], ["var_eps"], name="/ln/Add"),
              helper.make_node("Sqrt", ["var_eps"], ["std"], name="/ln/Sqrt"),
              helper.make_node("Div", [div_in, "std"], ["normed"], name="/ln/Div")]
    outputs = [helper.make_tensor_value_info("y" if affine else "normed", TensorProto.FLOAT, list(shape))]
    if affine:
        gamma = rng.normal(1.0, 0.1, gamma_shape or (d,)).astype(np.float32)
        beta = rng.normal(0.0, 0.1, gamma_shape or (d,)).astype(np.float32)
        inits += [numpy_helper.from_array(gamma, "gamma"), numpy_helper.from_array(beta, "beta")]
        mul_in = ["gamma", "normed"] if gamma_first else ["normed", "gamma"]
        nodes += [helper.make_node("Mul", mul_in, ["scaled"], name="/ln/Mul"),
                  helper.make_node("Add", ["scaled", "beta"], ["y"], name="/ln/Add_1")]
    if extra_sub_reader:
        nodes.append(helper.make_node("Abs", ["centred"], ["side"], name="/side/Abs"))
        outputs.append(helper.make_tensor_value_info("side", TensorProto.FLOAT, list(shape)))
    return _save(nodes, [helper.make_tensor_value_info("x", TensorProto.FLOAT, list(shape))], outputs, inits, path,
                 opset)


def gelu_model(path, shape=(2, 64), *, case="mul_after", sqrt2=1.4142135, one=1.0, half=0.5, opset=13):
    """torch's exact GELU: Div(x, sqrt 2) -> Erf -> Add(1) -> Mul(x, .) -> Mul(., 0.5) ('mul_after'), or
    Mul(Mul(x, 0.5), Add) ('mul_before', Hugging Face's x * 0.5 * (1 + erf(x / sqrt 2)))."""
    inits = [numpy_helper.from_array(np.float32(v), n) for n, v in (("sqrt2", sqrt2), ("one", one), ("half", half))]
    nodes = [helper.make_node("Div", ["x", "sqrt2"], ["d"], name="/act/Div"),
             helper.make_node("Erf", ["d"], ["e"], name="/act/Erf"),
             helper.make_node("Add", ["e", "one"], ["a"], name="/act/Add")]
    if case == "mul_after":
        nodes += [helper.make_node("Mul", ["x", "a"], ["m"], name="/act/Mul"),
                  helper.make_node("Mul", ["m", "half"], ["y"], name="/act/Mul_1")]
    else:
        nodes += [helper.make_node("Mul", ["x", "half"], ["m"], name="/act/Mul"),
                  helper.make_node("Mul", ["m", "a"], ["y"], name="/act/Mul_1")]
    return _save(nodes, [helper.make_tensor_value_info("x", TensorProto.FLOAT, list(shape))],
                 [helper.make_tensor_value_info("y", TensorProto.FLOAT, list(shape))], inits, path, opset)


def single_op_model(path, op_type, shape, attrs=None, extra_inits=(), opset=13, out_shape=None):
    """x -> one op (its other inputs initializers ``extra_inits``: (name, array) pairs)."""
    inits = [numpy_helper.from_array(np.asarray(v), n) for n, v in extra_inits]
    node = helper.make_node(op_type, ["x", *[n for n, _ in extra_inits]], ["y"], name=f"/{op_type.lower()}",
                            **(attrs or {}))
    return _save([node], [helper.make_tensor_value_info("x", TensorProto.FLOAT, list(shape))],
                 [helper.make_tensor_value_info("y", TensorProto.FLOAT, list(out_shape or shape))], inits, path, opset)
