import csv
import io
import json
import time

import numpy as np
import pytest

from ascendpipe.backends.onnxruntime.profile import open_session, profile_model
from ascendpipe.errors import UserError
from ascendpipe.profiling import timeline
from ascendpipe.stages.base import StageContext
from ascendpipe.stages.profile import ProfileKind

from tests.modelzoo import conv_chain

NODES = ["conv1", "relu1", "conv2", "relu2", "gap", "flatten", "fc"]


@pytest.fixture(scope="module")
def model(tmp_path_factory):
    return conv_chain(tmp_path_factory.mktemp("m") / "conv_chain.onnx")


def _feeds(batch=2):
    return {"x": np.random.default_rng(0).standard_normal((batch, 3, 32, 32)).astype(np.float32)}


def test_op_durations_add_up_to_the_iteration_time(model):
    # fusions off so that every node runs as its own kernel
    data = profile_model(model, [_feeds()], warmup=3, iterations=8,
                         settings={"graph_optimization_level": "ORT_DISABLE_ALL"})
    assert len(data.iterations) == 8
    coverage = []
    for it in data.iterations:
        ops = data.ops_of(it.index)
        assert [o.op_name for o in ops] == NODES
        # waits recomputed from the start times: run start -> first kernel, kernel end -> next start
        ends = [it.start_us] + [o.start_us + o.duration_us for o in ops[:-1]]
        assert [o.wait_us for o in ops] == pytest.approx([max(0.0, o.start_us - e) for o, e in zip(ops, ends)])
        busy = sum(o.duration_us for o in ops) + sum(o.wait_us for o in ops)
        # kernels and the gaps between them lie inside the run; what is left is the executor's overhead
        assert busy <= it.duration_us + 1.0
        assert all(0 <= o.start_us - it.start_us <= it.duration_us for o in ops)
        coverage.append(sum(o.duration_us for o in ops) / it.duration_us)
    # kernels are most of a run; on a loaded machine a preempted iteration may not show it, the best does
    assert max(coverage) >= 0.6


def test_timeline_is_valid_trace_json(model):
    data = profile_model(model, [_feeds()], warmup=1, iterations=2)
    doc = json.loads(json.dumps(timeline.trace_document(data)))
    assert timeline.validate_trace(doc) == []
    complete = [e for e in doc["traceEvents"] if e["ph"] == "X"]
    assert len(complete) == len(data.ops) + len(data.iterations)
    # and the validator is not a rubber stamp
    broken = {"traceEvents": [{"ph": "X", "name": "a", "pid": 0, "ts": 1}, {"ph": "?", "name": 3, "pid": "p"}]}
    assert len(timeline.validate_trace(broken)) == 5  # no dur; bad phase, name, pid; no ts
    assert timeline.validate_trace({"events": []}) != []


def _ctx(tmp_path, model, inputs=None, params=None):
    out = tmp_path / "out"
    out.mkdir()
    ins = {"model": model} if inputs is None else {"model": model, "inputs": inputs}
    return StageContext(name="profile", kind="profile", workspace=tmp_path, out_dir=out, final_out_dir=out,
                        params=params or {"warmup": 2, "iterations": 10}, inputs=ins, upstream={},
                        backend="onnxruntime", log=io.StringIO())


def test_profile_stage_writes_every_file_and_consistent_metrics(tmp_path, model):
    np.save(tmp_path / "x.npy", _feeds(4)["x"])  # 4 samples, batch 2 -> 2 batches
    ctx = _ctx(tmp_path, model, tmp_path / "x.npy")
    started = time.perf_counter()
    result = ProfileKind().run(ctx)
    wall_ms = 1000 * (time.perf_counter() - started)
    out = ctx.out_dir
    for name in ("timeline.json", "op_summary.csv", "op_statistic.csv", "profile.html", "summary.json", "metrics.json"):
        assert (out / name).is_file(), name
    m = result.metrics
    assert 0 < m["latency_ms_median"] <= m["latency_ms_p99"] and m["latency_ms_mean"] > 0
    assert m["latency_ms_median"] * 20 < wall_ms  # 2x10 timed runs cannot take longer than the stage
    assert m["throughput"] == pytest.approx(1000 * 2 / m["latency_ms_mean"])
    summary = list(csv.DictReader((out / "op_summary.csv").open()))
    assert len(summary) == 10 * len({r["Op Name"] for r in summary})
    stat = list(csv.DictReader((out / "op_statistic.csv").open()))
    assert sum(float(r["Ratio(%)"]) for r in stat) == pytest.approx(100.0, abs=0.01)
    by_type = {}
    for r in summary:
        by_type[r["OP Type"]] = by_type.get(r["OP Type"], 0.0) + float(r["Task Duration(us)"])
    for r in stat:
        assert float(r["Total Time(us)"]) == pytest.approx(by_type[r["OP Type"]], abs=0.01)
    # onnxruntime's NCHWc rewrite renames the convs; the rows carry the model's node names again
    assert {r["Op Name"] for r in summary if not r["Op Name"].startswith("Reorder")} <= set(NODES)
    assert {"conv1", "conv2"} <= {r["Op Name"] for r in summary}
    assert m["emulation_overhead_pct"] == 0.0
    top = max(by_type, key=by_type.get)
    assert result.info["top_op_type"] == top
    assert m["top_op_type_ratio_pct"] == pytest.approx(100 * by_type[top] / sum(by_type.values()), abs=0.01)
    html = (out / "profile.html").read_text()
    assert html.count("<rect") == len(stat) and "<script" not in html
    assert top in ctx.log.getvalue() and "NPU_compute_time" in ctx.log.getvalue()
    assert json.loads((out / "metrics.json").read_text())["latency_ms_p99"] == m["latency_ms_p99"]


def test_profile_stage_applies_runtime_json(tmp_path, model):
    converted = tmp_path / "converted"
    converted.mkdir()
    (converted / "model.onnx").write_bytes(model.read_bytes())
    (converted / "runtime.json").write_text(json.dumps({"session": {"graph_optimization_level": "ORT_DISABLE_ALL"}}))
    ctx = _ctx(tmp_path, converted, params={"warmup": 1, "iterations": 2})
    result = ProfileKind().run(ctx)
    assert result.info["session"] == {"graph_optimization_level": "ORT_DISABLE_ALL"}
    names = {r["Op Name"] for r in csv.DictReader((ctx.out_dir / "op_summary.csv").open())}
    assert names == set(NODES)  # nothing fused, as the bank said


def test_wrong_input_shape_is_a_located_user_error(tmp_path, model):
    np.save(tmp_path / "bad.npy", np.zeros((2, 3, 8, 8), np.float32))
    ctx = _ctx(tmp_path, model, tmp_path / "bad.npy")
    with pytest.raises(UserError) as err:
        ProfileKind().run(ctx)
    assert "stage 'profile'" in str(err.value)


def test_open_session_uses_given_settings(model):
    sess = open_session(model, {"intra_op_num_threads": 1})
    y = sess.run(None, _feeds())[0]
    assert y.shape == (2, 10)
