"""The ascend stage functions end to end against the CANN test doubles (tests/backends/ascend/doubles)."""

from __future__ import annotations

import json
import shlex
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

from ascendpipe.backends.ascend import stages
from ascendpipe.backends.ascend.runner import RecordingRunner, SubprocessRunner
from ascendpipe.errors import StageFailed, UserError

SOC = "Ascend310P3"


def _recording(name="stage"):
    return RecordingRunner(delegate=SubprocessRunner(stage=name))


def _reference(model: Path, feeds: dict, names=None) -> dict:
    """The tiny model run directly on onnxruntime (all tensors when names is None)."""
    import onnx
    import onnxruntime as ort

    m = onnx.load(str(model))
    if names is None:
        for node in m.graph.node:
            for t in node.output:
                if t not in {o.name for o in m.graph.output}:
                    m.graph.output.append(onnx.ValueInfoProto(name=t))
    sess = ort.InferenceSession(m.SerializeToString(), providers=["CPUExecutionProvider"])
    outs = [o.name for o in sess.get_outputs()]
    return dict(zip(outs, sess.run(None, feeds)))


@pytest.fixture(scope="module")
def module_model(tmp_path_factory) -> Path:
    from tests.backends.ascend.conftest import build_tiny_model

    return build_tiny_model(tmp_path_factory.mktemp("model") / "tiny.onnx")


@pytest.fixture(scope="module")
def converted(cann_env, module_model, tmp_path_factory):
    """One conversion shared by the tests that only read it (each double run costs about a second)."""
    from tests.backends.ascend.conftest import _context_factory

    factory = _context_factory(tmp_path_factory.mktemp("convert"))
    make_ctx = next(factory)
    tiny_model = module_model
    runner = _recording("convert")
    ctx = make_ctx("convert", "convert", {"soc_version": SOC, "precision_mode": "force_fp16",
                                          "keep_dtype": ["relu1", "OpType::Gemm"],
                                          "fusion_switch": {"ConvReluFusionPass": "off"}},
                   inputs={"model": tiny_model}, runner=runner)
    result = stages.convert(ctx)
    yield ctx, result, runner
    next(factory, None)


def test_convert_runs_atc_then_mode1_with_remedy_files(converted, module_model, cann_env):
    tiny_model = module_model
    ctx, result, runner = converted
    out = ctx.out_dir
    atc = str(cann_env / "bin/atc")
    assert runner.calls == [
        [atc, "--framework=5", f"--model={tiny_model}", f"--soc_version={SOC}", "--precision_mode=force_fp16",
         f"--keep_dtype={out}/keep_dtype.cfg", f"--fusion_switch_file={out}/fusion_switch.cfg", f"--output={out}/model"],
        [atc, "--mode=1", f"--om={out}/model.om", f"--json={out}/model.json"],
    ]
    # OpType:: names a GE type: the ONNX name Gemm goes to atc as the type its ONNX parser gives a Gemm node
    # (canndev onnx_plugin/gemm_plugin.cc L64: MatMulV2), so the line keeps the op on the device too
    assert (out / "keep_dtype.cfg").read_text() == "relu1\nOpType::MatMulV2\n"
    switch = json.loads((out / "fusion_switch.cfg").read_text())
    assert switch["Switch"]["GraphFusion"] == {"ConvReluFusionPass": "off"}
    assert set(result.remedy_files) == {"keep_dtype.cfg", "fusion_switch.cfg"}
    # the OM JSON's atc_cmdline is what the double recorded: the same argv
    assert result.info["atc_cmdline"] == shlex.join(["atc", *runner.calls[0][1:]])
    record = json.loads((out / "convert.json").read_text())
    assert record["inputs"] == [{"name": "x", "shape": [2, 3, 8, 8], "dtype": "float32"}]
    assert record["outputs"] == ["feat"] and record["soc_version"] == SOC
    assert record["tool_versions"] == {"cann": "8.0.RC1.double", "atc": "8.0.RC1.double"}
    # conv1 + relu1 fused (the double's fusion): its output is relu1's tensor r1
    fused = json.loads((out / "fused_map.json").read_text())
    assert fused["fused"] == {"conv1": ["conv1", "relu1"]}
    assert fused["tensors"]["conv1:output:0"] == "r1" and fused["tensors"]["fc:output:0"] == "feat"
    # 6 compute ops and the input's Data op (GE's JSON lists the OM's inputs as Data ops)
    assert result.metrics["om_ops"] == 7 and result.metrics["fused_ops"] == 1
    # a fixed model needs no --input_shape; the OM's input shape is read from its JSON's Data op
    assert record["shapes"]["mode"] == "static" and record["shapes"]["from_om_json"]
    assert record["shapes"]["accepted"] == [{"x": [2, 3, 8, 8]}]
    assert not (out / "atc_work").exists() and (out / "fusion_result.json").is_file()


