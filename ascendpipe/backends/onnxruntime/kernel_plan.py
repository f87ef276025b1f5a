"""Which kernel each op of the emulated graph runs as: its GE type, the impl mode ATC gives it and the
kernel table's row (``precision.kernels``); the ops whose kernel is not fp32 inside with one rounding
are computed step by step (``kernel_lowering``). Reads the graph; pure otherwise."""

from __future__ import annotations

import numpy as np

from ascendpipe.precision import kernels
from ascendpipe.precision.ge_types import ge_type

FUSED_KERNEL_OPS = {"LayerNormalization": "LayerNorm", "Gelu": "Gelu"}


def node_ge_type(node, consts: dict, opset: int) -> str:
    """The GE type ATC compiles ``node`` as (ge_types.ge_type, plus the passes decided by values:
    Pow(x, 2.0) -> Square, a BatchNormalization with constant statistics -> BNInferenceD)."""
    if node.op_type in FUSED_KERNEL_OPS:
        return FUSED_KERNEL_OPS[node.op_type]
    if node.op_type == "Pow" and len(node.input) > 1 and node.input[1] in consts:
        exponent = consts[node.input[1]]
        # Pow2SquareFusionPass (canndev pow_2_square_fusion_pass.cc L100): |y - 2| <= 1e-6, DT_FLOAT, 4 bytes
        if exponent.dtype == np.float32 and exponent.size == 1 and abs(float(exponent.reshape(-1)[0]) - 2.0) <= 1e-6:
            return "Square"
    if node.op_type == "BatchNormalization":
        # BatchNormBnInferFusionPass + HostBNFusionPass (canndev batchnorm_bninfer_fusion_pass.cc, hostbn_fusion_pass.cc
        # L126-140): BatchNorm -> BNInference -> BnHost + BNInferenceD, when its statistics are constant
        if all(t in consts for t in node.input[1:5]) and len(node.input) >= 5:
            return "BNInferenceD"
        return "BatchNorm"
    axes_input = node.input[1] if len(node.input) > 1 and node.op_type.startswith("Reduce") else None
    const_axes = None if axes_input is None else axes_input in consts
    return ge_type(node.op_type, const_axes=const_axes, opset=opset)


def plan_kernels(graph, decisions: dict, consts: dict, opset: int, soc_version: str | None, impl_modes,
                 shapes: dict, dynamic: bool) -> dict:
    """node name -> (GE type, Kernel) for every main-graph node whose output is float."""
    out = {}
    for node in graph.node:
        if node.domain not in ("", "ai.onnx"):
            continue  # a custom-domain op (allow_custom_ops): no ATC kernel, run as onnxruntime's op
        decision = decisions.get(node.name)
        if decision is None or (decision.dtype not in ("float16", "float32") and node.op_type not in FUSED_KERNEL_OPS):
            continue  # a bf16 kernel's inside is not modelled; a fused op is always expanded (fp32 then)
        ge = node_ge_type(node, consts, opset)
        mode = impl_modes.mode_for(node.name, ge) if impl_modes is not None else None
        shape = shapes.get(node.input[0]) if node.input else None
        begin = None
        if ge == "LayerNorm" and shape is not None:
            axis = next((a.i for a in node.attribute if a.name == "axis"), -1)
            begin = axis % len(shape) if shape else None
        reads16 = decision.dtype == "float16"
        kern = kernels.kernel(ge, soc_version=soc_version, impl_mode=mode, dtype="float16" if reads16 else "float32",
                              dynamic=dynamic, shape=tuple(shape) if shape else None, begin_norm_axis=begin)
        out[node.name] = (ge, kern)
    return out


def lowered(specs: dict) -> dict:
    """The nodes the emulation computes step by step: a kernel not fp32 inside, and every fused kernel op
    (its ONNX stand-in op may not exist at the model's opset)."""
    return {name: kern for name, (ge, kern) in specs.items()
            if kern.inside_fp16 or ge in FUSED_KERNEL_OPS.values()}
