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
package). A pair larger than ``BLOCK`` elements is evaluated block by block with identical text
(``pairpass``): memory is the two tensors as read plus a few blocks.
"""

from __future__ import annotations

import contextlib
import math
import threading
import warnings

import numpy as np

from ascendpipe.compare.msaccucmp_text import (  # noqa: F401 - msaccucmp's names, as callers know them
    ALGORITHMS, BOOL_ALGORITHMS, EPS, KL_FLOOR, NAN, SMALL,
    cosine_cell as _cosine_cell, fmt as _fmt, kl_cell as _kl_cell, red_cell as _red_cell, std_cell as _std_cell,
)

def is_scalar_shape(shape) -> bool:
    """msaccucmp's ShapeType.Scalar: every dim is 1 (an empty shape too)."""
    shape = list(shape)
    return sum(shape) == len(shape)


def _cosine(t, g, scalar: bool, t_file: str, g_file: str):
    if scalar:
        return _fmt(1), "This tensor is scalar."
    t_norm = np.linalg.norm(t, axis=-1, keepdims=True)
    g_norm = np.linalg.norm(g, axis=-1, keepdims=True)
    return _cosine_cell(t_norm, g_norm, lambda: ((t / t_norm) * (g / g_norm)).sum(), t_file, g_file)


def _relative(t, g):
    return np.where(np.abs(g) > EPS, np.abs(t / g - 1), 0)


def _red(t, g, shared: _Shared):
    return _red_cell((g ** 2).sum(), lambda: shared.squared_diff().sum())


def _kl_pdf(x):
    high = x.max()  # max first: an empty tensor's error names the maximum, as msaccucmp's does
    low = x.min()
    spread = high - low
    scaled = (x - low) / spread if spread != 0 else x
    return np.maximum(scaled, KL_FLOOR)


def _kl(t, g, t_file: str, g_file: str):
    pt, pg = _kl_pdf(t), _kl_pdf(g)
    t_zero, g_zero = np.all(pt == 0), np.all(pg == 0)

    def value():
        p, q = pt / pt.sum(), pg / pg.sum()
        return (p * np.log(p / q)).sum()

    return _kl_cell(t_zero, g_zero, value, t_file, g_file)


def _std(t, g):
    return _std_cell([np.mean(t, dtype=np.float64), np.std(t, dtype=np.float64),
                      np.mean(g, dtype=np.float64), np.std(g, dtype=np.float64)])


class _Shared:
    """Arrays several algorithms compute alike (|t - g|, (t - g)^2, the relative error), made once.

    Each is the same numpy expression, in the same dtype, that msaccucmp evaluates inside each of
    those algorithms, so sharing it changes no bit of any cell; it only saves the recomputation
    (the relative error alone was three of the ten algorithms' work)."""

    def __init__(self, t, g):
        self.t, self.g = t, g
        self._memo: dict = {}

    def _get(self, key, make):
        if key not in self._memo:
            self._memo[key] = make()
        return self._memo[key]

    def abs_diff(self):
        return self._get("abs", lambda: np.abs(self.t - self.g))

    def squared_diff(self):
        return self._get("sq", lambda: (self.t - self.g) ** 2)

    def relative(self):
        return self._get("rel", lambda: _relative(self.t, self.g))

    _LAST_USE = {"MeanAbsoluteError": "abs", "RootMeanSquareError": "sq", "MeanRelativeError": "rel"}

    def release_after(self, algorithm: str) -> None:
        self._memo.pop(self._LAST_USE.get(algorithm), None)


def _run(name: str, t, g, scalar: bool, t_file: str, g_file: str, shared: _Shared):
    if name == "CosineSimilarity":
        return _cosine(t, g, scalar, t_file, g_file)
    if name == "MaxAbsoluteError":
        return _fmt(shared.abs_diff().max()), ""
    if name == "AccumulatedRelativeError":
        return _fmt(shared.relative().sum()), ""
    if name == "RelativeEuclideanDistance":
        return _red(t, g, shared)
    if name == "KullbackLeiblerDivergence":
        return _kl(t, g, t_file, g_file)
    if name == "StandardDeviation":
        return _std(t, g)
    if name == "MeanAbsoluteError":
        return _fmt(shared.abs_diff().mean()), ""
    if name == "RootMeanSquareError":
        return _fmt(np.sqrt(np.average(shared.squared_diff()))), ""
    if name == "MaxRelativeError":
        return _fmt(shared.relative().max()), ""
    return _fmt(shared.relative().mean()), ""  # MeanRelativeError


# --- the same cells, block by block ---------------------------------------------------------------
# For a float16/float32 pair larger than one block, every formula above is evaluated on cache-sized
# blocks (``pairpass``): each element gets the same operations in the same dtype, and each sum is
# numpy's pairwise sum rebuilt from the blocks' sums (``numpy_sums``), so the text is identical, while
# no temporary is larger than a block (the whole-tensor formulas made a float32 copy per operation)
# and the operations run from the CPU cache. tests/compare/test_msaccucmp_blocked.py checks the identity.
BLOCK = 1 << 16
_BLOCKED_DTYPES = (np.dtype(np.float16), np.dtype(np.float32))


def _use_blocks(t, g, shape) -> bool:
    return (t.size > BLOCK and t.dtype in _BLOCKED_DTYPES and g.dtype in _BLOCKED_DTYPES
            and not is_scalar_shape(shape))


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
    scalar = is_scalar_shape(shape)
    if not both_bool and _use_blocks(t, g, shape):
        from ascendpipe.compare.pairpass import pair_pass

        out, messages, _, _ = pair_pass(g, t, decision=False, target_file=target_file, golden_file=golden_file,
                                        block=BLOCK)
        return out, messages
    # numpy's RuntimeWarnings ("Mean of empty slice") come only from an empty tensor; catch_warnings
    # changes process-wide state, so it is taken (under a lock) only then: rows run in threads.
    with (_no_warnings() if g.size == 0 else contextlib.nullcontext()), np.errstate(all="ignore"):
        if not both_bool:
            t, g = t.astype("float32"), g.astype("float32")
        shared = _Shared(t, g)
        results: dict[str, tuple[str, str]] = {}
        for name in _EVALUATION_ORDER:
            if both_bool and name not in BOOL_ALGORITHMS:
                results[name] = NAN, f"Algorithm {name} does not support Boolean types."
                continue
            try:
                results[name] = _run(name, t, g, scalar, target_file, golden_file, shared)
            except Exception as exc:  # noqa: BLE001 - msaccucmp turns any failure of one algorithm into NaN
                results[name] = NAN, f"Failed to execute 'compare' in '{name}'. {exc}"
            shared.release_after(name)
    out = {name: results[name][0] for name in ALGORITHMS}
    messages = [results[name][1] for name in ALGORITHMS if results[name][1]]  # in msaccucmp's order
    return out, messages


# The algorithms grouped by the array they share, so only one shared array is alive at a time (the
# cells and their messages are still reported in msaccucmp's order).
_EVALUATION_ORDER = (
    "CosineSimilarity", "KullbackLeiblerDivergence", "StandardDeviation",
    "MaxAbsoluteError", "MeanAbsoluteError",
    "RelativeEuclideanDistance", "RootMeanSquareError",
    "AccumulatedRelativeError", "MaxRelativeError", "MeanRelativeError",
)
_WARNINGS_LOCK = threading.Lock()


@contextlib.contextmanager
def _no_warnings():
    with _WARNINGS_LOCK, warnings.catch_warnings():
        warnings.simplefilter("ignore")  # msaccucmp logs these and goes on
        yield


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
