"""The GE op type ATC gives an ONNX node: pure, no onnx import.

ATC's ONNX parser turns each node into GE ops through one plugin per ONNX op (canndev
``ops/built-in/framework/onnx_plugin/``, read at 7290acc7, 2022; the 2026 plugins in hicann/ops-nn and
ops-math ``*/framework/*_onnx_plugin.cpp`` keep these names). Two moments matter, and they give different
names for a few ops:

- **parse time** (``parse_type``): the graph ``--keep_dtype`` is applied to. atc sets the keep attribute
  right after parsing (GE ``api/atc/main_impl.cc`` L1531-1536, ``SetAttrOptions``), matching an
  ``OpType::X`` line against each node's type (``compiler/api/aclgrph/attr_options/keep_dtype_option.cc``
  L96-110, ``utils.cc`` L35-49). ONNX ReduceMean is a ``ReduceMean`` there.
- **kernel time** (``ge_type``): the graph after FE's graph fusion (``fe_graph_optimizer.cc`` L389-400
  runs before the op judge at L420 ff.), whose kernel type the mixed-precision lists, ``--modify_mixlist``
  (``op_dtype_selection_strategy_allow_mix_precision_base.cc`` L82-91: ``GetOpType()`` of the kernel) and
  ``--customize_dtypes`` (``op_format_dtype_judge.cc`` L617-618) are looked up by. Const-to-attr passes
  have renamed a few ops by then: ReduceMean -> ReduceMeanD (``const2attr_fusion_pass.cc`` L288-291),
  ReduceSum -> ReduceSumD (``reduce_sum_fusion_pass.cc`` L61-106, ``ConstToAttrReduceSumFusion``, a pass
  GE never lets be switched off: ``fusion_pass_util.h`` L25), ReduceMax/Min/Prod -> ...D, Transpose ->
  TransposeD, ConvTranspose's Conv2DTranspose -> Conv2DTransposeD; BatchNorm -> BNInference
  (``batchnorm_bninfer_fusion_pass.cc`` L42-43, L468), whose kernel is ``BNInferenceD``.

A const-to-attr rename needs the input it folds to be a constant; on a dynamic-shape model the generic
pass keeps the original op when that op is supported (``const2attr_fusion_pass.cc`` L78-93). ``const_axes``
says which: None (unknown) is taken as constant, which every axes *attribute* is (opset < 18 for
ReduceMean, < 13 for ReduceSum) and which exporters write for the axes input.

An ONNX op the table does not know keeps its own name: no list names it, so the mixed policy treats it as
gray (it follows its input), which is what ATC does for an op whose kernel carries no flag.
"""

from __future__ import annotations

_PLUGINS = "canndev ops/built-in/framework/onnx_plugin"
_SIMILAR = f"{_PLUGINS}/similar_opp_plugins.cc L38-87"

