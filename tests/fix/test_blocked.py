"""Issue 49 (item 3): fix proves that no keep set can work before searching, on every architecture, and
names the SoC or mode that works; where one exists, fix restores the model there.

A diffusion VAE decoder, a UNet and a YOLOv8-style detector (tests/fix/conv_models.py) whose stream lies
beyond 65504 where Convs read it. Every claim is checked on the emulation itself: the way out named is
converted and run on onnxruntime, its outputs held against the fp32 model's with numpy's cosine."""

from __future__ import annotations

import io
import json
from contextlib import redirect_stdout

import numpy as np
import pytest

pytest.importorskip("torch", reason="the architectures are exported from torch modules")

from tests.fix import conv_models as cm  # noqa: E402


def _cosine(model, feeds, out, **params) -> float:
    from tests.fix.emulated import cosine

    return cosine(model, feeds, out, params)


@pytest.fixture(scope="module")
def models(tmp_path_factory):
    root = tmp_path_factory.mktemp("conv")
    built = {}
    for name in cm.ARCHS:
        model = cm.build(name, root / f"{name}.onnx", scaled=True)
        np.savez(root / f"{name}.npz", **cm.inputs(name))
        built[name] = (model, root / f"{name}.npz")
    return built


@pytest.mark.parametrize("name", cm.ARCHS)
def test_no_keep_set_can_work_is_said_after_one_evaluation_with_the_ways_out(models, tmp_path, name):
    from ascendpipe.fix.run import fix_standalone

    model, x = models[name]
    feeds = cm.inputs(name)
    report = fix_standalone(model, input_path=x, output=tmp_path / "default")
    message = report.outcome.message
    assert not report.outcome.passed and len(report.outcome.attempts) == 1, message
    assert "no keep_dtype set can work on the default SoC" in message and "is a cube op" in message
    assert "--soc-version Ascend910B1" in message and "change the model" in message
    # the claim, checked: on an Atlas A2 SoC a keep set restores it, and fix finds it
    a2 = fix_standalone(model, input_path=x, soc_version="Ascend910B1", output=tmp_path / "a2")
    assert a2.outcome.passed, a2.outcome.message
    assert _cosine(model, feeds, tmp_path / "a2-check", precision_mode="force_fp16", soc_version="Ascend910B1",
                   keep_dtype=a2.keep_dtype, fusion_switch=a2.fusion_switch) >= 0.99
    # on the Orange Pi's SoC (saturation, bf16, a cube reading fp16): the bf16 mode is named, and it works
    board = fix_standalone(model, input_path=x, soc_version="Ascend310B1", output=tmp_path / "310b")
    assert len(board.outcome.attempts) == 1 and "SoC Ascend310B1" in board.outcome.message
    assert "--precision-mode-v2 mixed_bfloat16" in board.outcome.message
    assert _cosine(model, feeds, tmp_path / "bf16", precision_mode_v2="mixed_bfloat16",
                   soc_version="Ascend310B1") >= 0.99


def test_a_cube_op_reading_a_graph_input_beyond_fp16_is_blocked(tmp_path):
    """The input itself past 65504, read by a MatMul: no keep set can help on the default SoC (the cube
    reads the fed value as fp16); on Ascend910B1 keeping the MatMul does."""
    from onnx import TensorProto, helper, numpy_helper

    import onnx

    from ascendpipe.fix.run import fix_standalone

    w = numpy_helper.from_array(np.random.default_rng(0).standard_normal((8, 4)).astype(np.float32) * 1e-3, "w")
    graph = helper.make_graph([helper.make_node("MatMul", ["x", "w"], ["y"], name="head"),
                               helper.make_node("Relu", ["y"], ["out"], name="act")], "g",
                              [helper.make_tensor_value_info("x", TensorProto.FLOAT, [2, 8])],
                              [helper.make_tensor_value_info("out", TensorProto.FLOAT, [2, 4])], [w])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    model.ir_version = 8
    onnx.save(model, str(tmp_path / "m.onnx"))
    np.save(tmp_path / "x.npy", np.random.default_rng(1).uniform(1e5, 2e5, (2, 8)).astype(np.float32))
    refused = fix_standalone(tmp_path / "m.onnx", input_path=tmp_path / "x.npy")
    assert len(refused.outcome.attempts) == 1 and "'head' (MatMul) is a cube op" in refused.outcome.message
    assert "from 'x'" in refused.outcome.message
    fixed = fix_standalone(tmp_path / "m.onnx", input_path=tmp_path / "x.npy", soc_version="Ascend910B1")
    assert fixed.outcome.passed and "head" in fixed.keep_dtype


