"""Hostile and careless inputs to the standalone commands, imports and records (issue 28, items 6-9).

Each case runs one command in a copy of a built workspace (two runs recorded, a compare that fails)
holding the bad files beside it, and finds: the exact one located line on stderr, exit code 2, no
traceback, and every file inside and outside the workspace as it was (hashed before and after).
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

from ascendpipe.cli.main import main
from tests.explorer.conftest import Workspace
from tests.hostile.test_corpus import snapshot
from tests.modelzoo import conv_bn_relu_model

ORT_LEVELS = "ORT_DISABLE_ALL, ORT_ENABLE_ALL, ORT_ENABLE_BASIC, ORT_ENABLE_EXTENDED, ORT_ENABLE_LAYOUT"
HUGE = ("--model huge.onnx: random inputs for this model would take 12.0 TiB (input 'x' is [1099511627776, 3] "
        "float32), more than the 4.0 GiB made without --input; give the model's real inputs with --input "
        "FILE.npy|FILE.npz|FOLDER, or fix its input dims")
NOT_ONNX = "not an ONNX model (protobuf cannot parse it as a ModelProto); give the .onnx file the framework exported"
EMPTY = "the model's graph is empty (no nodes, no outputs): nothing to run; give the exported model"
OWN = "; write the output to a folder of its own"
FEED = ("the device takes tensor inputs only (an ATC model's inputs are tensors), so it cannot be fed (export the "
        "model with tensor inputs; build the sequence inside the graph)")
SEQ_INPUT = "input 's' is seq(tensor(float)), a sequence of tensors: " + FEED
OPT_INPUT = "input 'o' is optional(tensor(float)), an optional value: " + FEED
CYCLE = "the graph has a cycle (relu -> add -> relu): an ONNX graph is acyclic, so no tool can run it; re-export the model"
SOC = ("is not an Ascend SoC ascendpipe knows; give one of the form Ascend310, Ascend310P3, Ascend310B1, Ascend910A, "
       "Ascend910B1, Ascend910_9391, Ascend950PR")

# (id, argv, the line after "ascendpipe: error: ")
CASES = [
    # -- 6. outputs never overwrite inputs
    ("convert-output-holds-model", ["convert", "--model", "m/model.onnx", "--output", "m"],
     "--output m: it holds --model m/model.onnx: the output would overwrite it" + OWN),
    ("convert-output-dot", ["convert", "--model", "m/model.onnx", "--output", "."],
     "--output .: it holds --model m/model.onnx: the output would overwrite it" + OWN),
    ("convert-output-is-model", ["convert", "--model", "m/model.onnx", "--output", "m/model.onnx"],
     "--output m/model.onnx: it is --model m/model.onnx: the output would overwrite it" + OWN),
    ("convert-output-through-link", ["convert", "--model", "m/model.onnx", "--output", "mlink"],
     "--output mlink: it holds --model m/model.onnx: the output would overwrite it" + OWN),
    ("convert-output-holds-keep-dtype", ["convert", "--model", "m/model.onnx", "--output", "cfg",
                                         "--keep-dtype", "cfg/keep.cfg"],
     "--output cfg: it holds --keep-dtype cfg/keep.cfg: the output would overwrite it" + OWN),
    ("convert-output-holds-tune-bank", ["convert", "--model", "m/model.onnx", "--output", "cfg",
                                        "--tune-bank", "cfg/bank.json"],
     "--output cfg: it holds --tune-bank cfg/bank.json: the output would overwrite it" + OWN),
    ("infer-output-is-input", ["infer", "--model", "m/model.onnx", "--input", "x.npy", "--output", "x.npy"],
     "--output x.npy: it is --input x.npy: the output would overwrite it" + OWN),
    ("dump-output-inside-model", ["dump", "--model", "m", "--output", "m/dump"],
     "--output m/dump: it lies inside --model m: the output would be written into that input" + OWN),
    ("compare-output-holds-golden", ["compare", "--golden", "m/model.onnx", "--target", "m/model.onnx", "--output", "m"],
     "--output m: it holds --golden m/model.onnx: the output would overwrite it" + OWN),
    ("compare-output-inside-target", ["compare", "--golden", "models/l2.onnx", "--target", "build/convert__fp16",
                                      "--output", "build/convert__fp16/cmp"],
     "--output build/convert__fp16/cmp: it lies inside --target build/convert__fp16: the output would be "
     "written into that input" + OWN),
    ("quantize-output-inside-calibration", ["quantize", "--model", "m/model.onnx", "--calibration", "data",
                                            "--output", "data/q"],
     "--output data/q: it lies inside --calibration data: the output would be written into that input" + OWN),
    ("profile-output-holds-model", ["profile", "--model", "m/model.onnx", "--output", "m"],
     "--output m: it holds --model m/model.onnx: the output would overwrite it" + OWN),
    ("tune-output-holds-input", ["tune", "--model", "m/model.onnx", "--input", "x.npy", "--output", "."],
     "--output .: it holds --model m/model.onnx: the output would overwrite it" + OWN),
    ("fix-output-holds-golden", ["fix", "--golden", "m/model.onnx", "--output", "m"],
     "--output m: it holds --golden m/model.onnx: the output would overwrite it" + OWN),
    ("import-output-is-input", ["import", "sums/negative_summary.json", "-o", "sums/negative_summary.json"],
     "-o sums/negative_summary.json: it is PATH sums/negative_summary.json: the output would overwrite it; "
     "write the JSON to another file"),
    ("report-output-into-records", ["report", "-o", ".ascendpipe/ascendpipe.db"],
     "-o .ascendpipe/ascendpipe.db: it lies inside the records folder .ascendpipe: the output would be written "
     "into that input; write the page to another file"),
    ("report-output-is-cache", ["report", "-o", "cache"],
     "-o cache: it is the cache folder cache: the output would overwrite it; write the page to another file"),
    ("export-mlflow-store-into-records", ["export", "mlflow", "--tracking-uri", "sqlite:///.ascendpipe/ascendpipe.db"],
     "--tracking-uri sqlite:///.ascendpipe/ascendpipe.db: it lies inside the records folder .ascendpipe: the output "
     "would be written into that input; keep the MLflow store elsewhere"),
    # -- 7. every bad input is one located line
    ("fix-golden-not-onnx", ["fix", "--golden", "garbage.onnx"], "--golden garbage.onnx: " + NOT_ONNX),
    ("infer-model-not-onnx", ["infer", "--model", "garbage.onnx", "--output", "o"], "--model garbage.onnx: " + NOT_ONNX),
    ("convert-model-not-onnx", ["convert", "--model", "garbage.onnx", "--output", "o"], "--model garbage.onnx: " + NOT_ONNX),
    ("compare-target-not-onnx", ["compare", "--golden", "m/model.onnx", "--target", "garbage.onnx"],
     "--target garbage.onnx: " + NOT_ONNX),
    ("profile-huge-random-input", ["profile", "--model", "huge.onnx", "--output", "o"], HUGE),
    ("infer-huge-random-input", ["infer", "--model", "huge.onnx", "--output", "o"], HUGE),
    ("dump-huge-random-input", ["dump", "--model", "huge.onnx", "--output", "o"], HUGE),
    ("tune-huge-random-input", ["tune", "--model", "huge.onnx", "--output", "o"], HUGE),
    ("compare-huge-random-input", ["compare", "--golden", "huge.onnx", "--target", "huge.onnx"],
     HUGE.replace("--model", "--golden")),
    ("convert-keep-dtype-binary", ["convert", "--model", "m/model.onnx", "--output", "o", "--keep-dtype", "bin.cfg"],
     "--keep-dtype bin.cfg: not a text file (byte 3 is not UTF-8); --keep-dtype takes a text file (as ATC reads it)"),
    ("convert-fusion-switch-binary", ["convert", "--model", "m/model.onnx", "--output", "o",
                                      "--fusion-switch-file", "bin.cfg"],
     "--fusion-switch-file bin.cfg: not a text file (byte 3 is not UTF-8); --fusion-switch-file takes a text "
     "file (as ATC reads it)"),
    ("compare-empty-graph", ["compare", "--golden", "empty.onnx", "--target", "empty.onnx"], "--golden empty.onnx: " + EMPTY),
    ("compare-empty-graph-in-folder", ["compare", "--golden", "m/model.onnx", "--target", "emptydir"],
     "--target emptydir/model.onnx: " + EMPTY),
    ("show-latest-negative", ["show", "latest~-5"],
     "'latest~-5': N in latest~N counts builds back from the latest, so it is 0 or more"),
    ("show-negative-id", ["show", "--", "-1"],
     "'-1' is not a run id: run ids start at 1 (for the builds before the latest, write latest~N)"),
    ("checkout-latest-negative", ["checkout", "latest~-1"],
     "'latest~-1': N in latest~N counts builds back from the latest, so it is 0 or more"),
    ("diff-negative-id", ["diff", "--", "-2", "latest"],
     "'-2' is not a run id: run ids start at 1 (for the builds before the latest, write latest~N)"),
    ("export-dim-too-large", ["validate", "export.yaml"],
     "export.yaml:8:17: stage 'export': image: 99999999999999999999 violates maximum 2147483647"),
    # -- 8. imports check what they read
    ("import-deep-json", ["import", "sums/deep.json"],
     "sums/deep.json: JSON nested deeper than it can be read (arrays or objects inside each other hundreds "
     "of levels deep): not a CANN result"),
    ("import-ais-text-number", ["import", "sums/fast_summary.json"],
     "sums/fast_summary.json: field NPU_compute_time.mean: \"fast\" is not a number"),
    ("import-ais-negative", ["import", "sums/negative_summary.json"],
     "sums/negative_summary.json: field NPU_compute_time.mean: -0.7 is negative; a count or time is 0 or more"),
    ("import-ais-nan", ["import", "sums/nan_summary.json"],
     "sums/nan_summary.json: field throughput: NaN where a number belongs"),
    ("import-ais-count-negative", ["import", "sums/count_summary.json"],
     "sums/count_summary.json: field NPU_compute_time.count: -3 is negative; a count or time is 0 or more"),
    ("import-aoe-wrong-type", ["import", "sums/aoe_result_types.json"],
     "sums/aoe_result_types.json: field [1].OPAT.repo_modified_operators[0].tune_performance.Format."
     "performance_after_tune(us): \"fast\" is not a number"),
    ("import-aoe-name-not-text", ["import", "sums/aoe_result_name.json"],
     "sums/aoe_result_name.json: field [0].basic.tuning_name: 5 is not text"),
    ("import-aoe-operator-not-object", ["import", "sums/aoe_result_entry.json"],
     "sums/aoe_result_entry.json: field [0].OPAT.repo_modified_operators[0]: expected an object, got \"conv\""),
    ("import-compare-missing-columns", ["import", "sums/result_cols.csv"],
     "sums/result_cols.csv:1: the compare CSV header has no column 'GroundTruth', 'CosineSimilarity' (required: "
     "NPUDump, OpType, GroundTruth, CosineSimilarity); give the file the tool wrote, header included"),
    ("import-compare-text-cosine", ["import", "sums/result_text.csv"],
     "sums/result_text.csv:3: row 2, column 'CosineSimilarity': 'high' is not a number"),
    ("import-compare-negative-error", ["import", "sums/result_negative.csv"],
     "sums/result_negative.csv:2: row 1, column 'MaxAbsoluteError': -1.5 is negative; a count or time is 0 or more"),
    ("import-compare-yes-no", ["import", "sums/result_yesno.csv"],
     "sums/result_yesno.csv:2: row 1, column 'IsPrecisionError': 'maybe' is neither YES nor NO"),
    ("import-prof-missing-columns", ["import", "prof"],
     "prof/PROF_000001_20240101120000123_ABCDEFGH/mindstudio_profiler_output/op_summary_20240101120000.csv:1: "
     "the msprof op_summary CSV header has no column 'OP Type', 'Task Duration(us)' (required: Op Name, OP Type, "
     "Task Duration(us)); give the file the tool wrote, header included"),
    ("import-op-summary-nan", ["import", "sums/op_summary_nan.csv"],
     "sums/op_summary_nan.csv:3: row 2, column 'Task Duration(us)': NaN where a number belongs"),
    ("import-op-statistic-negative-count", ["import", "sums/op_statistic_neg.csv"],
     "sums/op_statistic_neg.csv:2: row 1, column 'Count': -4 is negative; a count or time is 0 or more"),
    ("import-op-statistic-fraction-count", ["import", "sums/op_statistic_frac.csv"],
     "sums/op_statistic_frac.csv:2: row 1, column 'Count': 2.5 is not a whole number"),
    ("import-cell-over-csv-limit", ["import", "sums/op_summary_big.csv"],
     "sums/op_summary_big.csv:2: not a CSV the tools write: field larger than field limit (131072)"),
    ("import-ais-infinite", ["import", "sums/inf_summary.json"],
     "sums/inf_summary.json: field NPU_compute_time.max: inf where a finite number belongs"),
    ("import-binary", ["import", "sums/binary.csv"], "sums/binary.csv: not a text file (byte 3 is not UTF-8): not a CANN result"),
    ("convert-tune-bank-level-7", ["convert", "--model", "m/model.onnx", "--output", "o", "--tune-bank", "cfg/bank.json"],
     f"cfg/bank.json: graph_optimization_level: unknown value '7'; use one of {ORT_LEVELS}"),
    # -- issue 42: sequence and optional inputs, a cycle, SoC names, tune banks
    ("dump-sequence-input", ["dump", "--model", "seqin.onnx", "--output", "o"], "--model seqin.onnx: " + SEQ_INPUT),
    ("compare-sequence-input", ["compare", "--golden", "seqin.onnx", "--target", "seqin.onnx", "--output", "o"],
     "--golden seqin.onnx: " + SEQ_INPUT),
    ("dump-optional-input", ["dump", "--model", "optin.onnx", "--output", "o"], "--model optin.onnx: " + OPT_INPUT),
    ("compare-optional-input", ["compare", "--golden", "optin.onnx", "--target", "optin.onnx", "--output", "o"],
     "--golden optin.onnx: " + OPT_INPUT),
    ("fix-optional-input", ["fix", "--golden", "optin.onnx", "--output", "o"], "--golden optin.onnx: " + OPT_INPUT),
    ("dump-cycle", ["dump", "--model", "cycle.onnx", "--output", "o"], "--model cycle.onnx: " + CYCLE),
    ("compare-cycle", ["compare", "--golden", "cycle.onnx", "--target", "cycle.onnx", "--output", "o"],
     "--golden cycle.onnx: " + CYCLE),
    ("infer-cycle-in-folder", ["infer", "--model", "cyc", "--output", "o"], "--model cyc/model.onnx: " + CYCLE),
    ("fix-soc-empty", ["fix", "--golden", "m/model.onnx", "--soc-version", "", "--output", "o"],
     "--soc-version is empty (''); give a value or leave it out"),
    ("fix-soc-path", ["fix", "--golden", "m/model.onnx", "--soc-version", "../x", "--output", "o"], "--soc-version '../x' " + SOC),
    ("fix-soc-unknown", ["fix", "--golden", "m/model.onnx", "--soc-version", "Ascend999X", "--output", "o"],
     "--soc-version 'Ascend999X' " + SOC),
    ("convert-soc-unknown", ["convert", "--model", "m/model.onnx", "--output", "o", "--soc-version", "Ascend999X"],
     "--soc-version 'Ascend999X' " + SOC),
    ("convert-tune-bank-threads", ["convert", "--model", "m/model.onnx", "--output", "o", "--tune-bank",
                                   "cfg/bank_threads.json"],
     "cfg/bank_threads.json: session.intra_op_num_threads: 100000000 is not a thread count (a whole number 0..1024; "
     "0: onnxruntime's choice)"),
    ("convert-tune-bank-future", ["convert", "--model", "m/model.onnx", "--output", "o", "--tune-bank",
                                  "cfg/bank_future.json"],
     "cfg/bank_future.json: format: 'ascendpipe-tune-bank/9' is not a tune bank format this ascendpipe reads "
     "(ascendpipe-tune-bank/1); a bank written by a newer ascendpipe needs that version, or tune again"),
    ("infer-npz-cut-short", ["infer", "--model", "m/model.onnx", "--input", "cut.npz", "--output", "o"],
     "cut.npz: cannot read input file: not a whole .npz (a zip of .npy arrays cut short or damaged); write it again "
     "(np.savez)"),
    ("compare-npz-cut-short", ["compare", "--golden", "m/model.onnx", "--target", "m/model.onnx", "--input",
                               "cut.npz", "--output", "o"],
     "cut.npz: cannot read input file: not a whole .npz (a zip of .npy arrays cut short or damaged); write it again "
     "(np.savez)"),
    # -- 9. --set of a key the pipeline does not have
    ("set-param-typo", ["build", "pipeline.yaml", "--set", "params.scal=2"],
     "--set params.scal=2: the pipeline has no param 'scal' (did you mean 'scale'?); it has: scale. "
     "To add one on purpose: --set +params.scal=2"),
    ("set-stage-param-typo", ["status", "pipeline.yaml", "--set", "stages.prep.params.scael=2"],
     "--set stages.prep.params.scael=2: stage 'prep' has no param 'scael' (did you mean 'scale'?); it has: scale. "
     "To add one on purpose: --set +stages.prep.params.scael=2"),
]

SUMMARY = {"NPU_compute_time": {"min": 2.1, "max": 2.9, "mean": 2.45, "median": 2.4, "percentile(99%)": 2.88, "count": 4},
           "H2D_latency": {"mean": 0.4}, "D2H_latency": {"mean": 0.1}, "throughput": 3265.3}
COMPARE_HEADER = ("Index,OpType,NPUDump,DataType,Address,GroundTruth,DataType,TensorIndex,Shape,CosineSimilarity,"
                  "MaxAbsoluteError,CompareFailReason,IsNpuOps,IsOutputNode,IsPrecisionError\n")
COMPARE_ROW = "{i},Add,add{i},float16,NaN,add{i},float32,add{i}:output:0,\"[2]\",{cos},{mae},,NO,NO,{err}\n"
OP_STATISTIC = "Device_id,Model Name,OP Type,Core Type,Count,Total Time(us),Avg Time(us),Min Time(us),Max Time(us),Ratio(%)\n"


def _summary(**changes) -> str:
    data = json.loads(json.dumps(SUMMARY))
    for key, value in changes.items():
        block, _, field = key.partition("__")
        if field:
            data[block][field] = value
        else:
            data[block] = value
    return json.dumps(data)


def _huge_and_empty(ws: Path) -> None:
    import onnx
    from onnx import TensorProto, helper

    x = helper.make_tensor_value_info("x", TensorProto.FLOAT, [2 ** 40, 3])
    y = helper.make_tensor_value_info("y", TensorProto.FLOAT, [2 ** 40, 3])
    opset = [helper.make_opsetid("", 17)]
    graph = helper.make_graph([helper.make_node("Relu", ["x"], ["y"])], "huge", [x], [y])
    onnx.save(helper.make_model(graph, opset_imports=opset), str(ws / "huge.onnx"))
    empty = helper.make_model(helper.make_graph([], "empty", [], []), opset_imports=opset)
    onnx.save(empty, str(ws / "empty.onnx"))
    (ws / "emptydir").mkdir()
    onnx.save(empty, str(ws / "emptydir" / "model.onnx"))
    seq = helper.make_graph([helper.make_node("SequenceAt", ["s", "i"], ["t"]), helper.make_node("Relu", ["t"], ["y"])],
                            "seq", [helper.make_tensor_sequence_value_info("s", TensorProto.FLOAT, [2, 3])],
                            [helper.make_tensor_value_info("y", TensorProto.FLOAT, [2, 3])],
                            [helper.make_tensor("i", TensorProto.INT64, [], [0])])
    onnx.save(helper.make_model(seq, opset_imports=opset), str(ws / "seqin.onnx"))
    optional = helper.make_optional_type_proto(helper.make_tensor_type_proto(TensorProto.FLOAT, [2]))
    opt = helper.make_graph([helper.make_node("OptionalGetElement", ["o"], ["t"]), helper.make_node("Relu", ["t"], ["y"])],
                            "opt", [helper.make_value_info("o", optional)], [helper.make_tensor_value_info("y", TensorProto.FLOAT, [2])])
    onnx.save(helper.make_model(opt, opset_imports=[helper.make_opsetid("", 18)]), str(ws / "optin.onnx"))
    x2, y2 = (helper.make_tensor_value_info(n, TensorProto.FLOAT, [2]) for n in ("x", "y"))
    cyc = helper.make_graph([helper.make_node("Add", ["x", "b"], ["a"], name="add"), helper.make_node("Relu", ["a"], ["b"], name="relu"),
                             helper.make_node("Identity", ["b"], ["y"], name="id")], "cycle", [x2], [y2])
    onnx.save(helper.make_model(cyc, opset_imports=opset), str(ws / "cycle.onnx"))
    (ws / "cyc").mkdir()
    onnx.save(helper.make_model(cyc, opset_imports=opset), str(ws / "cyc" / "model.onnx"))


@pytest.fixture(scope="module")
def built(tmp_path_factory):
    root = tmp_path_factory.mktemp("commands") / "base"
    ws = root / "ws"
    workspace = Workspace(ws)
    workspace.build()
    workspace.build(set=["params.scale=2"])
    conv_bn_relu_model(ws / "m" / "model.onnx")
    (ws / "mlink").symlink_to("m")
    np.save(ws / "x.npy", np.zeros((2, 8, 16, 16), np.float32))
    np.savez(ws / "cut.npz", image=np.zeros((2, 3, 16, 16), np.float32))
    (ws / "cut.npz").write_bytes((ws / "cut.npz").read_bytes()[:5000])
    (ws / "garbage.onnx").write_bytes(bytes(range(7, 250)) * 3)
    (ws / "bin.cfg").write_bytes(b"abc\xff\xfe\x00binary")
    _huge_and_empty(ws)
    (ws / "cfg").mkdir()
    (ws / "cfg" / "keep.cfg").write_text("sum\n")
    (ws / "cfg" / "bank.json").write_text(json.dumps({"session": {"graph_optimization_level": 7}}))
    (ws / "cfg" / "bank_threads.json").write_text(json.dumps({"session": {"intra_op_num_threads": 100000000}}))
    (ws / "cfg" / "bank_future.json").write_text(json.dumps({"format": "ascendpipe-tune-bank/9", "session": {}}))
    (ws / "net.py").write_text("def build():\n    raise SystemExit('never run')\n")
    (ws / "export.yaml").write_text("stages:\n  export:\n    kind: export\n    model: net.py\n    params:\n"
                                    "      input_names: [image]\n      input_shapes:\n"
                                    "        image: [99999999999999999999, 1, 32, 32]\n")
    sums = ws / "sums"
    sums.mkdir()
    (sums / "deep.json").write_text("[" * 100000 + "]" * 100000)
    (sums / "fast_summary.json").write_text(_summary(NPU_compute_time__mean="fast"))
    (sums / "negative_summary.json").write_text(_summary(NPU_compute_time__mean=-0.7, throughput=-100.0))
    (sums / "nan_summary.json").write_text(_summary(throughput=float("nan")))
    (sums / "count_summary.json").write_text(_summary(NPU_compute_time__count=-3))
    operator = {"op_name": "conv", "op_type": "Conv2D", "tune_performance": {"Format": {
        "performance_after_tune(us)": "fast", "performance_before_tune(us)": 30}}}
    basic = {"basic": {"tuning_name": "m", "tuning_time(s)": 3}}
    (sums / "aoe_result_types.json").write_text(json.dumps([basic, {"OPAT": {"repo_modified_operators": [operator]}}]))
    (sums / "aoe_result_name.json").write_text(json.dumps([{"basic": {"tuning_name": 5, "tuning_time(s)": 3}}]))
    (sums / "aoe_result_entry.json").write_text(json.dumps([{"OPAT": {"repo_modified_operators": ["conv"]}}]))
    (sums / "result_cols.csv").write_text("Index,OpType,NPUDump\n0,Add,add0\n")
    row = lambda i, cos="0.999", mae="0.1", err="NO": COMPARE_ROW.format(i=i, cos=cos, mae=mae, err=err)
    (sums / "result_text.csv").write_text(COMPARE_HEADER + row(0) + row(1, cos="high"))
    (sums / "result_negative.csv").write_text(COMPARE_HEADER + row(0, mae="-1.5"))
    (sums / "result_yesno.csv").write_text(COMPARE_HEADER + row(0, err="maybe"))
    (sums / "op_summary_nan.csv").write_text("Op Name,OP Type,Task Duration(us)\na,Add,1.5\nb,Mul,nan\n")
    (sums / "op_statistic_neg.csv").write_text(OP_STATISTIC + "0,m,Add,AI_CORE,-4,1.0,1.0,1.0,1.0,100\n")
    (sums / "op_statistic_frac.csv").write_text(OP_STATISTIC + "0,m,Add,AI_CORE,2.5,1.0,1.0,1.0,1.0,100\n")
    (sums / "op_summary_big.csv").write_text('Op Name,OP Type,Task Duration(us)\n"' + "a" * 200000 + '",Add,1\n')
    (sums / "inf_summary.json").write_text(_summary(NPU_compute_time__max=1e400).replace("Infinity", "1e400"))
    (sums / "binary.csv").write_bytes(b"Op \xff\xfeName\n")
    prof = ws / "prof" / "PROF_000001_20240101120000123_ABCDEFGH" / "mindstudio_profiler_output"
    prof.mkdir(parents=True)
    (prof / "op_summary_20240101120000.csv").write_text("Device_id,Op Name\n0,add\n")
    (root / "outside").mkdir()
    (root / "outside" / "file.txt").write_text("must survive\n")
    return root


def test_cases_are_many_and_ids_unique():
    assert len(CASES) >= 50 and len({c[0] for c in CASES}) == len(CASES)


@pytest.mark.parametrize("case_id,argv,line", CASES, ids=[c[0] for c in CASES])
def test_hostile_command(built, tmp_path, monkeypatch, capsys, case_id, argv, line):
    root = tmp_path / "case"
    shutil.copytree(built, root, symlinks=True)
    before = snapshot(root)
    monkeypatch.chdir(root / "ws")
    capsys.readouterr()
    code = main(list(argv))
    out, err = capsys.readouterr()
    assert "Traceback" not in err and "internal error" not in err, err
    assert err.splitlines() == ["ascendpipe: error: " + line], err
    assert code == 2
    assert snapshot(root) == before


def test_our_result_csv_keeps_its_failures(built, tmp_path, monkeypatch, capsys):
    """import of our own result.csv: a row our compare failed stays failed (msit's IsPrecisionError is
    NO on the overflowing rows, whose cosine is NaN), and the count is the compare's."""
    root = tmp_path / "case"
    shutil.copytree(built, root, symlinks=True)
    monkeypatch.chdir(root / "ws")
    ours = json.loads(Path("build/compare__fp16/result.json").read_text())
    expected_failed = ours["summary"]["failed_ops"]
    assert expected_failed >= 2
    capsys.readouterr()
    assert main(["import", "build/compare__fp16/result.csv", "--json"]) == 0
    data = json.loads(capsys.readouterr().out)["data"]
    assert data["source"] == "ascendpipe"
    assert data["summary"]["failed_ops"] == expected_failed
    failed = [r["op_name"] for r in data["rows"] if r["failed"]]
    assert failed == [r["op_name"] for r in ours["rows"] if r["failed"]]
    overflowing = [r for r in data["rows"] if r["overflow"] == "target"]
    assert overflowing and all(r["failed"] and r["msit_precision_error"] is False for r in overflowing)
    assert main(["import", "build/compare__fp16/result.csv"]) == 0
    assert f", {expected_failed} precision errors," in capsys.readouterr().out


