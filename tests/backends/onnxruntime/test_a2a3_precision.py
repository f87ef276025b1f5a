"""The precision policies per SoC class (docs/emulation.md, "SoC classes and modes"), bit for bit.

A Conv -> Relu -> Flatten -> MatMul model is converted in every mode on Ascend910B1 (Atlas A2) and
on Ascend310P3; the expected output is built op by op apart from the emulation: each op run alone in
onnxruntime on inputs rounded as the spec says (HF32 and bf16 by the bit-pattern reference of
test_formats, fp16 by numpy), its output rounded likewise."""

from __future__ import annotations

import json

import numpy as np
import pytest

from ascendpipe.backends.onnxruntime.convert import convert_model
from ascendpipe.errors import UserError
from ascendpipe.precision.settings import resolve
from tests.backends.onnxruntime.test_formats import mask_round

A2, P310 = "Ascend910B1", "Ascend310P3"


def _model(path):
    import onnx
    from onnx import TensorProto, helper, numpy_helper

    rng = np.random.default_rng(7)
    w = numpy_helper.from_array(rng.standard_normal((4, 3, 3, 3)).astype(np.float32) / 3, "w")
    b = numpy_helper.from_array(rng.standard_normal(4).astype(np.float32), "b")
    w2 = numpy_helper.from_array(rng.standard_normal((256, 5)).astype(np.float32) / 9, "w2")
    nodes = [helper.make_node("Conv", ["x", "w", "b"], ["c"], name="conv", pads=[1, 1, 1, 1]),
             helper.make_node("Relu", ["c"], ["r"], name="relu"),
             helper.make_node("Flatten", ["r"], ["f"], name="flat"),
             helper.make_node("MatMul", ["f", "w2"], ["y"], name="mm")]
    graph = helper.make_graph(nodes, "g", [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 3, 8, 8])],
                              [helper.make_tensor_value_info("y", TensorProto.FLOAT, [1, 5])], [w, b, w2])
    onnx.save(helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)]), str(path))
    return {"w": numpy_helper.to_array(w), "b": numpy_helper.to_array(b), "w2": numpy_helper.to_array(w2)}


def _session(model):
    """Without onnxruntime's graph optimisations (its NCHWc Conv sums in another order): the
    comparison is about the rounding points, bit for bit, not onnxruntime's kernels; nor prepacked weights."""
    import onnxruntime as ort

    options = ort.SessionOptions()
    options.graph_optimization_level = ort.GraphOptimizationLevel.ORT_DISABLE_ALL
    options.add_session_config_entry("session.disable_prepacking", "1")  # a prepacked weight: another kernel
    return ort.InferenceSession(model, options, providers=["CPUExecutionProvider"])


def _one_op(op_type, inputs, **attrs):
    from onnx import TensorProto, helper

    names = [f"i{k}" for k in range(len(inputs))]
    graph = helper.make_graph([helper.make_node(op_type, names, ["o"], **attrs)], "g",
                              [helper.make_tensor_value_info(n, TensorProto.FLOAT, list(v.shape)) for n, v in zip(names, inputs)],
                              [helper.make_tensor_value_info("o", TensorProto.FLOAT, None)])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    return _session(model.SerializeToString()).run(None, dict(zip(names, inputs)))[0]


def _r(x, fmt):
    if fmt is None:
        return x
    if fmt == "float16":
        return x.astype(np.float16).astype(np.float32)
    return mask_round(x, {"bfloat16": 7, "hf32": 11}[fmt])


def _expected(x, weights, conv, mm, conv_out=None, mm_out=None):
    """conv/mm: what each cube op reads (None: exact fp32); *_out: the format it writes (None: fp32).
    Relu and Flatten copy values: they keep whatever format they read."""
    bias = weights["b"] if conv == "hf32" else _r(weights["b"], conv)  # HF32: the bias is added in fp32
    c = _r(_one_op("Conv", [_r(x, conv), _r(weights["w"], conv), bias], pads=[1, 1, 1, 1]), conv_out)
    f = np.maximum(c, 0).reshape(1, 256)
    return _r(_one_op("MatMul", [_r(f, mm), _r(weights["w2"], mm)]), mm_out)


def _run(path, feeds):
    return _session(str(path)).run(None, feeds)[0]


@pytest.fixture(scope="module")
def model(tmp_path_factory):
    path = tmp_path_factory.mktemp("a2") / "m.onnx"
    weights = _model(path)
    x = np.random.default_rng(3).standard_normal((1, 3, 8, 8)).astype(np.float32) * 3
    return path, weights, x


