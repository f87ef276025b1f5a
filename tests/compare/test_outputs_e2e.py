import argparse
import csv
import io
import json
from pathlib import Path

import numpy as np
import pytest

from ascendpipe.compare import writers
from ascendpipe.compare.runner import compare_dumps
from ascendpipe.backends.compare_sources import run_compare
from ascendpipe.compare.thresholds import resolve
from ascendpipe.errors import UserError
from tests import modelzoo as mz
from tests.compare.dumps import write_dump

# msit's ONNX-vs-OM header: msaccucmp drops the .npy golden's Address (vector_comparison.py:596-605)
MSIT_HEADER = ("Index,OpType,NPUDump,DataType,Address,GroundTruth,DataType,TensorIndex,Shape,"
               "CosineSimilarity,MaxAbsoluteError,AccumulatedRelativeError,RelativeEuclideanDistance,"
               "KullbackLeiblerDivergence,StandardDeviation,MeanAbsoluteError,RootMeanSquareError,MaxRelativeError,"
               "MeanRelativeError,CompareFailReason,IsNpuOps,IsOutputNode,IsPrecisionError")


@pytest.fixture()
def small_result(tmp_path):
    x = np.array([[1.0, 2.0, 3.0, 4.0]], dtype=np.float32)
    golden = write_dump(tmp_path / "g", [("x", "x", "Input", x), ("y", "mul", "Mul", x * 2), ("z", "add", "Add", x * 2 + 1)])
    target = write_dump(tmp_path / "t", [("x", "x", "Input", x), ("y", "mul", "Mul", (x * 2).astype(np.float16)),
                                         # 10.5 for 9: max abs error 1.5, beyond the device's standard too
                                         # (msprobe reaches a max abs error of 1.0 at cosine 0.996: compare.standard)
                                         ("z", "add", "Add", np.array([[3, 5, 7, 10.5]], dtype=np.float16)),
                                         ("w", "cast", "Cast", np.ones((1, 4), np.float16))])
    return compare_dumps(golden, target)


def test_csv_has_msits_columns_in_msits_order(small_result):
    text = writers.csv_text(small_result)
    ours = "Failed,FailReasons,OverflowKind,ExactCosine,SignificantMeanRelativeError,SoftmaxKL,WorstBatch"
    assert text.splitlines()[0] == MSIT_HEADER + "," + ours  # msit's columns, then ours
    header, *rows = list(csv.reader(io.StringIO(text)))
    add = dict(zip(header, next(r for r in rows if r[2] == "add")))
    assert add["IsPrecisionError"] == "YES" and add["IsOutputNode"] == "YES"  # the last compared tensor
    assert add["WorstBatch"] == "0" and add["Failed"] == "YES"
    # msaccucmp's text: '{:.6f}', the StandardDeviation pair with %.3f (target first)
    assert add["RootMeanSquareError"] == "0.750000"  # one error of 1.5 in 4
    assert add["MaxAbsoluteError"] == "1.500000" and add["MaxRelativeError"] == "0.166667"  # |10.5/9 - 1|
    assert add["StandardDeviation"] == "(6.375;2.770),(6.000;2.236)"
    add_line = next(r for r in rows if r[2] == "add")
    assert (add_line[3], add_line[6]) == ("float16", "float32")  # DataType of NPUDump, then GroundTruth: numpy's names
    assert add["TensorIndex"] == "add:output:0" and add["Shape"] == "[1,4]"
    cast = dict(zip(header, next(r for r in rows if r[2] == "cast")))
    assert cast["GroundTruth"] == "*" and cast["IsNpuOps"] == "YES"  # target-only
    assert cast["CosineSimilarity"] == "NaN" and next(r for r in rows if r[2] == "cast")[3] == "float16"


def test_address_columns_follow_which_side_is_an_npu_dump(tmp_path):
    """ONNX (npy) golden vs OM: one Address (the NPU's); both sides NPU dumps: both Address columns."""
    x = np.ones((2,), np.float32)
    golden = write_dump(tmp_path / "g", [("y", "mul", "Mul", x)], model="golden/model.om")
    target = write_dump(tmp_path / "t", [("y", "mul", "Mul", x.astype(np.float16))])
    header = writers.csv_text(compare_dumps(golden, target)).splitlines()[0].split(",")
    assert header[:10] == ["Index", "OpType", "NPUDump", "DataType", "Address", "GroundTruth", "DataType", "Address",
                           "TensorIndex", "Shape"]


