"""The README's record commands, run as written on a fresh workspace (a copy of the repository's
pipelines): what they print matches what the README says they do, and `checkout` then `build` runs
nothing. Training runs 4 epochs (an overrides file, as `checkout` writes one) to keep it short."""

from __future__ import annotations

import importlib.util
import io
import os
import re
import shlex
import shutil
import stat
from contextlib import redirect_stderr, redirect_stdout
from pathlib import Path

import pytest

import ascendpipe
from ascendpipe.cli.main import main as cli

REPO = Path(__file__).resolve().parents[1]
README = (REPO / "README.md").read_text(encoding="utf-8")


def record_block() -> list[list[str]]:
    """The commands of the README's "Looking at the record" block, comments dropped."""
    section = README.split("### Looking at the record", 1)[1]
    block = section.split("```sh", 1)[1].split("```", 1)[0]
    return [shlex.split(line.split("  #", 1)[0]) for line in block.strip().splitlines()]


def test_the_record_block_quotes_no_run_numbers():
    """Run ids depend on how many builds a workspace has seen: the README names runs as latest / latest~N."""
    commands = record_block()
    assert [c[:2] for c in commands] == [["ascendpipe", "runs"], ["ascendpipe", "show"], ["ascendpipe", "diff"],
                                         ["ascendpipe", "status"], ["ascendpipe", "dag"], ["ascendpipe", "report"],
                                         ["ascendpipe", "checkout"], ["ascendpipe", "export"]]
    for command in commands:
        assert not any(re.fullmatch(r"\d+", arg) for arg in command), command


def run(argv: list[str]) -> tuple[int, str, str]:
    out, err = io.StringIO(), io.StringIO()
    with redirect_stdout(out), redirect_stderr(err):
        try:
            code = cli(argv)
        except SystemExit as exc:  # argparse
            code = exc.code
    return code, out.getvalue(), err.getvalue()


@pytest.fixture(scope="module")
def workspace(tmp_path_factory):
    pytest.importorskip("torch", reason="the ReID example trains with torch: pip install -e '.[examples]'")
    pytest.importorskip("sklearn", reason="the ReID example's data is scikit-learn's digits: pip install -e '.[examples]'")
    ws = tmp_path_factory.mktemp("readme")
    shutil.copytree(REPO / "pipelines", ws / "pipelines")
    (ws / ".ascendpipe").mkdir()
    (ws / "pipelines" / "reid.overrides").write_text("params.epochs=4\n")
    return ws


