"""Per-tensor metrics our pass/fail decision reads. Pure numpy, float64, blockwise, NaN/inf-safe.

result.csv's msit columns are not these: they are msaccucmp's cells (``compare/msaccucmp.py``). These
follow msit's LLM-compare helpers, in float64 and blockwise, and feed the decision (``thresholds``) and
the row keys ``exact_cosine``, ``significant_mean_rel_error`` and ``decision``.

``g`` is the golden (fp32 reference) tensor, ``t`` the target; both are flattened, as msit does
(``tensor.reshape(-1).float()``). Both are read in blocks of ``CHUNK`` elements, cast into float64 work
arrays reused for every block (a block's ~30 operations run from the CPU cache, nothing is allocated
per block, and a tensor is never copied whole), and every sum is accumulated in float64 by numpy's own
pairwise sum, never BLAS (whose result depends on its build and thread count). Two values are not
float64 throughout, for speed, each where the precision cannot matter:
- the softmax's exponentials for KL are float32 (numpy's float64 exp has no SIMD path on AVX2 and cost
  four times everything else); the sums stay float64, so KL carries an absolute error of a few 1e-9
  (measured: at most 2.9e-9 against float64 exponentials over eight 1M-element ReLU pairs with fp16
  targets, KL ~1.2e-3; the decision's threshold is 0.005;
  msit's whole softmax is float32);
- ``rmse_fp16_floor`` rounds the golden to fp16's 11 significant bits by a Veltkamp split, exact but
  for elements below fp16's normal range (|g| < 6.1e-5) and exact ties.

The formulas are msit's LLM-compare ones (package ``msit`` 8.2.0, module
``components.utils.cmp_algorithm``, the functions of ``CMP_ALG_MAP`` that msit's compare commands
call through ``compare_tensor`` in ``msit_llm.compare.cmp_utils`` and ``MIETorchCompare.compare`` in
``msquickcmp.mie_torch.mietorch_comp``). EPS = float32 machine epsilon (msit's ``FLOAT_EPSILON``).

- CosineSimilarity          (``cosine_similarity``): 1.0 when both tensors are all zeros; otherwise
                              ``torch.cosine_similarity`` in float64, i.e. sum(g*t) / (max(||g||, 1e-8) *
                              max(||t||, 1e-8)) (so 0.0 when exactly one side is all zeros), rounded to
                              10 decimals.
- MaxRelativeError          (``max_relative_error``):  max over i of |t_i / g_i - 1| where |g_i| > EPS, 0 elsewhere.
- MeanRelativeError         (``mean_relative_error``): the mean of the same, over *all* n elements.
- MaxAbsoluteError          (``max_absolute_error``):  max over i of |t_i - g_i| where |g_i| > EPS, 0 elsewhere
                              (msit leaves out elements whose golden is ~0, for the absolute error too).
- MeanAbsoluteError         (``mean_absolute_error``): the mean of the same, over all n elements.
- KullbackLeiblerDivergence (``kl_divergence``): ``kl_div(log_softmax(t), softmax(g), reduction="sum")``
                              = KL(softmax(g) || softmax(t)) over the flattened tensor, clipped at 0;
                              computed here with an online log-sum-exp, so large values do not overflow.
- RelativeEuclideanDistance (``relative_euclidean_distance``): sqrt(sum (t-g)^2 / sum g^2); 0.0 when
                              ||g|| <= EPS.
- Non-finite values (``check_tensor`` in the same modules): when either tensor holds a NaN or an inf,
  msit computes no metric and gives the reason ("golden_data includes NAN or inf." / "my_data includes
  NAN or inf."); so does this module (every metric NaN, ``fail_reason`` set). The counts below are
  kept, so the caller can still tell an overflow of the target from a golden that holds inf already.

msit's own source has no formula for these three; msaccucmp (a CANN binary) writes them. Ours, with
msit's relative error where one is needed:
- RootMeanSquareError      = sqrt(sum (t-g)^2 / n)
- AccumulatedRelativeError = sum over i of the relative error above (the reference gives no formula;
                             "accumulated" read literally)
- StandardDeviation        = (mean_t; std_t), (mean_g; std_g): population std, msaccucmp's "mean;std"
                             pair for each side (target first, as NPUDump precedes GroundTruth).

msit evaluates all but the cosine in float32 (after ``.float()``); we evaluate in float64, so values
agree to float32 rounding, except where msit's float32 sums would overflow (squares past 3.4e38).

Ours, for the pass/fail decision only (never in msit's columns; see ``thresholds``):
- exact_cosine: sum(g*t) / (||g|| * ||t||) without torch's 1e-8 floor on each norm (1.0 when both are
  all zeros, 0.0 when one is), not rounded. msit's floor makes the cosine of a tensor whose norm is
  below 1e-8 meaningless: two identical tensors of norm 1e-9 get 0.01.
- significant_mean_rel_error: the mean relative error over the *significant* elements only,
  |g_i| >= SIGNIFICANT_FRACTION * rms(g) (and > EPS), with ``significant_elements`` counting them.
- rmse_fp16_floor: the RMSE of rounding the golden itself to fp16, the error floor of any fp16 tensor.
- golden_nan/golden_inf/target_nan/target_inf; nonfinite_mismatch = positions where the target is
  non-finite but the golden is finite; compared = n when the metrics were computed, else 0.
"""

