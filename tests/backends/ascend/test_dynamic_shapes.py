"""ATC's --input_shape grammar and the dynamic gears (pure: precision/input_shape.py, precision/dynamic_shapes.py)."""

from __future__ import annotations

import pytest

from ascendpipe.errors import UserError
from ascendpipe.inputs import InputSpec
from ascendpipe.precision.dynamic_shapes import feed_error, om_input_specs, resolve
from ascendpipe.precision.input_shape import dim_range, format_input_shape, parse_input_shape

DYN_BATCH = [InputSpec("image", ("batch", 1, 32, 32), "float32")]
DETECTOR = [InputSpec("images", (1, 3, "height", "width"), "float32")]


def test_the_full_input_shape_grammar():
    got = parse_input_shape("x:1,3,224,224;ids:;mask:-1,1~8,2~-1;ns/t:0:4")
    assert got == {"x": [1, 3, 224, 224], "ids": [], "mask": [-1, "1~8", "2~-1"], "ns/t:0": [4]}
    assert format_input_shape(got) == "x:1,3,224,224;ids:;mask:-1,1~8,2~-1;ns/t:0:4"
    assert [dim_range(d) for d in got["mask"]] == [(1, None), (1, 8), (2, None)]
    for bad in ("x:1,a", "x:8~2", "1,3", "x:1;x:2", "x:-2"):
        with pytest.raises(UserError):
            parse_input_shape(bad)


def test_input_shape_is_derived_from_what_the_pipeline_feeds():
    plan = resolve(DYN_BATCH, {}, soc_version="Ascend310P3", examples={"image": [1, 1, 32, 32]})
    assert plan.atc_options() == ["--input_shape=image:1,1,32,32"] and plan.derived
    assert plan.accepted == [{"image": [1, 1, 32, 32]}] and plan.mode == "static"
    # a fixed model needs none
    assert resolve([InputSpec("x", (2, 3), "float32")], {}).atc_options() == []


def test_a_dynamic_model_without_an_example_needs_input_shape_named_at_the_stage():
    # an open batch axis alone becomes 1: infer and dump re-batch samples along it
    assert resolve(DYN_BATCH, {}).atc_options() == ["--input_shape=image:1,1,32,32"]
    with pytest.raises(UserError) as err:
        resolve(DETECTOR, {}, soc_version="Ascend310P3", stage="convert@fp16")
    assert "atc needs --input_shape" in err.value.message and "'images'" in err.value.message
    assert err.value.location.stage == "convert@fp16" and err.value.location.field == "input_shape"
    assert "images:1,3,1,1" in err.value.hint


def test_a_wrong_input_name_is_located():
    with pytest.raises(UserError) as err:
        resolve(DYN_BATCH, {"input_shape": "img:1,1,32,32"}, stage="convert")
    assert "'img', which is not a model input; inputs: image" in err.value.message
    assert err.value.location.field == "input_shape"


def test_batch_gears_derive_a_minus_one_batch_and_take_each_gear():
    plan = resolve(DYN_BATCH, {"dynamic_batch_size": "1,4,8"}, examples={"image": [1, 1, 32, 32]})
    assert plan.atc_options() == ["--input_shape=image:-1,1,32,32", "--dynamic_batch_size=1,4,8"]
    assert [g["image"][0] for g in plan.accepted] == [1, 4, 8]
    record = plan.record()
    # infer pads to the largest gear, so the batch dim the OM is fed is 8
    assert om_input_specs(record, [{"name": "image", "shape": ["batch", 1, 32, 32], "dtype": "float32"}]) == [
        {"name": "image", "shape": [8, 1, 32, 32], "dtype": "float32"}]
    assert feed_error(record, {"image": (4, 1, 32, 32)}) is None
    # samples are re-batched along axis 0 (padded up to the largest gear): any count, the other dims fixed
    assert feed_error(record, {"image": (3, 1, 32, 32)}) is None
    err = feed_error(record, {"image": (3, 1, 28, 28)}, stage="infer")
    assert "the OM takes image:1,1,32,32 | image:4,1,32,32 | image:8,1,32,32" in err.message
    assert "not image:3,1,28,28" in err.message and err.location.stage == "infer"


def test_image_size_gears_for_a_detector():
    plan = resolve(DETECTOR, {"dynamic_image_size": "320,320;640,480"}, soc_version="Ascend310P3")
    assert plan.atc_options() == ["--input_shape=images:1,3,-1,-1", "--dynamic_image_size=320,320;640,480"]
    record = plan.record()
    assert om_input_specs(record, [{"name": "images", "shape": [1, 3, "height", "width"], "dtype": "float32"}])[0][
        "shape"] == [1, 3, "gear", "gear"]
    assert feed_error(record, {"images": (1, 3, 640, 480)}) is None
    assert "device would refuse" in feed_error(record, {"images": (1, 3, 600, 480)}).message


