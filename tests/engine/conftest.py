"""Workspaces for engine tests: a folder with `.ascendpipe/`, scripts that count their runs."""

from __future__ import annotations

import io
import os
import textwrap
from pathlib import Path

import pytest

import ascendpipe

STEP = """\
import json, os, sys
# usage: step.py NAME OUT [IN...]: appends NAME to runs.log, writes OUT from the inputs and params
name, out, *ins = sys.argv[1:]
with open(os.environ["RUNLOG"], "a") as f:
    f.write(name + "\\n")
params = json.loads(os.environ.get("ASCENDPIPE_PARAMS", "{}"))
text = "|".join(open(i).read() for i in ins) + json.dumps(params, sort_keys=True)
os.makedirs(os.path.dirname(out) or ".", exist_ok=True)
open(out, "w").write(text)
"""


class WS:
    def __init__(self, root: Path):
        self.root = root
        (root / ".ascendpipe").mkdir(parents=True, exist_ok=True)
        (root / "step.py").write_text(STEP)
        self.runlog = root.parent / f"{root.name}-runs.log"
        os.environ["RUNLOG"] = str(self.runlog)

    def write(self, rel: str, text: str) -> Path:
        p = self.root / rel
        p.parent.mkdir(parents=True, exist_ok=True)
        p.write_text(textwrap.dedent(text))
        return p

    def pipeline(self, text: str, name: str = "pipeline.yaml") -> Path:
        return self.write(name, text)

    def ran(self) -> list[str]:
        """Stage scripts that ran since the last call."""
        if not self.runlog.exists():
            return []
        names = self.runlog.read_text().split()
        self.runlog.unlink()
        return names

    def build(self, *args, **kw):
        kw.setdefault("quiet", True)
        kw.setdefault("stream", io.StringIO())
        return ascendpipe.build(str(self.root / "pipeline.yaml"), *args, **kw)

    def states(self, run: dict) -> dict[str, str]:
        return {n: s["state"] for n, s in run["stages"].items()}


@pytest.fixture
def ws(tmp_path, monkeypatch):
    root = tmp_path / "ws"
    root.mkdir()
    monkeypatch.chdir(root)
    w = WS(root)
    yield w
    os.environ.pop("RUNLOG", None)


CHAIN = """\
params:
  scale: 1
stages:
  prepare:
    kind: run
    cmd: python3 step.py prepare data/raw.txt input.txt
    deps: [step.py, input.txt]
    outs: [data/raw.txt]
    params: {n: 16}
  train:
    kind: run
    cmd: python3 step.py train data/model.txt data/raw.txt
    deps: [data/raw.txt]
    outs: [data/model.txt]
    params: {lr: 0.1}
  report:
    kind: run
    cmd: python3 step.py report data/report.txt data/model.txt
    deps: [data/model.txt]
    outs: [data/report.txt]
"""


def built_chain(ws) -> dict:
    """``CHAIN`` built once in ``ws`` (its run record); the run log emptied."""
    ws.write("input.txt", "hello")
    ws.pipeline(CHAIN)
    first = ws.build()
    assert first["state"] == "done"
    ws.ran()
    return first
