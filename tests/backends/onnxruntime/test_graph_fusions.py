"""ATC's ONNX graph fusions in the emulation: which chains fuse (each check of the pass's code), how the
fused op is named and mapped, what it inherits, and that it cannot be switched off."""

import json

import numpy as np
import pytest

from ascendpipe.errors import UserError
from tests.backends.onnxruntime.conftest import run
from tests.backends.onnxruntime.graph_models import gelu_model, layer_norm_model

LN_MEMBERS = ["/ln/Add", "/ln/Add_1", "/ln/Div", "/ln/Mul", "/ln/Pow", "/ln/ReduceMean", "/ln/ReduceMean_1",
              "/ln/Sqrt", "/ln/Sub"]


def _plan(result):
    return json.loads((result.out_dir / "precision_plan.json").read_text())


def _fused(result):
    return json.loads((result.out_dir / "fused_map.json").read_text())


def _not_fused(result):
    return {entry["pass"]: entry["why"] for entry in json.loads((result.out_dir / "convert.json").read_text())
            ["fusion"]["not_fused"]}


@pytest.mark.parametrize("soc", [None, "Ascend310P3", "Ascend910B1"])
def test_decomposed_layer_norm_is_one_layernorm_op(tmp_path, convert, soc):
    result = convert(layer_norm_model(tmp_path / "m.onnx"), **({"soc_version": soc} if soc else {}))
    fused = _fused(result)
    assert fused["fused"] == {"/ln/Add_1/LayerNorm": LN_MEMBERS}
    assert fused["rules"] == {"/ln/Add_1/LayerNorm": "LayerNormONNXFusionPass"}
    entry = _plan(result)["nodes"]["/ln/Add_1/LayerNorm"]
    assert entry["ge_type"] == "LayerNorm" and entry["kernel"]["emulated"] == "step by step"
    assert _plan(result)["graph_fusion"]["/ln/Add_1/LayerNorm"]["case"] == "affine"
    assert set(_plan(result)["nodes"]) == {"/pre/Relu", "/ln/Add_1/LayerNorm"}


def test_the_six_cases_and_their_names(tmp_path, convert):
    no_affine = convert(layer_norm_model(tmp_path / "a.onnx", affine=False))
    assert list(_fused(no_affine)["fused"]) == ["/ln/Div/Mul/Add/LayerNorm"]  # the Add the pass creates (L353-404)
    cast = convert(layer_norm_model(tmp_path / "b.onnx", cast=True))
    assert "/ln/Cast" in _fused(cast)["fused"]["/ln/Add_1/LayerNorm"]
    assert _plan(cast)["graph_fusion"]["/ln/Add_1/LayerNorm"]["case"] == "castaffine"


@pytest.mark.parametrize("knob, why", [
    ({"eps": 0.5}, "epsilon 0.5 > 0.1"),
    ({"exponent": 3.0}, "exponent is 3.0, not 2"),
    ({"keepdims": 0, "shape": (1, 16, 16), "affine": False}, "keepdims is 0"),
    ({"extra_sub_reader": True}, "'/ln/Sub' feeds 3 consumer(s), the pass needs 2"),
    ({"gamma_shape": (1, 1, 64)}, "constant has shape [1, 1, 64]"),
    ({"gamma_first": True}, "gamma must be Mul's input 1"),
    ({"axes": (1,), "shape": (1, 16, 64), "affine": False}, "not the trailing axes"),
    ({"square_by_mul": True}, "squares with Mul"),
])
def test_each_check_of_the_pass_leaves_the_chain_unfused(tmp_path, convert, knob, why):
    result = convert(layer_norm_model(tmp_path / "m.onnx", **knob))
    assert not [name for name in _fused(result)["fused"] if name.endswith("/LayerNorm")]
    assert why in _not_fused(result)["LayerNormONNXFusionPass"]
    assert "/ln/Pow" in _plan(result)["nodes"]  # the chain keeps its ops and their fp16 steps


