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


def test_fix_pipeline_mode_names_what_a_metric_needs(failing_compare, chdir_to, capsys):
    """A compare metric is held against its golden value (1: the golden compared with itself), so no golden
    stage applies and only metrics with a known golden value are taken (issue 49: fix on a compare metric
    runs: tests/fix/test_compare_metric.py); an eval metric needs the eval stage."""
    ws, _, _ = failing_compare
    chdir_to(ws.root)
    runs_before = len(ascendpipe.runs(str(ws.root)))
    code = cli(["fix", "pipeline.yaml", "--stage", "convert@fp16", "--metric", "compare.output_cosine",
                "--golden-stage", "prep"])
    err = capsys.readouterr().err
    assert code == 2 and len(err.strip().splitlines()) == 1
    assert "--golden-stage does not apply to a compare metric" in err and "held against 1" in err
    code = cli(["fix", "pipeline.yaml", "--stage", "convert@fp16", "--metric", "compare.failed_ops"])
    err = capsys.readouterr().err
    assert code == 2 and "min_cosine, output_cosine" in err and "'failed_ops'" in err
    code = cli(["fix", "pipeline.yaml", "--stage", "convert@fp16", "--metric", "compare.output_cosine",
                "--min-cosine", "0.99", "--tolerance", "0.01"])
    err = capsys.readouterr().err
    assert code == 2 and "give --min-cosine or --tolerance, not both" in err
    assert len(ascendpipe.runs(str(ws.root))) == runs_before  # refused before any build
    code = cli(["fix", "pipeline.yaml", "--stage", "convert@fp16", "--metric", "eval.mAP"])
    err = capsys.readouterr().err
    assert code == 2 and "no stage 'eval'" in err and "ascendpipe fix --golden" in err


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


# -- issue 31: every message points at its source -------------------------------------------------

def _only(ws, stages: dict) -> None:
    import yaml

    data = yaml.safe_load(ws.pipeline.read_text())
    data["stages"] = {**{k: data["stages"][k] for k in ("prep", "score")}, **stages}
    ws.pipeline.write_text(yaml.safe_dump(data, sort_keys=False))


def _line_of(ws, text: str) -> int:
    return next(i for i, line in enumerate(ws.pipeline.read_text().splitlines(), 1) if text in line)


USE = {"use": {"kind": "run", "cmd": "cat data/prep/scalez.txt", "deps": ["data/prep/scalez.txt"], "outs": ["o.txt"]}}


def _built_then_used_wrongly(tmp_path, chdir_to) -> Workspace:
    """prep built and fresh, then a stage naming a path its output does not hold."""
    ws = Workspace(tmp_path / "ws")
    _only(ws, {})
    ws.build()
    _only(ws, USE)
    chdir_to(ws.root)
    return ws


def test_a_wrong_path_inside_a_built_output_is_refused_by_validate_at_its_line(tmp_path, chdir_to, capsys):
    ws = _built_then_used_wrongly(tmp_path, chdir_to)
    assert cli(["validate", "pipeline.yaml"]) == 2
    err = capsys.readouterr().err.strip()
    assert err.startswith(f"ascendpipe: error: pipeline.yaml:{_line_of(ws, '- data/prep/scalez.txt')}:")
    assert "stage 'use'" in err and "input 'data/prep/scalez.txt' does not exist" in err
    assert "did you mean 'data/prep/scale.txt'?" in err and "data/prep/ holds: scale.txt" in err
    assert cli(["status", "pipeline.yaml"]) == 0  # status says the same, located
    assert f"stale   use: pipeline.yaml:{_line_of(ws, '- data/prep/scalez.txt')}:7: stage 'use': input" in capsys.readouterr().out


def test_a_wrong_path_inside_a_built_output_refuses_the_build_in_one_line(tmp_path, chdir_to, capsys):
    """Built and fresh upstream, deciding meets the path: one located line and exit 2, as validate
    says it, not a list of every stage `skipped ... stopped at a failure` first; the run is recorded."""
    ws = _built_then_used_wrongly(tmp_path, chdir_to)
    assert cli(["build", "pipeline.yaml"]) == 2
    captured = capsys.readouterr()
    assert captured.out == ""
    assert captured.err.startswith(f"ascendpipe: error: pipeline.yaml:{_line_of(ws, '- data/prep/scalez.txt')}:7: "
                                   "stage 'use': input 'data/prep/scalez.txt' does not exist")
    assert len(captured.err.strip().splitlines()) == 1
    assert cli(["runs", "--json"]) == 0
    latest = json.loads(capsys.readouterr().out)[0]
    assert latest["state"] == "failed"


