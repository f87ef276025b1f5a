"""Malformed pipelines: each gives one clear, located error; nothing is built or recorded."""

from __future__ import annotations

import subprocess
import sys

import pytest

from ascendpipe.errors import UserError


def _build_cli(ws, *args):
    return subprocess.run(
        [sys.executable, "-m", "ascendpipe", "build", "pipeline.yaml", *args], cwd=ws.root, capture_output=True, text=True
    )


def _error(ws, text: str, *args) -> str:
    ws.pipeline(text)
    proc = _build_cli(ws, *args)
    assert proc.returncode == 2, proc.stdout + proc.stderr
    assert "Traceback" not in proc.stderr
    lines = proc.stderr.strip().splitlines()
    assert len(lines) == 1, proc.stderr
    assert not (ws.root / ".ascendpipe" / "ascendpipe.db").exists() or "no runs" in subprocess.run(
        [sys.executable, "-m", "ascendpipe", "runs"], cwd=ws.root, capture_output=True, text=True
    ).stdout
    assert not (ws.root / "data").exists()
    return lines[0]


def test_yaml_syntax_error_has_line_and_column(ws):
    msg = _error(ws, "stages:\n  a:\n    kind: run\n    cmd: [unclosed\n")
    # libyaml reports the unclosed flow sequence where the input ends
    assert msg == "ascendpipe: error: pipeline.yaml:5:1: invalid YAML: did not find expected ',' or ']'"


def test_schema_violation_names_stage_field_and_allowed_values(ws):
    ws.write("m.onnx", "not really")
    msg = _error(
        ws,
        """
        stages:
          convert:
            kind: convert
            model: m.onnx
            params:
              precision_mode: fp17
        """,
    )
    assert "pipeline.yaml:7:" in msg
    assert "stage 'convert'" in msg
    assert "precision_mode 'fp17' is not one of force_fp16" in msg


def test_unknown_kind_lists_kinds(ws):
    msg = _error(ws, "stages:\n  a:\n    kind: compile\n    cmd: x\n")
    assert "pipeline.yaml:3:11" in msg and "'compile' is not one of" in msg and "run" in msg


def test_cycle_is_reported_with_path(ws):
    msg = _error(
        ws,
        """
        stages:
          a: {kind: run, cmd: "cp data/b data/a", deps: [data/b], outs: [data/a]}
          b: {kind: run, cmd: "cp data/a data/b", deps: [data/a], outs: [data/b]}
        """,
    )
    # stages are visited in file order, so the cycle is walked from a
    assert "the stages form a cycle: a -> b -> a; a stage cannot depend on its own outputs" in msg


def test_two_writers_of_one_path(ws):
    msg = _error(
        ws,
        """
        stages:
          a: {kind: run, cmd: "touch data/x", outs: [data/x]}
          b: {kind: run, cmd: "touch data/x", outs: [data/x]}
        """,
    )
    assert "'data/x' is written by both 'a' and 'b'" in msg


def test_out_outside_workspace(ws):
    msg = _error(ws, "stages:\n  a: {kind: run, cmd: 'touch ../x', outs: [../x]}\n")
    assert "pipeline.yaml:2:" in msg and "outside the workspace" in msg and "stage 'a'" in msg


def test_dep_that_nothing_makes(ws):
    msg = _error(ws, "stages:\n  a: {kind: run, cmd: 'true', deps: [nothing/here.txt], outs: [data/a]}\n")
    assert "dep 'nothing/here.txt' does not exist and no stage makes it" in msg and "stage 'a'" in msg


def test_template_error_undefined_param(ws):
    msg = _error(ws, "params: {n: 1}\nstages:\n  a:\n    kind: run\n    cmd: echo {{ params.m }}\n    outs: [data/a]\n")
    assert "pipeline.yaml:5:10" in msg and "'m'" in msg and "params.n" in msg


def test_template_env_not_allow_listed(ws):
    msg = _error(ws, "stages:\n  a:\n    kind: run\n    cmd: echo {{ env.HOME }}\n    outs: [data/a]\n")
    assert "env.HOME is not allow-listed" in msg and "pipeline.yaml:4:" in msg


def test_template_sandbox_blocks_python_internals(ws):
    msg = _error(ws, "stages:\n  a:\n    kind: run\n    cmd: \"{{ ''.__class__.__mro__ }}\"\n    outs: [data/a]\n")
    assert "template error" in msg and "pipeline.yaml:4:" in msg


