"""Real-model shapes through a whole build: a scalar input, a state batched on axis 1 and an If
model with outer reads, each converted, run, dumped and compared in one pipeline."""

from __future__ import annotations

import json

import numpy as np

from ascendpipe.contract import stage_folder
from tests import modelzoo

PIPELINE = """
stages:
{stages}
"""
STAGE = """
  convert_{n}:
    kind: convert
    model: models/{n}.onnx
    params: {{precision_mode: force_fp16}}
  infer_{n}:
    kind: infer
    model: convert_{n}
    inputs: {inputs}
  compare_{n}:
    kind: compare
    golden: models/{n}.onnx
    target: convert_{n}
    inputs: {inputs}
"""


def test_scalar_state_and_if_models_build_end_to_end(tmp_path):
    import ascendpipe

    (tmp_path / ".ascendpipe").mkdir()
    models = tmp_path / "models"
    modelzoo.scalar_input_model(models / "scalar.onnx")
    modelzoo.stateful_model(models / "state.onnx")
    modelzoo.if_outer_model(models / "branch.onnx")
    rng = np.random.default_rng(0)
    np.savez(tmp_path / "scalar.npz", audio=rng.standard_normal((3, 16)).astype(np.float32),
             sample_rate=np.array(8000, np.int64))
    np.savez(tmp_path / "state.npz", x=rng.standard_normal((3, 8)).astype(np.float32),
             state=rng.standard_normal((2, 3, 8)).astype(np.float32))
    np.savez(tmp_path / "branch.npz", x=rng.uniform(1, 9, (2, 4)).astype(np.float32))
    stages = "".join(STAGE.format(n=n, inputs=f"{n}.npz") for n in ("scalar", "state", "branch"))
    (tmp_path / "p.yaml").write_text(PIPELINE.format(stages=stages))
    run = ascendpipe.build(str(tmp_path / "p.yaml"), quiet=True)
    assert run["state"] == "done"
    for n in ("scalar", "state", "branch"):
        result = json.loads((tmp_path / "build" / stage_folder(f"compare_{n}") / "result.json").read_text())
        assert result["summary"]["output_cosine"] > 0.999, n
    assert run["stages"]["convert_branch"]["metrics"] == {"ops_fp16": 7, "ops_fp32": 0, "ops_other": 1}
    new_state = np.load(tmp_path / "build" / stage_folder("infer_state") / "outputs" / "new_state.npy")
    assert new_state.shape == (2, 3, 8)


def test_compare_takes_a_state_as_given_or_with_a_declared_batch_axis(tmp_path):
    import ascendpipe

    (tmp_path / ".ascendpipe").mkdir()
    modelzoo.stateful_model(tmp_path / "models" / "state.onnx", state_batch="S")  # nothing ties S to B
    rng = np.random.default_rng(1)
    np.savez(tmp_path / "state.npz", x=rng.standard_normal((3, 8)).astype(np.float32),
             state=rng.standard_normal((2, 3, 8)).astype(np.float32))
    text = PIPELINE.format(stages=STAGE.format(n="state", inputs="state.npz"))
    (tmp_path / "p.yaml").write_text(text)
    run = ascendpipe.build(str(tmp_path / "p.yaml"), ["compare_state"], quiet=True)
    assert run["state"] == "done"  # the arrays fit the model's shapes: compared as given, in one run
    declared = text.replace("    inputs: state.npz\n", "    inputs: state.npz\n    params: {batch_axes: {state: 1}}\n")
    (tmp_path / "p.yaml").write_text(declared)
    run = ascendpipe.build(str(tmp_path / "p.yaml"), ["compare_state"], quiet=True)
    assert run["state"] == "done"
    result = json.loads((tmp_path / "build" / stage_folder("compare_state") / "result.json").read_text())
    assert result["summary"]["output_cosine"] > 0.999
