"""The fix tests' workspace: an L2-norm model whose fp16 conversion fails, 32 inputs, and labels that are
the golden model's own top-1 (so golden top-1 is 1.0 by construction), under a given pipeline."""

from __future__ import annotations

import numpy as np
import yaml

from tests import modelzoo


def classification_pipeline(convert_name: str, convert: dict) -> dict:
    """The fix tests' pipeline: golden infer + eval, the convert stage under test (``convert_name``:
    its params or matrix in ``convert``), its infer, compare and eval against the golden (top-1)."""
    return {
        "backend": "onnxruntime",
        "stages": {
            "infer_golden": {"kind": "infer", "model": "model.onnx", "inputs": "data/in"},
            "eval_golden": {"kind": "eval", "outputs": "infer_golden", "labels": "data/labels",
                            "params": {"task": "classification", "topk": [1]}},
            convert_name: {"kind": "convert", "model": "model.onnx", **convert},
            "infer": {"kind": "infer", "model": convert_name, "inputs": "data/in"},
            "compare": {"kind": "compare", "golden": "model.onnx", "target": convert_name, "inputs": "data/in/x.npy"},
            "eval": {"kind": "eval", "outputs": "infer", "labels": "data/labels", "golden": "eval_golden",
                     "params": {"task": "classification", "topk": [1]}},
        },
    }


def l2norm_workspace(tmp_path, monkeypatch, pipeline: dict):
    import onnxruntime as ort

    root = tmp_path / "ws"
    (root / ".ascendpipe").mkdir(parents=True)
    (root / "data" / "in").mkdir(parents=True)
    (root / "data" / "labels").mkdir(parents=True)
    model = modelzoo.l2norm_model(root / "model.onnx")
    x = modelzoo.l2norm_inputs(0, batch=32)["features"]
    np.save(root / "data" / "in" / "x.npy", x)
    golden = ort.InferenceSession(str(model), providers=["CPUExecutionProvider"]).run(None, {"features": x})[0]
    np.save(root / "data" / "labels" / "labels.npy", golden.argmax(1))
    (root / "pipeline.yaml").write_text(yaml.safe_dump(pipeline, sort_keys=False))
    monkeypatch.chdir(root)
    return root
