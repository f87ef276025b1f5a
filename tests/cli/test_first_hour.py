"""The command line as a new user meets it (issue 23): --json everywhere, a STAGE after an option,
help without doubled flags, the first failing op named, fix's pipeline mode explained."""

from __future__ import annotations

import argparse
import io
import json

import pytest

import ascendpipe
from ascendpipe.cli.main import COMMANDS, _parser
from ascendpipe.cli.main import main as cli
from tests.explorer.conftest import Workspace, chdir_to  # noqa: F401  (a fixture)


def _subparser(name: str) -> argparse.ArgumentParser:
    sub = next(a for a in _parser(name)._actions if isinstance(a, argparse._SubParsersAction))
    return sub.choices[name]


@pytest.mark.parametrize("name", sorted(COMMANDS))
def test_every_command_takes_json(name):
    flags = {s for a in _subparser(name)._actions for s in a.option_strings}
    assert "--json" in flags


def test_validate_and_dag_print_json(tmp_path, chdir_to, capsys):
    ws = Workspace(tmp_path / "ws")
    chdir_to(ws.root)
    assert cli(["validate", "pipeline.yaml", "--json"]) == 0
    info = json.loads(capsys.readouterr().out)
    assert info["ok"] is True and info["backend"] == "onnxruntime"
    assert info["stages"] == ["prep", "score", "convert@fp32", "convert@fp16", "compare@fp32", "compare@fp16"]
    assert cli(["dag", "pipeline.yaml", "--json"]) == 0
    dag = json.loads(capsys.readouterr().out)
    assert dag["order"].index("prep") < dag["order"].index("score")
    assert dag["stages"]["score"] == {"kind": "run", "needs": ["prep"]}
    assert dag["stages"]["compare@fp16"]["needs"] == ["convert@fp16"]


def test_a_stage_after_an_option_is_still_a_stage(tmp_path, chdir_to, capsys):
    ws = Workspace(tmp_path / "ws")
    chdir_to(ws.root)
    assert cli(["build", "pipeline.yaml", "--json", "prep"]) == 0
    record = json.loads(capsys.readouterr().out)
    assert list(record["stages"]) == ["prep"]
    assert cli(["build", "pipeline.yaml", "--force", "--json", "prep", "--quiet"]) == 0
    record = json.loads(capsys.readouterr().out)
    assert record["stages"]["prep"]["state"] == "ran"  # forced, and only it
    assert list(record["stages"]) == ["prep"]
    with pytest.raises(SystemExit) as exc:  # an unknown option is still refused
        cli(["build", "pipeline.yaml", "--frobnicate", "prep"])
    assert exc.value.code == 2
    assert "unrecognized arguments: --frobnicate" in capsys.readouterr().err


def test_the_usage_line_shows_stage_as_optional(capsys):
    with pytest.raises(SystemExit):
        cli(["build", "--help"])
    usage = " ".join(capsys.readouterr().out.split("\n\n")[0].split())
    assert "pipeline [STAGE ...]" in usage


@pytest.mark.parametrize("command, shown, hidden", [
    ("convert", ["--model MODEL", "--precision-mode PRECISION_MODE"], ["--model MODEL, --model", "--precision_mode"]),
    ("infer", ["--batch-size BATCH_SIZE, --batchsize BATCH_SIZE"], ["--batch_size"]),
    ("fix", ["--golden-stage GOLDEN_STAGE"], ["--golden_stage"]),
])
def test_help_lists_each_flag_once(command, shown, hidden, capsys):
    with pytest.raises(SystemExit):
        cli([command, "--help"])
    text = capsys.readouterr().out
    for s in shown:
        assert s in text
    for h in hidden:
        assert h not in text
    assert "Each flag also takes the spelling with underscores" in text


def test_the_underscore_spelling_is_still_accepted():
    args = _parser("convert").parse_args(["convert", "--model", "m.onnx", "--output", "o", "--precision_mode", "force_fp32"])
    assert args.precision_mode == "force_fp32"


@pytest.fixture(scope="module")
def failing_compare(tmp_path_factory):
    ws = Workspace(tmp_path_factory.mktemp("ff"))
    out = io.StringIO()
    run = ascendpipe.build(str(ws.pipeline), stream=out)
    return ws, run, out.getvalue()


def test_the_build_summary_names_the_first_failing_op(failing_compare):
    ws, run, printed = failing_compare
    info = run["stages"]["compare@fp16"]["info"]["first_failure"]
    line = next(line for line in printed.splitlines() if line.strip().startswith("compare@fp16"))
    assert f"first failure {info['op_name']} ({info['op_type']}" in line
    assert info["op_name"] == "sum" and info["op_type"] == "ReduceSum"
    assert "first_failure_index" not in line
    ok = next(line for line in printed.splitlines() if line.strip().startswith("compare@fp32"))
    assert "first failure" not in ok


def test_show_names_the_first_failing_op(failing_compare, chdir_to, capsys):
    ws, run, _ = failing_compare
    chdir_to(ws.root)
    assert cli(["show", str(run["id"])]) == 0
    text = capsys.readouterr().out
    block = text.split("compare@fp16 [compare]")[1]
    assert block.splitlines()[1].strip().startswith("first failure sum (ReduceSum")
    assert "overflow" in block.splitlines()[1]


