"""A dump reads a model's weights by reference into its file (``onnxwire.weights_by_reference``): the
same bytes as when the whole file is read and copied into the session."""

import json
import os
from pathlib import Path

import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper, numpy_helper

from ascendpipe.backends.onnxruntime import dump as D
from ascendpipe.backends.onnxruntime import session as S
from ascendpipe.onnxwire import REFERENCE_MIN_BYTES, weights_by_reference
from ascendpipe.errors import UserError
from tests import modelzoo


def _weights_model(path: Path) -> Path:
    """float32, float16 and int64 weights over the reference threshold, small ones under it (a bias,
    a Reshape's shape), and one float32 weight held in float_data rather than raw_data."""
    rng = np.random.default_rng(5)
    inits = [
        numpy_helper.from_array(rng.standard_normal((16, 32)).astype(np.float32), "w1"),  # 2 KB
        numpy_helper.from_array(rng.standard_normal(32).astype(np.float32), "b1"),  # 128 B: inline
        numpy_helper.from_array(rng.standard_normal((32, 32)).astype(np.float16), "w2"),  # 2 KB
        numpy_helper.from_array(rng.integers(0, 32, 300).astype(np.int64), "idx"),  # 2.4 KB
        numpy_helper.from_array(np.array([-1, 4, 75], np.int64), "shape"),
        helper.make_tensor("w3", TensorProto.FLOAT, [32, 32], rng.standard_normal(1024).astype(np.float32).tolist()),
    ]
    inits[0].data_location = TensorProto.DEFAULT  # written out, as some exporters do: still inline data
    nodes = [
        helper.make_node("MatMul", ["x", "w1"], ["h"], name="mm1"),
        helper.make_node("Add", ["h", "b1"], ["hb"], name="bias"),
        helper.make_node("Cast", ["w2"], ["w2f"], name="cast", to=TensorProto.FLOAT),
        helper.make_node("MatMul", ["hb", "w2f"], ["h2"], name="mm2"),
        helper.make_node("MatMul", ["h2", "w3"], ["h3"], name="mm3"),
        helper.make_node("Gather", ["h3", "idx"], ["g"], name="gather", axis=1),
        helper.make_node("Reshape", ["g", "shape"], ["y"], name="reshape"),
    ]
    graph = helper.make_graph(nodes, "weights", [helper.make_tensor_value_info("x", TensorProto.FLOAT, [8, 16])],
                              [helper.make_tensor_value_info("y", TensorProto.FLOAT, None)], inits)
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    model.ir_version = 8
    onnx.save(model, str(path))
    return path


def test_big_raw_weights_become_references_to_their_bytes_in_the_file(tmp_path):
    path = _weights_model(tmp_path / "m.onnx")
    data = path.read_bytes()
    light = onnx.load_model_from_string(weights_by_reference(data, "m.onnx"))
    original = {i.name: i for i in onnx.load(str(path)).graph.initializer}
    by_name = {i.name: i for i in light.graph.initializer}
    assert list(by_name) == list(original)
    referenced = {n for n, i in by_name.items() if i.data_location == TensorProto.EXTERNAL}
    assert referenced == {"w1", "w2", "idx"}  # w3's data is in float_data, b1 and shape are small
    for name in referenced:
        entry = {e.key: e.value for e in by_name[name].external_data}
        start, length = int(entry["offset"]), int(entry["length"])
        assert entry["location"] == "m.onnx" and length >= REFERENCE_MIN_BYTES and not by_name[name].raw_data
        assert data[start:start + length] == original[name].raw_data
        assert list(by_name[name].dims) == list(original[name].dims) and by_name[name].data_type == original[name].data_type
    for name in set(original) - referenced:
        assert by_name[name] == original[name]
    assert light.graph.node == onnx.load(str(path)).graph.node
    # onnx's own reader of external data finds the same arrays
    onnx.external_data_helper.load_external_data_for_model(light, str(tmp_path))
    for name, init in original.items():
        got = {i.name: i for i in light.graph.initializer}[name]
        np.testing.assert_array_equal(numpy_helper.to_array(got), numpy_helper.to_array(init))


def test_weights_already_external_or_bytes_not_a_model_are_not_referenced(tmp_path):
    source = _weights_model(tmp_path / "m.onnx")
    onnx.save(onnx.load(str(source)), str(tmp_path / "ext.onnx"), save_as_external_data=True,
              all_tensors_to_one_file=True, location="ext.weights", size_threshold=0)
    assert weights_by_reference((tmp_path / "ext.onnx").read_bytes(), "ext.onnx") is None
    assert weights_by_reference(b"\x0a\xff\xff", "bad.onnx") is None  # a length past the end


def _dump_files(folder: Path) -> dict[str, bytes]:
    return {str(p.relative_to(folder)): p.read_bytes() for p in sorted(folder.rglob("*")) if p.is_file()}


