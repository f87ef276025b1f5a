"""The built-in detection postprocess: decode the head, filter by confidence, NMS, cut, undo the letterbox.

``detections(outputs, params, letterbox)`` returns ``{"boxes", "scores", "labels"}``, one array per
image, boxes ``x1, y1, x2, y2`` in the original image's pixels (the model input's without
``letterbox``). Params (the eval stage's, so recorded and part of its key):

- ``decode``: the head, ``yolov8`` | ``yolov8_dfl`` | ``yolov5`` | ``yolov5_raw`` | ``yolox`` (see
  ``ascendpipe.metrics.yolo_decode``), or ``boxes`` (the model outputs boxes ``(B, K, 4)``, scores
  ``(B, K)``, classes ``(B, K)`` and optionally a count ``(B,)``/``(B, 1)``: an end-to-end export) or
  ``onnx_nms`` (ONNX ``NonMaxSuppression``'s ``selected_indices (M, 3)`` = batch, class, box, with
  the boxes ``(B, N, 4)`` and scores ``(B, C, N)`` it ran on). ``boxes``/``onnx_nms`` run no NMS.
- ``conf_threshold`` (0.001, a box is kept when its score is > it), ``iou_threshold`` (0.6, NMS
  suppresses IoU > it), ``max_det`` (300 per image after NMS), ``agnostic_nms`` (false: per class),
  ``multi_label`` (false: each box its best class; true: every class scoring over the threshold).
- ``head_outputs``: which model output plays which part: ``{output: NAME}`` for the one-tensor
  heads (default: ``output_name``, else the only output), ``{levels: [NAMES]}`` for ``yolov5_raw``
  (stride order), ``{boxes, scores, classes, num}`` / ``{indices, boxes, scores}`` for the others.
- ``layout``, ``num_classes``, ``input_size`` ([H, W]: the DFL grid; default the letterbox's),
  ``strides`` ([8, 16, 32]), ``reg_max`` (16), ``anchors`` (YOLOv5's), ``box_format`` of given boxes
  (``xyxy``; ``onnx_nms`` defaults to ``yxyx``, ONNX's ``center_point_box: 0``; ``xywh`` = centre).
"""

from __future__ import annotations

import numpy as np

from ascendpipe.errors import UserError, few
from ascendpipe.metrics import yolo_decode
from ascendpipe.metrics.nms import nms

DECODERS = ("yolov8", "yolov8_dfl", "yolov5", "yolov5_raw", "yolox", "boxes", "onnx_nms")
BOX_FORMATS = ("xyxy", "xywh", "yxyx")
DEFAULTS = {"conf_threshold": 0.001, "iou_threshold": 0.6, "max_det": 300, "agnostic_nms": False,
            "multi_label": False, "layout": "auto", "strides": [8, 16, 32], "reg_max": 16}


def _output(outputs: dict, name: str | None, role: str):
    if name is not None:
        if name not in outputs:
            raise UserError(f"head_outputs.{role}: no output '{name}'; the model wrote: {few(sorted(outputs), 12)}")
        return outputs[name]
    if len(outputs) == 1:
        return next(iter(outputs.values()))
    raise UserError(f"the model wrote several outputs ({few(sorted(outputs), 12)}); name the {role} one in "
                    f"params.head_outputs.{role} (or params.output_name)")


def _to_xyxy(boxes: np.ndarray, fmt: str) -> np.ndarray:
    if fmt == "xyxy":
        return boxes
    if fmt == "yxyx":
        return boxes[..., [1, 0, 3, 2]]
    if fmt == "xywh":
        return yolo_decode.xywh_to_xyxy(boxes)
    raise UserError(f"box_format must be one of {', '.join(BOX_FORMATS)}, got {fmt!r}")


def candidates(outputs: dict, p: dict, input_hw) -> tuple[np.ndarray, np.ndarray]:
    """(boxes (B, N, 4) xyxy in input pixels, class scores (B, N, C)) of a YOLO head."""
    roles = p.get("head_outputs") or {}
    decode = p["decode"]
    layout, nc = p.get("layout", "auto"), p.get("num_classes")
    if decode == "yolov5_raw":
        names = roles.get("levels") or sorted(outputs)
        missing = [n for n in names if n not in outputs]
        if missing:
            raise UserError(f"head_outputs.levels: no output '{missing[0]}'; the model wrote: "
                            f"{few(sorted(outputs), 12)}")
        return yolo_decode.yolov5_raw([outputs[n] for n in names], p.get("strides", DEFAULTS["strides"]), p.get("anchors"))
    out = _output(outputs, roles.get("output", p.get("output_name")), "output")
    if decode == "yolov8":
        return yolo_decode.yolov8(out, layout, nc)
    if decode == "yolov5":
        return yolo_decode.yolov5(out, layout, nc)
    if decode == "yolov8_dfl":
        if input_hw is None:
            raise UserError("decode yolov8_dfl needs the model input size for its anchor grid: give params.input_size "
                            "[H, W] or the `letterbox` input")
        return yolo_decode.yolov8_dfl(out, input_hw, p.get("strides", DEFAULTS["strides"]),
                                      p.get("reg_max", DEFAULTS["reg_max"]), layout, nc)
    if decode == "yolox":
        if input_hw is None:
            raise UserError("decode yolox needs the model input size for its grid: give params.input_size [H, W] or "
                            "the `letterbox` input")
        return yolo_decode.yolox(out, input_hw, p.get("strides", DEFAULTS["strides"]), layout, nc)
    raise UserError(f"decode must be one of {', '.join(DECODERS)}, got {decode!r}")


