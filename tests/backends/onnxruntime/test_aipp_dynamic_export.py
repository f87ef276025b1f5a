"""AIPP on a dynamic-shape export in a pipeline (issue 43): the OM's static shape is the convert's
`input_shape`, and its data input is AIPP's uint8 NHWC image; infer feeds it, compare checks the AIPP
against the training preprocessing with the golden batched as the OM is."""

from __future__ import annotations

import io
import json

import numpy as np
import onnx
import onnxruntime as ort
from onnx import TensorProto, helper, numpy_helper

import ascendpipe

PIPELINE = """\
stages:
  conv:
    kind: convert
    model: data/m.onnx
    params:
      input_shape: "x:2,3,16,16"
      aipp: {aipp_mode: static, input_format: RGB888_U8, src_image_size_w: 16, src_image_size_h: 16,
             mean_chn_0: 114, mean_chn_1: 114, mean_chn_2: 114,
             var_reci_chn_0: 0.00392156863, var_reci_chn_1: 0.00392156863, var_reci_chn_2: 0.00392156863}
  inf: {kind: infer, model: conv, inputs: data/u8.npy}
  cmp: {kind: compare, golden: data/m.onnx, target: conv, inputs: data/u8.npy, golden_inputs: data/f.npy}
"""


def _workspace(root):
    (root / ".ascendpipe").mkdir(parents=True)
    (root / "data").mkdir()
    rng = np.random.default_rng(0)
    w = numpy_helper.from_array(rng.standard_normal((4, 3, 3, 3)).astype(np.float32) * 0.3, "w")
    nodes = [helper.make_node("Conv", ["x", "w"], ["c"], name="conv", pads=[1, 1, 1, 1]),
             helper.make_node("Relu", ["c"], ["y"], name="relu")]
    graph = helper.make_graph(nodes, "m", [helper.make_tensor_value_info("x", TensorProto.FLOAT, ["N", 3, "H", "W"])],
                              [helper.make_tensor_value_info("y", TensorProto.FLOAT, ["N", 4, "H", "W"])], [w])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 13)])
    model.ir_version = 8
    onnx.save(model, str(root / "data" / "m.onnx"))
    u8 = rng.integers(0, 256, size=(4, 16, 16, 3)).astype(np.uint8)
    np.save(root / "data" / "u8.npy", u8)
    trained = ((u8.astype(np.float32) - 114) * np.float32(0.00392156863)).transpose(0, 3, 1, 2).copy()
    np.save(root / "data" / "f.npy", trained)
    (root / "p.yaml").write_text(PIPELINE)
    return trained


def test_aipp_on_a_dynamic_export_runs_in_a_pipeline(tmp_path):
    trained = _workspace(tmp_path)
    run = ascendpipe.build(str(tmp_path / "p.yaml"), quiet=True, stream=io.StringIO())
    assert {n: s["state"] for n, s in run["stages"].items()} == {"conv": "ran", "inf": "ran", "cmp": "ran"}, \
        {n: s.get("error") for n, s in run["stages"].items()}
    shapes = json.loads((tmp_path / "build/conv/convert.json").read_text())["shapes"]
    assert shapes["accepted"] == [{"x": [2, 16, 16, 3]}] and shapes["input_shape"] == "x:2,3,16,16"
    # infer: the 4 uint8 frames in two batches of the OM's 2, against the fp32 model on the trained input
    summary = json.loads((tmp_path / "build/inf/summary.json").read_text())
    out = np.load(tmp_path / "build/inf" / summary["outputs"]["y"]["file"])
    golden = ort.InferenceSession(str(tmp_path / "data/m.onnx"), providers=["CPUExecutionProvider"]).run(None, {"x": trained})[0]
    assert out.shape == (4, 4, 16, 16)
    np.testing.assert_allclose(out, golden, atol=2e-2)
    result = json.loads((tmp_path / "build/cmp/result.json").read_text())
    assert result["rows"][0]["op_name"] == "aipp" and not result["rows"][0]["failed"]
    assert result["first_failure"] is None and run["stages"]["cmp"]["metrics"]["output_cosine"] > 0.9999


def test_a_convert_recorded_before_aipp_feeds_were_is_read_right(tmp_path):
    """A convert folder recorded by an earlier version (its shapes say NCHW float): the feed check reads the
    OM's own uint8 input; a float NCHW feed is refused naming what the OM takes."""
    from types import SimpleNamespace

    import pytest

    from ascendpipe.errors import UserError
    from ascendpipe.precision.dynamic_shapes import check_feeds

    _workspace(tmp_path)
    ascendpipe.build(str(tmp_path / "p.yaml"), ["conv"], quiet=True, stream=io.StringIO())
    record = tmp_path / "build/conv/convert.json"
    data = json.loads(record.read_text())
    data["shapes"] = {k: v for k, v in data["shapes"].items() if k != "aipp_inputs"}
    data["shapes"]["accepted"] = [{"x": [2, 3, 16, 16]}]
    record.write_text(json.dumps(data))
    ctx = SimpleNamespace(inputs={"model": tmp_path / "build/conv"}, name="inf")
    check_feeds(ctx, [{"x": np.zeros((2, 16, 16, 3), np.uint8)}])  # taken
    with pytest.raises(UserError) as err:
        check_feeds(ctx, [{"x": np.zeros((2, 3, 16, 16), np.float32)}])
    assert err.value.message.startswith("the OM takes x:2,16,16,3 (static), not x:2,3,16,16")
