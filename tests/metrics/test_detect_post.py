"""The built-in detection postprocess: every head layout decoded and NMS'd against loop references
written here (torchvision's nms is not installable in this venv), and the letterbox undone exactly."""

import math

import numpy as np
import pytest

from ascendpipe.data import letterbox as lb
from ascendpipe.errors import UserError
from ascendpipe.metrics.detect_post import detections
from ascendpipe.metrics.nms import nms


def ref_iou(a, b):
    iw = min(a[2], b[2]) - max(a[0], b[0])
    ih = min(a[3], b[3]) - max(a[1], b[1])
    inter = max(iw, 0) * max(ih, 0)
    union = (a[2] - a[0]) * (a[3] - a[1]) + (b[2] - b[0]) * (b[3] - b[1]) - inter
    return inter / union if union > 0 else 0.0


def ref_nms(boxes, scores, thr, labels=None):
    order = sorted(range(len(scores)), key=lambda i: -scores[i])  # stable
    keep = []
    for i in order:
        if all(ref_iou(boxes[i], boxes[k]) <= thr or (labels is not None and labels[i] != labels[k]) for k in keep):
            keep.append(i)
    return keep


def random_boxes(rng, n, size=64):
    xy = rng.uniform(0, size - 8, size=(n, 2))
    wh = rng.uniform(4, 24, size=(n, 2))
    return np.c_[xy, xy + wh]


@pytest.mark.parametrize("agnostic", [False, True])
def test_nms_matches_the_loop_reference(agnostic):
    rng = np.random.default_rng(3)
    for _ in range(5):
        boxes = random_boxes(rng, 60)
        scores = np.round(rng.uniform(size=60), 2)  # ties on purpose
        labels = rng.integers(0, 3, size=60)
        got = nms(boxes, scores, 0.45, None if agnostic else labels)
        assert got.tolist() == ref_nms(boxes, scores, 0.45, None if agnostic else labels)
    assert nms(boxes, scores, 0.45, labels, max_det=4).tolist() == ref_nms(boxes, scores, 0.45, labels)[:4]


def ref_pipeline(cands, conf, iou, max_det):
    """Per image: best class, score > conf, per-class NMS, max_det; cands: list of (xyxy, class-scores)."""
    out = []
    for boxes, scores in cands:
        cls = [int(np.argmax(s)) for s in scores]
        best = [float(s[c]) for s, c in zip(scores, cls)]
        idx = [i for i in range(len(best)) if best[i] > conf]
        keep = ref_nms([boxes[i] for i in idx], [best[i] for i in idx], iou, [cls[i] for i in idx])[:max_det]
        out.append(([boxes[idx[k]] for k in keep], [best[idx[k]] for k in keep], [cls[idx[k]] for k in keep]))
    return out


def assert_same(pred, ref):
    for b, s, c, (rb, rs, rc) in zip(pred["boxes"], pred["scores"], pred["labels"], ref):
        assert len(b) == len(rb) > 0
        np.testing.assert_allclose(b, np.array(rb).reshape(-1, 4), atol=1e-9)
        np.testing.assert_allclose(s, rs, atol=1e-12)
        assert c.tolist() == rc


PARAMS = {"conf_threshold": 0.3, "iou_threshold": 0.5, "max_det": 10}


def v8_head(rng, b=2, n=50, c=3):
    xywh = np.c_[rng.uniform(10, 54, size=(b * n, 2)), rng.uniform(4, 20, size=(b * n, 2))].reshape(b, n, 4)
    scores = rng.uniform(size=(b, n, c))
    return np.concatenate([xywh, scores], axis=2)  # (B, N, 4+C)


def ref_v8(head):
    out = []
    for img in head:
        boxes = [[r[0] - r[2] / 2, r[1] - r[3] / 2, r[0] + r[2] / 2, r[1] + r[3] / 2] for r in img]
        out.append((boxes, [list(r[4:]) for r in img]))
    return out


@pytest.mark.parametrize("layout", ["channels_first", "channels_last"])
def test_yolov8_decoded_both_layouts(layout):
    head = v8_head(np.random.default_rng(0))
    given = head.transpose(0, 2, 1) if layout == "channels_first" else head  # (B, 4+C, N) as ultralytics exports
    ref = ref_pipeline(ref_v8(head), 0.3, 0.5, 10)
    assert_same(detections({"output0": given.astype(np.float64)}, {"decode": "yolov8", **PARAMS}), ref)
    # auto finds the layout (7 channels vs 50 boxes), and so does num_classes
    assert_same(detections({"output0": given}, {"decode": "yolov8", "num_classes": 3, **PARAMS}), ref)


