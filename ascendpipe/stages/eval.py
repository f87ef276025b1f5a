"""``eval``: accuracy metrics on the outputs of ``infer`` stages (golden or converted model).

Pipeline shape::

    eval:
      kind: eval
      query: infer_query         # reid: the infer stages of the query and gallery images, or
      gallery: infer_gallery     #   `outputs`: one infer stage over query then gallery images
      outputs: infer_val         # classification / detection: one infer stage
      labels: data/reid/labels   # a folder (or, for classification, one .npy) of ground truth
      golden: eval_golden        # optional: another eval stage; its metrics give delta_<metric>
      params: {task: reid, output_name: embedding, postprocess: pipelines/post.py,
               postprocess_function: postprocess}

Labels, by task (``.npy`` files in the ``labels`` folder):
- classification: ``labels.npy``, ``labels.txt`` (one class index a line) or ``labels.json`` (a list of
  class indices), one per sample in the outputs' order; ``labels`` may also be that file itself
  (``ascendpipe.metrics.class_labels``).
- reid: ``query_ids.npy``, ``gallery_ids.npy``, and optionally ``query_cams.npy`` and
  ``gallery_cams.npy`` (then the Market-1501 same-identity-same-camera rule applies). With
  ``outputs`` instead of ``query``/``gallery``, the first len(query_ids) rows are the queries.
- detection: a COCO instances json, a folder of VOC xml or YOLO txt labels, or ``ground_truth.json``:
  a list over images of ``{"boxes": [[x1, y1, x2, y2], ...], "labels": [...]}``, each optionally with
  per-box flags ``"iscrowd"`` (COCO crowd boxes), ``"difficult"`` (VOC) and ``"ignore"`` (COCO's
  field: no effect on COCO, as in pycocotools; VOC treats ignore and crowd boxes as difficult). See
  ``ascendpipe.metrics.ground_truth``, ``ascendpipe.metrics.detection`` and docs/kinds.md (Detection):
  the built-in postprocess (``params.decode``), the ``letterbox`` input, the files it writes.

Post-processing: ``postprocess`` is a Python file (hashed as a dep) and ``postprocess_function``
the function in it, called with ``{output name: array}`` of one infer stage. It returns what the
metric needs: logits (N, C) for classification, features (N, D) for reid (called once for query
and once for gallery), and for detection ``{"boxes": [...], "scores": [...], "labels": [...]}``,
one array per image. A function taking a second argument gets ``params.postprocess_params``.
Without it, the output named ``output_name`` (or the only output) is used; detection uses the
built-in postprocess of ``params.decode`` (``ascendpipe.metrics.detect_post``).

Language models (``task: lm``, ``ascendpipe.metrics.lm``): ``outputs`` is the infer stage of the model
judged (its ``logits`` output, or ``params.output_name``), ``reference`` the infer stage of the golden
model over the same inputs, ``labels`` (optional) the token each position is to predict (``.npy`` of
token ids shaped as the logits' positions, -100 where none; or a folder holding ``labels.npy``):
``next_token_agreement`` (positions whose greedy next token is the reference's), and with labels
``perplexity`` and ``label_top1``.

Metrics are fractions in [0, 1] (one "point" of mAP is 0.01): ``top1``, ``top5``; ``mAP``,
``rank1``, ``rank5``, ``rank10``; detection: ``voc_mAP50`` (VOC, ``params.voc_mode`` voc12 area or
voc07 11-point), ``coco_AP50`` (COCO's AP at IoU 0.5, 101 points), ``mAP50_95`` (COCO) and ``mAP50``
(the VOC value under its older name, kept for scripts); plus ``delta_<name>`` (this minus golden).
"""

from __future__ import annotations

import json
from pathlib import Path

from ascendpipe.errors import Location, UserError, few
from ascendpipe.stages.base import StageContext, StageKind, StageResult, lazy_class_attr, package_version, write_metrics