def test_tensor_index_is_the_output_position_in_the_op(tmp_path):
    """TensorIndex = op:output:<position among the op's outputs>, read from the model, not a row count."""
    import onnx
    from onnx import TensorProto, helper

    nodes = [helper.make_node("Split", ["x"], ["a", "b"], name="split", axis=0, num_outputs=2),
             helper.make_node("Relu", ["b"], ["r"], name="relu")]
    graph = helper.make_graph(nodes, "g", [helper.make_tensor_value_info("x", TensorProto.FLOAT, [4])],
                              [helper.make_tensor_value_info("a", TensorProto.FLOAT, [2]),
                               helper.make_tensor_value_info("r", TensorProto.FLOAT, [2])])
    model = tmp_path / "m.onnx"
    onnx.save(helper.make_model(graph, opset_imports=[helper.make_opsetid("", 18)]), model)
    v = np.array([1.0, 2.0], np.float32)
    # only the second output of split is dumped: counting rows would call it split:output:0
    golden = write_dump(tmp_path / "g", [("b", "split", "Split", v), ("r", "relu", "Relu", v)], model=str(model))
    target = write_dump(tmp_path / "t", [("b", "split", "Split", v), ("r", "relu", "Relu", v)], model=str(model))
    header, *rows = list(csv.reader(io.StringIO(writers.csv_text(compare_dumps(golden, target)))))
    assert [dict(zip(header, r))["TensorIndex"] for r in rows] == ["split:output:1", "relu:output:0"]


def test_json_contract(small_result, tmp_path):
    doc = json.loads(writers.json_text(small_result))
    keys = {"index", "op_name", "op_type", "tensor", "shape", "dtype", "cosine", "max_abs_error", "max_rel_error",
            "rmse", "kl", "relative_euclidean", "overflow", "failed"}
    assert all(keys <= set(row) for row in doc["rows"])
    assert [r["op_name"] for r in doc["rows"]] == ["mul", "add", "cast"]
    assert doc["first_failure"]["op_name"] == "add" and {"op_type", "reason", "advice"} <= set(doc["first_failure"])
    paths = writers.write_results(small_result, tmp_path / "out")
    html = paths["html"].read_text()
    assert "<svg" in html and "first failure: add" in html and "http" not in html.split("<svg", 1)[1].replace(
        "http://www.w3.org/2000/svg", "")


def test_result_json_is_the_indented_document_with_a_row_per_line(small_result, tmp_path):
    """result.json's text (rows written one to a line by json's C encoder) reads as the same JSON as
    indenting the whole document, row order and key order included; a row is one line."""
    doc = writers.contract(small_result)
    text = writers.document_text(doc)
    assert json.loads(text) == json.loads(json.dumps(doc, indent=2))
    assert list(json.loads(text)) == list(doc)
    row_lines = [line for line in text.splitlines() if line.startswith('    {"')]
    assert [json.loads(line.rstrip(","))["op_name"] for line in row_lines] == ["mul", "add", "cast"]
    written = writers.write_results(small_result, tmp_path / "out")["json"].read_text()
    assert json.loads(written) == json.loads(text)
    odd = {**doc, "verdict": writers._ROWS}  # a value holding the marker: the whole document indented
    assert json.loads(writers.document_text(odd)) == json.loads(json.dumps(odd))


def test_terminal_table_is_coloured_only_when_asked(small_result):
    assert "\033[31m" in writers.terminal_text(small_result, color=True)
    plain = writers.terminal_text(small_result)
    assert "\033" not in plain and "first failure: #1 add" in plain


def test_bad_dump_dir_is_a_user_error(tmp_path):
    with pytest.raises(UserError, match="has no index.json"):
        compare_dumps(tmp_path, tmp_path)


