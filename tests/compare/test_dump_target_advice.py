"""A compare whose target is a dump stage's dump advises what a compare of the converted model does
(keep_dtype and the fusion switch), with the real convert stage's name in the paste (issue 30)."""

from __future__ import annotations

import json

import numpy as np
import yaml

import ascendpipe
from tests import modelzoo as mz

PIPELINE = {
    "backend": "onnxruntime",
    "stages": {
        "to_device": {"kind": "convert", "model": "model.onnx",
                      "matrix": {"fp16": {"precision_mode": "force_fp16"}}},
        "dump": {"kind": "dump", "model": "to_device", "inputs": "data/x.npy"},
        "by_dump": {"kind": "compare", "golden": "model.onnx", "target": "dump", "inputs": "data/x.npy"},
        "by_model": {"kind": "compare", "golden": "model.onnx", "target": "to_device", "inputs": "data/x.npy"},
    },
}


def test_dump_target_advice_equals_the_converted_models_and_names_the_stage(tmp_path, monkeypatch):
    (tmp_path / ".ascendpipe").mkdir()
    (tmp_path / "data").mkdir()
    mz.l2norm_model(tmp_path / "model.onnx")
    np.save(tmp_path / "data" / "x.npy", mz.l2norm_inputs(0, batch=2)["features"])
    (tmp_path / "pipeline.yaml").write_text(yaml.safe_dump(PIPELINE, sort_keys=False))
    monkeypatch.chdir(tmp_path)
    ascendpipe.build(str(tmp_path / "pipeline.yaml"), quiet=True)
    by_dump = json.loads((tmp_path / "build" / "by_dump__fp16" / "result.json").read_text())["first_failure"]
    by_model = json.loads((tmp_path / "build" / "by_model__fp16" / "result.json").read_text())["first_failure"]
    assert [a["kind"] for a in by_dump["advice"]] == ["keep_dtype"]  # the UB fusion changes no value: no switch
    assert by_dump["advice"] == by_model["advice"]
    assert by_dump["advice"][0]["set"].startswith("--set 'stages.to_device.matrix.fp16.keep_dtype=")
    # the pasted lines are accepted by build and restore the target
    lines = [a["set"].split(" ", 1)[1].strip("'") for a in by_dump["advice"]]
    run = ascendpipe.build(str(tmp_path / "pipeline.yaml"), ["by_dump@fp16"], set=lines, quiet=True)
    assert run["stages"]["by_dump@fp16"]["metrics"]["failed_ops"] == 0
