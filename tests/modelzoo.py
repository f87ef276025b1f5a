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


# --- real-model shapes: subgraphs, odd inputs, integer and custom-domain ops --------------------

def if_outer_model(path: Path | str, nested: bool = True) -> Path:
    """The main graph computes ``h`` (``square``: x*x); two ``If`` branches read ``h`` and the graph
    input ``x`` from the outer scope (then: h + x, else: h - x); with ``nested`` the then-branch
    holds a second ``If`` reading ``h`` too. Input ``x`` float32 [2, 4]; output ``y``. The branch
    taken is ``sum(x) > 0``. ``if_outer_reference`` gives the force_fp16 device values."""
    from onnx import TensorProto, helper

    def branch(name: str, op: str, out: str, inner=None):
        nodes = [helper.make_node(op, ["h", "x"], [f"{out}_v"], name=f"{name}_op")]
        if inner is not None:  # a nested If reading h: its result is added
            nodes.append(helper.make_node("If", ["cond"], [f"{out}_inner"], name=f"{name}_if",
                                          then_branch=inner[0], else_branch=inner[1]))
            nodes.append(helper.make_node("Add", [f"{out}_v", f"{out}_inner"], [out], name=f"{name}_add"))
        else:
            nodes[0].output[0] = out
        return helper.make_graph(nodes, name, [], [helper.make_tensor_value_info(out, TensorProto.FLOAT, None)])

    def leaf(name: str, op: str, out: str):
        node = helper.make_node(op, ["h", "h"], [out], name=f"{name}_op")
        return helper.make_graph([node], name, [], [helper.make_tensor_value_info(out, TensorProto.FLOAT, None)])

    inner = (leaf("inner_then", "Add", "it_out"), leaf("inner_else", "Sub", "ie_out")) if nested else None
    nodes = [
        helper.make_node("Mul", ["x", "x"], ["h"], name="square"),
        helper.make_node("ReduceSum", ["x"], ["total"], name="total", keepdims=0),
        helper.make_node("Greater", ["total", "zero"], ["cond"], name="positive"),
        helper.make_node("If", ["cond"], ["y"], name="branch",
                         then_branch=branch("then", "Add", "then_out", inner), else_branch=branch("else", "Sub", "else_out")),
    ]
    graph = helper.make_graph(nodes, "if_outer", [helper.make_tensor_value_info("x", TensorProto.FLOAT, [2, 4])],
                              [helper.make_tensor_value_info("y", TensorProto.FLOAT, [2, 4])],
                              initializer=[_const("zero", np.array(0.0, np.float32))])
    return _save(graph, path)


def if_outer_reference(x: np.ndarray, nested: bool = True) -> np.ndarray:
    """force_fp16 device values of ``if_outer_model``: every op output rounded to fp16, inputs read as fp16."""
    r = lambda a: a.astype(np.float16).astype(np.float32)
    xr = r(x)
    h = r(xr * xr)
    if x.sum() > 0:
        y = r(h + xr)
        return r(y + r(h + h)) if nested else y
    return r(h - xr)


def scalar_input_model(path: Path | str) -> Path:
    """An audio front end with a 0-d input: ``gain = audio * float(sample_rate) / 16000``.
    Inputs ``audio`` float32 [N, 16], ``sample_rate`` int64 [] (a scalar); output ``gain`` [N, 16]."""
    from onnx import TensorProto, helper

    nodes = [
        helper.make_node("Cast", ["sample_rate"], ["rate"], name="rate", to=TensorProto.FLOAT),
        helper.make_node("Div", ["rate", "base"], ["scale"], name="scale"),
        helper.make_node("Mul", ["audio", "scale"], ["gain"], name="gain"),
    ]
    graph = helper.make_graph(nodes, "scalar_input",
                              [helper.make_tensor_value_info("audio", TensorProto.FLOAT, ["N", 16]),
                               helper.make_tensor_value_info("sample_rate", TensorProto.INT64, [])],
                              [helper.make_tensor_value_info("gain", TensorProto.FLOAT, ["N", 16])],
                              initializer=[_const("base", np.array(16000.0, np.float32))])
    return _save(graph, path)


