"""The detection eval: predictions (built-in postprocess or the user's), ground truth in any of the
formats ``ascendpipe.metrics.ground_truth`` reads, COCO/VOC mAP, and the files it writes:

- ``detections.json``: the predictions as a COCO results list (pycocotools' ``loadRes`` takes it as
  is; image and category ids those of the ground truth);
- ``ground_truth_coco.json``: the ground truth as a COCO instances json, whatever it was read from,
  so ``COCOeval(COCO(gt), COCO(gt).loadRes(dets), "bbox")`` reruns the COCO numbers as they are.
"""

from __future__ import annotations

import json
import os
from pathlib import Path

from ascendpipe.errors import Location, UserError
from ascendpipe.stages.base import StageContext

POST_KEYS = ("decode", "conf_threshold", "iou_threshold", "max_det", "agnostic_nms", "multi_label", "layout",
             "num_classes", "input_size", "strides", "reg_max", "anchors", "head_outputs", "box_format", "output_name")
_NMS = ("conf_threshold", "iou_threshold", "max_det", "agnostic_nms", "multi_label")
# the settings each head uses, recorded with their defaults (the others only when given)
USED = {"yolov8": _NMS + ("layout",), "yolov5": _NMS + ("layout",), "yolov8_dfl": _NMS + ("layout", "strides", "reg_max"),
        "yolov5_raw": _NMS + ("strides",), "boxes": ("conf_threshold", "max_det"), "onnx_nms": ("conf_threshold", "max_det")}
DETECTIONS_FILE = "detections.json"
GT_COCO_FILE = "ground_truth_coco.json"


def _write_json(path: Path, value) -> None:
    tmp = path.with_name(path.name + ".tmp")
    tmp.write_text(json.dumps(value, separators=(",", ":")) + "\n")
    os.replace(tmp, path)


def detection_metrics(ctx: StageContext, outputs: dict, user_postprocess) -> tuple[dict, dict]:
    """(metrics, what to record: the postprocess settings in effect, the ground truth's format).
    ``outputs``: ``{name: array}`` of the infer stage; ``user_postprocess``: the user's function, or None."""
    from ascendpipe.data.letterbox import read_meta
    from ascendpipe.metrics import detection_map
    from ascendpipe.metrics import ground_truth as gt
    from ascendpipe.metrics.detect_post import DEFAULTS, detections

    p = ctx.params
    where = lambda field: Location(stage=ctx.name, field=field)
    letterbox = None
    if ctx.inputs.get("letterbox"):
        try:
            letterbox = read_meta(ctx.inputs["letterbox"])
        except UserError as err:
            raise err.with_location(stage=ctx.name, field="letterbox") from None
    if user_postprocess is not None:
        pred = user_postprocess(outputs)
        if not isinstance(pred, dict) or not {"boxes", "scores", "labels"} <= set(pred):
            raise UserError("the detection postprocess must return a dict with 'boxes', 'scores' and 'labels'",
                            where("postprocess"))
        if letterbox is not None:  # the user's boxes are in the model input's pixels, like the built-in's
            from ascendpipe.data.letterbox import undo_boxes

            if len(letterbox) != len(pred["boxes"]):
                raise UserError(f"letterbox metadata lists {len(letterbox)} images, the postprocess returned "
                                f"{len(pred['boxes'])}", where("letterbox"))
            pred = {**pred, "boxes": [undo_boxes(b, m) for b, m in zip(pred["boxes"], letterbox)]}
        settings = {"postprocess": p["postprocess"], "postprocess_params": p.get("postprocess_params") or {}}
    elif p.get("decode"):
        post = {k: p[k] for k in POST_KEYS if k in p}
        try:
            pred = detections(outputs, post, letterbox)
        except UserError as err:
            raise err.with_location(stage=ctx.name, field="decode") from None
        settings = {**{k: v for k, v in DEFAULTS.items() if k in USED.get(p["decode"], ())}, **post}
    else:
        raise UserError("task 'detection' needs params.decode (yolov8, yolov8_dfl, yolov5, yolov5_raw, boxes, onnx_nms) "
                        "or params.postprocess (a .py file returning boxes, scores and labels per image)",
                        Location(stage=ctx.name))
    sizes = [m["size"] for m in letterbox] if letterbox and all("size" in m for m in letterbox) else None
    if sizes is None and p.get("image_size"):
        sizes = [list(p["image_size"])]
    try:
        truth = gt.read(ctx.inputs["labels"], p.get("gt_format", "auto"), class_names=p.get("class_names"), sizes=sizes)
    except UserError as err:
        raise err.with_location(stage=ctx.name, field="labels") from None
    if len(truth.images) != len(pred["boxes"]):
        raise UserError(f"the ground truth ({truth.format}) has {len(truth.images)} images, the predictions "
                        f"{len(pred['boxes'])}; they must list the same images in the same order", where("labels"))
    if truth.sizes is None and sizes is not None and len(sizes) == len(truth.images):
        truth.sizes = sizes

    def flags(name):  # per-box flags, given for some images or none
        if not any(name in t for t in truth.images):
            return None
        return [t.get(name) or [0] * len(t["boxes"]) for t in truth.images]

    try:
        result = detection_map(pred["boxes"], pred["scores"], pred["labels"],
                               [t["boxes"] for t in truth.images], [t["labels"] for t in truth.images],
                               max_detections=p.get("max_detections", 100), iscrowd=flags("iscrowd"),
                               ignore=flags("ignore"), difficult=flags("difficult"),
                               voc_mode=p.get("voc_mode", "voc12"))
    except UserError as err:
        raise err.with_location(stage=ctx.name, field="labels") from None
    _write_json(ctx.out_dir / DETECTIONS_FILE, gt.coco_results(pred, truth))
    _write_json(ctx.out_dir / GT_COCO_FILE, gt.coco_ground_truth(truth))
    n_boxes = sum(len(b) for b in pred["boxes"])
    ctx.say(f"detection: {len(truth.images)} images, {n_boxes} boxes kept, ground truth read as {truth.format}"
            + ("; letterbox undone per image" if letterbox else ""))
    metrics = {k: result[k] for k in ("voc_mAP50", "coco_AP50", "mAP50_95", "mAP50")}
    return metrics, {"postprocess": settings, "ground_truth": truth.format,
                     "max_detections": p.get("max_detections", 100), "voc_mode": p.get("voc_mode", "voc12")}
