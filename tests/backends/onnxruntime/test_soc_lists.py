"""The device's per-SoC mixed-precision lists in the emulation, with real values: what a model computes
under allow_mix_precision on each SoC, and the remedies (keep_dtype OpType::, modify_mixlist,
customize_dtypes) as ATC matches them."""

from __future__ import annotations

import json

import numpy as np
import pytest
from onnx import TensorProto, helper, numpy_helper

from ascendpipe.errors import UserError
from tests.backends.onnxruntime.conftest import r16, run


@pytest.fixture(autouse=True)
def no_cann(monkeypatch):
    from ascendpipe import versions

    for var in ("ASCEND_OPP_PATH", "ASCEND_HOME_PATH", "ASCEND_TOOLKIT_HOME"):
        monkeypatch.delenv(var, raising=False)
    monkeypatch.setattr(versions, "OPS_INFO_HOMES", ())


def conv_then(path, tail: str, seed: int, opset: int = 13, scale: float = 20.0):
    """x[1,3,8,8] -> Conv (weights of ``seed``) -> tail: 'pow' (x^2), 'rsum' (ReduceSum over H,W, constant axes),
    'rsum_runtime' (the axes a graph input), 'rmean' (ReduceMean over H,W)."""
    rng = np.random.default_rng(seed)
    w = rng.standard_normal((4, 3, 3, 3)).astype(np.float32) * scale
    inits = [numpy_helper.from_array(np.abs(w) if tail.startswith("rsum") else w, "W")]
    nodes = [helper.make_node("Conv", ["x", "W"], ["c"], name="conv", pads=[1, 1, 1, 1])]
    inputs = [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 3, 8, 8])]
    shape = [1, 4]
    if tail == "pow":
        inits.append(numpy_helper.from_array(np.array(2.0, np.float32), "two"))
        nodes.append(helper.make_node("Pow", ["c", "two"], ["y"], name="pow"))
        shape = [1, 4, 8, 8]
    elif tail in ("rsum", "rsum_runtime"):
        if tail == "rsum":
            inits.append(numpy_helper.from_array(np.array([2, 3], np.int64), "axes"))
        else:
            inputs.append(helper.make_tensor_value_info("axes", TensorProto.INT64, [2]))
        nodes.append(helper.make_node("ReduceSum", ["c", "axes"], ["y"], name="rsum", keepdims=0))
    elif tail == "rmean":
        nodes.append(helper.make_node("ReduceMean", ["c"], ["y"], name="rmean", axes=[2, 3], keepdims=0))
    graph = helper.make_graph(nodes, "g", inputs, [helper.make_tensor_value_info("y", TensorProto.FLOAT, shape)], inits)
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", opset)])
    model.ir_version = 8
    import onnx

    onnx.save(model, str(path))
    x = rng.standard_normal((1, 3, 8, 8)).astype(np.float32)
    return path, np.abs(x) if tail.startswith("rsum") else x


def conv16(x, w):
    """The cube's result: fp16 inputs, fp32 accumulation, one fp16 rounding (3x3, pad 1)."""
    x, w = r16(x).astype(np.float64), r16(w).astype(np.float64)
    padded = np.pad(x, ((0, 0), (0, 0), (1, 1), (1, 1)))
    out = np.zeros((1, w.shape[0], 8, 8))
    for i in range(8):
        for j in range(8):
            out[0, :, i, j] = np.tensordot(w, padded[0, :, i:i + 3, j:j + 3], axes=([1, 2, 3], [0, 1, 2]))
    return r16(out.astype(np.float32))


def weights(model):
    import onnx

    return numpy_helper.to_array(onnx.load(str(model)).graph.initializer[0])