def test_convert_requires_soc_version(cann_env, tiny_model, make_ctx):
    ctx = make_ctx("convert@fp16", "convert", {"precision_mode": "force_fp16"}, inputs={"model": tiny_model})
    with pytest.raises(UserError) as err:
        stages.convert(ctx)
    assert err.value.location.field == "soc_version" and err.value.location.stage == "convert@fp16"


def test_convert_without_cann_says_how_to_fix(tiny_model, make_ctx, monkeypatch, tmp_path):
    monkeypatch.setenv("ASCEND_TOOLKIT_HOME", str(tmp_path / "no-cann"))
    monkeypatch.delenv("ASCEND_HOME_PATH", raising=False)
    monkeypatch.setenv("PATH", str(tmp_path / "empty"))
    ctx = make_ctx("convert", "convert", {"soc_version": SOC}, inputs={"model": tiny_model})
    with pytest.raises(UserError) as err:
        stages.convert(ctx)
    assert "'atc' not found" in str(err.value) and "set_env.sh" in str(err.value)


def test_convert_bf16_mode_is_accepted_on_ascend(cann_env, tiny_model, make_ctx):
    runner = _recording()
    ctx = make_ctx("convert", "convert", {"soc_version": "Ascend910B1", "precision_mode": "allow_mix_precision_bf16",
                                          "op_select_implmode": "high_precision",
                                          "optypelist_for_implmode": ["Pooling", "SoftmaxV2"],
                                          "buffer_optimize": "off_optimize", "log": "error"},
                   inputs={"model": tiny_model}, runner=runner)
    stages.convert(ctx)
    argv = runner.calls[0]
    assert "--precision_mode=allow_mix_precision_bf16" in argv
    assert argv[-4:] == [f"--optypelist_for_implmode=Pooling,SoftmaxV2", f"--output={ctx.out_dir}/model",
                         "--buffer_optimize=off_optimize", "--log=error"]


def _feeds(tmp_path, n=5):
    x = np.random.default_rng(3).standard_normal((n, 3, 8, 8)).astype(np.float32)
    np.save(tmp_path / "x.npy", x)
    return x


def test_infer_outputs_match_onnxruntime_and_summary(converted, module_model, make_ctx, tmp_path):
    tiny_model = module_model
    cctx = converted[0]
    x = _feeds(tmp_path)
    runner = _recording("infer")
    ctx = make_ctx("infer", "infer", {"warmup": 0, "loops": 2}, inputs={"model": cctx.out_dir, "inputs": tmp_path / "x.npy"},
                   runner=runner)
    result = stages.infer(ctx)
    (argv,) = runner.calls
    assert argv[1:3] == ["-m", "ais_bench"] and argv[argv.index("--outfmt") + 1] == "NPY"
    assert argv[argv.index("--loop") + 1] == "2" and argv[argv.index("--warmup_count") + 1] == "0"
    feat = np.load(ctx.out_dir / "outputs/feat.npy")
    padded = np.concatenate([x, np.zeros((1, 3, 8, 8), np.float32)])  # static batch 2: 3 batches, last padded
    expected = np.concatenate([_reference(tiny_model, {"x": padded[i:i + 2]}, ["feat"])["feat"] for i in (0, 2, 4)])[:5]
    np.testing.assert_allclose(feat, expected, rtol=1e-5, atol=1e-5)
    summary = json.loads((ctx.out_dir / "summary.json").read_text())
    assert summary["samples"] == 5 and summary["batch_size"] == 2
    assert "NPU_compute_time" not in summary and "latency_ms" not in summary  # outputs carry no timings
    timings = result.info["latency"]  # the run record's
    assert timings["NPU_compute_time"]["count"] == 6  # 3 batches x 2 loops
    lat, times = timings["latency_ms"], timings["npu_compute_time_list"]
    assert lat["mean"] == pytest.approx(np.mean(times)) and lat["median"] == pytest.approx(np.median(times))
    assert result.metrics["throughput"] == pytest.approx(1000 * 2 / np.mean(times))


