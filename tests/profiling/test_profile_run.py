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
    assert len(summary) == 10 * len({r["Kernel Name"] for r in summary})
    stat = list(csv.DictReader((out / "op_statistic.csv").open()))
    assert sum(float(r["Ratio(%)"]) for r in stat) == pytest.approx(100.0, abs=0.01)
    by_type = {}
    for r in summary:
        key = (r["OP Type"], r["Task Type"])
        by_type[key] = by_type.get(key, 0.0) + float(r["Task Duration(us)"])
    for r in stat:
        assert float(r["Total Time(us)"]) == pytest.approx(by_type[(r["OP Type"], r["Core Type"])], abs=0.01)
    # onnxruntime's NCHWc rewrite renames the convs and fuses the relus; every row carries the model's
    # node, op type and the nodes the kernel computes, the kernel's own name beside them
    assert {r["Op Name"] for r in summary} <= set(NODES) and {"conv1", "conv2"} <= {r["Op Name"] for r in summary}
    conv1 = {(r["Kernel Name"], r["Kernel Type"], r["OP Type"], r["Source Ops"]) for r in summary if r["Op Name"] == "conv1"}
    assert conv1 == {("r1_nchwc", "Conv", "Conv", "conv1;relu1")}
    assert all(r["Source Ops"] for r in summary) and m["attributed_pct"] == 100.0
    assert m["emulation_overhead_pct"] == 0.0
    # the top type: the largest median time per run among the device's ops (host reorders apart)
    per_run = {}
    for r in summary:
        if r["Task Type"] != "HOST_CPU":
            key = (r["OP Type"], r["Infer ID"])
            per_run[key] = per_run.get(key, 0.0) + float(r["Task Duration(us)"])
    medians = {t: float(np.median([v for (tt, _), v in per_run.items() if tt == t])) for t, _ in per_run}
    top = max(medians, key=medians.get)
    assert result.info["top_op_type"] == top
    assert m["top_op_type_ratio_pct"] == pytest.approx(100 * medians[top] / sum(medians.values()), abs=0.01)
    host = sum(float(r["Task Duration(us)"]) for r in summary if r["Task Type"] == "HOST_CPU")
    assert m["host_ops_pct"] == pytest.approx(100 * host / sum(by_type.values()), abs=0.01)
    html = (out / "profile.html").read_text()
    assert "<script" not in html and "Profile of conv_chain.onnx (stage profile)" in html
    chart = html.split("Time by op type")[1].split("Op types</h2>")[0]
    assert chart.count("<rect") == len(stat)
    for part in ("Colours:", "HOST_CPU", "Session settings", "graph_optimization_level", "Timeline (run",
                 "Ops of the model (5)", "r1_nchwc", "conv1, relu1", "attributed to the model's nodes: 100.0%"):
        assert part in html, part
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


