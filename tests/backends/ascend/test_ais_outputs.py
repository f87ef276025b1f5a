"""ais_bench's per-batch output files joined into outputs/<name>.npy as the emulator writes them."""

import numpy as np

from ascendpipe.backends.ascend.ais_io import collect_outputs
from ascendpipe.inputs import Batch


def _write(result_dir, batch_index, k, value):
    result_dir.mkdir(exist_ok=True)
    np.save(result_dir / f"{batch_index:05d}_{k}.npy", value)


def test_one_batch_is_written_as_the_model_returned_it(tmp_path):
    """A 0-d output stays 0-d and an output without a batch axis keeps its shape (it got a leading 1)."""
    res = tmp_path / "res"
    batch = Batch({"x": np.zeros((3, 4), np.float32)})
    _write(res, 0, 0, np.float32(2.5))
    _write(res, 0, 1, np.arange(6, dtype=np.float32).reshape(2, 3))
    _write(res, 0, 2, np.ones((3, 5), np.float32))
    described = collect_outputs(res, [batch], ["scalar", "table", "y"], tmp_path / "out")
    assert [described[n]["shape"] for n in ("scalar", "table", "y")] == [[], [2, 3], [3, 5]]
    assert np.load(tmp_path / "out" / described["scalar"]["file"]) == np.float32(2.5)


def test_batches_join_on_the_batch_axis_and_padding_is_dropped(tmp_path):
    res = tmp_path / "res"
    full = Batch({"x": np.zeros((2, 4), np.float32)})
    padded = Batch({"x": np.zeros((2, 4), np.float32)}, valid=1)
    _write(res, 0, 0, np.array([[1.0], [2.0]], np.float32))
    _write(res, 1, 0, np.array([[3.0], [3.0]], np.float32))
    described = collect_outputs(res, [full, padded], ["y"], tmp_path / "out")
    assert np.load(tmp_path / "out" / described["y"]["file"]).ravel().tolist() == [1.0, 2.0, 3.0]
