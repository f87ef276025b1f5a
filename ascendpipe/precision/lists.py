"""Default op lists of the emulation, in ONNX op types.

Why these: the real lists live per SoC in CANN's ``aic-<soc>-ops-info*.json`` under
``precision_reduce`` (true = white, false = black, missing = gray). We cannot read them here, so we
follow the same reasoning:

- CUBE ops run on the cube unit, which reads fp16 and accumulates in fp32; they gain the most from
  fp16 and lose little. They are white and are the ops ``allow_fp32_to_fp16`` lowers.
- BLACK ops are where fp16's range (65504 max, 6e-8 smallest) breaks results: reductions that sum
  many values (ReduceSum, AddN/Sum, ReduceL2...), exponentials and logs, normalisations that divide by
  a small variance, and Softmax. The same ops sit in onnxconverter-common's block lists and are the
  usual culprits in Ascend accuracy threads (the ReID L2 norm, AddN overflow).
- Everything else is GRAY: elementwise and data-movement ops that follow their input's precision.
"""

from __future__ import annotations

CUBE_OPS = frozenset({
    "Conv", "ConvTranspose", "MatMul", "Gemm",
    # onnxruntime's fused forms of the same (a fused Conv+BN+Relu is still one cube op)
    "FusedConv", "FusedGemm", "FusedMatMul", "NchwcConv",
})

WHITE_LIST = CUBE_OPS

# Integer and quantized compute: no fp16 form exists, so these are never fp16 (nor keep_dtype)
# candidates, whatever float tensor they also write (DynamicQuantizeLinear's scale).
NON_FP16_OPS = frozenset({
    "ConvInteger", "MatMulInteger", "QLinearConv", "QLinearMatMul", "DynamicQuantizeLinear",
    "QuantizeLinear", "DynamicQuantizeLSTM", "DynamicQuantizeMatMul", "MatMulIntegerToFloat",
    "QLinearAdd", "QLinearMul", "QGemm", "QAttention",
})

# Where the cube unit takes fp32 input: Atlas A2/A3 (their cube computes fp32 as HF32 or FP32:
# hiascend CANN aoerc_16_0062, --op_precision_mode ``enable_float_32_execution``, "supported only in
# Atlas A2"). Atlas inference (310, 310P, 310B) and the first training products have fp16/int8
# cubes; an unknown SoC is taken as those, the side that shows an fp16 overflow.
CUBE_FP32_INPUT_FAMILIES = frozenset({"A2", "A3"})


def cube_reads_fp32(soc_version: str | None) -> bool:
    """Whether a cube op kept by keep_dtype reads fp32 on this SoC (else fp16 in, fp32 out): the C32
    class of precision/chips.py (Atlas A2/A3, and Ascend 950)."""
    from ascendpipe.precision.chips import soc_class

    return soc_class(soc_version) == "C32"

BLACK_LIST = frozenset({
    "ReduceSum", "ReduceSumSquare", "ReduceL1", "ReduceL2", "ReduceLogSum", "ReduceLogSumExp",
    "ReduceMean", "ReduceProd", "Sum", "CumSum",
    "Exp", "Log", "Pow", "Reciprocal", "Sqrt", "Erf",
    "Softmax", "LogSoftmax",
    "LayerNormalization", "SimplifiedLayerNormalization", "SkipLayerNormalization",
    "InstanceNormalization", "GroupNormalization", "LpNormalization",
})

# Ascend IR OpTypes (what ATC's keep_dtype ``OpType::`` and modify_mixlist name) -> ONNX op types,
# so the same remedy file drives both backends. Names not listed are taken as ONNX op types.
ASCEND_TO_ONNX = {
    "Conv2D": ("Conv", "FusedConv"),
    "Conv2DTranspose": ("ConvTranspose",),
    "Conv2DBackpropInput": ("ConvTranspose",),
    "MatMulV2": ("MatMul", "FusedMatMul"),
    "BatchMatMul": ("MatMul", "FusedMatMul"),
    "BatchMatMulV2": ("MatMul", "FusedMatMul"),
    "FullyConnection": ("Gemm", "FusedGemm"),
    "ReduceSumD": ("ReduceSum",),
    "ReduceMeanD": ("ReduceMean",),
    "AddN": ("Sum",),
    "SoftmaxV2": ("Softmax",),
    "BatchNorm": ("BatchNormalization",),
    "LayerNorm": ("LayerNormalization",),
    "Square": ("Mul",),
    "RealDiv": ("Div",),
    "Rsqrt": ("Sqrt",),
}


def onnx_types(op_type: str) -> tuple[str, ...]:
    """The ONNX op types an Ascend IR (or ONNX) op type name stands for."""
    return ASCEND_TO_ONNX.get(op_type, (op_type,))

# Ops whose outputs are exact copies, selections or sign flips of their inputs: with fp16 inputs
# their outputs are already fp16 values, so the emulation skips the (no-op) rounding after them.
EXACT_OPS = frozenset({
    "Reshape", "Flatten", "Transpose", "Squeeze", "Unsqueeze", "Identity", "Slice", "Gather",
    "Concat", "Split", "Expand", "Tile", "MaxPool", "GlobalMaxPool", "Relu", "Neg", "Abs",
    "ReduceMax", "ReduceMin", "Max", "Min", "DepthToSpace", "SpaceToDepth",
})
