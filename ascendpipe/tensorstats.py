"""A tensor's summary as a dump's index records it (min/max over finite values, NaN and inf counts).

Pure numpy, imported by the dump writers (backends) and by compare alike, so compare reads feeds
without importing a backend."""

from __future__ import annotations

import numpy as np


def tensor_stats(array: np.ndarray) -> dict:
    """min/max over finite values (None if there are none), and NaN / Inf counts."""
    if array.size == 0 or array.dtype.kind not in "fiub":
        return {"min": None, "max": None, "nan": 0, "inf": 0}
    if array.dtype.kind != "f":
        return {"min": array.min().item(), "max": array.max().item(), "nan": 0, "inf": 0}
    lo, hi = array.min(), array.max()  # NaN propagates through min/max: finite both => no NaN/Inf
    if np.isfinite(lo) and np.isfinite(hi):
        return {"min": float(lo), "max": float(hi), "nan": 0, "inf": 0}
    nan, inf = int(np.isnan(array).sum()), int(np.isinf(array).sum())
    finite = array[np.isfinite(array)]
    if finite.size == 0:
        return {"min": None, "max": None, "nan": nan, "inf": inf}
    return {"min": float(finite.min()), "max": float(finite.max()), "nan": nan, "inf": inf}
