"""Initializers sliced from a model's bytes make the same sub-model as protobuf copies."""

import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper, numpy_helper

from ascendpipe.onnxwire import WireError, initializer_spans, join_model


def _model():
    w = numpy_helper.from_array(np.arange(300, dtype=np.float32).reshape(3, 100), "w")  # a length over 127
    axes = numpy_helper.from_array(np.array([1], np.int64), "axes")
    nodes = [helper.make_node("MatMul", ["x", "w"], ["y"], name="mm"),
             helper.make_node("ReduceSum", ["y", "axes"], ["s"], name="sum")]
    graph = helper.make_graph(nodes, "g", [helper.make_tensor_value_info("x", TensorProto.FLOAT, [2, 3])],
                              [helper.make_tensor_value_info("s", TensorProto.FLOAT, [2, 1])], [w, axes])
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])


def test_spans_hold_each_initializer_and_join_rebuilds_the_model():
    model = _model()
    data = model.SerializeToString()
    spans = initializer_spans(data)
    assert sorted(spans) == ["axes", "w"]
    for init in model.graph.initializer:
        start, end = spans[init.name]
        assert data[start:end] == init.SerializeToString()
    header = onnx.ModelProto(ir_version=model.ir_version)
    header.opset_import.extend(model.opset_import)
    graph = onnx.GraphProto()
    graph.CopyFrom(model.graph)
    graph.ClearField("initializer")
    view = memoryview(data)
    joined = onnx.load_model_from_string(join_model(header.SerializeToString(), graph.SerializeToString(),
                                                    [view[s:e] for s, e in spans.values()]))
    assert joined.graph.node == model.graph.node and joined.graph.input == model.graph.input
    assert sorted(i.SerializeToString() for i in joined.graph.initializer) == \
        sorted(i.SerializeToString() for i in model.graph.initializer)
    np.testing.assert_array_equal(numpy_helper.to_array(joined.graph.initializer[0]).ravel()[-1], 299)


def test_truncated_bytes_are_refused():
    data = _model().SerializeToString()
    with pytest.raises(WireError):
        initializer_spans(data[:-5])