def _convert(model, out):
    from ascendpipe.backends.onnxruntime.convert import convert_model
    from ascendpipe.precision.settings import ConvertSettings

    convert_model(model, out, ConvertSettings(precision_mode="force_fp16"))
    return out


def _save_inputs(feeds, path):
    np.savez(path, **feeds)
    return path


@pytest.mark.parametrize("name, first_op, kind, keep, overflow_ops", [
    # square -> sum -> sqrt (square -> var) is one TbeReduceElemwiseFusionPass kernel, named after its reduce
    # one overflowing row each: l2norm's and epsilon's fused kernel, addn's sum
    ("l2norm", "sum", "overflow", ["square", "sum", "sqrt"], 1),
    ("addn", "sum", "overflow", ["sum"], 1),
    ("epsilon", "var", "precision_loss", ["square", "var", "add_eps"], 1),
])
def test_emulation_models_first_failure_is_the_overflowing_op(tmp_path, name, first_op, kind, keep, overflow_ops):
    model = getattr(mz, f"{name}_model")(tmp_path / f"{name}.onnx")
    inputs = _save_inputs(getattr(mz, f"{name}_inputs")(), tmp_path / "in.npz")
    result, note = run_compare(model, _convert(model, tmp_path / "conv"), input_path=inputs, work_dir=tmp_path / "w",
                               limits=resolve())
    first = result["first_failure"]
    assert (first["op_name"], first["kind"]) == (first_op, kind)
    assert first["advice"][0]["ops"] == keep
    assert result["summary"]["overflow_ops"] == overflow_ops


def test_fused_conv_bn_relu_maps_to_its_originals_and_passes(tmp_path):
    model = mz.conv_bn_relu_model(tmp_path / "m.onnx")
    result, note = run_compare(model, _convert(model, tmp_path / "conv"), input_path=None, work_dir=tmp_path / "w",
                               limits=resolve(), seed=3)
    assert "seeded random input (seed 3)" in note and "image [1, 3, 16, 16] float32" in note
    fused = [r for r in result["rows"] if r["fused"]]
    assert fused and sorted(fused[0]["golden_ops"]) == ["bn", "conv"]  # ConvBatchnormFusionPass
    golden_only = [r for r in result["rows"] if r["side"] == "golden_only"]
    assert len(golden_only) == 1 and all(r["note"] == f"fused into target op '{fused[0]['op_name']}'" for r in golden_only)
    assert result["first_failure"] is None and result["summary"]["output_cosine"] > 0.999


def test_cli_json_prints_only_the_contract(tmp_path, capsys):
    from ascendpipe.cli import compare as cli

    model = mz.addn_model(tmp_path / "m.onnx")
    np.save(tmp_path / "x.npy", mz.addn_inputs()["x"])
    parser = argparse.ArgumentParser()
    cli.add_arguments(parser)
    args = parser.parse_args(["--golden", str(model), "--target", str(_convert(model, tmp_path / "conv")),
                              "--input", str(tmp_path / "x.npy"), "--json", "--output", str(tmp_path / "out")])
    assert cli.main(args) == 0
    doc = json.loads(capsys.readouterr().out)
    assert doc["first_failure"]["op_name"] == "sum"
    assert (tmp_path / "out" / "result.csv").read_text().startswith(MSIT_HEADER)


def test_stage_kind_writes_results_and_metrics(tmp_path):
    from ascendpipe.stages.base import StageContext
    from ascendpipe.stages.compare import CompareKind

    model = mz.l2norm_model(tmp_path / "m.onnx")
    conv = _convert(model, tmp_path / "conv")
    out = tmp_path / "out"
    out.mkdir()
    ctx = StageContext(name="compare", kind="compare", workspace=tmp_path, out_dir=out, final_out_dir=out,
                       params={"thresholds": {"cosine": 0.999}}, inputs={"golden": model, "target": conv,
                       "inputs": _save_inputs(mz.l2norm_inputs(), tmp_path / "in.npz")}, upstream={},
                       backend="onnxruntime", log=io.StringIO(), thresholds={"kl": 0.01})
    result = CompareKind().run(ctx)
    rows = json.loads((out / "result.json").read_text())["rows"]
    first = rows[result.metrics["first_failure_index"]]
    assert first["op_name"] == "sum" and first["pass_name"] == "TbeReduceElemwiseFusionPass"  # the fused kernel
    assert result.metrics["overflow_ops"] == 1  # square and sum never leave the kernel: only its output shows inf
    assert result.metrics["output_cosine"] == 0.0  # the L2-normalised output collapsed to zeros
    assert (out / "keep_dtype.cfg").read_text() == "square\nsum\nsqrt\n"
    assert json.loads((out / "result.json").read_text())["thresholds"]["cosine"] == 0.999
    assert {p.name for p in out.iterdir()} >= {"result.csv", "result.json", "report.html", "metrics.json"}


