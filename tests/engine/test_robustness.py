"""Kills, corruption, concurrent builds, parallelism and failures."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time

from tests.engine.conftest import CHAIN

SLOW = """\
stages:
  first:
    kind: run
    cmd: python3 step.py first data/first.txt
    deps: [step.py]
    outs: [data/first.txt]
  slow:
    kind: run
    cmd: python3 slow.py
    deps: [data/first.txt, slow.py]
    outs: [data/slow.txt]
"""

SLOW_PY = """\
import os, time
with open("data/slow.txt", "w") as f:
    f.write("partial")
    f.flush()
    open("started.flag", "w").close()
    deadline = time.time() + 60
    while not os.path.exists("finish.flag") and time.time() < deadline:
        time.sleep(0.05)
    f.write(" complete")
"""


def _default_sigint() -> None:
    # A build at a terminal has ^C's default disposition; a test run started in the background
    # (``cmd &`` in a script) hands its children SIGINT ignored, which a build rightly keeps (nohup).
    signal.signal(signal.SIGINT, signal.SIG_DFL)


def _spawn_build(ws, *args):
    return subprocess.Popen(
        [sys.executable, "-m", "ascendpipe", "build", "pipeline.yaml", *args],
        cwd=ws.root, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, start_new_session=True,
        preexec_fn=_default_sigint,
    )


def _wait_for(path, proc, timeout=90):
    deadline = time.monotonic() + timeout
    while not path.exists():
        if proc.poll() is not None:
            raise AssertionError(f"build ended early ({proc.returncode}): {proc.stdout.read()} {proc.stderr.read()}")
        assert time.monotonic() < deadline, f"{path} never appeared"
        time.sleep(0.05)


def kill_mid_stage(ws) -> None:
    """Build the SLOW pipeline in a child process and SIGKILL it (and its stage command) mid-stage."""
    ws.pipeline(SLOW)
    ws.write("slow.py", SLOW_PY)
    proc = _spawn_build(ws)
    _wait_for(ws.root / "started.flag", proc)
    os.killpg(proc.pid, signal.SIGKILL)
    proc.wait()


def test_sigkill_mid_stage_leaves_nothing_marked_built(ws):
    kill_mid_stage(ws)
    assert (ws.root / "data/slow.txt").read_text() == "partial"
    assert ws.ran() == ["first"]
    (ws.root / "finish.flag").write_text("")
    status = __import__("ascendpipe").status(str(ws.root / "pipeline.yaml"))
    assert status["stages"]["first"]["state"] == "fresh"
    assert status["stages"]["slow"] == {"state": "stale", "reasons": ["never built"]}
    run = ws.build()
    assert ws.states(run) == {"first": "fresh", "slow": "ran"}
    assert (ws.root / "data/slow.txt").read_text() == "partial complete"


def test_second_build_waits_or_names_the_lock_holder(ws):
    ws.pipeline(SLOW)
    ws.write("slow.py", SLOW_PY)
    proc = _spawn_build(ws)
    try:
        _wait_for(ws.root / "started.flag", proc)
        other = subprocess.run(
            [sys.executable, "-m", "ascendpipe", "build", "pipeline.yaml", "--no-wait"], cwd=ws.root, capture_output=True, text=True
        )
        assert other.returncode == 2
        # the holder is named with the command as typed, whatever python -m put in argv[0]
        assert f"another build holds the workspace lock: pid {proc.pid} (`ascendpipe build pipeline.yaml`, since " \
            in other.stderr
    finally:
        (ws.root / "finish.flag").write_text("")
        proc.wait(timeout=60)
    assert proc.returncode == 0


def test_corrupted_cache_object_is_caught_and_rebuilt(ws):
    ws.write("input.txt", "hello")
    ws.pipeline(CHAIN)
    first = ws.build()
    digest = first["stages"]["report"]["outputs"]["data/report.txt"]
    good = (ws.root / "data/report.txt").read_text()
    ws.build(set=["stages.train.params.lr=0.7"])
    obj = ws.root / "cache" / "objects" / digest[:2] / digest[2:]
    obj.write_text("bit rot")
    ws.ran()
    run = ws.build()  # train restores fine; report's object is corrupt -> it runs
    assert ws.states(run) == {"prepare": "fresh", "train": "restored", "report": "ran"}
    assert run["stages"]["report"]["reasons"][-1] == f"cache object {digest[:12]} is corrupted (content hashes to " \
        f"{__import__('hashlib').sha256(b'bit rot').hexdigest()[:12]}); rebuilt"  # kept in the record
    assert ws.ran() == ["report"]
    assert (ws.root / "data/report.txt").read_text() == good
    assert obj.read_text() == good  # the object was replaced by a good copy


def test_keep_going_skips_dependents_and_runs_the_rest_in_parallel(ws):
    ws.pipeline(
        """
        stages:
          bad: {kind: run, cmd: "echo boom >&2; exit 4", outs: [data/bad]}
          after_bad: {kind: run, cmd: "cp data/bad data/after", deps: [data/bad], outs: [data/after]}
          good1: {kind: run, cmd: "python3 step.py good1 data/g1", outs: [data/g1]}
          good2: {kind: run, cmd: "python3 step.py good2 data/g2", outs: [data/g2]}
        """
    )
    run = ws.build(keep_going=True, jobs=2)
    assert ws.states(run) == {"bad": "failed", "after_bad": "skipped", "good1": "ran", "good2": "ran"}
    assert "exited with code 4" in run["stages"]["bad"]["error"]
    log = ws.root / run["stages"]["bad"]["log"]
    assert "boom" in log.read_text()
    assert sorted(ws.ran()) == ["good1", "good2"]


def test_failure_output_is_shown_with_log_path(ws):
    ws.pipeline('stages:\n  bad: {kind: run, cmd: "echo the-reason >&2; exit 1", outs: [data/bad]}\n')
    proc = subprocess.run([sys.executable, "-m", "ascendpipe", "build", "pipeline.yaml"], cwd=ws.root, capture_output=True, text=True)
    assert proc.returncode == 1
    assert "FAILED" in proc.stdout and "the-reason" in proc.stdout and "build/bad.log" in proc.stdout


def test_missing_out_after_command_is_a_failure(ws):
    ws.pipeline('stages:\n  lazy: {kind: run, cmd: "true", outs: [data/never]}\n')
    run = ws.build()
    assert run["stages"]["lazy"]["state"] == "failed"
    assert "did not write data/never" in run["stages"]["lazy"]["error"]


def test_python_in_a_command_is_ascendpipes_interpreter(ws):
    ws.pipeline('stages:\n  which: {kind: run, cmd: "python -c \'import sys; print(sys.executable)\' > data/py.txt", outs: [data/py.txt]}\n')
    (ws.root / "data").mkdir()
    env = {k: v for k, v in os.environ.items() if k != "VIRTUAL_ENV"}
    env["PATH"] = "/usr/bin:/bin:" + env.get("PATH", "")  # a system python first, as without activation
    proc = subprocess.run([sys.executable, "-m", "ascendpipe", "build", "pipeline.yaml"], cwd=ws.root, env=env,
                          capture_output=True, text=True)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert os.path.dirname((ws.root / "data/py.txt").read_text().strip()) == os.path.dirname(sys.executable)
