"""ONNX op type -> the GE (Ascend IR) op type ATC compiles it as. Pure, no imports of onnx.

Two steps, each from CANN's published operator source (canndev, mirrored as GitHub
``dengguojie/vue-element-admin`` branch ``stp``, read at commit 7290acc7, 2022-06-29; paths below
are under ``ops/built-in/``):

1. ATC's ONNX parser: each plugin under ``framework/onnx_plugin/`` registers an ONNX op
   (``OriginOpType("ai.onnx::<opset>::<Type>")``) to a GE type (``REGISTER_CUSTOM_OP("<GEType>")``);
   a ``PartitionedCall`` plugin builds a small graph whose compute op is named in its
   ``ParseOpToGraphFn`` (``op::ReduceMean(...)``).
2. The graph passes that only retype an op: ``const2attr`` turns an op whose axes (perm) input is
   a constant into its ``D`` twin (``graph_fusion/ai_core/const2attr/const2attr_fusion_pass.cc``,
   ``REGISTER_CONST2ATTR``; ReduceSum's twin is registered apart, ``reduce_sum_fusion_pass.cc``
   L61-106 ``ConstToAttrReduceSumFusion``).

``ge_type`` answers both; ``parser_type`` only the first. The passes that redraw op boundaries
(the decomposed LayerNorm, erf-GELU, Pow(x, 2) -> Square, BatchNorm -> BNInferenceD) are in
``precision/onnx_passes.py`` and ``precision/kernels.py``: they need values (constants, wiring)
that a type alone does not carry.
"""

from __future__ import annotations

SOURCE = "canndev 7290acc7 (2022-06-29), ops/built-in/"
PLUGINS = SOURCE + "framework/onnx_plugin/"

# ONNX type -> (GE type, where the parser registers it). similar_opp_plugins.cc registers these
# one-to-one (REGISTER_CUSTOM_ONNX_OP(ai.onnx::11::<ONNX>, <GE>, ...), the line given; the same
# pairs for opsets 8-10 and 12-16 follow in the file).
_SIMILAR = {
    "Acos": ("Acos", 38), "Acosh": ("Acosh", 39), "Atan": ("Atan", 40), "Ceil": ("Ceil", 41), "Cos": ("Cos", 42),
    "Cosh": ("Cosh", 43), "Equal": ("Equal", 44), "Floor": ("Floor", 45), "Less": ("Less", 46), "Neg": ("Neg", 47),
    "Not": ("LogicalNot", 48), "Pow": ("Pow", 49), "Round": ("Round", 50), "Erf": ("Erf", 51),
    "Softplus": ("Softplus", 52), "Softsign": ("Softsign", 53), "Tanh": ("Tanh", 54),
    "Reciprocal": ("Reciprocal", 55), "Asin": ("Asin", 56), "Asinh": ("Asinh", 57), "Exp": ("Exp", 58),
    "Sin": ("Sin", 59), "Sinh": ("Sinh", 60), "Atanh": ("Atanh", 61), "Greater": ("Greater", 62),
    "Or": ("LogicalOr", 63), "Log": ("Log", 64), "And": ("LogicalAnd", 65), "PRelu": ("PRelu", 66),
    "Sign": ("Sign", 67), "Det": ("MatrixDeterminant", 68), "LessOrEqual": ("LessEqual", 69),
    "Identity": ("Identity", 70), "Where": ("SelectV2", 71), "Range": ("Range", 72), "Expand": ("Expand", 73),
    "ScatterND": ("TensorScatterUpdate", 74), "Dropout": ("Dropout", 75), "Add": ("Add", 76),
    "Sigmoid": ("Sigmoid", 77), "Tile": ("Tile", 78), "Sub": ("Sub", 79), "Sqrt": ("Sqrt", 80),
    "Div": ("RealDiv", 81), "Abs": ("Abs", 82), "Relu": ("Relu", 83), "Mul": ("Mul", 84), "Tan": ("Tan", 86),
    "IsNaN": ("IsNan", 87),
}