def select(boxes: np.ndarray, scores: np.ndarray, p: dict) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """One image: confidence filter, NMS and the max_det cut -> (boxes, scores, labels)."""
    conf = p.get("conf_threshold", DEFAULTS["conf_threshold"])
    scores = np.where(np.isnan(scores), -np.inf, scores)
    if p.get("multi_label", False):
        i, j = np.nonzero(scores > conf)
        b, s, c = boxes[i], scores[i, j], j
    else:
        c = scores.argmax(axis=1) if scores.shape[1] else np.zeros(0, np.int64)
        s = scores[np.arange(scores.shape[0]), c] if scores.shape[1] else np.zeros(0)
        ok = s > conf
        b, s, c = boxes[ok], s[ok], c[ok]
    keep = nms(b, s, p.get("iou_threshold", DEFAULTS["iou_threshold"]),
               None if p.get("agnostic_nms", False) else c, p.get("max_det", DEFAULTS["max_det"]))
    return b[keep], s[keep], c[keep].astype(np.int64)


def _given(outputs: dict, p: dict) -> list[tuple[np.ndarray, np.ndarray, np.ndarray]]:
    """Per image (boxes xyxy, scores, labels) of a model that ran its own NMS."""
    roles = p.get("head_outputs") or {}
    for role in (("indices", "boxes", "scores") if p["decode"] == "onnx_nms" else ("boxes", "scores", "classes")):
        if role not in roles:
            raise UserError(f"decode {p['decode']} needs params.head_outputs.{role} (the output holding it); "
                            f"the model wrote: {few(sorted(outputs), 12)}")
    boxes = np.asarray(_output(outputs, roles["boxes"], "boxes"), dtype=np.float64)
    boxes = boxes[None] if boxes.ndim == 2 else boxes
    if p["decode"] == "onnx_nms":
        boxes = _to_xyxy(boxes, p.get("box_format", "yxyx"))
        scores = np.asarray(_output(outputs, roles["scores"], "scores"), dtype=np.float64)
        scores = scores[None] if scores.ndim == 2 else scores
        raw = np.asarray(_output(outputs, roles["indices"], "indices"))
        if raw.size % 3 or raw.dtype.kind not in "iuf":
            raise UserError(f"head_outputs.indices: shape {list(raw.shape)} ({raw.dtype}) is not (M, 3) rows of "
                            "batch, class, box indices")
        idx = raw.reshape(-1, 3).astype(np.int64)
        idx = idx[(idx >= 0).all(axis=1)]  # padded rows of a fixed-size export
        if scores.ndim != 3 or boxes.ndim != 3 or scores.shape[0] != boxes.shape[0] or scores.shape[2] != boxes.shape[1]:
            raise UserError(f"head_outputs: boxes {list(boxes.shape)} and scores {list(scores.shape)} are not (B, N, 4) "
                            "and (B, C, N) of one batch and box count")
        limits = (boxes.shape[0], scores.shape[1], boxes.shape[1])
        for column, (what, limit) in enumerate(zip(("batch", "class", "box"), limits)):
            beyond = np.nonzero(idx[:, column] >= limit)[0]
            if beyond.size:
                row = idx[beyond[0]]
                raise UserError(f"head_outputs.indices: row {list(map(int, row))} selects {what} {int(row[column])}, "
                                f"beyond the {limit} the model output holds; is this the NonMaxSuppression output of "
                                "these boxes and scores?")
        per = []
        for b in range(boxes.shape[0]):
            sel = idx[idx[:, 0] == b]
            per.append((boxes[b, sel[:, 2]], scores[b, sel[:, 1], sel[:, 2]], sel[:, 1]))
        return per
    boxes = _to_xyxy(boxes, p.get("box_format", "xyxy"))
    scores = np.asarray(_output(outputs, roles["scores"], "scores"), dtype=np.float64).reshape(boxes.shape[:2])
    classes = np.asarray(_output(outputs, roles["classes"], "classes")).reshape(boxes.shape[:2]).astype(np.int64)
    counts = None
    if roles.get("num"):
        counts = np.asarray(_output(outputs, roles["num"], "num")).reshape(-1).astype(np.int64)
        if counts.size != boxes.shape[0] or (counts < 0).any() or (counts > boxes.shape[1]).any():
            raise UserError(f"head_outputs.num: {counts.tolist()[:8]} is not one count per image between 0 and the "
                            f"{boxes.shape[1]} boxes each of the {boxes.shape[0]} images holds")
    per = []
    for b in range(boxes.shape[0]):
        n = boxes.shape[1] if counts is None else int(counts[b])
        per.append((boxes[b, :n], scores[b, :n], classes[b, :n]))
    return per


