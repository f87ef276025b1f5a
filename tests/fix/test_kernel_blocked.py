"""Issue 47 (item 5): a remedy that cannot change what the kernel computes is never proposed.

On Ascend310 the Exp and Pow kernels cast an fp32 input to fp16 before their first instruction (no
float32 vexp/vlog there: canndev 7290acc7 tbe/impl/dynamic/exp.py L66-68, dynamic/pow.py L110-113), so
keep_dtype on them changes no value: the precision plan says so, fix never proposes them, and where such
an op's own values lie beyond 65504 compare and fix say after one evaluation that no keep set can work,
naming the SoCs where one does. On Ascend310P3 (fp32 vexp) the same keep restores the model, checked
here by fix finding it and by onnxruntime on the converted model."""

from __future__ import annotations

import json

import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper, numpy_helper


def _exp_model(path, seed: int):
    """y = exp(x * w) / 1000 with x * w reaching 13: exp's values reach 4.4e5, past fp16's 65504,
    while the output (<= 443) lies well inside it."""
    rng = np.random.default_rng(seed)
    w = rng.uniform(0.5, 1.0, size=(1, 64)).astype(np.float32)
    w[0, :4] = 1.0  # where the feeds put 12
    nodes = [helper.make_node("Mul", ["x", "w"], ["scaled"], name="scale"),
             helper.make_node("Exp", ["scaled"], ["e"], name="exp"),
             helper.make_node("Div", ["e", "k"], ["y"], name="shrink")]
    graph = helper.make_graph(nodes, "exp_overflow",
                              [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 64])],
                              [helper.make_tensor_value_info("y", TensorProto.FLOAT, [1, 64])],
                              [numpy_helper.from_array(w, "w"),
                               numpy_helper.from_array(np.array(1000.0, np.float32), "k")])
    onnx.save(helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)]), path)
    return path


def _feeds(seed: int) -> dict:
    x = np.random.default_rng(100 + seed).uniform(0.0, 6.0, size=(1, 64)).astype(np.float32)
    x[0, :4] = [11.5, 12.0, 12.5, 13.0]  # x * w reaches them where w is 1: exp 9.9e4 to 4.4e5
    return {"x": x}


def _plan(model, out, soc):
    from ascendpipe.backends.onnxruntime.convert import convert_model
    from ascendpipe.precision.settings import resolve

    convert_model(model, out, resolve({"soc_version": soc}))
    return json.loads((out / "precision_plan.json").read_text())["nodes"]


def test_the_plan_says_keep_dtype_changes_nothing_in_exp_on_ascend310_only(tmp_path):
    model = _exp_model(tmp_path / "m.onnx", 0)
    on_310 = _plan(model, tmp_path / "310", "Ascend310")
    assert on_310["exp"]["keepable"] is False
    assert "dynamic/exp.py L66-68" in on_310["exp"]["keep_changes_nothing"]
    assert on_310["shrink"]["keepable"] is True and "keep_changes_nothing" not in on_310["shrink"]
    on_310p = _plan(model, tmp_path / "310p", "Ascend310P3")
    assert on_310p["exp"]["keepable"] is True and "keep_changes_nothing" not in on_310p["exp"]


def test_pow_kept_on_ascend310_computes_what_its_fp16_kernel_computes(tmp_path):
    """The fact the rule rests on, on the emulation itself: the converted model with Pow kept gives the
    same bytes as without, on Ascend310; on Ascend310P3 keeping it changes its output."""
    import onnxruntime as ort

    from ascendpipe.backends.onnxruntime.convert import convert_model
    from ascendpipe.precision.settings import resolve

    nodes = [helper.make_node("Pow", ["x", "p"], ["y"], name="cube")]
    graph = helper.make_graph(nodes, "pow", [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 256])],
                              [helper.make_tensor_value_info("y", TensorProto.FLOAT, [1, 256])],
                              [numpy_helper.from_array(np.array(3.0, np.float32), "p")])
    model = tmp_path / "pow.onnx"
    onnx.save(helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)]), model)
    x = {"x": np.random.default_rng(0).uniform(0.1, 30.0, size=(1, 256)).astype(np.float32)}
    outs = {}
    for soc in ("Ascend310", "Ascend310P3"):
        for keep in ([], ["cube"]):
            path = convert_model(model, tmp_path / f"{soc}-{len(keep)}", resolve({"soc_version": soc, "keep_dtype": keep})).model_path
            outs[soc, bool(keep)] = ort.InferenceSession(str(path), providers=["CPUExecutionProvider"]).run(None, x)[0]
    assert np.array_equal(outs["Ascend310", True].astype(np.float32), outs["Ascend310", False].astype(np.float32))
    assert not np.array_equal(outs["Ascend310P3", True].astype(np.float32), outs["Ascend310P3", False].astype(np.float32))


@pytest.mark.parametrize("seed", [0, 1, 2])
def test_fix_says_no_keep_set_can_work_on_ascend310_and_restores_it_on_ascend310p3(tmp_path, seed):
    from ascendpipe.fix.run import fix_standalone

    model = _exp_model(tmp_path / "m.onnx", seed)
    np.savez(tmp_path / "x.npz", **_feeds(seed))
    report = fix_standalone(model, input_path=tmp_path / "x.npz", soc_version="Ascend310", output=tmp_path / "310")
    message = report.outcome.message
    assert not report.outcome.passed and len(report.outcome.attempts) == 1, message
    assert "no keep_dtype set can work on SoC Ascend310: 'exp' (Exp) computes in fp16 there" in message
    assert "dynamic/exp.py L66-68" in message and "--soc-version Ascend310P3" in message
    # the way out named, checked: on Ascend310P3 (saturation: exp stores 65504 for all four, so the output
    # loses their differences) a keep set restores the output to a strict cosine, and exp is in it
    other = fix_standalone(model, input_path=tmp_path / "x.npz", soc_version="Ascend310P3", min_cosine=0.99999,
                           output=tmp_path / "310p")
    assert other.outcome.passed and not other.outcome.attempts[0].result.passed, other.outcome.message
    assert "exp" in other.outcome.keep_dtype


def test_compare_notes_the_same_block_on_its_advice(tmp_path):
    from ascendpipe.backends.onnxruntime.convert import convert_model
    from ascendpipe.compare.runner import compare_dumps
    from ascendpipe.backends.compare_sources import dump
    from ascendpipe.precision.settings import resolve

    model = _exp_model(tmp_path / "m.onnx", 0)
    feeds = _feeds(0)
    converted = convert_model(model, tmp_path / "c", resolve({"soc_version": "Ascend310"}))
    plan = json.loads((tmp_path / "c" / "precision_plan.json").read_text())
    fused_map = json.loads((tmp_path / "c" / "fused_map.json").read_text())
    result = compare_dumps(dump(model, feeds, tmp_path / "g", fusions=False),
                           dump(converted.model_path, feeds, tmp_path / "t", fusions=True),
                           fused_map=fused_map, precision_plan=plan, target_settings={"soc_version": "Ascend310"})
    first = result["first_failure"]
    assert first["op_name"] == "exp" and first["restores"] is False
    assert "'exp' (Exp) computes in fp16 there whatever its input" in first["blocked"]