def test_dump_layout_matches_contract_and_compares_clean(converted, module_model, make_ctx, tmp_path):
    tiny_model = module_model
    cctx = converted[0]
    x = _feeds(tmp_path)
    runner = _recording("dump")
    ctx = make_ctx("dump", "dump", {}, inputs={"model": cctx.out_dir, "inputs": tmp_path / "x.npy"}, runner=runner)
    stages.dump(ctx)
    tools = runner.tools()
    assert tools == ["python3 -m ais_bench"]  # the dump files are read in-process, not by msaccucmp convert
    acl = json.loads((ctx.out_dir / "acl.json").read_text())["dump"]
    assert acl["dump_list"] == [{"model_name": "model"}] and acl["dump_mode"] == "output"
    index = json.loads((ctx.out_dir / "index.json").read_text())
    assert index["format"] == "ascendpipe-dump/1" and index["backend"] == "ascend"
    by_name = {t["name"]: t for t in index["tensors"]}
    assert by_name["x"]["op_type"] == "Input" and by_name["x"]["topo_index"] == -1
    assert by_name["r1"]["op_name"] == "conv1" and by_name["r1"]["op_type"] == "Conv2D"
    assert [t["op_name"] for t in index["tensors"] if t["topo_index"] >= 0] == ["conv1", "conv2", "add1", "gap", "flat", "fc"]
    ref = _reference(tiny_model, {"x": x[:2]})
    for name in ("r1", "c2", "a1", "feat"):
        np.testing.assert_allclose(np.load(ctx.out_dir / by_name[name]["file"]), ref[name], rtol=1e-5, atol=1e-5)
    assert by_name["feat"]["max"] == pytest.approx(float(ref["feat"].max()), rel=1e-5)
    assert not (ctx.out_dir / "npu_dump").exists()

    # the compare engine reads it unchanged against an onnxruntime golden dump
    from ascendpipe.backends.onnxruntime.dump import dump_model
    from ascendpipe.compare.runner import compare_dumps

    golden = tmp_path / "golden"
    golden.mkdir()
    dump_model(tiny_model, {"x": x[:2]}, golden, fusions=False)
    result = compare_dumps(golden, ctx.out_dir, fused_map=json.loads((cctx.out_dir / "fused_map.json").read_text()),
                           om_json=json.loads((cctx.out_dir / "model.json").read_text()))
    both = [r for r in result["rows"] if r["side"] == "both"]
    assert len(both) == 6 and min(r["cosine"] for r in both) > 0.9999
    assert result["summary"]["failed_ops"] == 0
    fused_row = next(r for r in both if r["op_name"] == "conv1")
    assert fused_row["golden_tensor"] == "r1" and fused_row["fused"]


def test_dump_names_the_convert_stage_so_compare_advises_on_it(converted, make_ctx, tmp_path):
    """source.json as the onnxruntime dump stage writes it: compare of this dump reads the conversion's
    settings, fused map and OM JSON in the convert folder and names that stage in its advice."""
    from ascendpipe.backends.compare_sources import resolve_side

    cctx = converted[0]
    _feeds(tmp_path)
    ctx = make_ctx("dump_fp16", "dump", {}, inputs={"model": cctx.out_dir, "inputs": tmp_path / "x.npy"},
                   upstream={"model": ("to_device@fp16", "convert", cctx.out_dir)}, runner=_recording("dump"))
    stages.dump(ctx)
    source = json.loads((ctx.out_dir / "source.json").read_text())
    assert source["stage"] == "to_device@fp16" and source["kind"] == "convert"
    assert (ctx.out_dir / source["model_dir"]).resolve() == cctx.out_dir.resolve()
    side = resolve_side(ctx.out_dir, "target")
    assert side.dump_dir == ctx.out_dir and side.source_stage == "to_device@fp16"
    assert side.settings["keep_dtype"] == ["relu1", "OpType::Gemm"]
    assert side.settings["fusion_switch"] == {"ConvReluFusionPass": "off"}
    assert side.fused_map == json.loads((cctx.out_dir / "fused_map.json").read_text())


