"""pipelines/classify.yaml on ``--backend ascend`` with the CANN doubles: every stage, AIPP and int8 included.

The AIPP OM takes uint8 NHWC (CANN 900 ``atlasatc_16_0025`` item 9); the atc double builds its OM so, and
the ais_bench double checks each file's bytes against the OM input's byte size, as ais_bench does. The one
documented override, ``--set params.soc_version=...``, reaches every convert stage (the top-level params
reach each stage whose kind takes them), the int8 branch's included. About 40 s on 2 cores (2 epochs).
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

from tests.backends.ascend.conftest import PYLIB

REPO = Path(__file__).resolve().parents[3]
SOC = "Ascend310P3"


@pytest.fixture(scope="module")
def classify_ascend(cann_env, tmp_path_factory):
    import ascendpipe

    ws = tmp_path_factory.mktemp("classify_ascend")
    shutil.copytree(REPO / "pipelines", ws / "pipelines")
    (ws / ".ascendpipe").mkdir()
    with pytest.MonkeyPatch.context() as mp:
        mp.chdir(ws)
        mp.setenv("PATH", f"{PYLIB.parent / 'amct_bin'}{os.pathsep}{os.environ['PATH']}")
        settings = ["params.epochs=2", f"params.soc_version={SOC}"]
        record = ascendpipe.build(str(ws / "pipelines/classify.yaml"), backend="ascend", quiet=True, keep_going=True,
                                  set=settings)
        pipeline = ascendpipe.load(str(ws / "pipelines/classify.yaml"), set=settings, backend="ascend")
    outs = {name: ws / stage.outs[0] for name, stage in pipeline.stages.items()}  # wherever build_dir puts them
    return ws, record, outs


def test_classify_builds_every_stage_on_the_doubles(classify_ascend):
    ws, record, _ = classify_ascend
    states = {name: s["state"] for name, s in record["stages"].items()}
    assert states and all(state == "ran" for state in states.values()), states
    assert {"convert@aipp", "compare@aipp", "infer@wrong_mean", "compare@wrong_mean", "convert_int8",
            "infer_int8_device"} <= set(states)


def test_the_aipp_om_takes_uint8_nhwc_and_the_golden_keeps_float(classify_ascend):
    ws, _, outs = classify_ascend
    record = json.loads((outs["convert@aipp"] / "convert.json").read_text())
    assert record["inputs"] == [{"name": "image", "shape": [1, 32, 32, 1], "dtype": "uint8", "layout": "NHWC",
                                 "aipp": True}]
    assert record["onnx_inputs"][0]["dtype"] == "float32" and record["shapes"]["accepted"] == [{"image": [1, 32, 32, 1]}]
    om_json = json.loads((outs["convert@aipp"] / "model.json").read_text())
    data = next(op for op in om_json["graph"][0]["op"] if op["type"] == "Data")
    assert data["output_desc"][0]["dtype"] == "DT_UINT8"
    # the device's AIPP of probe_u8 agrees with the training preprocessing; a wrong mean fails there first
    aipp = json.loads((outs["compare@aipp"] / "result.json").read_text())
    wrong = json.loads((outs["compare@wrong_mean"] / "result.json").read_text())
    assert aipp["summary"]["failed_ops"] == 0
    assert wrong["first_failure"]["op_name"] == "aipp"
    golden = json.loads((outs["eval_golden"] / "metrics.json").read_text())["top1"]
    assert json.loads((outs["eval@aipp"] / "metrics.json").read_text())["top1"] == pytest.approx(golden)


def test_ais_bench_refuses_float_data_for_an_aipp_om_by_its_byte_size(classify_ascend, tmp_path):
    ws, _, outs = classify_ascend
    images = np.load(ws / "data/classify/probe_u8/images.npy")[:1]
    (tmp_path / "in").mkdir()
    np.save(tmp_path / "in/0.npy", images.astype(np.float32))  # the shape the OM takes, 4 bytes a value
    env = {**os.environ, "PYTHONPATH": str(PYLIB)}
    proc = subprocess.run([sys.executable, "-m", "ais_bench", "--model", str(outs["convert@aipp"] / "model.om"),
                           "--input", str(tmp_path / "in"), "--output", str(tmp_path / "out")],
                          capture_output=True, text=True, env=env)
    assert proc.returncode == 2 and "tensorsize: 1024 filesize: 4096 not match" in proc.stderr + proc.stdout