@pytest.mark.parametrize("budget", [None, 1], ids=["one_run", "segments"])
def test_a_dump_by_reference_has_the_bytes_of_one_from_the_copied_file(tmp_path, monkeypatch, budget):
    path = _weights_model(tmp_path / "m.onnx")
    x = np.random.default_rng(2).standard_normal((8, 16)).astype(np.float32)
    _, weights_dir, _ = D._model_bytes(path)
    assert weights_dir == tmp_path.resolve()
    monkeypatch.chdir(tmp_path / "..")  # a relative model path, the weights found from the model's folder
    by_reference = D.dump_model(Path(tmp_path.name) / "m.onnx", {"x": x}, tmp_path / "ref", fusions=False,
                                memory_budget_bytes=budget)
    monkeypatch.setattr(S, "weights_dir_supported", lambda: False)  # an onnxruntime before 1.21
    assert D._model_bytes(path)[1] is None
    copied = D.dump_model(path, {"x": x}, tmp_path / "copy", fusions=False, memory_budget_bytes=budget)
    assert _dump_files(tmp_path / "ref") == _dump_files(tmp_path / "copy")
    index = json.loads(by_reference.read_text())
    assert index == json.loads(copied.read_text()) and len(index["tensors"]) == 8
    y = np.load(tmp_path / "ref" / index["tensors"][-1]["file"])
    model = {i.name: numpy_helper.to_array(i) for i in onnx.load(str(path)).graph.initializer}
    h3 = (x @ model["w1"] + model["b1"]) @ model["w2"].astype(np.float32) @ model["w3"]
    np.testing.assert_allclose(y, h3[:, model["idx"]].reshape(-1, 4, 75), rtol=1e-4, atol=1e-4)


def test_a_converted_model_dumps_the_same_by_reference(tmp_path, monkeypatch):
    from ascendpipe.backends.onnxruntime.convert import convert_model
    from ascendpipe.precision.settings import ConvertSettings

    model = modelzoo.text_detector(tmp_path / "det.onnx", size=32, width=8, blocks=1)
    convert_model(model, tmp_path / "conv", ConvertSettings(precision_mode="force_fp16"))
    feeds = {"image": modelzoo.text_detector_inputs(size=32)["image"]}
    assert D._model_bytes(tmp_path / "conv/model.onnx")[1] is not None
    D.dump_model(tmp_path / "conv/model.onnx", feeds, tmp_path / "ref", fusions=True, memory_budget_bytes=1 << 14)
    monkeypatch.setattr(S, "weights_dir_supported", lambda: False)
    D.dump_model(tmp_path / "conv/model.onnx", feeds, tmp_path / "copy", fusions=True, memory_budget_bytes=1 << 14)
    assert _dump_files(tmp_path / "ref") == _dump_files(tmp_path / "copy")


def test_a_model_file_replaced_while_it_is_dumped_is_refused(tmp_path, monkeypatch):
    path = _weights_model(tmp_path / "m.onnx")
    whole = D._Runner.whole

    def replaced_during_the_run(self, marked):
        whole(self, marked)
        os.replace(_weights_model(tmp_path / "other.onnx"), path)

    monkeypatch.setattr(D._Runner, "whole", replaced_during_the_run)
    with pytest.raises(UserError, match="model file changed while it was dumped") as err:
        D.dump_model(path, {"x": np.ones((8, 16), np.float32)}, tmp_path / "d", fusions=False)
    assert err.value.location.file == str(path)
    assert not (tmp_path / "d" / "index.json").exists()


@pytest.mark.parametrize("build", [modelzoo.linear_model, modelzoo.two_input_model, modelzoo.scalar_input_model,
                                   modelzoo.stateful_model, modelzoo.dynamic_hw_model, _weights_model])
def test_the_dump_stage_reads_the_inputs_a_session_lists_from_the_graph(tmp_path, build):
    path = build(tmp_path / "m.onnx")
    path = path[0] if isinstance(path, tuple) else path  # linear_model: (path, weights, bias)
    assert D.model_input_specs(path) == S.input_specs(S.make_session(path, fusions=False))


def test_an_initializer_listed_as_an_input_is_not_a_dump_input(tmp_path):
    path = _weights_model(tmp_path / "m.onnx")
    model = onnx.load(str(path))
    model.graph.input.append(helper.make_tensor_value_info("b1", TensorProto.FLOAT, [32]))  # an older exporter's habit
    onnx.save(model, str(path))
    assert [s.name for s in D.model_input_specs(path)] == ["x"] == [s.name for s in S.input_specs(S.make_session(path))]


def test_a_symlinked_model_reads_its_weights_through_the_link(tmp_path):
    (tmp_path / "store").mkdir()
    (tmp_path / "ws").mkdir()
    target = _weights_model(tmp_path / "store" / "object")
    (tmp_path / "ws" / "model.onnx").symlink_to(target)
    x = np.ones((8, 16), np.float32)
    D.dump_model(tmp_path / "ws" / "model.onnx", {"x": x}, tmp_path / "linked", fusions=False)
    D.dump_model(target, {"x": x}, tmp_path / "direct", fusions=False)
    linked, direct = _dump_files(tmp_path / "linked"), _dump_files(tmp_path / "direct")
    assert json.loads(linked.pop("index.json"))["model"] == "model.onnx"
    assert json.loads(direct.pop("index.json"))["model"] == "object"
    assert linked == direct


def test_bytes_that_are_no_model_are_one_located_error(tmp_path):
    (tmp_path / "bad.onnx").write_bytes(b"\x0a\xff\xff\x07not a model")
    with pytest.raises(UserError, match="cannot read the ONNX model") as err:
        D.dump_model(tmp_path / "bad.onnx", {"x": np.ones((8, 16), np.float32)}, tmp_path / "d", fusions=False)
    assert err.value.location.file == str(tmp_path / "bad.onnx")


def test_a_converted_model_is_known_by_its_metadata_without_reading_its_weights(tmp_path):
    from ascendpipe.backends.onnxruntime.dump_stage import is_converted

    (tmp_path / "emu").mkdir()
    emulated = modelzoo.emulated_model(tmp_path / "emu" / "model.onnx")
    assert is_converted(emulated) and not (emulated.parent / "convert.json").exists()
    assert not is_converted(_weights_model(tmp_path / "plain.onnx"))
    (tmp_path / "bad.onnx").write_bytes(b"\x0a\xff\xff\x07not a model")
    assert not is_converted(tmp_path / "bad.onnx")  # dump_model says what is wrong with it
