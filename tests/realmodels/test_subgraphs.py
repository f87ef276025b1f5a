"""If/Loop/Scan bodies reading outer tensors: the converted model loads, names are unique across
every graph, outer reads are rounded once, values are the device's, and counts cover every body."""

from __future__ import annotations

import json

import numpy as np
import pytest

from ascendpipe.backends.onnxruntime.convert import EMU, convert_model
from ascendpipe.errors import UserError
from ascendpipe.precision.settings import resolve
from tests import modelzoo


def _run(path, feeds):
    import onnxruntime as ort

    return ort.InferenceSession(str(path), providers=["CPUExecutionProvider"]).run(None, feeds)


def _all_nodes(graph):
    for node in graph.node:
        yield node
        for attr in node.attribute:
            if attr.g.node:
                yield from _all_nodes(attr.g)


def _load(path):
    import onnx

    return onnx.load(str(path))


@pytest.mark.parametrize("nested", [True, False])
@pytest.mark.parametrize("sign", [1.0, -1.0])
def test_branches_reading_an_outer_tensor_load_and_give_the_device_values(tmp_path, nested, sign):
    model = modelzoo.if_outer_model(tmp_path / "m.onnx", nested=nested)
    result = convert_model(model, tmp_path / "out", resolve({"precision_mode": "force_fp16"}))
    x = (np.random.default_rng(1).uniform(1.0, 9.0, (2, 4)) * sign).astype(np.float32)
    (y,) = _run(result.model_path, {"x": x})
    np.testing.assert_array_equal(y, modelzoo.if_outer_reference(x, nested=nested))
    outputs = [t for n in _all_nodes(_load(result.model_path).graph) for t in n.output]
    assert len(outputs) == len(set(outputs))  # single assignment across the main graph and every body


def test_an_outer_fp32_tensor_read_by_two_branches_is_rounded_once_before_the_if(tmp_path):
    model = modelzoo.if_outer_model(tmp_path / "m.onnx")
    # 'square' kept: h is fp32 in the main graph, and three bodies read it as fp16
    result = convert_model(model, tmp_path / "out", resolve({"keep_dtype": ["square"]}))
    graph = _load(result.model_path).graph
    readers_of_h = [n for n in _all_nodes(graph) if "h" in n.input]
    assert [n.op_type for n in readers_of_h] == ["Cast"]  # one rounding, in the main graph
    names = [n.name for n in graph.node]
    assert names.index(readers_of_h[0].name) < names.index("branch")
    x = np.full((2, 4), 3.0, np.float32)
    np.testing.assert_array_equal(_run(result.model_path, {"x": x})[0], modelzoo.if_outer_reference(x))


def test_an_overflow_in_the_outer_graph_reaches_the_branch_as_on_the_device(tmp_path):
    model = modelzoo.if_outer_model(tmp_path / "m.onnx", nested=False)
    x = np.full((2, 4), 300.0, np.float32)  # h = 90000 > 65504
    inf_nan = convert_model(model, tmp_path / "a", resolve({}))
    saturated = convert_model(model, tmp_path / "b", resolve({"overflow_mode": "saturation"}))
    assert np.isinf(_run(inf_nan.model_path, {"x": x})[0]).all()
    np.testing.assert_array_equal(_run(saturated.model_path, {"x": x})[0], np.full((2, 4), 65504.0, np.float32))


def test_counts_and_plan_cover_every_body_without_control_flow_or_constants(tmp_path):
    model = modelzoo.if_outer_model(tmp_path / "m.onnx")
    result = convert_model(model, tmp_path / "out", resolve({"keep_dtype": ["else_op"]}))
    plan = json.loads((tmp_path / "out" / "precision_plan.json").read_text())
    # square, total, then_op, then_add, inner_then_op, inner_else_op in fp16; else_op kept; Greater other
    assert result.counts == plan["counts"] == {"float16": 6, "float32": 1, "other": 1}
    assert plan["nodes"]["inner_then_op"]["subgraph"] == "branch/then_branch/then_if/then_branch"
    assert plan["nodes"]["else_op"] == {"op_type": "Sub", "ge_type": "Sub", "dtype": "float32",
                                        "reason": "keep_dtype: name 'else_op'",
                                        "reads_fp16": False, "keepable": True, "subgraph": "branch/else_branch"}
    assert "subgraph" not in plan["nodes"]["square"]
    assert plan["nodes"]["branch"]["keepable"] is False


def test_a_model_that_would_not_load_is_a_located_error_and_no_file(tmp_path):
    import onnx
    from onnx import TensorProto, helper

    node = helper.make_node("NotAnOnnxOp", ["x"], ["y"], name="mystery")
    graph = helper.make_graph([node], "bad", [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1])],
                              [helper.make_tensor_value_info("y", TensorProto.FLOAT, [1])])
    bad = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    bad.ir_version = 8
    onnx.save(bad, str(tmp_path / "bad.onnx"))
    with pytest.raises(UserError) as err:
        convert_model(tmp_path / "bad.onnx", tmp_path / "out", resolve({}))
    assert err.value.location.op == "mystery"
    # an op outside ONNX's published schemas is refused by name before anything is written (issue 49)
    assert "NotAnOnnxOp (default domain: not an ONNX op) at 'mystery'" in err.value.message
    assert not (tmp_path / "out" / "model.onnx").exists()
    with pytest.raises(UserError) as err:  # allowed: nothing here runs it either
        convert_model(tmp_path / "bad.onnx", tmp_path / "out", resolve({}), allow_custom_ops=True)
    assert err.value.location.op == "mystery" and "nothing here can run them" in err.value.message
    assert not (tmp_path / "out" / "model.onnx").exists()
    assert not [p for p in (tmp_path / "out").iterdir() if p.name.endswith(".tmp")]


def test_internal_names_of_bodies_carry_their_scope(tmp_path):
    model = modelzoo.if_outer_model(tmp_path / "m.onnx")
    result = convert_model(model, tmp_path / "out", resolve({}))
    meta = json.loads(next(p.value for p in _load(result.model_path).metadata_props if p.key == "ascendpipe.emulation"))
    assert f"{EMU}/fp16/branch/else_branch/else_out" in meta["internal_tensors"]
    assert f"{EMU}/fp16/h" in meta["internal_tensors"]


def test_a_loop_body_reading_an_outer_tensor_every_iteration(tmp_path):
    model = modelzoo.loop_outer_model(tmp_path / "m.onnx")
    result = convert_model(model, tmp_path / "out", resolve({}))
    x = np.array([[1.1, 2.3, 3.7, 250.0]], np.float32)
    np.testing.assert_array_equal(_run(result.model_path, {"x": x})[0], modelzoo.loop_outer_reference(x))
    plan = json.loads((tmp_path / "out" / "precision_plan.json").read_text())
    assert plan["nodes"]["accumulate"]["subgraph"] == "loop/body" and plan["counts"]["float16"] == 2