def test_cli_takes_precision_mode_v2_as_convert_does(models, tmp_path):
    from ascendpipe.cli.main import main

    model, x = models["vae"]
    out = io.StringIO()
    with redirect_stdout(out):
        code = main(["fix", "--golden", str(model), "--input", str(x), "--soc-version", "Ascend310B1",
                     "--precision-mode-v2", "mixed_bfloat16", "--json"])
    data = json.loads(out.getvalue())
    assert code == 0 and data["passed"] and data["attempts"] == 1 and data["precision_mode_v2"] == "mixed_bfloat16"
    assert data["precision_mode"] is None and "already holds" in data["message"]
    with redirect_stdout(io.StringIO()):
        code = main(["fix", "--golden", str(model), "--input", str(x), "--precision-mode-v2", "fp16", "--json"])
    assert code == 1  # fp16 everywhere: the same refusal as force_fp16
    assert main(["fix", "--golden", str(model), "--precision-mode", "force_fp16", "--precision-mode-v2", "fp16"]) == 2


def test_a_cube_ops_own_weight_beyond_fp16_is_blocked_and_a_folded_one_is_not(tmp_path):
    """A MatMul whose weight itself exceeds 65504: on the default SoC a kept MatMul reads it as fp16 (inf),
    so fix says so at once (checked: keeping it still fails); on Ascend910B1 keeping it works. A weight
    past 65504 only once ATC folds a BatchNorm into the Conv is not this case (switching the fold off
    restores it: tests/fix/test_standalone.py's folded BN)."""
    from onnx import TensorProto, helper, numpy_helper

    import onnx

    from ascendpipe.fix.run import fix_standalone

    rng = np.random.default_rng(0)
    w = numpy_helper.from_array((rng.standard_normal((8, 4)) * 1e5).astype(np.float32), "w")
    scale = numpy_helper.from_array(np.float32(1e-5), "scale")
    graph = helper.make_graph([helper.make_node("MatMul", ["x", "w"], ["y"], name="proj"),
                               helper.make_node("Mul", ["y", "scale"], ["out"], name="rescale")], "g",
                              [helper.make_tensor_value_info("x", TensorProto.FLOAT, [2, 8])],
                              [helper.make_tensor_value_info("out", TensorProto.FLOAT, [2, 4])], [w, scale])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    model.ir_version = 8
    onnx.save(model, str(tmp_path / "m.onnx"))
    feeds = {"x": rng.standard_normal((2, 8)).astype(np.float32)}
    np.save(tmp_path / "x.npy", feeds["x"])
    refused = fix_standalone(tmp_path / "m.onnx", input_path=tmp_path / "x.npy")
    assert len(refused.outcome.attempts) == 1 and "its weight 'w' reaches" in refused.outcome.message
    assert _cosine(tmp_path / "m.onnx", feeds, tmp_path / "kept", precision_mode="force_fp16",
                   keep_dtype=["proj", "rescale"]) < 0.99  # the claim, checked
    fixed = fix_standalone(tmp_path / "m.onnx", input_path=tmp_path / "x.npy", soc_version="Ascend910B1")
    assert fixed.outcome.passed and "proj" in fixed.keep_dtype


def test_a_golden_only_tensor_is_a_link_in_the_reach_walk():
    """A residual Add the target fused away has only a golden row: it says nothing of the target, so the
    divergence before it still reaches the output (compare.mechanism.reaching)."""
    from ascendpipe.compare.mechanism import reaching

    producers = {"conv": [], "add": ["conv"], "head": ["add"]}
    rows = [{"op_name": "conv", "side": "both", "failed": True},
            {"op_name": "add", "side": "golden_only", "failed": False},
            {"op_name": "head", "side": "both", "failed": True, "is_output": True}]
    reach, outputs_pass = reaching(rows, producers)
    assert reach == {0, 2} and outputs_pass is False
    rows[1]["side"] = "both"  # a compared tensor that passes: there the divergence stops
    assert reaching(rows, producers)[0] == {2}
