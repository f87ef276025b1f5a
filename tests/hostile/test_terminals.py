"""Consoles that cannot take escape codes, and a console that goes away (issue 48 item 7).

On a real terminal (a pty): ``TERM=dumb`` gets no escape code and no line redrawn with ``\\r`` (the build's
lines, compare's table, infer's bar), ``NO_COLOR`` no escape code; a terminal that hangs up in the middle of
a build (its other side closed: write(2) then fails with EIO) makes the output go quiet, while the build
finishes, exits 0 and records every stage as it ran (it was recorded failed)."""

from __future__ import annotations

import json
import os
import pty
import subprocess
import sys
import termios
from pathlib import Path

import numpy as np
import pytest

from tests.modelzoo import conv_bn_relu_model

ROOT = Path(__file__).resolve().parents[2]
STAGES = 5


def _env(**extra) -> dict:
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(p for p in (str(ROOT), os.environ.get("PYTHONPATH")) if p)}
    for name in ("NO_COLOR", "TERM"):
        env.pop(name, None)
    return {**env, "TERM": "xterm-256color", **extra}


def _workspace(tmp_path: Path) -> Path:
    ws = tmp_path / "ws"
    (ws / ".ascendpipe").mkdir(parents=True)
    text = "stages:\n"
    for i in range(STAGES):  # each stage waits a little: the terminal is gone before the next line
        after = f"\n    deps: [o{i - 1}.txt]" if i else ""
        text += (f"  s{i}:\n    kind: run\n    cmd: python3 -c \"import time; time.sleep(0.3); "
                 f"open('o{i}.txt', 'w').write('{i}')\"{after}\n    outs: [o{i}.txt]\n")
    (ws / "pipeline.yaml").write_text(text)
    conv_bn_relu_model(ws / "m.onnx")
    return ws


def _on_a_terminal(argv: list[str], cwd: Path, env: dict) -> tuple[int, bytes]:
    """Run ``ascendpipe ARGV`` with stdout and stderr on a pty whose output is passed as written (no \\n ->
    \\r\\n translation), and everything it printed."""
    leader, follower = pty.openpty()
    attrs = termios.tcgetattr(follower)
    attrs[1] &= ~termios.OPOST  # the terminal adds no \r of its own: every \r seen is the program's
    termios.tcsetattr(follower, termios.TCSANOW, attrs)
    proc = subprocess.Popen([sys.executable, "-m", "ascendpipe", *argv], cwd=cwd, stdout=follower, stderr=follower,
                            env=env)
    os.close(follower)
    chunks = []
    while True:
        try:
            chunk = os.read(leader, 65536)
        except OSError:  # EIO: the program closed its side and all was read
            break
        if not chunk:
            break
        chunks.append(chunk)
    os.close(leader)
    return proc.wait(timeout=300), b"".join(chunks)


@pytest.mark.parametrize("name,value", [("TERM", "dumb"), ("NO_COLOR", "1")])
def test_a_console_that_takes_no_escape_codes_gets_none(tmp_path, name, value):
    ws = _workspace(tmp_path)
    np.save(ws / "x.npy", np.random.default_rng(0).standard_normal((4, 3, 16, 16)).astype(np.float32))
    code, coloured = _on_a_terminal(["build", "pipeline.yaml"], ws, _env())
    assert code == 0 and b"\033[" in coloured  # on a plain terminal the states are painted
    for argv in (["build", "pipeline.yaml", "--force", "s0"],
                 ["compare", "--golden", "m.onnx", "--target", "m.onnx", "--input", "x.npy"],
                 ["infer", "--model", "m.onnx", "--input", "x.npy", "--output", "o", "--batch-size", "1"]):
        code, out = _on_a_terminal(argv, ws, _env(**{name: value}))
        assert code == 0, out
        assert b"\033" not in out, (argv, out)
        if name == "TERM":  # a dumb terminal redraws nothing: infer's bar becomes lines
            assert b"\r" not in out, (argv, out)
    if name == "TERM":
        assert b"infer: 4/4 batches (100%)" in out
    else:  # NO_COLOR: the bar is still redrawn (\r is no escape code)
        assert b"\rinfer [" in out


def test_a_terminal_that_hangs_up_mid_build_never_fails_a_stage(tmp_path):
    ws = _workspace(tmp_path)
    leader, follower = pty.openpty()
    proc = subprocess.Popen([sys.executable, "-m", "ascendpipe", "build", "pipeline.yaml"], cwd=ws, stdout=follower,
                            stderr=follower, env=_env())
    os.close(follower)
    first = b""
    while b"\n" not in first:
        first += os.read(leader, 1024)
    os.close(leader)  # the terminal goes away: every later write of the build meets EIO
    assert b"s0" in first.split(b"\n")[0]
    assert proc.wait(timeout=300) == 0
    assert [(ws / f"o{i}.txt").read_text() for i in range(STAGES)] == [str(i) for i in range(STAGES)]
    shown = subprocess.run([sys.executable, "-m", "ascendpipe", "show", "latest", "--json"], cwd=ws,
                           capture_output=True, text=True, env=_env(), timeout=120)
    run = json.loads(shown.stdout)
    assert run["state"] == "done"
    assert {name: s["state"] for name, s in run["stages"].items()} == {f"s{i}": "ran" for i in range(STAGES)}


def test_a_write_that_meets_a_hung_up_terminal_is_quiet_and_any_other_error_is_not():
    import errno

    from ascendpipe.cli.main import _ReaderMayGo

    class HungUp:
        def __init__(self, code):
            self.code, self.writes = code, 0

        def write(self, text):
            self.writes += 1
            raise OSError(self.code, os.strerror(self.code))

        def flush(self):
            raise OSError(self.code, os.strerror(self.code))

        def fileno(self):
            raise ValueError("no descriptor")  # _quiet_stdout cannot redirect it: nothing else happens

    for code in (errno.EIO, errno.EPIPE, errno.ENXIO):
        stream = _ReaderMayGo(HungUp(code))
        assert stream.write("line\n") == 5 and stream.reader_gone
        stream.write("more\n"), stream.flush()
        assert stream._stream.writes == 1  # quiet from then on
    with pytest.raises(OSError):  # a full disk under a redirected stdout is not a reader gone
        _ReaderMayGo(HungUp(errno.ENOSPC)).write("x")