def test_yolov8_square_head_is_ambiguous_without_a_hint():
    head = v8_head(np.random.default_rng(0), n=7, c=3)
    with pytest.raises(UserError, match="ambiguous"):
        detections({"o": head}, {"decode": "yolov8", **PARAMS})
    ref = ref_pipeline(ref_v8(head), 0.3, 0.5, 10)
    assert_same(detections({"o": head}, {"decode": "yolov8", "layout": "channels_last", **PARAMS}), ref)


def test_yolov8_dfl_raw_head():
    rng = np.random.default_rng(1)
    H = W = 32
    strides, reg_max, c = [8, 16], 4, 2
    n = sum((H // s) * (W // s) for s in strides)
    raw = rng.normal(size=(1, 4 * reg_max + c, n)) * 2
    # reference: anchor points cell by cell, DFL as an explicit expectation, sigmoid scores
    boxes, scores, i = [], [], 0
    for s in strides:
        for y in range(H // s):
            for x in range(W // s):
                d = []
                for side in range(4):
                    logits = raw[0, side * reg_max:(side + 1) * reg_max, i]
                    w = [math.exp(v) for v in logits]
                    d.append(sum(k * wk for k, wk in enumerate(w)) / sum(w))
                ax, ay = x + 0.5, y + 0.5
                boxes.append([(ax - d[0]) * s, (ay - d[1]) * s, (ax + d[2]) * s, (ay + d[3]) * s])
                scores.append([1 / (1 + math.exp(-v)) for v in raw[0, 4 * reg_max:, i]])
                i += 1
    ref = ref_pipeline([(boxes, scores)], 0.3, 0.5, 10)
    got = detections({"x": raw}, {"decode": "yolov8_dfl", "input_size": [H, W], "strides": strides,
                                  "reg_max": reg_max, **PARAMS})
    assert_same(got, ref)
    with pytest.raises(UserError, match="anchor points"):
        detections({"x": raw}, {"decode": "yolov8_dfl", "input_size": [64, 64], "strides": strides,
                                "reg_max": reg_max, "num_classes": c, **PARAMS})


@pytest.mark.parametrize("layout", ["channels_first", "channels_last"])
def test_yolov5_decoded_objectness_times_class(layout):
    rng = np.random.default_rng(2)
    head = v8_head(rng, c=4)
    obj = rng.uniform(size=(2, 50, 1))
    v5 = np.concatenate([head[..., :4], obj, head[..., 4:]], axis=2)  # (B, N, 5+C)
    cands = [(b, [list(o * np.array(s)) for o, s in zip(obj[i, :, 0], img_s)])
             for i, ((b, img_s)) in enumerate(ref_v8(head))]
    ref = ref_pipeline(cands, 0.3, 0.5, 10)
    given = v5.transpose(0, 2, 1) if layout == "channels_first" else v5
    assert_same(detections({"o": given}, {"decode": "yolov5", "layout": layout, **PARAMS}), ref)


def test_yolov5_raw_anchor_heads():
    rng = np.random.default_rng(4)
    strides, c = [8, 16], 2
    anchors = [[10, 13, 16, 30], [30, 61, 62, 45]]
    levels = [rng.normal(size=(1, 2 * (5 + c), 32 // s, 32 // s)) for s in strides]
    sig = lambda v: 1 / (1 + math.exp(-v))
    boxes, scores = [], []
    for lvl, (s, anc) in enumerate(zip(strides, anchors)):
        x = levels[lvl][0]
        for a in range(2):
            for gy in range(32 // s):
                for gx in range(32 // s):
                    v = [x[a * (5 + c) + k, gy, gx] for k in range(5 + c)]
                    cx, cy = (sig(v[0]) * 2 - 0.5 + gx) * s, (sig(v[1]) * 2 - 0.5 + gy) * s
                    w, h = (sig(v[2]) * 2) ** 2 * anc[2 * a], (sig(v[3]) * 2) ** 2 * anc[2 * a + 1]
                    boxes.append([cx - w / 2, cy - h / 2, cx + w / 2, cy + h / 2])
                    scores.append([sig(v[4]) * sig(v[5 + k]) for k in range(c)])
    ref = ref_pipeline([(boxes, scores)], 0.2, 0.5, 10)
    got = detections({"p3": levels[0], "p4": levels[1]},
                     {"decode": "yolov5_raw", "strides": strides, "anchors": anchors,
                      "head_outputs": {"levels": ["p3", "p4"]}, **{**PARAMS, "conf_threshold": 0.2}})
    assert_same(got, ref)


def test_models_that_ran_their_own_nms():
    boxes = np.array([[[1, 2, 11, 12], [5, 5, 9, 9], [0, 0, 0, 0]]], np.float32)
    scores = np.array([[0.9, 0.2, 0.0]], np.float32)
    classes = np.array([[1, 0, -1]])
    got = detections({"b": boxes, "s": scores, "c": classes, "n": np.array([[2]])},
                     {"decode": "boxes", "head_outputs": {"boxes": "b", "scores": "s", "classes": "c", "num": "n"},
                      "conf_threshold": 0.1})
    assert got["labels"][0].tolist() == [1, 0] and got["boxes"][0].tolist() == [[1, 2, 11, 12], [5, 5, 9, 9]]
    # ONNX NonMaxSuppression: selected (batch, class, box), boxes as y1, x1, y2, x2 (center_point_box 0)
    yx = np.array([[[2, 1, 12, 11], [5, 5, 9, 9]], [[0, 0, 4, 8], [1, 1, 2, 2]]], np.float32)
    cls_scores = np.array([[[0.1, 0.7], [0.8, 0.3]], [[0.6, 0.0], [0.0, 0.0]]], np.float32)  # (B, C, N)
    sel = np.array([[0, 1, 0], [0, 0, 1], [1, 0, 0], [-1, -1, -1]])
    got = detections({"sel": sel, "boxes": yx, "scores": cls_scores},
                     {"decode": "onnx_nms", "head_outputs": {"indices": "sel", "boxes": "boxes", "scores": "scores"}})
    assert got["boxes"][0].tolist() == [[1, 2, 11, 12], [5, 5, 9, 9]]
    assert got["scores"][0].tolist() == pytest.approx([0.8, 0.7]) and got["labels"][0].tolist() == [1, 0]
    assert got["boxes"][1].tolist() == [[0, 0, 8, 4]] and got["labels"][1].tolist() == [0]


def test_letterbox_undo_is_exact_near_the_borders():
    for size in ([37, 91], [91, 37], [64, 64], [10, 200]):
        meta = lb.plan(size, (64, 64))
        h, w = size
        # boxes touching each border of the original image, and one past it (clipped back)
        boxes = np.array([[0, 0, 3, 4], [w - 3, h - 2, w, h], [0, h - 1, w, h], [0.5, 0.25, w - 0.5, h - 0.25]])
        there = lb.forward_boxes(boxes, meta)
        assert there[:, [0, 2]].min() >= meta["pad"][0] - 1e-9 and there[:, [0, 2]].max() <= 64 - meta["pad"][0] + 1
        np.testing.assert_allclose(lb.undo_boxes(there, meta), boxes, rtol=0, atol=1e-9)
        past = there + np.array([-5, -5, 5, 5])  # into the padding: clipped to the image
        back = lb.undo_boxes(past, meta)
        assert back[:, [0, 1]].min() >= 0 and back[:, 2].max() <= w and back[:, 3].max() <= h
        assert back[1, 2] == w and back[1, 3] == h and back[0, 0] == 0 and back[0, 1] == 0


def test_letterbox_image_and_metadata():
    img = np.arange(30 * 60 * 3, dtype=np.int64).reshape(30, 60, 3) % 251
    meta = lb.plan(img.shape[:2], (32, 32))
    assert meta["resized"] == [16, 32] and meta["pad"] == [0, 8] and meta["scale"] == [32 / 60, 16 / 30]
    out = lb.apply(img.astype(np.uint8), meta, pad_value=114)
    assert out.shape == (32, 32, 3)
    assert (out[:8] == 114).all() and (out[24:] == 114).all()
    assert (out[8:24] == lb.to_u8(lb.resize_bilinear(img[None].astype(np.uint8), (16, 32))[0])).all()
    # the postprocess undoes it per image
    head = np.zeros((1, 1, 4 + 1))
    head[0, 0] = [16, 16, 8, 4, 0.9]  # centre of the input
    got = detections({"o": head}, {"decode": "yolov8", "layout": "channels_last"}, [meta])
    np.testing.assert_allclose(got["boxes"][0], [[(12 - 0) * 60 / 32, (14 - 8) * 30 / 16, 20 * 60 / 32, (18 - 8) * 30 / 16]])