def test_a_wrong_path_inside_an_output_not_built_yet_fails_the_build_at_its_line(tmp_path, chdir_to, capsys):
    ws = Workspace(tmp_path / "ws")
    _only(ws, USE)
    chdir_to(ws.root)
    assert cli(["validate", "pipeline.yaml"]) == 0  # prep is not built: the path may yet appear
    capsys.readouterr()
    assert cli(["build", "pipeline.yaml"]) == 1
    out = capsys.readouterr().out
    failed = next(line for line in out.splitlines() if line.strip().startswith("FAILED"))
    assert f"pipeline.yaml:{_line_of(ws, '- data/prep/scalez.txt')}:7: stage 'use': input 'data/prep/scalez.txt'" in failed
    assert "ran       prep" in out  # what could be built was


def test_a_kinds_input_path_error_names_the_field_and_the_log_says_why(tmp_path, chdir_to, capsys):
    """An error a kind raises about an input file (inputs.py) is blamed on the pipeline field that
    named it, and the log excerpt printed under the failure shows that error, not only the log's header."""
    ws = Workspace(tmp_path / "ws")
    (ws.root / "data" / "probe.npy").write_bytes(b"not an npy")
    chdir_to(ws.root)
    assert cli(["build", "pipeline.yaml", "compare@fp32"]) == 1
    out = capsys.readouterr().out
    failed = next(line for line in out.splitlines() if line.strip().startswith("FAILED"))
    assert f"pipeline.yaml:{_line_of(ws, 'inputs: data/probe.npy')}:13: stage 'compare@fp32': 'data/probe.npy': cannot read input file" in failed
    excerpt = out.split("last lines of build/compare__fp32.log:\n", 1)[1].splitlines()
    assert excerpt[0].strip() == "| # ascendpipe stage compare@fp32 (compare), run 1"
    assert excerpt[1].strip().startswith("| error: pipeline.yaml:") and "not a numpy .npy/.npz file" in excerpt[1]


def test_a_log_holding_only_its_header_is_not_shown_as_the_explanation(tmp_path):
    from ascendpipe.engine.progress import Progress

    (tmp_path / "a.log").write_text("# ascendpipe stage s (run), run 1\n")
    (tmp_path / "b.log").write_text("# ascendpipe stage s (run), run 1\nTraceback: boom\n")
    progress = Progress(io.StringIO(), workspace=str(tmp_path))
    assert progress.log_tail("a.log") == ""
    assert progress.log_tail("b.log") == "    last lines of b.log:\n      | # ascendpipe stage s (run), run 1\n      | Traceback: boom\n"


def test_a_typod_field_suggests_the_close_name_and_lists_only_that_kinds_fields(tmp_path, chdir_to, capsys):
    (tmp_path / "p.yaml").write_text("stages:\n  convert:\n    kind: convert\n    modle: models/x.onnx\n")
    chdir_to(tmp_path)
    assert cli(["validate", "p.yaml"]) == 2
    err = capsys.readouterr().err.strip()
    assert err.startswith("ascendpipe: error: p.yaml:4:5: stage 'convert': unknown field 'modle' (did you mean 'model'?)")
    listed = err.split("a 'convert' stage takes: ")[1].split(", ")
    assert listed[0] == "model" and "kind" in listed and not {"cmd", "deps", "outs", "metrics"} & set(listed)


