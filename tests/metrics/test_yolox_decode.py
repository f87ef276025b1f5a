"""`decode: yolox` (issue 43) against a reference written here, apart from the product code, from
YOLOX's published postprocess (Megvii-BaseDetection/YOLOX, yolox/utils/demo_utils.py
`demo_postprocess`, and yolox/models/yolo_head.py `decode_outputs`): per stride a grid of
`H // s` x `W // s` cells, row by row (`meshgrid(arange(wsize), arange(hsize))` stacked as x, y);
`xy = (out_xy + cell) * stride`, `wh = exp(out_wh) * stride`; objectness and class scores already
through a sigmoid in the export (`torch.cat([reg, obj.sigmoid(), cls.sigmoid()])`), score =
objectness x class (`multiclass_nms` on `scores = obj * cls`)."""

from __future__ import annotations

import math

import numpy as np
import pytest

from ascendpipe.errors import UserError
from ascendpipe.metrics.detect_post import detections
from tests.metrics.test_detect_post import PARAMS, assert_same, ref_pipeline


def reference_yolox(raw, input_hw, strides):
    """One image's (boxes xyxy, class scores) from a (N, 5+C) YOLOX export, cell by cell in plain Python."""
    boxes, scores, i = [], [], 0
    for s in strides:
        for gy in range(input_hw[0] // s):
            for gx in range(input_hw[1] // s):
                dx, dy, lw, lh, obj, *cls = raw[i]
                cx, cy = (dx + gx) * s, (dy + gy) * s
                w, h = math.exp(lw) * s, math.exp(lh) * s
                boxes.append([cx - w / 2, cy - h / 2, cx + w / 2, cy + h / 2])
                scores.append([obj * c for c in cls])
                i += 1
    assert i == len(raw)
    return boxes, scores


@pytest.mark.parametrize("strides", [[8, 16, 32], [8, 16, 32, 64]])
def test_yolox_matches_its_published_decode(strides):
    rng = np.random.default_rng(7)
    hw, c = (64, 128), 3  # not square: x and y cannot be swapped unseen
    n = sum((hw[0] // s) * (hw[1] // s) for s in strides)
    raw = np.concatenate([rng.normal(0, 0.6, size=(2, n, 4)), 1 / (1 + np.exp(-rng.normal(0, 2, size=(2, n, 1 + c))))], axis=2)
    ref = ref_pipeline([reference_yolox(img, hw, strides) for img in raw], 0.3, 0.5, 10)
    got = detections({"output": raw}, {"decode": "yolox", "input_size": list(hw), "strides": strides, **PARAMS})
    assert_same(got, ref)
    # channels first (a transposed export) and num_classes give the same
    got = detections({"output": raw.transpose(0, 2, 1)}, {"decode": "yolox", "input_size": list(hw), "strides": strides,
                                                           "num_classes": c, **PARAMS})
    assert_same(got, ref)


def test_a_known_box_comes_back_in_pixels():
    """One cell of stride 16 at (gx, gy) = (2, 1) with dx = 0.5, dy = 0.25, w = h = 2 strides: centre
    (40, 20), box 32 x 32."""
    hw, strides = (64, 64), [8, 16, 32]
    n = 64 + 16 + 4
    raw = np.zeros((1, n, 6))
    at = 64 + 1 * 4 + 2  # after the 8x8 grid of stride 8: row 1, column 2 of stride 16's 4x4
    raw[0, at] = [0.5, 0.25, math.log(2), math.log(2), 0.9, 0.8]
    got = detections({"o": raw}, {"decode": "yolox", "input_size": list(hw), "strides": strides, **PARAMS})
    np.testing.assert_allclose(got["boxes"][0], [[24.0, 4.0, 56.0, 36.0]])
    np.testing.assert_allclose(got["scores"][0], [0.72])


def test_yolox_errors_say_what_to_give():
    raw = np.zeros((1, 84, 6))
    with pytest.raises(UserError, match=r"decode yolox needs the model input size for its grid: give params.input_size"):
        detections({"o": raw}, {"decode": "yolox", **PARAMS})
    with pytest.raises(UserError, match=r"yolox: 84 boxes, but an input of \[32, 32\] with strides \[8, 16, 32\] has 21 grid "
                                        r"cells \(check input_size and strides; YOLOX-P6: \[8, 16, 32, 64\]\)"):
        detections({"o": raw}, {"decode": "yolox", "input_size": [32, 32], **PARAMS})
