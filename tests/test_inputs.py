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


# --- feed what the model takes ------------------------------------------------------------------

def test_feeds_of_the_models_fixed_shapes_run_as_given_once(tmp_path):
    # a broadcasting Add and an attention's mask: their first axes are dims, not a batch
    specs = [InputSpec("x", (3, 4, 5), "float32"), InputSpec("y", (5,), "float32"),
             InputSpec("mask", (4, 4), "bool")]
    feeds = {"x": np.ones((3, 4, 5), np.float32), "y": np.arange(5, dtype=np.float32),
             "mask": np.eye(4, dtype=bool)}
    np.savez(tmp_path / "f.npz", **feeds)
    batches = load_inputs(tmp_path / "f.npz", specs)
    assert len(batches) == 1
    for name, value in feeds.items():
        assert batches[0][name].shape == value.shape and batches[0][name].dtype == value.dtype
        np.testing.assert_array_equal(batches[0][name], value)


def test_symbolic_dims_of_differing_sizes_run_as_given(tmp_path):
    specs = [InputSpec("q", ("B", "S", 8), "float32"), InputSpec("k", ("B", "T", 8), "float32"),
             InputSpec("bias", ("T",), "float32")]
    feeds = {"q": np.zeros((2, 3, 8), np.float32), "k": np.zeros((2, 6, 8), np.float32),
             "bias": np.zeros(6, np.float32)}
    np.savez(tmp_path / "f.npz", **feeds)
    batches = load_inputs(tmp_path / "f.npz", specs)
    assert [b["bias"].shape for b in batches] == [(6,)] and batches[0]["q"].shape == (2, 3, 8)


def test_zero_d_input_stays_zero_d_beside_a_batch(tmp_path):
    specs = [InputSpec("x", ("N", 2), "float32"), InputSpec("rate", (), "int64")]
    np.savez(tmp_path / "f.npz", x=np.ones((3, 2), np.float32), rate=np.array(16000, np.int64))
    (batch,) = load_inputs(tmp_path / "f.npz", specs)
    assert batch["rate"].shape == () and int(batch["rate"]) == 16000 and batch.rows == 3
    halves = load_inputs(tmp_path / "f.npz", specs, batch_size=2)
    assert [b["x"].shape[0] for b in halves] == [2, 1] and all(b["rate"].shape == () for b in halves)


def test_string_inputs_take_numpy_unicode_and_bytes(tmp_path):
    spec = InputSpec("text", ("N",), "str")
    np.save(tmp_path / "u.npy", np.array(["abc", "de"]))
    (batch,) = load_inputs(tmp_path / "u.npy", [spec])
    assert list(batch["text"]) == ["abc", "de"]
    np.save(tmp_path / "b.npy", np.array([b"abc"]))
    assert load_inputs(tmp_path / "b.npy", [spec])[0]["text"].shape == (1,)
    np.save(tmp_path / "n.npy", np.arange(2.0))
    with pytest.raises(UserError) as err:
        load_inputs(tmp_path / "n.npy", [spec])
    assert "expected str [N], given float64 [2]" in str(err.value) and "unicode" in str(err.value)


@pytest.mark.parametrize("kind, why", [("seq(tensor(float))", "a sequence of tensors"),
                                       ("optional(seq(tensor(float)))", "an optional value"),
                                       ("tensor(float8e4m3fn)", "no dtype for")])
def test_inputs_numpy_cannot_feed_are_one_line_naming_the_input(tmp_path, kind, why):
    specs = [InputSpec("x", (2,), "float32"), InputSpec("state", (), kind)]
    np.savez(tmp_path / "f.npz", x=np.zeros(2, np.float32))
    for call in (lambda: load_inputs(tmp_path / "f.npz", specs), lambda: random_inputs(specs)):
        with pytest.raises(UserError) as err:
            call()
        text = str(err.value)
        assert f"input 'state' is {kind}" in text and why in text and "\n" not in text


def test_more_samples_than_a_fixed_batch_split_along_the_batch_axis(tmp_path):
    specs = [InputSpec("x", (2, 4), "float32"), InputSpec("state", (3, 2, 5), "float32")]
    np.savez(tmp_path / "f.npz", x=np.arange(20, dtype=np.float32).reshape(5, 4),
             state=np.zeros((3, 5, 5), np.float32))
    with pytest.raises(UserError) as err:
        load_inputs(tmp_path / "f.npz", specs)
    assert "--batch-axes" in str(err.value)
    batches = load_inputs(tmp_path / "f.npz", specs, batch_axes={"state": 1})
    assert [b.valid for b in batches] == [2, 2, 1] and batches[2]["state"].shape == (3, 2, 5)
    np.testing.assert_array_equal(batches[1]["x"], np.arange(8, 16, dtype=np.float32).reshape(2, 4))


def test_npy_header_claiming_more_than_the_file_holds_is_refused_before_allocating(tmp_path):
    import numpy.lib.format as fmt

    path = tmp_path / "x.npy"
    with open(path, "wb") as fh:
        fmt.write_array_header_1_0(fh, {"descr": "<f4", "fortran_order": False, "shape": (1 << 40, 3, 64, 64)})
        fh.write(b"\0" * 16)
    with pytest.raises(UserError) as err:
        load_inputs(path, [InputSpec("x", (None, 3, 64, 64), "float32")])
    text = str(err.value)
    assert str(path) in text and "damaged or truncated" in text and "48.0 PiB" in text and "16 B" in text
    np.savez(tmp_path / "f.npz", x=np.zeros((2, 3), np.float32))
    import zipfile

    with zipfile.ZipFile(tmp_path / "f.npz") as archive:
        member = archive.read("x.npy")
    with zipfile.ZipFile(tmp_path / "g.npz", "w") as archive:  # the member's header says 2^40 rows
        archive.writestr("x.npy", member.replace(b"(2, 3)", b"(1099511627776, 3)".ljust(6)))
    with pytest.raises(UserError) as err:
        load_inputs(tmp_path / "g.npz", [InputSpec("x", (None, 3), "float32")])
    assert "member 'x'" in str(err.value) and "damaged or truncated" in str(err.value)


def test_npy_whose_header_is_cut_is_one_located_line(tmp_path):
    """numpy's reader gives up on a cut header with tokenize's TokenError, which was a traceback."""
    path = tmp_path / "x.npy"
    path.write_bytes(b"\x93NUMPY\x01\x00" + (20).to_bytes(2, "little") + b"{'descr': '<f4', 'fo")
    with pytest.raises(UserError) as err:
        load_inputs(path, [InputSpec("x", (None, 3), "float32")])
    assert err.value.location.file == str(path) and "cannot read input file" in str(err.value)
