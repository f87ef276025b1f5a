"""Deep models whose every block breaks the same way (issue 49): fix must join the same cause in every
block in one step, not one block per attempt.

``rmsnorm_stack(path, blocks=32)``: a residual stream ``h`` [1, SEQ, DIM] through ``blocks`` decoder-like
blocks, each ``h = h + SCALE * (rmsnorm(h) @ W_i)``, named as an exported Hugging Face decoder names them
(``/model/layers.N/input_layernorm/Pow``...). The RMSNorm is decomposed as torch exports
``h * rsqrt(h.pow(2).mean(-1) + eps) * weight``: Pow -> ReduceMean -> Add -> Sqrt -> Reciprocal -> Mul ->
Mul. The stream's values are ~300, so every block's mean of squares (~1e5) lies beyond fp16's 65504: in
force_fp16 every norm divides by inf and its block's update is lost. A final norm and a head give the
logits. Weights are seeded (``seed``); ``inputs(seed)`` is the matching feed.

``names="flat"`` names the ops as a torch export without module scopes does (``/Pow_3``, ``/ReduceMean_3``):
the repeated blocks are then found by their structure, not their names.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np

SEQ, DIM, VOCAB = 4, 16, 32
STREAM = 300.0  # the residual stream's scale: mean(h^2) ~ STREAM^2 = 9e4 > 65504
SCALE = 60.0  # each block's update: large enough that losing one block's moves the logits


def rmsnorm_stack(path: Path | str, blocks: int = 32, seed: int = 0, names: str = "hf") -> Path:
    import onnx
    from onnx import TensorProto, helper, numpy_helper

    rng = np.random.default_rng(seed)
    nodes, inits = [], []

    def const(name, value):
        inits.append(numpy_helper.from_array(np.asarray(value, np.float32), name))
        return name

    counter = {"n": 0}

    def op_name(scope: str, op: str) -> str:
        if names == "flat":
            counter["n"] += 1
            return f"/{op}_{counter['n']}"
        return f"{scope}/{op}"

    const("two", 2.0)
    const("eps", 1e-6)

    def norm(x: str, scope: str, weight: str) -> str:
        t = scope.replace("/", "_")
        nodes.extend([
            helper.make_node("Pow", [x, "two"], [f"{t}_sq"], name=op_name(scope, "Pow")),
            helper.make_node("ReduceMean", [f"{t}_sq"], [f"{t}_mean"], name=op_name(scope, "ReduceMean"),
                             axes=[-1], keepdims=1),
            helper.make_node("Add", [f"{t}_mean", "eps"], [f"{t}_var"], name=op_name(scope, "Add")),
            helper.make_node("Sqrt", [f"{t}_var"], [f"{t}_std"], name=op_name(scope, "Sqrt")),
            helper.make_node("Reciprocal", [f"{t}_std"], [f"{t}_inv"], name=op_name(scope, "Reciprocal")),
            helper.make_node("Mul", [x, f"{t}_inv"], [f"{t}_normed"], name=op_name(scope, "Mul")),
            helper.make_node("Mul", [f"{t}_normed", weight], [f"{t}_out"], name=op_name(scope, "Mul_1")),
        ])
        return f"{t}_out"

    h = "hidden"
    for i in range(blocks):
        scope = f"/model/layers.{i}"
        x = norm(h, f"{scope}/input_layernorm", const(f"ln{i}.weight", 1.0 + 0.1 * rng.standard_normal(DIM)))
        w = const(f"w{i}", rng.standard_normal((DIM, DIM)) / np.sqrt(DIM))
        nodes.append(helper.make_node("MatMul", [x, w], [f"mlp{i}"], name=op_name(f"{scope}/mlp", "MatMul")))
        nodes.append(helper.make_node("Mul", [f"mlp{i}", const(f"scale{i}", SCALE)], [f"upd{i}"],
                                      name=op_name(f"{scope}/mlp", "Mul")))
        nodes.append(helper.make_node("Add", [h, f"upd{i}"], [f"h{i}"], name=op_name(scope, "Add")))
        h = f"h{i}"
    x = norm(h, "/model/norm", const("norm.weight", np.ones(DIM)))
    head = const("lm_head", rng.standard_normal((DIM, VOCAB)) / np.sqrt(DIM))
    nodes.append(helper.make_node("MatMul", [x, head], ["logits"], name=op_name("/lm_head", "MatMul")))
    graph = helper.make_graph(nodes, "rmsnorm_stack",
                              [helper.make_tensor_value_info("hidden", TensorProto.FLOAT, [1, SEQ, DIM])],
                              [helper.make_tensor_value_info("logits", TensorProto.FLOAT, [1, SEQ, VOCAB])], inits)
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)], producer_name="deep_models")
    model.ir_version = 8
    onnx.checker.check_model(model)
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    onnx.save(model, str(path))
    return path


def inputs(seed: int = 0) -> dict[str, np.ndarray]:
    rng = np.random.default_rng(1000 + seed)
    return {"hidden": (STREAM * rng.standard_normal((1, SEQ, DIM))).astype(np.float32)}
