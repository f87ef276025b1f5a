"""Classification labels in the three documented formats (issue 43): .npy, .txt one class index a
line, .json; each bad file is one located line, never numpy's "allow_pickle" advice."""

from __future__ import annotations

import json

import numpy as np
import pytest

from ascendpipe.errors import UserError
from ascendpipe.stages.eval import EvalKind
from tests.stages.test_eval_stage import write_infer_dir

LABELS = [3, 0, 2, 2, 1, 3]


@pytest.fixture
def infer(tmp_path):
    """Logits whose argmax is LABELS but for sample 4 (top-1 5/6); sample 4's true class is second."""
    logits = np.full((6, 4), -1.0, np.float32)
    logits[np.arange(6), LABELS] = 5.0
    logits[4] = [0.0, 4.0, 4.5, -1.0]  # true class 1 second
    return write_infer_dir(tmp_path / "infer", {"logits": logits})


def _eval(make_ctx, infer, labels):
    ctx = make_ctx("eval", {"task": "classification", "topk": [1, 2]}, {"outputs": infer, "labels": labels})
    return EvalKind().run(ctx).metrics


@pytest.mark.parametrize("form", ["npy", "txt", "txt_with_names", "json", "json_object", "folder_txt", "npy_float"])
def test_every_format_gives_the_same_metrics(form, tmp_path, make_ctx, infer):
    if form == "npy":
        path = tmp_path / "labels.npy"
        np.save(path, np.array(LABELS))
    elif form == "npy_float":
        path = tmp_path / "labels.npy"
        np.save(path, np.array(LABELS, dtype=np.float32))
    elif form == "txt":
        path = tmp_path / "labels.txt"
        path.write_text("# class index per image\n" + "\n".join(map(str, LABELS)) + "\n\n")
    elif form == "txt_with_names":
        path = tmp_path / "val.txt"
        path.write_text("".join(f"img_{i:04d}.png {c}\n" for i, c in enumerate(LABELS)))
    elif form == "json":
        path = tmp_path / "labels.json"
        path.write_text(json.dumps(LABELS))
    elif form == "json_object":
        path = tmp_path / "gt.json"
        path.write_text(json.dumps({"labels": LABELS}))
    else:
        path = tmp_path / "labels"
        path.mkdir()
        (path / "labels.txt").write_text("\n".join(map(str, LABELS)))
    metrics = _eval(make_ctx, infer, path)
    assert metrics == {"top1": 5 / 6, "top2": 1.0}


def _error(make_ctx, infer, path) -> str:
    with pytest.raises(UserError) as err:
        _eval(make_ctx, infer, path)
    return str(err.value)


def test_a_class_name_in_a_text_file_is_located_at_its_line(tmp_path, make_ctx, infer):
    path = tmp_path / "labels.txt"
    path.write_text("3\n0\n2\ncat\n1\n3\n")
    assert _error(make_ctx, infer, path) == (
        f"{path}:4: stage 'eval': 'cat' is not a class index; write one class index a line (e.g. 7), or the "
        "sample's file name then its index (img_0001.png 7)")


def test_text_saved_as_npy_is_not_numpys_allow_pickle_advice(tmp_path, make_ctx, infer):
    path = tmp_path / "labels.npy"
    path.write_text("\n".join(map(str, LABELS)))
    message = _error(make_ctx, infer, path)
    assert "allow_pickle" not in message
    assert message == (f"{path}: stage 'eval': labels: labels.npy is not an .npy file (numpy.save writes one); a "
                       "text file of one class index a line is read when named .txt")


def test_an_object_array_says_what_to_save(tmp_path, make_ctx, infer):
    path = tmp_path / "labels.npy"
    np.save(path, np.array(["a", 1, None], dtype=object), allow_pickle=True)
    assert _error(make_ctx, infer, path) == (
        f"{path}: stage 'eval': labels: labels.npy holds Python objects, not numbers; save the class indices as an "
        "integer array (numpy.save(path, numpy.array(indices, dtype=numpy.int64)))")


def test_json_and_folder_errors(tmp_path, make_ctx, infer):
    path = tmp_path / "labels.json"
    path.write_text(json.dumps([3, 0, "dog"]))
    assert _error(make_ctx, infer, path) == (
        f"{path}: stage 'eval': labels: labels.json entry 2 is \"dog\", not a class index (a whole number)")
    path.write_text(json.dumps({"classes": 3}))
    assert "holds a dict; write a list of class indices" in _error(make_ctx, infer, path)
    empty = tmp_path / "empty"
    empty.mkdir()
    assert _error(make_ctx, infer, empty) == (
        f"stage 'eval': labels: {empty} has none of labels.npy, labels.txt, labels.json (classification reads an "
        ".npy integer array, a .txt file of one class index a line, or a .json list of class indices)")
    np.save(tmp_path / "halves.npy", np.array([0.5, 1.0]))
    assert "entry 0 is 0.5, not a class index (a whole number)" in _error(make_ctx, infer, tmp_path / "halves.npy")
    csv = tmp_path / "labels.csv"
    csv.write_text("3,0")
    assert "labels: labels.csv is not .npy, .txt or .json" in _error(make_ctx, infer, csv)


def test_a_text_file_with_more_lines_than_outputs_is_caught(tmp_path, make_ctx, infer):
    path = tmp_path / "labels.txt"
    path.write_text("\n".join(map(str, LABELS + [1])))
    assert _error(make_ctx, infer, path) == "stage 'eval': topk_accuracy: 6 score rows but 7 labels"
