"""The CANN tools' own checks, met before a board would meet them: tool-safe paths (and no links for
ais_bench), --input_shape and the dynamic gears end to end, AOE per SoC, the dry run's argv. Runs the
strict doubles (tests/backends/ascend/doubles) through the engine where a pipeline is the subject."""

from __future__ import annotations

import json
import os
import shlex
import subprocess
import sys

import numpy as np
import pytest

from ascendpipe.backends.ascend import stages
from ascendpipe.backends.ascend.tool_paths import argv_paths, bad_char, check_argv, file_name
from ascendpipe.errors import UserError
from tests import modelzoo

SOC = "Ascend310P3"


def test_argv_paths_cover_each_tools_spelling():
    assert argv_paths(["atc", "--model=/a/m.onnx", "--soc_version=x", "--keep_dtype=/k.cfg"]) == [
        ("--model", "/a/m.onnx"), ("--keep_dtype", "/k.cfg")]
    assert argv_paths(["python3", "-m", "ais_bench", "--model", "/o/model.om", "--input", "/i/0_x,/i/1_y",
                       "--loop", "1"]) == [("--model", "/o/model.om"), ("--input", "/i/0_x"), ("--input", "/i/1_y")]
    assert argv_paths(["msprof", "--output=/p", "--application=python3 -m ais_bench --model /o/m.om"]) == [
        ("--output", "/p"), ("--model", "/o/m.om")]
    assert argv_paths(["python3", "msaccucmp.py", "convert", "-d", "/d/leaf", "-out", "/c"]) == [
        ("-d", "/d/leaf"), ("-out", "/c")]
    assert bad_char("/ws/build/convert__fp16/model") is None and bad_char("/ws/build/convert@fp16") == "@"
    assert file_name("input:0", 0) == "0_input_0" and bad_char(file_name("图 片", 1)) is None
    with pytest.raises(UserError) as err:
        check_argv(["python3", "-m", "ais_bench", "--model", "/my models/m.om"])
    assert "ais_bench would refuse --model path /my models/m.om" in err.value.message
    assert "U+0020" in err.value.message and "PATH_WHITE_LIST_REGEX" in err.value.message


PIPELINE = """\
backend: ascend
stages:
  convert:
    kind: convert
    model: det.onnx
    params: {soc_version: Ascend310P3, dynamic_image_size: "32,48;64,64"}
  infer: {kind: infer, model: convert, inputs: x.npy}
  golden: {kind: infer, model: det.onnx, inputs: x.npy}
  dump: {kind: dump, model: convert, inputs: x.npy}
  compare: {kind: compare, golden: det.onnx, target: convert, inputs: x.npy}
"""


def _workspace(root, text=PIPELINE, height=32, width=48):
    root.mkdir(parents=True, exist_ok=True)
    (root / ".ascendpipe").mkdir(exist_ok=True)
    modelzoo.dynamic_hw_detector(root / "det.onnx")
    np.save(root / "x.npy", modelzoo.dynamic_hw_inputs(height, width)["images"])
    (root / "p.yaml").write_text(text)
    return root / "p.yaml"


def _dry_run(pipeline, *extra):
    proc = subprocess.run([sys.executable, "-m", "ascendpipe.cli.main", "build", str(pipeline), "--dry-run", *extra],
                          capture_output=True, text=True, cwd=pipeline.parent)
    return proc


def test_a_workspace_path_the_tools_refuse_is_one_error_before_anything_runs(tmp_path):
    pipeline = _workspace(tmp_path / "my ws")
    proc = _dry_run(pipeline)
    assert proc.returncode == 2 and len(proc.stderr.strip().splitlines()) == 1
    line = proc.stderr.strip()
    assert f"the workspace {tmp_path / 'my ws'} has U+0020" in line and "[A-Za-z0-9./_-]" in line
    assert "Traceback" not in proc.stderr and proc.stdout == ""
    # the emulator runs no CANN tool: the same workspace is fine there
    assert _dry_run(pipeline, "--backend", "onnxruntime").returncode == 1  # 1: stages would run


