"""Settings resolution, ATC remedy formats, the CLI and the stage kind."""

import argparse
import io
import json

import jsonschema
import pytest

from ascendpipe.backends.ascend.atc import settings_argv
from ascendpipe.errors import UserError
from ascendpipe.precision import remedy
from ascendpipe.precision.settings import parse_input_shape, resolve
from tests.modelzoo import addn_model, conv_bn_relu_model


def test_fusion_switch_both_formats_parse_alike():
    lines = remedy.parse_fusion_switch("ConvBNFusion:off\n# c\nGeluFusion : on\n")
    as_json = remedy.parse_fusion_switch('{"Switch":{"GraphFusion":{"ConvBNFusion":"off"},"UBFusion":{"GeluFusion":"on"}}}')
    assert lines == as_json == {"ConvBNFusion": "off", "GeluFusion": "on"}
    assert remedy.parse_fusion_switch(remedy.format_fusion_switch(lines)) == lines
    with pytest.raises(UserError, match=r"f.cfg:2"):
        remedy.parse_fusion_switch("A:off\nB maybe\n", "f.cfg")


def test_modes_are_exclusive_and_validated():
    with pytest.raises(UserError, match="cannot be combined"):
        resolve({"precision_mode": "force_fp16", "precision_mode_v2": "fp16"})
    with pytest.raises(UserError, match="'fp17' is not one of force_fp16, allow_fp32_to_fp16"):
        resolve({"precision_mode": "fp17"})
    assert resolve({"precision_mode_v2": "mixed_float16"}).policy == "mixed"
    with pytest.raises(UserError, match="needs a mixed mode"):
        resolve({"modify_mixlist": {"black-list": {"to-add": ["Relu"]}}})


def test_input_shape_grammar():
    assert parse_input_shape("a:1,3,224,224;b:-1,8") == {"a": [1, 3, 224, 224], "b": [-1, 8]}
    with pytest.raises(UserError, match="input_shape entry 'a=1'"):
        parse_input_shape("a=1")


def test_keep_dtype_file_and_atc_argv(tmp_path):
    (tmp_path / "keep.cfg").write_text("square\nOpType::ReduceSumD\n\n")
    s = resolve({"keep_dtype": "keep.cfg", "soc_version": "Ascend310P3"}, lambda p: tmp_path / p)
    assert s.keep_dtype == ["square", "OpType::ReduceSumD"]
    argv = settings_argv(s, "m.onnx", "out/model")
    assert "--keep_dtype=./keep_dtype.cfg" in argv and "--soc_version=Ascend310P3" in argv
    assert "--precision_mode=force_fp16" in argv


def test_mixlist_moves_an_op_to_the_black_list(tmp_path, convert):
    model = conv_bn_relu_model(tmp_path / "m.onnx")
    assert convert(model, precision_mode="allow_mix_precision").plan["fc"].dtype == "float16"
    result = convert(model, precision_mode="allow_mix_precision",
                     modify_mixlist={"black-list": {"to-add": ["Gemm"]}, "white-list": {"to-remove": ["Gemm"]}})
    assert result.plan["fc"].dtype == "float32" and "modify_mixlist" in result.plan["fc"].reason
    assert result.plan["pool"].dtype == "float16"  # gray, follows the fp16 conv
    # atc reads GE op types: the ONNX name Gemm is written as the GE type ATC gives a Gemm node (gemm_plugin.cc L64)
    assert json.loads((result.out_dir / "modify_mixlist.json").read_text())["black-list"]["to-add"] == ["MatMulV2"]
    assert json.loads((result.out_dir / "convert.json").read_text())["remedy_names"] == {"Gemm": "MatMulV2"}


def test_keep_dtype_typo_is_a_user_error(tmp_path, convert):
    with pytest.raises(UserError, match="keep_dtype names op 'summ'"):
        convert(addn_model(tmp_path / "m.onnx"), keep_dtype=["summ"])


def test_tune_bank_session_goes_to_runtime_json(tmp_path, convert):
    (tmp_path / "bank.json").write_text('{"session": {"intra_op_num_threads": 2}, "ops": {}}')
    result = convert(addn_model(tmp_path / "m.onnx"), tune_bank=str(tmp_path / "bank.json"))
    assert json.loads((result.out_dir / "runtime.json").read_text())["session"] == {"intra_op_num_threads": 2}
    from ascendpipe.backends.onnxruntime.session import make_session, read_runtime

    assert read_runtime(result.model_path) == {"intra_op_num_threads": 2}  # what infer/profile apply
    assert make_session(result.model_path).get_session_options().intra_op_num_threads == 2
    (tmp_path / "bad.json").write_text("[1]")
    with pytest.raises(UserError, match="JSON object"):
        convert(tmp_path / "m.onnx", tune_bank=str(tmp_path / "bad.json"))


def test_cli_accepts_underscores_and_prints_summary(tmp_path, capsys):
    from ascendpipe.cli import convert as cli

    parser = argparse.ArgumentParser()
    cli.add_arguments(parser)
    model = addn_model(tmp_path / "m.onnx")
    args = parser.parse_args(["--model", str(model), "--output", str(tmp_path / "o"),
                              "--precision_mode", "force_fp16", "--keep-dtype", "sum"])
    assert cli.main(args) == 0
    out = capsys.readouterr().out
    assert "3 ops fp16, 1 ops fp32" in out and "keep_dtype.cfg" in out
    assert (tmp_path / "o" / "keep_dtype.cfg").read_text() == "sum\n"


def test_stage_kind_schema_and_run(tmp_path):
    from ascendpipe.stages.base import StageContext
    from ascendpipe.stages.convert import ConvertKind

    kind = ConvertKind()
    with pytest.raises(jsonschema.ValidationError, match="'fp17' is not one of"):
        jsonschema.validate({"precision_mode": "fp17"}, kind.params_schema)
    model = addn_model(tmp_path / "m.onnx")
    out = tmp_path / "out"
    out.mkdir()
    ctx = StageContext(name="convert", kind="convert", workspace=tmp_path, out_dir=out, final_out_dir=out,
                       params={"keep_dtype": ["sum"]}, inputs={"model": model}, upstream={},
                       backend="onnxruntime", log=io.StringIO())
    result = kind.run(ctx)
    assert result.metrics == {"ops_fp16": 3, "ops_fp32": 1, "ops_other": 0}
    assert str(result.remedy_files["keep_dtype"]) == "keep_dtype.cfg"
    assert sorted(p.suffix for p in out.iterdir() if p.suffix == ".onnx") == [".onnx"]
    assert kind.tool_versions("onnxruntime")["onnxruntime"].startswith("1.")
