"""A transformer encoder built with onnx.helper, as torch exports one (MatMul + bias Add, heads by
Reshape/Transpose, Softmax attention, LayerNormalization, Erf GELU): the patterns onnxruntime fuses into
MatMulAddFusion Gemms with their gemm_input_reshape, SkipLayerNormalization, Gelu and FusedMatMul."""

from __future__ import annotations

from pathlib import Path

import numpy as np


def transformer_encoder(path: Path, *, d: int = 64, heads: int = 4, layers: int = 2, seq: int = 16,
                        batch: int = 1, seed: int = 0) -> Path:
    import onnx
    from onnx import TensorProto, helper, numpy_helper

    rng = np.random.default_rng(seed)
    nodes, inits = [], []

    def const(name, value):
        inits.append(numpy_helper.from_array(np.asarray(value), name))
        return name

    def weight(name, shape):
        return const(name, (rng.standard_normal(shape) / np.sqrt(shape[0])).astype(np.float32))

    def node(op, inputs, name, **attrs):
        out = f"{name}_output_0"
        nodes.append(helper.make_node(op, inputs, [out], name=name, **attrs))
        return out

    hd = d // heads
    split_shape = const("split_shape", np.array([batch, seq, heads, hd], np.int64))
    merge_shape = const("merge_shape", np.array([batch, seq, d], np.int64))
    scale = const("scale", np.array(1.0 / np.sqrt(hd), np.float32))
    half, one, sqrt2 = (const(n, np.array(v, np.float32)) for n, v in (("half", 0.5), ("one", 1.0), ("sqrt2", np.sqrt(2.0))))
    x = "x"
    for i in range(layers):
        p = f"/layers.{i}"

        def linear(inp, name, din, dout):
            mm = node("MatMul", [inp, weight(f"{p}.{name}.w", (din, dout))], f"{p}/{name}/MatMul")
            return node("Add", [mm, const(f"{p}.{name}.b", np.zeros(dout, np.float32))], f"{p}/{name}/Add")

        def heads_of(t, name, perm):
            r = node("Reshape", [t, split_shape], f"{p}/attn/Reshape_{name}")
            return node("Transpose", [r], f"{p}/attn/Transpose_{name}", perm=perm)

        q = heads_of(linear(x, "q", d, d), "q", [0, 2, 1, 3])
        k = heads_of(linear(x, "k", d, d), "k", [0, 2, 3, 1])
        v = heads_of(linear(x, "v", d, d), "v", [0, 2, 1, 3])
        scores = node("Mul", [node("MatMul", [q, k], f"{p}/attn/MatMul_qk"), scale], f"{p}/attn/Mul")
        probs = node("Softmax", [scores], f"{p}/attn/Softmax", axis=-1)
        ctx = node("Transpose", [node("MatMul", [probs, v], f"{p}/attn/MatMul_v")], f"{p}/attn/Transpose_ctx",
                   perm=[0, 2, 1, 3])
        attn = linear(node("Reshape", [ctx, merge_shape], f"{p}/attn/Reshape_ctx"), "out_proj", d, d)

        def norm(t, name):
            return node("LayerNormalization", [t, const(f"{p}.{name}.g", np.ones(d, np.float32)),
                                               const(f"{p}.{name}.b", np.zeros(d, np.float32))], f"{p}/{name}/LayerNormalization",
                        axis=-1, epsilon=1e-5)

        h = norm(node("Add", [x, attn], f"{p}/Add"), "norm1")
        f = linear(h, "linear1", d, 4 * d)
        erf = node("Erf", [node("Div", [f, sqrt2], f"{p}/Div")], f"{p}/Erf")
        gelu = node("Mul", [node("Mul", [f, node("Add", [erf, one], f"{p}/Add_1")], f"{p}/Mul"), half], f"{p}/Mul_1")
        x = norm(node("Add", [h, linear(gelu, "linear2", 4 * d, d)], f"{p}/Add_2"), "norm2")
    nodes.append(helper.make_node("Identity", [x], ["y"], name="output"))
    graph = helper.make_graph(nodes, "encoder", [helper.make_tensor_value_info("x", TensorProto.FLOAT, [batch, seq, d])],
                              [helper.make_tensor_value_info("y", TensorProto.FLOAT, [batch, seq, d])], inits)
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    model.ir_version = 8
    onnx.checker.check_model(model)
    onnx.save(model, str(path))
    return Path(path)


def transformer_inputs(*, d: int = 64, seq: int = 16, batch: int = 1, seed: int = 0) -> dict[str, np.ndarray]:
    return {"x": np.random.default_rng(seed).standard_normal((batch, seq, d)).astype(np.float32)}