def test_msit_csv_still_takes_is_precision_error(built, tmp_path, monkeypatch, capsys):
    root = tmp_path / "case"
    shutil.copytree(built, root, symlinks=True)
    monkeypatch.chdir(root / "ws")
    text = COMPARE_HEADER + COMPARE_ROW.format(i=0, cos="0.5", mae="1", err="YES") + COMPARE_ROW.format(
        i=1, cos="NaN", mae="inf", err="NO")
    Path("result_1.csv").write_text(text)
    capsys.readouterr()
    assert main(["import", "result_1.csv", "--json"]) == 0
    data = json.loads(capsys.readouterr().out)["data"]
    assert [r["failed"] for r in data["rows"]] == [True, False]
    assert data["summary"]["failed_ops"] == 1 and data["source"] == "msit"


def test_set_with_plus_adds_a_param_on_purpose(built, tmp_path, monkeypatch, capsys):
    root = tmp_path / "case"
    shutil.copytree(built, root, symlinks=True)
    monkeypatch.chdir(root / "ws")
    assert main(["status", "pipeline.yaml", "--set", "+params.extra=1"]) == 0
    assert main(["status", "pipeline.yaml", "--set", "params.scale=2"]) == 0  # a param it has


# -- the process itself: its streams, its folder, its locale ---------------------------------------------

