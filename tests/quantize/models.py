"""Test models for quantization: a small CNN with one layer made sensitive to int8 on purpose."""

from __future__ import annotations

from pathlib import Path

import numpy as np

SENSITIVE = "conv2"
LAYERS = ["conv1", "conv2", "conv3", "fc"]


def build_sensitive_model(path: Path, *, sensitive: bool = True, seed: int = 0) -> Path:
    """x[N,3,8,8] -> conv1 -> relu -> conv2 -> relu -> conv3 -> relu -> gap -> flat -> fc -> logits[N,5].

    conv1's last output channel is dead (zero weights, negative bias: ReLU makes it 0 everywhere). With
    ``sensitive``, each of conv2's filters gets one weight 1000x its largest on that dead channel: the
    fp32 output is unchanged (it multiplies zeros), but int8 weight scales (per channel, symmetric) are
    set by that outlier and every real weight of conv2 rounds to 0. Only conv2 needs to stay in float.
    """
    import onnx
    from onnx import TensorProto, helper, numpy_helper

    rng = np.random.default_rng(seed)
    w1 = rng.standard_normal((8, 3, 3, 3)).astype(np.float32) * 0.4
    b1 = rng.standard_normal(8).astype(np.float32) * 0.1
    w1[7], b1[7] = 0.0, -1.0
    w2 = rng.standard_normal((8, 8, 3, 3)).astype(np.float32) * 0.2
    if sensitive:
        w2[:, 7, 1, 1] = 1000.0 * np.abs(w2).reshape(8, -1).max(axis=1)
    w3 = rng.standard_normal((8, 8, 3, 3)).astype(np.float32) * 0.2
    wf = rng.standard_normal((5, 8)).astype(np.float32)
    bf = rng.standard_normal(5).astype(np.float32) * 0.1
    inits = [numpy_helper.from_array(a, n) for a, n in ((w1, "w1"), (b1, "b1"), (w2, "w2"), (w3, "w3"), (wf, "wf"), (bf, "bf"))]
    nodes = [
        helper.make_node("Conv", ["x", "w1", "b1"], ["c1"], name="conv1", pads=[1, 1, 1, 1]),
        helper.make_node("Relu", ["c1"], ["r1"], name="relu1"),
        helper.make_node("Conv", ["r1", "w2"], ["c2"], name="conv2", pads=[1, 1, 1, 1]),
        helper.make_node("Relu", ["c2"], ["r2"], name="relu2"),
        helper.make_node("Conv", ["r2", "w3"], ["c3"], name="conv3", pads=[1, 1, 1, 1]),
        helper.make_node("Relu", ["c3"], ["r3"], name="relu3"),
        helper.make_node("GlobalAveragePool", ["r3"], ["g"], name="gap"),
        helper.make_node("Flatten", ["g"], ["f"], name="flat"),
        helper.make_node("Gemm", ["f", "wf", "bf"], ["logits"], name="fc", transB=1),
    ]
    graph = helper.make_graph(nodes, "sensitive", [helper.make_tensor_value_info("x", TensorProto.FLOAT, ["N", 3, 8, 8])],
                              [helper.make_tensor_value_info("logits", TensorProto.FLOAT, ["N", 5])], inits)
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 13)])
    model.ir_version = 8
    onnx.save(model, str(path))
    return path


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
