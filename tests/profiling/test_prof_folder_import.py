"""The profile's PROF_* folder, `ascendpipe import` on it and on msprof's files, ais_bench layouts,
host ops, and the totals explained (outliers)."""

from __future__ import annotations

import csv
import io
import json
import re
from datetime import datetime, timezone

import numpy as np
import pytest

from ascendpipe.backends.ascend import ais_bench
from ascendpipe.backends.ascend.importer import describe, import_path
from ascendpipe.profiling import msprof_csv, prof_folder, report
from ascendpipe.profiling.oprows import OpRow, ProfileData
from ascendpipe.stages.base import StageContext
from ascendpipe.stages.profile import ProfileKind
from tests.modelzoo import conv_chain

# msprof-analyze 26.2.0, advisor/config/profiling_data_version_config.yaml:6 and :13 (transcribed)
ANALYZE_PROF_DIR = r"^PROF_\d{6}_\d{17}_\w+$"
ANALYZE_OP_SUMMARY = r"^op_summary_\d{14}\.csv$"


@pytest.fixture(scope="module")
def profiled(tmp_path_factory):
    tmp = tmp_path_factory.mktemp("prof")
    model = conv_chain(tmp / "conv_chain.onnx")
    np.save(tmp / "x.npy", np.random.default_rng(0).standard_normal((2, 3, 32, 32)).astype(np.float32))
    out = tmp / "out"
    out.mkdir()
    ctx = StageContext(name="profile", kind="profile", workspace=tmp, out_dir=out, final_out_dir=out,
                       params={"warmup": 1, "iterations": 4}, inputs={"model": model, "inputs": tmp / "x.npy"},
                       upstream={}, backend="onnxruntime", log=io.StringIO())
    ProfileKind().run(ctx)
    return out


def test_profile_writes_a_prof_folder_named_as_msprof_analyze_looks_for_it(profiled):
    [prof] = [p for p in profiled.iterdir() if p.name.startswith("PROF_")]
    assert re.match(ANALYZE_PROF_DIR, prof.name)
    files = sorted(p.name for p in (prof / "mindstudio_profiler_output").iterdir())
    assert len(files) == 2 and re.match(ANALYZE_OP_SUMMARY, files[1])
    assert files[0] == "op_statistic_" + files[1][len("op_summary_"):]  # the same export stamp
    # the same bytes as the stage's own CSVs
    assert (prof / "mindstudio_profiler_output" / files[1]).read_text() == (profiled / "op_summary.csv").read_text()


def test_a_profile_folder_round_trips_through_import(profiled):
    summary = list(csv.DictReader((profiled / "op_summary.csv").open()))
    statistic = list(csv.DictReader((profiled / "op_statistic.csv").open()))
    for path in (profiled, next(profiled.glob("PROF_*"))):  # the stage folder or the PROF_ folder itself
        result = import_path(path)
        assert result["kind"] == "msprof"
        s = result["data"]["summary"]
        assert s["ops"] == len(summary) and s["op_types"] == len(statistic)
        assert s["total_task_duration_us"] == pytest.approx(sum(float(r["Task Duration(us)"]) for r in summary), abs=0.01)
        assert [r["Op Name"] for r in result["data"]["op_summary"]] == [r["Op Name"] for r in summary]
        assert f"{len(summary)} op rows, {len(statistic)} op types" in describe(result)


def test_op_statistic_alone_reports_its_rows(profiled):
    """Was: "0 op rows, 11 op types, total task time 0.0 us" for an op_statistic file."""
    statistic = list(csv.DictReader((profiled / "op_statistic.csv").open()))
    result = import_path(next(profiled.glob("PROF_*/mindstudio_profiler_output/op_statistic_*.csv")))
    s = result["data"]["summary"]
    assert s["ops"] == sum(int(r["Count"]) for r in statistic) > 0 and s["source"] == "op_statistic"
    assert s["total_task_duration_us"] == pytest.approx(sum(float(r["Total Time(us)"]) for r in statistic), abs=0.01)
    assert describe(result).startswith(f"msprof: {s['ops']} op runs (op_statistic's counts), {len(statistic)} op types")


