"""A segmented dump holds the same bytes as one run: every .npy and index.json (golden and emulated)."""

import json
from pathlib import Path

import numpy as np
import pytest

from ascendpipe.backends.onnxruntime.dump import dump_model
from tests import modelzoo


def _same_dump(model: Path, feeds: dict, tmp_path: Path, *, fusions: bool, budget: int = 1) -> int:
    """Dump in one run and in segments (a tiny budget: every legal cut); assert equal bytes; return
    the number of segment runs."""
    one_stats, many_stats = {}, {}
    one = dump_model(model, feeds, tmp_path / "one", fusions=fusions, memory_budget_bytes=None, stats=one_stats)
    many = dump_model(model, feeds, tmp_path / "many", fusions=fusions, memory_budget_bytes=budget, stats=many_stats)
    assert one_stats["chunks"] == 1
    assert one.read_bytes() == many.read_bytes()
    files = sorted(p.name for p in (tmp_path / "one/tensors").iterdir())
    assert files == sorted(p.name for p in (tmp_path / "many/tensors").iterdir()) and files
    for name in files:
        assert (tmp_path / "one/tensors" / name).read_bytes() == (tmp_path / "many/tensors" / name).read_bytes(), name
    return many_stats["chunks"]


def _convert(model: Path, out: Path) -> Path:
    from ascendpipe.backends.onnxruntime.convert import convert_model
    from ascendpipe.precision.settings import ConvertSettings

    convert_model(model, out, ConvertSettings(precision_mode="force_fp16"))
    return out / "model.onnx"


def _synthetic(path: Path) -> Path:
    """Constants, a Split whose two outputs are read at different depths, a graph output in the
    middle, int64 shape tensors (Shape -> Gather -> Concat -> Reshape) and a dynamic batch."""
    from onnx import TensorProto, helper

    def const(name, value, dtype=TensorProto.FLOAT):
        array = np.asarray(value)
        return helper.make_node("Constant", [], [name], name=name,
                                value=helper.make_tensor(name + "_v", dtype, list(array.shape), array.ravel().tolist()))

    nodes = [
        const("two", [2.0]),
        helper.make_node("Mul", ["x", "two"], ["a"], name="scale"),
        helper.make_node("Shape", ["a"], ["shape"], name="shape"),
        const("zero", 0, TensorProto.INT64),
        helper.make_node("Gather", ["shape", "zero"], ["batch"], name="batch", axis=0),
        helper.make_node("Split", ["a"], ["left", "right"], name="split", axis=1),
        helper.make_node("Relu", ["left"], ["mid"], name="relu"),  # a graph output in the middle
        helper.make_node("Exp", ["mid"], ["e"], name="exp"),
        helper.make_node("Add", ["e", "two"], ["f"], name="add"),
        const("minus_one", [-1], TensorProto.INT64),
        helper.make_node("Unsqueeze", ["batch", "axes0"], ["batch1"], name="unsq"),
        helper.make_node("Concat", ["batch1", "minus_one"], ["newshape"], name="concat", axis=0),
        helper.make_node("Mul", ["right", "f"], ["g"], name="mix"),  # reads right, made long before
        helper.make_node("Reshape", ["g", "newshape"], ["y"], name="reshape"),
    ]
    graph = helper.make_graph(
        nodes, "synthetic", [helper.make_tensor_value_info("x", TensorProto.FLOAT, ["N", 8, 3])],
        [helper.make_tensor_value_info("mid", TensorProto.FLOAT, ["N", 4, 3]),
         helper.make_tensor_value_info("y", TensorProto.FLOAT, ["N", 12])],
        [modelzoo._const("axes0", np.array([0], np.int64))])
    return modelzoo._save(graph, path)


def test_text_detector_golden_and_fp16_segmented_equal_one_run(tmp_path):
    model = modelzoo.text_detector(tmp_path / "det.onnx", size=64, width=8, blocks=2)
    feeds = {"image": modelzoo.text_detector_inputs(size=64)["image"]}
    assert _same_dump(model, feeds, tmp_path / "golden", fusions=False) > 20
    # the default budget cuts too, at fewer places (a segment is filled to it)
    assert _same_dump(model, feeds, tmp_path / "default", fusions=False, budget=64 << 10) > 1
    emulated = _convert(model, tmp_path / "conv")
    assert _same_dump(emulated, feeds, tmp_path / "fp16", fusions=True) > 10


