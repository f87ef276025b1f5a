"""Malformed user data files (issue 42): ground truth of every format, letterbox metadata and frames,
detection head outputs and a user's postprocess. Each is one line naming the file and the field or
row (exact text), never a traceback, and nothing is written; the valid form beside each still reads."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

from ascendpipe.errors import UserError
from ascendpipe.metrics import ground_truth as gt
from tests.hostile.test_corpus import snapshot

ROOT = Path(__file__).resolve().parents[2]
COCO = {"images": [{"id": 1, "height": 10, "width": 20}, {"id": 2}],
        "annotations": [{"id": 7, "image_id": 1, "category_id": 3, "bbox": [1, 2, 3, 4]}],
        "categories": [{"id": 3, "name": "cat"}, {"id": 5, "name": "dog"}]}


def _coco(**changes):
    data = json.loads(json.dumps(COCO))
    for key, value in changes.items():
        data["annotations"][0][key] = value
    return json.dumps(data)


# (id, file name, content, the line gt.read raises, with FILE for the file's path)
GROUND_TRUTH = [
    ("coco-cut-short", "gt.json", json.dumps(COCO)[:60],
     "labels: FILE:1:61: not JSON: Expecting ',' delimiter (the file ends early: cut short?)"),
    ("coco-empty", "gt.json", "", "labels: FILE: the ground truth is empty; expected JSON"),
    ("coco-binary", "gt.json", b"\x89PNG\r\n\x1a\n\xff", "labels: FILE: not a text file (byte 0 is not UTF-8); give "
     "the ground truth as text"),
    ("coco-bbox-string", "gt.json", _coco(bbox="1,2,3,4"),
     'labels: FILE: annotations[0].bbox: "1,2,3,4" is not a list of 4 numbers'),
    ("coco-bbox-three", "gt.json", _coco(bbox=[1, 2, 3]), "labels: FILE: annotations[0].bbox: [1, 2, 3] is not a list of 4 numbers"),
    ("coco-bbox-text-value", "gt.json", _coco(bbox=[1, "2", 3, 4]), 'labels: FILE: annotations[0].bbox[1]: "2" is not a number'),
    ("coco-bbox-negative-width", "gt.json", _coco(bbox=[1, 2, -3, 4]),
     "labels: FILE: annotations[0].bbox: [1, 2, -3, 4] has a negative width or height; COCO's bbox is [x, y, width, height]"),
    ("coco-bbox-missing", "gt.json", json.dumps({**COCO, "annotations": [{"id": 7, "image_id": 1, "category_id": 3}]}),
     "labels: FILE: annotations[0]: has no 'bbox'"),
    ("coco-unknown-category", "gt.json", _coco(category_id=4),
     "labels: FILE: annotations[0].category_id: 4 is not one of the categories' ids (3, 5)"),
    ("coco-no-category", "gt.json", _coco(category_id=None),
     "labels: FILE: annotations[0].category_id: null is not one of the categories' ids (3, 5)"),
    ("coco-iscrowd-2", "gt.json", _coco(iscrowd=2), "labels: FILE: annotations[0].iscrowd: 2 is above 1"),
    ("coco-annotation-not-object", "gt.json", json.dumps({**COCO, "annotations": ["x"]}),
     'labels: FILE: annotations[0]: expected an object, got "x"'),
    ("coco-image-no-id", "gt.json", json.dumps({**COCO, "images": [{"file_name": "a.jpg"}]}),
     "labels: FILE: images[0]: has no 'id'"),
    ("coco-height-zero", "gt.json", json.dumps({**COCO, "images": [{"id": 1, "height": 0, "width": 3}]}),
     "labels: FILE: images[0].height: 0 must be above 0"),
    ("list-ragged-box", "gt.json", json.dumps([{"boxes": [[0, 0, 4, 4], [1, 2, 3]], "labels": [0, 1]}]),
     "labels: FILE: [0].boxes[1]: [1, 2, 3] is not a list of 4 numbers"),
    ("list-labels-short", "gt.json", json.dumps([{"boxes": [[0, 0, 4, 4], [1, 1, 2, 2]], "labels": [0]}]),
     "labels: FILE: [0]: 2 boxes but 1 labels; give one label per box"),
    ("list-label-negative", "gt.json", json.dumps([{"boxes": [[0, 0, 4, 4]], "labels": [-1]}]),
     "labels: FILE: [0].labels[0]: -1 is below 0"),
    ("list-label-fraction", "gt.json", json.dumps([{"boxes": [[0, 0, 4, 4]], "labels": [1.5]}]),
     "labels: FILE: [0].labels[0]: 1.5 is not a whole number"),
    ("list-box-reversed", "gt.json", json.dumps([{"boxes": [[5, 0, 4, 4]], "labels": [0]}]),
     "labels: FILE: [0].boxes[0]: [5, 0, 4, 4] has x2 < x1 or y2 < y1; boxes are [x1, y1, x2, y2]"),
    ("list-box-nan", "gt.json", '[{"boxes": [[0, 0, NaN, 4]], "labels": [0]}]',
     "labels: FILE: [0].boxes[0][2]: nan where a finite number belongs"),
    ("list-boxes-not-list", "gt.json", json.dumps([{"boxes": 3, "labels": []}]),
     "labels: FILE: [0].boxes: expected a list, got 3"),
    ("list-difficult-short", "gt.json", json.dumps([{"boxes": [[0, 0, 4, 4]], "labels": [0], "difficult": []}]),
     "labels: FILE: [0].difficult: 0 values for 1 boxes; give one per box"),
]


@pytest.mark.parametrize("case_id,name,content,line", GROUND_TRUTH, ids=[c[0] for c in GROUND_TRUTH])
def test_malformed_ground_truth_is_one_located_line(tmp_path, case_id, name, content, line):
    file = tmp_path / name
    file.write_bytes(content if isinstance(content, bytes) else content.encode())
    before = snapshot(tmp_path)
    with pytest.raises(UserError) as err:
        gt.read(file, "coco" if case_id.startswith("coco") else "list")
    assert str(err.value) == line.replace("FILE", str(file))
    assert snapshot(tmp_path) == before


def test_the_valid_ground_truth_beside_them_reads(tmp_path):
    (tmp_path / "c.json").write_text(json.dumps(COCO))
    truth = gt.read(tmp_path / "c.json")
    assert truth.format == "coco" and truth.category_ids == [3, 5] and truth.image_ids == [1, 2]
    assert truth.images[0] == {"boxes": [[1, 2, 4, 6]], "labels": [0], "iscrowd": [0]}
    (tmp_path / "l.json").write_text(json.dumps([{"boxes": [[0, 0, 4, 4]], "labels": [2], "difficult": [1]}]))
    truth = gt.read(tmp_path / "l.json")
    assert truth.images == [{"boxes": [[0, 0, 4, 4]], "labels": [2], "difficult": [1]}] and truth.category_ids == [0, 1, 2]


@pytest.mark.parametrize("text,line", [
    ("0 0.5 0.5 0.2 0.2\n1 0.5 0.5 0.2\n", "labels: FILE:2: each line must be 'class cx cy w h', found 4 values"),
    ("0 0.5 0.5 0.2 0.2 0.9\n", "labels: FILE:1: each line must be 'class cx cy w h', found 6 values"),
    ("0 0.5 half 0.2 0.2\n", "labels: FILE:1: '0 0.5 half 0.2 0.2' holds a value that is not a number"),
    ("-1 0.5 0.5 0.2 0.2\n", "labels: FILE:1: class: -1.0 is below 0"),
    ("1.5 0.5 0.5 0.2 0.2\n", "labels: FILE:1: class: 1.5 is not a whole number"),
    ("0 0.5 0.5 nan 0.2\n", "labels: FILE:1: w: nan where a finite number belongs"),
    ("0 0.5 0.5 -0.2 0.2\n", "labels: FILE:1: w: -0.2 is below 0"),
])
def test_malformed_yolo_labels_are_one_line_with_the_row(tmp_path, text, line):
    (tmp_path / "a.txt").write_text("0 0.5 0.5 0.2 0.2\n")
    (tmp_path / "b.txt").write_text(text)
    with pytest.raises(UserError) as err:
        gt.read(tmp_path, "yolo", sizes=[[10, 20]])
    assert str(err.value) == line.replace("FILE", str(tmp_path / "b.txt"))


def test_yolo_labels_read_with_blank_lines_and_sizes_are_checked(tmp_path):
    (tmp_path / "a.txt").write_text("0 0.5 0.5 0.2 0.2\n\n")
    truth = gt.read(tmp_path, "yolo", sizes=[[10, 20]])
    assert truth.images == [{"boxes": [[8.0, 4.0, 12.0, 6.0]], "labels": [0]}]
    with pytest.raises(UserError) as err:
        gt.read(tmp_path, "yolo", sizes=[[0, 20]])
    assert str(err.value) == "labels: the image sizes: [0] ([h, w])[0]: 0 must be above 0"


@pytest.mark.parametrize("xml,line", [
    ("<annotation><object><name>cat</name></object></annotation>", "labels: FILE: object[0] (cat): has no <bndbox>"),
    ("<annotation><object><name>cat</name><bndbox><xmin>a</xmin><ymin>1</ymin><xmax>2</xmax><ymax>3</ymax>"
     "</bndbox></object></annotation>", 'labels: FILE: object[0] (cat).bndbox.xmin: "a" is not a number'),
    ("<annotation><object><name>cat</name><bndbox><xmin>1</xmin><ymin>1</ymin><xmax>2</xmax></bndbox></object>"
     "</annotation>", "labels: FILE: object[0] (cat).bndbox: has no <ymax>"),
    ("<annotation><size><width>9</width><height>-2</height></size></annotation>",
     "labels: FILE: size.height: -2.0 must be above 0"),
    ("<annotation><object><name>cat</name><difficult>x</difficult><bndbox><xmin>1</xmin><ymin>1</ymin><xmax>2</xmax>"
     "<ymax>3</ymax></bndbox></object></annotation>", 'labels: FILE: object[0] (cat).difficult: "x" is neither 0 nor 1'),
])
def test_malformed_voc_annotations_are_one_located_line(tmp_path, xml, line):
    (tmp_path / "a.xml").write_text(xml)
    with pytest.raises(UserError) as err:
        gt.read(tmp_path, "voc", class_names=["cat"])
    assert str(err.value) == line.replace("FILE", str(tmp_path / "a.xml"))


# -- letterbox metadata and the letterbox data step ---------------------------------------------------

META = {"size": [10, 20], "scale": [0.5, 0.5], "pad": [0, 2], "input_size": [8, 10]}


@pytest.mark.parametrize("change,line", [
    ({"scale": 0}, "letterbox: FILE: images[0].scale: 0 must be above 0"),
    ({"scale": [0.5, 0]}, "letterbox: FILE: images[0].scale[1]: 0 must be above 0"),
    ({"scale": "half"}, 'letterbox: FILE: images[0].scale: "half" is not a number'),
    ({"scale": None}, "letterbox: FILE: images[0].scale: null is not a number"),
    ({"pad": [1]}, "letterbox: FILE: images[0].pad: [1] is not a list of 2 numbers"),
    ({"pad": [-1, 0]}, "letterbox: FILE: images[0].pad[0]: -1 is below 0"),
    ({"size": [10, 0]}, "letterbox: FILE: images[0].size[1]: 0 must be above 0"),
])
def test_malformed_letterbox_metadata_is_one_located_line(tmp_path, change, line):
    from ascendpipe.data.letterbox import read_meta

    file = tmp_path / "letterbox.json"
    file.write_text(json.dumps({"images": [META, {**META, **change}][::-1][:1] + [META]}))
    with pytest.raises(UserError) as err:
        read_meta(file)
    assert str(err.value) == line.replace("FILE", str(file))
    file.write_text(json.dumps({"images": [META]})[:30])
    with pytest.raises(UserError) as err:
        read_meta(file)
    assert str(err.value).startswith(f"letterbox: {file}:1:") and "cut short" in str(err.value)


def _step(cwd, *args):
    return subprocess.run([sys.executable, "-m", "ascendpipe.data.letterbox", *args], cwd=cwd, capture_output=True,
                          text=True, env={"PYTHONPATH": str(ROOT), "PATH": "/usr/bin:/bin"}, timeout=120)


def test_the_letterbox_step_refuses_what_is_not_uint8_frames(tmp_path):
    (tmp_path / "empty.npz").write_bytes(b"")
    (tmp_path / "text.npz").write_text("not a zip\n")
    np.savez(tmp_path / "float.npz", a=np.random.default_rng(0).random((6, 8, 3)))
    np.savez(tmp_path / "none.npz")
    np.savez(tmp_path / "flat.npz", a=np.zeros(12, np.uint8))
    np.savez(tmp_path / "ok.npz", a=np.zeros((6, 8, 3), np.uint8))
    before = snapshot(tmp_path)
    cases = {
        ("empty.npz",): "error: letterbox: empty.npz is empty; give an .npz of uint8 HWC images",
        ("text.npz",): "error: letterbox: text.npz is not an .npz (numpy's zip of .npy arrays); give an .npz of uint8 "
                       "HWC images (np.savez)",
        ("float.npz",): "error: letterbox: float.npz[a]: float64 frames; the step takes uint8 images (0..255) as HWC, "
                        "before any normalisation (--mean and --scale apply it)",
        ("none.npz",): "error: letterbox: none.npz holds no images",
        ("flat.npz",): "error: letterbox: flat.npz[a]: shape [12] is not one HWC image (H, W, 1|3|4) or HW",
        ("ok.npz", "--scale", "0"): "error: --scale 0.0: must be above 0 (0 would make every input 0)",
        ("ok.npz", "--mean", "nan"): "error: --mean nan: give one finite number or three (per channel)",
        ("ok.npz", "--pad-value", "300"): "error: --pad-value 300.0: a uint8 value, 0..255",
    }
    for argv, line in cases.items():
        proc = _step(tmp_path, *argv, "--size", "4", "4", "--out", "out")
        assert (proc.returncode, proc.stderr.splitlines(), proc.stdout) == (1, [line], ""), argv
    assert snapshot(tmp_path) == before
    ok = _step(tmp_path, "ok.npz", "--size", "4", "4", "--out", "out")
    assert ok.returncode == 0, ok.stderr
    assert np.load(tmp_path / "out" / "u8" / "images.npy").shape == (1, 4, 4, 3)


# -- detection head outputs and a user's postprocess ---------------------------------------------------

def test_odd_or_bad_anchors_are_one_line_naming_the_level():
    from ascendpipe.metrics import yolo_decode

    heads = [np.zeros((1, 3 * 6, 2, 2))] * 3
    cases = [([[10, 13, 16], [30, 61], [116, 90]], "anchors[0]: 3 values; anchors are (width, height) pairs, so give "
              "an even number"),
             ([[10, 13], [30, "x"], [116, 90]], "anchors[1]: 'x' is not a positive number of pixels"),
             ([[10, 13], [30, 0], [116, 90]], "anchors[1]: 0 is not a positive number of pixels"),
             ([[10, 13], 5, [116, 90]], "anchors[1]: expected a list of anchor sizes [w0, h0, w1, h1, ...], got 5")]
    for anchors, line in cases:
        with pytest.raises(UserError) as err:
            yolo_decode.yolov5_raw(heads, anchors=anchors)
        assert str(err.value) == line


def test_nms_indices_beyond_the_boxes_are_one_line():
    from ascendpipe.metrics.detect_post import detections

    boxes, scores = np.zeros((1, 5, 4), np.float32), np.full((1, 2, 5), 0.9, np.float32)
    params = {"decode": "onnx_nms", "head_outputs": {"indices": "i", "boxes": "b", "scores": "s"}}
    for row, line in (([0, 0, 9], "head_outputs.indices: row [0, 0, 9] selects box 9, beyond the 5 the model output holds"),
                      ([0, 2, 1], "head_outputs.indices: row [0, 2, 1] selects class 2, beyond the 2 the model output holds"),
                      ([3, 0, 1], "head_outputs.indices: row [3, 0, 1] selects batch 3, beyond the 1 the model output holds")):
        outputs = {"i": np.array([[0, 0, 1], row], np.int64), "b": boxes, "s": scores}
        with pytest.raises(UserError) as err:
            detections(outputs, params)
        assert str(err.value) == line + "; is this the NonMaxSuppression output of these boxes and scores?"
    ok = detections({"i": np.array([[0, 1, 4], [-1, -1, -1]]), "b": boxes, "s": scores}, params)
    assert [len(b) for b in ok["boxes"]] == [1] and ok["labels"][0].tolist() == [1]


@pytest.mark.parametrize("pred,line", [
    ({"boxes": [[[0, 0, 1, 1]], [[0, 0, 1]]], "scores": [[0.5], [0.5]], "labels": [[0], [0]]},
     "the detection postprocess's image 1: boxes of shape [1, 3]; expected (N, 4) as x1, y1, x2, y2"),
    ({"boxes": [[[0, 0, 1, 1]]], "scores": [[0.5, 0.4]], "labels": [[0]]},
     "the detection postprocess's image 0: 1 boxes, 2 scores, 1 labels; give one of each per box"),
    ({"boxes": [[[0, 0, 1, 1]]], "scores": [[0.5]], "labels": [[-2]]},
     "the detection postprocess's image 0: labels must be class indices (whole, 0 or more)"),
    ({"boxes": [[[0, 0, 1, 1]]], "scores": [[float("nan")]], "labels": [[0]]},
     "the detection postprocess's image 0: scores hold NaN or inf"),
    ({"boxes": [[[0, 0, 1, 1]]], "scores": [], "labels": [[0]]},
     "the detection postprocess returned 1 boxes, 0 scores, 1 labels; give one of each per image"),
    ({"boxes": 3, "scores": [], "labels": []}, "the detection postprocess returned boxes as int; expected one array per image"),
])
def test_a_postprocess_returning_malformed_predictions_is_one_line(pred, line):
    from ascendpipe.metrics.detect_post import check_predictions

    with pytest.raises(UserError) as err:
        check_predictions(pred)
    assert str(err.value) == line


# -- AIPP: a config file's values and a pipeline's inline block -----------------------------------------

@pytest.mark.parametrize("body,line", [
    ("mean_chn_0: abc", "FILE:1: 'mean_chn_0' must be a number, got 'abc'"),
    ("var_reci_chn_0: 1e999", "FILE:1: 'var_reci_chn_0' must be a finite number, got inf"),
    ("src_image_size_w: -5", "FILE:1: src_image_size_w -5 is outside 0..4096"),
    ("mean_chn_1: 300", "FILE:1: mean_chn_1 300 is outside 0..255"),
    ("resize: true resize_output_w: 0", "FILE:1: AIPP 'resize' with no soc_version: only the Atlas inference "
     "products (Ascend310P*) resize in AIPP (CANN aclmdlSetAIPPScfParams); set soc_version: Ascend310P3, or resize on "
     "the host (python -m ascendpipe.data.letterbox --resized) and let AIPP pad"),
])
def test_malformed_aipp_config_values_are_one_line_at_the_file(tmp_path, monkeypatch, capsys, body, line):
    from ascendpipe.cli.main import main
    from tests.modelzoo import conv_bn_relu_model

    monkeypatch.chdir(tmp_path)
    conv_bn_relu_model(tmp_path / "m.onnx")
    (tmp_path / "a.cfg").write_text(f"aipp_op {{ aipp_mode: static input_format: RGB888_U8 {body} }}\n")
    before = snapshot(tmp_path)
    capsys.readouterr()
    assert main(["convert", "--model", "m.onnx", "--insert-op-conf", "a.cfg", "--output", "o"]) == 2
    assert capsys.readouterr().err.splitlines() == ["ascendpipe: error: " + line.replace("FILE", "a.cfg")]
    assert snapshot(tmp_path) == before


def test_a_resize_output_of_0_is_refused_at_its_key_with_the_soc(tmp_path, monkeypatch, capsys):
    from ascendpipe.cli.main import main
    from tests.modelzoo import conv_bn_relu_model

    monkeypatch.chdir(tmp_path)
    conv_bn_relu_model(tmp_path / "m.onnx")
    (tmp_path / "a.cfg").write_text("aipp_op {\n  aipp_mode: static\n  input_format: RGB888_U8\n  resize: true\n"
                                    "  resize_output_w: 0\n}\n")
    capsys.readouterr()
    assert main(["convert", "--model", "m.onnx", "--insert-op-conf", "a.cfg", "--soc-version", "Ascend310P3",
                 "--output", "o"]) == 2
    assert capsys.readouterr().err.splitlines() == ["ascendpipe: error: a.cfg:5: AIPP resize_output_w 0 is outside 16..1920"]
    assert not (tmp_path / "o").exists()


@pytest.mark.parametrize("field,line", [
    ("resize_output_w: 0", "p.yaml:9:93: stage 'convert': resize_output_w: 0 violates minimum 16"),
    ("mean_chn_0: 300", "p.yaml:9:88: stage 'convert': mean_chn_0: 300 violates maximum 255"),
    ("padding: 'yes'", 'p.yaml:9:85: stage \'convert\': padding: expected boolean, got str "yes"'),
])
def test_an_inline_aipp_value_is_refused_at_the_pipelines_line(tmp_path, field, line):
    ws = tmp_path / "ws"
    (ws / ".ascendpipe").mkdir(parents=True)
    (ws / "m.onnx").write_bytes(b"")
    (ws / "p.yaml").write_text("stages:\n  convert:\n    kind: convert\n    model: m.onnx\n    params:\n"
                               "      precision_mode: force_fp16\n      soc_version: Ascend310P3\n      aipp:\n"
                               f"        {{aipp_mode: static, input_format: RGB888_U8, src_image_size_w: 32, {field}}}\n")
    before = snapshot(ws)
    proc = subprocess.run([sys.executable, "-m", "ascendpipe", "validate", "p.yaml"], cwd=ws, capture_output=True,
                          text=True, env={"PYTHONPATH": str(ROOT), "PATH": "/usr/bin:/bin"}, timeout=120)
    assert (proc.returncode, proc.stderr.splitlines()) == (2, ["ascendpipe: error: " + line])
    assert snapshot(ws) == before


def test_a_soc_version_in_a_pipeline_is_refused_at_its_line(tmp_path):
    ws = tmp_path / "ws"
    (ws / ".ascendpipe").mkdir(parents=True)
    (ws / "m.onnx").write_bytes(b"")
    (ws / "p.yaml").write_text("stages:\n  convert:\n    kind: convert\n    model: m.onnx\n"
                               "    params: {soc_version: '../x'}\n")
    proc = subprocess.run([sys.executable, "-m", "ascendpipe", "validate", "p.yaml"], cwd=ws, capture_output=True,
                          text=True, env={"PYTHONPATH": str(ROOT), "PATH": "/usr/bin:/bin"}, timeout=120)
    assert proc.returncode == 2
    assert proc.stderr.splitlines() == ["ascendpipe: error: p.yaml:5:27: stage 'convert': soc_version '../x' does not "
                                        "match the pattern ^Ascend(310|310P[0-9]*|310B[0-9]*|910[A-Za-z0-9_]*|950[A-Za-z0-9_]*)$"]


# -- a dump folder's index (a dump made elsewhere, or edited) ---------------------------------------------

@pytest.mark.parametrize("change,line", [
    (lambda d: d["tensors"].__setitem__(1, "x"), 'tensors[1]: expected an object, got "x"'),
    (lambda d: d["tensors"][1].__setitem__("file", "../../m.onnx"),
     "tensors[1].file: '../../m.onnx' is outside the dump folder; a dump names its tensors inside it (tensors/00001.npy)"),
    (lambda d: d["tensors"][1].__setitem__("file", "/etc/passwd"),
     "tensors[1].file: '/etc/passwd' is outside the dump folder; a dump names its tensors inside it (tensors/00001.npy)"),
    (lambda d: d["tensors"][1].__setitem__("shape", [7, "a"]), 'tensors[1].shape: [7, "a"] is not a list of sizes'),
    (lambda d: d["tensors"][1].pop("name"), "tensors[1].name: null is not a name"),
    (lambda d: d.__setitem__("graph", [1]), "graph: expected an object, got [1]"),
])
def test_a_malformed_dump_index_is_one_line_and_nothing_read_outside(tmp_path, monkeypatch, capsys, change, line):
    from ascendpipe.cli.main import main
    from tests.modelzoo import conv_bn_relu_model

    monkeypatch.chdir(tmp_path)
    conv_bn_relu_model(tmp_path / "m.onnx")
    assert main(["dump", "--model", "m.onnx", "--output", "d"]) == 0
    index = json.loads((tmp_path / "d" / "index.json").read_text())
    change(index)
    (tmp_path / "d" / "index.json").write_text(json.dumps(index))
    before = snapshot(tmp_path)
    capsys.readouterr()
    assert main(["compare", "--golden", "m.onnx", "--target", "d", "--output", "c"]) == 2
    assert capsys.readouterr().err.splitlines() == [f"ascendpipe: error: d/index.json: {line}"]
    assert snapshot(tmp_path) == before


def test_an_inline_aipp_block_that_does_not_fit_the_model_fails_at_its_line(tmp_path):
    """Checked against the model only when the stage runs; the failure names the pipeline's file:line of
    the value (it was '<aipp>', or the stage alone), for a stage's params and a matrix variant's."""
    from tests.modelzoo import conv_bn_relu_model

    ws = tmp_path / "ws"
    (ws / ".ascendpipe").mkdir(parents=True)
    conv_bn_relu_model(ws / "m.onnx")
    (ws / "p.yaml").write_text(
        "stages:\n  convert:\n    kind: convert\n    model: m.onnx\n    params:\n      precision_mode: force_fp16\n"
        "      aipp: {aipp_mode: static, input_format: YUV400_U8, src_image_size_w: 16, src_image_size_h: 16}\n"
        "    matrix:\n      a: {}\n      b:\n"
        "        aipp: {aipp_mode: static, input_format: RGB888_U8, src_image_size_w: 20, src_image_size_h: 16}\n")
    proc = subprocess.run([sys.executable, "-m", "ascendpipe", "build", "p.yaml", "--keep-going"], cwd=ws,
                          capture_output=True, text=True, env={"PYTHONPATH": str(ROOT), "PATH": "/usr/bin:/bin"},
                          timeout=300)
    assert proc.returncode == 1 and "Traceback" not in proc.stdout + proc.stderr
    failed = [line.split(None, 3)[3] for line in proc.stdout.splitlines() if line.strip().startswith("FAILED")]
    assert failed == [
        "p.yaml:7:47: stage 'convert@a': input_format YUV400_U8 gives 1 channels, the model input has 3",
        "p.yaml:11:15: stage 'convert@b': AIPP output 16x20 (source image 16x20 plus padding) does not match the "
        "model input 16x16"], proc.stdout
