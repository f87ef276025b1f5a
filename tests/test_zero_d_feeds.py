"""A 0-d input (a sample rate, a threshold) keeps its rank on every path that writes or hashes feeds:
``np.ascontiguousarray`` turns it into shape [1], which the ascend tools would be fed and the dump
cache would key as a one-element array."""

from __future__ import annotations

import hashlib
import json

import numpy as np

from ascendpipe.errors import Location
from ascendpipe.inputs import Batch, InputSpec


def test_ais_bench_input_files_keep_a_0d_input_0d(tmp_path):
    from ascendpipe.backends.ascend.ais_io import write_ais_inputs

    batch = Batch({"x": np.ones((2, 3), np.float32), "rate": np.array(16000, np.int64)})
    dirs = write_ais_inputs([batch], ["x", "rate"], tmp_path)
    rate = np.load(dirs[1] / "00000.npy")
    assert rate.shape == () and int(rate) == 16000 and rate.dtype == np.int64
    assert np.load(dirs[0] / "00000.npy").shape == (2, 3)


def test_msit_input_files_keep_a_0d_input_0d(tmp_path):
    from ascendpipe.backends.ascend.om_compare import _input_shape, _write_inputs

    feeds = {"x": np.ones((1, 4), np.float32), "threshold": np.array(0.5, np.float32)}
    files = _write_inputs(feeds, tmp_path)
    assert [np.load(f).shape for f in files] == [(1, 4), ()]
    assert float(np.load(files[1])) == 0.5
    assert _input_shape(feeds) == "x:1,4;threshold:"  # the shape msit is told matches the file


def test_calibration_data_keeps_a_0d_input_and_hashes_its_shape(tmp_path):
    from ascendpipe.quantize.artifacts import calibration_batches
    from ascendpipe.quantize.config import QuantSettings

    specs = [InputSpec("x", ("N", 2), "float32"), InputSpec("rate", (), "int64")]
    x = np.arange(8, dtype=np.float32).reshape(4, 2)
    np.savez(tmp_path / "calib.npz", x=x, rate=np.array(16000, np.int64))
    used, info = calibration_batches(tmp_path / "calib.npz", specs, QuantSettings(batch_num=2, batch_size=2),
                                     Location())
    assert [b["x"].shape for b in used] == [(2, 2), (2, 2)] and all(b["rate"].shape == () for b in used)
    np.testing.assert_array_equal(np.concatenate([b["x"] for b in used]), x)
    digest = hashlib.sha256()
    for batch in used:
        digest.update("rate|<i8|[]\n".encode() + np.int64(16000).tobytes())
        digest.update("x|<f4|[2, 2]\n".encode() + batch["x"].tobytes())
    assert info["sha256"] == digest.hexdigest() and info["samples"] == 4


def _old_digest(feeds: dict) -> str:
    """The feed hash as the dump cache computed it before (np.ascontiguousarray)."""
    h = hashlib.sha256()
    for name in sorted(feeds):
        array = np.ascontiguousarray(feeds[name])
        h.update(json.dumps([name, array.dtype.str, list(array.shape)]).encode())
        h.update(memoryview(array).cast("B"))
    return h.hexdigest()


def test_the_dump_cache_tells_a_0d_feed_from_a_one_element_array_and_keeps_other_keys():
    from ascendpipe.store.dump_cache import feeds_digest

    assert feeds_digest({"rate": np.array(16000)}) != feeds_digest({"rate": np.array([16000])})
    ordinary = {"x": np.arange(24, dtype=np.float32).reshape(2, 3, 4), "ids": np.arange(6).reshape(3, 2).T,
                "mask": np.array([True, False])}
    assert feeds_digest(ordinary) == _old_digest(ordinary)  # existing cache entries stay valid
    assert feeds_digest({"rate": np.array([16000])}) == _old_digest({"rate": np.array([16000])})
