"""The rounding docs/kinds.md and ascendpipe.data.letterbox state (issue 43): letterbox sizes round half
to even (as ultralytics' int(round(...))), pixel values half up, the odd padding pixel right/bottom;
detections.json's scores to 6 decimals and boxes to 4, the metrics from the unrounded values."""

from __future__ import annotations

import numpy as np

from ascendpipe.data import letterbox as lb
from ascendpipe.metrics.ground_truth import Truth, coco_results


def test_letterbox_size_ties_round_half_to_even_and_the_odd_pad_goes_right():
    # r = min(5/10, 5/7) = 0.5: 7 * 0.5 = 3.5 -> 4, and 5 * 0.5 = 2.5 -> 2 (half to even, both ways)
    seven = lb.plan((10, 7), (5, 5))
    assert seven["resized"] == [5, 4] and seven["pad"] == [0, 0]  # 1 pixel of padding: right
    five = lb.plan((10, 5), (5, 5))
    assert five["resized"] == [5, 2] and five["pad"] == [1, 0]  # 3 pixels: 1 left, 2 right
    assert seven["scale"] == [4 / 7, 5 / 10]  # each axis's exact scale after rounding


def test_pixel_values_round_half_up():
    assert lb.to_u8(np.array([0.5, 1.5, 2.5, 254.5, 255.5, -0.6])).tolist() == [1, 2, 3, 255, 255, 0]


def test_detections_json_rounds_scores_to_6_and_boxes_to_4_decimals():
    truth = Truth(images=[{"boxes": [], "labels": []}], image_ids=[7], category_ids=[3])
    pred = {"boxes": [np.array([[1.234567, 2.000049, 11.2345678, 12.5]])], "scores": [np.array([0.12345678])],
            "labels": [np.array([0])]}
    assert coco_results(pred, truth) == [{"image_id": 7, "category_id": 3, "score": 0.123457,
                                          "bbox": [1.2346, 2.0, 10.0, 10.5]}]