def test_unknown_stage_target_and_set(ws):
    ws.pipeline("stages:\n  a: {kind: run, cmd: 'mkdir -p data && touch data/a', outs: [data/a]}\n")
    proc = _build_cli(ws, "nope")
    assert proc.returncode == 2 and "unknown stage 'nope'; stages: a" in proc.stderr
    proc = _build_cli(ws, "--set", "stages.zzz.params.n=1")
    assert proc.returncode == 2 and "unknown stage 'zzz'" in proc.stderr


def test_unknown_stage_target_suggests_the_close_name(ws):
    ws.pipeline("stages:\n  compare: {kind: run, cmd: 'mkdir -p data && touch data/a', outs: [data/a]}\n"
                "  other: {kind: run, cmd: 'mkdir -p data && touch data/b', outs: [data/b]}\n")
    proc = _build_cli(ws, "comapre")
    assert proc.returncode == 2
    assert "unknown stage 'comapre' (did you mean 'compare'?); stages: compare, other" in proc.stderr
    assert "Traceback" not in proc.stderr


def test_duplicate_key(ws):
    msg = _error(ws, "stages:\n  a: {kind: run, cmd: x, outs: [data/a]}\n  a: {kind: run, cmd: y, outs: [data/b]}\n")
    assert "duplicate key 'a'" in msg and "pipeline.yaml:3:" in msg


def test_unknown_field_for_kind(ws):
    msg = _error(ws, "stages:\n  a: {kind: run, cmd: x, outz: [data/a]}\n")
    assert "unknown field 'outz'" in msg


def test_user_error_api_is_typed(ws):
    import ascendpipe

    ws.pipeline("stages: {}\n")
    with pytest.raises(UserError):
        ascendpipe.build(str(ws.root / "pipeline.yaml"), quiet=True)


@pytest.mark.parametrize("command", ["build", "validate", "status", "dag"])
def test_a_pipeline_file_that_is_a_fifo_is_refused_without_blocking(tmp_path, command):
    """Reading a FIFO would block until something writes to it: the file is never opened."""
    import os

    os.mkfifo(tmp_path / "p.yaml")
    proc = subprocess.run([sys.executable, "-m", "ascendpipe", command, "p.yaml"], cwd=tmp_path,
                          capture_output=True, text=True, timeout=60)
    assert proc.returncode == 2, proc.stdout + proc.stderr
    assert proc.stderr.strip().splitlines() == [
        "ascendpipe: error: p.yaml: pipeline file p.yaml is a FIFO (named pipe); give the pipeline's YAML file"]


def test_a_dep_that_became_a_fifo_after_a_build_is_refused_not_waited_on(tmp_path):
    """The plan is cached after the first build, so the path rules that refuse a FIFO dep at load time
    do not run again: the hasher itself never opens a file that is not regular."""
    import os

    (tmp_path / "p.yaml").write_text("stages:\n  a:\n    kind: run\n    cmd: cat d.txt > o.txt\n"
                                     "    deps: [d.txt]\n    outs: [o.txt]\n")
    (tmp_path / "d.txt").write_text("hi\n")

    def build():
        return subprocess.run([sys.executable, "-m", "ascendpipe", "build", "p.yaml"], cwd=tmp_path,
                              capture_output=True, text=True, timeout=60)

    assert build().returncode == 0
    (tmp_path / "d.txt").unlink()
    os.mkfifo(tmp_path / "d.txt")
    proc = build()
    assert proc.returncode == 2 and "Traceback" not in proc.stderr
    assert proc.stderr.strip().splitlines() == [
        "ascendpipe: error: d.txt: 'd.txt' is a FIFO (named pipe): a dep or an output must be a regular file or a "
        "folder; replace it"]
    assert (tmp_path / "o.txt").read_text() == "hi\n"  # what was built stays
    (tmp_path / "d.txt").unlink()
    (tmp_path / "d.txt").symlink_to("d.txt")
    proc = build()
    assert proc.returncode == 2
    assert proc.stderr.strip().splitlines() == [
        "ascendpipe: error: d.txt: 'd.txt' cannot be read: Too many levels of symbolic links; replace it"]


def test_with_location_keeps_the_kind_and_exit_code():
    from ascendpipe.errors import Location, UserError

    class Busy(UserError):
        exit_code = 1

    err = Busy("in use", Location(file="a.db"), hint="wait").with_location(stage="s", file="other")
    assert type(err) is Busy and err.exit_code == 1
    assert str(err) == "a.db: stage 's': in use (wait)"
