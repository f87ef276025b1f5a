import json

import numpy as np
import pytest

from ascendpipe.backends.onnxruntime.dump import dump_model, fits_without_estimate, tensor_stats
from ascendpipe.errors import UserError

from tests.modelzoo import conv2d_reference, conv_model, emulated_model, linear_model, linear_reference


def _index(path):
    return json.loads(path.read_text())


def test_tensor_stats_by_hand():
    assert tensor_stats(np.array([1.0, np.nan, np.inf, -2.0], np.float32)) == {"min": -2.0, "max": 1.0, "nan": 1, "inf": 1}
    assert tensor_stats(np.array([np.nan], np.float16)) == {"min": None, "max": None, "nan": 1, "inf": 0}
    assert tensor_stats(np.array([3, -1], np.int64)) == {"min": -1, "max": 3, "nan": 0, "inf": 0}


def test_golden_dump_has_every_tensor_with_values_and_stats(tmp_path):
    path, k = conv_model(tmp_path / "m.onnx")
    img = np.random.default_rng(7).standard_normal((2, 1, 4, 4)).astype(np.float32)
    index = _index(dump_model(path, {"img": img}, tmp_path / "dump", fusions=False))
    assert index["format"] == "ascendpipe-dump/1" and index["inputs"] == {"img": {"shape": [2, 1, 4, 4], "dtype": "float32"}}
    rows = [(t["name"], t["op_name"], t["op_type"], t["topo_index"]) for t in index["tensors"]]
    assert rows == [("img", "img", "Input", -1), ("c", "conv", "Conv", 0), ("r", "relu", "Relu", 1),
                    ("l", "log", "Log", 2), ("out", "sqrt", "Sqrt", 3)]
    conv = conv2d_reference(img, k)
    with np.errstate(divide="ignore", invalid="ignore"):
        expected = {"img": img, "c": conv, "r": np.maximum(conv, 0), "l": np.log(np.maximum(conv, 0))}
        expected["out"] = np.sqrt(expected["l"])
    for entry in index["tensors"]:
        got = np.load(tmp_path / "dump" / entry["file"])
        np.testing.assert_allclose(got, expected[entry["name"]], rtol=1e-5, atol=1e-5)
        ref = expected[entry["name"]]
        assert entry["nan"] == int(np.isnan(ref).sum()) and entry["inf"] == int(np.isinf(ref).sum())
        assert entry["shape"] == list(ref.shape)
        finite = ref[np.isfinite(ref)]
        assert entry["min"] == pytest.approx(float(finite.min()), abs=1e-5)
    assert index["tensors"][3]["inf"] > 0 and index["tensors"][4]["nan"] > 0  # the test model does hit both
    assert sorted(p.name for p in (tmp_path / "dump/tensors").iterdir()) == [f"{i:05d}.npy" for i in range(5)]


def test_segmented_dump_equals_single_run(tmp_path):
    path, w, b = linear_model(tmp_path / "m.onnx")
    x = np.random.default_rng(1).standard_normal((6, 3)).astype(np.float32)
    one_stats, many_stats = {}, {}
    one = _index(dump_model(path, {"x": x}, tmp_path / "one", fusions=False, stats=one_stats))
    many = _index(dump_model(path, {"x": x}, tmp_path / "many", fusions=False, memory_budget_bytes=50, stats=many_stats))
    # 6x2 floats = 48 bytes each (with weights 24 and 8 bytes): one op per segment
    assert one_stats["chunks"] == 1 and many_stats["chunks"] == 4
    assert (tmp_path / "one/index.json").read_bytes() == (tmp_path / "many/index.json").read_bytes()
    assert [t["name"] for t in one["tensors"]] == [t["name"] for t in many["tensors"]]
    for a, b_ in zip(one["tensors"], many["tensors"]):
        np.testing.assert_array_equal(np.load(tmp_path / "one" / a["file"]), np.load(tmp_path / "many" / b_["file"]))
    y_ref, s_ref = linear_reference(x, w, b)
    by_name = {t["name"]: t for t in many["tensors"]}
    np.testing.assert_allclose(np.load(tmp_path / "many" / by_name["head/score"]["file"]), s_ref, rtol=1e-5)


def test_emulated_dump_skips_internal_tensors_and_names_original_ops(tmp_path):
    path = emulated_model(tmp_path / "model.onnx")
    x = np.array([[1e-4 + 1e-7, -1.0, 70000.0, 0.3333333]], np.float32)
    index = _index(dump_model(path, {"x": x}, tmp_path / "dump", fusions=True))
    assert index["emulated"] is True
    rows = [(t["name"], t["op_name"], t["op_type"], t["topo_index"], t["dtype"]) for t in index["tensors"]]
    assert rows == [("x", "x", "Input", -1, "float32"), ("r", "relu", "Relu", 0, "float16"),
                    ("y", "neg", "Neg", 1, "float32")]
    r = np.load(tmp_path / "dump" / index["tensors"][1]["file"])
    with np.errstate(over="ignore"):
        expected = np.maximum(x, 0).astype(np.float16)  # 70000 overflows to inf in fp16
    np.testing.assert_array_equal(r, expected)
    assert index["tensors"][1]["inf"] == 1 and index["tensors"][2]["inf"] == 1
    for entry in index["tensors"]:  # an fp16 tensor's stats are read from its fp32 values: the same numbers
        stored = np.load(tmp_path / "dump" / entry["file"])
        assert {k: entry[k] for k in ("min", "max", "nan", "inf")} == tensor_stats(stored)
    assert index["tensors"][1]["max"] == 0.333251953125  # 0.3333333 in fp16; the inf is left out