# fp16_cut: whether the emulated model has a legal cut. if_outer's bodies read the emulation's
# rounded copy of x (an internal tensor) from the outer scope: no legal cut, one run as before.
# loop_outer's body reads h, a dumped tensor: the Loop runs in a segment of its own.
@pytest.mark.parametrize("build, feeds, fp16_cut", [
    (modelzoo.conv_bn_relu_model, modelzoo.conv_bn_relu_inputs(), True),
    (modelzoo.if_outer_model, {"x": np.array([[1.0, -2.0, 3.0, 0.5], [0.25, 1.5, -1.0, 2.0]], np.float32)}, False),
    (modelzoo.loop_outer_model, {"x": np.array([[1.0, -2.0, 3.0, 0.5]], np.float32)}, True),
    (_synthetic, {"x": np.random.default_rng(3).standard_normal((3, 8, 3)).astype(np.float32)}, True),
], ids=["conv_bn_relu", "if_outer", "loop_outer", "synthetic"])
def test_small_graphs_segmented_equal_one_run(tmp_path, build, feeds, fp16_cut):
    model = build(tmp_path / "m.onnx")
    assert _same_dump(model, feeds, tmp_path / "golden", fusions=False) > 1
    runs = _same_dump(_convert(model, tmp_path / "conv"), feeds, tmp_path / "fp16", fusions=True)
    assert runs > 1 if fp16_cut else runs == 1


def test_dynamic_batch_and_the_values_are_right(tmp_path):
    model = _synthetic(tmp_path / "m.onnx")
    for batch in (1, 5):
        x = np.random.default_rng(batch).standard_normal((batch, 8, 3)).astype(np.float32)
        runs = _same_dump(model, {"x": x}, tmp_path / str(batch), fusions=False)
        assert runs >= 6
        import json

        index = json.loads((tmp_path / str(batch) / "many/index.json").read_text())
        got = {t["name"]: np.load(tmp_path / str(batch) / "many" / t["file"]) for t in index["tensors"]}
        a = x * 2
        f = np.exp(np.maximum(a[:, :4], 0)) + 2
        np.testing.assert_array_equal(got["batch"], np.int64(batch))
        np.testing.assert_array_equal(got["newshape"], [batch, -1])
        np.testing.assert_allclose(got["y"], (a[:, 4:] * f).reshape(batch, -1), rtol=1e-6)
        assert "two" not in got and "minus_one" not in got  # Constants are parameters, not dumped


def test_segments_are_logged_and_counted(tmp_path):
    import io

    model = _synthetic(tmp_path / "m.onnx")
    x = np.ones((2, 8, 3), np.float32)
    log, stats = io.StringIO(), {}
    dump_model(model, {"x": x}, tmp_path / "d", fusions=False, memory_budget_bytes=1, log=log, stats=stats)
    lines = log.getvalue().splitlines()
    assert len(lines) == stats["chunks"] and lines[0].startswith(f"dump: segment 1/{stats['chunks']}: ")


def test_segments_of_a_converted_model_run_with_its_runtime_json(tmp_path):
    import json

    from ascendpipe.errors import UserError

    model = _convert(modelzoo.conv_bn_relu_model(tmp_path / "m.onnx"), tmp_path / "conv")
    feeds = modelzoo.conv_bn_relu_inputs()
    (model.parent / "runtime.json").write_text(json.dumps({"session": {"graph_optimization_level": "basic"}}))
    assert _same_dump(model, feeds, tmp_path / "basic", fusions=True) > 1
    (model.parent / "runtime.json").write_text(json.dumps({"session": {"graph_optimization_level": "fastest"}}))
    with pytest.raises(UserError, match="graph_optimization_level: unknown value 'fastest'"):
        dump_model(model, feeds, tmp_path / "bad", fusions=True, memory_budget_bytes=1)


