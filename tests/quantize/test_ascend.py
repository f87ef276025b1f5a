"""The quantize stage on the ascend backend: the amct_onnx argv (dry run), the amct_onnx double, and
its deployable model fed to convert (the atc double) and run (the ais_bench double)."""

from __future__ import annotations

import json
import os
from pathlib import Path

import pytest

from tests.backends.ascend.conftest import DOUBLES, _point_at_doubles
from tests.quantize.workspace import SENSITIVE, make_workspace

DEVICE_STAGES = """\
  convert_int8: {kind: convert, model: build/quantize/deploy/model.onnx, params: {soc_version: Ascend310P3}}
  infer_om: {kind: infer, model: convert_int8, inputs: data/val}
  eval_om: {kind: eval, outputs: infer_om, labels: data/labels, golden: eval_golden, params: {task: classification}}
"""


@pytest.fixture
def workspace(tmp_path, monkeypatch):
    pipeline = make_workspace(tmp_path)
    pipeline.write_text(pipeline.read_text() + DEVICE_STAGES)
    monkeypatch.chdir(tmp_path)
    _point_at_doubles(monkeypatch)
    return pipeline


def _amct_lines(text: str) -> list[str]:
    return [line.strip().removeprefix("$ ") for line in text.splitlines() if "amct_onnx calibration" in line]


def test_dry_run_prints_the_amct_onnx_argv(workspace, tmp_path, capsys):
    from ascendpipe.cli.main import main

    code = main(["build", str(workspace), "quantize", "--backend", "ascend", "--dry-run"])
    lines = _amct_lines(capsys.readouterr().out)
    assert code == 1 and len(lines) == 1  # exit 1: something would run
    work = tmp_path / "build/quantize/amct_work"
    assert lines[0].split() == [
        "amct_onnx", "calibration", f"--model={tmp_path}/models/sensitive.onnx", f"--save_path={work}/results/model",
        "--input_shape=x:16,3,8,8", f"--data_dir={work}/data/0_x", "--data_types=float32", "--batch_num=2"]
    # settings beyond batch_num go into the simple config, which excludes --batch_num
    code = main(["build", str(workspace), "quantize", "--backend", "ascend", "--dry-run",
                 "--set", f"stages.quantize.params.skip_layers=[{SENSITIVE}]"])
    argv = _amct_lines(capsys.readouterr().out)[0].split()
    assert f"--calibration_config={tmp_path}/build/quantize/quant.cfg" in argv
    assert not [a for a in argv if a.startswith("--batch_num")]


def test_amct_double_calibrates_and_its_deploy_model_goes_through_atc(workspace, tmp_path, monkeypatch):
    import ascendpipe

    monkeypatch.setenv("PATH", f"{DOUBLES / 'amct_bin'}{os.pathsep}{os.environ['PATH']}")
    record = ascendpipe.build(str(workspace), set=[f"stages.quantize.params.skip_layers=[{SENSITIVE}]"],
                              backend="ascend", quiet=True)
    q = json.loads((tmp_path / "build/quantize/quantize.json").read_text())
    assert q["backend"] == "ascend" and q["skipped_layers"] == [SENSITIVE]
    assert q["amct_outputs"] == {"deploy": "model_deploy_model.onnx", "fake_quant": "model_fake_quant_model.onnx"}
    argv = q["amct_argv"]
    assert argv[:2] == [argv[0], "calibration"] and Path(argv[0]).name == "amct_onnx"
    assert f"--calibration_config={tmp_path}/build/quantize/quant.cfg" in argv
    cfg = (tmp_path / "build/quantize/quant.cfg").read_text()
    assert "batch_num : 2" in cfg and f'skip_layers : "{SENSITIVE}"' in cfg
    assert not (tmp_path / "build/quantize/amct_work").exists()
    stages = record["stages"]
    assert stages["quantize"]["info"]["amct_argv"] == argv
    # the fake-quant model runs on the host (as AMCT's ONNX Runtime simulation); the deploy model through atc
    golden = stages["eval_golden"]["metrics"]["top1"]
    assert stages["eval_int8"]["metrics"]["top1"] >= golden - 0.02
    assert stages["eval_om"]["metrics"]["top1"] >= golden - 0.02
    compared = json.loads((tmp_path / "build/compare_int8/result.json").read_text())
    assert compared["quantization"]["skipped_layers"] == [SENSITIVE]
    assert {r["layer"] for r in compared["quantization"]["layers"]} == {"conv1", "conv3", "fc"}
    convert = json.loads((tmp_path / "build/convert_int8/convert.json").read_text())
    assert convert["model"].endswith("build/quantize/deploy/model.onnx")


def test_missing_amct_fails_the_stage_with_a_clear_message(workspace, tmp_path, capsys):
    from ascendpipe.cli.main import main

    code = main(["build", str(workspace), "quantize", "--backend", "ascend"])
    captured = capsys.readouterr()
    assert code == 1
    assert "stage 'quantize': CANN tool 'amct_onnx' not found" in captured.out + captured.err
    assert not (tmp_path / "build/quantize").exists()


def test_each_backend_runs_and_keys_quantize():
    from ascendpipe.backends import registry

    ort, ascend = registry.get("onnxruntime"), registry.get("ascend")
    assert "quantize" in ort.kinds and "quantize" in ascend.kinds
    assert set(ort.tool_versions("quantize")) == {"onnxruntime", "onnx"}
    assert {"onnx", "amct_onnx", "cann"} <= set(ascend.tool_versions("quantize"))


def test_dry_run_counts_the_calibration_samples_as_the_run_does(workspace, tmp_path, capsys):
    """A dry run with too few calibration samples stops where the run stops (`! ...`), on both backends."""
    from ascendpipe.cli.main import main

    setting = "stages.quantize.params.batch_num=1000"
    main(["build", str(workspace), "quantize", "--backend", "ascend", "--dry-run", "--set", setting])
    problems = [line.strip() for line in capsys.readouterr().out.splitlines() if line.strip().startswith("! ")]
    assert len(problems) == 1 and "batch_num 1000 x batch_size 16 needs 16000" in problems[0]
    assert main(["build", str(workspace), "quantize", "--set", setting]) != 0
    assert "batch_num 1000 x batch_size 16 needs 16000" in capsys.readouterr().out  # the onnxruntime run