def test_profile_reads_the_prof_tree(converted, make_ctx, module_model):
    tiny_model = module_model
    cctx = converted[0]
    runner = _recording("profile")
    ctx = make_ctx("profile", "profile", {"warmup": 1, "iterations": 3}, inputs={"model": cctx.out_dir}, runner=runner)
    result = stages.profile(ctx)
    (argv,) = runner.calls
    assert Path(argv[0]).name == "msprof" and argv[1] == f"--output={ctx.out_dir}/msprof"
    app = shlex.split(argv[-1].removeprefix("--application="))
    assert app[1:3] == ["-m", "ais_bench"] and app[app.index("--loop") + 1] == "3"
    data = json.loads((ctx.out_dir / "profile.json").read_text())
    import onnx

    nodes = {n.name for n in onnx.load(str(tiny_model)).graph.node}
    assert {r["Op Name"] for r in data["op_summary"]} == nodes
    assert len(data["op_summary"]) == len(nodes) * (1 + 3)  # warmup + 3 loops on one batch
    total = sum(r["Task Duration(us)"] for r in data["op_summary"])
    assert result.metrics["total_task_duration_us"] == pytest.approx(total)
    stat = {r["OP Type"]: r for r in data["op_statistic"]}
    assert stat["Conv"]["Count"] == 2 * 4
    assert (ctx.out_dir / "op_summary.csv").read_text().startswith("Device_id,Model Name,")
    assert result.metrics["latency_ms_mean"] > 0


def test_tune_then_convert_reuses_the_bank(cann_env, tiny_model, make_ctx):
    runner = _recording("tune")
    tctx = make_ctx("tune", "tune", {"soc_version": SOC, "buffer_optimize": "off_optimize"},
                    inputs={"model": tiny_model}, runner=runner)
    result = stages.tune(tctx)
    jobs = [a for a in runner.calls if Path(a[0]).name == "aoe"]
    assert [a[-1] if "--job_type=1" in a else a[-2] for a in jobs] == ["--job_type=1", "--job_type=2"]
    assert "--buffer_optimize=off_optimize" in jobs[1] and not any("buffer" in t for t in jobs[0])
    out = tctx.out_dir
    assert (out / "bank/graph" / SOC).is_dir() and (out / "bank/op" / SOC).is_dir()
    raw_file = next(out.glob("aoe_result_opat_*.json"))
    raw = next(iter(json.loads(raw_file.read_text()).values()))[1]["OPAT"]["repo_modified_operators"]
    tuned = json.loads((out / "tune.json").read_text())["results"][0]["ops"]
    assert [(o["op_name"], o["before_us"], o["after_us"]) for o in tuned] == [
        (r["op_name"], r["tune_performance"]["Format"]["performance_before_tune(us)"],
         r["tune_performance"]["Format"]["performance_after_tune(us)"]) for r in raw]
    assert result.metrics["tuned_ops"] == 3 and (out / "model.om").is_file() and (out / "model.json").is_file()

    cctx = make_ctx("convert", "convert", {"soc_version": SOC, "tune_bank": str(out)}, inputs={"model": tiny_model})
    stages.convert(cctx)
    om = json.loads((cctx.out_dir / "model.json").read_text())
    bank = next(a["value"]["s"] for a in om["attr"] if a["key"] == "tune_bank")
    assert bank == str(out / "bank")  # atc ran with TUNE_BANK_PATH set to the tune stage's bank
    assert json.loads((cctx.out_dir / "convert.json").read_text())["tune_bank"] == str(out / "bank")


