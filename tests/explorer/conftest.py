"""Tiny workspaces with many runs for the explorer's tests: `run` stages (python one-liners) and a
compare of a four-op L2-norm model converted two ways, so a build takes well under a second."""

from __future__ import annotations

import io
import os
import sys
from pathlib import Path

import numpy as np
import pytest
import yaml

import ascendpipe

PREP = "import os; os.makedirs('data/prep', exist_ok=True); open('data/prep/scale.txt', 'w').write('{{ params.scale }}')"
SCORE = ("import json, os; s = float(open('data/prep/scale.txt').read()); os.makedirs('metrics', exist_ok=True); "
         "json.dump({'acc': round(0.5 + s / 100, 6), 'loss': round(1 / s, 6)}, open('metrics/score.json', 'w'))")

PIPELINE = {
    "params": {"scale": 1},
    "stages": {
        "prep": {"kind": "run", "cmd": f'python -c "{PREP}"', "outs": ["data/prep"]},
        "score": {"kind": "run", "cmd": f'python -c "{SCORE}"', "deps": ["data/prep"], "metrics": "metrics/score.json"},
        "convert": {"kind": "convert", "model": "models/l2.onnx",
                    "matrix": {"fp32": {"precision_mode": "force_fp32"}, # the pass off: each op of the L2 norm is its own row, so the fp16 curve has finite points
                               # around the overflowing sum (fused, the kernel's rows would all be inf)
                               "fp16": {"precision_mode": "force_fp16",
                                        "fusion_switch": {"TbeReduceElemwiseFusionPass": "off"}}}},
        "compare": {"kind": "compare", "golden": "models/l2.onnx", "target": "convert", "inputs": "data/probe.npy"},
    },
}


def l2_model(path: Path) -> Path:
    """``y = x / sqrt(sum(x * x))`` over 64 features: with inputs near 30 the sum of squares (~6e4)
    sits at the edge of fp16's range, so compare@fp16 fails while compare@fp32 passes, and both have
    finite per-op numbers to draw."""
    import onnx
    from onnx import TensorProto, helper, numpy_helper

    nodes = [
        helper.make_node("Mul", ["x", "x"], ["sq"], name="square"),
        helper.make_node("ReduceSum", ["sq", "axes"], ["ss"], name="sum", keepdims=1),
        helper.make_node("Sqrt", ["ss"], ["norm"], name="sqrt"),
        helper.make_node("Div", ["x", "norm"], ["y"], name="div"),
    ]
    graph = helper.make_graph(
        nodes, "l2", [helper.make_tensor_value_info("x", TensorProto.FLOAT, [2, 64])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, [2, 64])],
        initializer=[numpy_helper.from_array(np.array([1], dtype=np.int64), "axes")],
    )
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    model.ir_version = 8
    path.parent.mkdir(parents=True, exist_ok=True)
    onnx.save(model, str(path))
    return path


class Workspace:
    def __init__(self, root: Path):
        self.root = root
        (root / ".ascendpipe").mkdir(parents=True, exist_ok=True)
        l2_model(root / "models" / "l2.onnx")
        (root / "data").mkdir(exist_ok=True)
        np.save(root / "data" / "probe.npy", np.random.default_rng(0).uniform(20, 40, size=(2, 64)).astype(np.float32))
        self.pipeline = root / "pipeline.yaml"
        self.pipeline.write_text(yaml.safe_dump(PIPELINE, sort_keys=False))

    def build(self, *stages, set=()):
        run = ascendpipe.build(str(self.pipeline), list(stages), set=list(set), quiet=True, stream=io.StringIO())
        failed = {n: s.get("error") for n, s in run["stages"].items() if s["state"] == "failed"}
        assert not failed, failed
        return run


@pytest.fixture
def chdir_to():
    old = os.getcwd()
    yield lambda p: os.chdir(p)
    os.chdir(old)


@pytest.fixture(scope="module")
def many_runs(tmp_path_factory):
    """A workspace with 11 runs: scale swept over 9 values, then keep_dtype on the fp16 variant, then back."""
    ws = Workspace(tmp_path_factory.mktemp("explorer"))
    runs = [ws.build()]
    for scale in (2, 3, 4, 5, 6, 7, 8, 9):
        runs.append(ws.build(set=[f"params.scale={scale}"]))
    runs.append(ws.build(set=["stages.convert.matrix.fp16.keep_dtype=[sum,sqrt]"]))
    runs.append(ws.build())
    ws.runs = runs
    return ws


def python_of_tests() -> str:
    return sys.executable