def test_the_compare_table_never_shows_two_ops_alike():
    from ascendpipe.compare.writers import middle_cut, op_labels, terminal_text

    a, b = "/backbone/backbone.0/backbone.0.0/conv1/Conv", "/backbone/backbone.0/backbone.0.1/conv1/Conv"
    assert a[:32] == b[:32]  # what the table showed before: both read alike
    labels = op_labels([a, b, "relu"])
    assert labels[0] != labels[1] and labels[2] == "relu"
    assert all("…" in x for x in labels[:2]) and labels[0].endswith("/conv1/Conv")
    assert middle_cut("x" * 10 + "TAIL", 8).endswith("TAIL") and len(middle_cut("x" * 40, 32)) == 32
    rows = [{"index": i, "side": "both", "op_name": n, "op_type": "Conv", "cosine": 0.5, "max_rel_error": 1.0, "rmse": 0.1,
             "failed": True, "overflow": None} for i, n in enumerate((a, b))]
    result = {"rows": rows, "summary": {"compared_tensors": 2, "golden_only": 0, "target_only": 0, "failed_ops": 2, "overflow_ops": 0},
              "first_failure": None}
    table = terminal_text(result).splitlines()[2:4]
    assert len({line.split()[1] for line in table}) == 2


def test_a_file_deleted_from_an_output_folder_is_named(tmp_path):
    ws = Workspace(tmp_path / "ws")
    ws.build("compare@fp32")
    (ws.root / "build" / "compare__fp32" / "result.json").unlink()
    status = ascendpipe.status(str(ws.pipeline))["stages"]["compare@fp32"]
    assert status["state"] == "stale" and status["reasons"] == ["out build/compare__fp32/result.json deleted"]
    # a file edited in a folder another stage reads: named as the out of one and the dep of the other
    ws.build("score")
    (ws.root / "data" / "prep" / "scale.txt").write_text("7")
    stages = ascendpipe.status(str(ws.pipeline))["stages"]
    assert stages["prep"]["reasons"] == ["out data/prep/scale.txt modified"]
    assert stages["score"]["reasons"][0] == "dep data/prep/scale.txt modified"


def test_fix_names_a_missing_metric_once_and_lists_what_the_stage_reports(failing_compare):
    from ascendpipe.errors import UserError
    from ascendpipe.fix.evaluators import PipelineEvaluator, PipelineTarget

    ws, _, _ = failing_compare
    target = PipelineTarget("convert@fp16", "score", "los", "prep", "compare@fp16", "stages.convert.matrix.fp16")
    evaluator = PipelineEvaluator(str(ws.pipeline), target, tolerance=0.01, build_dir=ws.root / "build")
    record = {"stages": {"score": {"metrics": {"acc": 0.51, "loss": 1.0}}}}
    with pytest.raises(UserError) as exc:
        evaluator._metric(record, "score")
    assert str(exc.value).count("stage 'score'") == 1
    assert "has no metric 'los' (did you mean 'loss'?); it reports: acc, loss" in str(exc.value)


def test_pull_says_restoring_not_running(tmp_path, capsys):
    ws = Workspace(tmp_path / "ws")
    _only(ws, {})
    remote = tmp_path / "remote"
    remote.mkdir()
    out = io.StringIO()
    ascendpipe.pull(str(ws.pipeline), remote=remote.as_uri(), quiet=False, stream=out)
    printed = out.getvalue()
    assert "restoring  prep" in printed and "running" not in printed


def test_fix_table_never_shows_two_remedy_sets_alike():
    from ascendpipe.fix.report import attempt_table
    from ascendpipe.fix.search import KEEP, Attempt, Candidate, Outcome, Result

    ops = [Candidate(KEEP, f"/backbone/backbone.0/layer{i}/Conv") for i in range(4)]
    attempts = [Attempt(1, tuple(ops), "grow", Result(True, 0.9, note="run 4")),
                Attempt(2, tuple(ops[:3]), "shrink", Result(False, 0.1, note="run 5"))]
    table = attempt_table(Outcome(tuple(ops), True, True, attempts, "ok"), "mAP", restore_run=6, width=100).splitlines()
    start, end = table[0].index("remedy set"), table[0].index("mAP")
    remedy = [line[start:end].strip() for line in table[2:4]]
    # too wide for the row: the same op of repeated blocks once, with its count (the full sets are in fix.json)
    assert remedy[0] != remedy[1]
    assert remedy == ["/backbone/backbone.*/layer*/Conv ×4", "/backbone/backbone.*/layer*/Conv ×3"]
    assert table[4].split()[0] == "restore" and "run 6; the workspace back as the pipeline file says" in table[4]