from __future__ import annotations

import math
import threading

import numpy as np

EPS = float(np.finfo(np.float32).eps)
TORCH_COSINE_EPS = 1e-8  # torch.cosine_similarity's default eps, the floor of each norm
FP16_MAX = 65504.0
# An element smaller than this fraction of the tensor's RMS is below fp16's relative resolution (2^-10)
# of the tensor's typical values: the rounding those carry is as large as the element itself.
SIGNIFICANT_FRACTION = 2.0**-10
CHUNK = 1 << 16  # elements per float64 block: 512 KB per work array, which stays in the CPU cache

METRIC_NAMES = (
    "cosine",
    "max_abs_error",
    "mean_abs_error",
    "rmse",
    "max_rel_error",
    "mean_rel_error",
    "accumulated_rel_error",
    "relative_euclidean",
    "kl",
)
GOLDEN_NONFINITE = "golden_data includes NAN or inf."  # msit's check_tensor reasons, verbatim
TARGET_NONFINITE = "my_data includes NAN or inf."

_SPLIT = float(2**42 + 1)  # Veltkamp: x * (2^(53-11) + 1) splits off a float64's leading 11 bits

_COUNT_KEYS = ("golden_nan", "golden_inf", "target_nan", "target_inf", "nonfinite_mismatch")


def _nonfinite_counts(g: np.ndarray, t: np.ndarray) -> dict:
    """Counted on the tensors' own dtypes (no float64 copy): a float16/32 value is finite or not as is."""
    counts = dict.fromkeys(_COUNT_KEYS, 0)
    gf, tf = g.reshape(-1), t.reshape(-1)
    for start in range(0, gf.size, CHUNK):
        gc, tc = gf[start : start + CHUNK], tf[start : start + CHUNK]
        if gc.dtype.kind not in "fc" and tc.dtype.kind not in "fc":
            continue  # integers and bools are always finite
        g_ok, t_ok = np.isfinite(gc), np.isfinite(tc)
        if g_ok.all() and t_ok.all():  # the common case: skip the counting
            continue
        counts["golden_nan"] += int(np.isnan(gc).sum())
        counts["golden_inf"] += int(np.isinf(gc).sum())
        counts["target_nan"] += int(np.isnan(tc).sum())
        counts["target_inf"] += int(np.isinf(tc).sum())
        counts["nonfinite_mismatch"] += int((g_ok & ~t_ok).sum())
    return counts


def _relative(gc: np.ndarray, tc: np.ndarray, mask: np.ndarray) -> np.ndarray:
    """msit's |t/g - 1| where ``mask``, 0 elsewhere."""
    out = np.zeros_like(gc)
    np.divide(tc, gc, out=out, where=mask)
    np.abs(out - 1.0, out=out, where=mask)
    return out


class _Scratch:
    """Float64 work arrays of one block, reused for every block of every tensor (per thread): a block
    fits in the CPU cache, so the ~30 passes over it run from cache rather than memory, and no pass
    allocates."""

    def __init__(self, size: int) -> None:
        self.g, self.t, self.d, self.x, self.rel, self.product = (np.empty(size) for _ in range(6))
        self.meaningful, self.significant, self.tiny = (np.empty(size, bool) for _ in range(3))
        self.half_err = np.empty(size)
        self.single = np.empty(size, np.float32)

    def view(self, n: int) -> "_Scratch":
        if n == self.g.size:
            return self
        part = object.__new__(_Scratch)
        for name, array in vars(self).items():
            setattr(part, name, array[:n])
        return part


_LOCAL = threading.local()


