"""What convert writes for an external-data model never shares a name with what it reads, and is
checked after writing (issue 48, item 3). The source here is a source stage's output: ``model.onnx``
with its weights in ``model.onnx.data``, the name convert used for its own file: a weight left
unrounded (a kept MatMul on an Atlas A2 chip, must_keep_origin_dtype, precision_mode_v2 origin)
then read another weight's bytes at its offset (cosine 0.994 on this FFN; the report's decoder:
-0.02), or the converted model did not load."""

from __future__ import annotations

import json
import os
from pathlib import Path

import numpy as np
import onnx
import onnxruntime as ort
import pytest

from ascendpipe.backends.onnxruntime import external_weights
from ascendpipe.backends.onnxruntime.convert import convert_model
from ascendpipe.errors import UserError
from ascendpipe.precision.settings import resolve
from tests import modelzoo

UNROUNDED = [  # settings that leave some or all weights as the source's bytes
    {"keep_dtype": ["side"], "soc_version": "Ascend910B1"},  # 'side' reads w_up in fp32 (HF32 off: exact)
    {"keep_dtype": ["side", "up"], "soc_version": "Ascend910B1"},
    {"precision_mode": "must_keep_origin_dtype"},
    {"precision_mode_v2": "origin"},
]


def _inline_twin(external: Path, target: Path) -> Path:
    onnx.save(onnx.load(str(external)), str(target))
    return target


def _run(path: Path, feeds: dict) -> np.ndarray:
    return ort.InferenceSession(str(path), providers=["CPUExecutionProvider"]).run(None, feeds)[0]


@pytest.mark.parametrize("seed", [0, 1, 2])
@pytest.mark.parametrize("params", UNROUNDED, ids=lambda p: "-".join(f"{k}={v}" for k, v in p.items()))
def test_an_unrounded_weight_reads_its_own_bytes_when_the_source_names_its_file_model_onnx_data(
        tmp_path, params, seed):
    source = modelzoo.external_ffn_model(tmp_path / "src" / "model.onnx", seed=seed)
    assert (tmp_path / "src" / "model.onnx.data").is_file()
    twin = convert_model(_inline_twin(source, tmp_path / "inline.onnx"), tmp_path / "twin", resolve(params))
    result = convert_model(source, tmp_path / "out", resolve(params))
    feeds = {"x": np.random.default_rng(seed).standard_normal((2, 64)).astype(np.float32)}
    np.testing.assert_array_equal(_run(result.model_path, feeds), _run(twin.model_path, feeds))
    record = json.loads((result.out_dir / "convert.json").read_text())["external_data"]
    assert set(record["source_files"]) == {"source_weights/model.onnx.data"}  # w_up, read unrounded
    assert record["data_file"] in (None, "model.emulated.data")
    assert not (result.out_dir / "model.onnx.data").exists()  # never the source's name
    graph = onnx.load(str(result.model_path), load_external_data=False).graph
    locations = {e.value for t in graph.initializer for e in t.external_data if e.key == "location"}
    assert locations <= {"source_weights/model.onnx.data", "model.emulated.data"}


def test_a_write_that_puts_a_weight_elsewhere_is_caught_before_the_model_is_in_place(tmp_path, monkeypatch):
    """The check after writing compares each weight with what was meant: the old bug (an unrounded
    weight pointed at the converted model's own file) is refused in one line, and no model.onnx is
    left that loads and reads the wrong bytes."""
    source = modelzoo.external_ffn_model(tmp_path / "src" / "model.onnx")
    real_place = external_weights.onnxexternal.place_weights

    def misplaced(tensors, source_dir, target_dir, prefix="", **kw):  # the location kept, as before the fix
        placed = real_place(tensors, source_dir, target_dir, prefix, **kw)
        for tensor in tensors:
            for entry in tensor.external_data:
                if entry.key == "location":
                    entry.value = external_weights.OWN_DATA
        return placed

    monkeypatch.setattr(external_weights.onnxexternal, "place_weights", misplaced)
    with pytest.raises(UserError) as err:
        convert_model(source, tmp_path / "out", resolve({"keep_dtype": ["side"], "soc_version": "Ascend910B1"}))
    assert "the converted model's weight 'w_up'" in str(err.value) and "a bug in ascendpipe" in str(err.value)
    assert not (tmp_path / "out" / "model.onnx").exists()