def stateful_model(path: Path | str, hidden: int = 8, state_batch: str = "B") -> Path:
    """A recurrent cell's step, batch on axis 1 of its state (as LSTMs export it): inputs ``x``
    [B, hidden] and ``state`` [2, B, hidden]; outputs ``y`` = x + state[0] + state[1] [B, hidden] and
    ``new_state`` = 0.5 * state + x [2, B, hidden]. ``state_batch``: the state's name for its batch
    dim (an exporter may give it another name than ``B``; then nothing ties the two)."""
    from onnx import TensorProto, helper

    nodes = [
        helper.make_node("ReduceSum", ["state", "axis0"], ["state_sum"], name="state_sum", keepdims=0),
        helper.make_node("Add", ["x", "state_sum"], ["y"], name="out"),
        helper.make_node("Mul", ["state", "half"], ["decayed"], name="decay"),
        helper.make_node("Add", ["decayed", "x"], ["new_state"], name="update"),
    ]
    graph = helper.make_graph(nodes, "stateful",
                              [helper.make_tensor_value_info("x", TensorProto.FLOAT, ["B", hidden]),
                               helper.make_tensor_value_info("state", TensorProto.FLOAT, [2, state_batch, hidden])],
                              [helper.make_tensor_value_info("y", TensorProto.FLOAT, ["B", hidden]),
                               helper.make_tensor_value_info("new_state", TensorProto.FLOAT, [2, state_batch, hidden])],
                              initializer=[_const("axis0", np.array([0], np.int64)), _const("half", np.array(0.5, np.float32))])
    return _save(graph, path)


def dynamic_hw_model(path: Path | str) -> Path:
    """A detector head with dynamic height and width: ``image`` float32 [1, 3, H, W] -> Conv -> Relu
    -> ``heat`` [1, 4, H, W]."""
    from onnx import TensorProto, helper

    w = np.random.default_rng(3).standard_normal((4, 3, 3, 3)).astype(np.float32) * 0.2
    nodes = [helper.make_node("Conv", ["image", "w"], ["c"], name="conv", pads=[1, 1, 1, 1]),
             helper.make_node("Relu", ["c"], ["heat"], name="relu")]
    graph = helper.make_graph(nodes, "dynamic_hw", [helper.make_tensor_value_info("image", TensorProto.FLOAT, [1, 3, "H", "W"])],
                              [helper.make_tensor_value_info("heat", TensorProto.FLOAT, [1, 4, "H", "W"])],
                              initializer=[_const("w", w)])
    return _save(graph, path)


def int8_dynamic_model(path: Path | str) -> Path:
    """A dynamically int8-quantised linear block, as onnxruntime's quantize_dynamic writes it:
    DynamicQuantizeLinear -> MatMulInteger -> an integer Add (a bias in int32) -> Cast -> Mul by
    the scales -> ``y``. Input ``x`` float32 [N, 8]; output ``y`` float32 [N, 4]. The integer ops
    (``mm_int``, ``bias_int``) cannot be computed in fp16 at all."""
    from onnx import TensorProto, helper

    rng = np.random.default_rng(4)
    w = rng.integers(-20, 20, (8, 4)).astype(np.int8)
    nodes = [
        helper.make_node("DynamicQuantizeLinear", ["x"], ["xq", "x_scale", "x_zp"], name="quant"),
        helper.make_node("MatMulInteger", ["xq", "w", "x_zp", "w_zp"], ["acc"], name="mm_int"),
        helper.make_node("Add", ["acc", "bias"], ["acc_b"], name="bias_int"),
        helper.make_node("Cast", ["acc_b"], ["acc_f"], name="to_float", to=TensorProto.FLOAT),
        helper.make_node("Mul", ["x_scale", "w_scale"], ["scale"], name="scales"),
        helper.make_node("Mul", ["acc_f", "scale"], ["y"], name="dequant"),
    ]
    inits = [_const("w", w), _const("w_zp", np.array(0, np.int8)), _const("bias", np.arange(4, dtype=np.int32)),
             _const("w_scale", np.array(0.05, np.float32))]
    graph = helper.make_graph(nodes, "int8_dynamic", [helper.make_tensor_value_info("x", TensorProto.FLOAT, ["N", 8])],
                              [helper.make_tensor_value_info("y", TensorProto.FLOAT, ["N", 4])], initializer=inits)
    return _save(graph, path)


