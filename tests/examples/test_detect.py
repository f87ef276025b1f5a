"""The detection example (pipelines/detect.yaml) built end to end on onnxruntime, as shipped (about
25 s on 2 cores): the story the README tells, and its printed table.

fp16 keeps mAP within a point of golden, compare finds nothing failing, the AIPP letterbox (pad on
the device; resize and pad on Ascend310P) passes the AIPP check and keeps mAP, the VOC xml ground
truth scores what the COCO json does, pycocotools reads the COCO results json as is, the record
lists the postprocess settings (no topk), and the summary leads with mAP50_95.
"""

from __future__ import annotations

import contextlib
import io
import json
import os
import re
import shutil
import sys
from pathlib import Path

import pytest
import yaml
from tests.train_threads import train_threads

pytest.importorskip("torch", reason="the detection example trains a torch model: pip install -e '.[examples]'")

REPO = Path(__file__).resolve().parents[2]
EVALS = ("det_eval_golden", "det_eval_voc", "det_eval@fp16", "det_eval@mixed", "det_eval_golden_cam", "det_eval_aipp",
         "det_eval_aipp_resize")


def _json(path: Path):
    return json.loads(path.read_text())


@pytest.fixture(scope="module")
def detect(tmp_path_factory):
    import ascendpipe

    ws = tmp_path_factory.mktemp("detect")
    shutil.copytree(REPO / "pipelines", ws / "pipelines")
    (ws / ".ascendpipe").mkdir()
    out = io.StringIO()
    with pytest.MonkeyPatch.context() as mp:
        mp.chdir(ws)
        mp.setenv("PATH", f"{Path(sys.executable).parent}{os.pathsep}{os.environ.get('PATH', '')}")
        mp.setenv("PYTHONPATH", f"{REPO}{os.pathsep}{os.environ.get('PYTHONPATH', '')}")
        record = ascendpipe.build(str(ws / "pipelines/detect.yaml"), set=train_threads(), stream=out)
    metrics = {name: _json(ws / "build" / name.replace("@", "__") / "metrics.json") for name in EVALS}
    return {"ws": ws, "record": record, "printed": out.getvalue(), "metrics": metrics}


def test_fp16_and_aipp_keep_map_within_a_point(detect):
    assert {s["state"] for s in detect["record"]["stages"].values()} == {"ran"}
    m = detect["metrics"]
    assert m["det_eval_golden"]["mAP50_95"] > 0.5 and m["det_eval_golden"]["voc_mAP50"] > 0.9  # it learnt
    for name in ("det_eval@fp16", "det_eval@mixed", "det_eval_aipp", "det_eval_aipp_resize"):
        assert abs(m[name]["delta_mAP50_95"]) < 0.01, name
        assert abs(m[name]["delta_voc_mAP50"]) < 0.01, name
    assert m["det_eval_voc"] == m["det_eval_golden"]  # VOC xml and COCO json: the same ground truth
    ws = detect["ws"]
    for v in ("fp16", "mixed"):
        assert _json(ws / f"build/det_compare__{v}/result.json")["summary"]["failed_ops"] == 0
    rows = _json(ws / "build/det_compare_aipp/result.json")["rows"]
    aipp = next(r for r in rows if r["op_name"] == "aipp")
    assert not aipp["failed"] and aipp["cosine"] > 0.9999


def test_the_record_keys_the_postprocess_and_pycocotools_agrees(detect):
    stage = detect["record"]["stages"]["det_eval@fp16"]
    assert stage["params"]["conf_threshold"] == 0.001 and stage["params"]["iou_threshold"] == 0.6
    assert "topk" not in stage["params"] and "topk" not in json.dumps(stage.get("info"))
    pytest.importorskip("pycocotools")
    from pycocotools.coco import COCO
    from pycocotools.cocoeval import COCOeval

    out = detect["ws"] / "build/det_eval__fp16"
    with contextlib.redirect_stdout(io.StringIO()):
        gt = COCO(str(detect["ws"] / "data/detect/labels/val.json"))  # the user's own file
        ev = COCOeval(gt, gt.loadRes(str(out / "detections.json")), "bbox")
        ev.evaluate()
        ev.accumulate()
        ev.summarize()
    assert ev.stats[0] == pytest.approx(detect["metrics"]["det_eval@fp16"]["mAP50_95"], abs=3e-4)


def test_the_summary_leads_with_map_and_the_readme_shows_what_it_prints(detect):
    printed = detect["printed"].split("metrics (key: mAP50_95):\n", 1)[1].splitlines()
    assert [line.split()[0] for line in printed[:len(EVALS)]] == list(EVALS)
    assert all(line.split()[1].startswith("mAP50_95=") for line in printed[:len(EVALS)])
    readme = (REPO / "README.md").read_text(encoding="utf-8").split("## Detection, in one build", 1)[1]
    block = readme.split("```\nmetrics (key: mAP50_95):\n", 1)[1].split("```", 1)[0].splitlines()
    shown = {line.split()[0]: float(re.search(r"mAP50_95=([0-9.]+)", line).group(1)) for line in block}
    assert list(shown) == list(EVALS)
    for name, value in shown.items():  # the README's run; trained weights differ a little between CPUs
        assert value == pytest.approx(detect["metrics"][name]["mAP50_95"], abs=0.03), name


def test_stage_names_are_its_own():
    """Two pipelines in one workspace share build/: detect.yaml's stages collide with no other's."""
    names = {p.stem: set(yaml.safe_load(p.read_text())["stages"]) for p in (REPO / "pipelines").glob("*.yaml")}
    assert all(n.startswith("det_") for n in names["detect"])
    for other, stages in names.items():
        if other != "detect":
            assert not names["detect"] & stages, other
