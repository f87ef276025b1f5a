import numpy as np
import pytest

from ascendpipe.errors import UserError
from ascendpipe.inputs import InputSpec, load_inputs, random_inputs, save_npy_atomic

IMAGE = InputSpec("image", (None, 3, 4, 2), "float32")


def test_single_npy_dynamic_batch_is_one_batch(tmp_path):
    data = np.arange(5 * 24, dtype=np.float32).reshape(5, 3, 4, 2)
    np.save(tmp_path / "x.npy", data)
    batches = load_inputs(tmp_path / "x.npy", [IMAGE])
    assert len(batches) == 1 and batches[0].valid == 5
    np.testing.assert_array_equal(batches[0]["image"], data)


def test_static_batch_splits_and_pads_last_batch(tmp_path):
    spec = InputSpec("image", (4, 3, 4, 2), "float32")
    data = np.random.default_rng(0).standard_normal((10, 3, 4, 2)).astype(np.float32)
    np.save(tmp_path / "x.npy", data)
    batches = load_inputs(tmp_path / "x.npy", [spec])
    assert [b.valid for b in batches] == [4, 4, 2]
    assert all(b["image"].shape == (4, 3, 4, 2) for b in batches)
    np.testing.assert_array_equal(batches[1]["image"], data[4:8])
    np.testing.assert_array_equal(batches[2]["image"][:2], data[8:])
    np.testing.assert_array_equal(batches[2]["image"][2], data[9])  # padding repeats the last sample


def test_directory_is_read_in_name_order_and_rebatched(tmp_path):
    first = np.zeros((2, 3, 4, 2), np.float32)
    second = np.ones((3, 3, 4, 2), np.float32)
    np.save(tmp_path / "b.npy", second)
    np.save(tmp_path / "a.npy", first)
    batches = load_inputs(tmp_path, [IMAGE], batch_size=4)
    assert [b["image"].shape[0] for b in batches] == [4, 1]
    assert batches[0]["image"][:2].sum() == 0 and batches[0]["image"][2:].min() == 1


def test_sample_without_batch_axis_gets_one(tmp_path):
    np.save(tmp_path / "one.npy", np.ones((3, 4, 2), np.float32))
    (batch,) = load_inputs(tmp_path / "one.npy", [IMAGE])
    assert batch["image"].shape == (1, 3, 4, 2)


def test_mismatch_shows_expected_and_given(tmp_path):
    spec = InputSpec("image", (None, 3, 256, 128), "float32")
    np.save(tmp_path / "x.npy", np.zeros((8, 256, 128, 3), np.uint8))
    with pytest.raises(UserError) as err:
        load_inputs(tmp_path / "x.npy", [spec])
    assert err.value.message == "input 'image': expected float32 [N,3,256,128], given uint8 [8,256,128,3]"
    assert str(tmp_path / "x.npy") in str(err.value)


def test_dtype_only_mismatch_hints_the_cast(tmp_path):
    np.save(tmp_path / "x.npy", np.zeros((2, 3, 4, 2), np.float64))
    with pytest.raises(UserError) as err:
        load_inputs(tmp_path / "x.npy", [IMAGE])
    assert "expected float32 [N,3,4,2], given float64 [2,3,4,2]" in err.value.message
    assert "astype('float32')" in str(err.value)


def test_npz_keyed_by_name_and_missing_names(tmp_path):
    specs = [InputSpec("a", (2, 3), "float32"), InputSpec("b", (2, 3), "int64")]
    a, b = np.ones((2, 3), np.float32), np.arange(6, dtype=np.int64).reshape(2, 3)
    np.savez(tmp_path / "ok.npz", a=a, b=b)
    (batch,) = load_inputs(tmp_path / "ok.npz", specs)
    np.testing.assert_array_equal(batch["b"], b)
    np.savez(tmp_path / "bad.npz", a=a, c=b)
    with pytest.raises(UserError, match="missing b; unknown c"):
        load_inputs(tmp_path / "bad.npz", specs)
    with pytest.raises(UserError, match="single-input"):
        np.save(tmp_path / "a.npy", a)
        load_inputs(tmp_path / "a.npy", specs)


def test_directory_of_input_named_npy_is_one_bundle(tmp_path):
    specs = [InputSpec("a", ("N", 3), "float32"), InputSpec("b", ("N", 3), "float32")]
    np.save(tmp_path / "a.npy", np.full((4, 3), 2, np.float32))
    np.save(tmp_path / "b.npy", np.full((4, 3), 5, np.float32))
    (batch,) = load_inputs(tmp_path, specs)
    assert batch["a"][0, 0] == 2 and batch["b"][0, 0] == 5


def test_batch_size_against_static_batch_is_an_error(tmp_path):
    np.save(tmp_path / "x.npy", np.zeros((4, 3, 4, 2), np.float32))
    with pytest.raises(UserError, match="fixed at 4"):
        load_inputs(tmp_path / "x.npy", [InputSpec("image", (4, 3, 4, 2), "float32")], batch_size=2)


def test_random_inputs_reproducible_and_shaped():
    specs = [IMAGE, InputSpec("ids", ("N", 5), "int64"), InputSpec("raw", (1, 2, 2, 3), "uint8")]
    one, again, other = random_inputs(specs, seed=3, batch_size=2), random_inputs(specs, seed=3, batch_size=2), \
        random_inputs(specs, seed=4, batch_size=2)
    assert one["image"].shape == (2, 3, 4, 2) and one["image"].dtype == np.float32
    assert one["ids"].shape == (2, 5) and one["ids"].dtype == np.int64
    assert one["raw"].shape == (1, 2, 2, 3) and one["raw"].dtype == np.uint8
    np.testing.assert_array_equal(one["image"], again["image"])
    assert not np.array_equal(one["image"], other["image"])


def test_save_npy_atomic_leaves_only_the_file(tmp_path):
    data = np.arange(7, dtype=np.int32)
    save_npy_atomic(tmp_path / "t.npy", data)
    assert [p.name for p in tmp_path.iterdir()] == ["t.npy"]
    np.testing.assert_array_equal(np.load(tmp_path / "t.npy"), data)


def test_inputs_without_samples_are_refused(tmp_path):
    """An empty batch axis ran an inference of nothing: '0 samples in 1 batches', then scores of 0/0."""
    spec = InputSpec("x", ("N", 3), "float32")
    np.save(tmp_path / "x.npy", np.ones((0, 3), np.float32))
    with pytest.raises(UserError) as err:
        load_inputs(tmp_path / "x.npy", [spec])
    assert str(err.value).startswith(f"{tmp_path / 'x.npy'}: the inputs hold no samples ('x' empty along the batch axis)")