# ONNX op type -> (GE type at parse time, GE kernel type, where the parse-time name is registered)
_TABLE: dict[str, tuple[str, str, str]] = {
    # one to one (similar_opp_plugins.cc: REGISTER_CUSTOM_ONNX_OP(ai.onnx::V::Onnx, Ge, ...))
    **{onnx: (ge, ge, _SIMILAR) for onnx, ge in {
        "Abs": "Abs", "Acos": "Acos", "Acosh": "Acosh", "Add": "Add", "And": "LogicalAnd", "Asin": "Asin",
        "Asinh": "Asinh", "Atan": "Atan", "Atanh": "Atanh", "Ceil": "Ceil", "Cos": "Cos", "Cosh": "Cosh",
        "Det": "MatrixDeterminant", "Div": "RealDiv", "Dropout": "Dropout", "Equal": "Equal", "Erf": "Erf",
        "Exp": "Exp", "Expand": "Expand", "Floor": "Floor", "Greater": "Greater", "Identity": "Identity",
        "IsNaN": "IsNan", "Less": "Less", "LessOrEqual": "LessEqual", "Log": "Log", "Mul": "Mul", "Neg": "Neg",
        "Not": "LogicalNot", "Or": "LogicalOr", "PRelu": "PRelu", "Pow": "Pow", "Range": "Range",
        "Reciprocal": "Reciprocal", "Relu": "Relu", "Round": "Round", "ScatterND": "TensorScatterUpdate",
        "Sigmoid": "Sigmoid", "Sign": "Sign", "Sin": "Sin", "Sinh": "Sinh", "Softplus": "Softplus",
        "Softsign": "Softsign", "Sqrt": "Sqrt", "Sub": "Sub", "Tan": "Tan", "Tanh": "Tanh", "Tile": "Tile",
        "Where": "SelectV2", "GlobalAveragePool": "GlobalAveragePool",
    }.items()},
    # a plugin of their own (file and line of REGISTER_CUSTOM_OP, or of the op its subgraph builds)
    "BatchNormalization": ("BatchNorm", "BNInferenceD", f"{_PLUGINS}/batch_normalization_plugin.cc L52"),
    "Cast": ("Cast", "Cast", f"{_PLUGINS}/cast_plugin.cc L100"),
    "Celu": ("Celu", "Celu", f"{_PLUGINS}/celu_plugin.cc L36"),
    "Clip": ("ClipByValue", "ClipByValue", f"{_PLUGINS}/clip_plugin.cc L195-202 (subgraph: ClipByValue)"),
    "Concat": ("ConcatD", "ConcatD", f"{_PLUGINS}/concat_plugin.cc L116 (subgraph: ConcatD)"),
    "ConstantOfShape": ("Fill", "FillD", f"{_PLUGINS}/constantofshape_plugin.cc L154 (subgraph: Fill)"),
    "Conv": ("Conv2D", "Conv2D", f"{_PLUGINS}/conv_plugin.cc L369 (subgraph: Conv2D, Conv3D for 5-D)"),
    "ConvTranspose": ("Conv2DTranspose", "Conv2DTransposeD",
                      f"{_PLUGINS}/conv_transpose_plugin.cc L431 (subgraph: Conv2DTranspose)"),
    "CumSum": ("Cumsum", "CumsumD", f"{_PLUGINS}/cumsum_plugin.cc L43"),
    "DepthToSpace": ("DepthToSpace", "DepthToSpace", f"{_PLUGINS}/depth_to_space_plugin.cc L52"),
    "Einsum": ("Einsum", "Einsum", f"{_PLUGINS}/einsum_plugin.cc L42"),
    "Elu": ("Elu", "Elu", f"{_PLUGINS}/elu_plugin.cc L35"),
    "Flatten": ("Flatten", "Flatten", f"{_PLUGINS}/flatten_plugin.cc L42"),
    "Gather": ("GatherV2", "GatherV2", f"{_PLUGINS}/gather_plugin.cc L86 (subgraph: GatherV2)"),
    "GatherElements": ("GatherElements", "GatherElements", f"{_PLUGINS}/gather_elements_plugin.cc L43"),
    "GatherND": ("GatherNd", "GatherNd", f"{_PLUGINS}/gather_nd_plugin.cc L44"),
    "Gemm": ("MatMulV2", "MatMulV2", f"{_PLUGINS}/gemm_plugin.cc L64"),
    "GlobalMaxPool": ("MaxPool", "MaxPool", f"{_PLUGINS}/global_max_pool_plugin.cc L50"),
    "GRU": ("CommonGRU", "CommonGRU", f"{_PLUGINS}/gru_plugin.cc L48"),
    "HardSigmoid": ("HardSigmoid", "HardSigmoid", f"{_PLUGINS}/hard_sigmoid_plugin.cc L48"),
    "Hardmax": ("HardMax", "HardMax", f"{_PLUGINS}/hardmax_plugin.cc L37"),
    "InstanceNormalization": ("InstanceNorm", "InstanceNorm", f"{_PLUGINS}/instancenormalization_plugin.cc L40"),
    "IsInf": ("IsInf", "IsInf", f"{_PLUGINS}/isinf_plugin.cc L43"),
    "LeakyRelu": ("LeakyRelu", "LeakyRelu", f"{_PLUGINS}/leakyrelu_plugin.cc L36"),
    "LogSoftmax": ("LogSoftmaxV2", "LogSoftmaxV2", f"{_PLUGINS}/logsoftmax_plugin.cc L37"),
    "LpNormalization": ("LpNorm", "LpNorm", f"{_PLUGINS}/lp_normalization_plugin.cc L95 (subgraph: LpNorm, Div)"),
    "LRN": ("LRN", "LRN", f"{_PLUGINS}/lrn_plugin.cc L65"),
    "LSTM": ("CommonLSTM", "CommonLSTM", f"{_PLUGINS}/lstm_plugin.cc L53"),
    "MatMul": ("BatchMatMulV2", "BatchMatMulV2", f"{_PLUGINS}/matmul_plugin.cc L48"),
    "Max": ("Maximum", "Maximum", f"{_PLUGINS}/max_plugin.cc L79 (subgraph: Maximum)"),
    "MaxPool": ("MaxPool", "MaxPool", f"{_PLUGINS}/max_pool_plugin.cc L374 (subgraph: MaxPool, MaxPoolV3)"),
    "AveragePool": ("AvgPool", "AvgPool", f"{_PLUGINS}/average_pool_plugin.cc L348 (subgraph: AvgPool, AvgPoolV2)"),
    "Mean": ("AccumulateNV2", "AccumulateNV2", f"{_PLUGINS}/mean_plugin.cc L79 (subgraph: AccumulateNV2, Muls)"),
    "MeanVarianceNormalization": ("MVNV2", "MVNV2", f"{_PLUGINS}/mean_variance_normalization_plugin.cc L79"),
    "Min": ("Minimum", "Minimum", f"{_PLUGINS}/min_plugin.cc L108-131 (subgraph: Minimum)"),
    "Mod": ("Mod", "Mod", f"{_PLUGINS}/mod_plugin.cc L41"),
    "NonZero": ("NonZero", "NonZero", f"{_PLUGINS}/nonzero_plugin.cc L38"),
    "Pad": ("PadV3", "PadV3", f"{_PLUGINS}/pad_plugin.cc L128-137"),
    "ReduceL1": ("LpNorm", "LpNorm", f"{_PLUGINS}/reduceL1_plugin.cc L53"),
    "ReduceL2": ("LpNorm", "LpNorm", f"{_PLUGINS}/reduceL2_plugin.cc L53"),
    "ReduceLogSum": ("ReduceSum", "ReduceSumD", f"{_PLUGINS}/reduce_log_sum_plugin.cc L106 (subgraph: ReduceSum, Log)"),
    "ReduceLogSumExp": ("ReduceSum", "ReduceSumD",
                        f"{_PLUGINS}/reduce_log_sum_exp_plugin.cc L109 (subgraph: Exp, ReduceSum, Log)"),
    "ReduceMax": ("ReduceMax", "ReduceMaxD", f"{_PLUGINS}/reduce_max_plugin.cc L93 (subgraph: ReduceMax)"),
    "ReduceMean": ("ReduceMean", "ReduceMeanD", f"{_PLUGINS}/reduce_mean_plugin.cc L79, L98 (subgraph: ReduceMean)"),
    "ReduceMin": ("ReduceMin", "ReduceMinD", f"{_PLUGINS}/reduce_min_plugin.cc L93 (subgraph: ReduceMin)"),
    "ReduceProd": ("ReduceProd", "ReduceProdD", f"{_PLUGINS}/reduce_prod_plugin.cc L93 (subgraph: ReduceProd)"),
    "ReduceSum": ("ReduceSum", "ReduceSumD", f"{_PLUGINS}/reduce_sum_plugin.cc L199-210"),
    "ReduceSumSquare": ("SquareSumV1", "SquareSumV1", f"{_PLUGINS}/reduce_sum_square_plugin.cc L54"),
    "Reshape": ("Reshape", "Reshape", f"{_PLUGINS}/reshape_plugin.cc L45"),
    "Resize": ("ResizeBilinearV2", "ResizeBilinearV2D",
               f"{_PLUGINS}/resize_plugin.cc L264-275 (subgraph: ResizeBilinearV2 or ResizeNearestNeighborV2)"),
    "ReverseSequence": ("ReverseSequence", "ReverseSequence", f"{_PLUGINS}/reverseSequence_plugin.cc L48"),
    "ScatterElements": ("ScatterElements", "ScatterElements", f"{_PLUGINS}/scatter_elements_plugin.cc L43"),
    "Selu": ("Selu", "Selu", f"{_PLUGINS}/selu_plugin.cc L50"),
    "Shape": ("Shape", "Shape", f"{_PLUGINS}/shape_plugin.cc L38"),
    "Shrink": ("Shrink", "Shrink", f"{_PLUGINS}/shrink_plugin.cc L46"),
    "Size": ("Size", "Size", f"{_PLUGINS}/size_plugin.cc L29"),
    "Slice": ("StridedSliceV2", "StridedSliceV2", f"{_PLUGINS}/slice_plugin.cc L119-126"),
    "Softmax": ("SoftmaxV2", "SoftmaxV2", f"{_PLUGINS}/softmax_plugin.cc L64-74"),
    "SpaceToDepth": ("SpaceToDepth", "SpaceToDepth", f"{_PLUGINS}/space_to_depth_plugin.cc L45"),
    "Split": ("SplitV", "SplitVD", f"{_PLUGINS}/split_plugin.cc L146 (subgraph: Split or SplitV)"),
    "Squeeze": ("Squeeze", "Squeeze", f"{_PLUGINS}/squeeze_plugin.cc L51-61"),
    "Sum": ("AccumulateNV2", "AccumulateNV2", f"{_PLUGINS}/sum_plugin.cc L36"),
    "TopK": ("TopK", "TopK", f"{_PLUGINS}/topk_plugin.cc L125-132"),
    "Transpose": ("Transpose", "TransposeD", f"{_PLUGINS}/transpose_plugin.cc L86 (subgraph: Transpose)"),
    "Unsqueeze": ("Unsqueeze", "Unsqueeze", f"{_PLUGINS}/unsqueeze_plugin.cc L61-71"),
    "Upsample": ("Resize", "Resize", f"{_PLUGINS}/upsample_plugin.cc L90 (subgraph: Resize)"),
    "If": ("If", "If", f"{_PLUGINS}/if_plugin.cc L54"),
    # 2026 plugins (hicann/ops-nn e5c3fa93): opset-17 LayerNormalization is a LayerNorm subgraph
    "LayerNormalization": ("LayerNorm", "LayerNorm",
                           "ops-nn common/src/framework/layer_normalization_onnx_plugin.cpp L148 "
                           "(subgraph: LayerNorm)"),
}

