"""The test suite's one model zoo: small, deterministic ONNX models built with onnx.helper.

- fp16 failures (l2norm, addn, epsilon, conv_bn_relu): each builder takes the path to write and
  returns it; a matching ``*_inputs(seed=0)`` returns feeds that trigger the failure it models.
- runtime models (linear, conv, emulated, two_input) with their numpy references.
- timing models for profile and tune (conv_chain, constant_heavy).
- fix: a BN whose folded weights overflow fp16 only when fused (folded_bn).
- quantize: a small CNN with one layer made sensitive to int8 on purpose (build_sensitive_model).
Weights are seeded.
"""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np

OPSET = 17


def _save(graph, path: Path | str, opset: int = OPSET, metadata: dict[str, str] | None = None) -> Path:
    import onnx
    from onnx import helper

    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", opset)], producer_name="modelzoo")
    model.ir_version = 8  # old enough for every onnxruntime we meet
    if metadata:
        helper.set_model_props(model, metadata)
    onnx.checker.check_model(model)
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    onnx.save(model, str(path))
    return path


def _const(name: str, value) -> "object":
    from onnx import numpy_helper

    return numpy_helper.from_array(np.asarray(value), name)


def l2norm_model(path: Path | str, features: int = 256) -> Path:
    """The forum ReID overflow: ``embedding = features / sqrt(sum(features**2))``.

    Input ``features`` float32 [N, 256] (values near 700, see ``l2norm_inputs``); output ``embedding``.
    Nodes: ``square`` (Mul) -> ``sum`` (ReduceSum, keepdims) -> ``sqrt`` -> ``div``.
    700**2 = 490000 already exceeds fp16's 65504, and the sum of 256 of them is ~1.25e8.
    """
    from onnx import TensorProto, helper

    nodes = [
        helper.make_node("Mul", ["features", "features"], ["squared"], name="square"),
        helper.make_node("ReduceSum", ["squared", "sum_axes"], ["sum_sq"], name="sum", keepdims=1),
        helper.make_node("Sqrt", ["sum_sq"], ["norm"], name="sqrt"),
        helper.make_node("Div", ["features", "norm"], ["embedding"], name="div"),
    ]
    graph = helper.make_graph(
        nodes,
        "l2norm",
        [helper.make_tensor_value_info("features", TensorProto.FLOAT, ["N", features])],
        [helper.make_tensor_value_info("embedding", TensorProto.FLOAT, ["N", features])],
        initializer=[_const("sum_axes", np.array([1], dtype=np.int64))],
    )
    return _save(graph, path)


def l2norm_inputs(seed: int = 0, batch: int = 2, features: int = 256) -> dict[str, np.ndarray]:
    rng = np.random.default_rng(seed)
    return {"features": rng.uniform(650.0, 750.0, size=(batch, features)).astype(np.float32)}


ADDN_SCALES = (30000.0, 25000.0, 20000.0)  # each < 65504, total 75000 > 65504


def addn_model(path: Path | str) -> Path:
    """Three branches each below 65504 whose sum exceeds it (the AddN overflow).

    Input ``x`` float32 [1, 4] (values near 1, see ``addn_inputs``); output ``total`` = Sum of
    ``branch0/1/2`` = x * 30000, x * 25000, x * 20000. Nodes: ``branch0``, ``branch1``, ``branch2``
    (Mul), ``sum`` (Sum, ONNX's AddN).
    """
    from onnx import TensorProto, helper

    nodes = [
        helper.make_node("Mul", ["x", f"scale{i}"], [f"b{i}"], name=f"branch{i}") for i in range(3)
    ] + [helper.make_node("Sum", ["b0", "b1", "b2"], ["total"], name="sum")]
    graph = helper.make_graph(
        nodes,
        "addn",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 4])],
        [helper.make_tensor_value_info("total", TensorProto.FLOAT, [1, 4])],
        initializer=[_const(f"scale{i}", np.float32(s)) for i, s in enumerate(ADDN_SCALES)],
    )
    return _save(graph, path)