def _dot(a: np.ndarray, b: np.ndarray, out: np.ndarray) -> float:
    """sum(a * b) by numpy's own pairwise sum, not BLAS: np.dot's result depends on the BLAS build and
    its thread count, and BLAS threads called from several compare threads (or beside another busy
    process) spin against each other, measured 4x slower. ``out`` may be ``a``."""
    np.multiply(a, b, out=out)
    return float(np.add.reduce(out))


def _scratch(n: int) -> _Scratch:
    scratch = getattr(_LOCAL, "scratch", None)
    if scratch is None or scratch.g.size < n:
        scratch = _LOCAL.scratch = _Scratch(CHUNK)
    return scratch.view(n)


class _Sums:
    """Running float64 sums over finite blocks. The softmax sums for KL are kept relative to a running
    max (online log-sum-exp), so one pass suffices. ``floor``: the golden magnitude from which an
    element counts as significant (known before the pass: it needs the golden's RMS)."""

    def __init__(self, floor: float = math.inf) -> None:
        self.n = 0
        self.gt = self.gg = self.tt = self.dd = self.abs_d = self.rel = self.g_sum = self.t_sum = 0.0
        self.max_abs = self.max_rel = 0.0
        self.fp16_dd = 0.0  # sum of squared errors of rounding the golden itself to fp16
        self.g_max = self.t_max = -math.inf
        self.zg = self.zt = self.kl_weighted = 0.0  # sum e^(g-g_max), sum e^(t-t_max), sum e^(g-g_max) (g-t)
        self.floor = floor
        self.significant_rel = 0.0
        self.significant = 0

    def add(self, gc: np.ndarray, tc: np.ndarray) -> None:
        """One block of both tensors (any real dtype, same size <= CHUNK)."""
        w = _scratch(gc.size)
        g, t, d, x, rel = w.g, w.t, w.d, w.x, w.rel
        np.copyto(g, gc, casting="unsafe")
        np.copyto(t, tc, casting="unsafe")
        self.gt += _dot(g, t, w.product)
        self.gg += _dot(g, g, w.product)
        self.tt += _dot(t, t, w.product)
        self.g_sum += float(g.sum())
        self.t_sum += float(t.sum())
        np.subtract(t, g, out=d)
        self.dd += _dot(d, d, w.product)
        np.abs(g, out=x)
        np.greater(x, EPS, out=w.meaningful)
        np.greater_equal(x, self.floor, out=w.significant)  # a subset of meaningful: floor > EPS
        # msit's |t/g - 1| where |g| > EPS, 0 elsewhere, without masked ufuncs (twice the cost): the
        # divisor g + (|g| <= EPS) is g itself where it counts and ~1 elsewhere, so nothing divides by
        # zero, and the product with the mask zeroes the rest (every value here is finite)
        np.less_equal(x, EPS, out=w.tiny)
        np.add(g, w.tiny, out=rel)
        np.divide(t, rel, out=rel)
        np.subtract(rel, 1.0, out=rel)
        np.abs(rel, out=rel)
        np.multiply(rel, w.meaningful, out=rel)
        self.rel += float(rel.sum())
        self.max_rel = max(self.max_rel, float(rel.max()))
        np.multiply(rel, w.significant, out=x)
        self.significant_rel += float(x.sum())
        self.significant += int(np.count_nonzero(w.significant))
        np.abs(d, out=x)
        np.multiply(x, w.meaningful, out=x)  # msit leaves out |g| <= EPS for the absolute error too
        self.abs_d += float(x.sum())
        self.max_abs = max(self.max_abs, float(x.max()))
        # fp16's rounding of the golden: the golden (clipped to fp16's range) rounded to fp16's 11
        # significant bits by a Veltkamp split, three float64 operations where numpy's cast to float16
        # is ~20x slower. It differs from the cast only below fp16's normal range (|g| < 6.1e-5, where
        # fp16 has fewer bits) and at exact ties; this is a floor estimate the RMSE check reads with a
        # factor 2 (thresholds.RMSE_FLOOR_FACTOR).
        np.clip(g, -FP16_MAX, FP16_MAX, out=x)
        np.multiply(x, _SPLIT, out=rel)
        np.subtract(rel, x, out=w.half_err)
        np.subtract(rel, w.half_err, out=rel)  # rel = the value rounded to 11 significant bits
        np.subtract(rel, g, out=x)
        self.fp16_dd += _dot(x, x, w.product)
        self._add_softmax(g, t, d, x, w.single, gc, tc)
        self.n += g.size

    def _add_softmax(self, g, t, d, x, w32, gc, tc) -> None:
        g_max, t_max = max(self.g_max, float(g.max())), max(self.t_max, float(t.max()))
        if g_max > self.g_max:  # rescale what was summed relative to the old max
            scale = math.exp(self.g_max - g_max) if self.n else 0.0
            self.zg *= scale
            self.kl_weighted *= scale
            self.g_max = g_max
        if t_max > self.t_max:
            self.zt *= math.exp(self.t_max - t_max) if self.n else 0.0
            self.t_max = t_max
        # The exponentials are float32 (numpy's float64 exp is scalar libm, ~4x the cost of everything
        # else here); the sums stay float64. msit's own softmax is float32 throughout. The argument
        # x - max is rounded to float32 for the exp either way: from a float32 block (the compare's
        # case) it is taken in float32 directly, one correctly rounded subtraction.
        self._exps(g, gc, g_max, x, w32)
        np.copyto(x, w32)
        self.zg += float(x.sum())
        self.kl_weighted -= _dot(x, d, x)  # d = t - g
        self._exps(t, tc, t_max, x, w32)
        self.zt += float(np.add.reduce(w32, dtype=np.float64))

    @staticmethod
    def _exps(wide, source, peak: float, x, w32) -> None:
        """w32 = exp(source - peak) in float32 (``wide``: the block in float64, ``x`` float64 scratch)."""
        if source.dtype == np.float32:
            np.subtract(source, np.float32(peak), out=w32)
        else:
            np.subtract(wide, peak, out=x)
            np.copyto(w32, x, casting="unsafe")
        np.exp(w32, out=w32)


