"""Outside a pipeline, advice applies as printed (issue 43): standalone compare and fix write the
remedy files they print into their --output and print the `ascendpipe convert` line that reads
them; that line, run as printed, converts a model whose outputs pass. `compare --check` exits 1
when the outputs fail, for CI."""

from __future__ import annotations

import json
import shlex

import numpy as np
import pytest

from ascendpipe.cli.main import main as cli
from tests import modelzoo


@pytest.fixture
def l2norm(tmp_path):
    """The ReID overflow (square -> sum -> sqrt -> div) converted with force_fp16, and its input."""
    model = modelzoo.l2norm_model(tmp_path / "l2.onnx")
    np.savez(tmp_path / "x.npz", **modelzoo.l2norm_inputs(0))
    assert cli(["convert", "--model", str(model), "--output", str(tmp_path / "fp16")]) == 0
    return model, tmp_path / "fp16", tmp_path / "x.npz"


def _printed(out: str, prefix: str) -> list[str]:
    """The words of the printed line that starts with ``prefix`` (after its indent)."""
    line = next(l.strip() for l in out.splitlines() if l.strip().startswith(prefix))
    return shlex.split(line)


def _run_printed(words: list[str]) -> int:
    assert words[0] == "ascendpipe"
    return cli(words[1:])


def test_compare_writes_the_remedy_files_and_its_convert_line_restores_the_outputs(l2norm, tmp_path, capsys):
    model, target, x = l2norm
    out = tmp_path / "cmp"
    rc = cli(["compare", "--golden", str(model), "--target", str(target), "--input", str(x), "--output", str(out)])
    printed = capsys.readouterr().out
    assert rc == 0  # without --check the exit status does not judge
    assert (out / "keep_dtype.cfg").read_text() == "square\nsum\nsqrt\n"
    # the three are one UB-fused kernel whose members keep their own dtypes: no fusion switch is advised
    assert not (out / "fusion_switch.cfg").exists()
    assert "apply it outside a pipeline (convert again with the remedy files):" in printed
    convert = _printed(printed, "ascendpipe convert")
    assert convert == ["ascendpipe", "convert", "--model", str(model), "--output", str(out / "converted"),
                       "--precision-mode", "force_fp16", "--keep-dtype", str(out / "keep_dtype.cfg")]
    assert f"(on a board, the same files go to atc: --keep_dtype={out / 'keep_dtype.cfg'})" in printed
    check = _printed(printed, "then check it:")[3:]
    assert check == ["ascendpipe", "compare", "--golden", str(model), "--target", str(out / "converted"),
                     "--input", str(x), "--check"]
    assert _run_printed(convert) == 0
    capsys.readouterr()
    assert _run_printed(check) == 0  # the remedy, applied as printed, passes
    assert "every output passes" in capsys.readouterr().out


def test_compare_check_exits_1_when_the_outputs_fail(l2norm, tmp_path, capsys):
    model, target, x = l2norm
    assert cli(["compare", "--golden", str(model), "--target", str(target), "--input", str(x), "--check"]) == 1
    printed = capsys.readouterr().out
    assert printed.startswith(f"input: {x}\noutputs fail: first failure reaching them #2 sum (ReduceSum)")
    # no --output: nothing written, and the line says how to get the files
    assert ("add --output DIR to have keep_dtype.cfg written there, with the convert line "
            "that applies them outside a pipeline") in printed
    assert not (tmp_path / "keep_dtype.cfg").exists()
    fp32 = tmp_path / "fp32"
    assert cli(["convert", "--model", str(model), "--output", str(fp32), "--precision-mode", "force_fp32"]) == 0
    assert cli(["compare", "--golden", str(model), "--target", str(fp32), "--input", str(x), "--check"]) == 0


def test_compare_json_names_the_files_and_the_line(l2norm, tmp_path, capsys):
    model, target, x = l2norm
    out = tmp_path / "cmp"
    assert cli(["compare", "--golden", str(model), "--target", str(target), "--input", str(x), "--output", str(out),
                "--json", "--check"]) == 1
    doc = json.loads(capsys.readouterr().out)
    assert doc["apply"]["files"] == {"keep_dtype.cfg": str(out / "keep_dtype.cfg")}
    assert shlex.split(doc["apply"]["convert"])[:4] == ["ascendpipe", "convert", "--model", str(model)]
    assert doc["first_failure"]["op_name"] == "sum"  # the contract's keys are all still there