def addn_inputs(seed: int = 0) -> dict[str, np.ndarray]:
    rng = np.random.default_rng(seed)
    return {"x": rng.uniform(0.95, 1.0, size=(1, 4)).astype(np.float32)}


EPSILON = 1e-9


def epsilon_model(path: Path | str, width: int = 8) -> Path:
    """Layer-norm style ``(x - mean) / sqrt(var + 1e-9)``: the epsilon and a tiny variance underflow.

    Input ``x`` float32 [1, 8] (values ~1e-4, see ``epsilon_inputs``); outputs ``normalized`` and
    ``variance``. Nodes: ``mean`` (ReduceMean), ``center`` (Sub), ``square`` (Mul), ``var``
    (ReduceMean), ``add_eps`` (Add, initializer ``eps`` = 1e-9), ``sqrt``, ``div``. In fp16 1e-9 is
    0 and a variance near 1e-8 is below the smallest subnormal (5.96e-8): it becomes 0 too.
    """
    from onnx import TensorProto, helper

    nodes = [
        helper.make_node("ReduceMean", ["x"], ["mu"], name="mean", axes=[1], keepdims=1),
        helper.make_node("Sub", ["x", "mu"], ["centered"], name="center"),
        helper.make_node("Mul", ["centered", "centered"], ["sq"], name="square"),
        helper.make_node("ReduceMean", ["sq"], ["variance"], name="var", axes=[1], keepdims=1),
        helper.make_node("Add", ["variance", "eps"], ["var_eps"], name="add_eps"),
        helper.make_node("Sqrt", ["var_eps"], ["std"], name="sqrt"),
        helper.make_node("Div", ["centered", "std"], ["normalized"], name="div"),
    ]
    graph = helper.make_graph(
        nodes,
        "epsilon",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, width])],
        [
            helper.make_tensor_value_info("normalized", TensorProto.FLOAT, [1, width]),
            helper.make_tensor_value_info("variance", TensorProto.FLOAT, [1, 1]),
        ],
        initializer=[_const("eps", np.float32(EPSILON))],
    )
    return _save(graph, path)


def epsilon_inputs(seed: int = 0, width: int = 8) -> dict[str, np.ndarray]:
    rng = np.random.default_rng(seed)
    return {"x": (rng.standard_normal((1, width)) * 1e-4).astype(np.float32)}


def conv_bn_relu_model(path: Path | str, channels: int = 8, size: int = 16, classes: int = 10) -> Path:
    """Conv + BatchNorm + Relu, then pooling and a classifier: the graph ORT fuses.

    Input ``image`` float32 [1, 3, 16, 16] (any values, see ``conv_bn_relu_inputs``); output
    ``logits`` [1, 10]. Nodes: ``conv`` (Conv 3x3, pad 1, bias), ``bn`` (BatchNormalization),
    ``relu``, ``pool`` (GlobalAveragePool), ``flatten``, ``fc`` (Gemm). onnxruntime folds ``bn``
    into ``conv`` and fuses ``relu`` with it (FusedConv) at the extended level.
    """
    from onnx import TensorProto, helper

    rng = np.random.default_rng(1234)
    f32 = np.float32
    inits = [
        _const("conv.w", (rng.standard_normal((channels, 3, 3, 3)) * 0.3).astype(f32)),
        _const("conv.b", (rng.standard_normal(channels) * 0.1).astype(f32)),
        _const("bn.scale", rng.uniform(0.5, 1.5, channels).astype(f32)),
        _const("bn.bias", (rng.standard_normal(channels) * 0.1).astype(f32)),
        _const("bn.mean", (rng.standard_normal(channels) * 0.1).astype(f32)),
        _const("bn.var", rng.uniform(0.5, 1.5, channels).astype(f32)),
        _const("fc.w", (rng.standard_normal((classes, channels)) * 0.3).astype(f32)),
        _const("fc.b", (rng.standard_normal(classes) * 0.1).astype(f32)),
    ]
    nodes = [
        helper.make_node("Conv", ["image", "conv.w", "conv.b"], ["conv_out"], name="conv", pads=[1, 1, 1, 1]),
        helper.make_node(
            "BatchNormalization", ["conv_out", "bn.scale", "bn.bias", "bn.mean", "bn.var"], ["bn_out"],
            name="bn", epsilon=1e-5,
        ),
        helper.make_node("Relu", ["bn_out"], ["relu_out"], name="relu"),
        helper.make_node("GlobalAveragePool", ["relu_out"], ["pooled"], name="pool"),
        helper.make_node("Flatten", ["pooled"], ["flat"], name="flatten", axis=1),
        helper.make_node("Gemm", ["flat", "fc.w", "fc.b"], ["logits"], name="fc", transB=1),
    ]
    graph = helper.make_graph(
        nodes,
        "conv_bn_relu",
        [helper.make_tensor_value_info("image", TensorProto.FLOAT, [1, 3, size, size])],
        [helper.make_tensor_value_info("logits", TensorProto.FLOAT, [1, classes])],
        initializer=inits,
    )
    return _save(graph, path)