@pytest.mark.parametrize("params, message", [
    ({"dynamic_batch_size": "1,2", "dynamic_dims": "1;2"}, "cannot be combined"),
    ({"input_shape": "images:-1,3,64,64", "dynamic_batch_size": "4"}, "2 to 100 gears"),
    ({"input_shape": "images:-1,3,64,64", "dynamic_batch_size": "1,4096"}, "[1, 2048]"),
    ({"input_shape": "images:1,3,-1,-1", "dynamic_batch_size": "1,2"}, "only the first dim"),
    ({"input_shape": "images:1,3,-1,-1", "dynamic_dims": "1,2,3;4,5,6"}, "each gear needs 2 values"),
    ({"input_shape": "images:1,3,64,64", "dynamic_image_size": "1,2;3,4"}, "needs input_shape with -1"),
    ({"input_shape": "images:1,3,-1,-1", "dynamic_image_size": "1,2,3;4,5,6"}, "each gear is 'h,w'"),
    ({"input_shape": "images:1,3,1~8,-1", "dynamic_image_size": "1,2;3,4"}, "not ranges"),
])
def test_gear_rules(params, message):
    with pytest.raises(UserError) as err:
        resolve(DETECTOR, params, soc_version="Ascend310P3")
    assert message in err.value.message


def test_dynamic_dims_not_with_aipp_and_ranges_not_on_ascend310():
    with pytest.raises(UserError, match="AIPP"):
        resolve(DETECTOR, {"input_shape": "images:1,3,-1,-1", "dynamic_dims": "1,2;3,4"}, aipp=True)
    with pytest.raises(UserError, match="Ascend310 .*shape-range"):
        resolve(DETECTOR, {"input_shape": "images:1,3,224~640,-1"}, soc_version="Ascend310")
    # Atlas 200I/500 A2 (Ascend310B*) takes none either (CANN 8.0 atlasatcparam_16_0016)
    with pytest.raises(UserError, match=r"Ascend310B1 \(Atlas 200I/500 A2 inference\) .*shape-range"):
        resolve(DETECTOR, {"input_shape": "images:1,3,-1,-1"}, soc_version="Ascend310B1")
    plan = resolve(DETECTOR, {"input_shape": "images:1,3,224~640,-1"}, soc_version="Ascend310P3")
    record = plan.record()
    assert record["mode"] == "range" and record["range"] == {"images": [[1, 1], [3, 3], [224, 640], [1, None]]}
    assert feed_error(record, {"images": (1, 3, 300, 999)}) is None
    assert "outside the OM's shape range" in feed_error(record, {"images": (1, 3, 700, 10)}).message


def test_the_emulator_records_the_gears_and_refuses_a_feed_the_om_would_not_take(tmp_path):
    """onnxruntime backend: the same params, the same shapes record, the same refusal as on the device."""
    import json

    import numpy as np

    from ascendpipe.backends.onnxruntime import stages as ort_stages
    from ascendpipe.contract import StageContext
    from tests import modelzoo

    det = modelzoo.dynamic_hw_detector(tmp_path / "det.onnx")
    logs = open(tmp_path / "log", "w+")

    def ctx(name, kind, params, inputs):
        out = tmp_path / "build" / name
        out.mkdir(parents=True)
        return StageContext(name=name, kind=kind, workspace=tmp_path, out_dir=out, final_out_dir=out, params=params,
                            inputs=inputs, upstream={}, backend="onnxruntime", log=logs)

    conv = ctx("convert", "convert", {"dynamic_image_size": "32,48;64,64"}, {"model": det})
    ort_stages.convert(conv)
    shapes = json.loads((conv.out_dir / "convert.json").read_text())["shapes"]
    assert shapes["mode"] == "dynamic_image_size" and shapes["input_shape"] == "images:1,3,-1,-1"
    np.save(tmp_path / "ok.npy", modelzoo.dynamic_hw_inputs(64, 64)["images"])
    ort_stages.infer(ctx("infer", "infer", {}, {"model": conv.out_dir, "inputs": tmp_path / "ok.npy"}))
    np.save(tmp_path / "off.npy", modelzoo.dynamic_hw_inputs(40, 40)["images"])
    with pytest.raises(UserError) as err:
        ort_stages.infer(ctx("infer2", "infer", {}, {"model": conv.out_dir, "inputs": tmp_path / "off.npy"}))
    assert "not images:1,3,40,40: the device would refuse this feed" in err.value.message
    logs.close()
