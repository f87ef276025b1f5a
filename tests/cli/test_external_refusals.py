"""Bad external data refused on every command and in a build (issue 48, item 2): one line naming the
tensor, the field and the model, exit 2, no traceback, nothing written (the output folder not made,
the model's folder as it was), and not a byte of a file outside the model's folder copied anywhere."""

from __future__ import annotations

import json
import os
from pathlib import Path

import numpy as np
import pytest

from ascendpipe.cli.main import main
from tests.externaldata import CASES, make_case

# the cases that reach outside, or past what the machine holds, or into onnxruntime's own refusals
SHOWN = ["symlink_outside", "offset_abc", "no_location", "no_length_huge_dims", "unknown_key", "constant_attribute"]
COMMANDS = {
    "convert": lambda m: ["convert", "--model", m, "--output", "out"],
    "infer": lambda m: ["infer", "--model", m, "--input", "x.npy", "--output", "out"],
    "dump": lambda m: ["dump", "--model", m, "--input", "x.npy", "--output", "out"],
    "compare": lambda m: ["compare", "--golden", m, "--target", m, "--input", "x.npy", "--output", "out"],
    "quantize": lambda m: ["quantize", "--model", m, "--calibration", "calib", "--output", "out"],
    "fix": lambda m: ["fix", "--golden", m, "--input", "x.npy", "--output", "out"],
    "profile": lambda m: ["profile", "--model", m, "--input", "x.npy", "--output", "out"],
}
SECRET = bytes(np.float32(7.0).tobytes())  # the outside file holds W x 7: none of it may leave


def _setup(root: Path, case: str) -> Path:
    model = make_case(case, root)
    np.save(root / "x.npy", np.ones((1, 16), np.float32))
    (root / "calib").mkdir()
    np.save(root / "calib" / "x.npy", np.ones((16, 16), np.float32))
    return model


def snapshot(folder: Path) -> dict:
    """Every entry under ``folder`` by its lstat (a 64 GiB sparse file is not read to hash it)."""
    out = {}
    for path in sorted(folder.rglob("*")):
        st = os.lstat(path)
        out[str(path.relative_to(folder))] = (st.st_mode, st.st_size, st.st_mtime_ns, st.st_ino, st.st_nlink)
    return out


def _leaked(root: Path, secret: bytes) -> list[str]:
    """Files under ``root``'s outputs (out/, build/, cache/) holding the outside file's bytes."""
    found = []
    for folder in ("out", "build", "cache"):
        for path in (root / folder).rglob("*") if (root / folder).exists() else []:
            if path.is_file() and not path.is_symlink() and secret in path.read_bytes():
                found.append(str(path))
    return found


@pytest.mark.parametrize("command", sorted(COMMANDS))
@pytest.mark.parametrize("case", SHOWN)
def test_every_command_refuses_bad_external_data_in_one_line_writing_nothing(tmp_path, monkeypatch, capsys,
                                                                               command, case):
    root = tmp_path / "w"
    model = _setup(root, case)
    monkeypatch.chdir(root)
    secret = (root / "secret.bin").read_bytes()[4096:]
    before = snapshot(root / "model")
    code = main(COMMANDS[command](os.path.relpath(model, root)))
    captured = capsys.readouterr()
    lines = [line for line in (captured.err + captured.out).splitlines() if line.strip()]
    assert code == 2, captured
    assert "Traceback" not in captured.err + captured.out
    assert len(lines) == 1, lines
    assert "tensor 'W'" in lines[0] and "external data " in lines[0] and CASES[case] in lines[0], lines[0]
    assert "model/model.onnx" in lines[0]  # the model, named as the user gave it
    assert not (root / "out").exists()  # nothing written
    assert snapshot(root / "model") == before  # the model's folder as it was
    assert _leaked(root, secret) == []


PIPELINES = {
    "source": "stages:\n  src: {kind: source, model: model/model.onnx}\n  conv: {kind: convert, model: src}\n",
    "convert": "stages:\n  conv: {kind: convert, model: model/model.onnx}\n",
    "quantize": "stages:\n  q: {kind: quantize, model: model/model.onnx, calibration: calib}\n",
    "compare": "stages:\n  c: {kind: compare, golden: model/model.onnx, target: model/model.onnx, inputs: x.npy}\n",
}


@pytest.mark.parametrize("pipeline", sorted(PIPELINES))
@pytest.mark.parametrize("case", ["symlink_outside", "offset_hex", "missing"])
def test_a_build_refuses_bad_external_data_at_the_models_field(tmp_path, monkeypatch, capsys, pipeline, case):
    """In a pipeline the refusal comes before any stage runs (the data files are part of the key, each
    reference checked before its file is hashed): one line at the line of the field naming the model,
    exit 2 as for any dep that cannot be read; status gives the same line as the stage's reason;
    nothing is built or cached."""
    root = tmp_path / "w"
    _setup(root, case)
    (root / ".ascendpipe").mkdir()
    (root / "pipeline.yaml").write_text(PIPELINES[pipeline])
    monkeypatch.chdir(root)
    secret = (root / "secret.bin").read_bytes()[4096:]
    code = main(["build", "pipeline.yaml"])
    captured = capsys.readouterr()
    assert code == 2 and "Traceback" not in captured.err + captured.out
    (line,) = [line for line in captured.err.splitlines() if line.strip()]
    assert line.startswith("ascendpipe: error: pipeline.yaml:2:")
    assert "'model/model.onnx': tensor 'W': external data " in line and CASES[case] in line
    assert main(["status", "pipeline.yaml", "--json"]) in (0, 1)
    reasons = json.loads(capsys.readouterr().out)["stages"]
    assert CASES[case] in next(iter(reasons.values()))["reasons"][0]
    assert not (root / "build").exists() or not any((root / "build").rglob("*.onnx"))
    assert _leaked(root, secret) == []
