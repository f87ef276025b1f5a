import contextlib
import io

import numpy as np
import pytest
from pycocotools.coco import COCO
from pycocotools.cocoeval import COCOeval

from ascendpipe.errors import UserError
from ascendpipe.metrics import detection_map


def synthetic_set(seed, n_images=8, n_classes=3):
    """Ground truth boxes and noisy detections (jittered true boxes, misses, false positives)."""
    rng = np.random.default_rng(seed)
    pb, ps, pl, gb, gl = [], [], [], [], []
    for _ in range(n_images):
        n = rng.integers(1, 5)
        xy = rng.uniform(0, 80, size=(n, 2))
        wh = rng.uniform(8, 40, size=(n, 2))
        boxes = np.c_[xy, xy + wh]
        labels = rng.integers(0, n_classes, size=n)
        keep = rng.random(n) > 0.2
        det = boxes[keep] + rng.normal(scale=3.0, size=(keep.sum(), 4))
        det[:, 2:] = np.maximum(det[:, 2:], det[:, :2] + 1)
        n_fp = rng.integers(0, 3)
        fxy = rng.uniform(0, 80, size=(n_fp, 2))
        fp = np.c_[fxy, fxy + rng.uniform(8, 30, size=(n_fp, 2))]
        pb.append(np.r_[det, fp])
        ps.append(rng.random(len(det) + n_fp))
        pl.append(np.r_[labels[keep], rng.integers(0, n_classes, size=n_fp)])
        gb.append(boxes)
        gl.append(labels)
    return pb, ps, pl, gb, gl


def pycocotools_map(pb, ps, pl, gb, gl, iscrowd=None, ignore=None):
    images, anns, dets = [], [], []
    for i, (boxes, labels) in enumerate(zip(gb, gl)):
        images.append({"id": i + 1, "width": 200, "height": 200})
        for k, (b, c) in enumerate(zip(boxes, labels)):
            w, h = b[2] - b[0], b[3] - b[1]
            anns.append({"id": len(anns) + 1, "image_id": i + 1, "category_id": int(c) + 1,
                         "bbox": [b[0], b[1], w, h], "area": w * h,
                         "iscrowd": int(iscrowd[i][k]) if iscrowd is not None else 0})
            if ignore is not None:
                anns[-1]["ignore"] = int(ignore[i][k])
        for b, s, c in zip(pb[i], ps[i], pl[i]):
            dets.append({"image_id": i + 1, "category_id": int(c) + 1,
                         "bbox": [b[0], b[1], b[2] - b[0], b[3] - b[1]], "score": float(s)})
    categories = sorted({int(c) + 1 for labels in gl for c in labels})
    gt = COCO()
    gt.dataset = {"images": images, "annotations": anns, "categories": [{"id": c} for c in categories]}
    with contextlib.redirect_stdout(io.StringIO()):
        gt.createIndex()
        dt = gt.loadRes(dets)
        ev = COCOeval(gt, dt, "bbox")
        ev.evaluate()
        ev.accumulate()
        ev.summarize()
    return ev.stats[0], ev.stats[1]


@pytest.mark.parametrize("seed", [0, 1, 2, 3])
def test_coco_map_matches_pycocotools(seed):
    data = synthetic_set(seed)
    ref_50_95, ref_50 = pycocotools_map(*data)
    got = detection_map(*data)
    assert got["mAP50_95"] == pytest.approx(ref_50_95, abs=1e-9)
    assert got["coco_mAP50"] == pytest.approx(ref_50, abs=1e-9)


@pytest.mark.parametrize("seed", [0, 1, 2, 3])
def test_coco_iscrowd_matches_pycocotools(seed):
    data = synthetic_set(seed, n_images=10)
    rng = np.random.default_rng(100 + seed)
    crowd = [rng.random(len(b)) < 0.3 for b in data[3]]
    ref_50_95, ref_50 = pycocotools_map(*data, iscrowd=crowd)
    got = detection_map(*data, iscrowd=crowd)
    assert got["mAP50_95"] == pytest.approx(ref_50_95, abs=1e-9)
    assert got["coco_AP50"] == pytest.approx(ref_50, abs=1e-9)
    assert got["mAP50_95"] != pytest.approx(detection_map(*data)["mAP50_95"], abs=1e-6)  # crowd boxes mattered


def test_coco_ignore_flag_does_nothing_as_in_pycocotools():
    """pycocotools' COCOeval._prepare overwrites a box's 'ignore' with its 'iscrowd' for bbox evaluation."""
    data = synthetic_set(5, n_images=10)
    ignore = [np.arange(len(b)) % 2 == 0 for b in data[3]]
    ref_50_95, ref_50 = pycocotools_map(*data, ignore=ignore)
    got = detection_map(*data, ignore=ignore)
    assert (got["mAP50_95"], got["coco_AP50"]) == (pytest.approx(ref_50_95, abs=1e-9), pytest.approx(ref_50, abs=1e-9))
    assert got["mAP50_95"] == detection_map(*data)["mAP50_95"]
    assert got["voc_mAP50"] != detection_map(*data)["voc_mAP50"]  # VOC treats them as difficult


def test_coco_ap50_and_voc_map50_are_named_apart():
    data = synthetic_set(0)
    got = detection_map(*data)
    assert got["coco_AP50"] == got["coco_mAP50"] and got["voc_mAP50"] == got["mAP50"]  # old names kept
    assert got["coco_AP50"] != got["voc_mAP50"]  # 101-point COCO vs VOC area: different numbers