def test_a_transformers_kernels_are_the_models_ops(tmp_path):
    """onnxruntime fuses MatMul+Add into Gemms with reshapes around them, Add+LayerNormalization into
    SkipLayerNormalization, the Erf GELU into Gelu: every kernel is named after, typed as and traced to
    the model's nodes."""
    import onnx

    from tests.profiling.models import transformer_encoder, transformer_inputs

    model = transformer_encoder(tmp_path / "encoder.onnx")
    np.save(tmp_path / "x.npy", transformer_inputs()["x"])
    ctx = _ctx(tmp_path, model, tmp_path / "x.npy", {"warmup": 1, "iterations": 3})
    result = ProfileKind().run(ctx)
    assert result.metrics["attributed_pct"] >= 99.0
    rows = list(csv.DictReader((ctx.out_dir / "op_summary.csv").open()))
    nodes = {n.name: n.op_type for n in onnx.load(str(model)).graph.node}
    total = sum(float(r["Task Duration(us)"]) for r in rows)
    traced = sum(float(r["Task Duration(us)"]) for r in rows if r["Source Ops"])
    assert traced >= 0.99 * total
    assert all(r["Op Name"] in nodes and r["OP Type"] == nodes[r["Op Name"]] for r in rows)
    kernel_types = {r["Kernel Type"] for r in rows}
    assert {"SkipLayerNormalization", "Gelu"} <= kernel_types  # onnxruntime did fuse
    assert not {"SkipLayerNormalization", "Gelu", "FusedMatMul"} & {r["OP Type"] for r in rows}
    by_kernel = {r["Kernel Name"]: r for r in rows}
    gemm = by_kernel["/layers.0/linear1/MatMul/MatMulAddFusion"]
    assert (gemm["Op Name"], gemm["OP Type"]) == ("/layers.0/linear1/MatMul", "MatMul")
    assert gemm["Source Ops"] == "/layers.0/linear1/MatMul;/layers.0/linear1/Add"
    reshapes = [r for r in rows if r["Kernel Name"].startswith("gemm_input_reshape")]
    assert reshapes and all(r["Source Ops"] and r["Op Name"] in nodes for r in reshapes)
    skip = next(r for r in rows if r["Kernel Type"] == "SkipLayerNormalization")
    assert skip["Source Ops"] == "/layers.0/Add;/layers.0/norm1/LayerNormalization"
    gelu = next(r for r in rows if r["Kernel Type"] == "Gelu")
    assert gelu["Source Ops"].split(";") == [f"/layers.0/{n}" for n in ("Div", "Erf", "Add_1", "Mul", "Mul_1")]
    # every node of the model that computes something is some kernel's source
    sources = {s for r in rows for s in r["Source Ops"].split(";") if s}
    assert set(nodes) - {"output"} <= sources


def test_the_title_names_the_source_model_the_convert_stage_and_the_variant(tmp_path, model):
    from ascendpipe.backends.onnxruntime.profile_tune_stages import model_title

    converted = tmp_path / "build" / "convert@aipp"
    converted.mkdir(parents=True)
    (converted / "model.onnx").write_bytes(model.read_bytes())
    (converted / "convert.json").write_text(json.dumps({"atc_argv": ["atc", "--model=build/export/model.onnx", "--framework=5"]}))
    assert model_title(converted / "model.onnx", "profile", "convert@aipp") == \
        "Profile of export/model.onnx converted by convert@aipp (variant aipp, stage profile)"
    assert model_title(model) == "Profile of conv_chain.onnx"


def test_a_converted_models_kernels_name_the_original_onnx_ops(tmp_path):
    """convert fuses Conv+BN (fused_map.json: conv -> bn, conv) and adds rounding casts; onnxruntime
    then rewrites the conv to NCHWc: the kernel's sources are the original ONNX's conv and bn."""
    from ascendpipe.backends.onnxruntime.convert import convert_model
    from ascendpipe.backends.onnxruntime.profile import attribute_to_model, attributed_pct, model_graph
    from ascendpipe.precision.settings import resolve
    from tests.modelzoo import conv_bn_relu_inputs, conv_bn_relu_model

    converted = convert_model(conv_bn_relu_model(tmp_path / "cbr.onnx"), tmp_path / "c",
                              resolve({"precision_mode": "force_fp16"})).model_path
    raw = profile_model(converted, [conv_bn_relu_inputs()], warmup=1, iterations=2)
    data, emulation_us = attribute_to_model(raw, model_graph(converted))
    assert emulation_us > 0 and attributed_pct(data) == 100.0
    conv = [op for op in data.ops if op.kernel_type == "Conv"]
    assert conv and all((op.op_name, op.op_type, set(op.sources)) == ("conv", "Conv", {"conv", "bn"}) for op in conv)
    assert not [op for op in data.ops if op.op_name.startswith("ascendpipe_emu/") or
                any(s.startswith("ascendpipe_emu/") for s in op.sources)]