def test_onnxruntime_layout_kernels_are_host_ops(profiled):
    rows = list(csv.DictReader((profiled / "op_summary.csv").open()))
    host = {r["Kernel Type"] for r in rows if r["Task Type"] == "HOST_CPU"}
    assert host and host <= {"ReorderInput", "ReorderOutput"}
    assert all(r["Task Type"] == "HOST_CPU" for r in rows if r["Kernel Type"].startswith("Reorder"))
    # a reorder serves the model op it feeds or ends: its OP Type is that op's, its time the host's
    assert all(not r["OP Type"].startswith("Reorder") and r["Source Ops"] for r in rows if r["Task Type"] == "HOST_CPU")
    assert OpRow(0, 0, "r", "ReorderInput", 0.0, 1.0, 0.0).task_type == "HOST_CPU"
    assert OpRow(0, 0, "c", "Conv", 0.0, 1.0, 0.0).task_type == "AI_CORE"
    assert OpRow(0, 0, "a", "Add", 0.0, 1.0, 0.0).task_type == "AI_VECTOR_CORE"


def test_names_follow_the_export_time():
    when = datetime(2026, 12, 3, 15, 4, 5, 678000, tzinfo=timezone.utc)
    assert prof_folder.names(when) == ("PROF_000001_20261203150405678_ASCENDPIPE", "op_summary_20261203150405.csv",
                                       "op_statistic_20261203150405.csv")


def test_a_total_made_by_one_outlier_is_explained():
    """Conv: 20 iterations of 79 us and one 11 ms run: the total (12.5 ms) is mostly that one run."""
    ops = [OpRow(i, 0, "conv", "Conv", 0.0, 79.0, 0.0) for i in range(20)]
    ops[7] = OpRow(7, 0, "conv", "Conv", 0.0, 11000.0, 0.0)
    ops += [OpRow(i, 1, "add", "Add", 0.0, 5.0, 0.0) for i in range(20)]
    totals = msprof_csv.op_type_totals(ProfileData("m", [], ops).ops)
    conv = totals[0]
    assert (conv["op_type"], conv["count"], conv["median_us"], conv["max_us"]) == ("Conv", 20, 79.0, 11000.0)
    assert conv["total_us"] == 19 * 79.0 + 11000.0 and conv["per_iteration_us"] == conv["total_us"] / 20
    assert (conv["outliers"], conv["outlier_us"]) == (1, 11000.0) and totals[1]["outliers"] == 0
    note = report.outlier_note(conv)
    assert note == "1 run above 10x the median (79.0 us), max 11000.0 us: 88% of the total"
    table = report.top_ops_table(totals)
    assert "Median/run(us)" in table and f"outlier: Conv: {note}" in table and "outlier: Add" not in table
    # ranked by median per run: a Mul of 100 us every run comes before the Conv whose total one 11 ms run made
    ops += [OpRow(i, 2, "mul", "Mul", 0.0, 100.0, 0.0) for i in range(20)]
    totals = msprof_csv.op_type_totals(ProfileData("m", [], ops).ops)
    assert totals[0]["op_type"] == "Conv"  # by total (op_statistic.csv's order, msprof's)
    lines = report.top_ops_table(totals).splitlines()
    assert [line.split()[0] for line in lines[2:5]] == ["Mul", "Conv", "Add"]
    assert lines[2].split()[3] == "100.0" and lines[3].split()[3] == "79.0"
    latency = {"mean": 0.079, "median": 0.078, "p99": 0.09, "min": 0.07, "max": 0.1, "count": 20, "throughput": 1.0}
    html = report.render_profile_html(title="t", totals=totals, latency=latency, batch_size=1, iterations=20)
    assert "over the 20 profiled runs" in html and note in html and "Per iteration(us)" in html


@pytest.mark.parametrize("block, samples, p99, count", [
    ({"min": 1, "max": 3, "mean": 2, "median": 2, "percentile(99%)": 2.9, "count": 5}, None, 2.9, 5),  # ais_bench
    ({"min": 1, "max": 3, "mean": 2, "median": 2, "P99": 2.8}, [1, 2, 2, 2, 3], 2.8, 5),  # P99, no count
    ({"min": 1, "mean": 2, "p99": 2.7, "count": 5}, None, 2.7, 5),
    ({"min": 1, "max": 3, "mean": 2, "median": 2}, [1.0, 2.0, 2.0, 2.0, 3.0], 2.96, 5),  # older: from the list
    ({"mean": 2.0, "count": 3}, [[0, 1], [1, 3], [3, 4]], None, 3),  # multi-thread: intervals, not latencies
])
def test_ais_bench_summary_layouts(block, samples, p99, count):
    data = {"NPU_compute_time": block, "throughput": 500.0}
    if samples is not None:
        data["npu_compute_time_list"] = samples
    parsed = ais_bench.parse_summary(json.loads(json.dumps(data)))
    assert parsed["latency_ms"]["p99"] == (pytest.approx(p99) if p99 is not None else None)
    assert parsed["count"] == count and parsed["latency_ms"]["mean"] == 2.0