def _env(**extra) -> dict:
    env = dict(os.environ)
    # no empty entry: it means the current folder, which one test deletes (Python then cannot start)
    env["PYTHONPATH"] = os.pathsep.join(p for p in (str(Path(__file__).resolve().parents[2]), env.get("PYTHONPATH")) if p)
    env.update(extra)
    return env


def test_a_reader_that_went_away_ends_quietly(built, tmp_path):
    """`status p.yaml | true`: the pipe is closed before ascendpipe writes; exit 0, nothing on stderr
    (it was BrokenPipeError and exit 120 at Python's own flush)."""
    root = tmp_path / "case"
    shutil.copytree(built, root, symlinks=True)
    read_end, write_end = os.pipe()
    os.close(read_end)
    try:
        proc = subprocess.run([sys.executable, "-m", "ascendpipe", "status", "pipeline.yaml"], cwd=root / "ws",
                              stdout=write_end, stderr=subprocess.PIPE, text=True, env=_env(), timeout=120)
    finally:
        os.close(write_end)
    assert (proc.returncode, proc.stderr) == (0, "")


def test_a_closed_stdout_ends_quietly(built, tmp_path):
    """`build >&-`: sys.stdout is None; the build runs and says nothing (it was AttributeError, exit 3)."""
    root = tmp_path / "case"
    shutil.copytree(built, root, symlinks=True)
    proc = subprocess.run(f"exec '{sys.executable}' -m ascendpipe build pipeline.yaml --force prep >&-", shell=True,
                          cwd=root / "ws", stderr=subprocess.PIPE, text=True, env=_env(), timeout=120)
    assert (proc.returncode, proc.stderr) == (0, "")