# opset-dependent parse-time names (the plugin registered for the opset range)
_BY_OPSET: dict[str, tuple[int, str, str]] = {
    "Squeeze": (13, "Squeeze", "SqueezeV3"),  # squeeze_plugin.cc L51 (8-12), L61 (13-15)
    "Unsqueeze": (13, "Unsqueeze", "UnsqueezeV3"),  # unsqueeze_plugin.cc L61 (8-12), L71 (13-15)
}

# const-to-attr renames: the parse-time op -> its D twin, when the folded input is a constant
_CONST2ATTR = {"ReduceMean": "ReduceMeanD", "ReduceSum": "ReduceSumD", "ReduceMax": "ReduceMaxD",
               "ReduceMin": "ReduceMinD", "ReduceProd": "ReduceProdD"}

# the ONNX ops whose axes are an input from this opset on (an attribute before it: always constant)
_AXES_INPUT_FROM = {"ReduceSum": 13, "ReduceMean": 18, "ReduceMax": 18, "ReduceMin": 18, "ReduceProd": 18}

# GE types ATC's own graph fusions make out of several ONNX nodes: the ONNX op types each stands for
# (the decomposed LayerNorm, the erf GELU: layer_norm_onnx_fusion_pass.cc, gelu_onnx_fusion_pass.cc)
FUSED_FROM: dict[str, tuple[str, ...]] = {
    "LayerNorm": ("ReduceMean", "Sub", "Pow", "Mul", "Add", "Sqrt", "Div"),
    "Gelu": ("Div", "Mul", "Erf", "Add"),
}


