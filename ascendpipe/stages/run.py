"""The generic ``run`` kind: a shell command with declared deps and outs, as in DVC.

The command runs in the workspace root through ``/bin/sh -c``, with stdout and stderr going to the
stage's log, and with the folder of the Python running ascendpipe first on ``PATH`` (so ``python``
is the venv's interpreter even when the venv is not activated). It sees its params as JSON in ``ASCENDPIPE_PARAMS`` and its name in
``ASCENDPIPE_STAGE``. Declared outs are deleted before it runs (a stale output must never pass for
a new one) and must all exist after it succeeds. Every value a template pastes into the command was
shell-quoted when the pipeline was resolved (config/template.py; ``| raw`` opts out), and the path
rules (config/paths.py) keep outs away from the workspace's own state before this deletes them.
"""

from __future__ import annotations

import json
import os

from ascendpipe.errors import StageFailed
from ascendpipe.stages.base import StageKind, StageResult


class RunKind(StageKind):
    name = "run"
    version = "1"
    summary = "run a shell command with declared deps and outs"
    params_schema = {"type": "object"}

    def execute(self, stage, workspace: str, log_path: str) -> StageResult:
        import shutil
        import subprocess

        for out in stage.outs:
            target = os.path.join(workspace, out)
            if os.path.isdir(target) and not os.path.islink(target):
                shutil.rmtree(target)
            elif os.path.lexists(target):
                os.unlink(target)
            os.makedirs(os.path.dirname(target) or workspace, exist_ok=True)
        env = dict(os.environ)
        # `python` in a command means the interpreter running ascendpipe (its venv), even when the
        # venv is not activated: `.venv/bin/ascendpipe build` must not run the system python
        import sys

        bindir = os.path.dirname(sys.executable)
        env["PATH"] = bindir + os.pathsep + env.get("PATH", "") if bindir else env.get("PATH", "")
        env["ASCENDPIPE_PARAMS"] = json.dumps(stage.params, sort_keys=True, default=str)
        env["ASCENDPIPE_STAGE"] = stage.name
        with open(log_path, "ab") as log:
            log.write(f"$ {stage.cmd}\n".encode())
            log.flush()
            proc = subprocess.run(["/bin/sh", "-c", stage.cmd], cwd=workspace, env=env, stdout=log, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL)
        if proc.returncode != 0:
            raise StageFailed(stage.name, f"command exited with code {proc.returncode}", log_path)
        missing = [o for o in stage.outs if not os.path.exists(os.path.join(workspace, o))]
        if missing:
            raise StageFailed(stage.name, f"the command succeeded but did not write {', '.join(missing)}", log_path)
        metrics = {}
        if stage.metrics_file:
            metrics = read_metrics_file(os.path.join(workspace, stage.metrics_file), stage.name, log_path)
        return StageResult(metrics=metrics)


def read_metrics_file(path: str, stage: str, log_path: str) -> dict:
    from ascendpipe.errors import UserError
    from ascendpipe.userfile import load_json

    if not os.path.lexists(path):
        raise StageFailed(stage, f"metrics file {path} was not written", log_path)
    try:
        data = load_json(path, "metrics file")  # malformed, nested past reading, too large: one line
    except UserError as exc:
        raise StageFailed(stage, str(exc), log_path) from None
    return flatten_numbers(data)


def flatten_numbers(data, prefix: str = "") -> dict:
    """Nested numbers as dotted keys: {"eval": {"mAP": 0.8}} -> {"eval.mAP": 0.8}."""
    out = {}
    if isinstance(data, dict):
        for k, v in data.items():
            out.update(flatten_numbers(v, f"{prefix}{k}."))
    elif isinstance(data, bool):
        out[prefix[:-1]] = data
    elif isinstance(data, (int, float)):
        out[prefix[:-1]] = data
    return out
