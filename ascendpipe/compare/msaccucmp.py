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
(``_blocked_results``): memory is the float32 copies of both tensors, as msaccucmp makes, plus blocks.
"""

from __future__ import annotations

import contextlib
import math
import threading
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
    return _cosine_cell(t_norm, g_norm, lambda: ((t / t_norm) * (g / g_norm)).sum(), t_file, g_file)


def _cosine_cell(t_norm, g_norm, value, t_file: str, g_file: str):
    """The cell from both norms (shape-(1,) float32 arrays, as np.linalg.norm gives) and ``value()``,
    the sum of the normalised products (computed only when the norms allow)."""
    if t_norm <= EPS and g_norm < EPS:
        return "1.0", ""
    if t_norm ** 0.5 <= EPS:
        return NAN, f"Cannot compare by Cosine Similarity. All the data is zero in {t_file}."
    if g_norm ** 0.5 <= EPS:
        return NAN, f"Cannot compare by Cosine Similarity. All the data is zero in {g_file}."
    return _fmt(min(value(), 1.0)), ""


def _relative(t, g):
    return np.where(np.abs(g) > EPS, np.abs(t / g - 1), 0)


def _red(t, g, shared: _Shared):
    return _red_cell((g ** 2).sum(), lambda: shared.squared_diff().sum())


def _red_cell(square, squared_diff_sum):
    value = 0.0 if square ** 0.5 <= EPS else squared_diff_sum() / square
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

    def value():
        p, q = pt / pt.sum(), pg / pg.sum()
        return (p * np.log(p / q)).sum()

    return _kl_cell(t_zero, g_zero, value, t_file, g_file)


def _kl_cell(t_zero, g_zero, value, t_file: str, g_file: str):
    if t_zero and g_zero:
        return NAN, f"Cannot compare by KL Divergence. All the data is zero in {t_file!r} and {g_file!r}."
    if t_zero or g_zero:
        return NAN, f"Cannot compare by KL Divergence. All the data is zero in {t_file if t_zero else g_file}."
    value = value()
    if abs(value) < EPS:
        value = 0.0
    note = f"Cannot compare by KL Divergence. The data contains 0 in {g_file!r}." if str(value) == "inf" else ""
    return _fmt(value), note


def _std(t, g):
    return _std_cell([np.mean(t, dtype=np.float64), np.std(t, dtype=np.float64),
                      np.mean(g, dtype=np.float64), np.std(g, dtype=np.float64)])


def _std_cell(parts):
    parts = [0.0 if abs(v) < SMALL else v for v in parts]
    return "(%.3f;%.3f),(%.3f;%.3f)" % tuple(parts), ""


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
# blocks: each element gets the same operations in the same dtype, and each sum is numpy's pairwise
# sum rebuilt from the blocks' sums (``numpy_sums``), so the text is identical, while no temporary is
# larger than a block (the whole-tensor formulas made a float32 copy per operation) and the
# operations run from the CPU cache. tests/compare/test_msaccucmp_blocked.py checks the identity.
BLOCK = 1 << 16
_BLOCKED_DTYPES = (np.dtype(np.float16), np.dtype(np.float32))


def _use_blocks(t, g, shape) -> bool:
    return (t.size > BLOCK and t.dtype in _BLOCKED_DTYPES and g.dtype in _BLOCKED_DTYPES
            and not is_scalar_shape(shape))


def _nan_max(a, b):
    """max as numpy's reduction gives it: a NaN anywhere wins."""
    return b if a is None else np.maximum(a, b)


def _nan_min(a, b):
    return b if a is None else np.minimum(a, b)


