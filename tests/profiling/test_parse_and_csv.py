import csv
import io

import pytest

from ascendpipe.backends.onnxruntime.profile import parse_ort_profile
from ascendpipe.profiling import msprof_csv
from ascendpipe.profiling.oprows import ProfileData


def _run(ts, dur):
    return {"cat": "Session", "name": "model_run", "ph": "X", "ts": ts, "dur": dur, "pid": 1, "tid": 1}


def _kernel(name, op_type, ts, dur, shape=(2, 3)):
    return {"cat": "Node", "name": f"{name}_kernel_time", "ph": "X", "ts": ts, "dur": dur, "pid": 1, "tid": 1,
            "args": {"op_name": op_type, "provider": "CPUExecutionProvider",
                     "input_type_shape": [{"float": list(shape)}, {"int64": [2]}],
                     "output_type_shape": [{"float16": list(shape)}]}}


EVENTS = [
    {"cat": "Session", "name": "session_initialization", "ph": "X", "ts": 0, "dur": 50},
    _run(100, 40), _kernel("a", "Conv", 102, 20), _kernel("b", "Relu", 125, 10),  # warm-up
    _run(200, 40), _kernel("a", "Conv", 203, 21), _kernel("b", "Relu", 228, 9),
    {"cat": "Node", "name": "a_fence_before", "ph": "X", "ts": 202, "dur": 0},
    _run(300, 50), _kernel("a", "Conv", 301, 30), _kernel("b", "Relu", 335, 11),
]


def test_parse_skips_warmup_and_rebases_times():
    data = parse_ort_profile(EVENTS, warmup=1, model_name="m")
    assert [(i.index, i.start_us, i.duration_us) for i in data.iterations] == [(0, 0.0, 40.0), (1, 100.0, 50.0)]
    got = [(o.iteration, o.index, o.op_name, o.op_type, o.start_us, o.duration_us, o.wait_us) for o in data.ops]
    assert got == [(0, 0, "a", "Conv", 3.0, 21.0, 3.0), (0, 1, "b", "Relu", 28.0, 9.0, 4.0),
                   (1, 0, "a", "Conv", 101.0, 30.0, 1.0), (1, 1, "b", "Relu", 135.0, 11.0, 4.0)]
    first = data.ops[0]
    assert [(t.dtype, t.shape) for t in first.inputs] == [("FLOAT", (2, 3)), ("INT64", (2,))]
    assert first.task_type == "AI_CORE" and data.ops[1].task_type == "AI_VECTOR_CORE"


def test_parse_with_all_runs_as_warmup_gives_nothing():
    data = parse_ort_profile(EVENTS, warmup=3)
    assert data.iterations == [] and data.ops == []


MSPROF_OP_SUMMARY = ("Device_id,Model Name,Model ID,Task ID,Stream ID,Infer ID,Op Name,OP Type,OP State,Task Type,"
                     "Task Start Time(us),Task Duration(us),Task Wait Time(us),Block Num,Mix Block Num,HF32 Eligible,"
                     "Input Shapes,Input Data Types,Input Formats,Output Shapes,Output Data Types,Output Formats,"
                     "Context ID")
MSPROF_OP_STATISTIC = "Device_id,Model Name,OP Type,Core Type,Count,Total Time(us),Avg Time(us),Min Time(us),Max Time(us),Ratio(%)"


def _table(text):
    return list(csv.DictReader(io.StringIO(text)))


def test_csvs_use_msprof_headers_and_their_numbers_add_up():
    data = parse_ort_profile(EVENTS, warmup=1, model_name="m")
    summary = msprof_csv.render_csv(msprof_csv.OP_SUMMARY_COLUMNS, msprof_csv.op_summary_rows(data))
    statistic = msprof_csv.render_csv(msprof_csv.OP_STATISTIC_COLUMNS, msprof_csv.op_statistic_rows(data))
    # msprof's columns in msprof's order, then the emulation's three (kernel and source ops)
    assert summary.splitlines()[0] == MSPROF_OP_SUMMARY + ",Kernel Name,Kernel Type,Source Ops"
    assert statistic.splitlines()[0] == MSPROF_OP_STATISTIC
    rows = _table(summary)
    assert rows[0]["Input Shapes"] == "2,3;2" and rows[0]["Input Data Types"] == "FLOAT;INT64"
    assert rows[0]["Output Data Types"] == "FLOAT16" and rows[0]["Infer ID"] == "0"
    stat = {r["OP Type"]: r for r in _table(statistic)}
    assert float(stat["Conv"]["Total Time(us)"]) == pytest.approx(51.0)
    assert float(stat["Conv"]["Min Time(us)"]) == 21.0 and float(stat["Conv"]["Max Time(us)"]) == 30.0
    assert float(stat["Relu"]["Avg Time(us)"]) == pytest.approx(10.0)
    assert float(stat["Conv"]["Ratio(%)"]) == pytest.approx(100 * 51 / 71, abs=1e-3)
    assert list(stat) == ["Conv", "Relu"]  # largest total first


