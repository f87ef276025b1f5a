"""onnxruntime's float16 round trip gives numpy's bits, so a dump stores the same bytes either way."""

import numpy as np
import pytest

from ascendpipe.backends.onnxruntime import half


@pytest.mark.parametrize("scale", [1e-6, 1e-3, 1.0, 300.0, 7e4])
def test_round_trip_matches_numpy_bit_for_bit(scale):
    rng = np.random.default_rng(0)
    value = (rng.standard_normal((64, 1100)) * scale).astype(np.float32)  # above MIN_ELEMENTS: onnxruntime
    assert value.size >= half.MIN_ELEMENTS
    value.flat[::501] = np.nan
    value.flat[7], value.flat[9], value.flat[11] = np.inf, -np.inf, -0.0
    value.flat[13], value.flat[15] = 65520.0, 6e-8  # rounds to inf; an fp16 subnormal
    got, back = half.round_trip(value)
    with np.errstate(over="ignore", invalid="ignore"):
        want = value.astype(np.float16)
    assert got.dtype == np.float16 and got.shape == value.shape
    finite = np.isfinite(want)
    assert np.array_equal(got.view(np.uint16)[finite], want.view(np.uint16)[finite])
    assert np.array_equal(np.isnan(got), np.isnan(want)) and np.array_equal(np.isinf(got), np.isinf(want))
    assert np.array_equal(back, want.astype(np.float32), equal_nan=True)


def test_equal_bits_accepts_exact_values_and_nan_and_refuses_rounded_ones():
    rng = np.random.default_rng(1)
    exact = rng.standard_normal(100_000).astype(np.float16).astype(np.float32)
    exact[5] = np.nan
    assert half.equal_bits(half.round_trip(exact)[1], exact)
    rounded = exact.copy()
    rounded[7] = np.float32(1.0001)  # not an fp16 value
    assert not half.equal_bits(half.round_trip(rounded)[1], rounded)
    small = exact[:100]  # below MIN_ELEMENTS: numpy's cast, same answer
    assert half.equal_bits(half.round_trip(small)[1], small)


def test_widen_gives_numpy_float32_values_for_every_float16():
    import onnxruntime  # noqa: F401  widen takes onnxruntime's path only once it is loaded

    every = np.arange(1 << 16, dtype=np.uint16).view(np.float16)  # every bit pattern: NaNs, infs, -0, subnormals
    value = np.tile(every, 2).reshape(2, 2, -1)  # above MIN_ELEMENTS: onnxruntime
    got = half.widen(value)
    want = value.astype(np.float32)
    assert got.dtype == np.float32 and got.shape == value.shape
    finite = np.isfinite(want)
    assert np.array_equal(got.view(np.uint32)[finite], want.view(np.uint32)[finite])  # -0 stays -0
    assert np.array_equal(np.isnan(got), np.isnan(want)) and np.array_equal(got[~np.isnan(got)], want[~np.isnan(want)])
    small = every[:100]
    assert np.array_equal(half.widen(small).view(np.uint32), small.astype(np.float32).view(np.uint32))
    other = np.ones(3, np.float32)
    assert half.widen(other) is other


@pytest.mark.parametrize("size", [1000, (1 << 16) + 3, 2 * (1 << 20) + 5])  # numpy; onnxruntime in one block; 3 blocks
def test_narrow_and_exact_half_give_round_trips_bits_block_by_block(size):
    rng = np.random.default_rng(2)
    value = (rng.standard_normal(size) * 300).astype(np.float32)
    value[[1, 3, 5, 7]] = np.nan, np.inf, -0.0, 65520.0
    want, _ = half.round_trip(value)
    assert np.array_equal(half.narrow(value).view(np.uint16), want.view(np.uint16))
    assert half.exact_half(value) is None  # random values are not fp16 values
    exact = want.astype(np.float32)
    got = half.exact_half(exact.reshape(1, -1))
    assert got.shape == (1, size) and np.array_equal(got.view(np.uint16).ravel(), want.view(np.uint16))
    exact[-1] = np.float32(1.0001)  # one value off fp16, in the last block
    assert half.exact_half(exact) is None
    strided = np.stack([want.astype(np.float32)] * 2, axis=1)[:, 0]  # not contiguous
    assert np.array_equal(half.exact_half(strided).view(np.uint16), want.view(np.uint16))