TASKS = ("classification", "reid", "detection", "lm")
# the built-in detection heads (ascendpipe.metrics.detect_post.DECODERS; not imported: a no-op build stays light)
DECODERS = ("yolov8", "yolov8_dfl", "yolov5", "yolov5_raw", "yolox", "boxes", "onnx_nms")
OUTPUTS_DIR = "outputs"  # where an infer stage keeps its outputs inside its out dir
# docs/kinds.md's language-model part (ascendpipe.config.kinds_doc appends it to the eval kind's section)
LM_DOC = """
### Language models (`task: lm`)

`outputs` is the infer stage of the model judged, `reference` the infer stage of the golden model over
the same inputs (a decoder's prefill or decode inputs), `labels` optionally the tokens to predict. The
logits are the output named `logits` (or `params.output_name`), `[..., vocabulary]`: every leading index
is one position (`ascendpipe.metrics.lm`).

| metric | what it is |
| --- | --- |
| `next_token_agreement` | share of positions whose greedy next token (the logits' argmax) is the reference's; a position with NaN/inf logits agrees with nothing; one whose reference is not finite is left out |
| `perplexity` | with `labels`: `exp` of the mean negative log-likelihood of the labels; not reported where the logits are not finite (the log says how many positions) |
| `label_top1` | with `labels`: share of labelled positions whose top-1 token is the label |

`labels`: an `.npy` of token ids shaped as the logits' positions (`[B, T]` for `[B, T, V]`), the token each
position is to predict (already shifted: the next token), -100 where none is; or a folder holding
`labels.npy`. With `golden: <the golden's lm eval>`, `delta_next_token_agreement` and `delta_perplexity`
follow, and `ascendpipe fix PIPELINE --metric eval_lm.next_token_agreement` holds the agreement within
`--tolerance` of the golden's (1.0): a language model's fix is a recorded run like any other.

```yaml
eval_lm:
  kind: eval
  outputs: infer          # the converted decoder over data/lm (its logits)
  reference: infer_golden # the fp32 decoder over the same inputs
  labels: data/lm/labels.npy
  golden: eval_lm_golden
  params: {task: lm}
```
"""


def read_outputs(path: Path, where: Location) -> dict:
    """``{output name: array}`` from an infer stage dir, an outputs folder, one .npy or one .npz."""
    from ascendpipe.userfile import load_json, mapping

    path = Path(path)
    if path.is_file():
        if path.suffix in (".npz", ".npy"):
            loaded = load_array(path, where)
            return {path.stem: loaded} if path.suffix == ".npy" else loaded
        raise UserError(f"{path} is not a .npy or .npz file of model outputs", where)
    if not path.is_dir():
        raise UserError(f"{path} does not exist", where)
    names = {}
    summary = path / "summary.json"
    if summary.is_file():  # the infer stage's own name -> file table (file names are sanitised)
        outputs = mapping(mapping(load_json(summary, "infer summary"), summary, None).get("outputs") or {},
                          summary, "outputs")
        for name, spec in outputs.items():
            spec = mapping(spec, summary, f"outputs.{name}")
            file = spec.get("file")
            if not isinstance(file, str) or not file or Path(file).is_absolute() or ".." in Path(file).parts:
                raise UserError(f"{summary}: outputs.{name}.file: {file!r} is not a file name inside {path}", where)
            names[name] = path / file
    if not names:
        folder = path / OUTPUTS_DIR if (path / OUTPUTS_DIR).is_dir() else path
        names = {p.stem: p for p in sorted(folder.glob("*.npy"))}
    if not names:
        raise UserError(f"no model outputs (*.npy) in {path}; expected an infer stage's output folder", where)
    return {name: load_array(file, where) for name, file in names.items()}