def test_a_deleted_working_folder_is_one_line(tmp_path):
    gone = tmp_path / "gone"
    gone.mkdir()
    proc = subprocess.run(f"cd gone && rmdir ../gone && exec '{sys.executable}' -m ascendpipe runs", shell=True,
                          cwd=tmp_path, capture_output=True, text=True, env=_env(), timeout=120)
    assert proc.returncode == 2
    assert proc.stderr.splitlines() == [
        "ascendpipe: error: the current folder no longer exists (it was deleted or moved); cd to a workspace and "
        "run it again"]


def test_a_non_ascii_folder_under_the_c_locale_is_one_line(built, tmp_path):
    """LC_ALL=C without Python's UTF-8 mode: the folder's name cannot be encoded; refused in one line
    before anything is read or written (it was UnicodeEncodeError in the plan's fingerprint)."""
    root = tmp_path / "caf\u00e9"
    shutil.copytree(built, root, symlinks=True)
    before = snapshot(root)
    proc = subprocess.run([sys.executable, "-m", "ascendpipe", "build", "pipeline.yaml", "--force"], cwd=root / "ws",
                          capture_output=True, env=_env(LC_ALL="C", LANG="C", PYTHONUTF8="0", PYTHONCOERCECLOCALE="0"),
                          timeout=120)
    err = proc.stderr.decode("ascii", "backslashreplace")
    assert proc.returncode == 2 and proc.stdout == b""
    assert err.splitlines() == [
        f"ascendpipe: error: the current folder '{root}/ws' has letters the locale's encoding (ascii) cannot read; "
        "run with a UTF-8 locale (e.g. LC_ALL=C.UTF-8) or PYTHONUTF8=1".replace("\u00e9", "\\xe9")]
    assert snapshot(root) == before
    ok = subprocess.run([sys.executable, "-m", "ascendpipe", "status", "pipeline.yaml"], cwd=root / "ws",
                        capture_output=True, env=_env(LC_ALL="C.UTF-8"), timeout=120)
    assert ok.returncode == 0, ok.stderr


