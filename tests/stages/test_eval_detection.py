"""The detection eval end to end on one synthetic head: the built-in postprocess undoes the letterbox,
the four ground-truth formats (list, COCO json, VOC xml, YOLO txt) give the same mAP, the COCO json
it writes is what pycocotools takes as is (and gives the same mAP50-95), and the record lists the
postprocess settings and no topk."""

import json

import numpy as np
import yaml
import pytest

from ascendpipe.data import letterbox as lb
from ascendpipe.errors import UserError
from ascendpipe.stages.eval import DECODERS, EvalKind
from tests.stages.test_eval_stage import write_infer_dir

SIZES = [(48, 80), (80, 48), (64, 64), (40, 96), (72, 56), (50, 50)]
NAMES = ["square", "disc", "bar"]


def scene(seed=0):
    """Ground truth (integer boxes in original pixels) and a yolov8 head (B, 4+C, N) in input pixels."""
    rng = np.random.default_rng(seed)
    truth, metas, heads = [], [], []
    for h, w in SIZES:
        n = int(rng.integers(1, 4))
        x1, y1 = rng.integers(0, w - 12, n), rng.integers(0, h - 12, n)
        bw, bh = rng.integers(6, 12, n), rng.integers(6, 12, n)
        boxes = np.c_[x1, y1, np.minimum(x1 + bw, w), np.minimum(y1 + bh, h)].astype(float)
        labels = rng.integers(0, 3, n)
        truth.append({"boxes": boxes.tolist(), "labels": labels.tolist()})
        meta = lb.plan((h, w), (64, 64))
        metas.append(meta)
        pred = lb.forward_boxes(boxes + rng.normal(scale=0.8, size=boxes.shape), meta)
        fp = lb.forward_boxes(np.array([[1, 1, 9, 9], [w - 10, h - 10, w - 1, h - 1]], float), meta)
        allb = np.r_[pred, fp]
        scores = np.zeros((len(allb), 3))
        scores[np.arange(n), labels] = rng.uniform(0.5, 0.95, n)
        scores[n:, 0] = [0.6, 0.2]
        xywh = np.c_[(allb[:, :2] + allb[:, 2:]) / 2, allb[:, 2:] - allb[:, :2]]
        head = np.zeros((8, 7))
        head[:len(allb)] = np.c_[xywh, scores]
        heads.append(head.T)
    return truth, metas, np.stack(heads).astype(np.float32)


def write_formats(root, truth):
    fmt = {}
    (root / "list").mkdir()
    (root / "list" / "ground_truth.json").write_text(json.dumps(truth))
    fmt["list"] = root / "list"
    coco = {"images": [{"id": 100 + i, "height": h, "width": w} for i, (h, w) in enumerate(SIZES)],
            "categories": [{"id": c, "name": n} for c, n in zip((1, 3, 7), NAMES)], "annotations": []}
    for i, t in enumerate(truth):
        for b, c in zip(t["boxes"], t["labels"]):
            coco["annotations"].append({"id": len(coco["annotations"]) + 1, "image_id": 100 + i, "iscrowd": 0,
                                        "category_id": (1, 3, 7)[c], "bbox": [b[0], b[1], b[2] - b[0], b[3] - b[1]],
                                        "area": (b[2] - b[0]) * (b[3] - b[1])})
    (root / "instances.json").write_text(json.dumps(coco))
    fmt["coco"] = root / "instances.json"
    (root / "voc").mkdir()
    (root / "yolo").mkdir()
    for i, ((h, w), t) in enumerate(zip(SIZES, truth)):
        objs = "".join(f"<object><name>{NAMES[c]}</name><difficult>0</difficult><bndbox><xmin>{b[0]:g}</xmin>"
                       f"<ymin>{b[1]:g}</ymin><xmax>{b[2]:g}</xmax><ymax>{b[3]:g}</ymax></bndbox></object>"
                       for b, c in zip(t["boxes"], t["labels"]))
        (root / "voc" / f"img{i:03d}.xml").write_text(
            f"<annotation><size><width>{w}</width><height>{h}</height><depth>3</depth></size>{objs}</annotation>")
        lines = [f"{c} {(b[0] + b[2]) / 2 / w!r} {(b[1] + b[3]) / 2 / h!r} {(b[2] - b[0]) / w!r} {(b[3] - b[1]) / h!r}"
                 for b, c in zip(t["boxes"], t["labels"])]
        (root / "yolo" / f"img{i:03d}.txt").write_text("\n".join(lines) + "\n")
    fmt["voc"], fmt["yolo"] = root / "voc", root / "yolo"
    return fmt