def test_a_rounded_weight_whose_bytes_differ_from_the_rounding_is_caught(tmp_path, monkeypatch):
    source = modelzoo.external_ffn_model(tmp_path / "src" / "model.onnx")
    real = external_weights._round_stream

    def shifted(ref, rounding, out, buffers, fmt="float16"):  # w_up's values read 4 bytes further on
        ref.offset += 4 if ref.tensor == "w_up" else 0
        real(ref, rounding, out, buffers, fmt)
        ref.offset -= 4 if ref.tensor == "w_up" else 0

    monkeypatch.setattr(external_weights, "_round_stream", shifted)
    with pytest.raises(UserError, match="weight 'w_up' holds other bytes than its rounded values at byte 0"):
        convert_model(source, tmp_path / "out", resolve({"precision_mode": "force_fp16"}))


def test_convert_says_when_the_disk_cannot_hold_what_it_writes(tmp_path, monkeypatch):
    """Before a byte is written: the rounded weights (fp16-read, written anew) against the free space,
    one line with the numbers."""
    import shutil
    from collections import namedtuple

    source = modelzoo.external_ffn_model(tmp_path / "src" / "model.onnx")
    usage = namedtuple("usage", "total used free")
    monkeypatch.setattr(shutil, "disk_usage", lambda path: usage(10 << 20, 10 << 20, 1000))
    with pytest.raises(UserError) as err:
        convert_model(source, tmp_path / "out", resolve({"precision_mode": "force_fp16"}))
    line = str(err.value)
    # w_up and w_down rounded (256 KB), and the small weights convert read into the graph (b_up, 2 KB)
    assert "convert needs 264.19 KB of disk" in line and "weights written: 264.19 KB" in line
    assert "weights files copied: 0 B) and 1.00 KB is free" in line
    assert not (tmp_path / "out" / "model.onnx").exists() and not (tmp_path / "out" / "model.emulated.data").exists()


def test_linked_source_weights_share_the_inode_and_still_load(tmp_path):
    """From a stage's output (link_weights), an unrounded weights file is a hard link where the file
    system cannot reflink: no copy. onnxruntime loads it; onnx's own loader would refuse the link
    (docs/emulation.md), which is why the checker runs on the graph alone."""
    source = modelzoo.external_ffn_model(tmp_path / "src" / "model.onnx")
    twin = convert_model(_inline_twin(source, tmp_path / "inline.onnx"), tmp_path / "twin",
                         resolve({"precision_mode": "must_keep_origin_dtype"}))
    result = convert_model(source, tmp_path / "out", resolve({"precision_mode": "must_keep_origin_dtype"}),
                           link_weights=True)
    placed = tmp_path / "out" / "source_weights" / "model.onnx.data"
    how = json.loads((tmp_path / "out" / "convert.json").read_text())["external_data"]["source_files"]
    assert how["source_weights/model.onnx.data"] in ("linked", "reflinked")
    if how["source_weights/model.onnx.data"] == "linked":
        assert os.path.samefile(placed, tmp_path / "src" / "model.onnx.data")
    feeds = {"x": np.ones((2, 64), np.float32)}
    np.testing.assert_array_equal(_run(result.model_path, feeds), _run(twin.model_path, feeds))


def test_a_weights_file_read_by_several_weights_is_placed_once(tmp_path, monkeypatch):
    """Every unrounded weight of the FFN lies in one file: it is copied once, not once per weight
    (a 2.4 GB model's must_keep_origin_dtype convert took 74 s: nine copies)."""
    from ascendpipe import fsutil

    source = modelzoo.external_ffn_model(tmp_path / "src" / "model.onnx")
    calls = []
    real = fsutil.share_file

    def counted(src, dst, **kw):
        calls.append(Path(dst).name)
        return real(src, dst, **kw)

    monkeypatch.setattr(fsutil, "share_file", counted)
    convert_model(source, tmp_path / "out", resolve({"precision_mode": "must_keep_origin_dtype"}))
    assert calls == ["model.onnx.data"]