def load_array(path: Path, where: Location):
    """An .npy's array or an .npz's ``{name: array}``, without pickles; a damaged, cut-short or foreign
    file is one line naming it (numpy's own "allow_pickle" advice would mislead)."""
    import zipfile

    import numpy as np

    from ascendpipe.npyheader import check_npy_sizes, npy_error

    try:
        check_npy_sizes(path, where, str(path))  # the headers' claims, before numpy allocates them
        if path.suffix == ".npz":
            with np.load(path) as data:
                return {k: _widened(data[k]) for k in data.files}
        return _widened(np.load(path))
    except FileNotFoundError:
        raise UserError(f"{path} does not exist", where) from None
    except (ValueError, OSError, EOFError, zipfile.BadZipFile, KeyError) as exc:
        raise UserError(f"cannot read {path}: {npy_error(exc)}", where) from None


def _widened(array):
    """A bfloat16 output (a bf16 model's, saved by infer as ml_dtypes writes it: numpy reads ``<V2``) as the
    float32 it widens to exactly, for the metrics; any other array as it is."""
    if array.dtype.kind == "V" and array.dtype.itemsize == 2 and array.dtype.names is None:
        from ascendpipe.inputs import bfloat16

        return array.view(bfloat16()).astype("float32")
    return array


def pick_output(outputs: dict, output_name: str | None, where: Location):
    if output_name:
        if output_name not in outputs:
            raise UserError(f"no output '{output_name}'; the infer stage wrote: {few(sorted(outputs), 12)}", where)
        return outputs[output_name]
    if len(outputs) == 1:
        return next(iter(outputs.values()))
    raise UserError(f"the infer stage wrote several outputs ({few(sorted(outputs), 12)}); "
                    "choose one with params.output_name or give params.postprocess", where)


def golden_deltas(metrics: dict, golden: dict) -> dict:
    """``delta_<name>`` = this stage's value minus the golden stage's, for numbers both have."""
    out = {}
    for name, value in metrics.items():
        ref = golden.get(name)
        if name.startswith("delta_") or isinstance(value, bool) or not isinstance(value, (int, float)):
            continue
        if isinstance(ref, (int, float)) and not isinstance(ref, bool):
            out[f"delta_{name}"] = float(value) - float(ref)
    return out


