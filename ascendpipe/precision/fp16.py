"""IEEE half-precision facts and the rounding the emulation applies at fp16 tensor boundaries."""

from __future__ import annotations

import numpy as np

FP16_MAX = 65504.0  # largest finite
FP16_MIN_NORMAL = 6.103515625e-05  # 2**-14
FP16_MIN_SUBNORMAL = 5.960464477539063e-08  # 2**-24; anything below half of it rounds to 0


def round_fp16(values: np.ndarray) -> np.ndarray:
    """fp32 values as the device holds them in fp16 (round to nearest even), returned as fp32.

    Overflow gives +-inf and underflow gives 0, exactly as a Cast(to=FLOAT16) would.
    """
    with np.errstate(over="ignore", under="ignore"):
        return np.asarray(values, dtype=np.float32).astype(np.float16).astype(np.float32)


def overflows(values: np.ndarray) -> bool:
    """True where finite fp32 values become inf in fp16."""
    arr = np.asarray(values, dtype=np.float32)
    return bool(np.any(np.isfinite(arr) & ~np.isfinite(round_fp16(arr))))


def underflows(values: np.ndarray) -> bool:
    """True where non-zero fp32 values become 0 in fp16."""
    arr = np.asarray(values, dtype=np.float32)
    return bool(np.any((arr != 0) & (round_fp16(arr) == 0)))


def host_fp16(values: np.ndarray) -> np.ndarray:
    """fp32 values as GE converts a constant to fp16 on the host at compile time, returned as fp32.

    GE's ``fp16_t::operator=(const float)`` (hicann/ge ffdcbc9f ``base/common/fp16_t/fp16_t.cc``
    L723-779; the FE's copy ``compiler/engines/nn_engine/utils/common/fe_fp16_t.cc`` L240-292 is the
    same), reached from the constant folding of a Cast (``compiler/host_kernels/elewise_calculation_ops/
    cast_kernel.cc`` L28-109 -> ``base/common/datatype_transfer/datatype_transfer.cc`` L86-94): round to
    nearest even, but a biased fp32 exponent above 143 (|x| >= 131072, inf and NaN included) becomes
    +-65504 (L743-745), and a value that rounds past the largest binade, |x| in [65520, 131072),
    gets exponent 31 and mantissa 0x3FF from ``Fp16NormalizeVal`` (L54-65): a NaN. It is the same in
    every overflow mode: the conversion runs on the host, not on the device.
    """
    x = np.asarray(values, dtype=np.float32)
    with np.errstate(over="ignore", invalid="ignore"):
        return host_rule(x, x.astype(np.float16).astype(np.float32))


def host_rule(x: np.ndarray, rounded: np.ndarray) -> np.ndarray:
    """``rounded`` (``x`` rounded to fp16 to nearest even, as fp32) with GE's host exceptions applied
    (``host_fp16``); ``rounded`` is changed in place where it is writable."""
    with np.errstate(invalid="ignore"):
        magnitude = np.abs(x)
        huge = ~(magnitude < np.float32(131072.0))  # NaN too
        if huge.any():
            rounded = np.where(huge, np.copysign(np.float32(FP16_MAX), x), rounded).astype(np.float32)
        quirk = (magnitude >= np.float32(65520.0)) & (magnitude < np.float32(131072.0))
        if quirk.any():
            rounded = np.where(quirk, np.float32(np.nan), rounded).astype(np.float32)
    return rounded
