"""Fusion (ATC passes from the catalogue), cast survival, AIPP against a numpy reference."""

import json

import numpy as np
import onnx
import onnxruntime as ort
import pytest
from onnx import TensorProto, helper

from ascendpipe.errors import UserError
from tests.backends.onnxruntime.conftest import r16, run
from tests.modelzoo import conv_bn_relu_inputs, conv_bn_relu_model, l2norm_model


def test_fused_map_and_fused_node_is_one_fp16_cube_op(tmp_path, convert):
    result = convert(conv_bn_relu_model(tmp_path / "m.onnx"))
    fused = json.loads((result.out_dir / "fused_map.json").read_text())
    # BN folds into the conv; Conv + one Relu is no documented UB fusion (TbeConvDoubleInFusionPass takes
    # two elementwise ops, AutomaticUbFusion only elementwise ones)
    assert fused["fused"] == {"conv": ["bn", "conv"]}
    assert "relu_out" in fused["tensors"] and "bn_out" in fused["tensors"]
    plan = json.loads((result.out_dir / "precision_plan.json").read_text())["nodes"]
    assert plan["conv"]["op_type"] == "Conv" and plan["conv"]["dtype"] == "float16"
    assert fused["rules"] == {"conv": "ConvBatchnormFusionPass"}


def test_switching_a_rule_off_keeps_the_node(tmp_path, convert):
    result = convert(conv_bn_relu_model(tmp_path / "m.onnx"), fusion_switch={"ConvBatchnormFusionPass": "off"})
    assert "bn" in result.plan
    assert convert(tmp_path / "m.onnx", fusion_switch={"ALL": "off"}).fusion["passes"] == {}


def test_unknown_rule_lists_known_ones(tmp_path, convert):
    # not one of ATC's built-in names (precision/pass_names.py); the catalogue's names are listed
    with pytest.raises(UserError,
                       match="built-in pass names.*: ALL, .*ConvBatchnormFusionPass.*TbeReduceElemwiseFusionPass"):
        convert(conv_bn_relu_model(tmp_path / "m.onnx"), fusion_switch={"ConvBNFusion": "off"})


def test_keep_dtype_naming_a_fused_op_keeps_the_fused_node(tmp_path, convert):
    result = convert(conv_bn_relu_model(tmp_path / "m.onnx"), keep_dtype=["bn"])
    assert result.plan["conv"].dtype == "float32"
    assert "fused into 'conv'" in result.plan["conv"].reason


def test_casts_survive_every_optimisation_level(tmp_path, convert):
    model = conv_bn_relu_model(tmp_path / "m.onnx")
    feeds = conv_bn_relu_inputs()
    emulated = convert(model).model_path
    outputs = []
    for level in (ort.GraphOptimizationLevel.ORT_DISABLE_ALL, ort.GraphOptimizationLevel.ORT_ENABLE_BASIC,
                  ort.GraphOptimizationLevel.ORT_ENABLE_EXTENDED, ort.GraphOptimizationLevel.ORT_ENABLE_ALL):
        options = ort.SessionOptions()
        options.graph_optimization_level = level
        options.optimized_model_filepath = str(tmp_path / f"opt{int(level)}.onnx")
        outputs.append(ort.InferenceSession(str(emulated), options, providers=["CPUExecutionProvider"]).run(None, feeds)[0])
        casts = [n for n in onnx.load(options.optimized_model_filepath).graph.node if n.op_type == "Cast"]
        assert len(casts) >= 6
    for out in outputs[1:]:
        np.testing.assert_array_equal(out, outputs[0])
    assert np.array_equal(outputs[0], r16(outputs[0]))


def test_emulated_model_keeps_io_names_and_metadata(tmp_path, convert):
    model = onnx.load(str(convert(conv_bn_relu_model(tmp_path / "m.onnx")).model_path))
    assert [i.name for i in model.graph.input] == ["image"] and [o.name for o in model.graph.output] == ["logits"]
    meta = json.loads({p.key: p.value for p in model.metadata_props}["ascendpipe.emulation"])
    assert meta["tensor_producer"]["relu_out"] == {"op_name": "relu", "op_type": "Relu"}
    inserted = [n.name for n in model.graph.node if n.name not in {"conv", "relu", "pool", "flatten", "fc"}]
    assert inserted and all(n.startswith("ascendpipe_emu/") for n in inserted)
    assert "ascendpipe_emu/raw/logits" in meta["internal_tensors"]


