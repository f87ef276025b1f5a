"""Inputs of every shape: a 0-d input, a state batched on axis 1, random inputs only for fixed
shapes (each symbolic dim named), and a dynamic model given its shape at convert."""

from __future__ import annotations

import io
import json

import numpy as np
import pytest

from ascendpipe.errors import UserError
from ascendpipe.inputs import InputSpec, load_inputs, random_inputs, with_batch_axes
from ascendpipe.onnxgraph import read_input_specs
from tests import modelzoo


def _run(path, feeds):
    import onnxruntime as ort

    return ort.InferenceSession(str(path), providers=["CPUExecutionProvider"]).run(None, dict(feeds))


def test_a_scalar_input_is_one_value_for_every_batch(tmp_path):
    model = modelzoo.scalar_input_model(tmp_path / "m.onnx")
    specs = read_input_specs(model)
    audio = np.random.default_rng(0).standard_normal((5, 16)).astype(np.float32)
    np.savez(tmp_path / "a.npz", audio=audio[:3], sample_rate=np.array(8000, np.int64))
    np.savez(tmp_path / "b.npz", audio=audio[3:], sample_rate=np.array(8000, np.int64))
    (whole,) = load_inputs(tmp_path / "a.npz", specs)
    assert whole["sample_rate"].shape == () and whole.rows == whole.valid == 3
    batches = load_inputs(tmp_path, specs, batch_size=2)  # two files, re-batched: the scalar rides along
    assert [b.valid for b in batches] == [2, 2, 1]
    assert all(int(b["sample_rate"]) == 8000 for b in batches)
    outputs = np.concatenate([_run(model, b)[0] for b in batches])
    np.testing.assert_allclose(outputs, audio * 0.5, rtol=1e-6)


def test_scalars_that_differ_between_files_cannot_be_batched_together(tmp_path):
    model = modelzoo.scalar_input_model(tmp_path / "m.onnx")
    np.savez(tmp_path / "a.npz", audio=np.ones((1, 16), np.float32), sample_rate=np.array(8000, np.int64))
    np.savez(tmp_path / "b.npz", audio=np.ones((1, 16), np.float32), sample_rate=np.array(16000, np.int64))
    with pytest.raises(UserError, match="'sample_rate' has no batch axis"):
        load_inputs(tmp_path, read_input_specs(model), batch_size=2)
    np.savez(tmp_path / "b.npz", audio=np.ones((1, 16), np.float32), sample_rate=np.array([16000], np.int64))
    with pytest.raises(UserError, match=r"expected int64 \[\] \(a scalar\), given int64 \[1\]"):
        load_inputs(tmp_path / "b.npz", read_input_specs(model))


def test_a_state_batched_on_axis_1_is_found_from_the_batch_dims_name(tmp_path):
    model = modelzoo.stateful_model(tmp_path / "m.onnx")
    specs = with_batch_axes(read_input_specs(model))
    assert [(s.name, s.axis) for s in specs] == [("x", 0), ("state", 1)]
    rng = np.random.default_rng(2)
    x, state = rng.standard_normal((3, 8)).astype(np.float32), rng.standard_normal((2, 3, 8)).astype(np.float32)
    np.savez(tmp_path / "s.npz", x=x, state=state)
    batches = load_inputs(tmp_path / "s.npz", read_input_specs(model), batch_size=2)
    assert [(b["x"].shape, b["state"].shape, b.valid) for b in batches] == [((2, 8), (2, 2, 8), 2), ((1, 8), (2, 1, 8), 1)]
    np.testing.assert_array_equal(batches[1]["state"], state[:, 2:])  # sample 2 is stream 2's input and state
    y = np.concatenate([_run(model, b)[0] for b in batches])
    np.testing.assert_allclose(y, x + state.sum(axis=0), rtol=1e-6)