def conv_bn_relu_inputs(seed: int = 0, size: int = 16) -> dict[str, np.ndarray]:
    rng = np.random.default_rng(seed)
    return {"image": rng.standard_normal((1, 3, size, size)).astype(np.float32)}


# ---- runtime: tiny models and their numpy references --------------------------------------------

def linear_model(path: Path, batch="N", features=3, classes=2, seed=1):
    """y = relu(x @ w + b), with a second output 'head/score' = sum(y, axis=1). Returns (path, w, b)."""
    from onnx import TensorProto, helper, numpy_helper

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
    return _save(graph, path), w, b


def linear_reference(x, w, b):
    y = np.maximum(x @ w + b, 0)
    return y, y.sum(axis=1)


def conv_model(path: Path, seed=2):
    """Conv -> Relu -> Log -> Sqrt on [N,1,4,4]; ORT's default level fuses Conv+Relu."""
    from onnx import TensorProto, helper, numpy_helper

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
    return _save(graph, path), k


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
    from onnx import TensorProto, helper

    x = helper.make_tensor_value_info("x", TensorProto.FLOAT, ["N", 4])
    y = helper.make_tensor_value_info("y", TensorProto.FLOAT, ["N", 4])
    nodes = [
        helper.make_node("Relu", ["x"], ["r__raw"], name="relu"),
        helper.make_node("Cast", ["r__raw"], ["r__h"], name="ascendpipe_emu/relu/to16", to=TensorProto.FLOAT16),
        helper.make_node("Cast", ["r__h"], ["r"], name="ascendpipe_emu/relu/to32", to=TensorProto.FLOAT),
        helper.make_node("Neg", ["r"], ["y"], name="neg"),
    ]
    meta = {"format": 1, "internal_tensors": ["r__raw", "r__h"],
            "tensor_producer": {"r": {"op_name": "relu", "op_type": "Relu"}}}
    return _save(helper.make_graph(nodes, "emu", [x], [y]), path, metadata={"ascendpipe.emulation": json.dumps(meta)})


def two_input_model(path: Path, batch=2):
    """out = a * b + 1 with a static batch."""
    from onnx import TensorProto, helper, numpy_helper

    a = helper.make_tensor_value_info("a", TensorProto.FLOAT, [batch, 3])
    b = helper.make_tensor_value_info("b", TensorProto.FLOAT, [batch, 3])
    out = helper.make_tensor_value_info("out", TensorProto.FLOAT, [batch, 3])
    nodes = [helper.make_node("Mul", ["a", "b"], ["m"], name="mul"),
             helper.make_node("Add", ["m", "one"], ["out"], name="add")]
    graph = helper.make_graph(nodes, "two", [a, b], [out], [numpy_helper.from_array(np.ones(1, np.float32), "one")])
    return _save(graph, path)


