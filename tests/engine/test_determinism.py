"""Two clean builds of one pipeline write byte-identical outputs and objects (no timings, pids or
absolute paths in what feeds keys), so a rerun that changes nothing downstream is cut off early."""

from __future__ import annotations

import shutil
from pathlib import Path

import numpy as np

import ascendpipe

PIPELINE = """\
stages:
  convert:
    kind: convert
    model: m.onnx
    params: {precision_mode: force_fp16}
  infer:
    kind: infer
    model: convert
    inputs: x.npy
    params: {warmup: 1}
  eval:
    kind: eval
    outputs: infer
    labels: labels.npy
    params: {task: classification, output_name: y, topk: [1]}
"""


def _workspace(root: Path) -> Path:
    from tests.modelzoo import linear_model

    (root / ".ascendpipe").mkdir(parents=True)
    linear_model(root / "m.onnx", features=3, classes=2)
    rng = np.random.default_rng(0)
    np.save(root / "x.npy", rng.standard_normal((16, 3)).astype(np.float32))
    np.save(root / "labels.npy", rng.integers(0, 2, 16))
    (root / "pipeline.yaml").write_text(PIPELINE)
    return root


def _build(root: Path, **kw):
    return ascendpipe.build(str(root / "pipeline.yaml"), quiet=True, **kw)


def _tree(folder: Path) -> dict[str, bytes]:
    return {str(p.relative_to(folder)): p.read_bytes() for p in sorted(folder.rglob("*")) if p.is_file()}


def _outputs(root: Path) -> dict[str, bytes]:
    # logs are the build's diary (timings, run numbers), not outputs: no key reads them
    return {k: v for k, v in _tree(root / "build").items() if not k.endswith(".log")}


def test_two_clean_builds_are_byte_identical_here_and_at_another_path(tmp_path):
    a = _workspace(tmp_path / "a")
    first = _build(a)
    assert first["state"] == "done"
    outs, objects = _outputs(a), _tree(a / "cache" / "objects")
    assert outs and objects
    for folder in ("build", "cache", ".ascendpipe"):
        shutil.rmtree(a / folder)
    (a / ".ascendpipe").mkdir()
    second = _build(a)
    assert {n: s["state"] for n, s in second["stages"].items()} == {"convert": "ran", "infer": "ran", "eval": "ran"}
    assert _outputs(a) == outs
    assert _tree(a / "cache" / "objects") == objects
    # the same pipeline in another folder: no absolute path leaks into an output
    b = _workspace(tmp_path / "elsewhere" / "b")
    _build(b)
    assert _outputs(b) == outs
    assert _tree(b / "cache" / "objects") == objects
    assert {n: s["outputs"] for n, s in second["stages"].items()} == {n: s["outputs"] for n, s in first["stages"].items()}


def test_eval_is_cut_off_when_a_rerun_infer_writes_the_same_outputs(tmp_path):
    root = _workspace(tmp_path / "ws")
    first = _build(root)
    run = _build(root, set=["stages.infer.params.warmup=3"])  # a setting that cannot change outputs
    assert {n: s["state"] for n, s in run["stages"].items()} == {"convert": "fresh", "infer": "ran", "eval": "fresh"}
    assert run["stages"]["infer"]["outputs"] == first["stages"]["infer"]["outputs"]
    # the timings went to the run record
    assert run["stages"]["infer"]["metrics"]["latency_ms_mean"] > 0
    assert set(run["stages"]["infer"]["info"]["latency"]) >= {"NPU_compute_time", "latency_ms", "throughput"}
