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
    assert "\n" not in message and "ATC cannot convert 4 op(s) outside ONNX's published schemas" in message
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


# --- ops outside ONNX's published schemas in the default domain (issue 49 item 6) ---------------------

def _ort_optimised_decoder(tmp_path):
    """A decoder layer saved by onnxruntime's own graph optimiser (as a user gets from
    ``SessionOptions.optimized_model_filepath``): its RMSNorms become SimplifiedLayerNormalization in the
    default domain (onnxruntime's op, no ONNX one), its gated activation com.microsoft.QuickGelu."""
    from tests.fix import transformer_models as tm

    source = tm.build("llama", tmp_path / "llama.onnx")
    options = ort.SessionOptions()
    options.graph_optimization_level = ort.GraphOptimizationLevel.ORT_ENABLE_EXTENDED
    options.optimized_model_filepath = str(tmp_path / "optimised.onnx")
    ort.InferenceSession(str(source), options, providers=["CPUExecutionProvider"])
    model = onnx.load(str(tmp_path / "optimised.onnx"))
    kinds = {(n.domain, n.op_type) for n in model.graph.node}
    assert ("", "SimplifiedLayerNormalization") in kinds and ("com.microsoft", "QuickGelu") in kinds
    assert not onnx.defs.has("SimplifiedLayerNormalization", "")  # the fact: ONNX publishes no such op
    return tmp_path / "optimised.onnx", tm.inputs("llama", past=8)


def test_default_domain_ops_outside_onnx_are_named_in_the_refusal(tmp_path):
    model, _ = _ort_optimised_decoder(tmp_path)
    with pytest.raises(UserError) as err:
        convert_model(model, tmp_path / "out", resolve({}))
    message = err.value.message
    assert "ATC cannot convert 4 op(s) outside ONNX's published schemas" in message
    assert "SimplifiedLayerNormalization (default domain: not an ONNX op) at '/ln1/" in message
    assert "com.microsoft.QuickGelu at" in message and "--allow-custom-ops" in message
    assert not (tmp_path / "out" / "model.onnx").exists()  # refused before anything is written


def test_allowed_the_emulation_runs_what_onnxruntime_runs(tmp_path):
    model, feeds = _ort_optimised_decoder(tmp_path)
    result = convert_model(model, tmp_path / "out", resolve({}), allow_custom_ops=True)
    record = json.loads((tmp_path / "out" / "convert.json").read_text())
    listed = {(c["domain"], c["op_type"]) for c in record["custom_domain_ops"]}
    assert listed == {("", "SimplifiedLayerNormalization"), ("com.microsoft", "QuickGelu")}
    assert any("SimplifiedLayerNormalization" in w for w in result.warnings)
    graph = onnx.load(str(result.model_path)).graph
    norms = [n for n in graph.node if n.op_type == "SimplifiedLayerNormalization"]
    rounded = {n.input[0] for n in graph.node if n.op_type == "Cast" and n.name.startswith("ascendpipe_emu/")}
    assert norms and all(n.output[0] in rounded for n in norms)  # its float output is fp16 on the device
    golden, emulated = _run(model, feeds)[0], _run(result.model_path, feeds)[0]
    g, e = golden.astype(np.float64).ravel(), emulated.astype(np.float64).ravel()
    assert np.isfinite(e).all() and g @ e / (np.linalg.norm(g) * np.linalg.norm(e)) > 0.999
    assert not np.array_equal(golden, emulated)  # rounded: the emulation is not the fp32 model


def test_an_op_nothing_here_runs_is_refused_even_allowed(tmp_path):
    """Gelu is an ONNX op from opset 20 only: in an opset-17 model neither ONNX's schemas nor
    onnxruntime's (its Gelu is registered from 20 too) define it, so nothing could run it."""
    f = TensorProto.FLOAT
    graph = helper.make_graph([helper.make_node("Gelu", ["x"], ["y"], name="gelu")], "g",
                              [helper.make_tensor_value_info("x", f, [4])],
                              [helper.make_tensor_value_info("y", f, [4])])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    model.ir_version = 8
    onnx.save(model, str(tmp_path / "m.onnx"))
    with pytest.raises(Exception):  # the facts: onnxruntime does not load it either
        ort.InferenceSession(str(tmp_path / "m.onnx"), providers=["CPUExecutionProvider"])
    with pytest.raises(UserError, match=r"Gelu \(default domain: an ONNX op from opset 20, the model imports 17\)"):
        convert_model(tmp_path / "m.onnx", tmp_path / "a", resolve({}))
    with pytest.raises(UserError, match="in neither ONNX's published schemas nor onnxruntime's .*'gelu'"):
        convert_model(tmp_path / "m.onnx", tmp_path / "b", resolve({}), allow_custom_ops=True)


def test_the_ascend_refusal_names_default_domain_ops_too():
    from ascendpipe.backends.ascend.atc import unconvertible_ops

    ops = unconvertible_ops([("n", "SimplifiedLayerNormalization", ""), ("r", "Relu", ""),
                             ("l", "LayerNormalization", ""), ("g", "Gelu", "ai.onnx")], {"": 17})
    assert [(o["op_name"], o["since"]) for o in ops] == [("n", None), ("g", 20)]
    # without the model's opsets (a graph read alone), an op ONNX never defined is still named
    unread = unconvertible_ops([("n", "SimplifiedLayerNormalization", ""), ("g", "Gelu", "")])
    assert [o["op_name"] for o in unread] == ["n"]
