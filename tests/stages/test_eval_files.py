"""eval reads a user's outputs and reid labels checked: a damaged, foreign or misshapen file is one
located line, never numpy's traceback or its "allow_pickle" advice (issue 42 item 1's class)."""

from __future__ import annotations

import json

import numpy as np
import pytest

from ascendpipe.errors import Location, UserError
from ascendpipe.stages.eval import read_outputs

WHERE = Location(stage="eval", field="outputs")


def test_a_text_file_named_npy_is_one_line_naming_it(tmp_path):
    bad = tmp_path / "logits.npy"
    bad.write_text("0.1 0.9\n")
    with pytest.raises(UserError) as err:
        read_outputs(bad, WHERE)
    assert err.value.message == (f"cannot read {bad}: not a numpy .npy/.npz file (it does not start with numpy's "
                                 "header: damaged, or another format)")
    assert "allow_pickle" not in err.value.message


def test_an_npz_cut_short_is_one_line(tmp_path):
    good = tmp_path / "good.npz"
    np.savez(good, a=np.arange(1000, dtype=np.float32))
    cut = tmp_path / "cut.npz"
    cut.write_bytes(good.read_bytes()[:200])
    with pytest.raises(UserError) as err:
        read_outputs(cut, WHERE)
    assert err.value.message.startswith(f"cannot read {cut}: ")


def test_a_summary_naming_a_file_outside_the_folder_is_refused(tmp_path):
    infer = tmp_path / "infer"
    infer.mkdir()
    (tmp_path / "secret.npy").write_bytes(b"")
    (infer / "summary.json").write_text(json.dumps({"outputs": {"y": {"file": "../secret.npy"}}}))
    with pytest.raises(UserError) as err:
        read_outputs(infer, WHERE)
    assert err.value.message == f"{infer / 'summary.json'}: outputs.y.file: '../secret.npy' is not a file name inside {infer}"


def test_a_summary_that_is_not_an_object_is_named(tmp_path):
    infer = tmp_path / "infer"
    infer.mkdir()
    (infer / "summary.json").write_text(json.dumps({"outputs": {"y": "y.npy"}}))
    with pytest.raises(UserError) as err:
        read_outputs(infer, WHERE)
    assert "outputs.y" in err.value.message and "summary.json" in err.value.message


def test_valid_outputs_still_read(tmp_path):
    infer = tmp_path / "infer"
    infer.mkdir()
    np.save(infer / "y_0.npy", np.eye(2, dtype=np.float32))
    (infer / "summary.json").write_text(json.dumps({"outputs": {"y:0": {"file": "y_0.npy"}}}))
    out = read_outputs(infer, WHERE)
    assert list(out) == ["y:0"] and out["y:0"].tolist() == [[1.0, 0.0], [0.0, 1.0]]