def test_compare_respects_no_color_on_a_terminal(built, tmp_path):
    """On a terminal compare paints failing rows red; with NO_COLOR set it prints no ANSI code."""
    import pty

    root = tmp_path / "case"
    shutil.copytree(built, root, symlinks=True)

    def on_a_terminal(env: dict) -> bytes:
        leader, follower = pty.openpty()
        try:
            proc = subprocess.run([sys.executable, "-m", "ascendpipe", "compare", "--golden", "models/l2.onnx",
                                   "--target", "build/convert__fp16", "--input", "data/probe.npy"],
                                  cwd=root / "ws", stdout=follower, stderr=subprocess.DEVNULL, env=env, timeout=120)
            os.close(follower)
            follower = None
            chunks = []
            while True:
                try:
                    chunk = os.read(leader, 65536)
                except OSError:  # EIO: the terminal's other side is closed and all was read
                    break
                if not chunk:
                    break
                chunks.append(chunk)
        finally:
            os.close(leader)
            if follower is not None:
                os.close(follower)
        assert proc.returncode == 0
        return b"".join(chunks)

    plain = _env()
    plain.pop("NO_COLOR", None)
    coloured = on_a_terminal(plain)
    assert b"\033[" in coloured and b"sum" in coloured
    quiet = on_a_terminal(_env(NO_COLOR="1"))
    assert b"\033[" not in quiet and b"sum" in quiet