def test_four_ground_truth_formats_same_map_and_pycocotools_agrees(tmp_path, make_ctx):
    truth, metas, head = scene()
    infer = write_infer_dir(tmp_path / "infer", {"output0": head})
    (tmp_path / "lb").mkdir()
    (tmp_path / "lb" / "letterbox.json").write_text(json.dumps({"images": metas}))
    formats = write_formats(tmp_path, truth)
    params = {"task": "detection", "decode": "yolov8", "conf_threshold": 0.1, "iou_threshold": 0.5,
              "class_names": NAMES}
    results = {}
    for name, labels in formats.items():
        ctx = make_ctx("eval", params, {"outputs": infer, "labels": labels, "letterbox": tmp_path / "lb"})
        result = EvalKind().run(ctx)
        results[name] = (result, ctx)
    ref = results["list"][0].metrics
    assert 0.3 < ref["mAP50_95"] < 0.95 and ref["voc_mAP50"] > 0.5
    for name, (result, _) in results.items():
        for k in ("voc_mAP50", "coco_AP50", "mAP50_95"):
            assert result.metrics[k] == pytest.approx(ref[k], abs=1e-12), (name, k)
    # the record: the settings in effect (defaults included), the format read; no topk anywhere
    info = results["coco"][0].info["detection"]
    assert info["ground_truth"] == "coco"
    assert info["postprocess"]["decode"] == "yolov8" and info["postprocess"]["max_det"] == 300
    assert "topk" not in json.dumps(results["coco"][0].info)
    # pycocotools on the files the eval wrote, as they are
    pytest.importorskip("pycocotools")
    from pycocotools.coco import COCO
    from pycocotools.cocoeval import COCOeval
    import contextlib
    import io

    for name in ("coco", "yolo"):
        out = results[name][1].out_dir
        with contextlib.redirect_stdout(io.StringIO()):
            gt = COCO(str(out / "ground_truth_coco.json"))
            dt = gt.loadRes(str(out / "detections.json"))
            ev = COCOeval(gt, dt, "bbox")
            ev.evaluate()
            ev.accumulate()
            ev.summarize()
        assert ev.stats[0] == pytest.approx(ref["mAP50_95"], abs=2e-4)  # bbox rounded to 1e-4 in the json
        assert ev.stats[1] == pytest.approx(ref["coco_AP50"], abs=2e-4)
    dets = json.loads((results["coco"][1].out_dir / "detections.json").read_text())
    assert {d["image_id"] for d in dets} <= set(range(100, 106)) and {d["category_id"] for d in dets} <= {1, 3, 7}


def test_user_postprocess_gets_its_params_and_the_letterbox_is_undone(tmp_path, make_ctx):
    truth, metas, head = scene(1)
    infer = write_infer_dir(tmp_path / "infer", {"output0": head})
    (tmp_path / "lb.json").write_text(json.dumps({"images": metas}))
    formats = write_formats(tmp_path, truth)
    (tmp_path / "post.py").write_text(
        "from ascendpipe.metrics.detect_post import detections\n"
        "def post(outputs, params):\n"
        "    return detections(outputs, {'decode': 'yolov8', 'conf_threshold': params['conf']})\n")
    user = make_ctx("eval", {"task": "detection", "postprocess": "post.py", "postprocess_function": "post",
                             "postprocess_params": {"conf": 0.1}},
                    {"outputs": infer, "labels": formats["list"], "letterbox": tmp_path / "lb.json"})
    built_in = make_ctx("eval", {"task": "detection", "decode": "yolov8", "conf_threshold": 0.1, "iou_threshold": 0.7},
                        {"outputs": infer, "labels": formats["list"], "letterbox": tmp_path / "lb.json"})
    a, b = EvalKind().run(user), EvalKind().run(built_in)
    assert a.metrics == b.metrics  # detect_post's default iou 0.6 vs 0.7 does not matter on this scene
    assert a.info["detection"]["postprocess"]["postprocess_params"] == {"conf": 0.1}


def test_detection_refusals_are_located(tmp_path, make_ctx):
    truth, metas, head = scene()
    infer = write_infer_dir(tmp_path / "infer", {"output0": head})
    formats = write_formats(tmp_path, truth)
    ctx = make_ctx("eval", {"task": "detection"}, {"outputs": infer, "labels": formats["list"]}, name="det_eval")
    with pytest.raises(UserError, match="needs params.decode") as err:
        EvalKind().run(ctx)
    assert "det_eval" in str(err.value)
    ctx = make_ctx("eval", {"task": "detection", "decode": "yolov8"}, {"outputs": infer, "labels": formats["yolo"]})
    with pytest.raises(UserError, match="image sizes"):
        EvalKind().run(ctx)
    ctx = make_ctx("eval", {"task": "detection", "decode": "yolov8"}, {"outputs": infer, "labels": formats["voc"]})
    with pytest.raises(UserError, match="class_names"):
        EvalKind().run(ctx)


def test_decoders_listed_in_the_schema_are_the_built_in_ones():
    from ascendpipe.metrics.detect_post import DECODERS as BUILT_IN

    assert DECODERS == BUILT_IN
    assert "default" not in EvalKind.params_schema["properties"]["topk"]


def test_the_documented_worked_example_passes_the_pipeline_schema():
    import jsonschema

    from ascendpipe.config.schema import pipeline_schema
    from ascendpipe.stages.eval_detection import DOC

    block = DOC.split("**A worked example**", 1)[1].split("```yaml\n", 1)[1].split("```", 1)[0]
    stages = yaml.safe_load(block)
    assert stages["det_eval"]["params"]["decode"] == "yolov8"
    jsonschema.validate({"params": {"seed": 0}, "stages": stages}, pipeline_schema())
