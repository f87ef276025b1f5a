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
# docs/kinds.md's detection part (ascendpipe.config.kinds_doc appends it to the eval kind's section)
DOC = """### Detection

`task: detection` scores boxes with COCO's mAP@[.5:.95] (`mAP50_95`, the key metric the build summary and
the report lead with), COCO's AP at IoU 0.5 (`coco_AP50`) and PASCAL VOC's AP50 (`voc_mAP50`; `mAP50` is
the same value under its older name), plus `delta_<name>` against `golden`. All are fractions: one point
of mAP is 0.01. Images are matched by order: the i-th sample the infer stage ran is the i-th image of the
ground truth.

**Ground truth** (`labels`; `params.gt_format: auto` tells them apart):

| format | `labels` is | image order | classes |
| --- | --- | --- | --- |
| COCO | an instances `.json` (`images`, `annotations` with `bbox` = x, y, width, height, `categories`) | as `images` lists them | class i = the i-th category by id; `iscrowd` read |
| VOC | a folder of `.xml` (`<object><name>`, `<difficult>`, `<bndbox>` xmin ymin xmax ymax) | file names, sorted | `params.class_names` (index order); boxes read as is (no -1) |
| YOLO | a folder of `.txt`, lines `class cx cy w h` normalised to the image | file names, sorted (`classes.txt` aside) | the class number; image sizes from `letterbox`'s metadata or `params.image_size` |
| list | `ground_truth.json` (or a folder holding it): `[{"boxes": [[x1, y1, x2, y2], ...], "labels": [...]}, ...]`, optional per-box `iscrowd`, `difficult`, `ignore` | the list | the label |

Boxes are continuous pixel coordinates of the original image (area = width x height).

**Predictions, two ways.** The built-in postprocess (`params.decode`) turns the model's raw output into
boxes, or a file of your own (`params.postprocess`, a `.py` file; its function `postprocess_function`):

| `decode` | the model output (`head_outputs` names it when the model has several) |
| --- | --- |
| `yolov8` | YOLOv8/v11 as ultralytics exports it: `(B, 4+C, N)` or `(B, N, 4+C)`: cx, cy, w, h in input pixels, class scores in [0, 1] |
| `yolov8_dfl` | the raw anchor-free head `(B, 4*reg_max + C, N)`: DFL bins per side (softmax, expected bin, x stride from the cell centres of each stride's grid), class logits (sigmoid); needs `input_size` or `letterbox` |
| `yolov5` | YOLOv5 as exported: `(B, N, 5+C)` (or transposed): cx, cy, w, h, objectness, class probabilities; score = objectness x class |
| `yolox` | YOLOX as `tools/export_onnx.py` exports it: `(B, N, 5+C)` per grid cell of raw dx, dy, log w, log h, objectness and class scores (sigmoid applied): xy = (d + cell) x stride, wh = exp(log wh) x stride from each stride's `H // s` x `W // s` grid (`strides`, YOLOX-P6: [8, 16, 32, 64]); score = objectness x class; needs `input_size` or `letterbox`. Exported with `--decode_in_inference` it holds pixels: `yolov5` |
| `yolov5_raw` | one raw head per stride (`head_outputs: {levels: [p3, p4, p5]}`), `(B, A*(5+C), H, W)` or `(B, A, H, W, 5+C)`, with `anchors` |
| `boxes` | boxes/scores/classes already chosen (an end-to-end export): `head_outputs: {boxes, scores, classes, num}`, `box_format` |
| `onnx_nms` | ONNX `NonMaxSuppression`: `head_outputs: {indices, boxes, scores}` (`selected_indices` (M, 3) = batch, class, box; boxes `(B, N, 4)` as `yxyx` unless `box_format` says; scores `(B, C, N)`) |

Layout `auto` takes the axis of size 4+C (5+C, 4*reg_max+C) when `num_classes` is given, else the
smaller of the last two; a square output needs `layout`. Then, per image: each box's best class (every
class over the threshold with `multi_label: true`), scores > `conf_threshold` (0.001), greedy NMS
suppressing IoU > `iou_threshold` (0.6) within a class (across classes with `agnostic_nms: true`), the
`max_det` (300) highest, and, with the `letterbox` input, each image's letterbox undone
(`x = (x' - left) / sx`, clipped to the image). `boxes` and `onnx_nms` run no NMS. These params are
recorded and keyed like any other; the record's `info.detection.postprocess` lists them with the
defaults in effect. COCO keeps the 100 (`max_detections`) best per image when it scores.

A postprocess file receives `outputs`, `{output name: array}` of the whole infer stage (batch axis first),
and, if it takes a second argument, `params.postprocess_params` (recorded and keyed). It returns
`{"boxes": [...], "scores": [...], "labels": [...]}`, one array per image: boxes `(N, 4)` as x1, y1, x2,
y2, scores `(N,)`, labels `(N,)` class indices (0..C-1, the ground truth's). Its boxes are in the model
input's pixels when `letterbox` is given (the eval undoes it), else in the original image's.

**Letterbox metadata** (`letterbox`: a file or a folder with `letterbox.json`), written by the built-in
data step `python -m ascendpipe.data.letterbox FRAMES.npz --size H W --out DIR --mean M --scale S`
(`images.npy`: float NCHW `(u8 - M) * S`; `u8/images.npy`: uint8 NHWC; `--resized DIR2`: the scaled,
unpadded frames, for an AIPP that pads): `{"images": [{"size": [h, w], "scale": [sx, sy], "pad": [left,
top], "input_size": [H, W]}, ...]}`.

**What it writes:** `metrics.json`; `detections.json`, the predictions as a COCO results list
(`image_id`, `category_id`: the ground truth's ids; `bbox` x, y, width, height; `score`) that pycocotools
loads as is; `ground_truth_coco.json`, the ground truth as COCO instances whatever it was read from.
Rounding: `detections.json` writes each `score` to 6 decimals and each `bbox` value to 4 (pixels),
after the letterbox is undone; the metrics are computed before that rounding, from float64 boxes, so
pycocotools on the two files may differ from `mAP50_95` in its last digits. The letterbox's own
rounding (ties half to even for the scaled size, half up for pixel values) is in
`ascendpipe.data.letterbox`:

```python
from pycocotools.coco import COCO
from pycocotools.cocoeval import COCOeval
gt = COCO("build/det_eval__fp16/ground_truth_coco.json")   # or your own instances json
ev = COCOeval(gt, gt.loadRes("build/det_eval__fp16/detections.json"), "bbox")
ev.evaluate(); ev.accumulate(); ev.summarize()              # ev.stats[0] == mAP50_95
```

**A worked example** (`pipelines/detect.yaml`): a YOLOv8-style export scored on host-letterboxed frames,
and an AIPP model that pads on the device:

```yaml
det_letterbox:
  kind: run
  cmd: python -m ascendpipe.data.letterbox data/detect/frames/val.npz --size 64 64 --out data/detect/val --mean 114 --scale 0.00392156862745098
  deps: [data/detect/frames]
  outs: [data/detect/val]
det_infer: {kind: infer, model: det_convert, inputs: data/detect/val/images.npy}
det_eval:
  kind: eval
  outputs: det_infer
  labels: data/detect/labels/val.json          # COCO instances; a VOC folder needs params.class_names
  letterbox: data/detect/val/letterbox.json
  golden: det_eval_golden
  params: {task: detection, decode: yolov8, conf_threshold: 0.001, iou_threshold: 0.6, max_det: 100}
```
"""

_NMS = ("conf_threshold", "iou_threshold", "max_det", "agnostic_nms", "multi_label")
# the settings each head uses, recorded with their defaults (the others only when given)
USED = {"yolov8": _NMS + ("layout",), "yolov5": _NMS + ("layout",), "yolov8_dfl": _NMS + ("layout", "strides", "reg_max"),
        "yolox": _NMS + ("layout", "strides"),
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
        from ascendpipe.metrics.detect_post import check_predictions

        try:
            pred = check_predictions(user_postprocess(outputs))
        except UserError as err:
            raise err.with_location(stage=ctx.name, field="postprocess") from None
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
        raise UserError("task 'detection' needs params.decode (yolov8, yolov8_dfl, yolov5, yolov5_raw, yolox, boxes, onnx_nms) "
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
