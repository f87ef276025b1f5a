"""Ops ATC cannot convert (outside ai.onnx: onnxruntime's contrib ops from its transformer optimizer)
are refused by name; emulated anyway (allow_custom_ops), the rounding touches float32 tensors only:
a fused BERT's int32 ``mask_index`` keeps its type, and an output whose type is unknown is left
unrounded and listed."""

from __future__ import annotations

import json

import numpy as np
import onnx
import onnxruntime as ort
import pytest
from onnx import TensorProto, helper

from ascendpipe.backends.onnxruntime.convert import convert_model
from ascendpipe.errors import UserError
from ascendpipe.precision.settings import resolve
from tests import modelzoo


def _run(path, feeds):
    return ort.InferenceSession(str(path), providers=["CPUExecutionProvider"]).run(None, feeds)


def test_fused_contrib_ops_are_refused_by_name_in_one_line(tmp_path):
    model = modelzoo.fused_bert_model(tmp_path / "bert.onnx")
    with pytest.raises(UserError) as err:
        convert_model(model, tmp_path / "out", resolve({}))
    message = err.value.message
    assert "\n" not in message and "ATC cannot convert 4 op(s) outside the ai.onnx domain" in message
    for kind, node in (("EmbedLayerNormalization", "embed"), ("Attention", "attention"),
                       ("SkipLayerNormalization", "skip_ln"), ("FastGelu", "gelu")):
        assert f"com.microsoft.{kind} at '{node}'" in message
    assert "--allow-custom-ops" in message and err.value.location.op == "embed"


@pytest.mark.parametrize("mode", ["force_fp16", "allow_mix_precision", "force_fp32"])
def test_emulated_contrib_ops_never_retype_the_int32_mask_index(tmp_path, mode):
    model = modelzoo.fused_bert_model(tmp_path / "bert.onnx")
    feeds = modelzoo.fused_bert_inputs()
    result = convert_model(model, tmp_path / "out", resolve({"precision_mode": mode}), allow_custom_ops=True)
    graph = onnx.load(str(result.model_path)).graph
    rounded = {n.input[0] for n in graph.node if n.op_type == "Cast" and n.name.startswith("ascendpipe_emu/")}
    assert not any(name.endswith("mask_index") for name in rounded)  # an int32 tensor: no Cast pair
    attention = next(n for n in graph.node if n.name == "attention")
    assert attention.input[3] == "mask_index"
    golden, emulated = _run(model, feeds)[0], _run(result.model_path, feeds)[0]
    assert emulated.dtype == np.float32 and np.isfinite(emulated).all()
    np.testing.assert_allclose(emulated, golden, atol=2e-2)
    plan = json.loads((tmp_path / "out" / "precision_plan.json").read_text())
    assert plan["not_rounded"] == {}  # every contrib output's type is known from onnxruntime's schemas
    if mode == "force_fp16":  # the embeddings' float output is rounded (fp16 values), the mask is not
        assert any(name.endswith("emb") for name in rounded)


def test_an_op_with_no_known_schema_is_left_unrounded_and_listed(tmp_path):
    """A custom op onnxruntime has no schema for: its output types are unknown, so no rounding point
    goes on them (a guessed float Cast could retype an integer) and precision_plan.json says so."""
    f = TensorProto.FLOAT
    nodes = [helper.make_node("Relu", ["x"], ["r"], name="relu"),
             helper.make_node("Mystery", ["r"], ["m"], name="mystery", domain="my.ops"),
             helper.make_node("Identity", ["m"], ["y"], name="out")]
    graph = helper.make_graph(nodes, "g", [helper.make_tensor_value_info("x", f, [4])],
                              [helper.make_tensor_value_info("y", f, [4])])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17), helper.make_opsetid("my.ops", 1)])
    model.ir_version = 8
    onnx.save(model, str(tmp_path / "m.onnx"))
    with pytest.raises(UserError, match="my.ops.Mystery at 'mystery'"):
        convert_model(tmp_path / "m.onnx", tmp_path / "refused", resolve({}))
    from ascendpipe.backends.onnxruntime.custom_ops import typed_floats

    floats, unknown = typed_floats(model, {"x", "r", "m", "y"})
    assert "m" not in floats and unknown == {"m": {"op_name": "mystery", "op_type": "Mystery", "domain": "my.ops"}}
    assert {"x", "r"} <= floats


def test_the_ascend_backend_refuses_them_before_atc_runs():
    from ascendpipe.backends.ascend.atc import unconvertible_error, unconvertible_ops

    ops = unconvertible_ops([("a", "Attention", "com.microsoft"), ("b", "Attention", "com.microsoft"),
                             ("c", "Relu", ""), ("d", "Conv", "ai.onnx"), ("e", "Binarizer", "ai.onnx.ml"),
                             ("f", "Attention", "com.microsoft"), ("g", "Attention", "com.microsoft")])
    assert [o["op_name"] for o in ops] == ["a", "b", "e", "f", "g"]
    message = unconvertible_error(ops, emulated=False).message
    assert "com.microsoft.Attention at 'a', 'b', 'f' and 1 more" in message
    assert "ai.onnx.ml.Binarizer at 'e'" in message and "--allow-custom-ops" not in message