def detections(outputs: dict, params: dict, letterbox: list[dict] | None = None) -> dict:
    p = {**DEFAULTS, **{k: v for k, v in params.items() if v is not None}}
    input_hw = p.get("input_size") or (letterbox[0].get("input_size") if letterbox else None)
    if p["decode"] in ("boxes", "onnx_nms"):
        conf = p["conf_threshold"]
        per = []
        for b, s, c in _given(outputs, p):
            ok = (s > conf) & (c >= 0)
            order = np.argsort(-s[ok], kind="mergesort")[:p["max_det"]]
            per.append((b[ok][order], s[ok][order], c[ok][order]))
    else:
        boxes, scores = candidates(outputs, p, input_hw)
        from ascendpipe import ticker

        per = []
        for i in range(boxes.shape[0]):
            per.append(select(boxes[i], scores[i], p))
            ticker.report(i + 1, boxes.shape[0], "images")
    if letterbox is not None:
        if len(letterbox) != len(per):
            raise UserError(f"letterbox metadata lists {len(letterbox)} images, the model output {len(per)}")
        from ascendpipe.data.letterbox import undo_boxes

        per = [(undo_boxes(b, m), s, c) for (b, s, c), m in zip(per, letterbox)]
    return {"boxes": [b for b, _, _ in per], "scores": [s for _, s, _ in per], "labels": [c for _, _, c in per]}


def check_predictions(pred: dict, images: int | None = None) -> dict:
    """A postprocess's return value checked before use: per image boxes ``(N, 4)``, scores ``(N,)`` and
    labels ``(N,)`` (whole, non-negative), all finite; as float64/int64 arrays. One line naming the image
    and the field otherwise (a user's function returning ragged lists was a numpy traceback)."""
    if not isinstance(pred, dict) or not {"boxes", "scores", "labels"} <= set(pred):
        raise UserError("the detection postprocess must return a dict with 'boxes', 'scores' and 'labels'")
    lists = {}
    for name in ("boxes", "scores", "labels"):
        value = pred[name]
        if isinstance(value, np.ndarray) and value.ndim >= 1:
            value = list(value)
        if not isinstance(value, (list, tuple)):
            raise UserError(f"the detection postprocess returned {name} as {type(value).__name__}; expected one "
                            "array per image")
        lists[name] = value
    counts = {len(v) for v in lists.values()}
    if len(counts) != 1:
        raise UserError("the detection postprocess returned " + ", ".join(f"{len(v)} {k}" for k, v in lists.items())
                        + "; give one of each per image")
    out = {"boxes": [], "scores": [], "labels": []}
    for i, (b, s, c) in enumerate(zip(lists["boxes"], lists["scores"], lists["labels"])):
        try:
            boxes = np.asarray(b, dtype=np.float64)
            scores = np.asarray(s, dtype=np.float64).reshape(-1)
            labels = np.asarray(c, dtype=np.float64).reshape(-1)
        except (TypeError, ValueError) as exc:
            raise UserError(f"the detection postprocess's image {i}: not numbers of one shape ({exc})") from None
        if boxes.size == 0:
            boxes = boxes.reshape(0, 4)
        if boxes.ndim != 2 or boxes.shape[1] != 4:
            raise UserError(f"the detection postprocess's image {i}: boxes of shape {list(boxes.shape)}; expected (N, 4) "
                            "as x1, y1, x2, y2")
        if not (scores.size == labels.size == boxes.shape[0]):
            raise UserError(f"the detection postprocess's image {i}: {boxes.shape[0]} boxes, {scores.size} scores, "
                            f"{labels.size} labels; give one of each per box")
        for name, arr in (("boxes", boxes), ("scores", scores), ("labels", labels)):
            if not np.isfinite(arr).all():
                raise UserError(f"the detection postprocess's image {i}: {name} hold NaN or inf")
        if (labels < 0).any() or (labels != np.round(labels)).any():
            raise UserError(f"the detection postprocess's image {i}: labels must be class indices (whole, 0 or more)")
        out["boxes"].append(boxes)
        out["scores"].append(scores)
        out["labels"].append(labels.astype(np.int64))
    return out