class EvalKind(StageKind):
    name = "eval"

    @lazy_class_attr
    def doc_appendix():  # docs/kinds.md: formats, the postprocess contract, a worked example
        from ascendpipe.metrics.class_labels import DOC as CLASSIFICATION
        from ascendpipe.stages.eval_detection import DOC

        return CLASSIFICATION + DOC + LM_DOC

    uses_backend = False
    version = "3"  # 2: VOC IoU >= 0.5, voc_mAP50 / coco_AP50; 3: built-in detection postprocess, detections.json
    summary = "Top-1/Top-5, ReID mAP/CMC or detection mAP on infer outputs, with the delta to golden"
    input_fields = ("outputs", "query", "gallery", "labels", "golden", "letterbox", "reference")
    required_inputs = ("labels",)
    input_notes = {"labels": "except for task lm: there, optional token ids for perplexity",
                   "reference": "task lm: the golden model's infer stage over the same inputs"}

    def required_inputs_for(self, params: dict) -> tuple:
        """labels for every task but lm, which needs outputs and a reference or labels (checked as it runs)."""
        return ("outputs",) if (params or {}).get("task") == "lm" else self.required_inputs
    path_params = ("postprocess",)
    params_schema = {
        "type": "object",
        "properties": {
            "task": {"enum": list(TASKS)},
            "output_name": {"type": "string"},
            "postprocess": {"type": "string", "pattern": r"\.py$"},
            "postprocess_function": {"type": "string", "default": "postprocess"},
            "postprocess_params": {"type": "object", "description": "passed to the postprocess file's function "
                                   "as its second argument (recorded and keyed)"},
            # task-specific params carry no schema default, so a record lists only its own task's
            "topk": {"type": "array", "items": {"type": "integer", "minimum": 1},
                     "description": "classification: the k of each top-k (default [1, 5])"},
            "max_detections": {"type": "integer", "minimum": 1,
                               "description": "detection: COCO's maxDets, per image (default 100)"},
            "voc_mode": {"enum": ["voc12", "voc07"], "description": "detection: VOC AP, area (voc12, default) "
                         "or 11-point (voc07)"},
            "decode": {"enum": list(DECODERS), "description": "detection: the built-in postprocess of this head "
                       "(see Detection below)"},
            "conf_threshold": {"type": "number", "minimum": 0, "description": "detection: keep scores > this "
                               "(default 0.001)"},
            "iou_threshold": {"type": "number", "minimum": 0, "maximum": 1,
                              "description": "detection: NMS suppresses IoU > this (default 0.6)"},
            "max_det": {"type": "integer", "minimum": 1, "description": "detection: boxes kept per image after "
                        "NMS (default 300)"},
            "agnostic_nms": {"type": "boolean", "description": "detection: one NMS over all classes (default "
                             "false: per class)"},
            "multi_label": {"type": "boolean", "description": "detection: a box may keep several classes "
                            "(default false)"},
            "layout": {"enum": ["auto", "channels_first", "channels_last"],
                       "description": "detection: (B, 4+C, N) is channels_first (default auto)"},
            "num_classes": {"type": "integer", "minimum": 1},
            "input_size": {"type": "array", "items": {"type": "integer", "minimum": 1}, "minItems": 2, "maxItems": 2,
                           "description": "detection: the model input [H, W] (default: the letterbox's)"},
            "strides": {"type": "array", "items": {"type": "integer", "minimum": 1},
                        "description": "detection: head strides (default [8, 16, 32])"},
            "reg_max": {"type": "integer", "minimum": 1, "description": "detection: DFL bins (default 16)"},
            "anchors": {"type": "array", "minItems": 1, "items": {"type": "array", "minItems": 2,
                                                                   "items": {"type": "number", "exclusiveMinimum": 0}},
                        "description": "detection, yolov5_raw: per stride [w0, h0, w1, h1, ...] (default YOLOv5's)"},
            "head_outputs": {"type": "object", "description": "detection: which output is which "
                             "(output, levels, boxes, scores, classes, num, indices)"},
            "box_format": {"enum": ["xyxy", "xywh", "yxyx"], "description": "detection: of boxes the model gives"},
            "gt_format": {"enum": ["auto", "list", "coco", "voc", "yolo"],
                          "description": "detection: the ground truth's format (default auto)"},
            "class_names": {"type": "array", "items": {"type": "string"},
                            "description": "detection: VOC class names in index order"},
            "image_size": {"type": "array", "items": {"type": "integer", "minimum": 1}, "minItems": 2, "maxItems": 2,
                           "description": "detection: [h, w] of every image, for YOLO labels without `letterbox`"},
        },
        "required": ["task"],
    }

    def tool_versions(self, backend: str) -> dict[str, str]:
        return {"numpy": package_version("numpy")}

    def run(self, ctx: StageContext) -> StageResult:
        task = ctx.params["task"]
        info = {"task": task}
        if task == "detection":
            metrics, info["detection"] = _detection(ctx)
        elif task == "lm":
            metrics, info["lm"] = _lm(ctx)
        else:
            metrics = {"classification": _classification, "reid": _reid}[task](ctx)
        if ctx.inputs.get("golden"):
            golden = _golden_metrics(ctx)
            metrics.update(golden_deltas(metrics, golden))
        write_metrics(ctx.out_dir, metrics)
        ctx.say("  ".join(f"{k}={v:.4f}" if isinstance(v, float) else f"{k}={v}" for k, v in sorted(metrics.items())))
        return StageResult(metrics=metrics, info=info)


def _where(ctx: StageContext, field: str) -> Location:
    return Location(stage=ctx.name, field=field)


