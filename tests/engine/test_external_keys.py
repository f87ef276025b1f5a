"""A model's weights files (ONNX external data) key every stage that reads the model (issue 48,
item 1): rewriting ``models/ffn.onnx.data`` after a build makes those stages stale, ``status`` names
the file, the next build serves the new weights, and the no-op memo sees the change too (it decides
again). Before: status said fresh and the build served the old weights."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import onnxruntime as ort
import pytest

from ascendpipe.cli.main import main
from ascendpipe.engine.noop_replay import replay
from tests import modelzoo

PIPELINE = """\
stages:
  src: {kind: source, model: models/ffn.onnx}
  conv: {kind: convert, model: src, params: {precision_mode: must_keep_origin_dtype}}
  direct: {kind: convert, model: models/ffn.onnx, params: {precision_mode: force_fp16}}
  read:
    kind: run
    cmd: python3 -c "print(open('models/ffn.onnx','rb').read()[:4])" > read.txt
    deps: [models/ffn.onnx]
    outs: [read.txt]
"""
FEEDS = {"x": np.random.default_rng(5).standard_normal((2, 64)).astype(np.float32)}


@pytest.fixture
def workspace(tmp_path, monkeypatch):
    import ascendpipe.store.hashing as hashing

    monkeypatch.setattr(hashing, "RACY_WINDOW_NS", 0)  # stats trusted at once: each change moves size or time
    root = tmp_path / "ws"
    (root / ".ascendpipe").mkdir(parents=True)
    modelzoo.external_ffn_model(root / "models" / "ffn.onnx", seed=1)
    (root / "pipeline.yaml").write_text(PIPELINE)
    monkeypatch.chdir(root)
    return root


def _build(capsys) -> dict[str, str]:
    assert main(["build", "pipeline.yaml", "--json"]) == 0
    record = json.loads(capsys.readouterr().out)
    return {name: stage["state"] for name, stage in record["stages"].items()}


def _status(capsys) -> dict:
    main(["status", "pipeline.yaml", "--json"])
    return json.loads(capsys.readouterr().out)["stages"]


def _outputs(root: Path, stage: str) -> np.ndarray:
    model = root / "build" / stage / "model.onnx"
    return ort.InferenceSession(str(model), providers=["CPUExecutionProvider"]).run(None, FEEDS)[0]


def _new_weights(root: Path) -> None:
    """The same model file, other weights: a re-export with another seed (the data file's size kept)."""
    other = modelzoo.external_ffn_model(root / "other" / "ffn.onnx", seed=2)
    data = root / "models" / "ffn.onnx.data"
    before = data.stat().st_size
    data.write_bytes((other.parent / "ffn.onnx.data").read_bytes())
    assert data.stat().st_size == before
    assert (root / "models" / "ffn.onnx").read_bytes() == other.read_bytes()  # only the weights differ


def test_rewriting_the_weights_file_makes_every_stage_reading_the_model_stale_and_named(workspace, capsys):
    assert set(_build(capsys).values()) == {"ran"}
    before = {s: _outputs(workspace, s) for s in ("conv", "direct")}
    assert {n: s["state"] for n, s in _status(capsys).items()} == dict.fromkeys(["src", "conv", "direct", "read"],
                                                                                 "fresh")
    _new_weights(workspace)
    status = _status(capsys)
    for name in ("src", "direct", "read"):  # each names the file; conv follows src
        assert status[name]["state"] == "stale"
        assert "dep models/ffn.onnx.data modified" in status[name]["reasons"], status[name]
    assert status["conv"]["state"] == "stale"
    states = _build(capsys)
    assert states == {"src": "ran", "conv": "ran", "direct": "ran", "read": "ran"}
    for stage in ("conv", "direct"):  # the new weights served
        assert not np.allclose(_outputs(workspace, stage), before[stage])
    twin = modelzoo.external_ffn_model(workspace / "twin" / "ffn.onnx", seed=2)
    from ascendpipe.backends.onnxruntime.convert import convert_model
    from ascendpipe.precision.settings import resolve

    expected = convert_model(twin, workspace / "twin_out", resolve({"precision_mode": "must_keep_origin_dtype"}))
    np.testing.assert_array_equal(_outputs(workspace, "conv"),
                                  ort.InferenceSession(str(expected.model_path)).run(None, FEEDS)[0])


def test_the_key_holds_the_weights_files_hash_and_a_missing_one_is_named(workspace, capsys):
    _build(capsys)
    from ascendpipe.store.hashing import hash_file

    with __import__("sqlite3").connect(workspace / ".ascendpipe" / "ascendpipe.db") as db:
        rows = dict(db.execute("SELECT name, deps FROM stage_runs WHERE run_id=1").fetchall())
    deps = json.loads(rows["direct"])
    assert deps["models/ffn.onnx.data"] == hash_file(str(workspace / "models" / "ffn.onnx.data"))
    (workspace / "models" / "ffn.onnx.data").unlink()
    status = _status(capsys)
    assert "tensor 'w_up': external data file 'ffn.onnx.data' is missing" in status["direct"]["reasons"][0]
    assert status["direct"]["reasons"][0].startswith("pipeline.yaml:4:")


def test_the_no_op_memo_decides_again_when_the_weights_file_changes(workspace, capsys):
    _build(capsys)
    assert main(["build", "pipeline.yaml"]) == 0  # decides: all fresh, and remembers
    capsys.readouterr()
    assert replay(["build", "pipeline.yaml"]) == 0  # replayed
    capsys.readouterr()
    _new_weights(workspace)
    assert replay(["build", "pipeline.yaml"]) != 0  # the memo holds the data file's stat: it decides again
    capsys.readouterr()
    assert _build(capsys)["direct"] == "ran"


def test_a_model_without_external_data_keeps_its_key(tmp_path, monkeypatch, capsys):
    """Keys of models with their weights inline are what they were (no stage of theirs rebuilds)."""
    from ascendpipe.engine import model_deps

    root = tmp_path / "ws"
    (root / ".ascendpipe").mkdir(parents=True)
    modelzoo.linear_model(root / "m.onnx", features=3, classes=2)
    assert model_deps.external_deps(None, str(root), "m.onnx", None) == {}
