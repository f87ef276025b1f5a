"""Fusion on the onnxruntime backend: onnxruntime's own graph optimizers stand in for ATC's passes.

``fusion_switch`` rule names on this backend are onnxruntime optimizer names (passed to
``disabled_optimizers``). ``ALL: off`` turns graph optimisation off; ``ALL: off`` with some rules
``on`` keeps only those (a per-rule entry wins over ALL, as on ATC).
"""

from __future__ import annotations

from pathlib import Path

from ascendpipe.errors import Location, UserError

# onnxruntime 1.32 basic + extended (CPU) optimizers that change the graph, by name.
KNOWN_RULES = {
    "ConstantFolding": "fold constant subgraphs",
    "CommonSubexpressionElimination": "merge identical subgraphs",
    "ConstantSharing": "share equal initializers",
    "EliminateIdentity": "drop Identity",
    "EliminateDropout": "drop Dropout (inference)",
    "EliminateSlice": "drop no-op Slice",
    "UnsqueezeElimination": "fold Unsqueeze of constants",
    "ExpandElimination": "drop no-op Expand",
    "CastElimination": "drop no-op Cast",
    "NoopElimination": "drop Add 0 / Mul 1",
    "DivMulFusion": "1/x * y -> y / x",
    "FuseReluClip": "Relu + Clip -> Clip",
    "GemmTransposeFusion": "Transpose into Gemm",
    "NotWhereFusion": "Not + Where -> Where",
    "ConvAddFusion": "Conv + Add (bias) -> Conv",
    "ConvMulFusion": "Conv + Mul (scale) -> Conv",
    "ConvBNFusion": "Conv + BatchNormalization -> Conv",
    "MatmulBNFusion": "MatMul + BatchNormalization -> Gemm",
    "PadFusion": "Pad into Conv / pooling",
    "ReshapeFusion": "Shape chains -> Reshape constant",
    "ConvActivationFusion": "Conv + Relu/Clip/Sigmoid... -> FusedConv",
    "ConvAddActivationFusion": "Conv + Add + activation -> FusedConv",
    "GemmActivationFusion": "Gemm + activation -> FusedGemm",
    "MatMulAddFusion": "MatMul + Add -> Gemm",
    "MatMulScaleFusion": "MatMul + scalar Mul -> FusedMatMul",
    "MatmulTransposeFusion": "Transpose into FusedMatMul",
    "GeluFusion": "Erf-based Gelu -> Gelu",
    "FastGeluFusion": "tanh Gelu -> FastGelu",
    "QuickGeluFusion": "x * Sigmoid(a x) -> QuickGelu",
    "BiasGeluFusion": "Add + Gelu -> BiasGelu",
    "LayerNormFusion": "mean/var/div chain -> LayerNormalization",
    "SimplifiedLayerNormFusion": "RMS norm chain -> SimplifiedLayerNormalization",
    "SkipLayerNormFusion": "Add + LayerNorm -> SkipLayerNormalization",
    "AttentionFusion": "attention subgraph -> Attention",
    "EmbedLayerNormFusion": "embedding + LayerNorm -> EmbedLayerNormalization",
    "BiasSoftmaxFusion": "Add + Softmax -> BiasSoftmax",
    "GatherToSliceFusion": "Gather chains -> Slice",
    "TransposeOptimizer": "push and cancel Transposes",
}


def check_rules(switches: dict[str, str], where: Location | None = None) -> None:
    unknown = sorted(rule for rule in switches if rule != "ALL" and rule not in KNOWN_RULES)
    if unknown:
        raise UserError(
            f"unknown fusion rule {', '.join(repr(r) for r in unknown)} on the onnxruntime backend; "
            f"known rules: ALL, {', '.join(sorted(KNOWN_RULES))}",
            where or Location(field="fusion_switch"),
        )


def session_plan(switches: dict[str, str]) -> tuple[str, list[str]]:
    """(optimisation level name, disabled optimizers) for a fusion switch mapping."""
    check_rules(switches)
    on = {r for r, v in switches.items() if v == "on" and r != "ALL"}
    off = {r for r, v in switches.items() if v == "off" and r != "ALL"}
    if switches.get("ALL") == "off":
        if not on:
            return "ORT_DISABLE_ALL", []
        return "ORT_ENABLE_EXTENDED", sorted(set(KNOWN_RULES) - on)
    return "ORT_ENABLE_EXTENDED", sorted(off)


def optimize(model_path: Path, out_path: Path, switches: dict[str, str]) -> dict:
    """Write onnxruntime's optimised fp32 graph of ``model_path`` to ``out_path``; return what ran."""
    import onnxruntime as ort

    level, disabled = session_plan(switches)
    options = ort.SessionOptions()
    options.graph_optimization_level = getattr(ort.GraphOptimizationLevel, level)
    options.optimized_model_filepath = str(out_path)
    options.log_severity_level = 3
    ort.InferenceSession(str(model_path), options, providers=["CPUExecutionProvider"], disabled_optimizers=disabled)
    return {"level": level, "disabled_optimizers": disabled}


def fused_map(original_nodes: list, optimized_nodes: list) -> dict:
    """Which original nodes each optimised node replaces, and which tensor names survive.

    Both lists hold onnx NodeProto-like objects (name, op_type, input, output). An optimised node
    stands for: the original node of the same name, the producers of its outputs, and, walking up
    from those, every original node that vanished whose outputs vanished too.
    """
    producer = {t: n for n in original_nodes for t in n.output}
    kept_names = {n.name for n in optimized_nodes}
    live_tensors = {t for n in optimized_nodes for t in (*n.input, *n.output)}
    by_name = {n.name: n for n in original_nodes}
    fused: dict[str, list[str]] = {}
    claimed: set[str] = set()
    for node in optimized_nodes:
        group: list[str] = []
        stack = [producer[t] for t in node.output if t in producer]
        stack += [by_name[node.name]] if node.name in by_name else []
        while stack:
            orig = stack.pop()
            if orig.name in group or orig.name in claimed:
                continue
            if orig.name != node.name and orig.name in kept_names:
                continue
            group.append(orig.name)
            stack += [producer[t] for t in orig.input if t in producer and t not in live_tensors]
        claimed.update(group)
        if group != [node.name]:
            fused[node.name] = sorted(group)
    original_tensors = {t for n in original_nodes for t in (*n.input, *n.output)}
    tensors = {t: t for t in sorted(live_tensors & original_tensors) if t}
    return {"fused": fused, "tensors": tensors}
