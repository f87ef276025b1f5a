"""AIPP padding and resize on the onnxruntime backend: the emulated model against the same padding
(and bilinear resize) done in numpy here, the SoC and size rules, and the AIPP check of a letterbox
against the training preprocessing of the letterbox data step."""

import numpy as np
import pytest

from ascendpipe.compare import aipp_check
from ascendpipe.data import letterbox as lb
from ascendpipe.errors import UserError
from ascendpipe.precision import aipp
from tests.backends.onnxruntime.conftest import run
from tests.backends.onnxruntime.test_fusion_aipp import _neg_model

PAD = {"aipp_mode": "static", "input_format": "RGB888_U8", "src_image_size_w": 14, "src_image_size_h": 12,
       "padding": True, "top_padding_size": 1, "bottom_padding_size": 3, "left_padding_size": 2,
       "right_padding_size": 4, "padding_value": 0.5, "mean_chn_0": 100, "mean_chn_1": 110, "mean_chn_2": 120,
       "var_reci_chn_0": 0.0171, "var_reci_chn_1": 0.0175, "var_reci_chn_2": 0.0174}


def test_padding_matches_numpy(tmp_path, convert):
    result = convert(_neg_model(tmp_path / "m.onnx", 3, 16, 20), precision_mode="must_keep_origin_dtype", aipp=PAD)
    image = np.random.default_rng(0).integers(0, 256, (1, 12, 14, 3), dtype=np.uint8)
    got = -run(result.model_path, {"img": image})[0]
    norm = (image.astype(np.float64) - [100, 110, 120]) * [0.0171, 0.0175, 0.0174]
    ref = np.full((1, 16, 20, 3), 0.5)
    ref[:, 1:13, 2:16] = norm
    np.testing.assert_allclose(got, ref.transpose(0, 3, 1, 2), atol=1e-6)
    spec = aipp.aipp_spec(PAD, (3, 16, 20))
    np.testing.assert_allclose(aipp.reference(spec, image), ref.transpose(0, 3, 1, 2), atol=1e-6)


def test_resize_then_pad_matches_numpy_on_a_soc_that_resizes(tmp_path, convert):
    block = {"aipp_mode": "static", "input_format": "YUV400_U8", "src_image_size_w": 48, "src_image_size_h": 32,
             "resize": True, "resize_output_w": 32, "resize_output_h": 21, "padding": True, "top_padding_size": 5,
             "bottom_padding_size": 6, "mean_chn_0": 114, "var_reci_chn_0": 1 / 255}
    result = convert(_neg_model(tmp_path / "m.onnx", 1, 32, 32), precision_mode="must_keep_origin_dtype", aipp=block,
                     soc_version="Ascend310P3")
    image = np.random.default_rng(1).integers(0, 256, (1, 32, 48, 1), dtype=np.uint8)
    got = -run(result.model_path, {"img": image})[0]
    # numpy: bilinear with half-pixel centres written out here, then normalise, then pad with 0
    ys = np.clip((np.arange(21) + 0.5) * 32 / 21 - 0.5, 0, 31)
    xs = np.clip((np.arange(32) + 0.5) * 48 / 32 - 0.5, 0, 47)
    y0, x0 = np.floor(ys).astype(int), np.floor(xs).astype(int)
    y1, x1 = np.minimum(y0 + 1, 31), np.minimum(x0 + 1, 47)
    fy, fx = (ys - y0)[:, None], (xs - x0)[None, :]
    img = image[..., 0].astype(np.float64)
    res = (img[:, y0][:, :, x0] * (1 - fy) * (1 - fx) + img[:, y0][:, :, x1] * (1 - fy) * fx
           + img[:, y1][:, :, x0] * fy * (1 - fx) + img[:, y1][:, :, x1] * fy * fx)
    ref = np.zeros((1, 1, 32, 32))
    ref[:, 0, 5:26] = (res - 114) / 255
    np.testing.assert_allclose(got, ref, atol=1e-5)
    # the letterbox data step's training preprocessing of the same frames agrees within its uint8 rounding
    meta = lb.plan((32, 48), (32, 32))
    assert meta["resized"] == [21, 32] and meta["pad"] == [0, 5]
    trained = lb.normalise(np.stack([lb.apply(f, meta, 114) for f in image]), 114, 1 / 255)
    assert np.abs(trained - got).max() <= 0.5 / 255 + 1e-6
    spec = aipp.aipp_spec(block, (1, 32, 32))
    row = aipp_check.check_row(spec, 0, "img", image, trained, blocks=[block], stage="det_convert")
    assert not row["failed"] and "bilinear" in row["note"]


def test_resize_refused_where_the_soc_has_none_and_sizes_checked(tmp_path, convert):
    block = {"aipp_mode": "static", "input_format": "YUV400_U8", "src_image_size_w": 48, "src_image_size_h": 32,
             "resize": True, "resize_output_w": 32, "resize_output_h": 32}
    model = _neg_model(tmp_path / "m.onnx", 1, 32, 32)
    for soc in (None, "Ascend310", "Ascend910B1"):
        with pytest.raises(UserError, match="only the Atlas inference products .Ascend310P.. resize"):
            convert(model, aipp=block, soc_version=soc)
    with pytest.raises(UserError, match="top_padding_size 40 is outside 0..32"):
        aipp.aipp_spec({**PAD, "top_padding_size": 40}, (3, 52, 20))
    with pytest.raises(UserError, match="AIPP output 16x21 .* does not match the model input 16x20"):
        aipp.aipp_spec({**PAD, "left_padding_size": 3}, (3, 16, 20))
    with pytest.raises(UserError, match="ratio 1/16..16"):
        aipp.aipp_spec({**block, "src_image_size_w": 1000, "resize_output_w": 32}, (1, 32, 32))


def test_aipp_check_finds_a_wrong_padding_value_and_fits_the_right_one():
    rng = np.random.default_rng(2)
    frames = [rng.integers(0, 256, (30, 60, 3), dtype=np.uint8) for _ in range(3)]
    meta = lb.plan((30, 60), (32, 32))  # 16x32 image, 8 rows of padding above and below
    trained = lb.normalise(np.stack([lb.apply(f, meta, 114) for f in frames]), 0, 1 / 255)  # pad 114/255
    u8 = np.stack([lb.scaled_only(f, meta) for f in frames])
    block = {"aipp_mode": "static", "input_format": "RGB888_U8", "src_image_size_w": 32, "src_image_size_h": 16,
             "padding": True, "top_padding_size": 8, "bottom_padding_size": 8,
             **{f"var_reci_chn_{c}": 1 / 255 for c in range(3)}}
    spec = aipp.aipp_spec(block, (3, 32, 32))
    row = aipp_check.check_row(spec, 0, "images", u8, trained, blocks=[block], stage="det_convert@aipp")
    assert row["failed"]
    advice = row["advice_ready"][0]
    assert "padding_value 0 -> 0.447059" in advice["message"] and "padding_value: 0.4470588\n" in advice["file"]["content"]
    assert advice["residual_max_abs_error"] < 1e-6
    fixed = aipp.aipp_spec({**block, "padding_value": 114 / 255}, (3, 32, 32))
    assert not aipp_check.check_row(fixed, 0, "images", u8, trained, blocks=[block], stage="s")["failed"]