def test_a_model_with_external_weights_segments_from_its_inlined_bytes(tmp_path):
    import onnx

    source = modelzoo.conv_bn_relu_model(tmp_path / "src.onnx")
    onnx.save(onnx.load(str(source)), str(tmp_path / "ext.onnx"), save_as_external_data=True,
              all_tensors_to_one_file=True, location="ext.weights", size_threshold=0)
    assert _same_dump(tmp_path / "ext.onnx", modelzoo.conv_bn_relu_inputs(), tmp_path / "d", fusions=False) > 1


def test_without_a_budget_a_small_dump_runs_once_and_a_large_one_in_segments(tmp_path, monkeypatch):
    """"auto": segments cost a session each, so a dump under ONE_RUN_BYTES runs once; over it, in
    segments of DEFAULT_MEMORY_BUDGET; the bytes are those of one run either way."""
    import numpy as np

    from ascendpipe.backends.onnxruntime import dump as D
    from tests import modelzoo

    model = modelzoo.text_detector(tmp_path / "det.onnx", size=64, width=8)
    feeds = {"image": modelzoo.text_detector_inputs(size=64)["image"]}
    small: dict = {}
    D.dump_model(model, feeds, tmp_path / "auto", fusions=False, stats=small)
    assert small["chunks"] == 1
    monkeypatch.setattr(D, "ONE_RUN_BYTES", 1 << 16)
    monkeypatch.setattr(D, "DEFAULT_MEMORY_BUDGET", 1 << 18)
    large: dict = {}
    D.dump_model(model, feeds, tmp_path / "segments", fusions=False, stats=large)
    assert large["chunks"] > 1
    one = json.loads((tmp_path / "auto" / "index.json").read_text())
    assert json.loads((tmp_path / "segments" / "index.json").read_text()) == one
    for entry in one["tensors"]:
        a = np.load(tmp_path / "auto" / entry["file"])
        assert a.tobytes() == np.load(tmp_path / "segments" / entry["file"]).tobytes()


def _input_read_by_many(path: Path) -> Path:
    """A transformer layer's input pattern: the graph input ``x`` read by three MatMuls (Q, K, V)
    and, last, by a residual Add: under force_fp16 all four read the emulation's one rounded copy
    of ``x``."""
    from onnx import TensorProto, helper

    rng = np.random.default_rng(5)
    weights = [modelzoo._const(f"w{k}", rng.standard_normal((6, 6)).astype(np.float32)) for k in "qkv"]
    nodes = [
        helper.make_node("MatMul", ["x", "wq"], ["q"], name="q"),
        helper.make_node("MatMul", ["x", "wk"], ["k"], name="k"),
        helper.make_node("MatMul", ["x", "wv"], ["v"], name="v"),
        helper.make_node("Mul", ["q", "k"], ["qk"], name="qk"),
        helper.make_node("Add", ["qk", "v"], ["mixed"], name="mixed"),
        helper.make_node("Add", ["x", "mixed"], ["y"], name="residual"),
    ]
    graph = helper.make_graph(nodes, "input_read_by_many", [helper.make_tensor_value_info("x", TensorProto.FLOAT, [4, 6])],
                              [helper.make_tensor_value_info("y", TensorProto.FLOAT, [4, 6])], weights)
    return modelzoo._save(graph, path)


def test_a_rounded_graph_input_read_by_many_fp16_ops_may_be_cut_across(tmp_path):
    """The rounded copy of x lives from the Q MatMul to the residual Add: the segments cut across it
    (one segment per op, as in the golden) and the dump keeps its bytes."""
    import onnx

    from ascendpipe.backends.onnxruntime.dump import ROUNDED_PREFIX

    model = _input_read_by_many(tmp_path / "m.onnx")
    x = np.random.default_rng(6).standard_normal((4, 6)).astype(np.float32)
    golden_runs = _same_dump(model, {"x": x}, tmp_path / "golden", fusions=False)
    emulated = _convert(model, tmp_path / "conv")
    readers = [n.name for n in onnx.load(str(emulated)).graph.node if ROUNDED_PREFIX + "x" in n.input]
    assert readers == ["q", "k", "v", "residual"]  # one rounded copy of x, read by all four
    runs = _same_dump(emulated, {"x": x}, tmp_path / "fp16", fusions=True)
    assert golden_runs == 6 and runs >= 6
