"""A pipeline on ``backend: ascend`` through the engine (ascendpipe.build), with the CANN doubles.

The reid example pipeline trains a network first (minutes on 2 cores), so this runs the same
stage kinds on the tiny model instead; docs/ascend.md has the reid run as a measurement.
"""

from __future__ import annotations

import json

import numpy as np
import pytest

PIPELINE = """\
backend: ascend
stages:
  convert:
    kind: convert
    model: tiny.onnx
    params: {soc_version: Ascend310P3, precision_mode: force_fp16, keep_dtype: [relu1]}
  infer: {kind: infer, model: convert, inputs: x.npy}
  golden: {kind: infer, model: tiny.onnx, inputs: x.npy}
  dump: {kind: dump, model: convert, inputs: x2.npy}
  compare: {kind: compare, golden: tiny.onnx, target: dump, inputs: x2.npy}
"""


def test_pipeline_on_ascend_backend(cann_env, tmp_path, monkeypatch):
    import ascendpipe
    from tests.backends.ascend.conftest import build_tiny_model

    monkeypatch.chdir(tmp_path)
    build_tiny_model(tmp_path / "tiny.onnx")
    x = np.random.default_rng(0).standard_normal((4, 3, 8, 8)).astype(np.float32)
    np.save(tmp_path / "x.npy", x)
    np.save(tmp_path / "x2.npy", x[:2])  # one static batch: what the dump runs
    (tmp_path / "p.yaml").write_text(PIPELINE)
    run = ascendpipe.build(str(tmp_path / "p.yaml"), quiet=True)
    stages = run["stages"]
    assert {name: s["state"] for name, s in stages.items()} == {n: "ran" for n in
                                                              ("convert", "infer", "golden", "dump", "compare")}
    build = tmp_path / "build"
    assert (build / "convert/model.om").is_file() and (build / "convert/model.json").is_file()
    assert (build / "convert/keep_dtype.cfg").read_text() == "relu1\n"
    # the device run (ais_bench double on the OM) and the golden run (host onnxruntime) agree
    device = np.load(build / "infer/outputs/feat.npy")
    golden = np.load(build / "golden/outputs/feat.npy")
    assert device.shape == (4, 5)
    np.testing.assert_allclose(device, golden, rtol=1e-5, atol=1e-5)
    infer_summary = json.loads((build / "infer/summary.json").read_text())
    assert infer_summary["backend"] == "ascend" and "NPU_compute_time" not in infer_summary  # timings: the record's
    assert stages["infer"]["info"]["latency"]["NPU_compute_time"]["count"] == 2
    # compare read the NPU dump through the OM JSON mapping: the fused conv1 is checked against r1
    result = json.loads((build / "compare/result.json").read_text())
    rows = {r["op_name"]: r for r in result["rows"] if r["side"] == "both"}
    assert set(rows) == {"conv1", "conv2", "add1", "gap", "flat", "fc"}
    assert rows["conv1"]["golden_tensor"] == "r1" and rows["conv1"]["fused"]
    assert result["summary"]["failed_ops"] == 0 and result["summary"]["min_cosine"] == pytest.approx(1.0, abs=1e-6)