# ---- profile and tune: models to time ------------------------------------------------------------

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


# --- fix: fp16 failures that only fusion causes ----------------------------------------------

def folded_bn_model(path: Path | str, channels: int = 4) -> Path:
    """Conv -> BatchNormalization whose folded weights overflow fp16 only when the two are fused.

    BN's scale gamma / sqrt(var) is 1e7 and the conv weights 0.01: folded, the weights are 1e5 >
    65504 (inf in fp16), unfused every tensor fits. Input ``image`` [1, 3, 8, 8] (values ~1e-3, see
    ``folded_bn_inputs``); output ``bn_out``. Nodes: ``conv``, ``bn``.
    """
    from onnx import TensorProto, helper

    f32 = np.float32
    inits = [
        _const("conv.w", np.full((channels, 3, 3, 3), 0.01, f32)),
        _const("bn.scale", np.full(channels, 1e5, f32)),
        _const("bn.bias", np.zeros(channels, f32)),
        _const("bn.mean", np.zeros(channels, f32)),
        _const("bn.var", np.full(channels, 1e-4, f32)),
    ]
    nodes = [
        helper.make_node("Conv", ["image", "conv.w"], ["conv_out"], name="conv", pads=[1, 1, 1, 1]),
        helper.make_node("BatchNormalization", ["conv_out", "bn.scale", "bn.bias", "bn.mean", "bn.var"], ["bn_out"],
                         name="bn", epsilon=1e-12),
    ]
    graph = helper.make_graph(nodes, "folded_bn", [helper.make_tensor_value_info("image", TensorProto.FLOAT, [1, 3, 8, 8])],
                              [helper.make_tensor_value_info("bn_out", TensorProto.FLOAT, [1, channels, 8, 8])],
                              initializer=inits)
    return _save(graph, path)


def folded_bn_inputs(seed: int = 0) -> dict[str, np.ndarray]:
    rng = np.random.default_rng(seed)
    return {"image": rng.uniform(0.5e-3, 1.5e-3, size=(1, 3, 8, 8)).astype(np.float32)}


# --- quantize: one layer sensitive to int8 -----------------------------------------------------

SENSITIVE = "conv2"
LAYERS = ["conv1", "conv2", "conv3", "fc"]


