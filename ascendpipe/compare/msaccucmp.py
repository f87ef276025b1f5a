"""The cells msaccucmp writes in msit's result_*.csv, computed as msaccucmp computes them.

msit's ONNX-vs-OM compare (``msit debug compare``) runs msaccucmp and keeps its metric cells as text
(msit ``msquickcmp/cmp_process.py``: ``csv.reader`` -> append three columns -> ``csv.writer``), so each
cell here is the string msaccucmp formats, for the same two arrays. Source: package
``mindstudio-probe`` 26.2.0, ``msprobe/msaccucmp/`` (paths below are relative to it):

- Preparation (``algorithm_manager/algorithm_manager.py:166-181``): both tensors flattened; unless
  *both* are bool, both are cast to float32 (so float64 values beyond float32's range become inf,
  integers become float32); with two bool tensors only CosineSimilarity and RelativeEuclideanDistance
  run (``cmp_utils/constant/const_manager.py:199``), the others are ``NaN`` with "Algorithm X does not
  support Boolean types.". Numpy warnings are off (``np.seterr`` at ``algorithm_manager.py:167``; over
  flows warn and continue); an exception inside an algorithm gives ``NaN`` and "Failed to execute
  'compare' in 'X'. <error>" (``algorithm_manager.py:371-390``), e.g. the max of an empty tensor.
- Text: ``'{:.6f}'`` (``cmp_utils/utils.py:152-158``), so inf/NaN values read ``inf``/``nan``; the
  ``NaN`` of "no value" is ``ConstManager.NAN`` (``const_manager.py:156``).
- EPS = ``np.finfo(float).eps`` = 2.2e-16, a float64 scalar (``const_manager.py:155``).
- CosineSimilarity (``alg_CosineSimilarity.py:41-58``): ``1.000000`` for a scalar shape (every dim 1,
  ``cmp_utils/utils.py:199-205``); ``1.0`` when both norms are ~0; ``NaN`` when one side's norm is
  (sqrt(norm) <= EPS); else sum((t/|t|)*(g/|g|)) capped at 1.
- MaxAbsoluteError, MeanAbsoluteError (``alg_MaxAbsoluteError.py:40``, ``alg_MeanAbsoluteError.py:40``):
  max / mean of |t - g| over every element.
- MaxRelativeError, MeanRelativeError, AccumulatedRelativeError (``alg_MaxRelativeError.py:41-46``,
  ``alg_MeanRelativeError.py:41-46``, ``alg_AccumulatedRelativeError.py:41-46``): |t/g - 1| where
  |g| > EPS, 0 elsewhere; max, mean over all n, sum.
- RelativeEuclideanDistance (``alg_RelativeEuclideanDistance.py:41-46``): sqrt(sum((t-g)^2) / sum(g^2)),
  0 when sqrt(sum g^2) <= EPS.
- RootMeanSquareError (``alg_RootMeanSquareError.py:39``): sqrt(mean((t-g)^2)).
- KullbackLeiblerDivergence (``alg_KullbackLeiblerDivergence.py:30-84``): each side min-max normalised
  to [0, 1] (unless constant), floored at float32's eps, divided by its sum: KL(npu || golden) =
  sum(p_t log(p_t / p_g)); |KL| < EPS reads 0.
- StandardDeviation (``alg_StandardDeviation.py:39-47``): ``(mean_t;std_t),(mean_g;std_g)`` with
  ``%.3f``, float64 accumulation, and any |value| < 0.001 written as 0.
The arithmetic below is written to perform the same numpy operations in the same order and dtype, so
the text is identical, not just close (tests/compare/test_msaccucmp_reference.py checks it against the
package). Memory: float32 copies of both tensors, as msaccucmp makes.
"""

from __future__ import annotations

import math
import warnings

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


def _fmt(value) -> str:
    return "{:.6f}".format(value)


def is_scalar_shape(shape) -> bool:
    """msaccucmp's ShapeType.Scalar: every dim is 1 (an empty shape too)."""
    shape = list(shape)
    return sum(shape) == len(shape)


def _cosine(t, g, scalar: bool, t_file: str, g_file: str):
    if scalar:
        return _fmt(1), "This tensor is scalar."
    t_norm = np.linalg.norm(t, axis=-1, keepdims=True)
    g_norm = np.linalg.norm(g, axis=-1, keepdims=True)
    if t_norm <= EPS and g_norm < EPS:
        return "1.0", ""
    if t_norm ** 0.5 <= EPS:
        return NAN, f"Cannot compare by Cosine Similarity. All the data is zero in {t_file}."
    if g_norm ** 0.5 <= EPS:
        return NAN, f"Cannot compare by Cosine Similarity. All the data is zero in {g_file}."
    value = ((t / t_norm) * (g / g_norm)).sum()
    return _fmt(min(value, 1.0)), ""


def _relative(t, g):
    return np.where(np.abs(g) > EPS, np.abs(t / g - 1), 0)


def _red(t, g):
    square = (g ** 2).sum()
    value = 0.0 if square ** 0.5 <= EPS else ((t - g) ** 2).sum() / square
    return _fmt(value ** 0.5), ""


def _kl_pdf(x):
    high = x.max()  # max first: an empty tensor's error names the maximum, as msaccucmp's does
    low = x.min()
    spread = high - low
    scaled = (x - low) / spread if spread != 0 else x
    return np.maximum(scaled, KL_FLOOR)