def _conv_bn_overflow_model(path):
    """Conv -> BatchNormalization with a scale of 3000 over a variance of 1e-4: ConvBatchnormFusionPass folds
    it into the conv's weights in fp32, which fp16 then cannot hold; unfolded, the BN computes it."""
    from onnx import TensorProto, helper, numpy_helper
    import onnx

    rng = np.random.default_rng(1)
    inits = [numpy_helper.from_array(rng.standard_normal((4, 2, 3, 3)).astype(np.float32) * 0.1, "w"),
             numpy_helper.from_array(np.array([3000.0, 0.5, 2.0, 1.0], np.float32), "scale"),
             numpy_helper.from_array(np.zeros(4, np.float32), "beta"),
             numpy_helper.from_array(np.zeros(4, np.float32), "mean"),
             numpy_helper.from_array(np.array([1e-4, 1.0, 2.0, 0.5], np.float32), "var")]
    nodes = [helper.make_node("Conv", ["x", "w"], ["c"], name="conv", pads=[1, 1, 1, 1]),
             helper.make_node("BatchNormalization", ["c", "scale", "beta", "mean", "var"], ["y"], name="bn")]
    graph = helper.make_graph(nodes, "cbn", [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 2, 5, 5])],
                              [helper.make_tensor_value_info("y", TensorProto.FLOAT, [1, 4, 5, 5])], initializer=inits)
    onnx.save(helper.make_model(graph, opset_imports=[helper.make_opsetid("", 13)]), str(path))
    return path


def test_compares_fusion_switch_file_is_atcs_json_the_same_file_fix_and_convert_write(tmp_path):
    """Issue 23 item 8: one fusion_switch.cfg format everywhere, ATC's {"Switch": {...}} JSON."""
    from ascendpipe.backends.onnxruntime.convert import convert_model
    from ascendpipe.fix.report import write_remedy_files
    from ascendpipe.precision.settings import resolve as resolve_settings

    from ascendpipe.compare.advisor import _fusion_advice

    model = _conv_bn_overflow_model(tmp_path / "m.onnx")
    target = tmp_path / "t"
    convert_model(model, target, resolve_settings({}))
    feeds = {"x": np.random.default_rng(0).uniform(0.5, 1.0, (1, 2, 5, 5)).astype(np.float32)}
    result, _ = run_compare(model, target, input_path=_save_inputs(feeds, tmp_path / "in.npz"),
                            work_dir=tmp_path / "w", limits=resolve())
    row = next(r for r in result["rows"] if r["op_name"] == result["first_failure"]["op_name"])
    rules = json.loads((target / "fused_map.json").read_text())["rules"]
    assert row["op_name"] == "conv" and rules == {"conv": "ConvBatchnormFusionPass"}  # the folded weights overflow
    item = _fusion_advice(row, [rules["conv"]], True, "convert", None)  # the advice item compare writes
    assert item["rules"] == ["ConvBatchnormFusionPass"]
    text = item["file"]["content"]
    assert json.loads(text) == {"Switch": {"GraphFusion": {"ConvBatchnormFusionPass": "off"}, "UBFusion": {}}}
    written = write_remedy_files(tmp_path / "fix", [], {"ConvBatchnormFusionPass": "off"}, {})
    assert written["fusion_switch"].read_text() == text  # fix writes the same bytes
    # and convert reads it back (atc --fusion_switch_file takes the same file): the pass is off
    (tmp_path / "fusion_switch.cfg").write_text(text)
    switches = resolve_settings({"fusion_switch_file": str(tmp_path / "fusion_switch.cfg")})
    fixed = convert_model(model, tmp_path / "t2", switches)
    assert fixed.fusion["passes"] == {} and (fixed.out_dir / "fusion_switch.cfg").read_text() == text


