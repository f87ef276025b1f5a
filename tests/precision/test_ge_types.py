"""ONNX -> GE types, as canndev's ONNX parser and const2attr make them (precision/ge_types.py)."""

from ascendpipe.precision.ge_types import ge_type, parser_type, source_of


def test_parser_types_of_the_common_ops():
    assert [parser_type(t) for t in ("Div", "Softmax", "LogSoftmax", "MatMul", "Gemm", "Conv", "Where", "Sum")] == [
        "RealDiv", "SoftmaxV2", "LogSoftmaxV2", "BatchMatMulV2", "MatMulV2", "Conv2D", "SelectV2", "AccumulateNV2"]
    assert parser_type("Relu") == "Relu" and parser_type("Mystery") == "Mystery"


def test_const2attr_retypes_reductions_with_constant_axes():
    assert ge_type("ReduceMean", opset=13) == "ReduceMeanD"  # axes an attribute before opset 18: always constant
    assert ge_type("ReduceMean", const_axes=False, opset=18) == "ReduceMean"  # a computed axes input stays
    assert ge_type("ReduceMean", const_axes=True, opset=18) == "ReduceMeanD"
    assert ge_type("ReduceSum", opset=11) == "ReduceSumD"
    assert ge_type("ReduceSum", const_axes=False, opset=13) == "ReduceSum"
    assert ge_type("ReduceSum") == "ReduceSumD"  # unknown: taken as constant, as exports give them
    assert ge_type("Transpose", opset=13) == "TransposeD" and ge_type("Div") == "RealDiv"


def test_each_mapping_names_its_source_line():
    assert source_of("Div").endswith("similar_opp_plugins.cc L81")
    assert "reduce_mean_plugin.cc" in source_of("ReduceMean")
    assert "const2attr_fusion_pass.cc L288-291" in source_of("ReduceMean")
    assert source_of("Mystery").startswith("no ONNX parser plugin")