def test_the_readme_record_commands_on_a_fresh_workspace(workspace, monkeypatch, tmp_path):
    monkeypatch.chdir(workspace)
    monkeypatch.setenv("PATH", f"{Path(os.sys.executable).parent}{os.pathsep}{os.environ.get('PATH', '')}")
    code, out, _ = run(["build", "pipelines/reid.yaml", "-q"])
    assert code == 0 and out.splitlines()[-1].startswith("30 stages: 30 ran")
    # the README's "Incremental" example: only convert@mixed and what follows it rerun
    code, out, _ = run(["build", "pipelines/reid.yaml", "-q", "--set", "stages.convert.matrix.mixed.precision_mode=force_fp16"])
    changed = ascendpipe.show("latest", str(workspace))
    assert code == 0 and {n for n, s in changed["stages"].items() if s["state"] == "ran"} == {
        "convert@mixed", "infer@mixed", "dump@mixed", "compare@mixed", "eval@mixed"}

    seen = {}
    for command in record_block():
        argv = command[1:]
        if argv[0] == "report":
            argv = ["report", "-o", str(tmp_path / "runs.html")]
        if argv[0] == "export":
            argv = ["export", "mlflow", "--tracking-uri", (tmp_path / "mlruns").as_uri()]
        seen[argv[0]] = run(argv)
        if argv[0] == "checkout":
            seen["build after checkout"] = run(["build", "pipelines/reid.yaml"])

    code, out, _ = seen["runs"]
    assert code == 0 and [line.split()[0] for line in out.splitlines()[2:]] == ["2", "1"]
    code, out, _ = seen["show"]
    assert code == 0 and out.startswith(f"run {changed['id']}  pipelines/reid.yaml")
    assert "first failure /ReduceSum (ReduceSum, TbeReduceElemwiseFusionPass, overflow)" in out
    code, out, _ = seen["diff"]
    lines = [line for line in out.splitlines() if "convert@mixed" in line and "precision_mode" in line]
    assert code == 0 and len(lines) == 1 and "allow_fp32_to_fp16" in lines[0] and "force_fp16" in lines[0]
    code, out, _ = seen["status"]
    assert code == 0 and "stale   convert@mixed" in out  # the pipeline as written differs from the last build
    code, out, _ = seen["dag"]
    assert code == 0 and out.startswith("flowchart TD\n") and out.count("-->") >= 29
    code, out, _ = seen["report"]
    assert code == 0 and out.startswith(f"wrote {tmp_path / 'runs.html'}: 2 runs")
    assert stat.S_IMODE((tmp_path / "runs.html").stat().st_mode) == 0o666 & ~_umask()
    code, out, _ = seen["checkout"]
    assert code == 0 and "restored from the cache: convert@mixed, infer@mixed, dump@mixed, compare@mixed, eval@mixed" in out
    assert "now finds run 1's stages fresh" in out
    code, out, _ = seen["build after checkout"]
    assert code == 0 and "30 stages: 30 fresh" in out, out  # checkout then build runs nothing
    code, out, err = seen["export"]
    if importlib.util.find_spec("mlflow") is None:
        assert code == 2 and err.strip() == "ascendpipe: error: exporting to MLflow needs the mlflow package: pip install mlflow-skinny (or a full mlflow)"
    else:
        assert code == 0 and "3 run(s) exported" in out


def fix_command() -> list[str]:
    """The README's `fix` command, as printed after `$ `."""
    line = next(line for line in README.splitlines() if line.startswith("$ ascendpipe fix "))
    return shlex.split(line[2:])


def test_the_readme_fix_then_checkout(workspace, monkeypatch):
    """The README's order: `fix` (its table lists every run it records, the last one putting the
    workspace back), then `checkout latest~1` lands on a fix attempt: the next build runs exactly
    what checkout says it reruns, and nothing else."""
    monkeypatch.chdir(workspace)
    monkeypatch.setenv("PATH", f"{Path(os.sys.executable).parent}{os.pathsep}{os.environ.get('PATH', '')}")
    code, out, _ = run(["build", "pipelines/reid.yaml", "-q"])
    assert code == 0
    before = {r["id"] for r in ascendpipe.runs(str(workspace))}
    code, out, err = run(fix_command()[1:])
    assert code == 0, err
    recorded = sorted({r["id"] for r in ascendpipe.runs(str(workspace))} - before)
    table = out.split("\n\n")[1].splitlines()[2:]
    shown = [int(m.group(1)) for line in table for m in [re.search(r"\brun (\d+)\b", line)] if m]
    assert shown == recorded and len(table) == len(recorded)  # one row per run fix recorded
    assert table[-1].split()[0] == "restore" and f"run {recorded[-1]}; the workspace back as the pipeline file says" in table[-1]
    assert all("(fix attempt)" in line for line in run(["runs"])[1].splitlines()[2:2 + len(recorded)])

    checkout = next(c for c in record_block() if c[1] == "checkout")
    assert checkout[2] == "latest~1"
    code, out, _ = run(checkout[1:])
    assert code == 0
    named = set()
    for line in out.splitlines():
        if line.startswith("the next build reruns "):
            named |= {n.strip() for n in line[len("the next build reruns "):].split(":")[0].split(",")}
    code, out, _ = run(["build", "pipelines/reid.yaml"])
    assert code == 0
    ran = ascendpipe.show("latest", str(workspace))
    assert {n for n, s in ran["stages"].items() if s["state"] == "ran"} == named, out  # what checkout said, nothing else


def _umask() -> int:
    old = os.umask(0o022)
    os.umask(old)
    return old