@pytest.mark.parametrize("seed", [0, 1, 2])
def test_conv_feeding_pow_overflows_on_310p_where_pow_is_gray(tmp_path, convert, seed):
    model, x = conv_then(tmp_path / "m.onnx", "pow", seed)
    c = conv16(x, weights(model))
    assert np.abs(c).max() ** 2 > 65504  # the square leaves fp16's range
    on_310p = convert(model, precision_mode="allow_mix_precision", soc_version="Ascend310P3")
    on_910b = convert(model, precision_mode="allow_mix_precision", soc_version="Ascend910B1")
    assert on_310p.plan["pow"].dtype == "float16" and "gray (Pow)" in on_310p.plan["pow"].reason
    assert on_910b.plan["pow"].dtype == "float32" and "aic-ascend910b-ops-info.ini:7697" in on_910b.plan["pow"].reason
    y310p = run(on_310p.model_path, {"x": x})[0]
    y910b = run(on_910b.model_path, {"x": x})[0]
    assert y310p.max() == 65504.0  # saturation, the only mode of Atlas inference products
    np.testing.assert_allclose(y910b, c.astype(np.float64) ** 2, rtol=1e-6)  # fp32 Pow of the fp16 conv result
    assert y910b.max() > 65504


def test_reduce_sum_with_constant_axes_is_reduce_sum_d_gray_everywhere(tmp_path, convert):
    """ONNX ReduceSum with constant axes runs as ReduceSumD (ConstToAttrReduceSumFusion, before the op
    judge), gray on every SoC; with runtime axes it stays ReduceSum, black on 910B."""
    model, x = conv_then(tmp_path / "c.onnx", "rsum", 0, scale=80.0)
    runtime, _ = conv_then(tmp_path / "r.onnx", "rsum_runtime", 0, scale=80.0)
    axes = np.array([2, 3], np.int64)
    for soc in ("Ascend310P3", "Ascend910B1"):
        const = convert(model, precision_mode="allow_mix_precision", soc_version=soc)
        assert const.plan["rsum"].dtype == "float16" and "gray (ReduceSumD)" in const.plan["rsum"].reason
    on_910b = convert(runtime, precision_mode="allow_mix_precision", soc_version="Ascend910B1")
    on_310p = convert(runtime, precision_mode="allow_mix_precision", soc_version="Ascend310P3")
    assert on_910b.plan["rsum"].dtype == "float32" and "black list: ReduceSum" in on_910b.plan["rsum"].reason
    assert on_310p.plan["rsum"].dtype == "float16"
    c = conv16(x, weights(model))
    exact = c.astype(np.float64).sum(axis=(2, 3))
    assert np.abs(exact).max() > 65504
    np.testing.assert_allclose(run(on_910b.model_path, {"x": x, "axes": axes})[0], exact, rtol=1e-5)
    assert np.abs(run(on_310p.model_path, {"x": x, "axes": axes})[0]).max() == 65504.0


def test_reduce_mean_d_is_black_on_310_and_gray_on_310p(tmp_path, convert):
    model, _ = conv_then(tmp_path / "m.onnx", "rmean", 0)
    for soc, dtype in (("Ascend310", "float32"), ("Ascend310P3", "float16"), ("Ascend910B1", "float32"),
                       (None, "float16")):
        result = convert(model, precision_mode="allow_mix_precision", **({"soc_version": soc} if soc else {}))
        assert result.plan["rmean"].dtype == dtype, soc
        plan = json.loads((result.out_dir / "precision_plan.json").read_text())
        assert plan["nodes"]["rmean"]["ge_type"] == "ReduceMeanD"
        assert plan["op_lists"]["source"] == "canndev-2022"


def softmax_log_model(path, seed: int):
    rng = np.random.default_rng(seed)
    w = (rng.standard_normal((16, 10)) * 2.5).astype(np.float32)
    nodes = [helper.make_node("MatMul", ["x", "W"], ["z"], name="mm"),
             helper.make_node("Softmax", ["z"], ["p"], name="softmax", axis=-1),
             helper.make_node("Log", ["p"], ["y"], name="log")]
    graph = helper.make_graph(nodes, "g", [helper.make_tensor_value_info("x", TensorProto.FLOAT, [4, 16])],
                              [helper.make_tensor_value_info("y", TensorProto.FLOAT, [4, 10])],
                              [numpy_helper.from_array(w, "W")])
    import onnx

    onnx.save(helper.make_model(graph, opset_imports=[helper.make_opsetid("", 13)]), str(path))
    return path, rng.standard_normal((4, 16)).astype(np.float32)