def _blocks(g: np.ndarray, t: np.ndarray):
    """Aligned blocks of both flattened tensors, as they are (the cast is the caller's)."""
    gf, tf = g.reshape(-1), t.reshape(-1)
    for start in range(0, gf.size, CHUNK):
        yield gf[start : start + CHUNK], tf[start : start + CHUNK]


def _golden_squares(g: np.ndarray) -> float:
    """sum g^2 in float64, block by block (the significance floor needs it before the main pass)."""
    total = 0.0
    flat = g.reshape(-1)
    for start in range(0, flat.size, CHUNK):
        block = flat[start : start + CHUNK]
        w = _scratch(block.size).g
        np.copyto(w, block, casting="unsafe")
        total += _dot(w, w, w)
    return total


def _kl(s: _Sums) -> float:
    """KL(softmax(g) || softmax(t)) = sum p (g - t) + (t_max - g_max) + log Zt - log Zg, p = e^(g-g_max)/Zg."""
    value = s.kl_weighted / s.zg + (s.t_max - s.g_max) + math.log(s.zt) - math.log(s.zg)
    return max(value, 0.0)


def _all_zero(s: _Sums, golden: np.ndarray, target: np.ndarray) -> bool:
    return s.gg == 0.0 and s.tt == 0.0 and not (golden.any() or target.any())


def _cosine(s: _Sums) -> float:
    if s.all_zero:
        return 1.0
    norm_g = max(math.sqrt(s.gg), TORCH_COSINE_EPS)
    norm_t = max(math.sqrt(s.tt), TORCH_COSINE_EPS)
    return round(max(-1.0, min(1.0, s.gt / norm_g / norm_t)), 10)


def _exact_cosine(s: _Sums) -> float:
    if s.all_zero:
        return 1.0
    if s.gg == 0.0 or s.tt == 0.0:
        return 0.0
    return max(-1.0, min(1.0, s.gt / (math.sqrt(s.gg) * math.sqrt(s.tt))))


def _std(squares: float, total: float, n: int) -> float:
    """Population std from sums; mean*mean, not mean**2: a float ** 2 beyond ~1.3e154 raises OverflowError
    where the product is inf."""
    mean = total / n
    return math.sqrt(max(squares / n - mean * mean, 0.0))


def tensor_metrics(golden: np.ndarray, target: np.ndarray) -> dict:
    """Every metric for one pair of same-size tensors (shapes may differ in layout only)."""
    golden, target = np.asarray(golden), np.asarray(target)
    if golden.size != target.size:
        raise ValueError(f"size mismatch: golden {list(golden.shape)} vs target {list(target.shape)}")
    result: dict = _with_fail_reason(_nonfinite_counts(golden, target))
    if result["fail_reason"] or golden.size == 0:
        return _not_compared(result)
    with np.errstate(over="ignore", invalid="ignore"):  # squares beyond float64: inf, judged as such below
        floor = max(SIGNIFICANT_FRACTION * math.sqrt(_golden_squares(golden) / golden.size),
                    math.nextafter(EPS, math.inf))
        s = _Sums(floor)
        for gc, tc in _blocks(golden, target):
            s.add(gc, tc)
    s.all_zero = _all_zero(s, golden, target)
    return _finish(result, s)


