"""Greedy non-maximum suppression (pure numpy, float64), class-aware or class-agnostic.

The rule is the one torchvision's ``nms`` and ultralytics' ``non_max_suppression`` apply: boxes in
``x1, y1, x2, y2`` (continuous, area = width x height), sorted by score, highest first (a stable
sort: among equal scores the earlier box goes first); a box is kept unless a kept box overlaps it
with IoU > ``iou_threshold`` (strictly greater). Per class: boxes of different classes never
suppress each other (ultralytics' trick of offsetting each class's boxes apart gives the same).

Vectorised: the IoU of each kept box against all later candidates is one numpy row, so the loop
runs once per kept box, not once per pair.
"""

from __future__ import annotations

import numpy as np


def _iou_row(box: np.ndarray, others: np.ndarray) -> np.ndarray:
    iw = np.minimum(box[2], others[:, 2]) - np.maximum(box[0], others[:, 0])
    ih = np.minimum(box[3], others[:, 3]) - np.maximum(box[1], others[:, 1])
    inter = np.clip(iw, 0, None) * np.clip(ih, 0, None)
    union = (box[2] - box[0]) * (box[3] - box[1]) + (others[:, 2] - others[:, 0]) * (others[:, 3] - others[:, 1]) - inter
    with np.errstate(invalid="ignore", divide="ignore"):
        return np.where(union > 0, inter / union, 0.0)


def nms(boxes, scores, iou_threshold: float, labels=None, max_det: int | None = None) -> np.ndarray:
    """Indices of the kept boxes, highest score first. With ``labels``, only boxes of the same label
    suppress each other (per-class NMS); without, every box competes (class-agnostic)."""
    boxes = np.asarray(boxes, dtype=np.float64).reshape(-1, 4)
    scores = np.asarray(scores, dtype=np.float64).reshape(-1)
    order = np.argsort(-scores, kind="mergesort")
    boxes_sorted = boxes[order]
    same = None if labels is None else np.asarray(labels).reshape(-1)[order]
    alive = np.ones(order.size, bool)
    keep: list[int] = []
    for i in range(order.size):
        if not alive[i]:
            continue
        keep.append(int(order[i]))
        if max_det is not None and len(keep) >= max_det:
            break
        rest = np.arange(i + 1, order.size)[alive[i + 1:]]
        if rest.size == 0:
            break
        over = _iou_row(boxes_sorted[i], boxes_sorted[rest]) > iou_threshold
        if same is not None:
            over &= same[rest] == same[i]
        alive[rest[over]] = False
    return np.asarray(keep, dtype=np.int64)