def _prepared(ctx: StageContext, field: str):
    """One infer stage's outputs, through the user's post-processing when given."""
    if not ctx.inputs.get(field):
        raise UserError(f"task '{ctx.params['task']}' needs `{field}` (an infer stage or its outputs)",
                        Location(stage=ctx.name))
    outputs = read_outputs(ctx.inputs[field], _where(ctx, field))
    if ctx.params.get("postprocess"):
        return _user_postprocess(ctx)(outputs)
    return pick_output(outputs, ctx.params.get("output_name"), _where(ctx, "output_name"))


def _user_postprocess(ctx: StageContext):
    """The user's function as ``f(outputs)``: given ``params.postprocess_params`` when it takes a second argument."""
    import inspect

    from ascendpipe.metrics.postprocess import load_user_function

    spec = f"{ctx.params['postprocess']}:{ctx.params.get('postprocess_function', 'postprocess')}"
    fn = load_user_function(spec, ctx.workspace, _where(ctx, "postprocess"))
    try:
        positional = [q for q in inspect.signature(fn).parameters.values()
                      if q.kind in (q.POSITIONAL_ONLY, q.POSITIONAL_OR_KEYWORD, q.VAR_POSITIONAL)]
    except (TypeError, ValueError):
        positional = []
    extra = dict(ctx.params.get("postprocess_params") or {})
    if len(positional) >= 2 or any(q.kind == q.VAR_POSITIONAL for q in positional):
        return lambda outputs: fn(outputs, extra)
    if extra:
        raise UserError(f"params.postprocess_params is given but {spec} takes one argument; define it as "
                        "f(outputs, params)", _where(ctx, "postprocess_params"))
    return fn


def _label_file(ctx: StageContext, name: str, required: bool = True):
    import numpy as np

    base = Path(ctx.inputs["labels"])
    path = base if base.is_file() else base / name
    if not path.is_file():
        if not required:
            return None
        raise UserError(f"labels: {path} does not exist (task '{ctx.params['task']}' needs {name})",
                        _where(ctx, "labels"))
    ids = load_array(path, _where(ctx, "labels"))
    if not isinstance(ids, np.ndarray) or ids.ndim != 1 or ids.dtype.kind not in "iubUS":
        found = f"shape {list(ids.shape)} {ids.dtype}" if isinstance(ids, np.ndarray) else "an .npz archive"
        raise UserError(f"labels: {path} must hold one id per image (a 1-D array of integers or strings), "
                        f"not {found}", _where(ctx, "labels"))
    return ids


def _classification(ctx: StageContext) -> dict:
    from ascendpipe.metrics import topk_accuracy

    from ascendpipe.metrics.class_labels import find_labels_file, read_class_labels

    logits = _prepared(ctx, "outputs")
    where = _where(ctx, "labels")
    labels = read_class_labels(find_labels_file(Path(ctx.inputs["labels"]), where), where)
    try:
        return {f"top{k}": topk_accuracy(logits, labels, k) for k in ctx.params.get("topk", [1, 5])}
    except UserError as err:
        raise err.with_location(stage=ctx.name, field="labels") from None


def _reid(ctx: StageContext) -> dict:
    from ascendpipe.metrics import reid_map_cmc

    import numpy as np

    ids = [_label_file(ctx, f"{part}_ids.npy") for part in ("query", "gallery")]
    if ctx.inputs.get("outputs") and not (ctx.inputs.get("query") or ctx.inputs.get("gallery")):
        both = np.asarray(_prepared(ctx, "outputs"))
        if both.shape[0] != ids[0].size + ids[1].size:
            raise UserError(f"outputs hold {both.shape[0]} rows but labels give {ids[0].size} queries and "
                            f"{ids[1].size} gallery entries", _where(ctx, "outputs"))
        query, gallery = both[:ids[0].size], both[ids[0].size:]
    else:
        query, gallery = _prepared(ctx, "query"), _prepared(ctx, "gallery")
    cams = [_label_file(ctx, f"{part}_cams.npy", required=False) for part in ("query", "gallery")]
    if (cams[0] is None) != (cams[1] is None):
        raise UserError("labels: give both query_cams.npy and gallery_cams.npy, or neither", _where(ctx, "labels"))
    try:
        result = reid_map_cmc(query, gallery, ids[0], ids[1], cams[0], cams[1])
    except UserError as err:
        raise err.with_location(stage=ctx.name, field="labels") from None
    ctx.say(f"reid: {result['queries']} queries with a true match; camera rule: {cams[0] is not None}")
    return {k: result[k] for k in ("mAP", "rank1", "rank5", "rank10")}


