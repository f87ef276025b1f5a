"""numpy_sums rebuilds numpy's pairwise float sums from block sums, bit for bit."""

import numpy as np
import pytest

from ascendpipe.compare import numpy_sums


def blockwise_sum(blocks, n, limit, dtype):
    """The whole sum from the leaves' arrays, as a blocked caller rebuilds it."""
    return numpy_sums.combine(n, limit, [np.add.reduce(b) for b in blocks], dtype)


@pytest.mark.parametrize("dtype", [np.float32, np.float64])
def test_blockwise_sum_equals_numpy_sum_bit_for_bit(dtype):
    rng = np.random.default_rng(7)
    for _ in range(60):
        n = int(rng.integers(1, 400_000))
        limit = int(rng.choice([128, 1000, 4096, 65536]))
        x = (rng.standard_normal(n) * rng.uniform(1e-3, 1e4) + rng.uniform(-5, 5)).astype(dtype)
        spans = numpy_sums.leaves(n, limit)
        assert spans[0][0] == 0 and spans[-1][1] == n
        assert all(a[1] == b[0] for a, b in zip(spans, spans[1:]))  # contiguous, in order
        got = blockwise_sum((x[a:b] for a, b in spans), n, limit, dtype)
        assert type(got) is np.dtype(dtype).type
        assert got.tobytes() == x.sum().tobytes(), (n, limit)


def test_leaves_never_split_below_numpys_block_and_respect_the_limit():
    spans = numpy_sums.leaves(1_000_003, 70_000)
    sizes = [b - a for a, b in spans]
    assert max(sizes) <= 70_000 and min(sizes) > 128
    assert numpy_sums.leaves(100, 10) == [(0, 100)]  # numpy sums 100 elements in one unrolled loop


def test_sum_of_negative_zeros_is_positive_zero_as_numpy_gives():
    x = np.full(5000, -0.0, np.float32)
    got = blockwise_sum((x[a:b] for a, b in numpy_sums.leaves(x.size, 256)), x.size, 256, np.float32)
    assert got.tobytes() == x.sum().tobytes()