def _kl(t, g, t_file: str, g_file: str):
    pt, pg = _kl_pdf(t), _kl_pdf(g)
    t_zero, g_zero = np.all(pt == 0), np.all(pg == 0)
    if t_zero and g_zero:
        return NAN, f"Cannot compare by KL Divergence. All the data is zero in {t_file!r} and {g_file!r}."
    if t_zero or g_zero:
        return NAN, f"Cannot compare by KL Divergence. All the data is zero in {t_file if t_zero else g_file}."
    pt = pt / pt.sum()
    pg = pg / pg.sum()
    value = (pt * np.log(pt / pg)).sum()
    if abs(value) < EPS:
        value = 0.0
    note = f"Cannot compare by KL Divergence. The data contains 0 in {g_file!r}." if str(value) == "inf" else ""
    return _fmt(value), note


def _std(t, g):
    parts = [np.mean(t, dtype=np.float64), np.std(t, dtype=np.float64),
             np.mean(g, dtype=np.float64), np.std(g, dtype=np.float64)]
    parts = [0.0 if abs(v) < SMALL else v for v in parts]
    return "(%.3f;%.3f),(%.3f;%.3f)" % tuple(parts), ""


def _run(name: str, t, g, scalar: bool, t_file: str, g_file: str):
    if name == "CosineSimilarity":
        return _cosine(t, g, scalar, t_file, g_file)
    if name == "MaxAbsoluteError":
        return _fmt(np.abs(t - g).max()), ""
    if name == "AccumulatedRelativeError":
        return _fmt(_relative(t, g).sum()), ""
    if name == "RelativeEuclideanDistance":
        return _red(t, g)
    if name == "KullbackLeiblerDivergence":
        return _kl(t, g, t_file, g_file)
    if name == "StandardDeviation":
        return _std(t, g)
    if name == "MeanAbsoluteError":
        return _fmt(np.abs(t - g).mean()), ""
    if name == "RootMeanSquareError":
        return _fmt(np.sqrt(np.average((t - g) ** 2))), ""
    if name == "MaxRelativeError":
        return _fmt(_relative(t, g).max()), ""
    return _fmt(_relative(t, g).mean()), ""  # MeanRelativeError


def cells(golden: np.ndarray, target: np.ndarray, *, shape=None, target_file: str = "", golden_file: str = "") -> tuple[dict[str, str], list[str]]:
    """({algorithm: cell text}, messages) for one tensor pair, as msaccucmp writes them.

    ``shape``: the target's shape (decides the scalar case), by default ``target.shape``; the file
    names only appear in the messages. Never raises on the values: anything an algorithm cannot
    compute is its ``NaN`` cell and a message, as in msaccucmp."""
    g = np.asarray(golden).reshape(-1)
    t = np.asarray(target).reshape(-1)
    shape = target.shape if shape is None else shape
    if g.size != t.size:
        message = (f"The my output dump data size ({t.size}) in {target_file!r} does not match the ground truth "
                   f"dump data size ({g.size}) in {golden_file!r}.")
        return dict.fromkeys(ALGORITHMS, NAN), [message]
    both_bool = t.dtype == np.bool_ and g.dtype == np.bool_
    out: dict[str, str] = {}
    messages: list[str] = []
    scalar = is_scalar_shape(shape)
    with warnings.catch_warnings(), np.errstate(all="ignore"):
        warnings.simplefilter("ignore")  # "Mean of empty slice" and the like: msaccucmp logs and goes on
        if not both_bool:
            t, g = t.astype("float32"), g.astype("float32")
        for name in ALGORITHMS:
            if both_bool and name not in BOOL_ALGORITHMS:
                out[name] = NAN
                messages.append(f"Algorithm {name} does not support Boolean types.")
                continue
            try:
                out[name], message = _run(name, t, g, scalar, target_file, golden_file)
            except Exception as exc:  # noqa: BLE001 - msaccucmp turns any failure of one algorithm into NaN
                out[name], message = NAN, f"Failed to execute 'compare' in '{name}'. {exc}"
            if message:
                messages.append(message)
    return out, messages


def number(cell: str | None) -> float | None:
    """A metric cell as a float for result.json (inf/nan kept as floats; ``NaN`` "no value" -> None;
    StandardDeviation's pair -> None)."""
    if cell is None or cell == NAN:
        return None
    try:
        return float(cell)
    except ValueError:
        return None


def msit_precision_error(op_type: str, cell: dict[str, str]) -> bool:
    """msit's IsPrecisionError (msit 8.2.0 ``msquickcmp/cmp_process.py`` ``_process_is_npu_and_is_precision_error_ops``
    and ``_is_row_precision_error``, thresholds at lines 66-70): NO for op types Data, TransData,
    PartitionCall (``common/utils.py`` OPTYPE_WHITWLIST) or a ``nan`` cosine; else YES when any one
    of cosine < 0.99, RelativeEuclideanDistance > 0.05, KL > 0.005, RMSE > 1.0, MeanRelativeError > 1.0."""
    if op_type in ("Data", "TransData", "PartitionCall") or cell["CosineSimilarity"].lower() == "nan":
        return False
    try:
        values = [float(cell[k]) for k in ("CosineSimilarity", "RelativeEuclideanDistance", "KullbackLeiblerDivergence",
                                          "RootMeanSquareError", "MeanRelativeError")]
    except ValueError:
        return False
    cos, red, kl, rmse, mre = values
    return cos < 0.99 or red > 0.05 or kl > 0.005 or rmse > 1.0 or mre > 1.0


def is_nan_cell(cell: str) -> bool:
    value = number(cell)
    return value is None or math.isnan(value)
