"""quantize works on a copy of the model inside its output (issue 48, item 4): onnxruntime's quantizer
writes ``<model>-inferred.onnx`` beside the model it is given and deletes it, so a user's own file of
that name was deleted and a read-only model folder was a traceback. Now nothing beside the user's
model is written, changed or deleted; an external-data model quantizes (its weights under the
quantized model's own name); a model past what memory holds is refused with the numbers."""

from __future__ import annotations

import json
import os
import subprocess
from pathlib import Path

import numpy as np
import onnxruntime as ort
import pytest

from ascendpipe.cli.main import main
from tests import modelzoo


def _state(folder: Path) -> dict:
    return {p.name: (p.stat().st_ino, p.stat().st_mtime_ns, p.read_bytes()) for p in sorted(folder.iterdir())}


def _calibration(root: Path) -> Path:
    (root / "calib").mkdir(parents=True, exist_ok=True)
    np.save(root / "calib" / "x.npy", np.random.default_rng(0).standard_normal((8, 64)).astype(np.float32))
    return root / "calib"


def _quantize(root: Path, model: Path, capsys, *extra) -> tuple[int, str]:
    code = main(["quantize", "--model", str(model), "--calibration", str(root / "calib"), "--output",
                 str(root / "out"), "--batch-size", "2", "--batch-num", "2", *extra])
    captured = capsys.readouterr()
    return code, captured.err + captured.out


@pytest.fixture
def read_only(tmp_path):
    """A folder that cannot be written: a read-only bind mount as root (chmod does not stop root),
    else chmod 0555."""
    folder = tmp_path / "models"
    folder.mkdir()
    return folder, lambda: _seal(folder)


def _seal(folder: Path) -> None:
    if os.geteuid() != 0:
        os.chmod(folder, 0o555)
        return
    bind = subprocess.run(["mount", "--bind", str(folder), str(folder)], capture_output=True, text=True)
    if bind.returncode != 0:
        pytest.skip(f"cannot bind-mount here: {bind.stderr.strip()}")
    subprocess.run(["mount", "-o", "remount,ro,bind", str(folder)], check=True)


def test_a_users_own_inferred_file_survives_and_nothing_is_written_beside_the_model(tmp_path, capsys):
    model = modelzoo.external_ffn_model(tmp_path / "models" / "model.onnx")
    mine = tmp_path / "models" / "model-inferred.onnx"
    mine.write_text("my own notes, not a model")
    _calibration(tmp_path)
    before = _state(tmp_path / "models")
    code, text = _quantize(tmp_path, model, capsys)
    assert code == 0, text
    assert _state(tmp_path / "models") == before  # nothing written, changed or deleted there
    assert mine.read_text() == "my own notes, not a model"
    assert not (tmp_path / "out" / ".quantize-input").exists()  # the work copy is gone


def test_a_read_only_model_folder_quantizes(read_only, tmp_path, capsys):
    folder, seal = read_only
    model = modelzoo.external_ffn_model(folder / "model.onnx")
    _calibration(tmp_path)
    seal()
    try:
        code, text = _quantize(tmp_path, model, capsys)
    finally:
        if os.geteuid() == 0:
            subprocess.run(["umount", str(folder)], check=False)
        else:
            os.chmod(folder, 0o755)
    assert code == 0, text
    assert "Traceback" not in text
    assert sorted(p.name for p in folder.iterdir()) == ["model.onnx", "model.onnx.data"]


def test_an_external_data_model_quantizes_under_its_own_names_and_runs_like_the_fp32_model(tmp_path, capsys,
                                                                                          monkeypatch):
    from ascendpipe.backends.onnxruntime import quantize as Q

    monkeypatch.setattr(Q, "EXTERNAL_FROM", 0)  # written as external data, as a model past 1 GiB is
    model = modelzoo.external_ffn_model(tmp_path / "models" / "model.onnx")
    _calibration(tmp_path)
    code, text = _quantize(tmp_path, model, capsys)
    assert code == 0, text
    out = tmp_path / "out"
    names = sorted(p.name for p in out.iterdir())
    assert "model.qdq.data" in names and "model.onnx.data" not in names  # never the source's name
    assert (out / "deploy" / "model.qdq.data").is_file()
    from ascendpipe import onnxexternal

    assert {r.location for r in onnxexternal.references(out / "model.onnx")} == {"model.qdq.data"}
    x = {"x": np.random.default_rng(1).standard_normal((2, 64)).astype(np.float32)}
    import onnx

    inline = tmp_path / "inline.onnx"
    onnx.save(onnx.load(str(model)), str(inline))
    want = ort.InferenceSession(str(inline), providers=["CPUExecutionProvider"]).run(None, x)[0].ravel()
    for path in (out / "model.onnx", out / "deploy" / "model.onnx"):
        got = ort.InferenceSession(str(path), providers=["CPUExecutionProvider"]).run(None, x)[0].ravel()
        cosine = float(got @ want / np.linalg.norm(got) / np.linalg.norm(want))
        assert cosine > 0.99, cosine  # int8 of a 64x512 FFN: measured 0.9996 (seeds 0-2)
    record = json.loads((out / "quantize.json").read_text())
    assert record["quantized_layers"] == ["up", "down", "side"]


def test_a_model_past_memory_is_refused_with_the_numbers_before_anything_is_written(tmp_path, capsys, monkeypatch):
    from ascendpipe import onnxexternal

    model = modelzoo.external_ffn_model(tmp_path / "models" / "model.onnx")
    _calibration(tmp_path)
    monkeypatch.setattr(onnxexternal, "available_memory", lambda: 500_000)
    code, text = _quantize(tmp_path, model, capsys)
    (line,) = [line for line in text.splitlines() if line.strip()]
    assert code == 2 and "Traceback" not in text
    assert "quantizing this model (264.98 KB of weights; onnxruntime's quantizer holds them about 3 times)" in line
    assert "needs 794.94 KB of memory and 500.00 KB is available" in line
    assert not (tmp_path / "out").exists()
    assert not [p for p in tmp_path.iterdir() if p.name.startswith(".out.")]
