"""A model's graph read without its weights (``onnxgraph.load_graph``): the same nodes, inputs,
outputs and initializer names as a full load, each weight a reference into the file."""

from __future__ import annotations

import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper, numpy_helper

from ascendpipe.errors import UserError
from ascendpipe.onnxgraph import graph_input_specs, graph_summary, load_graph, read_input_specs


def _model(path):
    rng = np.random.default_rng(3)
    w = numpy_helper.from_array(rng.standard_normal((64, 64)).astype(np.float32), "w")  # 16 KB: referenced
    b = numpy_helper.from_array(rng.standard_normal(64).astype(np.float32), "b")  # 256 B: inline
    graph = helper.make_graph(
        [helper.make_node("MatMul", ["x", "w"], ["y"], name="mm"), helper.make_node("Add", ["y", "b"], ["z"], name="add")],
        "g", [helper.make_tensor_value_info("x", TensorProto.FLOAT, ["n", 64])],
        [helper.make_tensor_value_info("z", TensorProto.FLOAT, ["n", 64])], [w, b])
    onnx.save(helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)]), str(path))
    return path


def test_the_graph_is_the_full_loads_and_no_weight_is_read(tmp_path):
    path = _model(tmp_path / "m.onnx")
    full, light = onnx.load(str(path)), load_graph(path)
    assert [(n.name, n.op_type, list(n.input), list(n.output)) for n in light.graph.node] == \
        [(n.name, n.op_type, list(n.input), list(n.output)) for n in full.graph.node]
    assert [i.name for i in light.graph.initializer] == ["w", "b"]
    assert graph_summary(light.graph) == graph_summary(full.graph)
    assert read_input_specs(path) == graph_input_specs(full.graph) and [s.name for s in read_input_specs(path)] == ["x"]
    w = light.graph.initializer[0]
    assert w.data_location == TensorProto.EXTERNAL and not w.raw_data
    assert {e.key: e.value for e in w.external_data}["location"] == "m.onnx"
    assert light.graph.initializer[1].raw_data == full.graph.initializer[1].raw_data  # small: inline


def test_what_cannot_be_referenced_is_loaded_or_refused_as_load_model_does(tmp_path):
    path = _model(tmp_path / "m.onnx")
    external = tmp_path / "ext.onnx"
    onnx.save(onnx.load(str(path)), str(external), save_as_external_data=True, size_threshold=0)
    assert [i.name for i in load_graph(external).graph.initializer] == ["w", "b"]
    (tmp_path / "not.onnx").write_bytes(b"\xff\xff\xff not a model")
    with pytest.raises(UserError, match="not an ONNX model"):
        load_graph(tmp_path / "not.onnx")
    with pytest.raises(UserError, match="is a folder"):
        load_graph(tmp_path)
    (tmp_path / "empty.onnx").write_bytes(b"")
    assert list(load_graph(tmp_path / "empty.onnx").graph.node) == []  # as onnx.load reads an empty file