def test_a_golden_holding_nan_is_said_not_compared_never_passed(tmp_path):
    """A NaN in the inputs makes every tensor NaN on both sides: nothing is measured, and the compare
    used to end with a bare 'no op fails the thresholds'."""
    path, _, _ = mz.linear_model(tmp_path / "m.onnx")
    x = np.ones((2, 3), np.float32)
    x[0, 1] = np.nan
    np.save(tmp_path / "x.npy", x)
    result, note = run_compare(path, path, input_path=tmp_path / "x.npy", work_dir=tmp_path / "work", limits=resolve())
    rows = [r for r in result["rows"] if r["side"] == "both"]
    assert result["summary"]["golden_nonfinite"] == len(rows) == 4 and result["first_failure"] is None
    assert "the inputs hold x: 1 NaN" in note
    text = writers.terminal_text(result, input_note=note)
    assert "4 tensors not compared: their golden holds NaN or inf (first: #0 " in text
    assert text.splitlines()[-1] == "no op fails the thresholds, but 4 tensors were not compared"
    assert text.count("not compared (golden NaN/inf)") == 4
    # finite inputs: nothing said, the plain verdict
    np.save(tmp_path / "x.npy", np.ones((2, 3), np.float32))
    result, note = run_compare(path, path, input_path=tmp_path / "x.npy", work_dir=tmp_path / "work2", limits=resolve())
    assert result["summary"]["golden_nonfinite"] == 0 and "NaN" not in (note or "")
    assert writers.terminal_text(result, input_note=note).splitlines()[-1] == "no op fails the thresholds"


def test_a_compare_stage_records_its_uncompared_pairs(tmp_path, monkeypatch):
    import ascendpipe

    root = tmp_path / "ws"
    (root / ".ascendpipe").mkdir(parents=True)
    mz.linear_model(root / "m.onnx")
    x = np.ones((2, 3), np.float32)
    x[1, 0] = np.inf
    np.save(root / "x.npy", x)
    (root / "p.yaml").write_text("stages:\n  compare: {kind: compare, golden: m.onnx, target: m.onnx, inputs: x.npy}\n")
    monkeypatch.chdir(root)
    run = ascendpipe.build(str(root / "p.yaml"), quiet=True)
    metrics = run["stages"]["compare"]["metrics"]
    assert metrics["failed_ops"] == 0 and metrics["golden_nonfinite"] == 4
    assert "no op fails the thresholds, but 4 tensors were not compared" in (root / "build" / "compare.log").read_text()


def test_two_models_sharing_no_tensor_name_are_refused_not_passed(tmp_path):
    """Was 'compared 0 tensors ... no op fails the thresholds'."""
    import onnx

    path, _, _ = mz.linear_model(tmp_path / "m.onnx")
    model = onnx.load(str(path))
    renamed = {}
    for node in model.graph.node:  # ops and tensors: a model exported separately (same op names pair)
        node.name = "other_" + node.name
        for i, name in enumerate(node.output):
            renamed[name] = node.output[i] = "other_" + name
        for i, name in enumerate(node.input):
            node.input[i] = renamed.get(name, name)
    for out in model.graph.output:
        out.name = renamed[out.name]
    onnx.save(model, str(tmp_path / "other.onnx"))
    np.save(tmp_path / "x.npy", np.ones((2, 3), np.float32))
    with pytest.raises(UserError) as err:
        run_compare(path, tmp_path / "other.onnx", input_path=tmp_path / "x.npy", work_dir=tmp_path / "w", limits=resolve())
    text = str(err.value)
    assert text.startswith(f"{tmp_path / 'other.onnx'}: nothing to compare: no target tensor pairs with a golden one "
                           "(4 golden-only, 4 target-only; e.g. golden ")
    assert "target 'other_" in text and text.endswith("or their dumps")
