"""An empty KV cache (a past of length 0, the first decode step) pinned by ``--input-shape``: convert
fixes the dim at 0 (not left symbolic), compare feeds it, and fix takes the flag too."""

from __future__ import annotations

import json
import subprocess
import sys

import numpy as np
import onnx

from ascendpipe.backends.onnxruntime.convert import convert_model
from ascendpipe.onnxgraph import read_input_specs
from ascendpipe.precision.settings import resolve
from tests import modelzoo

EMPTY = "past_key_0:2,2,0,16"


def _cli(*args):
    return subprocess.run([sys.executable, "-m", "ascendpipe", *args], capture_output=True, text=True)


def _dims(path, name):
    vi = next(i for i in onnx.load(str(path)).graph.input if i.name == name)
    return [d.dim_value if d.HasField("dim_value") else d.dim_param for d in vi.type.tensor_type.shape.dim]


def test_convert_pins_an_empty_past_at_zero(tmp_path):
    model = modelzoo.kv_cache_model(tmp_path / "kv.onnx")
    assert _dims(model, "past_key_0") == [2, 2, "past", 16]
    result = convert_model(model, tmp_path / "out", resolve({"input_shape": EMPTY}))
    assert _dims(result.model_path, "past_key_0") == [2, 2, 0, 16]
    spec = next(s for s in read_input_specs(result.model_path) if s.name == "past_key_0")
    assert spec.shape == (2, 2, 0, 16)  # a fixed 0, not a symbolic dim
    longer = convert_model(model, tmp_path / "eight", resolve({"input_shape": "past_key_0:2,2,8,16"}))
    assert _dims(longer.model_path, "past_key_0") == [2, 2, 8, 16]


def test_compare_and_fix_run_an_empty_cache_from_the_command_line(tmp_path):
    model = modelzoo.kv_cache_model(tmp_path / "kv.onnx")
    convert = _cli("convert", "--model", str(model), "--output", str(tmp_path / "c"), "--input-shape", EMPTY)
    assert convert.returncode == 0, convert.stderr
    compare = _cli("compare", "--golden", str(model), "--target", str(tmp_path / "c"), "--json")
    assert compare.returncode == 0, compare.stderr
    result = json.loads(compare.stdout)
    assert "past_key_0 [2, 2, 0, 16]" in result["input"]
    present = next(r for r in result["rows"] if r["op_name"] == "concat_past")
    assert present["cosine"] > 0.9999  # the present key holds only the new step's key
    unpinned = _cli("fix", "--golden", str(model), "--max-attempts", "2")
    assert unpinned.returncode == 2 and "'past_key_0' axis 2 (past)" in unpinned.stderr
    fixed = _cli("fix", "--golden", str(model), "--input-shape", EMPTY, "--max-attempts", "2", "--json")
    assert fixed.returncode == 0, fixed.stderr
    assert json.loads(fixed.stdout)["passed"] is True
    wrong = _cli("fix", "--golden", str(model), "--input-shape", "past_key:2,2,0,16")
    assert wrong.returncode == 2 and "'past_key', which is not a model input" in wrong.stderr


def test_a_pinned_zero_in_the_model_is_a_fixed_dim_for_random_inputs(tmp_path):
    from ascendpipe.inputs import random_inputs

    model = modelzoo.kv_cache_model(tmp_path / "kv.onnx")
    converted = convert_model(model, tmp_path / "out", resolve({"input_shape": EMPTY})).model_path
    feeds = dict(random_inputs(read_input_specs(converted), seed=0))
    assert feeds["past_key_0"].shape == (2, 2, 0, 16) and feeds["q"].shape == (2, 2, 1, 16)
    assert np.asarray(feeds["past_key_0"]).size == 0
