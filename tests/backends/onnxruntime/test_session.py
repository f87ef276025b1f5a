import json

import onnxruntime as ort
import pytest

from ascendpipe.backends.onnxruntime.session import input_specs, make_session
from ascendpipe.errors import UserError

from tests.modelzoo import linear_model


def test_input_specs_keep_static_and_named_dims(tmp_path):
    path, _, _ = linear_model(tmp_path / "m.onnx", batch="batch", features=5)
    (spec,) = input_specs(make_session(path))
    assert (spec.name, spec.shape, spec.dtype) == ("x", ("batch", 5), "float32")


def test_runtime_json_beside_the_model_is_honoured(tmp_path):
    path, _, _ = linear_model(tmp_path / "m.onnx")
    settings = {"graph_optimization_level": "ORT_ENABLE_BASIC", "intra_op_num_threads": 1,
                "execution_mode": "ORT_SEQUENTIAL", "disabled_optimizers": ["ConstantFolding"]}
    (tmp_path / "runtime.json").write_text(json.dumps({"session": settings}))
    opts = make_session(path).get_session_options()
    assert opts.graph_optimization_level == ort.GraphOptimizationLevel.ORT_ENABLE_BASIC
    assert opts.intra_op_num_threads == 1
    # fusions off wins over the file's level (a golden dump needs every tensor)
    off = make_session(path, fusions=False).get_session_options()
    assert off.graph_optimization_level == ort.GraphOptimizationLevel.ORT_DISABLE_ALL


def test_bad_runtime_value_names_the_field_and_file(tmp_path):
    path, _, _ = linear_model(tmp_path / "m.onnx")
    (tmp_path / "runtime.json").write_text(json.dumps({"session": {"graph_optimization_level": "fastest"}}))
    with pytest.raises(UserError) as err:
        make_session(path)
    assert "graph_optimization_level: unknown value 'fastest'" in str(err.value)
    assert "runtime.json" in str(err.value)


def test_unreadable_model_is_a_user_error(tmp_path):
    (tmp_path / "broken.onnx").write_bytes(b"not a model")
    with pytest.raises(UserError, match="onnxruntime cannot load the model"):
        make_session(tmp_path / "broken.onnx")
    with pytest.raises(UserError, match="does not exist"):
        make_session(tmp_path / "missing.onnx")
