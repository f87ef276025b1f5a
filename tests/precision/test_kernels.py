"""The kernel table and its lookups (precision/kernels.py, kernel_table.py): the row each SoC class,
impl mode and input dtype picks, each from canndev 7290acc7's kernel source, and what a remedy changes."""

import re

import pytest

from ascendpipe.precision import kernel_table as kt
from ascendpipe.precision.kernels import kernel, kernel_file, remedy_effect, soc_class


@pytest.mark.parametrize("soc, cls", [("Ascend310", "310"), (None, "310"), ("Foo", "310"), ("Ascend310P3", "fp32"),
                                      ("Ascend310B1", "fp32"), ("Ascend910A", "fp32"), ("Ascend910B1", "fp32"),
                                      ("Ascend910_9391", "fp32"), ("Ascend950PR_9599", "950")])
def test_soc_classes(soc, cls):
    """Ascend310 lacks fp32 vexp/vlog (the DSL's util.py L517-538); an unknown SoC is taken as 310."""
    assert soc_class(soc) == cls


def test_every_row_cites_canndev_file_and_line():
    for row in kt.TABLE:
        assert row.source.startswith("canndev 7290acc7 ops/built-in/"), row
        assert re.search(r"\.(py|cc) L\d+", row.source), row
    for recipe, words, source in kt.FP32_ON_310.values():
        assert source.startswith(kt.IMPL) and re.search(r"\.py L\d+", source)


def test_softmax_subtracts_in_fp16_everywhere_and_exps_in_fp16_on_310():
    """softmax_v2.py L489-503: x - max in the input dtype; the fp32 cast needs fp32 vexp."""
    assert kernel("SoftmaxV2", soc_version="Ascend310").recipe == "softmax_exp16"
    assert kernel("SoftmaxV2", soc_version="Ascend310P3").recipe == "softmax"
    assert kernel("SoftmaxV2", soc_version="Ascend910B1").recipe == "softmax"
    # kept (fp32 input) on 310: exp still in fp16 (dynamic/softmax_v2.py L178-182); elsewhere fp32 inside
    assert kernel("SoftmaxV2", soc_version="Ascend310", dtype="float32").recipe == "softmax_fp32_exp16"
    assert kernel("SoftmaxV2", soc_version="Ascend310P3", dtype="float32").recipe == "boundary"


def test_reduce_mean_d_by_soc_mode_and_file():
    """reduce_mean_d.py L69-87: None -> high_performance on Ascend310 (fp16 inside), fp32 elsewhere; the
    static file promotes only under high_precision (L76-80); the dynamic file (910B's dynamicCompileStatic)
    is fp32 except on Ascend310 under high_performance (dynamic/reduce_mean.py L35-52)."""
    assert kernel("ReduceMeanD", soc_version="Ascend310").recipe == "reduce_mean_fp16"
    assert kernel("ReduceMeanD", soc_version="Ascend310", impl_mode="high_precision").recipe == "boundary"
    assert kernel("ReduceMeanD", soc_version="Ascend310P3").recipe == "boundary"
    assert kernel("ReduceMeanD", soc_version="Ascend310P3", impl_mode="high_performance").recipe == "reduce_mean_fp16"
    assert kernel_file("ReduceMeanD", "Ascend910B1") == "dynamic"
    assert kernel_file("ReduceMeanD", "Ascend310P3") == "static"
    assert kernel("ReduceMeanD", soc_version="Ascend910B1", impl_mode="high_performance").recipe == "boundary"


