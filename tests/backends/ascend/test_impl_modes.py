"""--op_select_implmode, --optypelist_for_implmode and --op_precision_mode: passed to atc on the ascend
backend (its double refuses what atc refuses: GE api/atc/main_impl.cc L907-917, option_utils.cc
L1275-1305), emulated and recorded on onnxruntime, the same on the CLI with ATC's spellings."""

from __future__ import annotations

import json
import subprocess

import pytest

from ascendpipe.backends.ascend import stages
from ascendpipe.cli.main import main
from ascendpipe.errors import UserError
from tests import modelzoo

SOC = "Ascend310P3"


def test_atc_gets_the_impl_mode_options_as_given(cann_env, tmp_path, tiny_model, make_ctx):
    ini = tmp_path / "op_precision.ini"
    ini.write_text("[ByOpType]\nLayerNorm=high_precision\n")
    ctx = make_ctx("convert", "convert", {"soc_version": SOC, "op_select_implmode": "high_precision",
                                          "optypelist_for_implmode": ["SoftmaxV2", "LayerNorm"],
                                          "op_precision_mode": str(ini)}, inputs={"model": tiny_model})
    argv = stages.commands("convert", ctx)[0]
    assert "--op_select_implmode=high_precision" in argv and "--optypelist_for_implmode=SoftmaxV2,LayerNorm" in argv
    assert f"--op_precision_mode={ini}" in argv
    result = stages.convert(ctx)  # the double takes them
    assert "--op_precision_mode" in result.info["atc_cmdline"]


@pytest.mark.parametrize("extra, message", [
    (["--optypelist_for_implmode=SoftmaxV2"], "must be set at the same time"),
    (["--op_select_implmode=enable_float_32_execution"], "bad --op_select_implmode"),
    (["--op_precision_mode=missing.ini"], "--op_precision_mode file missing.ini does not exist"),
    (["--op_precision_mode=p r.ini"], "invalid character"),
])
def test_the_double_refuses_what_atc_refuses(cann_env, tmp_path, extra, message):
    model = modelzoo.l2norm_model(tmp_path / "m.onnx")
    argv = [str(cann_env / "bin/atc"), "--framework=5", f"--model={model}", "--output=o", f"--soc_version={SOC}",
            *extra]
    proc = subprocess.run(argv, capture_output=True, text=True, cwd=tmp_path)
    assert proc.returncode == 2 and message in proc.stderr, proc.stderr


def test_a_list_without_a_mode_is_refused_before_atc(cann_env, tiny_model, make_ctx):
    ctx = make_ctx("convert", "convert", {"soc_version": SOC, "optypelist_for_implmode": "SoftmaxV2"},
                   inputs={"model": tiny_model})
    with pytest.raises(UserError, match="must be set at the same time"):
        stages.convert(ctx)


def test_cli_emulates_and_records_them(tmp_path, capsys):
    model = modelzoo.l2norm_model(tmp_path / "m.onnx")
    ini = tmp_path / "p.ini"
    ini.write_text("ReduceSumD=keep_fp16\nSqrt=high_precision\n")
    assert main(["convert", "--model", str(model), "--output", str(tmp_path / "o"), "--op_select_implmode",
                 "high_precision_for_all", "--op-precision-mode", str(ini), "--json"]) == 0
    record = json.loads((tmp_path / "o" / "convert.json").read_text())
    assert record["op_select_implmode"] == "high_precision_for_all" and record["op_precision_mode"] == str(ini)
    assert record["impl_modes"]["by_type"] == {"ReduceSumD": "keep_fp16", "Sqrt": "high_precision"}
    assert record["impl_modes"]["source"] == f"op_precision_mode {ini}"
    out = json.loads(capsys.readouterr().out)
    assert f"--op_precision_mode={ini}" in out["atc_argv"]
    plan = json.loads((tmp_path / "o" / "precision_plan.json").read_text())
    assert plan["nodes"]["sqrt"]["kernel"]["impl_mode"] == "high_precision"


def test_cli_refuses_a_bad_mode_in_one_line(tmp_path, capsys):
    model = modelzoo.l2norm_model(tmp_path / "m.onnx")
    assert main(["convert", "--model", str(model), "--output", str(tmp_path / "o"),
                 "--op-select-implmode", "fastest"]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "op_select_implmode 'fastest' is not one of" in err[0]
    assert not (tmp_path / "o" / "model.onnx").exists()