def test_dry_run_of_a_dynamic_hw_detector_gives_every_tool_safe_paths(tmp_path):
    pipeline = _workspace(tmp_path / "ws")
    proc = _dry_run(pipeline)
    assert proc.returncode == 1, proc.stderr
    lines = proc.stdout.splitlines()
    argvs = [shlex.split(line.split("$ ", 1)[1]) for line in lines if line.lstrip().startswith("$ ")]
    atc = next(a for a in argvs if a[0] == "atc" and "--framework=5" in a)
    # atc gets the .onnx FILE and the shapes the OM will take: H/W at -1 for the image-size gears
    assert f"--model={tmp_path}/ws/det.onnx" in atc
    assert "--input_shape=images:1,3,-1,-1" in atc and "--dynamic_image_size=32,48;64,64" in atc
    # the golden (a plain ONNX) is shown as a host run, not as ais_bench on det.onnx/model.om
    assert any(line.strip() == f"= host onnxruntime (infer, in-process; a plain ONNX is not an OM, so no "
                                  f"ais_bench): {tmp_path}/ws/det.onnx" for line in lines)
    assert not any(".onnx/model.om" in line for line in lines)
    # a command for every device stage: infer, dump and compare run ais_bench with the OM's gear option
    stage_of = {}
    current = None
    for line in lines:
        if line.startswith("  would run"):
            current = line.split()[2].rstrip(":")
        elif line.lstrip().startswith(("$ ", "= ")):
            stage_of.setdefault(current, []).append(line.strip())
    assert set(stage_of) == {"convert", "infer", "golden", "dump", "compare"}
    for name in ("infer", "dump", "compare"):
        assert any("-m ais_bench" in c and "--dymHW" in c for c in stage_of[name]), stage_of[name]
    for argv in argvs:
        for option, path in argv_paths(argv):
            assert bad_char(path) is None or "<" in path, (option, path)


def test_a_dynamic_model_without_shapes_is_a_located_error_in_the_dry_run(tmp_path):
    pipeline = _workspace(tmp_path / "ws", PIPELINE.replace(', dynamic_image_size: "32,48;64,64"', ""))
    proc = _dry_run(pipeline)
    (line,) = [l for l in proc.stdout.splitlines() if l.strip().startswith("!")]
    assert "atc needs --input_shape for every input with a non-fixed dim: images [1,3,height,width]" in line
    assert "stage 'convert'" in line and "input_shape" in line


def test_the_detector_builds_on_its_gears_and_a_feed_off_the_gears_is_refused(cann_env, tmp_path, monkeypatch):
    import ascendpipe

    pipeline = _workspace(tmp_path / "ws")
    monkeypatch.chdir(pipeline.parent)
    run = ascendpipe.build(str(pipeline), quiet=True)
    assert {n: s["state"] for n, s in run["stages"].items()} == {n: "ran" for n in
                                                              ("convert", "infer", "golden", "dump", "compare")}
    build = pipeline.parent / "build"
    record = json.loads((build / "convert/convert.json").read_text())
    assert record["shapes"]["mode"] == "dynamic_image_size" and record["shapes"]["gears"] == [[32, 48], [64, 64]]
    assert record["inputs"] == [{"name": "images", "shape": [1, 3, "gear", "gear"], "dtype": "float32"}]
    assert record["onnx_inputs"][0]["shape"] == [1, 3, "height", "width"]
    np.testing.assert_allclose(np.load(build / "infer/outputs/boxes.npy"), np.load(build / "golden/outputs/boxes.npy"),
                               rtol=1e-5, atol=1e-5)
    result = json.loads((build / "compare/result.json").read_text())
    assert result["summary"]["failed_ops"] == 0
    # 40x40 is not a gear: the device would refuse it, so infer does, located at the stage
    np.save(pipeline.parent / "x.npy", modelzoo.dynamic_hw_inputs(40, 40)["images"])
    failed = ascendpipe.build(str(pipeline), ["infer"], quiet=True)["stages"]["infer"]
    assert failed["state"] == "failed"
    assert "the OM takes images:1,3,32,48 | images:1,3,64,64 (dynamic_image_size), not images:1,3,40,40" in failed["error"]
    assert "stage 'infer'" in failed["error"]


def test_a_user_file_with_a_refused_character_stops_the_stage_before_atc(cann_env, tmp_path, tiny_model, make_ctx):
    from ascendpipe.backends.ascend.runner import RecordingRunner

    odd = tmp_path / "cfg@1"
    odd.mkdir()
    (odd / "fs.cfg").write_text("ConvReluFusionPass:off\n")
    runner = RecordingRunner()
    ctx = make_ctx("convert@fs", "convert", {"soc_version": SOC, "fusion_switch_file": str(odd / "fs.cfg")},
                   inputs={"model": tiny_model}, runner=runner)
    with pytest.raises(UserError) as err:
        stages.convert(ctx)
    assert f"atc would refuse --fusion_switch_file path {odd}/fs.cfg: it has '@'" in err.value.message
    assert err.value.location.stage == "convert@fs" and runner.calls == []
    with pytest.raises(UserError, match="atc would refuse --fusion_switch_file"):
        stages.commands("convert", ctx)  # the dry run says the same