def build_sensitive_model(path: Path, *, sensitive: bool = True, seed: int = 0) -> Path:
    """x[N,3,8,8] -> conv1 -> relu -> conv2 -> relu -> conv3 -> relu -> gap -> flat -> fc -> logits[N,5].

    conv1's last output channel is dead (zero weights, negative bias: ReLU makes it 0 everywhere). With
    ``sensitive``, each of conv2's filters gets one weight 1000x its largest on that dead channel: the
    fp32 output is unchanged (it multiplies zeros), but int8 weight scales (per channel, symmetric) are
    set by that outlier and every real weight of conv2 rounds to 0. Only conv2 needs to stay in float.
    """
    import onnx
    from onnx import TensorProto, helper, numpy_helper

    rng = np.random.default_rng(seed)
    w1 = rng.standard_normal((8, 3, 3, 3)).astype(np.float32) * 0.4
    b1 = rng.standard_normal(8).astype(np.float32) * 0.1
    w1[7], b1[7] = 0.0, -1.0
    w2 = rng.standard_normal((8, 8, 3, 3)).astype(np.float32) * 0.2
    if sensitive:
        w2[:, 7, 1, 1] = 1000.0 * np.abs(w2).reshape(8, -1).max(axis=1)
    w3 = rng.standard_normal((8, 8, 3, 3)).astype(np.float32) * 0.2
    wf = rng.standard_normal((5, 8)).astype(np.float32)
    bf = rng.standard_normal(5).astype(np.float32) * 0.1
    inits = [numpy_helper.from_array(a, n) for a, n in ((w1, "w1"), (b1, "b1"), (w2, "w2"), (w3, "w3"), (wf, "wf"), (bf, "bf"))]
    nodes = [
        helper.make_node("Conv", ["x", "w1", "b1"], ["c1"], name="conv1", pads=[1, 1, 1, 1]),
        helper.make_node("Relu", ["c1"], ["r1"], name="relu1"),
        helper.make_node("Conv", ["r1", "w2"], ["c2"], name="conv2", pads=[1, 1, 1, 1]),
        helper.make_node("Relu", ["c2"], ["r2"], name="relu2"),
        helper.make_node("Conv", ["r2", "w3"], ["c3"], name="conv3", pads=[1, 1, 1, 1]),
        helper.make_node("Relu", ["c3"], ["r3"], name="relu3"),
        helper.make_node("GlobalAveragePool", ["r3"], ["g"], name="gap"),
        helper.make_node("Flatten", ["g"], ["f"], name="flat"),
        helper.make_node("Gemm", ["f", "wf", "bf"], ["logits"], name="fc", transB=1),
    ]
    graph = helper.make_graph(nodes, "sensitive", [helper.make_tensor_value_info("x", TensorProto.FLOAT, ["N", 3, 8, 8])],
                              [helper.make_tensor_value_info("logits", TensorProto.FLOAT, ["N", 5])], inits)
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 13)])
    model.ir_version = 8
    onnx.save(model, str(path))
    return path


# ---- an exported detector with dynamic H/W (the ascend backend's --input_shape and dynamic_image_size) ------

def dynamic_hw_detector(path: Path | str, channels: int = 4, anchors: int = 3) -> Path:
    """images[1,3,height,width] -> conv+relu -> conv (a per-cell box head) -> boxes[1,anchors*4,height,width],
    plus a global score[1,anchors]: H and W are symbolic, as a detector exported with dynamic_axes is."""
    from onnx import TensorProto, helper

    rng = np.random.default_rng(7)
    w1 = _const("w1", rng.standard_normal((channels, 3, 3, 3)).astype(np.float32) * 0.3)
    w2 = _const("w2", rng.standard_normal((anchors * 4, channels, 1, 1)).astype(np.float32) * 0.3)
    w3 = _const("w3", rng.standard_normal((anchors, channels)).astype(np.float32))
    nodes = [
        helper.make_node("Conv", ["images", "w1"], ["c1"], name="backbone/conv", pads=[1, 1, 1, 1]),
        helper.make_node("Relu", ["c1"], ["r1"], name="backbone/relu"),
        helper.make_node("Conv", ["r1", "w2"], ["boxes"], name="head/boxes"),
        helper.make_node("GlobalAveragePool", ["r1"], ["g1"], name="head/pool"),
        helper.make_node("Flatten", ["g1"], ["f1"], name="head/flat"),
        helper.make_node("Gemm", ["f1", "w3"], ["scores"], name="head/scores", transB=1),
    ]
    graph = helper.make_graph(
        nodes, "detector",
        [helper.make_tensor_value_info("images", TensorProto.FLOAT, [1, 3, "height", "width"])],
        [helper.make_tensor_value_info("boxes", TensorProto.FLOAT, [1, anchors * 4, "height", "width"]),
         helper.make_tensor_value_info("scores", TensorProto.FLOAT, [1, anchors])],
        [w1, w2, w3])
    return _save(graph, path)


def dynamic_hw_inputs(height: int = 32, width: int = 48, seed: int = 0) -> dict[str, np.ndarray]:
    rng = np.random.default_rng(seed)
    return {"images": rng.standard_normal((1, 3, height, width)).astype(np.float32)}
