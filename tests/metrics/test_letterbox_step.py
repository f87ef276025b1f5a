"""The built-in letterbox data step as a `run` stage calls it: files, metadata, resize mode, refusals."""

import json

import numpy as np
import pytest

from ascendpipe.data import letterbox as lb


def frames(tmp_path, sizes):
    rng = np.random.default_rng(0)
    imgs = {f"f{i:03d}": rng.integers(0, 256, (h, w, 3), dtype=np.uint8) for i, (h, w) in enumerate(sizes)}
    np.savez(tmp_path / "frames.npz", **imgs)
    return [imgs[k] for k in sorted(imgs)]


def test_letterbox_cli_writes_images_u8_and_metadata(tmp_path):
    imgs = frames(tmp_path, [(30, 60), (60, 30), (32, 32)])
    lb.main([str(tmp_path / "frames.npz"), "--size", "32", "32", "--out", str(tmp_path / "val"),
             "--mean", "114", "--scale", "0.00392156862745098"])
    doc = json.loads((tmp_path / "val" / "letterbox.json").read_text())
    assert doc["input_size"] == [32, 32] and [m["pad"] for m in doc["images"]] == [[0, 8], [8, 0], [0, 0]]
    u8 = np.load(tmp_path / "val" / "u8" / "images.npy")
    x = np.load(tmp_path / "val" / "images.npy")
    assert u8.shape == (3, 32, 32, 3) and x.shape == (3, 3, 32, 32) and x.dtype == np.float32
    np.testing.assert_allclose(x, (u8.astype(np.float64) - 114).transpose(0, 3, 1, 2) / 255, atol=1e-7)
    assert (u8[2] == imgs[2]).all()  # already the input size: untouched
    assert (x[0, :, :8] == 0).all()  # the padding (114) normalises to 0
    assert lb.read_meta(tmp_path / "val") == doc["images"]


def test_resize_mode_stretches_and_resized_needs_one_size(tmp_path):
    frames(tmp_path, [(30, 60), (60, 30)])
    lb.main([str(tmp_path / "frames.npz"), "--size", "32", "32", "--out", str(tmp_path / "r"), "--mode", "resize"])
    metas = lb.read_meta(tmp_path / "r")
    assert [m["scale"] for m in metas] == [[32 / 60, 32 / 30], [32 / 30, 32 / 60]] and metas[0]["pad"] == [0, 0]
    with pytest.raises(SystemExit, match="2 different sizes"):
        lb.main([str(tmp_path / "frames.npz"), "--size", "32", "32", "--out", str(tmp_path / "p"),
                 "--resized", str(tmp_path / "p_resized")])
    with pytest.raises(SystemExit, match="neither an .npz"):
        lb.main([str(tmp_path / "missing.npz"), "--size", "32", "32", "--out", str(tmp_path / "q")])
