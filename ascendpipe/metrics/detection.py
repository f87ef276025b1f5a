"""Detection mAP: COCO-style mAP@[.5:.95] and VOC mAP@0.5 (pure numpy, float64).

Inputs are per image: predicted boxes (N, 4) as ``x1, y1, x2, y2`` in continuous coordinates
(area = width x height, no +1), scores (N,), labels (N,); ground-truth boxes (M, 4) and labels (M,).
Classes are those with at least one ground-truth box; the mean is over them.

``mAP50_95`` follows pycocotools' COCOeval for area range "all": per image and class, detections
sorted by score (stable) and cut to ``max_detections``; each is matched to the highest-IoU
ground truth not yet matched with IoU >= t; precision made monotone and read at the 101 recall
points 0, 0.01, ..., 1; averaged over t = 0.50, 0.55, ..., 0.95 and over classes. No crowd boxes.

``mAP50`` follows the PASCAL VOC 2010-2012 devkit (``VOCevalcls``/``voc_eval`` with
``use_07_metric=False``): detections of a class sorted by score over all images; each is matched to
the ground truth it overlaps most in its image, a true positive if IoU > 0.5 (strictly) and that
box is not yet taken, else a false positive; AP is the area under the monotone precision envelope
at every recall step ("all-point" interpolation, not the 11-point VOC2007 metric). No "difficult"
flags. Continuous coordinates, so IoUs differ from the original devkit's +1 pixel convention.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from ascendpipe.errors import UserError

COCO_IOU_THRESHOLDS = tuple(np.round(np.linspace(0.5, 0.95, 10), 2))
COCO_RECALL_POINTS = np.linspace(0.0, 1.0, 101)


def box_iou(a: np.ndarray, b: np.ndarray) -> np.ndarray:
    """IoU matrix between xyxy boxes a (N, 4) and b (M, 4)."""
    a = np.asarray(a, dtype=np.float64).reshape(-1, 4)
    b = np.asarray(b, dtype=np.float64).reshape(-1, 4)
    iw = np.minimum(a[:, None, 2], b[None, :, 2]) - np.maximum(a[:, None, 0], b[None, :, 0])
    ih = np.minimum(a[:, None, 3], b[None, :, 3]) - np.maximum(a[:, None, 1], b[None, :, 1])
    inter = np.clip(iw, 0, None) * np.clip(ih, 0, None)
    area_a = (a[:, 2] - a[:, 0]) * (a[:, 3] - a[:, 1])
    area_b = (b[:, 2] - b[:, 0]) * (b[:, 3] - b[:, 1])
    union = area_a[:, None] + area_b[None, :] - inter
    with np.errstate(invalid="ignore", divide="ignore"):
        iou = np.where(union > 0, inter / union, 0.0)
    return iou


@dataclass
class _Image:
    boxes: np.ndarray
    scores: np.ndarray
    labels: np.ndarray
    gt_boxes: np.ndarray
    gt_labels: np.ndarray


def _images(pred_boxes, pred_scores, pred_labels, gt_boxes, gt_labels) -> list[_Image]:
    lists = [pred_boxes, pred_scores, pred_labels, gt_boxes, gt_labels]
    if len({len(x) for x in lists}) != 1:
        raise UserError("detection_map: give the same number of images for predictions and ground truth "
                        f"(got {[len(x) for x in lists]})")
    images = []
    for i, (pb, ps, pl, gb, gl) in enumerate(zip(*lists)):
        img = _Image(np.asarray(pb, np.float64).reshape(-1, 4), np.asarray(ps, np.float64).reshape(-1),
                     np.asarray(pl).reshape(-1), np.asarray(gb, np.float64).reshape(-1, 4), np.asarray(gl).reshape(-1))
        if not (len(img.boxes) == len(img.scores) == len(img.labels)):
            raise UserError(f"detection_map: image {i}: {len(img.boxes)} boxes, {len(img.scores)} scores, "
                            f"{len(img.labels)} labels")
        if len(img.gt_boxes) != len(img.gt_labels):
            raise UserError(f"detection_map: image {i}: {len(img.gt_boxes)} ground-truth boxes but "
                            f"{len(img.gt_labels)} labels")
        img.scores = np.where(np.isnan(img.scores), -np.inf, img.scores)
        images.append(img)
    return images


def _coco_class_ap(images: list[_Image], cls, max_detections: int) -> np.ndarray:
    """AP of one class at each COCO IoU threshold."""
    thresholds = np.asarray(COCO_IOU_THRESHOLDS)
    scores, matched, num_gt = [], [], 0
    for img in images:
        gt = img.gt_boxes[img.gt_labels == cls]
        sel = img.labels == cls
        order = np.argsort(-img.scores[sel], kind="mergesort")[:max_detections]
        det, det_scores = img.boxes[sel][order], img.scores[sel][order]
        num_gt += len(gt)
        hits = np.zeros((len(thresholds), len(det)), dtype=bool)
        if len(det) and len(gt):
            iou = box_iou(det, gt)
            for t, thr in enumerate(thresholds):
                taken = np.zeros(len(gt), dtype=bool)
                for d in range(len(det)):
                    best, best_iou = -1, min(thr, 1 - 1e-10)
                    for g in range(len(gt)):  # pycocotools: a later gt with equal IoU wins
                        if not taken[g] and iou[d, g] >= best_iou:
                            best, best_iou = g, iou[d, g]
                    if best >= 0:
                        taken[best] = True
                        hits[t, d] = True
        scores.append(det_scores)
        matched.append(hits)
    all_scores = np.concatenate(scores) if scores else np.zeros(0)
    order = np.argsort(-all_scores, kind="mergesort")
    hits = np.concatenate(matched, axis=1)[:, order] if matched else np.zeros((len(thresholds), 0), bool)
    tp = np.cumsum(hits, axis=1).astype(np.float64)
    fp = np.cumsum(~hits, axis=1).astype(np.float64)
    aps = np.zeros(len(thresholds))
    for t in range(len(thresholds)):
        recall = tp[t] / num_gt
        precision = tp[t] / (tp[t] + fp[t] + np.spacing(1))
        precision = np.maximum.accumulate(precision[::-1])[::-1] if precision.size else precision
        idx = np.searchsorted(recall, COCO_RECALL_POINTS, side="left")
        sampled = np.zeros(len(COCO_RECALL_POINTS))
        ok = idx < precision.size
        sampled[ok] = precision[idx[ok]]
        aps[t] = sampled.mean()
    return aps


def _voc_class_ap(images: list[_Image], cls, iou_threshold: float = 0.5) -> float:
    entries, num_gt = [], 0
    for i, img in enumerate(images):
        num_gt += int((img.gt_labels == cls).sum())
        for d in np.nonzero(img.labels == cls)[0]:
            entries.append((img.scores[d], i, d))
    order = sorted(range(len(entries)), key=lambda e: -entries[e][0])  # stable, like the devkit's argsort
    taken = {i: np.zeros(int((img.gt_labels == cls).sum()), bool) for i, img in enumerate(images)}
    tp = np.zeros(len(entries))
    for rank, e in enumerate(order):
        _, i, d = entries[e]
        gt = images[i].gt_boxes[images[i].gt_labels == cls]
        if len(gt) == 0:
            continue
        iou = box_iou(images[i].boxes[d:d + 1], gt)[0]
        best = int(np.argmax(iou))
        if iou[best] > iou_threshold and not taken[i][best]:
            taken[i][best] = True
            tp[rank] = 1.0
    ctp = np.cumsum(tp)
    recall = ctp / num_gt
    precision = ctp / np.maximum(np.arange(1, len(tp) + 1), np.finfo(np.float64).eps)
    mrec = np.r_[0.0, recall, 1.0]
    mpre = np.r_[0.0, precision, 0.0]
    mpre = np.maximum.accumulate(mpre[::-1])[::-1]
    steps = np.nonzero(mrec[1:] != mrec[:-1])[0]
    return float(((mrec[steps + 1] - mrec[steps]) * mpre[steps + 1]).sum())


def detection_map(pred_boxes, pred_scores, pred_labels, gt_boxes, gt_labels, *,
                  max_detections: int = 100) -> dict:
    """``{"mAP50": VOC all-point AP@0.5, "mAP50_95": COCO AP@[.5:.95], "classes": n}``; see the module doc."""
    images = _images(pred_boxes, pred_scores, pred_labels, gt_boxes, gt_labels)
    classes = np.unique(np.concatenate([img.gt_labels for img in images])) if images else np.zeros(0)
    if classes.size == 0:
        raise UserError("detection_map: no ground-truth boxes, so there is nothing to measure")
    coco = np.stack([_coco_class_ap(images, c, max_detections) for c in classes])
    voc = [_voc_class_ap(images, c) for c in classes]
    return {"mAP50": float(np.mean(voc)), "mAP50_95": float(coco.mean()), "classes": int(classes.size),
            "coco_mAP50": float(coco[:, 0].mean())}