def test_ais_bench_never_gets_a_link(cann_env, tmp_path, tiny_model, make_ctx):
    conv = make_ctx("convert", "convert", {"soc_version": SOC}, inputs={"model": tiny_model})
    stages.convert(conv)
    linked = tmp_path / "linked_convert"  # a folder whose model.om is a link to the converted OM
    linked.mkdir()
    os.symlink(conv.out_dir / "model.om", linked / "model.om")
    x = np.random.default_rng(0).standard_normal((2, 3, 8, 8)).astype(np.float32)
    np.save(tmp_path / "x.npy", x)
    infer = make_ctx("infer", "infer", {}, inputs={"model": linked, "inputs": tmp_path / "x.npy"})
    result = stages.infer(infer)
    assert result.info["ais_bench_argv"][result.info["ais_bench_argv"].index("--model") + 1] == str(
        conv.out_dir / "model.om")
    # the double refuses the link itself, as ais_bench does
    proc = subprocess.run([sys.executable, "-m", "ais_bench", "--model", str(linked / "model.om"), "--input",
                           str(tmp_path / "x.npy")], capture_output=True, text=True, cwd=tmp_path)
    assert proc.returncode == 2 and "soft link" in proc.stderr


def test_aoe_job_types_follow_the_soc(cann_env, tiny_model, make_ctx):
    a2 = make_ctx("tune", "tune", {"soc_version": "Ascend910B1"}, inputs={"model": tiny_model})
    aoe_argvs = [a for a in stages.commands("tune", a2) if a[0].endswith("aoe")]
    assert [a[-1] for a in aoe_argvs] == ["--job_type=2"]  # A2: subgraph tuning (1) is not offered
    assert not any(a.startswith("--soc_version") for a in aoe_argvs[0])  # only with --op_tune_mode=fast
    p310 = make_ctx("tune2", "tune", {"soc_version": SOC}, inputs={"model": tiny_model})
    assert [a[-1] for a in stages.commands("tune", p310) if a[0].endswith("aoe")] == ["--job_type=1", "--job_type=2"]
    with pytest.raises(UserError) as err:
        stages.commands("tune", make_ctx("tune3", "tune", {"soc_version": "Ascend910_9391", "job_type": [1, 2]},
                                          inputs={"model": tiny_model}))
    assert "aoe job_type 1 is not offered on Ascend910_9391 (Atlas A3)" in err.value.message
    assert err.value.location.field == "job_type" and err.value.location.stage == "tune3"
    with pytest.raises(UserError, match="aoe does not take --precision_mode_v2"):
        stages.commands("tune", make_ctx("tune4", "tune", {"soc_version": SOC, "precision_mode_v2": "fp16"},
                                          inputs={"model": tiny_model}))


@pytest.mark.parametrize("argv, message", [
    (["bin/atc", "--framework=5", "--model={det}", "--output=o", "--soc_version=Ascend310P3"],
     "input 'images' has a non-fixed shape: --input_shape is required"),
    (["bin/atc", "--framework=5", "--model={det}", "--output=o", "--soc_version=Ascend310P3",
      "--input_shape=image:1,3,32,32"], "input 'image' is not found in the model"),
    (["bin/atc", "--framework=5", "--model={det}", "--output=o", "--soc_version=Ascend310P3",
      "--input_shape=images:1,3,-1,-1", "--dynamic_image_size=32,32;64,64", "--dynamic_dims=1,2;3,4"],
     "mutually exclusive"),
    (["bin/atc", "--framework=5", "--model={det}", "--output=o", "--soc_version=Ascend310P3",
      "--input_shape=images:-1,3,32,32", "--dynamic_image_size=32,32;64,64"], "-1 at the H and W"),
    (["bin/atc", "--framework=5", "--model={det}", "--output=o", "--soc_version=Ascend310",
      "--input_shape=images:1,3,32~64,-1"], "not supported on Ascend310"),
    (["bin/atc", "--framework=5", "--model={det}", "--output=o@1", "--soc_version=Ascend310P3",
      "--input_shape=images:1,3,32,32"], "--output o@1: invalid character '@'"),
    (["bin/aoe", "--framework=5", "--model={det}", "--op_tune_mode=fast", "--soc_version=Ascend910B1", "--job_type=1",
      "--input_shape=images:1,3,32,32"], "--job_type=1 is not supported on Ascend910B1"),
    (["bin/aoe", "--framework=5", "--model={det}", "--soc_version=Ascend310P3", "--job_type=2",
      "--input_shape=images:1,3,32,32"], "--soc_version is taken only with --op_tune_mode=fast"),
    (["bin/aoe", "--framework=5", "--model={det}", "--soc_version=Ascend310P3", "--job_type=2",
      "--precision_mode_v2=fp16", "--input_shape=images:1,3,32,32"], "unknown option --precision_mode_v2"),
    (["tools/operator_cmp/compare/msaccucmp.py", "convert", "-d", "a b", "-out", "o"], "-d a b: invalid character"),
    (["bin/msprof", "--output=p r", "--application=ls"], "--output p r: invalid character"),
])
def test_strict_doubles_refuse_what_the_tools_refuse(cann_env, tmp_path, argv, message):
    det = modelzoo.dynamic_hw_detector(tmp_path / "det.onnx")
    argv = [a.replace("{det}", str(det)) for a in argv]
    proc = subprocess.run([str(cann_env / argv[0]), *argv[1:]], capture_output=True, text=True, cwd=tmp_path)
    assert proc.returncode == 2 and message in proc.stderr, proc.stderr