def _known(op_type: str) -> bool:
    return op_type in _TABLE


def parse_type(op_type: str, *, opset: int | None = None) -> str:
    """The GE type ATC's ONNX parser gives ``op_type`` (what ``--keep_dtype``'s ``OpType::`` matches);
    an op type the table does not know is returned unchanged (a GE type, or an op no plugin parses)."""
    if op_type in _BY_OPSET and opset is not None:
        since, before, after = _BY_OPSET[op_type]
        return after if opset >= since else before
    entry = _TABLE.get(op_type)
    return entry[0] if entry else op_type


def ge_type(op_type: str, *, const_axes: bool | None = None, opset: int | None = None) -> str:
    """The GE kernel type ATC runs an ONNX ``op_type`` node as: what the mixed-precision lists,
    ``--modify_mixlist`` and ``--customize_dtypes``' ``OpType::`` name. ``const_axes``: whether the input a
    const-to-attr pass folds (ReduceMean/ReduceSum axes...) is a constant; None counts as constant."""
    entry = _TABLE.get(op_type)
    if entry is None:
        return op_type
    parsed, kernel, _ = entry
    attribute_axes = opset is not None and opset < _AXES_INPUT_FROM.get(op_type, 10 ** 6)
    if parsed in _CONST2ATTR and const_axes is False and not attribute_axes:
        return parsed
    if op_type in _BY_OPSET:
        return parse_type(op_type, opset=opset)
    return kernel