def test_fix_pipeline_mode_without_an_eval_stage_says_what_it_needs(failing_compare, chdir_to, capsys):
    ws, _, _ = failing_compare
    chdir_to(ws.root)
    runs_before = len(ascendpipe.runs(str(ws.root)))
    code = cli(["fix", "pipeline.yaml", "--stage", "convert@fp16", "--metric", "compare.output_cosine"])
    err = capsys.readouterr().err
    assert code == 2 and len(err.strip().splitlines()) == 1
    assert "stage 'compare@fp16'" in err and "pipeline mode needs an eval stage" in err
    assert "ascendpipe fix --golden MODEL.onnx" in err
    assert len(ascendpipe.runs(str(ws.root))) == runs_before  # refused before any build
    code = cli(["fix", "pipeline.yaml", "--stage", "convert@fp16", "--metric", "eval.mAP"])
    err = capsys.readouterr().err
    assert code == 2 and "no stage 'eval'" in err and "ascendpipe fix --golden" in err
    # a golden stage named by hand that reports no such metric: the same advice, located at it
    code = cli(["fix", "pipeline.yaml", "--stage", "convert@fp16", "--metric", "compare.output_cosine", "--golden-stage", "prep"])
    err = capsys.readouterr().err
    assert code == 2 and len(err.strip().splitlines()) == 1
    assert "stage 'prep'" in err and "pipeline mode needs an eval stage of the golden model" in err
    assert "ascendpipe fix --golden MODEL.onnx" in err


def test_fix_attempts_are_recorded_as_such_and_runs_says_so(tmp_path, chdir_to, capsys):
    """A fix attempt is a partial build the user did not type: its record says `fix` made it."""
    from ascendpipe.fix.evaluators import PipelineEvaluator, PipelineTarget

    ws = Workspace(tmp_path / "ws")
    chdir_to(ws.root)
    ws.build()
    target = PipelineTarget("convert@fp16", "score", "acc", "prep", "compare@fp16", "stages.convert.matrix.fp16")
    evaluator = PipelineEvaluator(str(ws.pipeline), target, tolerance=0.01, build_dir=ws.root / "build")
    record = evaluator._build(["stages.convert.matrix.fp16.keep_dtype=[sum]"])
    assert record["argv"][:2] == ["ascendpipe", "fix"]
    assert "--set=stages.convert.matrix.fp16.keep_dtype=[sum]" in record["argv"]
    assert cli(["runs"]) == 0
    lines = capsys.readouterr().out.splitlines()[2:]
    assert "(fix attempt)" in lines[0] and "(fix attempt)" not in lines[1]


@pytest.mark.parametrize("command", [
    ["convert", "--model", "m.onnx", "--output", "afile"],
    ["infer", "--model", "m.onnx", "--input", "x.npy", "--output", "afile"],
    ["dump", "--model", "m.onnx", "--input", "x.npy", "--output", "afile"],
    ["dump", "--model", "m.onnx", "--input", "x.npy", "--output", "afile/sub"],
    ["profile", "--model", "m.onnx", "--input", "x.npy", "--output", "afile", "--iterations", "1"],
])
def test_an_output_path_that_is_a_file_is_one_line(tmp_path, monkeypatch, capsys, command):
    """Was 'internal error' with a traceback (FileExistsError, NotADirectoryError)."""
    import numpy as np

    from tests.modelzoo import linear_model

    monkeypatch.chdir(tmp_path)
    linear_model(tmp_path / "m.onnx")
    np.save(tmp_path / "x.npy", np.ones((2, 3), np.float32))
    (tmp_path / "afile").write_text("mine\n")
    assert cli(command) == 1
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1 and "Traceback" not in err
    assert err.startswith("ascendpipe: error: afile") and err.endswith("and run it again")
    assert "is a file where a folder must be" in err or "part of this path is a file, not a folder" in err
    assert (tmp_path / "afile").read_text() == "mine\n"  # the file is left as it was


def test_a_damaged_npy_is_named_as_such(tmp_path, monkeypatch, capsys):
    from tests.modelzoo import linear_model

    monkeypatch.chdir(tmp_path)
    linear_model(tmp_path / "m.onnx")
    (tmp_path / "x.npy").write_text("garbage\n")
    assert cli(["infer", "--model", "m.onnx", "--input", "x.npy", "--output", "out"]) == 2
    err = capsys.readouterr().err.strip()
    assert err == ("ascendpipe: error: x.npy: cannot read input file: not a numpy .npy/.npz file (it does not "
                   "start with numpy's header: damaged, or another format)")


@pytest.mark.parametrize("flag, value, words", [
    ("--max-batch", "0", "expected a whole number of at least 1, given '0'"),
    ("--memory-budget-mb", "-5", "expected a number above 0, given '-5'"),
    ("--memory-budget-mb", "nan", "expected a number above 0, given 'nan'"),
])
def test_dump_refuses_sizes_the_stage_schema_refuses(tmp_path, capsys, flag, value, words):
    """The dump stage's schema wants max_batch >= 1 and memory_budget_mb > 0; the command took 0 and -5."""
    from tests.modelzoo import linear_model

    linear_model(tmp_path / "m.onnx")
    with pytest.raises(SystemExit) as stop:
        cli(["dump", "--model", str(tmp_path / "m.onnx"), "--output", str(tmp_path / "d"), flag, value])
    assert stop.value.code == 2
    err = capsys.readouterr().err.strip().splitlines()[-1]
    assert err.startswith(f"ascendpipe dump: error: argument {flag}") and err.endswith(words)
    assert not (tmp_path / "d").exists()


def test_profile_refuses_a_batch_size_of_zero(tmp_path, capsys):
    """Random inputs read 0 as 'no batch size given' and profiled the model's default batch."""
    from tests.modelzoo import linear_model

    linear_model(tmp_path / "m.onnx")
    with pytest.raises(SystemExit) as stop:
        cli(["profile", "--model", str(tmp_path / "m.onnx"), "--output", str(tmp_path / "p"), "--batch-size", "0"])
    assert stop.value.code == 2
    assert capsys.readouterr().err.strip().endswith("expected a whole number of at least 1, given '0'")
