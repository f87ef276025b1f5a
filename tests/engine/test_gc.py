"""gc: leftovers of killed builds go, the user's files stay; `--runs KEEP` keeps the newest runs and
those that built the current outputs (checkout then still restores nothing-to-run)."""

from __future__ import annotations

import os
import signal
import subprocess
import sys

import ascendpipe
from tests.engine.conftest import CHAIN
from tests.engine.test_robustness import _spawn_build, _wait_for

SLOW_BUILTIN = """\
import os, time
open("started.flag", "w").close()
time.sleep(60)
"""


def test_gc_removes_the_temp_folders_a_killed_build_left_and_nothing_else(ws):
    ws.write("input.txt", "hello")
    ws.pipeline(CHAIN)
    ws.build()
    leftovers = [
        ws.root / "build" / ".tmp-convert__fp16-abc123",  # a built-in stage's temp output folder
        ws.root / "data" / ".tmp-raw.txt.x1y2.tmp",  # an atomic write
        ws.root / "data" / ".tmp-old-zz",  # replace_path's aside folder
        ws.root / "cache" / "objects" / "ab" / ".tmp-cdef.q9.tmp",  # a half-written object
    ]
    for path in leftovers:
        path.parent.mkdir(parents=True, exist_ok=True)
        if path.name.endswith(".tmp"):
            path.write_text("partial")
        else:
            path.mkdir()
            (path / "part.bin").write_text("partial")
    mine = ws.root / "data" / ".tmp-notes"  # not a name our writers make: the user's
    mine.write_text("keep me")
    dry = ascendpipe.gc(str(ws.root), dry_run=True)
    assert sorted(dry["removed_temp"]) == sorted(str(p.relative_to(ws.root)) for p in leftovers)
    assert all(p.exists() for p in leftovers)
    result = ascendpipe.gc(str(ws.root))
    assert sorted(result["removed_temp"]) == sorted(str(p.relative_to(ws.root)) for p in leftovers)
    assert not any(p.exists() for p in leftovers)
    assert mine.read_text() == "keep me"
    run = ws.build()
    assert set(ws.states(run).values()) == {"fresh"}


def test_gc_after_a_real_kill_removes_the_temp_output(ws):
    ws.write("slow_kind.py", SLOW_BUILTIN)
    # a run stage writing through the same temp-folder discipline: mkdir .tmp-<out>- then rename
    ws.pipeline("""\
stages:
  slow:
    kind: run
    cmd: mkdir -p build/.tmp-slow-k1 && python3 slow_kind.py && mv build/.tmp-slow-k1 build/slow
    deps: [slow_kind.py]
    outs: [build/slow]
""")
    proc = _spawn_build(ws)
    _wait_for(ws.root / "started.flag", proc)
    os.killpg(proc.pid, signal.SIGKILL)
    proc.wait()
    assert (ws.root / "build" / ".tmp-slow-k1").is_dir()
    result = ascendpipe.gc(str(ws.root))
    assert result["removed_temp"] == [os.path.join("build", ".tmp-slow-k1")]
    assert not (ws.root / "build" / ".tmp-slow-k1").exists()


def test_gc_runs_keeps_the_newest_and_those_that_built_the_current_outputs(ws):
    ws.write("input.txt", "hello")
    ws.pipeline(CHAIN)
    ws.build()  # run 1 builds prepare, train, report
    for lr in ("0.2", "0.3", "0.4"):
        ws.build(set=[f"stages.train.params.lr={lr}"])  # runs 2-4: train and report
    ws.build(set=["stages.train.params.lr=0.4"])  # run 5: a no-op
    assert [r["id"] for r in ascendpipe.runs(str(ws.root))] == [5, 4, 3, 2, 1]
    proc = subprocess.run([sys.executable, "-m", "ascendpipe", "gc", "--runs", "1"], cwd=ws.root, capture_output=True, text=True)
    assert proc.returncode == 0, proc.stderr
    assert "removed 2 run records, kept 3" in proc.stdout
    # 5 is the newest; 4 built train's and report's current outputs; 1 built prepare's
    assert [r["id"] for r in ascendpipe.runs(str(ws.root))] == [5, 4, 1]
    assert ascendpipe.show(4, workspace=str(ws.root))["stages"]["train"]["params"]["lr"] == 0.4
    # the run-cache is untouched: settings seen before still come back without running
    ws.ran()
    back = ws.build(set=["stages.train.params.lr=0.2"])
    assert ws.states(back) == {"prepare": "fresh", "train": "restored", "report": "restored"}
    assert ws.ran() == []
    alias = subprocess.run([sys.executable, "-m", "ascendpipe", "runs", "--prune", "0", "--json"], cwd=ws.root,
                           capture_output=True, text=True)
    assert alias.returncode == 0, alias.stderr
    import json

    result = json.loads(alias.stdout)
    assert result["kept_runs"] == [6, 1]  # the current outputs' runs only (6 restored train and report)
    assert result["removed_runs"] == [5, 4]


def test_gc_finds_the_temp_output_of_a_never_recorded_stage_in_a_build_dir_of_its_own(ws):
    # the stage's build was killed before it was recorded: only the pipeline's claim names its folder
    ws.pipeline("build_dir: out/mine\nstages:\n  s:\n    kind: source\n    model: missing.onnx\n")
    (ws.root / "missing.onnx").write_text("not a model")
    assert ws.build()["stages"]["s"]["state"] == "failed"
    leftover = ws.root / "out" / "mine" / ".tmp-s-k1"
    leftover.mkdir(parents=True)
    (leftover / "model.onnx").write_text("partial")
    stranger = ws.root / "out" / "mine" / ".tmp-other-k1"  # no stage of ours is named `other`
    stranger.mkdir()
    assert ascendpipe.gc(str(ws.root))["removed_temp"] == [os.path.join("out", "mine", ".tmp-s-k1")]
    assert not leftover.exists() and stranger.is_dir()