def test_ais_bench_double_refuses_a_feed_the_om_does_not_take(cann_env, tmp_path, tiny_model, make_ctx):
    conv = make_ctx("convert", "convert", {"soc_version": SOC}, inputs={"model": tiny_model})
    stages.convert(conv)
    np.save(tmp_path / "x3.npy", np.zeros((3, 3, 8, 8), np.float32))  # the OM takes [2,3,8,8]
    proc = subprocess.run([sys.executable, "-m", "ais_bench", "--model", str(conv.out_dir / "model.om"), "--input",
                           str(tmp_path / "x3.npy")], capture_output=True, text=True, cwd=tmp_path)
    assert proc.returncode == 2 and "tensorsize: 1536 filesize: 2304 not match" in proc.stderr


def test_standalone_commands_run_on_ascend_like_their_emulated_twins(cann_env, tmp_path, tiny_model):
    x = np.random.default_rng(0).standard_normal((2, 3, 8, 8)).astype(np.float32)
    np.save(tmp_path / "x.npy", x)

    def cli(*argv):
        proc = subprocess.run([sys.executable, "-m", "ascendpipe.cli.main", *argv], capture_output=True, text=True,
                              cwd=tmp_path)
        assert proc.returncode == 0, proc.stderr
        return proc.stdout

    out = cli("convert", "--backend", "ascend", "--model", str(tiny_model), "--output", "conv",
              "--soc-version", SOC, "--precision-mode", "force_fp16")
    assert "conv/model.om: 7 OM ops, 1 fused" in out and "--input_shape" not in out  # a fixed model
    cli("infer", "--backend", "ascend", "--model", "conv", "--input", "x.npy", "--output", "inf")
    golden = subprocess.run([sys.executable, "-c", "import onnxruntime as o, numpy as n; s=o.InferenceSession("
                             f"'{tiny_model}'); print(s.run(None, {{'x': n.load('x.npy')}})[0].tolist())"],
                            capture_output=True, text=True, cwd=tmp_path)
    np.testing.assert_allclose(np.load(tmp_path / "inf/outputs/feat.npy"), np.array(eval(golden.stdout)),
                               rtol=1e-5, atol=1e-5)
    assert "tensors" in cli("dump", "--backend", "ascend", "--model", "conv", "--input", "x.npy", "--output", "dmp")
    assert json.loads((tmp_path / "dmp/index.json").read_text())["backend"] == "ascend"
    cli("compare", "--backend", "ascend", "--golden", str(tiny_model), "--target", "conv", "--input", "x.npy",
        "--output", "cmp")
    assert json.loads((tmp_path / "cmp/result.json").read_text())["summary"]["failed_ops"] == 0
    # profile and tune take --backend ascend too (README: every stage kind does)
    out = json.loads(cli("profile", "--backend", "ascend", "--model", "conv", "--input", "x.npy", "--output", "prof",
                         "--iterations", "2", "--warmup", "0", "--json"))
    assert out["metrics"]["op_rows"] > 0 and (tmp_path / "prof/op_summary.csv").is_file()
    out = json.loads(cli("tune", "--backend", "ascend", "--model", str(tiny_model), "--output", "tun",
                         "--soc-version", SOC, "--json"))
    assert (tmp_path / "tun/model.om").is_file() and (tmp_path / "tun/bank").is_dir()
    assert json.loads((tmp_path / "tun/tune.json").read_text())["jobs"] == [1, 2]  # Ascend310P3's default
    proc = subprocess.run([sys.executable, "-m", "ascendpipe.cli.main", "tune", "--backend", "ascend", "--model",
                           str(tiny_model), "--output", "tun2"], capture_output=True, text=True, cwd=tmp_path)
    assert proc.returncode != 0 and "--soc-version" in proc.stderr and "Traceback" not in proc.stderr


