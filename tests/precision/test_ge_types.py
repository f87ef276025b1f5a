"""The GE op type ATC gives an ONNX node, at parse time and as a kernel (canndev onnx_plugin, const2attr)."""

from __future__ import annotations

import pytest

from ascendpipe.precision.ge_types import ge_type, is_onnx_only, onnx_types_for, parse_type, source


@pytest.mark.parametrize("onnx, kernel", [
    ("Div", "RealDiv"), ("Softmax", "SoftmaxV2"), ("LogSoftmax", "LogSoftmaxV2"), ("MatMul", "BatchMatMulV2"),
    ("Gemm", "MatMulV2"), ("Conv", "Conv2D"), ("ConvTranspose", "Conv2DTransposeD"), ("Sum", "AccumulateNV2"),
    ("BatchNormalization", "BNInferenceD"), ("ReduceMean", "ReduceMeanD"), ("ReduceSum", "ReduceSumD"),
    ("ReduceSumSquare", "SquareSumV1"), ("ReduceL2", "LpNorm"), ("Where", "SelectV2"), ("Pow", "Pow"),
    ("Erf", "Erf"), ("InstanceNormalization", "InstanceNorm"), ("Transpose", "TransposeD"),
])
def test_kernel_types(onnx, kernel):
    assert ge_type(onnx) == kernel


def test_const_to_attr_needs_a_constant():
    assert ge_type("ReduceMean", const_axes=True) == "ReduceMeanD"
    assert ge_type("ReduceMean", const_axes=False) == "ReduceMean"  # runtime axes: the op stays
    assert ge_type("ReduceSum", const_axes=False) == "ReduceSum"
    assert ge_type("ReduceSum", const_axes=None, opset=13) == "ReduceSumD"  # unknown: taken as constant


def test_parse_time_types_are_what_keep_dtype_matches():
    assert parse_type("ReduceMean") == "ReduceMean" and parse_type("ConvTranspose") == "Conv2DTranspose"
    assert parse_type("Squeeze", opset=11) == "Squeeze" and parse_type("Squeeze", opset=13) == "SqueezeV3"
    assert parse_type("BatchNormalization") == "BatchNorm"
    assert parse_type("NoSuchOp") == "NoSuchOp" == ge_type("NoSuchOp")  # unknown: its own name (gray)


def test_reverse_and_onnx_only_names():
    assert onnx_types_for("SoftmaxV2") == ("Softmax",)
    assert set(onnx_types_for("ReduceSumD")) == {"ReduceLogSum", "ReduceLogSumExp", "ReduceSum"}
    assert "ReduceMean" in onnx_types_for("ReduceMean")  # the D twin's original, where axes are not constant
    assert onnx_types_for("Conv2DTranspose", kernel=False) == ("ConvTranspose",)
    assert is_onnx_only("Softmax") and is_onnx_only("Div") and not is_onnx_only("ReduceMean")
    assert not is_onnx_only("RealDiv") and not is_onnx_only("Unknown")
    assert source("Div").endswith("similar_opp_plugins.cc L38-87") and source("Nope") is None


def test_parser_types_of_the_common_ops_under_the_kernel_tables_spelling():
    from ascendpipe.precision.ge_types import parser_type

    assert [parser_type(t) for t in ("Div", "Softmax", "LogSoftmax", "MatMul", "Gemm", "Conv", "Where", "Sum")] == [
        "RealDiv", "SoftmaxV2", "LogSoftmaxV2", "BatchMatMulV2", "MatMulV2", "Conv2D", "SelectV2", "AccumulateNV2"]
    assert parser_type("Relu") == "Relu" and parser_type("Mystery") == "Mystery"


def test_const2attr_retypes_reductions_with_constant_axes_and_attribute_axes_are_constant():
    assert ge_type("ReduceMean", opset=13) == "ReduceMeanD"  # axes an attribute before opset 18: always constant
    assert ge_type("ReduceMean", const_axes=False, opset=13) == "ReduceMeanD"
    assert ge_type("ReduceMean", const_axes=False, opset=18) == "ReduceMean"  # a computed axes input stays
    assert ge_type("ReduceMean", const_axes=True, opset=18) == "ReduceMeanD"
    assert ge_type("ReduceSum", opset=11) == "ReduceSumD"
    assert ge_type("ReduceSum", const_axes=False, opset=13) == "ReduceSum"
    assert ge_type("ReduceSum") == "ReduceSumD"  # unknown: taken as constant, as exports give them
    assert ge_type("Transpose", opset=13) == "TransposeD" and ge_type("Div") == "RealDiv"