def custom_domain_model(path: Path | str) -> Path:
    """MatMul -> com.microsoft Gelu (an onnxruntime contrib op ATC has no parser for) -> ``y``.
    Input ``x`` float32 [N, 4]."""
    import onnx
    from onnx import TensorProto, helper

    w = np.random.default_rng(5).standard_normal((4, 4)).astype(np.float32)
    nodes = [helper.make_node("MatMul", ["x", "w"], ["mm"], name="mm"),
             helper.make_node("Gelu", ["mm"], ["y"], name="gelu", domain="com.microsoft")]
    graph = helper.make_graph(nodes, "custom_domain", [helper.make_tensor_value_info("x", TensorProto.FLOAT, ["N", 4])],
                              [helper.make_tensor_value_info("y", TensorProto.FLOAT, ["N", 4])], initializer=[_const("w", w)])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", OPSET), helper.make_opsetid("com.microsoft", 1)])
    model.ir_version = 8
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    onnx.save(model, str(path))
    return path


def long_chain_model(path: Path | str, length: int = 40) -> Path:
    """``length`` Mul/Add ops with exporter-style long names (``/backbone/stage0/block00/Mul``...), for
    keep_dtype lists longer than a file name may be. Input ``x`` float32 [1, 8]; output ``y``."""
    from onnx import TensorProto, helper

    nodes, prev = [], "x"
    for i in range(length):
        op = "Mul" if i % 2 == 0 else "Add"
        out = "y" if i == length - 1 else f"t{i}"
        nodes.append(helper.make_node(op, [prev, "k"], [out], name=f"/backbone/stage{i // 8}/block{i:02d}/{op}"))
        prev = out
    graph = helper.make_graph(nodes, "long_chain", [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 8])],
                              [helper.make_tensor_value_info("y", TensorProto.FLOAT, [1, 8])],
                              initializer=[_const("k", np.array(1.001, np.float32))])
    return _save(graph, path)


def long_chain_ops(length: int = 40) -> list[str]:
    return [f"/backbone/stage{i // 8}/block{i:02d}/{'Mul' if i % 2 == 0 else 'Add'}" for i in range(length)]


def big_input_conv_model(path: Path | str) -> Path:
    """One Conv whose input (~1e5, see ``big_input_conv_inputs``) is beyond fp16 while its output
    (~2e3: weights 1e-3 over 27 taps) is not: whether a kept Conv reads fp16 decides the result.
    Input ``x`` float32 [1, 3, 6, 6]; output ``y`` [1, 2, 6, 6]; node ``conv``."""
    from onnx import TensorProto, helper

    nodes = [helper.make_node("Conv", ["x", "w"], ["y"], name="conv", pads=[1, 1, 1, 1])]
    graph = helper.make_graph(nodes, "big_input_conv", [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 3, 6, 6])],
                              [helper.make_tensor_value_info("y", TensorProto.FLOAT, [1, 2, 6, 6])],
                              initializer=[_const("w", np.full((2, 3, 3, 3), 1e-3, np.float32))])
    return _save(graph, path)


def big_input_conv_inputs(seed: int = 0) -> dict[str, np.ndarray]:
    return {"x": np.random.default_rng(seed).uniform(0.9e5, 1.1e5, (1, 3, 6, 6)).astype(np.float32)}


def int8_dynamic_overflow_inputs(seed: int = 0) -> dict[str, np.ndarray]:
    """Inputs of ``int8_dynamic_model`` whose dequantised ``y`` (~1e5) overflows fp16 in ``dequant``
    while every integer op and ``to_float`` (~1e4) stay in range."""
    return {"x": np.random.default_rng(seed).uniform(-1e5, 1e5, (4, 8)).astype(np.float32)}


def loop_outer_model(path: Path | str, trips: int = 3) -> Path:
    """A Loop whose body reads the outer ``h`` (= x * x, ``square``) on every iteration:
    ``acc_{i+1} = acc_i + h``, ``trips`` times from ``acc_0 = x``; output ``y`` = the last acc.
    Input ``x`` float32 [1, 4]. Device values: ``loop_outer_reference``."""
    from onnx import TensorProto, helper

    body = helper.make_graph(
        [helper.make_node("Identity", ["cond_in"], ["cond_out"], name="keep_going"),
         helper.make_node("Add", ["acc_in", "h"], ["acc_out"], name="accumulate")],
        "body",
        [helper.make_tensor_value_info("iter", TensorProto.INT64, []),
         helper.make_tensor_value_info("cond_in", TensorProto.BOOL, []),
         helper.make_tensor_value_info("acc_in", TensorProto.FLOAT, [1, 4])],
        [helper.make_tensor_value_info("cond_out", TensorProto.BOOL, []),
         helper.make_tensor_value_info("acc_out", TensorProto.FLOAT, [1, 4])])
    nodes = [helper.make_node("Mul", ["x", "x"], ["h"], name="square"),
             helper.make_node("Loop", ["trips", "go", "x"], ["y"], name="loop", body=body)]
    graph = helper.make_graph(nodes, "loop_outer", [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 4])],
                              [helper.make_tensor_value_info("y", TensorProto.FLOAT, [1, 4])],
                              initializer=[_const("trips", np.array(trips, np.int64)), _const("go", np.array(True))])
    return _save(graph, path)