def test_fix_prints_the_convert_line_that_applies_its_files(tmp_path, capsys):
    model = modelzoo.l2norm_model(tmp_path / "l2.onnx")
    np.savez(tmp_path / "x.npz", **modelzoo.l2norm_inputs(0))
    out = tmp_path / "fix"
    assert cli(["fix", "--golden", str(model), "--input", str(tmp_path / "x.npz"), "--output", str(out)]) == 0
    printed = capsys.readouterr().out
    convert = _printed(printed, "ascendpipe convert")
    assert convert == ["ascendpipe", "convert", "--model", str(model), "--output", str(out / "converted"),
                       "--precision-mode", "force_fp16", "--keep-dtype", str(out / "keep_dtype.cfg")]
    assert _run_printed(convert) == 0
    capsys.readouterr()
    assert cli(["compare", "--golden", str(model), "--target", str(out / "converted"), "--input",
                str(tmp_path / "x.npz"), "--check"]) == 0
    capsys.readouterr()
    assert cli(["fix", "--golden", str(model), "--input", str(tmp_path / "x.npz")]) == 0
    assert capsys.readouterr().out.rstrip().endswith(
        "add --output DIR to have keep_dtype.cfg written there, with the convert line that applies them")


def test_ascend_lines_repeat_the_targets_atc_conversion(tmp_path):
    """On --backend ascend: the convert line with --backend ascend, the atc flags, and the target's
    own atc line (from its convert.json) with the remedy files in place of its own."""
    from ascendpipe.cli.apply_line import apply_lines

    om = tmp_path / "om"
    om.mkdir()
    (om / "model.om").write_bytes(b"om")
    (om / "convert.json").write_text(json.dumps({
        "atc_argv": ["/opt/atc", "--framework=5", f"--model={tmp_path}/m.onnx", "--soc_version=Ascend310P3",
                     "--input_shape=x:1,3,8,8", "--precision_mode=force_fp16", f"--keep_dtype={om}/keep_dtype.cfg",
                     "--log=error", f"--output={om}/model"],
        "settings": {"precision_mode": "force_fp16", "overflow_mode": "saturation",
                     "overflow_mode_source": "default for soc_version Ascend310P3"}}))
    files = {"keep_dtype.cfg": tmp_path / "cmp" / "keep_dtype.cfg"}
    lines = apply_lines(files, target=om, golden=tmp_path / "m.onnx", new_output=tmp_path / "cmp" / "converted",
                        backend="ascend")
    assert shlex.split(lines[1]) == [
        "ascendpipe", "convert", "--model", f"{tmp_path}/m.onnx", "--output", str(tmp_path / "cmp" / "converted"),
        "--soc-version", "Ascend310P3", "--input-shape", "x:1,3,8,8", "--precision-mode", "force_fp16",
        "--keep-dtype", str(files["keep_dtype.cfg"]), "--backend", "ascend"]
    assert lines[2] == f"  atc flags: --keep_dtype={files['keep_dtype.cfg']}"
    assert shlex.split(lines[3]) == [
        "/opt/atc", "--framework=5", f"--model={tmp_path}/m.onnx", "--soc_version=Ascend310P3",
        "--input_shape=x:1,3,8,8", "--precision_mode=force_fp16", "--log=error",
        f"--keep_dtype={files['keep_dtype.cfg']}", f"--output={tmp_path}/cmp/converted/model"]


def test_compare_prints_the_impl_mode_remedy_as_its_own_convert_line_and_it_restores_the_outputs(tmp_path, capsys):
    """Ascend310's fp16 LayerNorm (tests/fix/layernorm_models.py): the advice's op_precision_mode.ini is
    written beside keep_dtype.cfg, and applied on a line of its own (it is the alternative, not an addition)."""
    from tests.fix import layernorm_models as lm

    model = lm.layer_norm(tmp_path / "ln.onnx")
    np.save(tmp_path / "x.npy", lm.inputs()["x"])
    assert cli(["convert", "--model", str(model), "--output", str(tmp_path / "fp16"), "--soc-version", "Ascend310"]) == 0
    out = tmp_path / "cmp"
    assert cli(["compare", "--golden", str(model), "--target", str(tmp_path / "fp16"), "--input", str(tmp_path / "x.npy"),
                "--output", str(out)]) == 0
    printed = capsys.readouterr().out
    assert "LayerNorm=high_precision" in (out / "op_precision_mode.ini").read_text().splitlines()
    lines = [shlex.split(l.strip()) for l in printed.splitlines() if l.strip().startswith("ascendpipe convert")]
    assert len(lines) == 2 and "--keep-dtype" in lines[0] and "--op-precision-mode" not in lines[0]
    impl = lines[1]
    assert impl[-2:] == ["--op-precision-mode", str(out / "op_precision_mode.ini")] and "--keep-dtype" not in impl
    assert "or, the data kept in fp16 and the kernel given high_precision instead:" in printed
    assert _run_printed(impl) == 0
    capsys.readouterr()
    assert _run_printed(_printed(printed, "then check it:")[3:]) == 0  # the impl remedy alone passes
    assert "every output passes" in capsys.readouterr().out
