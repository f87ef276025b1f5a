"""A no-op build in a new process (the resolved pipeline and the kinds' versions from the plan cache,
nothing of the loader imported) still notices every input that makes a stage stale."""

from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
import sys
from pathlib import Path

from tests.engine.conftest import CHAIN
from tests.test_import_graph import PACKAGE_ROOT

ENV_STAGE = """\
  greet:
    kind: run
    cmd: python3 step.py greet data/greet.txt input.txt && echo "{{ env.GREETING }}" >> data/greet.txt
    deps: [step.py, input.txt]
    outs: [data/greet.txt]
"""


def _cli(ws, *args, env=None, pythonpath=None):
    environ = dict(os.environ if env is None else env)
    environ["PYTHONPATH"] = str(pythonpath or PACKAGE_ROOT.parent)
    proc = subprocess.run([sys.executable, "-m", "ascendpipe", *args], cwd=ws.root, env=environ,
                          capture_output=True, text=True, timeout=120)
    assert proc.returncode in (0, 1), proc.stderr
    return proc


def _states(ws, *args, **kw) -> dict[str, str]:
    proc = _cli(ws, "build", "pipeline.yaml", "-q", "--json", *args, **kw)
    return {n: s["state"] for n, s in json.loads(proc.stdout)["stages"].items()}


def _reasons(ws, name, **kw) -> list[str]:
    proc = _cli(ws, "status", "pipeline.yaml", "--json", **kw)
    return json.loads(proc.stdout)["stages"][name]["reasons"]


def test_a_noop_in_a_new_process_notices_deps_outs_set_and_env(ws):
    ws.write("input.txt", "hello")
    ws.pipeline("env: [GREETING]\n" + CHAIN + ENV_STAGE)
    env = dict(os.environ, GREETING="hi")
    assert set(_states(ws, env=env).values()) == {"ran"}
    ws.ran()
    assert set(_states(ws, env=env).values()) == {"fresh"}  # the no-op, from the plan cache
    assert ws.ran() == []

    ws.write("input.txt", "hello again")  # an edited dep
    assert _states(ws, env=env) == {"prepare": "ran", "train": "ran", "report": "ran", "greet": "ran"}
    assert sorted(ws.ran()) == ["greet", "prepare", "report", "train"]

    (ws.root / "data/report.txt").unlink()  # a deleted out: restored from the cache
    assert _states(ws, env=env) == {"prepare": "fresh", "train": "fresh", "report": "restored", "greet": "fresh"}
    assert (ws.root / "data/report.txt").exists()

    # a changed --set: the plan is resolved again, the stage and what follows rerun
    assert _states(ws, "--set", "stages.train.params.lr=0.5", env=env) == {
        "prepare": "fresh", "train": "ran", "report": "ran", "greet": "fresh"}
    assert sorted(ws.ran()) == ["report", "train"]

    # a changed environment variable a template reads
    env["GREETING"] = "hello"
    assert _states(ws, env=env) == {"prepare": "fresh", "train": "restored", "report": "restored", "greet": "ran"}
    assert ws.ran() == ["greet"]
    assert "hello" in (ws.root / "data/greet.txt").read_text()
    assert set(_states(ws, env=env).values()) == {"fresh"}


def _edit(path: Path, pattern: str, repl: str) -> None:
    text = path.read_text()
    new, n = re.subn(pattern, repl, text, count=1, flags=re.M)
    assert n == 1, f"{pattern!r} not found in {path}"
    path.write_text(new)
    st = os.stat(path)  # a new mtime even within the file system's clock tick
    os.utime(path, ns=(st.st_atime_ns, st.st_mtime_ns + 10**9))


def test_a_noop_in_a_new_process_notices_a_new_key_format_and_kind_version(ws, tmp_path):
    """ascendpipe's own code changes (an upgrade): the key format and a kind's version, which a no-op
    reads from the plan cache, are read again."""
    lib = tmp_path / "lib"
    shutil.copytree(PACKAGE_ROOT, lib / "ascendpipe", ignore=shutil.ignore_patterns("__pycache__"))
    ws.write("input.txt", "hello")
    ws.pipeline(CHAIN)
    assert set(_states(ws, pythonpath=lib).values()) == {"ran"}
    assert set(_states(ws, pythonpath=lib).values()) == {"fresh"}
    ws.ran()

    _edit(lib / "ascendpipe/stages/run.py", r'^    version = "1"', '    version = "7"')
    assert _reasons(ws, "prepare", pythonpath=lib) == ["kind version 1 -> 7"]
    assert set(_states(ws, pythonpath=lib).values()) == {"ran"}
    assert set(_states(ws, pythonpath=lib).values()) == {"fresh"}

    _edit(lib / "ascendpipe/graph/key.py", r"^KEY_FORMAT = (\d+)", r"KEY_FORMAT = 99")
    assert "ascendpipe's key format changed" in _reasons(ws, "train", pythonpath=lib)
    assert set(_states(ws, pythonpath=lib).values()) == {"ran"}
    assert sorted(ws.ran()) == ["prepare", "prepare", "report", "report", "train", "train"]


def test_a_noop_imports_no_kind_module_only_running_needs(ws):
    """A convert stage's no-op takes the kind's version from the plan cache: stages/convert.py, and
    precision/ with it (dataclasses, typing), are not imported; nor tempfile or shutil. (hashlib is:
    outputs written under two seconds ago are hashed again, never taken from the stat cache.)"""
    from tests.modelzoo import l2norm_model

    l2norm_model(str(ws.root / "m.onnx"))
    ws.pipeline("stages:\n  convert: {kind: convert, model: m.onnx, params: {precision_mode: force_fp16}}\n")
    assert set(_states(ws).values()) == {"ran"}
    probe = (
        "import sys\n"
        "from ascendpipe.cli.main import main\n"
        "rc = main(['build', 'pipeline.yaml', '-q'])\n"
        "light = ('ascendpipe.stages.convert', 'ascendpipe.precision', 'dataclasses', 'typing', 'tempfile', 'shutil')\n"
        "print(rc, sorted(m for m in sys.modules if m.startswith(light)))\n"
    )
    out = subprocess.run([sys.executable, "-c", probe], cwd=ws.root, capture_output=True, text=True,
                         env=dict(os.environ, PYTHONPATH=str(PACKAGE_ROOT.parent)))
    assert out.returncode == 0, out.stderr
    assert out.stdout.strip().splitlines()[-1] == "0 []"
    # and it is a no-op that decided: the stage is fresh, and a changed precision mode is noticed
    assert _states(ws) == {"convert": "fresh"}
    assert _states(ws, "--set", "stages.convert.params.precision_mode=allow_fp32_to_fp16") == {"convert": "ran"}
