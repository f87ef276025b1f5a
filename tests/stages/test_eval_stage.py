import json

import numpy as np
import pytest
from sklearn.metrics import average_precision_score

from ascendpipe.errors import UserError
from ascendpipe.stages.base import Upstream
from ascendpipe.stages.eval import EvalKind


def write_infer_dir(path, outputs):
    (path / "outputs").mkdir(parents=True)
    table = {}
    for name, value in outputs.items():
        file = f"outputs/{name.replace('/', '_')}.npy"
        np.save(path / file, value)
        table[name] = {"file": file, "shape": list(value.shape), "dtype": str(value.dtype)}
    (path / "summary.json").write_text(json.dumps({"outputs": table}))
    return path


def test_reid_eval_from_one_infer_stage_matches_sklearn_and_gives_delta(tmp_path, make_ctx):
    rng = np.random.default_rng(0)
    qid, gid = np.arange(6) % 3, np.arange(18) % 3
    qcam, gcam = np.zeros(6, int), np.arange(18) % 2
    centres = rng.normal(size=(3, 8)) * 2
    feats = np.r_[centres[qid], centres[gid]] + rng.normal(size=(24, 8))
    infer = write_infer_dir(tmp_path / "infer", {"embedding": feats.astype(np.float32)})
    labels = tmp_path / "labels"
    labels.mkdir()
    for name, arr in dict(query_ids=qid, gallery_ids=gid, query_cams=qcam, gallery_cams=gcam).items():
        np.save(labels / f"{name}.npy", arr)
    golden = tmp_path / "golden"
    golden.mkdir()
    (golden / "metrics.json").write_text(json.dumps({"mAP": 0.9, "rank1": 1.0}))
    ctx = make_ctx("eval", {"task": "reid"}, {"outputs": infer, "labels": labels, "golden": golden},
                   upstream={"golden": Upstream("eval_golden", "eval", golden)})
    result = EvalKind().run(ctx)
    q, g = feats[:6].astype(np.float32).astype(np.float64), feats[6:].astype(np.float32).astype(np.float64)
    aps = []
    for i in range(6):
        valid = ~((gid == qid[i]) & (gcam == qcam[i]))
        dist = np.linalg.norm(g[valid] - q[i], axis=1)
        aps.append(average_precision_score(gid[valid] == qid[i], -dist))
    assert result.metrics["mAP"] == pytest.approx(np.mean(aps), abs=1e-9)
    assert result.metrics["delta_mAP"] == pytest.approx(np.mean(aps) - 0.9, abs=1e-9)
    assert result.metrics["delta_rank1"] == pytest.approx(result.metrics["rank1"] - 1.0)
    assert json.loads((ctx.out_dir / "metrics.json").read_text()) == result.metrics


def test_classification_with_postprocess_and_labels_file(tmp_path, make_ctx):
    rng = np.random.default_rng(1)
    raw = rng.normal(size=(40, 5)).astype(np.float32)
    labels = rng.integers(0, 5, size=40)
    infer = write_infer_dir(tmp_path / "infer", {"prob": raw, "aux": raw[:, :1]})
    np.save(tmp_path / "labels.npy", labels)
    # the post-processing negates the scores: top-1 becomes the lowest raw score
    (tmp_path / "post.py").write_text("def flip(outputs):\n    return -outputs['prob']\n")
    ctx = make_ctx("eval", {"task": "classification", "postprocess": "post.py", "postprocess_function": "flip",
                            "topk": [1, 2]}, {"outputs": infer, "labels": tmp_path / "labels.npy"})
    metrics = EvalKind().run(ctx).metrics
    assert metrics["top1"] == pytest.approx(np.mean(raw.argmin(1) == labels))
    bottom2 = np.argsort(raw, axis=1)[:, :2]
    assert metrics["top2"] == pytest.approx(np.mean([labels[i] in bottom2[i] for i in range(40)]))


def test_several_outputs_need_a_choice(tmp_path, make_ctx):
    infer = write_infer_dir(tmp_path / "infer", {"a": np.zeros((2, 3), np.float32), "b": np.zeros((2, 3), np.float32)})
    labels = tmp_path / "labels"
    labels.mkdir()
    np.save(labels / "labels.npy", np.array([0, 1]))
    ctx = make_ctx("eval", {"task": "classification"}, {"outputs": infer, "labels": labels}, name="eval@fp16")
    with pytest.raises(UserError, match="several outputs .a, b.") as err:
        EvalKind().run(ctx)
    assert "stage 'eval@fp16'" in str(err.value)
    ctx = make_ctx("eval", {"task": "classification", "output_name": "c"}, {"outputs": infer, "labels": labels})
    with pytest.raises(UserError, match="no output 'c'; the infer stage wrote: a, b"):
        EvalKind().run(ctx)