def test_commands_for_dry_run_need_no_tools(make_ctx, monkeypatch, tmp_path):
    monkeypatch.setenv("PATH", str(tmp_path / "empty"))
    monkeypatch.delenv("ASCEND_TOOLKIT_HOME", raising=False)
    monkeypatch.delenv("ASCEND_HOME_PATH", raising=False)
    ctx = make_ctx("convert", "convert", {"soc_version": SOC, "precision_mode": "force_fp32"},
                   inputs={"model": tmp_path / "m.onnx"})
    note, convert, mode1 = stages.commands("convert", ctx)
    assert note.note.startswith(f"{tmp_path / 'm.onnx'} is not built yet")  # its inputs decide --input_shape
    assert convert[:4] == ["atc", "--framework=5", f"--model={tmp_path}/m.onnx", f"--soc_version={SOC}"]
    assert mode1[:2] == ["atc", "--mode=1"]
    converted = tmp_path / "build" / "convert"  # not built yet: the upstream kind says it will hold an OM
    for kind, first in (("infer", "python3"), ("dump", "python3"), ("profile", "msprof"), ("tune", "aoe")):
        model = tmp_path / "m.onnx" if kind == "tune" else converted
        kctx = make_ctx(kind, kind, {"soc_version": SOC}, inputs={"model": model},
                        upstream={} if kind == "tune" else {"model": ("convert", "convert", converted)})
        argvs = [a for a in stages.commands(kind, kctx) if not getattr(a, "note", None)]
        assert argvs and argvs[0][0] == first
        assert list(kctx.out_dir.iterdir()) == []  # nothing written
    # a plain ONNX runs on the host: shown as such, no ais_bench on '<onnx>/model.om'
    for kind in ("infer", "dump", "profile"):
        (note,) = stages.commands(kind, make_ctx(f"{kind}_golden", kind, {}, inputs={"model": tmp_path / "m.onnx"}))
        assert note == [] and note.note.startswith("host onnxruntime") and note.note.endswith(f"{tmp_path}/m.onnx")
    assert stages.commands("eval", ctx) == []


@pytest.mark.parametrize("argv, message", [
    (["bin/atc", "--framework=3", "--model=m.onnx", "--output=o", "--soc_version=x"], "--framework=5"),
    (["bin/atc", "--framework", "5"], "expected --option=value"),
    (["bin/atc", "--mode=1", "--om=a.om"], "--mode=1 takes exactly"),
    (["bin/aoe", "--framework=5", "--model=m.onnx", "--soc_version=x"], "--job_type=1"),
    (["bin/msprof", "--output=o", "--bogus=on", "--application=ls"], "unknown option --bogus"),
    (["bin/msprof", "--output=o"], "no application"),
    (["tools/operator_cmp/compare/msaccucmp.py", "convert", "-out", "o"], "needs -d"),
])
def test_doubles_reject_bad_argv(cann_env, argv, message, tmp_path):
    proc = subprocess.run([str(cann_env / argv[0]), *argv[1:]], capture_output=True, text=True, cwd=tmp_path)
    assert proc.returncode == 2 and message in proc.stderr and "double" in proc.stderr


def test_ais_bench_double_rejects_msit_spelling(cann_env, tmp_path):
    proc = subprocess.run([sys.executable, "-m", "ais_bench", "--om-model", "m.om"], capture_output=True, text=True,
                          cwd=tmp_path)
    assert proc.returncode == 2 and "ais_bench double" in proc.stderr


def test_tool_failure_is_stage_failed_with_the_doubles_message(cann_env, tiny_model, make_ctx):
    bad = make_ctx("convert2", "convert", {"soc_version": SOC}, inputs={"model": tiny_model},
                   runner=SubprocessRunner(stage="convert2", log_path="convert2.log"))
    (bad.out_dir / "model.om").write_text("not an onnx")  # mode=1 of a broken OM must fail loudly
    from ascendpipe.backends.ascend import atc as atc_mod

    with pytest.raises(StageFailed) as err:
        SubprocessRunner(stage="convert2", log_path="convert2.log").run(
            atc_mod.json_argv(cann_env / "bin/atc", bad.out_dir / "model.om", bad.out_dir / "model.json"),
            cwd=bad.out_dir, env=None, log=bad.log)
    assert "atc exited with 2" in str(err.value) and "convert2.log" in str(err.value)