def test_onnxruntime_load_errors_hold_no_cpp_text(built, capfd):
    """A model onnxruntime cannot load (here an empty graph, passed around the command's own check) is
    one line naming the file, without the C++ place and signature onnxruntime quotes, and nothing
    logged in colour beside it."""
    from ascendpipe.backends.onnxruntime.session import make_session
    from ascendpipe.errors import UserError

    model = built / "ws" / "empty.onnx"
    capfd.readouterr()
    with pytest.raises(UserError) as exc:
        make_session(model)
    message = str(exc.value)
    assert message.startswith(f"{model}: onnxruntime cannot load the model: [ONNXRuntimeError]"), message
    assert ".cc:" not in message and "::" not in message and "const " not in message
    out, err = capfd.readouterr()
    assert (out, err) == ("", "")


def test_a_binary_keep_dtype_file_in_a_pipeline_fails_the_stage_in_one_line(built, tmp_path, monkeypatch, capsys):
    root = tmp_path / "case"
    shutil.copytree(built, root, symlinks=True)
    monkeypatch.chdir(root / "ws")
    Path("q.yaml").write_text("stages:\n  convert:\n    kind: convert\n    model: m/model.onnx\n"
                              "    params: {keep_dtype: bin.cfg}\n")
    capsys.readouterr()
    assert main(["build", "q.yaml"]) == 1
    out, err = capsys.readouterr()
    # blamed on the pipeline field that names the file (q.yaml:5:26), the file named as written there
    assert "q.yaml:5:26: stage 'convert'" in out
    assert "'bin.cfg': keep_dtype: not a text file (byte 3 is not utf-8 text)" in out
    assert "Traceback" not in out + err and "UnicodeDecodeError" not in Path("build/convert.log").read_text()