def _neg_model(path, c=3, h=4, w=5):
    graph = helper.make_graph(
        [helper.make_node("Neg", ["img"], ["out"], name="neg")], "neg",
        [helper.make_tensor_value_info("img", TensorProto.FLOAT, [1, c, h, w])],
        [helper.make_tensor_value_info("out", TensorProto.FLOAT, [1, c, h, w])])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    model.ir_version = 8
    onnx.save(model, str(path))
    return path


AIPP_CFG = """aipp_op {
  aipp_mode: static
  related_input_rank: 0
  input_format: RGB888_U8
  src_image_size_w: 8
  src_image_size_h: 6
  crop: true
  load_start_pos_w: 2
  load_start_pos_h: 1
  crop_size_w: 5
  crop_size_h: 4
  csc_switch: true
  rbuv_swap_switch: true   # RGB -> BGR before CSC
  matrix_r0c0: 77
  matrix_r0c1: 150
  matrix_r0c2: 29
  matrix_r1c0: -43
  matrix_r1c1: -85
  matrix_r1c2: 128
  matrix_r2c0: 128
  matrix_r2c1: -107
  matrix_r2c2: -21
  output_bias_0: 0
  output_bias_1: 128
  output_bias_2: 128
  mean_chn_0: 100
  mean_chn_1: 110
  mean_chn_2: 120
  min_chn_0: 1.5
  min_chn_1: 0.0
  min_chn_2: 2.25
  var_reci_chn_0: 0.0171247538
  var_reci_chn_1: 0.0175070028
  var_reci_chn_2: 0.0174291939
}
"""


def test_aipp_matches_numpy_reference(tmp_path, convert):
    (tmp_path / "aipp.cfg").write_text(AIPP_CFG)
    result = convert(_neg_model(tmp_path / "m.onnx"), precision_mode="must_keep_origin_dtype",
                     insert_op_conf=str(tmp_path / "aipp.cfg"))
    image = np.random.default_rng(0).integers(0, 256, (1, 6, 8, 3), dtype=np.uint8)
    got = -run(result.model_path, {"img": image})[0]
    x = image[:, 1:5, 2:7, ::-1].astype(np.int64)  # crop, then R<->B swap
    m = np.array([[77, 150, 29], [-43, -85, 128], [128, -107, -21]])
    yuv = np.clip(((x @ m.T) >> 8) + np.array([0, 128, 128]), 0, 255)  # integer >> 8 as documented
    ref = (yuv - np.array([100, 110, 120]) - np.array([1.5, 0.0, 2.25])) * np.array(
        [0.0171247538, 0.0175070028, 0.0174291939])
    np.testing.assert_allclose(got, ref.transpose(0, 3, 1, 2), atol=1e-6)
    assert (result.out_dir / "aipp.cfg").read_text().startswith("aipp_op {")
    inp = onnx.load(str(result.model_path)).graph.input[0]
    assert inp.type.tensor_type.elem_type == TensorProto.UINT8


def test_aipp_config_error_names_file_and_line(tmp_path, convert):
    (tmp_path / "aipp.cfg").write_text("aipp_op {\n  aipp_mode: static\n  mean_chn_0: 1.5\n}\n")
    with pytest.raises(UserError) as err:
        convert(_neg_model(tmp_path / "m.onnx"), insert_op_conf=str(tmp_path / "aipp.cfg"))
    assert "aipp.cfg:3" in str(err.value) and "int32" in str(err.value)


def test_a_misspelt_pass_name_gets_the_close_one_suggested(tmp_path, convert):
    with pytest.raises(UserError, match=r"'TbeReduceElemwsieFusionPass' .*did you mean 'TbeReduceElemwiseFusionPass'\?"):
        convert(l2norm_model(tmp_path / "m.onnx"), fusion_switch={"TbeReduceElemwsieFusionPass": "off"})
    # a name from another tool's vocabulary (onnxruntime's) matches nothing closely: no guess
    with pytest.raises(UserError) as err:
        convert(l2norm_model(tmp_path / "m2.onnx"), fusion_switch={"MatMulScaleFusion": "off"})
    assert "did you mean" not in str(err.value)