@pytest.mark.parametrize("seed", [0, 3, 7])
def test_softmax_probabilities_flush_to_zero_before_a_log(tmp_path, convert, seed):
    """SoftmaxV2 is gray on every SoC: after a white MatMul it writes fp16, where probabilities below
    2^-24 are 0, and the Log of them is -inf (saturated to -65504 on 310P), whatever Log's list."""
    model, x = softmax_log_model(tmp_path / "m.onnx", seed)
    z = r16(r16(x) @ r16(weights(model)))
    p = np.exp(z - z.max(-1, keepdims=True)) / np.exp(z - z.max(-1, keepdims=True)).sum(-1, keepdims=True)
    assert p.min() < 2.0 ** -25 and np.log(p).min() > -1000  # finite in fp32, 0 in fp16
    on_310p = convert(model, precision_mode="allow_mix_precision", soc_version="Ascend310P3")
    on_910b = convert(model, precision_mode="allow_mix_precision", soc_version="Ascend910B1")
    assert on_910b.plan["softmax"].dtype == on_310p.plan["softmax"].dtype == "float16"
    assert on_910b.plan["log"].dtype == "float32" and on_310p.plan["log"].dtype == "float16"
    assert run(on_310p.model_path, {"x": x})[0].min() == -65504.0
    assert run(on_910b.model_path, {"x": x})[0].min() == -np.inf


def test_keep_dtype_optype_matches_the_parse_time_type(tmp_path, convert, capsys):
    model, _ = conv_then(tmp_path / "m.onnx", "rmean", 0)
    kept = convert(model, precision_mode="allow_mix_precision", soc_version="Ascend310P3",
                   keep_dtype=["OpType::ReduceMean"])
    assert kept.plan["rmean"].dtype == "float32" and "OpType::ReduceMean" in kept.plan["rmean"].reason
    late = convert(model, precision_mode="allow_mix_precision", soc_version="Ascend310P3",
                   keep_dtype=["OpType::ReduceMeanD"])
    assert late.plan["rmean"].dtype == "float16"  # matched before const2attr: nothing is called ReduceMeanD yet
    assert any("write OpType::ReduceMean" in w for w in late.warnings)
    with pytest.raises(UserError, match="PascalCase"):
        convert(model, keep_dtype=["OpType::reducemean"])
    onnx_name = convert(model, precision_mode="allow_mix_precision", soc_version="Ascend310P3",
                        keep_dtype=["OpType::Conv"])
    assert onnx_name.plan["conv"].dtype == "float32"
    assert (onnx_name.out_dir / "keep_dtype.cfg").read_text() == "OpType::Conv2D\n"  # what atc needs


def test_mixlist_names_ge_kernel_types_and_warns_on_a_parse_time_name(tmp_path, convert):
    model, _ = conv_then(tmp_path / "m.onnx", "rmean", 0)
    black = convert(model, precision_mode="allow_mix_precision", soc_version="Ascend310P3",
                    modify_mixlist={"black-list": {"to-add": ["ReduceMeanD"]}})
    assert black.plan["rmean"].dtype == "float32" and "modify_mixlist" in black.plan["rmean"].reason
    wrong = convert(model, precision_mode="allow_mix_precision", soc_version="Ascend310P3",
                    modify_mixlist={"black-list": {"to-add": ["ReduceMean"]}})
    assert wrong.plan["rmean"].dtype == "float16"
    assert any("as ReduceMeanD" in w for w in wrong.warnings)
    with pytest.raises(UserError, match="combination atc refuses"):
        convert(model, precision_mode="allow_mix_precision",
                modify_mixlist={"black-list": {"to-add": ["Pow"]}, "white-list": {"to-add": ["Pow"]}})