def _detection(ctx: StageContext) -> dict:
    from ascendpipe.stages.eval_detection import detection_metrics

    if not ctx.inputs.get("outputs"):
        raise UserError("task 'detection' needs `outputs` (an infer stage or its outputs)", Location(stage=ctx.name))
    outputs = read_outputs(ctx.inputs["outputs"], _where(ctx, "outputs"))
    return detection_metrics(ctx, outputs, _user_postprocess(ctx) if ctx.params.get("postprocess") else None)


def _lm(ctx: StageContext) -> tuple[dict, dict]:
    """next_token_agreement against ``reference``; perplexity and label_top1 where ``labels`` are given."""
    from ascendpipe.metrics.lm import label_accuracy, next_token_agreement, perplexity

    if not ctx.inputs.get("reference") and not ctx.inputs.get("labels"):
        raise UserError("task 'lm' needs `reference` (the golden model's infer stage over the same inputs: next-token "
                        "agreement) or `labels` (token ids: perplexity), or both", Location(stage=ctx.name))
    logits = _logits(ctx, "outputs")
    metrics, info = {}, {"vocabulary": int(logits.shape[-1])}
    try:
        if ctx.inputs.get("reference"):
            found = next_token_agreement(logits, _logits(ctx, "reference"))
            info.update(positions=found["positions"], skipped=found["skipped"])
            if found["agreement"] is not None:
                metrics["next_token_agreement"] = found["agreement"]
            if found["skipped"]:
                ctx.say(f"lm: {found['skipped']} positions where the reference logits are not finite are left out")
        if ctx.inputs.get("labels"):
            labels = _token_labels(ctx)
            found = perplexity(logits, labels)
            info.update(tokens=found["tokens"], nonfinite=found["nonfinite"])
            if found["perplexity"] is not None:
                metrics["perplexity"] = found["perplexity"]
            elif found["nonfinite"]:
                ctx.say(f"lm: no perplexity: the logits are not finite at {found['nonfinite']} labelled positions")
            accuracy = label_accuracy(logits, labels)
            if accuracy is not None:
                metrics["label_top1"] = accuracy
    except UserError as err:
        raise err.with_location(stage=ctx.name) from None
    return metrics, info


def _logits(ctx: StageContext, field: str):
    """One infer stage's logits: ``params.output_name``, else the output named ``logits``, else the only one."""
    outputs = read_outputs(ctx.inputs[field], _where(ctx, field))
    name = ctx.params.get("output_name") or ("logits" if "logits" in outputs else None)
    return pick_output(outputs, name, _where(ctx, "output_name"))


def _token_labels(ctx: StageContext):
    base = Path(ctx.inputs["labels"])
    path = base if base.is_file() else base / "labels.npy"
    if not path.is_file():
        raise UserError(f"labels: {path} does not exist (task 'lm' reads token ids from labels.npy)",
                        _where(ctx, "labels"))
    return load_array(path, _where(ctx, "labels"))


def _golden_metrics(ctx: StageContext) -> dict:
    upstream = ctx.upstream.get("golden")
    if upstream is not None:
        return upstream.metrics()
    path = Path(ctx.inputs["golden"])
    path = path / "metrics.json" if path.is_dir() else path
    if not path.is_file():
        raise UserError(f"golden: {path} has no metrics.json; name an eval stage", _where(ctx, "golden"))
    return json.loads(path.read_text())