F16, BF16, HF32 = "float16", "bfloat16", "hf32"
CASES = {  # params -> (conv reads, matmul reads, conv writes, matmul writes): section 7's table on Atlas A2
    "force_fp16": ({"precision_mode": "force_fp16"}, F16, F16, F16, F16),
    "v2 fp16": ({"precision_mode_v2": "fp16"}, F16, F16, F16, F16),
    "origin: conv HF32, matmul fp32 (allow_hf32's default)": ({"precision_mode": "must_keep_origin_dtype"}, HF32, None, None, None),
    "v2 origin": ({"precision_mode_v2": "origin"}, HF32, None, None, None),
    "origin, allow_hf32 true": ({"precision_mode_v2": "origin", "allow_hf32": True}, HF32, HF32, None, None),
    "origin, allow_hf32 conv off": ({"precision_mode_v2": "origin", "allow_hf32": {"conv": False}}, None, None, None, None),
    "allow_fp32_to_bf16: fp32 kept": ({"precision_mode": "allow_fp32_to_bf16"}, HF32, None, None, None),
    "mixed_bfloat16": ({"precision_mode_v2": "mixed_bfloat16"}, BF16, BF16, BF16, BF16),
    "allow_mix_precision_bf16": ({"precision_mode": "allow_mix_precision_bf16"}, BF16, BF16, BF16, BF16),
    "force_lowerprecision": ({"precision_mode": "force_lowerprecision"}, BF16, BF16, BF16, BF16),
    "force_fp32: fp16 in, fp32 out (our choice)": ({"precision_mode": "force_fp32"}, F16, F16, None, None),
    "allow_fp32_to_fp16": ({"precision_mode": "allow_fp32_to_fp16"}, F16, F16, F16, F16),
    "keep_dtype conv: HF32 in": ({"precision_mode": "force_fp16", "keep_dtype": ["conv"]}, HF32, F16, None, F16),
}


@pytest.mark.parametrize("case", list(CASES))
def test_atlas_a2_computes_each_mode_as_the_spec_says(model, tmp_path, case):
    path, weights, x = model
    params, conv, mm, conv_out, mm_out = CASES[case]
    settings = resolve({**params, "soc_version": A2})
    result = convert_model(path, tmp_path / "c", settings)
    got = _run(result.model_path, {"x": x})
    want = _expected(x, weights, conv, mm, conv_out, mm_out)
    assert np.array_equal(got.view(np.uint32), want.view(np.uint32)), np.abs(got - want).max()
    record = json.loads((tmp_path / "c" / "convert.json").read_text())
    assert record["precision_mode"] == params.get("precision_mode") and record["precision_mode_v2"] == params.get("precision_mode_v2")
    plan = json.loads((tmp_path / "c" / "precision_plan.json").read_text())["nodes"]
    assert plan["conv"].get("reads") == (conv if conv in (BF16, HF32) else None)
    assert plan["conv"]["reads_fp16"] == (conv == F16)


def test_hf32_makes_a_difference_the_exact_fp32_run_does_not_have(model, tmp_path):
    path, weights, x = model
    hf32 = _run(convert_model(path, tmp_path / "a", resolve({"precision_mode_v2": "origin", "soc_version": A2})).model_path, {"x": x})
    exact = _run(convert_model(path, tmp_path / "b", resolve({"precision_mode_v2": "origin"})).model_path, {"x": x})
    assert not np.array_equal(hf32, exact) and np.allclose(hf32, exact, rtol=2e-3, atol=2e-3)


def test_310p_keeps_its_fp16_cube_and_warns_on_origin(model, tmp_path):
    path, weights, x = model
    kept = convert_model(path, tmp_path / "k", resolve({"keep_dtype": ["conv"], "soc_version": P310}))
    want = _expected(x, weights, F16, F16, None, F16)  # a kept conv reads fp16 on 310P: no fp32 cube input
    assert np.array_equal(_run(kept.model_path, {"x": x}), want)
    origin = convert_model(path, tmp_path / "o", resolve({"precision_mode_v2": "origin", "soc_version": P310}))
    assert np.array_equal(_run(origin.model_path, {"x": x}), _expected(x, weights, None, None))
    assert any("AI CPU" in w and "Ascend310P3" in w for w in origin.warnings)


@pytest.mark.parametrize("soc", ["Ascend310P3", "Ascend910A", "Ascend910ProB", "Ascend310"])
@pytest.mark.parametrize("params", [{"precision_mode": "allow_mix_precision_bf16"}, {"precision_mode_v2": "mixed_bfloat16"},
                                    {"precision_mode": "allow_fp32_to_bf16"}, {"precision_mode": "force_lowerprecision"}])
def test_bf16_modes_are_refused_where_atc_refuses_them(soc, params):
    with pytest.raises(UserError) as err:
        resolve({**params, "soc_version": soc})
    assert "Current soc not support dtype of BFloat16" in str(err.value) and soc in str(err.value)
    assert err.value.location.field in ("precision_mode", "precision_mode_v2")


