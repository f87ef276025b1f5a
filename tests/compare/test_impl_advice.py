"""Issue 47 item 5 (part B): compare's advice knows the kernels.

- Ascend310, an ONNX LayerNormalization whose fp16 kernel gives NaN (tests/fix/layernorm_models.py): the
  advice holds an ``impl_mode`` item (an op_precision_mode file with LayerNorm=high_precision), fix's
  ``advised`` maps it to the impl candidate, and the item's own file, given to a plain convert, restores
  the output. The same rows judged with an Ascend910B1 conversion's plan (its LayerNorm is fp32 inside in
  both modes) get no such item.
- Ascend310, Exp past 65504: no keep_dtype or impl mode changes Exp's kernel there (no fp32 vexp), so
  the advice says so first, names SoCs whose kernel computes it in fp32, and keeps no Exp.
"""

from __future__ import annotations

import numpy as np
import onnx
from onnx import TensorProto, helper, numpy_helper

from tests.fix import layernorm_models as lm


_compare = lm.compare_converted


def test_layernorm_on_ascend310_gets_an_impl_mode_item_whose_file_restores_the_output(tmp_path):
    from ascendpipe.fix.core import IMPL, KEEP, Candidate
    from ascendpipe.fix.propose import advised

    model = lm.layer_norm(tmp_path / "ln.onnx")
    feeds = lm.inputs()
    result, _plan, _settings = _compare(model, feeds, tmp_path / "310", "Ascend310")
    failure = result["first_failure"]
    assert failure["op_name"] == "ln"
    kinds = [item["kind"] for item in failure["advice"]]
    assert kinds[0] == "keep_dtype" and kinds[1] == "impl_mode"  # the keep_dtype item stays first
    item = failure["advice"][1]
    assert item["op_types"] == ["LayerNorm"]
    assert item["file"]["name"] == "op_precision_mode.ini"
    lines = item["file"]["content"].splitlines()
    assert "LayerNorm=high_precision" in lines and lines == sorted(lines)
    assert "Exp=high_performance" in lines  # the ini's other modes carried on: the file replaces it
    assert item["set"] == "--set stages.convert.params.op_precision_mode=op_precision_mode.ini"
    assert "op_precision_mode: op_precision_mode.ini" in item["yaml"]
    assert "layer_norm.py L614-623, L668-678" in item["message"]  # the kernel row it rests on
    assert advised(failure) == [Candidate(KEEP, "ln"), Candidate(IMPL, "LayerNorm")]
    ini = tmp_path / item["file"]["name"]
    ini.write_text(item["file"]["content"])
    assert lm.emulated_cosine(model, feeds, tmp_path / "plain", soc_version="Ascend310") < 0.5
    assert lm.emulated_cosine(model, feeds, tmp_path / "applied", soc_version="Ascend310", op_precision_mode=ini) >= 0.99


def test_the_same_rows_on_ascend910b_get_no_impl_mode_item(tmp_path):
    from ascendpipe.compare.advisor import describe_failure

    model = lm.layer_norm(tmp_path / "ln.onnx")
    feeds = lm.inputs()
    result, _plan, _settings = _compare(model, feeds, tmp_path / "310", "Ascend310")
    _result, plan910, settings910 = _compare(model, feeds, tmp_path / "910", "Ascend910B1")
    assert not _result["first_failure"]  # its fp32-inside kernel passes on its own
    position = result["first_failure"]["index"]
    rows = result["rows"]
    on910 = describe_failure(rows, position, precision_plan=plan910, target_settings=settings910)
    assert "impl_mode" not in [item["kind"] for item in on910["advice"]]
    assert on910["advice"][0]["kind"] == "keep_dtype"
    # and an op type already high_precision on Ascend310 is not offered again
    (tmp_path / "hp.ini").write_text("LayerNorm=high_precision\n")
    _r, plan_hp, settings_hp = _compare(model, feeds, tmp_path / "hp", "Ascend310",
                                        {"op_precision_mode": str(tmp_path / "hp.ini")})
    again = describe_failure(rows, position, precision_plan=plan_hp, target_settings=settings_hp)
    assert "impl_mode" not in [item["kind"] for item in again["advice"]]


def _exp_model(path):
    """y = exp(x) / 1000, x up to 13: exp's golden reaches 4.4e5, past 65504; the output lies inside it."""
    nodes = [helper.make_node("Exp", ["x"], ["e"], name="exp"), helper.make_node("Div", ["e", "k"], ["y"], name="shrink")]
    graph = helper.make_graph(nodes, "exp", [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 64])],
                              [helper.make_tensor_value_info("y", TensorProto.FLOAT, [1, 64])],
                              [numpy_helper.from_array(np.array(1000.0, np.float32), "k")])
    onnx.save(helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)]), path)
    return path


def test_exp_on_ascend310_is_said_to_take_no_remedy_and_is_kept_by_none(tmp_path):
    model = _exp_model(tmp_path / "exp.onnx")
    x = np.random.default_rng(0).uniform(0.0, 6.0, size=(1, 64)).astype(np.float32)
    x[0, :4] = [11.5, 12.0, 12.5, 13.0]
    result, _plan, _settings = _compare(model, {"x": x}, tmp_path / "310", "Ascend310")
    failure = result["first_failure"]
    assert failure["op_name"] == "exp"
    first = failure["advice"][0]
    assert first["kind"] == "kernel" and first["restores"] is False
    assert "no keep_dtype or impl mode changes the Exp kernel on Ascend310" in first["message"]
    assert "Ascend910B1" in first["message"] and "exp.py" in first["message"]
    kinds = [item["kind"] for item in failure["advice"]]
    assert "impl_mode" not in kinds and "precision_mode" not in kinds
    assert all("exp" not in item.get("ops", []) for item in failure["advice"] if item["kind"] == "keep_dtype")
    # on a SoC with fp32 vexp keep_dtype changes Exp: no such statement, exp is kept
    result, _plan, _settings = _compare(model, {"x": x}, tmp_path / "310p", "Ascend310P3")
    advice = result["first_failure"]["advice"]
    assert advice[0]["kind"] == "keep_dtype" and "exp" in advice[0]["ops"]