def test_feed_mismatch_is_a_user_error(tmp_path):
    path, _, _ = linear_model(tmp_path / "m.onnx")
    with pytest.raises(UserError, match="expected float32 \\[N,3\\], given float32 \\[2,4\\]"):
        dump_model(path, {"x": np.ones((2, 4), np.float32)}, tmp_path / "d", fusions=False)
    with pytest.raises(UserError, match="do not match the model inputs x"):
        dump_model(path, {"z": np.ones((2, 3), np.float32)}, tmp_path / "d", fusions=False)


def test_model_with_external_weights_dumps_from_its_directory(tmp_path):
    import onnx

    path, w, b = linear_model(tmp_path / "src.onnx")
    model = onnx.load(str(path))
    onnx.save(model, str(tmp_path / "ext.onnx"), save_as_external_data=True, all_tensors_to_one_file=True,
              location="ext.weights", size_threshold=0)
    x = np.random.default_rng(4).standard_normal((2, 3)).astype(np.float32)
    index = _index(dump_model(tmp_path / "ext.onnx", {"x": x}, tmp_path / "d", fusions=False))
    by_name = {t["name"]: t for t in index["tensors"]}
    np.testing.assert_allclose(np.load(tmp_path / "d" / by_name["y"]["file"]), linear_reference(x, w, b)[0],
                               rtol=1e-5, atol=1e-6)


def test_shape_inference_is_skipped_only_when_a_generous_bound_fits(tmp_path):
    import onnx

    from tests.modelzoo import text_detector

    path, _, _ = linear_model(tmp_path / "m.onnx")
    model = onnx.load(str(path))
    x = {"x": np.ones((4, 3), np.float32)}  # 48 bytes; weights 24 bytes: 32 x 48 x 4 tensors = 6144
    assert fits_without_estimate(model, x, 4, 6144) and not fits_without_estimate(model, x, 4, 6143)
    assert fits_without_estimate(model, x, 4, None)
    detector = onnx.load(str(text_detector(tmp_path / "d.onnx", size=32, width=4, blocks=1)))
    assert not fits_without_estimate(detector, {"image": np.ones((1, 3, 32, 32), np.float32)}, 10, 1 << 40)  # Resize


def test_unnamed_ops_are_named_as_convert_names_them_on_both_sides(tmp_path):
    """An exported model with unnamed nodes: the golden's dump, its op graph and the converted model's
    dump name each op alike (<OpType>_<index>), so compare's rows and the golden's producers agree."""
    import onnx
    from onnx import TensorProto, helper

    from ascendpipe.backends.onnxruntime.convert import convert_model
    from ascendpipe.compare.runner import graph_info
    from ascendpipe.precision.settings import ConvertSettings

    nodes = [helper.make_node("Mul", ["x", "x"], ["sq"]), helper.make_node("Relu", ["sq"], ["r"]),
             helper.make_node("Add", ["r", "x"], ["y"])]
    graph = helper.make_graph(nodes, "g", [helper.make_tensor_value_info("x", TensorProto.FLOAT, [2, 3])],
                              [helper.make_tensor_value_info("y", TensorProto.FLOAT, [2, 3])])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    model.ir_version = 9
    onnx.save(model, tmp_path / "m.onnx")
    feeds = {"x": np.arange(6, dtype=np.float32).reshape(2, 3)}
    golden = _index(dump_model(tmp_path / "m.onnx", feeds, tmp_path / "golden", fusions=False))
    assert [(e["name"], e["op_name"]) for e in golden["tensors"][1:]] == [("sq", "Mul_0"), ("r", "Relu_1"), ("y", "Add_2")]
    assert golden["graph"]["producers"] == {"Mul_0": [], "Relu_1": ["Mul_0"], "Add_2": ["Relu_1"]}
    assert graph_info(tmp_path / "m.onnx")["producers"] == golden["graph"]["producers"]
    convert_model(tmp_path / "m.onnx", tmp_path / "conv", ConvertSettings(precision_mode="force_fp16"))
    target = _index(dump_model(tmp_path / "conv" / "model.onnx", feeds, tmp_path / "target", fusions=True))
    by_tensor = {e["name"]: e["op_name"] for e in target["tensors"]}
    assert all(by_tensor[e["name"]] == e["op_name"] for e in golden["tensors"][1:] if e["name"] in by_tensor)
    assert {"sq", "y"} <= set(by_tensor)