def source(op_type: str) -> str | None:
    """Where the parse-time GE type of ``op_type`` is registered (file and line), or None."""
    entry = _TABLE.get(op_type)
    return entry[2] if entry else None


def is_onnx_only(name: str) -> bool:
    """An ONNX op type that no ATC plugin keeps under its own name (Div, Softmax, MatMul, Gemm, Conv...):
    in a GE-type list (keep_dtype's ``OpType::``, modify_mixlist) it names nothing on the device."""
    entry = _TABLE.get(name)
    return entry is not None and name not in (entry[0], entry[1]) and name not in _GE_NAMES


def onnx_types_for(ge: str, *, kernel: bool = True) -> tuple[str, ...]:
    """The ONNX op types whose nodes ATC runs as GE type ``ge`` (``kernel``: after the graph fusions'
    renames; else at parse time); a name the table does not know stands for itself."""
    found = [onnx for onnx, (parsed, kern, _) in _TABLE.items() if (kern if kernel else parsed) == ge]
    found += [onnx for onnx, (since, before, after) in _BY_OPSET.items() if ge in (before, after) and onnx not in found]
    if kernel:  # a D twin's original name, kept where the folded input is not constant
        found += [onnx for onnx, (parsed, _, _) in _TABLE.items() if parsed == ge and parsed in _CONST2ATTR
                  and onnx not in found]
    return tuple(sorted(found)) or (ge,)


_GE_NAMES = frozenset(name for parsed, kernel, _ in _TABLE.values() for name in (parsed, kernel))

# the kernel table's spelling of the same two functions
parser_type = parse_type
source_of = source