# ONNX type -> (GE type, plugin file and line): the dedicated plugins (a PartitionedCall plugin
# is given with the line of the op it builds)
_PLUGIN = {
    "Conv": ("Conv2D", "conv_plugin.cc L300 (op::Conv2D; Conv3D for a 5-D input)"),
    "ConvTranspose": ("Conv2DTranspose", "conv_transpose_plugin.cc L431 (op::Conv2DTranspose; 3-D: Conv3DTranspose)"),
    "MatMul": ("BatchMatMulV2", "matmul_plugin.cc L48"),
    "Gemm": ("MatMulV2", "gemm_plugin.cc L64"),
    "Softmax": ("SoftmaxV2", "softmax_plugin.cc L64 (opset 8-12), L74 (13-15)"),
    "LogSoftmax": ("LogSoftmaxV2", "logsoftmax_plugin.cc L37"),
    "BatchNormalization": ("BatchNorm", "batch_normalization_plugin.cc L52"),
    "InstanceNormalization": ("InstanceNorm", "instancenormalization_plugin.cc L40"),
    "GlobalAveragePool": ("AvgPool", "global_average_pool_plugin.cc L50"),
    "ReduceMean": ("ReduceMean", "reduce_mean_plugin.cc L79 (op::ReduceMean, axes a Const), L98"),
    "ReduceSum": ("ReduceSum", "reduce_sum_plugin.cc L91 (opset 8-12, axes a Const), L210 (13-15)"),
    "ReduceMax": ("ReduceMax", "reduce_max_plugin.cc L75"),
    "ReduceMin": ("ReduceMin", "reduce_min_plugin.cc L75"),
    "ReduceProd": ("ReduceProd", "reduce_prod_plugin.cc L75"),
    "ReduceL1": ("LpNorm", "reduceL1_plugin.cc L53"),
    "ReduceL2": ("LpNorm", "reduceL2_plugin.cc L53"),
    "ReduceSumSquare": ("SquareSumV1", "reduce_sum_square_plugin.cc L54"),
    "Sum": ("AccumulateNV2", "sum_plugin.cc L36"),
    "Transpose": ("Transpose", "transpose_plugin.cc L79"),
    "Clip": ("ClipByValue", "clip_plugin.cc L89"),
    "Cast": ("Cast", "cast_plugin.cc L100"),
    # Not in the 2022 parser (its newest opset is 15): the GE types later CANN gives them, as ops-nn's
    # LayerNormONNXFusionPass design note names them (LayerNorm); taken as the kernel ATC selects
    "LayerNormalization": ("LayerNorm", "no 2022 plugin (opset 17): taken as LayerNorm"),
    "Gelu": ("Gelu", "no 2022 plugin (opset 20): taken as Gelu"),
}

# GE type -> (its const2attr twin, where): the op is retyped when its axes/perm input is a Const
# (ConstToAttrPass checks the twin is supported: const2attr_fusion_pass.cc L82-111)
_CONST2ATTR = {
    "ReduceMean": ("ReduceMeanD", "graph_fusion/ai_core/const2attr/const2attr_fusion_pass.cc L288-291"),
    "ReduceMax": ("ReduceMaxD", "graph_fusion/ai_core/const2attr/const2attr_fusion_pass.cc L303"),
    "ReduceMin": ("ReduceMinD", "graph_fusion/ai_core/const2attr/const2attr_fusion_pass.cc L308"),
    "ReduceProd": ("ReduceProdD", "graph_fusion/ai_core/const2attr/const2attr_fusion_pass.cc L313"),
    "Transpose": ("TransposeD", "graph_fusion/ai_core/const2attr/const2attr_fusion_pass.cc L369"),
    "ReduceSum": ("ReduceSumD", "graph_fusion/ai_core/reduce_sum_fusion_pass.cc L61-106"),
}

# the ONNX ops whose axes are an input from this opset on (an attribute before it: always constant)
_AXES_INPUT_FROM = {"ReduceSum": 13, "ReduceMean": 18, "ReduceMax": 18, "ReduceMin": 18, "ReduceProd": 18}


def parser_type(op_type: str, *, opset: int | None = None) -> str:
    """The GE type ATC's ONNX parser makes of ``op_type`` (an unknown type comes back unchanged:
    ATC would refuse it, E19010, which convert says elsewhere)."""
    if op_type in _PLUGIN:
        return _PLUGIN[op_type][0]
    if op_type in _SIMILAR:
        return _SIMILAR[op_type][0]
    return op_type


def ge_type(op_type: str, *, const_axes: bool | None = None, opset: int | None = None) -> str:
    """The GE type ATC compiles ``op_type`` as: the parser's type, retyped by const2attr where the
    op's axes (Transpose: perm) are constant. ``const_axes``: whether they are (None: unknown, taken
    as constant: axes given as an attribute, before ``_AXES_INPUT_FROM``, always are, and exports
    give them as initializers); ``opset``: the model's default-domain opset (decides whether the
    axes are an attribute)."""
    parsed = parser_type(op_type, opset=opset)
    twin = _CONST2ATTR.get(parsed)
    if twin is None:
        return parsed
    attribute_axes = opset is not None and opset < _AXES_INPUT_FROM.get(op_type, 10 ** 6)
    if attribute_axes or const_axes is None or const_axes:
        return twin[0]
    return parsed


def source_of(op_type: str) -> str:
    """Where the mapping of ``op_type`` is read (file and line, at the commit in ``SOURCE``)."""
    if op_type in _PLUGIN:
        where = _PLUGIN[op_type][1]
    elif op_type in _SIMILAR:
        where = f"similar_opp_plugins.cc L{_SIMILAR[op_type][1]}"
    else:
        return "no ONNX parser plugin: the type is kept"
    twin = _CONST2ATTR.get(parser_type(op_type))
    return PLUGINS + where + (f"; {twin[0]}: {SOURCE}fusion_pass/{twin[1]}" if twin else "")
