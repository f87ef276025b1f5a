"""A reader of stdout that goes away in the middle of a command (``ascendpipe build ... | head -3``):
the printing ends quietly, the command does not. The build finishes, records its stages as they
ended (never ``failed: BrokenPipeError``) and exits 0 with nothing on stderr (issue 42)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
STAGES = 5


def _env() -> dict:
    return {**os.environ, "PYTHONPATH": os.pathsep.join(p for p in (str(ROOT), os.environ.get("PYTHONPATH")) if p)}


def _workspace(tmp_path: Path) -> Path:
    ws = tmp_path / "ws"
    (ws / ".ascendpipe").mkdir(parents=True)
    text = "stages:\n"
    for i in range(STAGES):  # each stage waits a little: the reader is gone before the next line
        after = f"\n    deps: [o{i - 1}.txt]" if i else ""
        text += (f"  s{i}:\n    kind: run\n    cmd: python3 -c \"import time; time.sleep(0.3); "
                 f"open('o{i}.txt', 'w').write('{i}')\"{after}\n    outs: [o{i}.txt]\n")
    (ws / "pipeline.yaml").write_text(text)
    return ws


def _first_line_then_gone(ws: Path, *argv: str) -> tuple[int, str, str]:
    """Runs ``ascendpipe ARGV`` with stdout a pipe read for one line and then closed (``| head -1``)."""
    proc = subprocess.Popen([sys.executable, "-m", "ascendpipe", *argv], cwd=ws, stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, env=_env())
    first = proc.stdout.readline().decode()
    proc.stdout.close()
    err = proc.stderr.read().decode()
    return proc.wait(timeout=300), first, err


def test_a_build_whose_reader_goes_away_finishes_and_records_every_stage(tmp_path):
    ws = _workspace(tmp_path)
    code, first, err = _first_line_then_gone(ws, "build", "pipeline.yaml")
    assert (code, err) == (0, ""), err
    assert first.split() == ["running", "s0", "(never", "built)"]
    assert [(ws / f"o{i}.txt").read_text() for i in range(STAGES)] == [str(i) for i in range(STAGES)]
    shown = subprocess.run([sys.executable, "-m", "ascendpipe", "show", "latest", "--json"], cwd=ws,
                           capture_output=True, text=True, env=_env(), timeout=120)
    run = json.loads(shown.stdout)
    assert run["state"] == "done"
    assert {name: s["state"] for name, s in run["stages"].items()} == {f"s{i}": "ran" for i in range(STAGES)}
    again = subprocess.run([sys.executable, "-m", "ascendpipe", "status", "pipeline.yaml", "--json"], cwd=ws,
                           capture_output=True, text=True, env=_env(), timeout=120)
    assert again.returncode == 0
    assert {n: s["state"] for n, s in json.loads(again.stdout)["stages"].items()} == {f"s{i}": "fresh" for i in range(STAGES)}


def test_a_listing_whose_reader_goes_away_ends_quietly(tmp_path):
    ws = _workspace(tmp_path)
    for _ in range(3):
        assert subprocess.run([sys.executable, "-m", "ascendpipe", "build", "pipeline.yaml", "--force", "s0"],
                              cwd=ws, capture_output=True, env=_env(), timeout=300).returncode == 0
    for argv in (["runs"], ["show", "latest"], ["dag", "pipeline.yaml"], ["status", "pipeline.yaml"]):
        code, first, err = _first_line_then_gone(ws, *argv)
        assert (code, err) == (0, ""), (argv, err)
        assert first.strip(), argv


def test_a_build_whose_reader_of_both_streams_goes_away_finishes(tmp_path):
    """`ascendpipe build ... 2>&1 | head -1`: stderr's reader is gone too (a stage's warning, a waiting
    line): the build still finishes and records every stage."""
    ws = _workspace(tmp_path)
    proc = subprocess.Popen([sys.executable, "-m", "ascendpipe", "build", "pipeline.yaml"], cwd=ws,
                            stdout=subprocess.PIPE, stderr=subprocess.STDOUT, env=_env())
    proc.stdout.readline()
    proc.stdout.close()
    assert proc.wait(timeout=300) == 0
    shown = subprocess.run([sys.executable, "-m", "ascendpipe", "show", "latest", "--json"], cwd=ws,
                           capture_output=True, text=True, env=_env(), timeout=120)
    run = json.loads(shown.stdout)
    assert run["state"] == "done" and {s["state"] for s in run["stages"].values()} == {"ran"}
