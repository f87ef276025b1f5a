"""Disk for big models (issue 49, item 8): a model's weights in a pipeline cost the disk once plus
what each variant really changes. The source stage copies the user's weights file once; the cache
shares the bytes of every big output (a hard link where the file system cannot reflink); a convert
variant that leaves weights unrounded links the source stage's file instead of copying it; equal
outputs of two stages become one inode. Counted here by inode (st_size of each distinct file under
build/ and cache/); on a file system that reflinks, files share blocks, not inodes, and the count
cannot see it (skipped there: bench/disk_pipeline.py measures with `du`)."""

from __future__ import annotations

import json
import os
from pathlib import Path

import numpy as np
import onnxruntime as ort
import pytest

from ascendpipe.cli.main import main
from tests import modelzoo

PIPELINE = """\
stages:
  src: {kind: source, model: models/ffn.onnx}
  convert:
    kind: convert
    model: src
    matrix:
      origin: {precision_mode: must_keep_origin_dtype}
      fp16: {precision_mode: force_fp16}
      keep: {keep_dtype: [side], soc_version: Ascend910B1}
      fp32: {precision_mode: force_fp32, soc_version: Ascend910B1, allow_hf32: false}
"""


def _reflinks(folder: Path) -> bool:
    from ascendpipe.fsutil import share_file

    (folder / "probe").write_bytes(b"x" * 4096)
    try:
        return share_file(folder / "probe", folder / "probe2") == "reflinked"
    finally:
        for name in ("probe", "probe2"):
            (folder / name).unlink(missing_ok=True)


def _files(*folders: Path) -> list[os.stat_result]:
    return [os.stat(p) for folder in folders for p in folder.rglob("*") if p.is_file() and not p.is_symlink()]


def _unique_bytes(stats) -> int:
    return sum({(s.st_dev, s.st_ino): s.st_size for s in stats}.values())


@pytest.fixture
def built(tmp_path, monkeypatch, capsys):
    root = tmp_path / "ws"
    (root / ".ascendpipe").mkdir(parents=True)
    if _reflinks(root):
        pytest.skip("this file system reflinks: shared blocks are not counted by inode (bench/disk_pipeline.py)")
    modelzoo.external_ffn_model(root / "models" / "ffn.onnx", hidden=256, ffn=1024)  # 2 MiB of weights
    (root / "pipeline.yaml").write_text(PIPELINE)
    monkeypatch.chdir(root)
    assert main(["build", "pipeline.yaml"]) == 0, capsys.readouterr()
    capsys.readouterr()
    return root


def test_a_three_variant_pipeline_costs_the_model_once_plus_what_each_variant_changes(built):
    root = built
    model_bytes = (root / "models" / "ffn.onnx.data").stat().st_size
    changed = 0  # the bytes each variant really writes: its own (rounded) weights file
    for variant in ("origin", "fp16", "keep", "fp32"):
        own = root / "build" / f"convert__{variant}" / "model.emulated.data"
        changed += own.stat().st_size if own.exists() else 0
    record = json.loads((root / "build" / "convert__origin" / "convert.json").read_text())["external_data"]
    assert record["rounded"] == 0 and record["source_files"] == {"source_weights/ffn.onnx.data": "linked"}
    stats = _files(root / "build", root / "cache")
    small = sum(s.st_size for s in stats if s.st_size < (1 << 20))  # graphs, plans, records: each under 1 MiB
    total = _unique_bytes(stats)
    assert total <= model_bytes + changed + small, (total, model_bytes, changed, small)
    naive = sum(s.st_size for s in stats)  # what it cost before: every file its own copy
    assert naive >= total + 4 * model_bytes  # the source's file in build/, cache/ and two variants' folders


def test_the_linked_weights_are_the_same_bytes_and_every_variant_still_loads(built):
    root = built
    source = root / "build" / "src" / "ffn.onnx.data"
    for variant in ("origin", "keep"):
        placed = root / "build" / f"convert__{variant}" / "source_weights" / "ffn.onnx.data"
        assert os.path.samefile(placed, source)
    feeds = {"x": np.ones((2, 256), np.float32)}
    for variant in ("origin", "fp16", "keep", "fp32"):
        model = root / "build" / f"convert__{variant}" / "model.onnx"
        out = ort.InferenceSession(str(model), providers=["CPUExecutionProvider"]).run(None, feeds)[0]
        assert np.isfinite(out).all()


def test_a_restored_output_shares_the_cache_objects_bytes(built, capsys):
    import shutil

    root = built
    shutil.rmtree(root / "build")
    assert main(["build", "pipeline.yaml"]) == 0
    out = capsys.readouterr().out
    assert out.count("restored") >= 5, out
    objects = {(s.st_dev, s.st_ino) for s in _files(root / "cache" / "objects")}
    big = [p for p in (root / "build").rglob("*.data") if p.stat().st_size >= 1 << 20]
    assert big and all((os.stat(p).st_dev, os.stat(p).st_ino) in objects for p in big)


def test_a_file_under_several_names_is_read_once_per_build(tmp_path, monkeypatch):
    """The source stage's weights, its object and each variant's link are one inode: hashed once."""
    from ascendpipe.store import hashing

    data = tmp_path / "a.bin"
    data.write_bytes(b"w" * 4096)
    for name in ("b.bin", "c.bin"):
        os.link(data, tmp_path / name)
    old = os.stat(data).st_mtime_ns - 10 * hashing.RACY_WINDOW_NS  # settled: out of the racy window
    os.utime(data, ns=(old, old))
    read = []
    real = hashing.hash_file
    monkeypatch.setattr(hashing, "hash_file", lambda path: read.append(path) or real(path))

    class NoRows:
        def stat_get(self, path):
            return None

    hasher = hashing.Hasher(NoRows(), str(tmp_path))
    monkeypatch.setattr(hashing.time, "time_ns", lambda: os.stat(data).st_ctime_ns + 10 * hashing.RACY_WINDOW_NS)
    digests = {hasher.hash_path(name) for name in ("a.bin", "b.bin", "c.bin")}
    assert len(digests) == 1 and len(read) == 1


def test_with_hard_links_off_no_output_shares_an_inode_and_onnx_loads_the_outputs(tmp_path, monkeypatch, capsys):
    """``ASCENDPIPE_CACHE_HARDLINKS=0``: onnx.load refuses a weights file with several links, so a user who
    loads build outputs with onnx turns the links off and pays the disk (reflinks, where there are any, stay)."""
    import onnx

    root = tmp_path / "ws"
    (root / ".ascendpipe").mkdir(parents=True)
    if _reflinks(root):
        pytest.skip("this file system reflinks: no hard link is made either way")
    modelzoo.external_ffn_model(root / "models" / "ffn.onnx", hidden=256, ffn=1024)
    (root / "pipeline.yaml").write_text(PIPELINE)
    monkeypatch.chdir(root)
    monkeypatch.setenv("ASCENDPIPE_CACHE_HARDLINKS", "0")
    assert main(["build", "pipeline.yaml"]) == 0, capsys.readouterr()
    stats = _files(root / "build", root / "cache")
    assert all(s.st_nlink == 1 for s in stats)
    assert _unique_bytes(stats) == sum(s.st_size for s in stats)  # every file its own copy
    for variant in ("origin", "fp16", "keep", "fp32"):
        model = onnx.load(str(root / "build" / f"convert__{variant}" / "model.onnx"))  # no "hardlink attack"
        assert model.graph.node