def test_reduce_sum_sigmoid_bn_and_gelu_rows():
    assert kernel("ReduceSumD", soc_version="Ascend310").recipe == "reduce_sum_fp16"  # reduce_sum_d.py L63
    assert kernel("ReduceSumD", soc_version="Ascend310B1").recipe == "boundary"
    assert kernel("Sigmoid", soc_version="Ascend910A").recipe == "sigmoid_clamped"  # static file, L126-133
    assert kernel("Sigmoid", soc_version="Ascend910B1").recipe == "sigmoid"  # dynamic file: no clamp
    assert kernel("Sigmoid", soc_version="Ascend310P3", impl_mode="high_performance").recipe == "sigmoid_poly"
    assert kernel("BNInferenceD", soc_version="Ascend910B1").recipe == "bninference"
    assert kernel("BNInferenceD", soc_version="Ascend310").recipe == "bninference_fp16"
    # Gelu: no mode -> the fp32 path (gelu.py L78); high_performance.ini gives it high_precision
    assert kernel("Gelu", soc_version="Ascend310P3").recipe == "gelu_tanh"
    assert kernel("Gelu", soc_version="Ascend310P3", impl_mode="high_performance").recipe == "gelu_fast"
    assert kernel("Gelu", soc_version="Ascend310").recipe == "gelu_tanh_fp16"


def test_layer_norm_route_and_modes():
    """layer_norm.py L614-623: fp32 inside where it casts; fp16 on 310 under high_performance; a static
    shape the 310P tiling cannot split takes the dynamic template (fp16 mean/variance round trip)."""
    assert kernel("LayerNorm", soc_version="Ascend310").recipe == "layer_norm_fp16"
    assert kernel("LayerNorm", soc_version="Ascend310", impl_mode="high_precision").recipe == "layer_norm"
    assert kernel("LayerNorm", soc_version="Ascend910B1", shape=(1, 16, 64), begin_norm_axis=2).recipe == "layer_norm"
    small = kernel("LayerNorm", soc_version="Ascend310P3", shape=(1, 16, 64), begin_norm_axis=2)
    assert small.recipe == "layer_norm_template" and small.file == "dynamic"
    assert kernel("LayerNorm", soc_version="Ascend310P3", shape=(1, 128, 768), begin_norm_axis=2).recipe == "layer_norm"
    assert kernel("LayerNorm", soc_version="Ascend310P3", dynamic=True).recipe == "layer_norm_template"
    assert kernel("LayerNorm", soc_version="Ascend310P3", impl_mode="keep_fp16").recipe == "layer_norm_keep_fp16"


def test_950_is_fp32_inside_and_an_unread_type_is_a_boundary():
    assert kernel("SoftmaxV2", soc_version="Ascend950PR_9599").recipe == "boundary"
    mystery = kernel("Mystery", soc_version="Ascend310P3")
    assert mystery.recipe == "boundary" and mystery.source == "not read"


def test_remedy_effect_answers_for_each_remedy():
    keep = remedy_effect("SoftmaxV2", soc_version="Ascend310", remedy="keep_dtype")
    assert keep.changes and "exp in fp16" in keep.why  # 310: the kept op still takes exp in fp16
    assert not remedy_effect("SoftmaxV2", soc_version="Ascend310", remedy="keep_dtype", reads_fp16=False).changes
    assert remedy_effect("LayerNorm", soc_version="Ascend310", remedy="impl_mode", value="high_precision").changes
    same = remedy_effect("Exp", soc_version="Ascend310", remedy="impl_mode", value="high_precision")
    assert not same.changes and "exp.py L64-66" in same.why  # no fp32 vexp on 310: nothing to gain
    ub = remedy_effect("ReduceSumD", soc_version="Ascend310", remedy="fusion_switch",
                       value="TbeReduceElemwiseFusionPass")
    assert not ub.changes and "UB fusion" in ub.why
    assert remedy_effect("Conv", soc_version="Ascend310", remedy="fusion_switch",
                         value="ConvBatchnormFusionPass").changes
    onnx_pass = remedy_effect("LayerNorm", soc_version="Ascend310P3", remedy="fusion_switch",
                              value="LayerNormONNXFusionPass")
    # GE honours a switch on any registered pass (not in ForbiddenClosedPass): the chain then runs op by op
    assert onnx_pass.changes and "op by op" in onnx_pass.why
    never = remedy_effect("Conv", soc_version="Ascend310P3", remedy="fusion_switch", value="AABiasaddConvFusion")
    assert not never.changes and "cannot be switched off" in never.why
    assert not remedy_effect("X", soc_version=None, remedy="fusion_switch", value="NoSuchPass").changes
    with pytest.raises(ValueError):
        remedy_effect("X", soc_version=None, remedy="magic")