def test_voc_all_point_ap_by_hand():
    # one class, one image, two ground truths; three detections by score:
    # d1 hits gt A (TP), d2 overlaps A again (FP: already taken), d3 hits gt B (TP)
    gt = [np.array([[0, 0, 10, 10], [20, 20, 30, 30]], float)]
    det = [np.array([[0, 0, 10, 10], [0, 0, 10, 9], [20, 20, 30, 31]], float)]
    got = detection_map(det, [np.array([0.9, 0.8, 0.7])], [np.array([0, 0, 0])], gt, [np.array([0, 0])])
    # recall/precision: (0.5, 1), (0.5, 1/2), (1, 2/3); envelope: 1 up to r=.5, 2/3 up to r=1
    assert got["mAP50"] == pytest.approx(0.5 * 1 + 0.5 * (2 / 3))


def test_voc_threshold_counts_iou_of_exactly_one_half():
    gt = [np.array([[0, 0, 10, 10]], float)]
    # IoU exactly 0.5: [0,0,10,5] vs [0,0,10,10] = 50/100: a hit for the devkit (ovmax >= minoverlap) and mmdet
    half = detection_map([np.array([[0, 0, 10, 5]], float)], [np.array([1.0])], [np.array([0])], gt, [np.array([0])])
    assert half["mAP50"] == half["voc_mAP50"] == 1.0
    assert half["mAP50_95"] == pytest.approx(np.mean([1.0] + [0.0] * 9))  # COCO: IoU >= 0.5 counts
    below = detection_map([np.array([[0, 0, 10, 4.99]], float)], [np.array([1.0])], [np.array([0])], gt, [np.array([0])])
    assert below["voc_mAP50"] == 0.0


def test_voc07_eleven_points_and_voc12_area_by_hand():
    gt = [np.array([[0, 0, 10, 10], [20, 20, 30, 30]], float)]
    det = [np.array([[0, 0, 10, 10], [0, 0, 10, 9], [20, 20, 30, 31]], float)]
    args = (det, [np.array([0.9, 0.8, 0.7])], [np.array([0, 0, 0])], gt, [np.array([0, 0])])
    # (recall, precision): (0.5, 1), (0.5, 1/2), (1, 2/3)
    # voc07: recall >= 0, .1, ..., .5 -> best precision 1 (6 points); .6 ... 1 -> 2/3 (5 points)
    assert detection_map(*args, voc_mode="voc07")["voc_mAP50"] == pytest.approx((6 * 1 + 5 * 2 / 3) / 11)
    assert detection_map(*args)["voc_mAP50"] == pytest.approx(0.5 * 1 + 0.5 * 2 / 3)
    assert detection_map(*args)["voc_mode"] == "voc12"
    with pytest.raises(UserError, match="voc_mode"):
        detection_map(*args, voc_mode="voc2007")


def test_voc_difficult_boxes_count_neither_way():
    # gt A regular, gt B difficult; by score: d1 on A (0.9), d3 on nothing (0.8), d2 on B (0.7)
    gt = [np.array([[0, 0, 10, 10], [20, 20, 30, 30]], float)]
    det = [np.array([[0, 0, 10, 10], [20, 20, 30, 30], [50, 50, 60, 60]], float)]
    args = (det, [np.array([0.9, 0.7, 0.8])], [np.array([0, 0, 0])], gt, [np.array([0, 0])])
    # one positive, found first at precision 1; d2 is neither a hit nor a false alarm
    assert detection_map(*args, difficult=[np.array([0, 1])])["voc_mAP50"] == 1.0
    # B regular: (0.5, 1), (0.5, 1/2), (1, 2/3)
    assert detection_map(*args)["voc_mAP50"] == pytest.approx(0.5 + 0.5 * 2 / 3)
    only_hard = detection_map(*args, difficult=[np.array([1, 1])])
    assert np.isnan(only_hard["voc_mAP50"])  # no positive left: the class is out of the mean


def test_voc_ranks_ties_in_input_order():
    # two detections with equal scores on one gt: the first given takes it, the second is the FP
    gt = [np.array([[0, 0, 10, 10]], float), np.array([[0, 0, 10, 10]], float)]
    det = [np.array([[0, 0, 10, 10]], float), np.array([[40, 40, 50, 50]], float)]
    got = detection_map(det, [np.array([0.5]), np.array([0.5])], [np.array([0]), np.array([0])], gt,
                        [np.array([0]), np.array([0])])
    assert got["voc_mAP50"] == pytest.approx(0.5)  # (0.5, 1) then (0.5, 0.5): area 0.5
    swapped = detection_map(det[::-1], [np.array([0.5]), np.array([0.5])], [np.array([0]), np.array([0])], gt[::-1],
                            [np.array([0]), np.array([0])])
    assert swapped["voc_mAP50"] == pytest.approx(0.25)  # the FP first: (0, 0) then (0.5, 0.5)


def test_two_classes_are_averaged_and_missing_class_scores_zero():
    gt = [np.array([[0, 0, 10, 10], [50, 50, 60, 60]], float)]
    det = [np.array([[0, 0, 10, 10]], float)]
    got = detection_map(det, [np.array([0.9])], [np.array([0])], gt, [np.array([0, 1])])
    assert got["mAP50"] == pytest.approx(0.5)
    assert got["mAP50_95"] == pytest.approx(0.5)


def test_errors():
    with pytest.raises(UserError, match="no ground-truth boxes"):
        detection_map([np.zeros((0, 4))], [np.zeros(0)], [np.zeros(0)], [np.zeros((0, 4))], [np.zeros(0)])
    with pytest.raises(UserError, match="same number of images"):
        detection_map([np.zeros((0, 4))], [], [], [], [])