def test_statistic_of_no_ops_is_empty():
    assert msprof_csv.op_statistic_rows(ProfileData("m")) == []


def test_kernels_are_named_after_model_nodes_and_emulation_casts_left_out():
    from ascendpipe.backends.onnxruntime.profile import ModelGraph, attribute_to_model
    from ascendpipe.profiling.attribution import Node

    events = [_run(0, 100), _kernel("ascendpipe_emu/in_fp16/x", "Cast", 1, 5),
              _kernel("ascendpipe_emu/raw/r1_nchwc", "Conv", 10, 40), _kernel("ReorderOutput_token_4", "ReorderOutput", 55, 5),
              _kernel("ascendpipe_emu/out_fp16/r1", "Cast", 61, 3), _kernel("fc", "Gemm", 70, 20)]
    data = parse_ort_profile(events, model_name="m")
    graph = ModelGraph([Node("ascendpipe_emu/in_fp16/x", "Cast", ("x",), ("xh",)), Node("conv1", "FusedConv", ("xh", "w"), ("c1",)),
                        Node("relu1", "Relu", ("c1",), ("ascendpipe_emu/raw/r1",)),
                        Node("ascendpipe_emu/out_fp16/r1", "Cast", ("ascendpipe_emu/raw/r1",), ("r1",)),
                        Node("fc", "Gemm", ("r1", "fw"), ("y",))], {"w", "fw"})
    # without the optimised graph: by the renamed kernel's output tensor, walking up to the kernel's type
    kept, overhead = attribute_to_model(data, graph)
    assert [(o.op_name, o.index) for o in kept.ops] == [("conv1", 0), ("ReorderOutput_token_4", 1), ("fc", 2)]
    assert [o.sources for o in kept.ops] == [("conv1",), (), ("fc",)]  # the reorder: nothing to read it from
    assert overhead == 8.0
    assert kept.iterations == data.iterations
    # with it: the NCHWc conv computes conv1 and relu1, its reorder serves them (host time, not the device's)
    data.kernel_nodes = [Node("ascendpipe_emu/in_fp16/x", "Cast", ("x",), ("xh",)),
                         Node("ReorderInput", "ReorderInput", ("xh",), ("xh_nchwc",)),
                         Node("ascendpipe_emu/raw/r1_nchwc", "Conv", ("xh_nchwc", "w_nchwc"), ("r1_nchwc",)),
                         Node("ReorderOutput_token_4", "ReorderOutput", ("r1_nchwc",), ("ascendpipe_emu/raw/r1",)),
                         Node("ascendpipe_emu/out_fp16/r1", "Cast", ("ascendpipe_emu/raw/r1",), ("r1",)),
                         Node("fc", "Gemm", ("r1", "fw"), ("y",))]
    data.kernel_constants = {"w_nchwc", "fw", "x"}
    kept, overhead = attribute_to_model(data, graph)
    rows = [(o.op_name, o.op_type, o.kernel_name, o.kernel_type, o.sources, o.task_type) for o in kept.ops]
    assert rows == [("conv1", "FusedConv", "ascendpipe_emu/raw/r1_nchwc", "Conv", ("conv1", "relu1"), "AI_CORE"),
                    ("conv1", "FusedConv", "ReorderOutput_token_4", "ReorderOutput", ("conv1", "relu1"), "HOST_CPU"),
                    ("fc", "Gemm", "fc", "Gemm", ("fc",), "AI_CORE")]
    assert overhead == 8.0