def loop_outer_reference(x: np.ndarray, trips: int = 3) -> np.ndarray:
    r = lambda a: a.astype(np.float16).astype(np.float32)
    with np.errstate(over="ignore"):  # an accumulator beyond 65504 becomes inf, as on the device
        xr = r(x)
        h, acc = r(xr * xr), xr
        for _ in range(trips):
            acc = r(acc + h)
    return acc


def text_detector(path: Path | str, *, size: int = 736, width: int = 16, blocks: int = 20, seed: int = 0) -> Path:
    """A DBNet-shaped text detector (benchmarks: issue 21's 736x736 case): a stride-4 stem, four stages
    of ``blocks`` residual blocks (Conv with folded BN bias, Relu, Conv, Add, Relu) at widths w, 2w, 4w,
    8w, an FPN (1x1 laterals, nearest Resize x2 top-down Adds, 3x3 smoothing, upsampled to 1/4 and
    concatenated) and a head (Conv, Relu, Resize x4, 1x1 Conv, Sigmoid) giving a [1, 1, size, size]
    probability map. 20 blocks per stage: 430 nodes. Random weights, scaled so activations stay well
    inside fp16's range (the emulated fp16 model compares with cosines near 1)."""
    from onnx import TensorProto, helper, numpy_helper

    rng = np.random.default_rng(seed)
    nodes, inits = [], []

    def conv(x, cin, cout, k=3, stride=1, gain=1.0, relu=True):
        n = len(nodes)
        w = (rng.standard_normal((cout, cin, k, k)) * gain * np.sqrt(2.0 / (cin * k * k))).astype(np.float32)
        b = (rng.standard_normal(cout) * 0.01).astype(np.float32)
        inits.extend([numpy_helper.from_array(w, f"w{n}"), numpy_helper.from_array(b, f"b{n}")])
        nodes.append(helper.make_node("Conv", [x, f"w{n}", f"b{n}"], [f"conv{n}"], name=f"/conv{n}/Conv",
                                      strides=[stride, stride], pads=[k // 2] * 4))
        if not relu:
            return f"conv{n}"
        nodes.append(helper.make_node("Relu", [f"conv{n}"], [f"relu{n}"], name=f"/relu{n}/Relu"))
        return f"relu{n}"

    def add(a, b, relu=True):
        n = len(nodes)
        nodes.append(helper.make_node("Add", [a, b], [f"add{n}"], name=f"/add{n}/Add"))
        if not relu:
            return f"add{n}"
        nodes.append(helper.make_node("Relu", [f"add{n}"], [f"addrelu{n}"], name=f"/addrelu{n}/Relu"))
        return f"addrelu{n}"

    def up(x, factor):
        n = len(nodes)
        scales = f"scales{factor}"
        if scales not in {i.name for i in inits}:
            inits.append(numpy_helper.from_array(np.array([1, 1, factor, factor], np.float32), scales))
        nodes.append(helper.make_node("Resize", [x, "", scales], [f"up{n}"], name=f"/up{n}/Resize", mode="nearest"))
        return f"up{n}"

    x = conv("image", 3, width, stride=2)
    x = conv(x, width, width, stride=2)
    feats, cin = [], width
    for stage in range(4):
        cout = width * 2 ** stage
        for block in range(blocks):
            stride = 2 if stage > 0 and block == 0 else 1
            y = conv(x, cin, cout, stride=stride)
            y = conv(y, cout, cout, gain=0.3, relu=False)
            skip = conv(x, cin, cout, k=1, stride=stride, relu=False) if stride != 1 or cin != cout else x
            x = add(y, skip)
            cin = cout
        feats.append(x)
    laterals = [conv(f, width * 2 ** i, width, k=1, relu=False) for i, f in enumerate(feats)]
    top = laterals[3]
    merged = [top]
    for lateral in reversed(laterals[:3]):
        top = add(lateral, up(top, 2), relu=False)
        merged.insert(0, top)
    smoothed = [conv(m, width, width // 2 if width >= 8 else width, relu=False) for m in merged]
    c = width // 2 if width >= 8 else width
    pyramid = [smoothed[0]] + [up(s, 2 ** i) for i, s in enumerate(smoothed[1:], start=1)]
    nodes.append(helper.make_node("Concat", pyramid, ["fuse"], name="/fuse/Concat", axis=1))
    h = conv("fuse", 4 * c, c)
    h = up(h, 4)
    h = conv(h, c, 1, k=1, relu=False)
    nodes.append(helper.make_node("Sigmoid", [h], ["prob"], name="/prob/Sigmoid"))
    graph = helper.make_graph(nodes, "text_detector",
                              [helper.make_tensor_value_info("image", TensorProto.FLOAT, [1, 3, size, size])],
                              [helper.make_tensor_value_info("prob", TensorProto.FLOAT, [1, 1, size, size])], inits)
    return _save(graph, path)


def text_detector_inputs(seed: int = 0, size: int = 736) -> dict[str, np.ndarray]:
    """A normalised-image-like input: smooth structure plus noise, about unit scale."""
    rng = np.random.default_rng(seed)
    yy, xx = np.mgrid[0:size, 0:size].astype(np.float32) / size
    base = np.stack([np.sin(6.28 * (xx * (c + 1) + yy)) for c in range(3)])[None]
    return {"image": (base + 0.3 * rng.standard_normal((1, 3, size, size))).astype(np.float32)}


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


def kv_cache_model(path: Path | str, heads: int = 2, head_dim: int = 16) -> Path:
    """One decode step of attention over a KV cache: ``present_key = Concat(past_key_0, k)`` along the
    sequence axis, scores ``q @ present_key^T``, softmax. Inputs ``q`` and ``k`` float32 [2, heads, 1,
    head_dim], ``past_key_0`` float32 [2, heads, "past", head_dim] (0 long: an empty cache, the first
    decode step); outputs ``present_key`` and ``probs``."""
    from onnx import TensorProto, helper

    f = TensorProto.FLOAT
    nodes = [helper.make_node("Concat", ["past_key_0", "k"], ["present_key"], name="concat_past", axis=2),
             helper.make_node("Transpose", ["present_key"], ["key_t"], name="key_t", perm=[0, 1, 3, 2]),
             helper.make_node("MatMul", ["q", "key_t"], ["scores"], name="scores"),
             helper.make_node("Softmax", ["scores"], ["probs"], name="softmax", axis=-1)]
    graph = helper.make_graph(nodes, "kv_cache", [
        helper.make_tensor_value_info("q", f, [2, heads, 1, head_dim]),
        helper.make_tensor_value_info("k", f, [2, heads, 1, head_dim]),
        helper.make_tensor_value_info("past_key_0", f, [2, heads, "past", head_dim])],
        [helper.make_tensor_value_info("present_key", f, [2, heads, "total", head_dim]),
         helper.make_tensor_value_info("probs", f, [2, heads, 1, "total"])])
    return _save(graph, path)


def external_ffn_model(path: Path | str, hidden: int = 64, ffn: int = 512, scale: float = 1.0, seed: int = 0) -> Path:
    """An FFN block saved with ONNX external data (every weight in ``<name>.data``, size_threshold=0):
    MatMul (``hidden`` x ``ffn``, 128 KB at the defaults: beyond what convert reads into the graph) ->
    Add bias -> Relu -> MatMul back -> Reshape (its shape external too: onnxruntime's shape inference
    needs it inline) -> ``y`` [2, 4, hidden/4]; ``w_up`` is read again by a second MatMul from ``x`` (a
    weight an fp32 op reads too, under keep_dtype). Input ``x`` float32 [2, hidden]; ``scale``
    multiplies ``w_up`` (past fp16's range for an overflow)."""
    import onnx
    from onnx import TensorProto, helper

    rng = np.random.default_rng(seed)
    w_up = (rng.standard_normal((hidden, ffn)) / np.sqrt(hidden) * scale).astype(np.float32)
    w_down = (rng.standard_normal((ffn, hidden)) / np.sqrt(ffn)).astype(np.float32)
    nodes = [helper.make_node("MatMul", ["x", "w_up"], ["up"], name="up"),
             helper.make_node("Add", ["up", "b_up"], ["biased"], name="bias"),
             helper.make_node("Relu", ["biased"], ["act"], name="relu"),
             helper.make_node("MatMul", ["act", "w_down"], ["down"], name="down"),
             helper.make_node("MatMul", ["x", "w_up"], ["side"], name="side"),
             helper.make_node("ReduceSum", ["side", "axes"], ["side_sum"], name="side_sum", keepdims=1),
             helper.make_node("Add", ["down", "side_sum"], ["mixed"], name="mix"),
             helper.make_node("Reshape", ["mixed", "shape"], ["y"], name="reshape")]
    inits = [_const("w_up", w_up), _const("w_down", w_down), _const("b_up", np.full(ffn, 0.01, np.float32)),
             _const("axes", np.array([1], np.int64)), _const("shape", np.array([2, 4, hidden // 4], np.int64))]
    graph = helper.make_graph(nodes, "external_ffn", [helper.make_tensor_value_info("x", TensorProto.FLOAT, [2, hidden])],
                              [helper.make_tensor_value_info("y", TensorProto.FLOAT, [2, 4, hidden // 4])], inits)
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", OPSET)], producer_name="modelzoo")
    model.ir_version = 8
    onnx.checker.check_model(model)
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    onnx.save(model, str(path), save_as_external_data=True, location=path.name + ".data", size_threshold=0)
    return path


def fused_bert_model(path: Path | str, hidden: int = 16, heads: int = 2, seq: int = 8, vocab: int = 30) -> Path:
    """A one-layer BERT as onnxruntime's transformer optimizer fuses it: com.microsoft
    EmbedLayerNormalization (int32 ids and mask -> embeddings and an int32 ``mask_index``), Attention
    reading that mask_index, SkipLayerNormalization, FastGelu (no value_info: as the optimizer writes it).
    Inputs ``input_ids``, ``segment_ids``, ``input_mask`` int32 [1, seq]."""
    import onnx
    from onnx import TensorProto, helper

    rng = np.random.default_rng(11)

    def w(name, *shape, scale=0.1):
        return _const(name, (rng.standard_normal(shape) * scale).astype(np.float32))

    ms = "com.microsoft"
    nodes = [
        helper.make_node("EmbedLayerNormalization", ["input_ids", "segment_ids", "word", "pos", "seg", "emb_g", "emb_b",
                                                     "input_mask"], ["emb", "mask_index"], name="embed", domain=ms,
                         epsilon=1e-12),
        helper.make_node("Attention", ["emb", "qkv_w", "qkv_b", "mask_index"], ["attn"], name="attention", domain=ms,
                         num_heads=heads),
        helper.make_node("SkipLayerNormalization", ["attn", "emb", "ln_g", "ln_b"], ["ln"], name="skip_ln", domain=ms,
                         epsilon=1e-12),
        helper.make_node("MatMul", ["ln", "ffn_w"], ["ffn"], name="ffn"),
        helper.make_node("FastGelu", ["ffn", "ffn_b"], ["y"], name="gelu", domain=ms),
    ]
    inits = [w("word", vocab, hidden), w("pos", seq, hidden), w("seg", 2, hidden),
             _const("emb_g", np.ones(hidden, np.float32)), _const("emb_b", np.zeros(hidden, np.float32)),
             w("qkv_w", hidden, 3 * hidden), _const("qkv_b", np.zeros(3 * hidden, np.float32)),
             _const("ln_g", np.ones(hidden, np.float32)), _const("ln_b", np.zeros(hidden, np.float32)),
             w("ffn_w", hidden, 4 * hidden), _const("ffn_b", np.zeros(4 * hidden, np.float32))]
    ints = [helper.make_tensor_value_info(n, TensorProto.INT32, [1, seq]) for n in ("input_ids", "segment_ids", "input_mask")]
    graph = helper.make_graph(nodes, "fused_bert", ints,
                              [helper.make_tensor_value_info("y", TensorProto.FLOAT, [1, seq, 4 * hidden])], inits)
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", OPSET), helper.make_opsetid(ms, 1)],
                              producer_name="modelzoo")
    model.ir_version = 8
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    onnx.save(model, str(path))
    return path


def fused_bert_inputs(seq: int = 8, vocab: int = 30) -> dict[str, np.ndarray]:
    rng = np.random.default_rng(12)
    mask = np.ones((1, seq), np.int32)
    mask[0, seq - 2:] = 0
    return {"input_ids": rng.integers(0, vocab, (1, seq)).astype(np.int32),
            "segment_ids": np.zeros((1, seq), np.int32), "input_mask": mask}
