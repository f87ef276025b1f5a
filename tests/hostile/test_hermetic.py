"""Hermetic by default: a build and the standalone commands write nothing outside the workspace.

Every command runs with HOME and TMPDIR pointed at empty folders (and no XDG/matplotlib folders
set, so a library falls back to them), with ORT_DISABLE_TELEMETRY unset: onnxruntime's telemetry
(a device id and a database under ~/.cache/Microsoft/DeveloperTools/.onnxruntime/, $TMPDIR/.ses) is
off unless the user turns it on, and nothing else lands there either."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import numpy as np
import yaml

from tests.explorer.conftest import PIPELINE, l2_model

ROOT = Path(__file__).resolve().parents[2]


def _env(home: Path, tmp: Path, **extra) -> dict:
    env = {k: v for k, v in os.environ.items()
           if k not in ("ORT_DISABLE_TELEMETRY", "XDG_CACHE_HOME", "XDG_CONFIG_HOME", "XDG_DATA_HOME", "MPLCONFIGDIR")}
    env.update(HOME=str(home), TMPDIR=str(tmp), PYTHONPATH=str(ROOT), **extra)
    return env


def _everything(folder: Path) -> list[str]:
    return sorted(str(p.relative_to(folder)) for p in folder.rglob("*"))


def test_a_build_and_every_command_leave_home_and_tmpdir_empty(tmp_path):
    ws = tmp_path / "ws"
    (ws / ".ascendpipe").mkdir(parents=True)
    l2_model(ws / "models" / "l2.onnx")
    (ws / "data").mkdir()
    np.save(ws / "data" / "probe.npy", np.random.default_rng(0).uniform(20, 40, size=(2, 64)).astype(np.float32))
    (ws / "pipeline.yaml").write_text(yaml.safe_dump(PIPELINE, sort_keys=False))
    home, tmp = tmp_path / "home", tmp_path / "tmp"
    home.mkdir()
    tmp.mkdir()
    env = _env(home, tmp)
    commands = [
        ["build", "pipeline.yaml"],
        ["status", "pipeline.yaml"],
        ["runs"],
        ["show", "latest"],
        ["convert", "--model", "models/l2.onnx", "--output", "out/convert"],
        ["infer", "--model", "out/convert/model.onnx", "--input", "data/probe.npy", "--output", "out/infer"],
        ["dump", "--model", "models/l2.onnx", "--input", "data/probe.npy", "--output", "out/dump"],
        ["compare", "--golden", "models/l2.onnx", "--target", "out/convert", "--input", "data/probe.npy",
         "--output", "out/compare"],
        ["profile", "--model", "models/l2.onnx", "--input", "data/probe.npy", "--output", "out/profile",
         "--iterations", "2", "--warmup", "0"],
        ["tune", "--model", "models/l2.onnx", "--input", "data/probe.npy", "--output", "out/tune", "--repeats", "3",
         "--iterations", "1", "--max-candidates", "1"],
        ["fix", "--golden", "models/l2.onnx", "--input", "data/probe.npy", "--output", "out/fix", "--max-attempts", "1"],
        ["quantize", "--model", "models/l2.onnx", "--calibration", "data/probe.npy", "--output", "out/quantize"],
        ["import", "out/profile"],
        ["report", "-o", "out/runs.html"],
        ["diff", "1", "1"],
        ["dag", "pipeline.yaml"],
        ["validate", "pipeline.yaml"],
        ["doctor"],
        ["push", "pipeline.yaml", "--remote", "remote"],
        ["pull", "pipeline.yaml", "--remote", "remote"],
        ["checkout", "1"],
        ["gc"],
    ]
    for args in commands:
        proc = subprocess.run([sys.executable, "-m", "ascendpipe", *args], cwd=ws, env=env, capture_output=True, text=True)
        # a build's compare@fp16 fails its thresholds by design (exit 1); nothing may crash
        assert proc.returncode in (0, 1), (args, proc.stdout[-2000:], proc.stderr[-2000:])
        assert "Traceback" not in proc.stderr, (args, proc.stderr)
        assert _everything(home) == [], (args, _everything(home))
        assert _everything(tmp) == [], (args, _everything(tmp))
    assert (ws / "out" / "profile").is_dir() and (ws / "out" / "compare").is_dir()


def test_telemetry_is_off_by_default_in_our_process_and_its_stages_and_a_user_can_turn_it_on(tmp_path):
    home, tmp = tmp_path / "home", tmp_path / "tmp"
    home.mkdir()
    tmp.mkdir()
    ws = tmp_path / "ws"
    (ws / ".ascendpipe").mkdir(parents=True)
    cmd = "python -c \"import os; open('seen.txt', 'w').write(os.environ.get('ORT_DISABLE_TELEMETRY', 'unset'))\""
    (ws / "pipeline.yaml").write_text(yaml.safe_dump({"stages": {"env": {"kind": "run", "cmd": cmd, "outs": ["seen.txt"]}}}))
    for given, seen in ((None, "1"), ("0", "0")):
        extra = {} if given is None else {"ORT_DISABLE_TELEMETRY": given}
        proc = subprocess.run([sys.executable, "-m", "ascendpipe", "build", "pipeline.yaml", "--force"], cwd=ws,
                              env=_env(home, tmp, **extra), capture_output=True, text=True)
        assert proc.returncode == 0, proc.stderr
        assert (ws / "seen.txt").read_text() == seen  # a stage command inherits what we set (or the user did)
        probe = subprocess.run([sys.executable, "-c", "import os, ascendpipe; print(os.environ['ORT_DISABLE_TELEMETRY'])"],
                               env=_env(home, tmp, **extra), capture_output=True, text=True)
        assert probe.stdout.strip() == seen
