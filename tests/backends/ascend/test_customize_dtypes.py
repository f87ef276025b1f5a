"""--customize_dtypes on the ascend backend: the file ascendpipe writes goes to atc (never aoe), and the atc
double refuses what GE's parser refuses (op_cust_dtypes_config_parser.cc, typed into the double apart)."""

from __future__ import annotations

import subprocess

import pytest

from ascendpipe.backends.ascend import stages
from ascendpipe.backends.ascend.runner import SubprocessRunner
from ascendpipe.errors import UserError

SOC = "Ascend310P3"


def test_convert_passes_the_file_to_atc(cann_env, tiny_model, make_ctx):
    ctx = make_ctx("convert", "convert", {"soc_version": SOC, "precision_mode": "force_fp16",
                                          "customize_dtypes": ["relu1::InputDtype:float,OutputDtype:float",
                                                               "OpType::Softmax:InputDtype:float"]},
                   inputs={"model": tiny_model}, runner=SubprocessRunner(stage="convert", log_path="convert.log"))
    result = stages.convert(ctx)
    written = (ctx.out_dir / "customize_dtypes.cfg").read_text()
    # the ONNX-only name goes to atc as the GE type its parser gives (softmax_plugin.cc L64-74)
    assert written == "relu1::InputDtype:float,OutputDtype:float\nOpType::SoftmaxV2:InputDtype:float\n"
    assert f"--customize_dtypes={ctx.out_dir}/customize_dtypes.cfg" in result.info["atc_cmdline"]
    assert "customize_dtypes.cfg" in result.remedy_files
    import json

    record = json.loads((ctx.out_dir / "convert.json").read_text())
    assert record["op_lists"]["source"] == "atc" and record["op_lists"]["soc"] == "ascend310p"
    assert record["settings"]["customize_dtypes"] == ["relu1::InputDtype:float,OutputDtype:float",
                                                      "OpType::Softmax:InputDtype:float"]


def test_tune_refuses_it(cann_env, tiny_model, make_ctx):
    ctx = make_ctx("tune", "tune", {"soc_version": SOC, "customize_dtypes": ["relu1::InputDtype:float"]},
                   inputs={"model": tiny_model})
    with pytest.raises(UserError, match="does not pass to aoe"):
        stages.commands("tune", ctx)


@pytest.mark.parametrize("text, message", [
    ("relu1::InputDtype:float16\n\n", "content format"),  # an empty line (SplitNameOrType L146-155)
    ("::InputDtype:float16\n", "content format"),  # no name
    ("relu1::float16\n", "content format"),  # neither InputDtype nor OutputDtype
    ("relu1::OutputDtype:float16,InputDtype:float\n", "content format"),  # order (L166-170)
    ("relu1::InputDtype:fp16\n", "invalid dtype"),  # not a GE serial name (CheckValidAndTrans L223-236)
    ("relu1::InputDtype:" + "float16," * 150 + "\n", "reads 1023 per line"),
])
def test_the_double_refuses_what_ges_parser_refuses(cann_env, tiny_model, tmp_path, text, message):
    (tmp_path / "c.cfg").write_text(text)
    proc = subprocess.run([str(cann_env / "bin/atc"), "--framework=5", f"--model={tiny_model}",
                           f"--output={tmp_path}/o", f"--soc_version={SOC}", f"--customize_dtypes={tmp_path}/c.cfg"],
                          capture_output=True, text=True, cwd=tmp_path)
    assert proc.returncode == 2 and message in proc.stderr


def test_the_double_takes_what_ascendpipe_writes(cann_env, tiny_model, tmp_path):
    from ascendpipe.precision import remedy

    entries = remedy.parse_customize_dtypes("# ours\nrelu1::InputDtype:float16,,OutputDtype:float\n\n"
                                            "OpType::Add:OutputDtype:bfloat16\n")
    (tmp_path / "c.cfg").write_text(remedy.format_customize_dtypes(entries))
    proc = subprocess.run([str(cann_env / "bin/atc"), "--framework=5", f"--model={tiny_model}",
                           f"--output={tmp_path}/o", f"--soc_version={SOC}", f"--customize_dtypes={tmp_path}/c.cfg"],
                          capture_output=True, text=True, cwd=tmp_path)
    assert proc.returncode == 0, proc.stderr


@pytest.mark.parametrize("text, line, message", [
    ("relu1::InputDtype:fp16\n", 1, "'fp16' is not a dtype atc knows"),
    ("a::InputDtype:float\nOpType::X:OutputDtype:float,InputDtype:float\n", 2, "InputDtype must come before"),
    ("a::float\n", 1, "neither InputDtype nor OutputDtype"),
    ("::InputDtype:float\n", 1, "expected 'OpName::"),
    ("a::InputDtype:" + "float," * 200 + "\n", 1, "reads at most 1023"),
])
def test_our_reader_says_where(tmp_path, text, line, message):
    from ascendpipe.precision import remedy

    with pytest.raises(UserError, match=message) as err:
        remedy.parse_customize_dtypes(text, "c.cfg")
    assert (err.value.location.file, err.value.location.line) == ("c.cfg", line)
