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
