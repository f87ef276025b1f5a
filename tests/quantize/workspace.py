"""The quantize tests' workspace: data, labels and pipeline around tests.modelzoo's sensitive CNN."""

from __future__ import annotations

from pathlib import Path

import numpy as np

from tests.modelzoo import LAYERS, SENSITIVE, build_sensitive_model  # noqa: F401 (re-used by the tests)


def make_data(model: Path, root: Path, *, n_val: int = 300, n_calib: int = 64, seed: int = 1) -> dict[str, Path]:
    """Calibration and validation inputs, and labels = the fp32 model's own predictions (golden Top-1 = 1)."""
    import onnxruntime as ort

    rng = np.random.default_rng(seed)
    val = rng.standard_normal((n_val, 3, 8, 8)).astype(np.float32)
    calib = rng.standard_normal((n_calib, 3, 8, 8)).astype(np.float32)
    logits = ort.InferenceSession(str(model), providers=["CPUExecutionProvider"]).run(None, {"x": val})[0]
    paths = {"val": root / "data" / "val" / "x.npy", "calib": root / "data" / "calib" / "x.npy",
             "labels": root / "data" / "labels" / "labels.npy", "probe": root / "data" / "probe" / "x.npy"}
    for p in paths.values():
        p.parent.mkdir(parents=True, exist_ok=True)
    np.save(paths["val"], val)
    np.save(paths["calib"], calib)
    np.save(paths["labels"], np.argmax(logits, axis=1).astype(np.int64))
    np.save(paths["probe"], val[:8])
    return paths


PIPELINE = """\
backend: onnxruntime
stages:
  infer_golden: {kind: infer, model: models/sensitive.onnx, inputs: data/val}
  eval_golden: {kind: eval, outputs: infer_golden, labels: data/labels, params: {task: classification}}
  quantize:
    kind: quantize
    model: models/sensitive.onnx
    calibration: data/calib
    params: {batch_num: 2, batch_size: 16, auto: {metric: eval_int8.top1, tolerance: 0.02}}
  infer_int8: {kind: infer, model: quantize, inputs: data/val}
  eval_int8: {kind: eval, outputs: infer_int8, labels: data/labels, golden: eval_golden, params: {task: classification}}
  compare_int8: {kind: compare, golden: models/sensitive.onnx, target: quantize, inputs: data/probe}
"""


def make_workspace(root: Path, *, sensitive: bool = True) -> Path:
    """A workspace with the model, its data and PIPELINE; returns the pipeline file."""
    (root / ".ascendpipe").mkdir(parents=True, exist_ok=True)
    (root / "models").mkdir(exist_ok=True)
    model = build_sensitive_model(root / "models" / "sensitive.onnx", sensitive=sensitive)
    make_data(model, root)
    path = root / "quant.yaml"
    path.write_text(PIPELINE)
    return path
