"""Detection mAP: COCO-style mAP@[.5:.95] and AP@0.5, and VOC mAP@0.5 (pure numpy, float64).

Inputs are per image: predicted boxes (N, 4) as ``x1, y1, x2, y2`` in continuous coordinates
(area = width x height, no +1), scores (N,), labels (N,); ground-truth boxes (M, 4) and labels (M,),
and optional per-box flags ``iscrowd`` (COCO), ``ignore`` (COCO's field) and ``difficult`` (VOC).

COCO (``mAP50_95`` and ``coco_AP50``) follows pycocotools' COCOeval for iouType "bbox", area range
"all": per image and class, detections sorted by score (stable) and cut to ``max_detections``; a
crowd box (``iscrowd``) is an ignored ground truth whose IoU is intersection / detection area and
that any number of detections may match; the others are matched first (a detection already matched
to a regular box stops before an ignored one); a detection matched to an ignored box counts neither
way; among equal IoUs the later ground truth wins. Precision made monotone and read at the 101
recall points 0, 0.01, ..., 1; averaged over t = 0.50, 0.55, ..., 0.95 and over the classes with at
least one non-ignored box. ``ignore`` has no effect, as in pycocotools: ``COCOeval._prepare``
overwrites it with ``iscrowd`` (pycocotools/cocoeval.py:108-109).

VOC (``voc_mAP50``; ``mAP50`` is the same value, its older name) follows the PASCAL VOC devkit
(``VOCevalcls``/``VOCevaldet``): detections of a class sorted by score over all images (stable);
each is matched to the ground truth it overlaps most in its image (the first of equal IoUs); a true
positive if IoU >= 0.5 (the devkit's ``ovmax >= minoverlap``; mmdet's ``eval_map`` too) and that box
is not yet taken, else a false positive; one matched to a ``difficult`` box counts neither way, and
difficult boxes are not counted as positives (``ignore`` and ``iscrowd`` boxes are treated as
difficult here). ``voc_mode``: ``"voc12"`` (default) is the area under the monotone precision
envelope at every recall step (VOC2010-2012); ``"voc07"`` the 11-point average of the best
precision at recall >= 0, 0.1, ..., 1 (VOC2007). Classes without a non-difficult box are left out
of the mean. Continuous coordinates, so IoUs differ from the original devkit's +1 pixel convention.

Ties: detections with equal scores keep their input order (images in order, boxes in order within
an image), for both; that order decides which of them takes a ground truth first.
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
    crowd: np.ndarray  # bool per ground truth (COCO iscrowd)
    difficult: np.ndarray  # bool per ground truth: ignored by VOC (difficult, ignore or crowd)


def _flags(values, count: int, name: str, i: int) -> np.ndarray:
    if values is None:
        return np.zeros(count, bool)
    flags = np.asarray(values).reshape(-1).astype(bool)
    if flags.size != count:
        raise UserError(f"detection_map: image {i}: {count} ground-truth boxes but {flags.size} '{name}' flags")
    return flags


def _images(pred_boxes, pred_scores, pred_labels, gt_boxes, gt_labels, iscrowd=None, ignore=None,
            difficult=None) -> list[_Image]:
    lists = [pred_boxes, pred_scores, pred_labels, gt_boxes, gt_labels]
    if len({len(x) for x in lists}) != 1:
        raise UserError("detection_map: give the same number of images for predictions and ground truth "
                        f"(got {[len(x) for x in lists]})")
    for name, flags in (("iscrowd", iscrowd), ("ignore", ignore), ("difficult", difficult)):
        if flags is not None and len(flags) != len(gt_boxes):
            raise UserError(f"detection_map: '{name}' has {len(flags)} images, the ground truth {len(gt_boxes)}")
    images = []
    for i, (pb, ps, pl, gb, gl) in enumerate(zip(*lists)):
        gb, gl = np.asarray(gb, np.float64).reshape(-1, 4), np.asarray(gl).reshape(-1)
        crowd = _flags(None if iscrowd is None else iscrowd[i], len(gb), "iscrowd", i)
        ignored = _flags(None if ignore is None else ignore[i], len(gb), "ignore", i)
        hard = _flags(None if difficult is None else difficult[i], len(gb), "difficult", i)
        img = _Image(np.asarray(pb, np.float64).reshape(-1, 4), np.asarray(ps, np.float64).reshape(-1),
                     np.asarray(pl).reshape(-1), gb, gl, crowd, hard | ignored | crowd)
        if not (len(img.boxes) == len(img.scores) == len(img.labels)):
            raise UserError(f"detection_map: image {i}: {len(img.boxes)} boxes, {len(img.scores)} scores, "
                            f"{len(img.labels)} labels")
        if len(img.gt_boxes) != len(img.gt_labels):
            raise UserError(f"detection_map: image {i}: {len(img.gt_boxes)} ground-truth boxes but "
                            f"{len(img.gt_labels)} labels")
        img.scores = np.where(np.isnan(img.scores), -np.inf, img.scores)
        images.append(img)
    return images


def _crowd_iou(det: np.ndarray, gt: np.ndarray, crowd: np.ndarray) -> np.ndarray:
    """IoU, except against a crowd box: intersection / detection area (pycocotools' maskUtils.iou)."""
    iou = box_iou(det, gt)
    if crowd.any():
        iw = np.minimum(det[:, None, 2], gt[None, :, 2]) - np.maximum(det[:, None, 0], gt[None, :, 0])
        ih = np.minimum(det[:, None, 3], gt[None, :, 3]) - np.maximum(det[:, None, 1], gt[None, :, 1])
        inter = np.clip(iw, 0, None) * np.clip(ih, 0, None)
        area = ((det[:, 2] - det[:, 0]) * (det[:, 3] - det[:, 1]))[:, None]
        with np.errstate(invalid="ignore", divide="ignore"):
            over_det = np.where(area > 0, inter / area, 0.0)
        iou = np.where(crowd[None, :], over_det, iou)
    return iou


def _coco_match(iou: np.ndarray, ignored: np.ndarray, crowd: np.ndarray, thr: float) -> tuple[np.ndarray, np.ndarray]:
    """(matched, matched-to-ignored) per detection at one threshold; gts ordered regular first."""
    n_det, n_gt = iou.shape
    taken = np.zeros(n_gt, bool)
    matched, on_ignored = np.zeros(n_det, bool), np.zeros(n_det, bool)
    for d in range(n_det):
        best, best_iou = -1, min(thr, 1 - 1e-10)
        for g in range(n_gt):
            if taken[g] and not crowd[g]:
                continue
            if best > -1 and not ignored[best] and ignored[g]:
                break  # matched a regular box already: ignored ones come after
            if iou[d, g] < best_iou:
                continue
            best, best_iou = g, iou[d, g]  # a later gt with equal IoU wins
        if best >= 0:
            taken[best] = True
            matched[d], on_ignored[d] = True, ignored[best]
    return matched, on_ignored


def _coco_class_ap(images: list[_Image], cls, max_detections: int) -> np.ndarray | None:
    """AP of one class at each COCO IoU threshold; None when it has no non-ignored ground truth."""
    thresholds = np.asarray(COCO_IOU_THRESHOLDS)
    scores, matched, skipped, num_gt = [], [], [], 0
    for img in images:
        sel_gt = img.gt_labels == cls
        order_gt = np.argsort(img.crowd[sel_gt], kind="mergesort")  # regular boxes first
        gt, crowd = img.gt_boxes[sel_gt][order_gt], img.crowd[sel_gt][order_gt]
        sel = img.labels == cls
        order = np.argsort(-img.scores[sel], kind="mergesort")[:max_detections]
        det, det_scores = img.boxes[sel][order], img.scores[sel][order]
        num_gt += int((~crowd).sum())
        hits = np.zeros((len(thresholds), len(det)), dtype=bool)
        ignore = np.zeros((len(thresholds), len(det)), dtype=bool)
        if len(det) and len(gt):
            iou = _crowd_iou(det, gt, crowd)
            for t, thr in enumerate(thresholds):
                hits[t], ignore[t] = _coco_match(iou, crowd, crowd, thr)
        scores.append(det_scores)
        matched.append(hits)
        skipped.append(ignore)
    if num_gt == 0:
        return None
    all_scores = np.concatenate(scores) if scores else np.zeros(0)
    order = np.argsort(-all_scores, kind="mergesort")
    hits = np.concatenate(matched, axis=1)[:, order] if matched else np.zeros((len(thresholds), 0), bool)
    ignore = np.concatenate(skipped, axis=1)[:, order] if skipped else np.zeros((len(thresholds), 0), bool)
    tp = np.cumsum(hits & ~ignore, axis=1).astype(np.float64)
    fp = np.cumsum(~hits & ~ignore, axis=1).astype(np.float64)
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


VOC_MODES = ("voc12", "voc07")


def _voc_class_ap(images: list[_Image], cls, iou_threshold: float = 0.5, mode: str = "voc12") -> float | None:
    """VOC AP of one class; None when it has no non-difficult ground truth (left out of the mean)."""
    entries, num_gt = [], 0
    for i, img in enumerate(images):
        num_gt += int(((img.gt_labels == cls) & ~img.difficult).sum())
        for d in np.nonzero(img.labels == cls)[0]:
            entries.append((img.scores[d], i, d))
    if num_gt == 0:
        return None
    order = sorted(range(len(entries)), key=lambda e: -entries[e][0])  # stable, like the devkit's sort
    taken = {i: np.zeros(int((img.gt_labels == cls).sum()), bool) for i, img in enumerate(images)}
    tp, fp = np.zeros(len(entries)), np.zeros(len(entries))
    for rank, e in enumerate(order):
        _, i, d = entries[e]
        sel = images[i].gt_labels == cls
        gt, hard = images[i].gt_boxes[sel], images[i].difficult[sel]
        if len(gt) == 0:
            fp[rank] = 1.0
            continue
        iou = box_iou(images[i].boxes[d:d + 1], gt)[0]
        best = int(np.argmax(iou))
        if iou[best] >= iou_threshold:
            if hard[best]:
                continue  # a difficult box: neither a hit nor a false alarm
            if not taken[i][best]:
                taken[i][best] = True
                tp[rank] = 1.0
                continue
        fp[rank] = 1.0
    ctp, cfp = np.cumsum(tp), np.cumsum(fp)
    recall = ctp / num_gt
    precision = ctp / np.maximum(ctp + cfp, np.finfo(np.float64).eps)
    if mode == "voc07":  # 11 points: the best precision at recall >= 0, 0.1, ..., 1
        return float(np.mean([precision[recall >= t].max() if (recall >= t).any() else 0.0
                              for t in np.linspace(0.0, 1.0, 11)]))
    mrec = np.r_[0.0, recall, 1.0]
    mpre = np.r_[0.0, precision, 0.0]
    mpre = np.maximum.accumulate(mpre[::-1])[::-1]
    steps = np.nonzero(mrec[1:] != mrec[:-1])[0]
    return float(((mrec[steps + 1] - mrec[steps]) * mpre[steps + 1]).sum())


def detection_map(pred_boxes, pred_scores, pred_labels, gt_boxes, gt_labels, *,
                  max_detections: int = 100, iscrowd=None, ignore=None, difficult=None,
                  voc_mode: str = "voc12") -> dict:
    """``{"voc_mAP50", "mAP50" (the same VOC value, its older name), "voc_mode", "coco_AP50",
    "coco_mAP50" (the same, its older name), "mAP50_95" (COCO), "classes"}``; see the module doc.
    ``iscrowd``, ``ignore``, ``difficult``: per image, one flag per ground-truth box (optional)."""
    if voc_mode not in VOC_MODES:
        raise UserError(f"detection_map: voc_mode must be one of {', '.join(VOC_MODES)}, got {voc_mode!r}")
    images = _images(pred_boxes, pred_scores, pred_labels, gt_boxes, gt_labels, iscrowd, ignore, difficult)
    classes = np.unique(np.concatenate([img.gt_labels for img in images])) if images else np.zeros(0)
    if classes.size == 0:
        raise UserError("detection_map: no ground-truth boxes, so there is nothing to measure")
    coco = [ap for ap in (_coco_class_ap(images, c, max_detections) for c in classes) if ap is not None]
    voc = [ap for ap in (_voc_class_ap(images, c, mode=voc_mode) for c in classes) if ap is not None]
    coco_all = np.stack(coco) if coco else np.full((1, len(COCO_IOU_THRESHOLDS)), np.nan)
    voc_map = float(np.mean(voc)) if voc else float("nan")
    return {"voc_mAP50": voc_map, "mAP50": voc_map, "voc_mode": voc_mode,
            "coco_AP50": float(coco_all[:, 0].mean()), "coco_mAP50": float(coco_all[:, 0].mean()),
            "mAP50_95": float(coco_all.mean()), "classes": int(classes.size)}