@pytest.mark.parametrize("soc", ["Ascend910B1", "Ascend910_9391", "Ascend310B1", None])
def test_bf16_modes_are_accepted_where_the_soc_has_bf16(soc):
    assert resolve({"precision_mode_v2": "mixed_bfloat16", "soc_version": soc}).policy == "mixed_bf16"


@pytest.mark.parametrize("mode", ["mixed_hif8", "cube_hif8"])
def test_hif8_is_refused_outside_ascend_950_and_not_emulated_there(mode):
    with pytest.raises(UserError, match="only on Ascend 950"):
        resolve({"precision_mode_v2": mode, "soc_version": A2})
    with pytest.raises(UserError, match="not emulated"):
        resolve({"precision_mode_v2": mode, "soc_version": "Ascend950PR"})


def test_both_precision_options_at_once_are_refused():
    with pytest.raises(UserError, match="cannot be combined"):
        resolve({"precision_mode": "force_fp16", "precision_mode_v2": "fp16"})


def test_allow_hf32_forms_and_where_it_acts():
    assert resolve({"allow_hf32": "conv=false,matmul=true", "soc_version": A2}).effective_allow_hf32 == {
        "conv": False, "matmul": True}
    assert resolve({"soc_version": A2}).effective_allow_hf32 == {"conv": True, "matmul": False}
    assert resolve({"allow_hf32": True, "soc_version": P310}).effective_allow_hf32 == {"conv": False, "matmul": False}
    assert any("no effect" in w for w in resolve({"allow_hf32": True, "soc_version": P310}).warnings())
    with pytest.raises(UserError, match="true or false"):
        resolve({"allow_hf32": "maybe"})


def test_inf_nan_is_refused_where_the_device_has_only_saturation():
    with pytest.raises(UserError, match="supports only saturation"):
        resolve({"overflow_mode": "inf_nan", "soc_version": P310})
    assert resolve({"overflow_mode": "saturation", "soc_version": A2}).effective_overflow_mode == "saturation"


def _chain_model(path, op_types):
    import onnx
    from onnx import TensorProto, helper

    names = ["x"] + [f"t{i}" for i in range(len(op_types))]
    nodes = [helper.make_node(op, [names[i]], [names[i + 1]], name=f"op{i}") for i, op in enumerate(op_types)]
    graph = helper.make_graph(nodes, "g", [helper.make_tensor_value_info("x", TensorProto.FLOAT, [4])],
                              [helper.make_tensor_value_info(names[-1], TensorProto.FLOAT, [4])])
    onnx.save(helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)]), str(path))


@pytest.mark.parametrize("params,top", [({}, 65504.0), ({"precision_mode_v2": "origin"}, float(np.finfo(np.float32).max))])
def test_saturation_on_310p_turns_nan_into_0_and_inf_into_the_dtypes_max(tmp_path, params, top):
    # fp16 exp(12) gives 65504 and sqrt(-1) gives 0 (torch_npu INF_NAN_MODE_ENABLE's examples); in fp32
    # (origin) the same: exp(100) is float32's max
    _chain_model(tmp_path / "m.onnx", ["Exp"])
    out = convert_model(tmp_path / "m.onnx", tmp_path / "e", resolve({**params, "soc_version": P310}))
    got = _run(out.model_path, {"x": np.float32([12, 100, -1, 0])})
    assert got[1] == np.float32(top) and got[3] == 1.0
    if not params:
        assert got[0] == 65504.0
    _chain_model(tmp_path / "s.onnx", ["Sqrt"])
    out = convert_model(tmp_path / "s.onnx", tmp_path / "s", resolve({**params, "soc_version": P310}))
    got = _run(out.model_path, {"x": np.float32([-1, 4, np.nan, 1])})
    assert got.tolist() == [0.0, 2.0, 0.0, 1.0]
    inf_nan = convert_model(tmp_path / "s.onnx", tmp_path / "i", resolve({**params, "soc_version": A2}))
    assert np.isnan(_run(inf_nan.model_path, {"x": np.float32([-1, 4, 1, 1])})[0])


def test_bf16_keeps_the_range_fp16_loses(tmp_path):
    # the reid story in one op: a sum of squares past 65504 is inf in fp16, finite (and coarse) in bf16
    _chain_model(tmp_path / "m.onnx", ["Exp"])
    feeds = {"x": np.float32([12, 1, 2, 3])}
    fp16 = _run(convert_model(tmp_path / "m.onnx", tmp_path / "a", resolve({"soc_version": A2})).model_path, feeds)
    bf16 = _run(convert_model(tmp_path / "m.onnx", tmp_path / "b", resolve({"soc_version": A2,
                "precision_mode": "force_lowerprecision"})).model_path, feeds)
    assert np.isinf(fp16[0]) and np.isfinite(bf16[0])
    assert np.array_equal(bf16, mask_round(np.exp(mask_round(feeds["x"], 7)).astype(np.float32), 7))