def _with_fail_reason(counts: dict) -> dict:
    """The non-finite counts with msit's ``fail_reason`` ("" when both tensors are finite)."""
    reasons = []
    if counts["golden_nan"] or counts["golden_inf"]:
        reasons.append(GOLDEN_NONFINITE)
    if counts["target_nan"] or counts["target_inf"]:
        reasons.append(TARGET_NONFINITE)
    counts["fail_reason"] = " ".join(reasons)
    return counts


def _not_compared(result: dict) -> dict:
    """``result`` (the non-finite counts and ``fail_reason``) with every metric NaN: nothing compared."""
    result["compared"] = 0
    result.update(dict.fromkeys(METRIC_NAMES, math.nan), rmse_fp16_floor=math.nan, exact_cosine=math.nan,
                  significant_mean_rel_error=math.nan, significant_elements=0)
    result.update(target_mean=math.nan, target_std=math.nan, golden_mean=math.nan, golden_std=math.nan)
    return result


def _finish(result: dict, s: _Sums) -> dict:
    """Every metric from the sums of a whole pair (``s.all_zero`` set), into ``result``."""
    significant_rel, significant = s.significant_rel, s.significant
    norm_g = math.sqrt(s.gg)
    result.update(
        compared=s.n,
        cosine=_cosine(s),
        exact_cosine=_exact_cosine(s),
        max_abs_error=s.max_abs,
        mean_abs_error=s.abs_d / s.n,
        rmse=math.sqrt(s.dd / s.n),
        rmse_fp16_floor=math.sqrt(s.fp16_dd / s.n),
        max_rel_error=s.max_rel,
        mean_rel_error=s.rel / s.n,
        accumulated_rel_error=s.rel,
        relative_euclidean=0.0 if norm_g <= EPS else math.sqrt(s.dd / s.gg),
        kl=_kl(s),
        significant_mean_rel_error=significant_rel / significant if significant else 0.0,
        significant_elements=significant,
        target_mean=s.t_sum / s.n,
        target_std=_std(s.tt, s.t_sum, s.n),
        golden_mean=s.g_sum / s.n,
        golden_std=_std(s.gg, s.g_sum, s.n),
    )
    return result


# One function per metric, for callers (and tests) that want a single number.
def cosine_similarity(golden, target) -> float:
    return tensor_metrics(golden, target)["cosine"]


def relative_euclidean_distance(golden, target) -> float:
    return tensor_metrics(golden, target)["relative_euclidean"]


def kullback_leibler_divergence(golden, target) -> float:
    return tensor_metrics(golden, target)["kl"]


def max_absolute_error(golden, target) -> float:
    return tensor_metrics(golden, target)["max_abs_error"]


def mean_absolute_error(golden, target) -> float:
    return tensor_metrics(golden, target)["mean_abs_error"]


def root_mean_square_error(golden, target) -> float:
    return tensor_metrics(golden, target)["rmse"]


def max_relative_error(golden, target) -> float:
    return tensor_metrics(golden, target)["max_rel_error"]


def mean_relative_error(golden, target) -> float:
    return tensor_metrics(golden, target)["mean_rel_error"]


def accumulated_relative_error(golden, target) -> float:
    return tensor_metrics(golden, target)["accumulated_rel_error"]


def standard_deviation(golden, target) -> tuple[float, float, float, float]:
    """(target mean, target std, golden mean, golden std)."""
    m = tensor_metrics(golden, target)
    return m["target_mean"], m["target_std"], m["golden_mean"], m["golden_std"]


def magnitude_max(x: np.ndarray) -> float:
    """Largest finite |x| (0 for an empty or all non-finite tensor), block by block in its own dtype
    (|x| is exact in any float dtype; integers are read as float64, as before)."""
    flat = np.asarray(x).reshape(-1)
    if flat.dtype.kind not in "fc":
        flat = flat.astype(np.float64) if flat.dtype.kind in "iub" else flat
    best = 0.0
    for start in range(0, flat.size, CHUNK):
        block = np.abs(flat[start : start + CHUNK])
        top = float(block.max()) if block.size else 0.0
        if not math.isfinite(top):  # an inf or a NaN in this block: the largest of the finite ones
            block = block[np.isfinite(block)]
            top = float(block.max()) if block.size else 0.0
        best = max(best, top)
    return best
