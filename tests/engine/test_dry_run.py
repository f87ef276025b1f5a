"""--dry-run shows each stage's command lines, or says why it cannot build them."""

from __future__ import annotations

from ascendpipe.cli.main import main
from tests.modelzoo import l2norm_model


def _dry_run(ws, capsys, *extra) -> list[str]:
    code = main(["build", str(ws.root / "pipeline.yaml"), "--dry-run", *extra])
    assert code == 1  # something would run
    return capsys.readouterr().out.splitlines()


def test_a_stage_whose_command_cannot_be_built_says_why(ws, capsys):
    l2norm_model(ws.root / "models" / "l2.onnx")
    ws.pipeline("backend: ascend\nstages:\n  convert: {kind: convert, model: models/l2.onnx}\n")
    lines = _dry_run(ws, capsys)
    problems = [line.strip() for line in lines if line.strip().startswith("! ")]
    assert problems == ["! stage 'convert': soc_version is required on the ascend backend (e.g. soc_version: Ascend310P3) "
                        "(set it in this stage's params, or for every convert and tune stage at once: "
                        "--set params.soc_version=Ascend310P3)"]
    assert not [line for line in lines if line.strip().startswith("$ ")]

    lines = _dry_run(ws, capsys, "--set", "stages.convert.params.soc_version=Ascend310P3")
    commands = [line.strip()[2:].split() for line in lines if line.strip().startswith("$ ")]
    assert [argv[0].rsplit("/", 1)[-1] for argv in commands] == ["atc", "atc"]  # the OM, then its JSON
    assert "--soc_version=Ascend310P3" in commands[0] and "--framework=5" in commands[0]
    assert not [line for line in lines if line.strip().startswith("! ")]


def test_tool_changes_are_said_once_and_the_emulated_convert_runs_no_atc(ws, capsys):
    l2norm_model(ws.root / "models" / "l2.onnx")
    ws.pipeline("stages:\n  convert: {kind: convert, model: models/l2.onnx, params: {precision_mode: force_fp16}}\n"
                "  a: {kind: infer, model: convert}\n  b: {kind: infer, model: convert}\n")
    ws.build()
    lines = _dry_run(ws, capsys, "--backend", "ascend", "--set", "params.soc_version=Ascend310P3")
    reasons = {line.split()[2].rstrip(":"): line for line in lines if line.startswith("  would run")}
    assert "backend onnxruntime -> ascend" in reasons["convert"]
    assert "backend onnxruntime -> ascend" not in reasons["b"] and "tool/backend change(s) as above" in reasons["b"]
    ws.pipeline("stages:\n  convert: {kind: convert, model: models/l2.onnx, params: {precision_mode: force_fp32}}\n")
    lines = _dry_run(ws, capsys)
    shown = [line.strip() for line in lines if line.strip().startswith(("$ ", "= "))]
    assert shown == ["= onnxruntime emulation of atc, in-process (no atc runs); atc options on --backend ascend: "
                     "--precision_mode=force_fp32"]


def test_a_decoder_without_shapes_gets_the_board_recipe(ws, capsys):
    """Issue 49: the dry run names every input with an open dim and the prefill/decode OMs (or gears), the
    words the emulated convert warns with (tests/backends/ascend/test_board_line.py)."""
    from tests.fix import transformer_models as tm

    tm.build("llama", ws.root / "models" / "llama.onnx")
    ws.pipeline("stages:\n  convert: {kind: convert, model: models/llama.onnx, params: {soc_version: Ascend310B1}}\n")
    lines = _dry_run(ws, capsys, "--backend", "ascend")
    problems = [line.strip() for line in lines if line.strip().startswith("! ")]
    assert len(problems) == 1
    assert "atc needs --input_shape for every input with a non-fixed dim: input_ids [1,seq], position_ids [1,seq]" \
        in problems[0]
    assert 'a decode OM, --input_shape="input_ids:1,1;position_ids:1,1;past_key:1,2,CACHE,16' in problems[0]
