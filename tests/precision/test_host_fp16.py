"""GE converts constants to fp16 on the host at compile time (precision.fp16.host_fp16): held to an
independent bit-by-bit port of GE's fp16_t (tests/precision/ge_fp16.py) on values across the range."""

import numpy as np

from ascendpipe.precision.fp16 import host_fp16
from tests.precision.ge_fp16 import ge_fp16


def _same(a, b) -> bool:
    return bool(np.array_equal(np.isnan(a), np.isnan(b)) and np.array_equal(a[~np.isnan(a)], b[~np.isnan(b)]))


def test_host_conversion_matches_ges_fp16_t_bit_for_bit():
    rng = np.random.default_rng(0)
    edges = [0.0, -0.0, 1e-9, 2.0 ** -25, 2.0 ** -25 * 1.0001, 2.0 ** -24, 5.9e-8, 6.1e-5, 1.0, 3.14159, 65504.0,
             65519.0, 65520.0, 65535.9, 65536.0, 100000.0, 131071.0, 131072.0, 1e9, 3.4e38, np.inf, -np.inf, np.nan]
    values = np.concatenate([np.array(edges, np.float32), -np.array(edges, np.float32),
                             (rng.standard_normal(4000) * 10.0 ** rng.uniform(-9, 7, 4000)).astype(np.float32)])
    assert _same(host_fp16(values), ge_fp16(values))


def test_the_quirks_are_the_codes():
    got = host_fp16(np.array([1e9, -1e9, 65504, 65519, 65520, 100000, 131072, np.inf, 1e-9], np.float32))
    # past 2^17 (and inf) the exponent check (L743-745) gives +-65504; [65520, 2^17) rounds into exponent
    # 31 and Fp16NormalizeVal (L54-65) makes it a NaN; a value fp16 holds converts as IEEE's nearest even
    assert got[[0, 1, 6, 7]].tolist() == [65504.0, -65504.0, 65504.0, 65504.0]
    assert got[2] == got[3] == 65504.0 and np.isnan(got[4]) and np.isnan(got[5]) and got[8] == 0.0
