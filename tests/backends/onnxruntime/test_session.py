import json
import os
import sys

import onnxruntime as ort
import pytest

from ascendpipe.backends.onnxruntime.session import input_specs, make_session, shrink_shared_arena, use_shared_arena
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


def _rss_bytes() -> int:
    with open("/proc/self/statm") as handle:
        return int(handle.read().split()[1]) * os.sysconf("SC_PAGE_SIZE")


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="reads /proc/self/statm")
def test_shared_arena_sessions_compute_alike_and_the_arena_shrinks_when_asked(tmp_path):
    import numpy as np
    from onnx import TensorProto, helper, save

    graph = helper.make_graph([helper.make_node("Neg", ["x"], ["y"])], "neg",
                              [helper.make_tensor_value_info("x", TensorProto.FLOAT, ["n"])],
                              [helper.make_tensor_value_info("y", TensorProto.FLOAT, ["n"])])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 13)])
    model.ir_version = 8
    save(model, str(tmp_path / "neg.onnx"))
    x = np.arange(16 << 20, dtype=np.float32)  # 64 MiB: the output comes from the arena
    assert use_shared_arena() and use_shared_arena()  # registered once, then reported
    shared = make_session(tmp_path / "neg.onnx", shared_arena=True)
    assert shared.get_session_options().get_session_config_entry("session.use_env_allocators") == "1"
    (y,) = shared.run(None, {"x": x})
    (own,) = make_session(tmp_path / "neg.onnx").run(None, {"x": x})
    np.testing.assert_array_equal(y, -x)
    np.testing.assert_array_equal(own, y)
    del y, own
    held = _rss_bytes()  # the output's 64 MiB are free in the arena but still the process's
    shrink_shared_arena()
    assert held - _rss_bytes() >= 48 << 20


def test_without_a_shared_arena_sessions_use_their_own(tmp_path, monkeypatch):
    from ascendpipe.backends.onnxruntime import session

    class Fail(Exception):  # onnxruntime's own errors derive from Exception, not RuntimeError
        pass

    def refuse(*args):
        raise Fail("not supported")

    monkeypatch.setattr(session, "_SHARED_ARENA", None)
    monkeypatch.setattr(ort, "create_and_register_allocator", refuse)
    assert use_shared_arena() is False
    path, _, _ = linear_model(tmp_path / "m.onnx")
    options = make_session(path, shared_arena=True).get_session_options()
    with pytest.raises(RuntimeError, match="does not have configuration"):
        options.get_session_config_entry("session.use_env_allocators")
    shrink_shared_arena()  # nothing to shrink: no error