def test_two_subs_are_the_mul_pass(tmp_path, convert):
    result = convert(layer_norm_model(tmp_path / "m.onnx", two_subs=True, gamma_first=True))
    assert _fused(result)["rules"] == {"/ln/Add_1/LayerNorm": "LayerNormONNXMULFusionPass"}
    assert "/ln/Sub_1" in _fused(result)["fused"]["/ln/Add_1/LayerNorm"]
    wired = convert(layer_norm_model(tmp_path / "n.onnx", two_subs=True))  # Mul(div, gamma): the pass wires input 0
    assert not [name for name in _fused(wired)["fused"] if name.endswith("/LayerNorm")]
    assert "gamma must be Mul's input 0" in _not_fused(wired)["LayerNormONNXMULFusionPass"]


def test_fused_op_inherits_keep_dtype_from_any_matched_node(tmp_path, convert):
    model = layer_norm_model(tmp_path / "m.onnx")
    for keep in (["/ln/Pow"], ["/ln/ReduceMean"], ["OpType::Pow"], ["/pre/Relu"]):  # the last: the matched input node
        entry = convert(model, keep_dtype=keep, soc_version="Ascend310P3").plan["/ln/Add_1/LayerNorm"]
        assert entry.dtype == "float32" and entry.reason.startswith("keep_dtype"), keep
    assert convert(model, soc_version="Ascend310P3").plan["/ln/Add_1/LayerNorm"].dtype == "float16"


def test_onnx_passes_switch_off_as_ge_honours_a_switch_on_any_registered_pass(tmp_path, convert):
    """GE's FusionConfigParser::GetFusionSwitchByName (hicann/ge ffdcbc9f, fusion_config_parser.cc L196-232): a
    pass named in the switch file, else its section's ALL, unless ForbiddenClosedPass or registered forbidden-closed;
    canndev registers LayerNormONNXFusionPass plainly (layer_norm_onnx_fusion_pass.cc L804), as GroupNormFusionPass,
    which Huawei's 310P3 recipes switch off on hardware. Off, the chain runs op by op, each op rounded."""
    model = layer_norm_model(tmp_path / "m.onnx")
    fused = "/ln/Add_1/LayerNorm"
    assert fused in _fused(convert(model, soc_version="Ascend310P3"))["fused"]
    for switch in ({"LayerNormONNXFusionPass": "off"}, {"ALL": "off"}):
        result = convert(model, soc_version="Ascend310P3", fusion_switch=switch)
        assert fused not in _fused(result)["fused"] and fused not in result.plan, switch
        assert result.plan["/ln/Pow"].dtype == "float16", switch  # the decomposed chain, op by op in fp16
    on = convert(model, soc_version="Ascend310P3", fusion_switch={"ALL": "off", "LayerNormONNXFusionPass": "on"})
    assert fused in _fused(on)["fused"]  # a per-pass entry wins over ALL


@pytest.mark.parametrize("case", ["mul_after", "mul_before"])
def test_erf_gelu_is_the_gelu_kernel(tmp_path, convert, case):
    result = convert(gelu_model(tmp_path / "m.onnx", case=case), soc_version="Ascend910B1")
    members = ["/act/Add", "/act/Div", "/act/Erf", "/act/Mul", "/act/Mul_1"]
    assert _fused(result)["fused"] == {"/act/Mul_1/Gelu": members}
    assert _fused(result)["rules"] == {"/act/Mul_1/Gelu": "GeluONNXFusionPass"}
    x = np.linspace(-6, 6, 128, dtype=np.float32).reshape(2, 64)
    got = run(result.model_path, {"x": x})[0]
    x16 = x.astype(np.float16).astype(np.float32)
    tanh_gelu = x16 * 0.5 * (1 + np.tanh(np.sqrt(2 / np.pi) * (x16 + 0.044715 * x16 ** 3)))
    np.testing.assert_allclose(got, tanh_gelu, rtol=2e-3, atol=2e-3)  # the kernel's approximation, fp16 output
    from scipy.special import erf  # noqa: F401 - only the difference below needs it
    exact = x16 * 0.5 * (1 + erf(x16 / np.sqrt(2)))
    assert np.abs(got - exact).max() > 1e-4  # what the ONNX model computes is not what the device does


def test_gelu_constants_are_checked(tmp_path, convert):
    result = convert(gelu_model(tmp_path / "m.onnx", sqrt2=1.5))
    assert _fused(result)["fused"] == {} and "not 1.41421" in _not_fused(result)["GeluONNXFusionPass"]