def test_customize_dtypes_computes_the_named_ops_in_the_dtype_given(tmp_path, convert):
    model, x = conv_then(tmp_path / "m.onnx", "pow", 0)
    (tmp_path / "c.cfg").write_text("pow::InputDtype:float,,OutputDtype:float\n")
    fixed = convert(model, precision_mode="force_fp16", soc_version="Ascend310P3",
                    customize_dtypes=str(tmp_path / "c.cfg"), keep_dtype=["conv"])
    assert fixed.plan["pow"].dtype == "float32" and fixed.plan["pow"].reason.startswith("customize_dtypes: name 'pow'")
    assert np.isfinite(run(fixed.model_path, {"x": x})[0]).all() and run(fixed.model_path, {"x": x})[0].max() > 65504
    typed = convert(model, precision_mode="force_fp16", soc_version="Ascend310P3",
                    customize_dtypes=["OpType::Pow:InputDtype:float16,OutputDtype:float16"])
    assert typed.plan["pow"].dtype == "float16"
    written = (typed.out_dir / "customize_dtypes.cfg").read_text()
    assert written == "OpType::Pow:InputDtype:float16,OutputDtype:float16\n"
    assert "--customize_dtypes=./customize_dtypes.cfg" in typed.atc_argv
    record = json.loads((typed.out_dir / "convert.json").read_text())
    assert record["customize_dtypes"] == ["OpType::Pow:InputDtype:float16,OutputDtype:float16"]
    with pytest.raises(UserError, match="float dtypes only"):
        convert(model, customize_dtypes=["pow::OutputDtype:int8"])
    with pytest.raises(UserError, match="cube unit"):
        convert(model, soc_version="Ascend310P3", customize_dtypes=["conv::InputDtype:float,float"])
    with pytest.raises(UserError, match="bfloat16"):
        convert(model, soc_version="Ascend310P3", customize_dtypes=["pow::InputDtype:bfloat16"])
    with pytest.raises(UserError, match=r"names op 'powr' \(did you mean 'pow'\?\)"):
        convert(model, customize_dtypes=["powr::InputDtype:float"])


def test_a_switched_pass_the_emulation_does_not_model_is_said(tmp_path, convert):
    model, _ = conv_then(tmp_path / "m.onnx", "pow", 0)
    result = convert(model, fusion_switch={"GroupNormFusionPass": "off"})
    assert any("GroupNormFusionPass" in w and "does not model" in w for w in result.warnings)
    plan = json.loads((result.out_dir / "precision_plan.json").read_text())
    assert "group_norm_fusion_pass.cc:233" in plan["fusion_switch_not_modelled"]["GroupNormFusionPass"]["source"]
    assert json.loads((result.out_dir / "fusion_switch.cfg").read_text())["Switch"]["GraphFusion"] == {
        "GroupNormFusionPass": "off"}


def test_cli_customize_dtypes_flag(tmp_path, capsys):
    import argparse

    from ascendpipe.cli import convert as cli

    model, _ = conv_then(tmp_path / "m.onnx", "pow", 0)
    (tmp_path / "c.cfg").write_text("OpType::Pow:InputDtype:float,OutputDtype:float\n")
    parser = argparse.ArgumentParser()
    cli.add_arguments(parser)
    args = parser.parse_args(["--model", str(model), "--output", str(tmp_path / "o"), "--customize_dtypes",
                              str(tmp_path / "c.cfg"), "--soc-version", "Ascend310P3", "--json"])
    assert cli.main(args) == 0
    out = json.loads(capsys.readouterr().out)
    assert out["ops"] == {"float16": 1, "float32": 1, "other": 0} and "customize_dtypes" in out["remedy_files"]
    assert "--customize_dtypes=./customize_dtypes.cfg" in out["atc_argv"]