def test_a_state_whose_batch_dim_is_not_named_needs_its_axis_declared_to_be_batched(tmp_path):
    specs = [InputSpec("x", ("batch", 8), "float32"), InputSpec("state", (2, "n", 8), "float32")]
    np.savez(tmp_path / "s.npz", x=np.zeros((3, 8), np.float32), state=np.zeros((2, 3, 8), np.float32))
    (whole,) = load_inputs(tmp_path / "s.npz", specs)  # the arrays fit the model: run as given
    assert whole["state"].shape == (2, 3, 8) and whole["x"].shape == (3, 8)
    with pytest.raises(UserError) as err:  # batches asked: the state's samples axis must be said
        load_inputs(tmp_path / "s.npz", specs, batch_size=2)
    assert "'state' fixes its batch axis 0 at 2" in err.value.message and "batch_axes: {state: 1}" in str(err.value)
    (batch,) = load_inputs(tmp_path / "s.npz", specs, batch_axes={"state": 1})
    assert batch.rows == 3 and batch.head(2)["state"].shape == (2, 2, 8)
    with pytest.raises(UserError, match="'stat', which is not a model input"):
        load_inputs(tmp_path / "s.npz", specs, batch_axes={"stat": 1})
    with pytest.raises(UserError, match="3 is not an axis of a rank-3 input"):
        load_inputs(tmp_path / "s.npz", specs, batch_axes={"state": 3})


def test_infer_and_dump_stages_take_a_scalar_and_a_state(tmp_path):
    from ascendpipe.stages.base import StageContext
    from ascendpipe.stages.dump import DumpKind
    from ascendpipe.stages.infer import InferKind

    model = modelzoo.stateful_model(tmp_path / "m.onnx")
    rng = np.random.default_rng(3)
    x, state = rng.standard_normal((4, 8)).astype(np.float32), rng.standard_normal((2, 4, 8)).astype(np.float32)
    np.savez(tmp_path / "s.npz", x=x, state=state)

    def ctx(kind, params):
        out = tmp_path / f"out-{kind}"
        out.mkdir()
        return StageContext(name=kind, kind=kind, workspace=tmp_path, out_dir=out, final_out_dir=tmp_path / "build" / kind,
                            params=params, inputs={"model": model, "inputs": tmp_path / "s.npz"}, upstream={},
                            backend="onnxruntime", log=io.StringIO())

    InferKind().run(ctx("infer", {"batch_size": 3, "batch_axes": {"state": 1}}))
    y = np.load(tmp_path / "out-infer" / "outputs" / "y.npy")
    np.testing.assert_allclose(y, x + state.sum(axis=0), rtol=1e-6)
    DumpKind().run(ctx("dump", {"max_batch": 2}))
    index = json.loads((tmp_path / "out-dump" / "index.json").read_text())
    assert index["inputs"]["state"]["shape"] == [2, 2, 8] and index["inputs"]["x"]["shape"] == [2, 8]


def test_random_inputs_refuse_symbolic_dims_and_name_each(tmp_path):
    model = modelzoo.dynamic_hw_model(tmp_path / "m.onnx")
    with pytest.raises(UserError) as err:
        random_inputs(read_input_specs(model))
    assert "'image' axis 2 (H); 'image' axis 3 (W)" in err.value.message
    assert '--input-shape "image:1,3,640,640"' in str(err.value)
    # a batch dim is no obstacle: it becomes the batch size
    stateful = modelzoo.stateful_model(tmp_path / "s.onnx")
    feeds = random_inputs(read_input_specs(stateful), batch_size=3)
    assert feeds["x"].shape == (3, 8) and feeds["state"].shape == (2, 3, 8)
    assert random_inputs(read_input_specs(model), shapes={"image": [1, 3, 8, 10]})["image"].shape == (1, 3, 8, 10)


def test_a_dynamic_model_converted_at_a_shape_is_compared_on_random_inputs_of_it(tmp_path):
    from ascendpipe.backends.onnxruntime.convert import convert_model
    from ascendpipe.cli.main import main
    from ascendpipe.precision.settings import resolve

    model = modelzoo.dynamic_hw_model(tmp_path / "m.onnx")
    convert_model(model, tmp_path / "c", resolve({"input_shape": "image:1,3,24,32"}))
    specs = read_input_specs(tmp_path / "c" / "model.onnx")
    assert specs[0].shape == (1, 3, 24, 32)
    assert main(["compare", "--golden", str(model), "--target", str(tmp_path / "c"), "--output", str(tmp_path / "cmp"),
                 "--json"]) == 0
    result = json.loads((tmp_path / "cmp" / "result.json").read_text())
    assert "seeded random input" in result["input"] and [1, 4, 24, 32] in [r["shape"] for r in result["rows"]]
    with pytest.raises(UserError, match="the model fixes it at 3"):
        convert_model(model, tmp_path / "d", resolve({"input_shape": "image:1,4,24,32"}))