def test_missing_labels_and_row_mismatch_are_located(tmp_path, make_ctx):
    infer = write_infer_dir(tmp_path / "infer", {"e": np.zeros((5, 4), np.float32)})
    labels = tmp_path / "labels"
    labels.mkdir()
    ctx = make_ctx("eval", {"task": "reid"}, {"outputs": infer, "labels": labels}, name="eval@x")
    with pytest.raises(UserError, match="query_ids.npy") as err:
        EvalKind().run(ctx)
    assert "stage 'eval@x'" in str(err.value)
    np.save(labels / "query_ids.npy", np.array([0, 1]))
    np.save(labels / "gallery_ids.npy", np.array([0, 1]))
    with pytest.raises(UserError, match="outputs hold 5 rows but labels give 2 queries and 2 gallery"):
        EvalKind().run(ctx)


def test_detection_eval_through_postprocess(tmp_path, make_ctx):
    # one image, two gt boxes; the model found one exactly: VOC AP 0.5 for a single class
    infer = write_infer_dir(tmp_path / "infer", {"dets": np.array([[[0, 0, 10, 10, 0.9, 0]]], np.float32)})
    (tmp_path / "post.py").write_text(
        "def postprocess(outputs):\n"
        "    d = outputs['dets']\n"
        "    return {'boxes': [x[:, :4] for x in d], 'scores': [x[:, 4] for x in d], 'labels': [x[:, 5] for x in d]}\n")
    labels = tmp_path / "labels"
    labels.mkdir()
    (labels / "ground_truth.json").write_text(json.dumps([{"boxes": [[0, 0, 10, 10], [20, 20, 30, 30]], "labels": [0, 0]}]))
    ctx = make_ctx("eval", {"task": "detection", "postprocess": "post.py"}, {"outputs": infer, "labels": labels})
    metrics = EvalKind().run(ctx).metrics
    assert metrics["mAP50"] == metrics["voc_mAP50"] == pytest.approx(0.5)  # mAP50: VOC's, under its older name
    assert metrics["coco_AP50"] == pytest.approx(51 / 101)  # COCO's 101 points: precision 1 up to recall 0.5
    assert metrics["mAP50_95"] == pytest.approx(np.mean(np.searchsorted(np.linspace(0, 1, 101), 0.5, side="right") / 101))
    # the missed box marked difficult (VOC) / crowd (COCO): nothing is missed any more
    (labels / "ground_truth.json").write_text(json.dumps([{"boxes": [[0, 0, 10, 10], [20, 20, 30, 30]], "labels": [0, 0],
                                                           "difficult": [0, 1], "iscrowd": [0, 1]}]))
    metrics = EvalKind().run(make_ctx("eval", {"task": "detection", "postprocess": "post.py", "voc_mode": "voc07"},
                                      {"outputs": infer, "labels": labels}, name="eval2")).metrics
    assert metrics["voc_mAP50"] == 1.0 and metrics["coco_AP50"] == pytest.approx(1.0)


def test_user_function_errors(tmp_path):
    from ascendpipe.metrics.postprocess import load_user_function

    (tmp_path / "bad.py").write_text("def f(:\n")
    (tmp_path / "ok.py").write_text("def g(x):\n    return x\n")
    with pytest.raises(UserError, match="bad.py' line 1: syntax error"):
        load_user_function("bad.py:f", tmp_path)
    with pytest.raises(UserError, match="has no function 'h' .it has: g."):
        load_user_function("ok.py:h", tmp_path)
    with pytest.raises(UserError, match="should name a Python file and a function"):
        load_user_function("ok.py", tmp_path)
    with pytest.raises(UserError, match="does not exist"):
        load_user_function("nope.py:g", tmp_path)
    assert load_user_function("ok.py:g", tmp_path)(3) == 3


def test_reid_ids_that_are_not_one_id_per_image_are_located(tmp_path, make_ctx):
    """A 2-D ids array, a float one, or a text file named .npy: one line naming the file (issue 42's
    class of user files), never numpy's traceback or its allow_pickle advice."""
    infer = write_infer_dir(tmp_path / "infer", {"e": np.zeros((4, 4), np.float32)})
    labels = tmp_path / "labels"
    labels.mkdir()
    np.save(labels / "gallery_ids.npy", np.array([0, 1]))
    ctx = make_ctx("eval", {"task": "reid"}, {"outputs": infer, "labels": labels}, name="eval@x")
    np.save(labels / "query_ids.npy", np.array([[0, 1]]))
    with pytest.raises(UserError) as err:
        EvalKind().run(ctx)
    assert f"labels: {labels / 'query_ids.npy'} must hold one id per image (a 1-D array of integers or strings), " \
           "not shape [1, 2] int64" in str(err.value) and "stage 'eval@x'" in str(err.value)
    np.save(labels / "query_ids.npy", np.array([0.5, 1.0]))
    with pytest.raises(UserError, match="not shape \\[2\\] float64"):
        EvalKind().run(ctx)
    (labels / "query_ids.npy").write_text("0\n1\n")
    with pytest.raises(UserError, match="does not start with numpy's header") as err:
        EvalKind().run(ctx)
    assert "allow_pickle" not in str(err.value)