def _blocked_results(t_src: np.ndarray, g_src: np.ndarray, t_file: str, g_file: str) -> dict[str, tuple[str, str]]:
    from ascendpipe.compare import numpy_sums

    n = t_src.size
    spans = numpy_sums.leaves(n, BLOCK)
    f32, f64 = np.float32, np.float64
    count = np.intp(n)  # numpy's mean divides by the item count as an intp

    # float32 copies once (msaccucmp's astype): a float16 side is cast once, not once per pass
    t_src, g_src = np.asarray(t_src, dtype=f32), np.asarray(g_src, dtype=f32)

    def blocks():  # views: no operation below writes into its operands
        for start, stop in spans:
            yield t_src[start:stop], g_src[start:stop]

    def total(parts, dtype=f32):
        return numpy_sums.combine(n, BLOCK, parts, dtype)

    def mean_of(parts):  # np.mean of a float32 array: its float32 sum / the count, as float32
        return f32(total(parts) / count)

    # np.std(x, dtype=float64)'s mean: a buffered float64 sum of the whole array (no temporary)
    t_mean = np.add.reduce(t_src, dtype=f64, keepdims=True)
    np.true_divide(t_mean, count, out=t_mean, casting="unsafe")
    g_mean = np.add.reduce(g_src, dtype=f64, keepdims=True)
    np.true_divide(g_mean, count, out=g_mean, casting="unsafe")

    sums: dict[str, list] = {k: [] for k in ("tt", "gg", "sq", "abs", "rel", "t_var", "g_var")}
    high: dict[str, object] = dict.fromkeys(("abs", "rel", "t_hi", "g_hi"))
    low: dict[str, object] = dict.fromkeys(("t_lo", "g_lo"))
    for t, g in blocks():
        sums["tt"].append(np.add.reduce(t * t))  # np.linalg.norm: sqrt(add.reduce(x * x))
        sums["gg"].append(np.add.reduce(g ** 2))
        diff = t - g
        sums["sq"].append(np.add.reduce(diff ** 2))
        np.abs(diff, out=diff)
        sums["abs"].append(np.add.reduce(diff))
        high["abs"] = _nan_max(high["abs"], diff.max())
        rel = _relative(t, g)
        sums["rel"].append(np.add.reduce(rel))
        high["rel"] = _nan_max(high["rel"], rel.max())
        high["t_hi"], low["t_lo"] = _nan_max(high["t_hi"], t.max()), _nan_min(low["t_lo"], t.min())
        high["g_hi"], low["g_lo"] = _nan_max(high["g_hi"], g.max()), _nan_min(low["g_lo"], g.min())
        for x, mean, key in ((t, t_mean, "t_var"), (g, g_mean, "g_var")):
            centred = np.subtract(x, mean)  # float64, as np.std's arr - arrmean
            np.square(centred, out=centred)
            sums[key].append(np.add.reduce(centred))

    results: dict[str, tuple[str, str]] = {}
    t_norm = np.sqrt(np.array([total(sums["tt"])], f32))
    g_norm = np.sqrt(np.array([total(sums["gg"])], f32))
    t_spread, g_spread = high["t_hi"] - low["t_lo"], high["g_hi"] - low["g_lo"]

    def pdfs(with_blocks=False):  # _kl_pdf, block by block
        for t, g in blocks():
            pt = (t - low["t_lo"]) / t_spread if t_spread != 0 else t
            pg = (g - low["g_lo"]) / g_spread if g_spread != 0 else g
            pt, pg = np.maximum(pt, KL_FLOOR), np.maximum(pg, KL_FLOOR)
            yield (pt, pg, t, g) if with_blocks else (pt, pg)

    # second pass: the cosine's normalised products (used only if the norms allow) and the KL sums.
    # msaccucmp's "all zero" test of each pdf (alg_KullbackLeiblerDivergence.py:59-60) cannot hold
    # here: the pdf is floored at float32's eps first (:42, np.maximum; a NaN is not 0 either), so
    # only an empty tensor passes it, and a blocked one is never empty.
    cos_sums, pt_sums, pg_sums = [], [], []
    for pt, pg, t, g in pdfs(with_blocks=True):
        cos_sums.append(np.add.reduce((t / t_norm) * (g / g_norm)))
        pt_sums.append(np.add.reduce(pt))
        pg_sums.append(np.add.reduce(pg))
    t_zero = g_zero = False
    results["CosineSimilarity"] = _cosine_cell(t_norm, g_norm, lambda: total(cos_sums), t_file, g_file)

    def kl_value():
        pt_total, pg_total = total(pt_sums), total(pg_sums)
        parts = []
        for pt, pg in pdfs():
            pt, pg = pt / pt_total, pg / pg_total
            parts.append(np.add.reduce(pt * np.log(pt / pg)))
        return total(parts)

    results["KullbackLeiblerDivergence"] = _kl_cell(np.bool_(t_zero), np.bool_(g_zero), kl_value, t_file, g_file)
    t_var, g_var = f64(total(sums["t_var"], f64) / count), f64(total(sums["g_var"], f64) / count)
    results["StandardDeviation"] = _std_cell([f64(t_mean[0]), f64(np.sqrt(t_var)), f64(g_mean[0]), f64(np.sqrt(g_var))])
    results["MaxAbsoluteError"] = _fmt(high["abs"]), ""
    results["MeanAbsoluteError"] = _fmt(mean_of(sums["abs"])), ""
    squared = total(sums["sq"])
    results["RelativeEuclideanDistance"] = _red_cell(total(sums["gg"]), lambda: squared)
    results["RootMeanSquareError"] = _fmt(np.sqrt(mean_of(sums["sq"]))), ""
    results["AccumulatedRelativeError"] = _fmt(total(sums["rel"])), ""
    results["MaxRelativeError"] = _fmt(high["rel"]), ""
    results["MeanRelativeError"] = _fmt(mean_of(sums["rel"])), ""
    return results


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
        with np.errstate(all="ignore"):
            results = _blocked_results(t, g, target_file, golden_file)
        return ({name: results[name][0] for name in ALGORITHMS},
                [results[name][1] for name in ALGORITHMS if results[name][1]])
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
