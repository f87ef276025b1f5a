"""The text of msaccucmp's cells: its column order, constants and number formats.

Shared by ``msaccucmp`` (the formulas over whole tensors) and ``pairpass`` (the same formulas block
by block); the sources are cited in ``msaccucmp``'s docstring.
"""

from __future__ import annotations

import numpy as np

ALGORITHMS = (  # msaccucmp's column order (const_manager.py:186-197)
    "CosineSimilarity", "MaxAbsoluteError", "AccumulatedRelativeError", "RelativeEuclideanDistance",
    "KullbackLeiblerDivergence", "StandardDeviation", "MeanAbsoluteError", "RootMeanSquareError",
    "MaxRelativeError", "MeanRelativeError",
)
BOOL_ALGORITHMS = ("CosineSimilarity", "RelativeEuclideanDistance")
NAN = "NaN"
EPS = np.finfo(float).eps  # a numpy float64 scalar: comparisons with float32 arrays happen in float64
KL_FLOOR = np.finfo(np.float32).eps
SMALL = 0.001  # StandardDeviation's MINIMUM_VALUE


def fmt(value) -> str:
    return "{:.6f}".format(value)


def cosine_cell(t_norm, g_norm, value, t_file: str, g_file: str):
    """The cell from both norms (shape-(1,) float32 arrays, as np.linalg.norm gives) and ``value()``,
    the sum of the normalised products (computed only when the norms allow)."""
    if t_norm <= EPS and g_norm < EPS:
        return "1.0", ""
    if t_norm ** 0.5 <= EPS:
        return NAN, f"Cannot compare by Cosine Similarity. All the data is zero in {t_file}."
    if g_norm ** 0.5 <= EPS:
        return NAN, f"Cannot compare by Cosine Similarity. All the data is zero in {g_file}."
    return fmt(min(value(), 1.0)), ""


def red_cell(square, squared_diff_sum):
    value = 0.0 if square ** 0.5 <= EPS else squared_diff_sum() / square
    return fmt(value ** 0.5), ""


def kl_cell(t_zero, g_zero, value, t_file: str, g_file: str):
    if t_zero and g_zero:
        return NAN, f"Cannot compare by KL Divergence. All the data is zero in {t_file!r} and {g_file!r}."
    if t_zero or g_zero:
        return NAN, f"Cannot compare by KL Divergence. All the data is zero in {t_file if t_zero else g_file}."
    value = value()
    if abs(value) < EPS:
        value = 0.0
    note = f"Cannot compare by KL Divergence. The data contains 0 in {g_file!r}." if str(value) == "inf" else ""
    return fmt(value), note


def std_cell(parts):
    parts = [0.0 if abs(v) < SMALL else v for v in parts]
    return "(%.3f;%.3f),(%.3f;%.3f)" % tuple(parts), ""


def nan_max(a, b):
    """max as numpy's reduction gives it: a NaN anywhere wins."""
    return b if a is None else np.maximum(a, b)


def nan_min(a, b):
    return b if a is None else np.minimum(a, b)