def test_reid_dry_run_on_ascend_is_what_a_board_would_run(tmp_path):
    import shutil
    from pathlib import Path

    repo = Path(__file__).resolve().parents[3]
    ws = tmp_path / "reid"
    shutil.copytree(repo / "pipelines", ws / "pipelines")
    (ws / ".ascendpipe").mkdir()
    proc = _dry_run(ws / "pipelines/reid.yaml", "--backend", "ascend",
                    "--set", "stages.convert.params.soc_version=Ascend310P3")
    assert proc.returncode == 1 and "!" not in proc.stdout, proc.stdout + proc.stderr
    shown: dict[str, list[str]] = {}
    current = None
    for line in proc.stdout.splitlines():
        if line.startswith("  would run"):
            current = line.split()[2].rstrip(":")
        elif line.lstrip().startswith(("$ ", "= ")):
            shown.setdefault(current, []).append(line.strip())
    device = [n for n in shown if n.split("@")[0] in ("convert", "infer", "dump", "compare", "infer_golden")]
    assert len(device) == 1 + 5 * 4  # infer_golden, and 5 variants of convert, infer, dump, compare
    for name, lines in shown.items():
        for line in lines:
            if line.startswith("$ ") and name not in ("data", "train"):
                for option, path in argv_paths(shlex.split(line[2:])):
                    assert bad_char(path) is None or "<" in path, (name, option, path)
    # the exported ONNX has a dynamic batch: the dry run says it becomes a static OM, and with which shape
    assert shown["convert@fp16"][0] == ("= the ONNX's dynamic input(s) image become a static OM: "
                                        "--input_shape=image:1,1,32,32 (the export's input_shapes); for several "
                                        "batch sizes give dynamic_batch_size (e.g. \"1,4,8\")")
    atc = shlex.split(shown["convert@fp16"][1][2:])
    assert f"--model={ws}/build/export/model.onnx" in atc and "--input_shape=image:1,1,32,32" in atc
    assert shown["infer_golden"] == [f"= host onnxruntime (infer, in-process; a plain ONNX is not an OM, so no "
                                     f"ais_bench): {ws}/build/export/model.onnx"]
    assert shown["compare@fp16"][0].startswith("= host onnxruntime (dump of the golden side")
    dump_lines = [line.split()[2:5] for line in shown["compare@fp16"][1:3]]
    assert dump_lines[0] == ["-m", "ais_bench", "--model"]
    assert shown["compare@fp16"][2].startswith("= read the device's dump files in-process")
    assert "@" not in "".join(line for lines in shown.values() for line in lines if line.startswith("$ "))


def test_a_tune_stage_without_job_type_takes_the_socs_default(cann_env, tiny_model, make_ctx, tmp_path):
    """The pipeline's params (schema defaults applied) leave job_type out: on A2 that is job 2, not the
    refused job 1 (AOE_MODE, envref_07_0106); on Atlas inference products 1 and 2."""
    import ascendpipe

    (tmp_path / "p.yaml").write_text(f"backend: ascend\nstages:\n  tune:\n    kind: tune\n    model: {tiny_model}\n"
                                     "    params: {soc_version: Ascend910B1}\n")
    (tmp_path / ".ascendpipe").mkdir(exist_ok=True)
    params = dict(ascendpipe.load(str(tmp_path / "p.yaml")).stages["tune"].params)
    assert "job_type" not in params
    ctx = make_ctx("tune", "tune", params, inputs={"model": tiny_model})
    assert [a[-1] for a in stages.commands("tune", ctx) if a[0].endswith("aoe")] == ["--job_type=2"]
    params["soc_version"] = SOC
    ctx = make_ctx("tune310", "tune", params, inputs={"model": tiny_model})
    assert [a[-1] for a in stages.commands("tune", ctx) if a[0].endswith("aoe")] == ["--job_type=1", "--job_type=2"]
