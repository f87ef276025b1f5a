"""Per-tensor metrics our pass/fail decision reads. Pure numpy, float64, chunked, NaN/inf-safe.

result.csv's msit columns are not these: they are msaccucmp's cells (``compare/msaccucmp.py``). These
follow msit's LLM-compare helpers, in float64 and chunked, and feed the decision (``thresholds``) and
the row keys ``exact_cosine``, ``significant_mean_rel_error`` and ``decision``.

``g`` is the golden (fp32 reference) tensor, ``t`` the target; both are flattened, as msit does
(``tensor.reshape(-1).float()``). Every sum is accumulated in float64 over chunks, so a tensor is never
copied whole into float64.

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

import numpy as np

EPS = float(np.finfo(np.float32).eps)
TORCH_COSINE_EPS = 1e-8  # torch.cosine_similarity's default eps, the floor of each norm
FP16_MAX = 65504.0
# An element smaller than this fraction of the tensor's RMS is below fp16's relative resolution (2^-10)
# of the tensor's typical values: the rounding those carry is as large as the element itself.
SIGNIFICANT_FRACTION = 2.0**-10
CHUNK = 1 << 20  # elements per float64 chunk: ~8 MB per side, whatever the tensor's size

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

_COUNT_KEYS = ("golden_nan", "golden_inf", "target_nan", "target_inf", "nonfinite_mismatch")


def _pairs(g: np.ndarray, t: np.ndarray):
    """Aligned float64 chunks of both tensors."""
    gf, tf = g.reshape(-1), t.reshape(-1)
    for start in range(0, gf.size, CHUNK):
        yield gf[start : start + CHUNK].astype(np.float64), tf[start : start + CHUNK].astype(np.float64)


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


class _Sums:
    """Running float64 sums over finite chunks. The softmax sums for KL are kept relative to a running
    max (online log-sum-exp), so one pass suffices."""

    def __init__(self) -> None:
        self.n = 0
        self.gt = self.gg = self.tt = self.dd = self.abs_d = self.rel = self.g_sum = self.t_sum = 0.0
        self.max_abs = self.max_rel = 0.0
        self.fp16_dd = 0.0  # sum of squared errors of rounding the golden itself to fp16
        self.g_max = self.t_max = -math.inf
        self.zg = self.zt = self.kl_weighted = 0.0  # sum e^(g-g_max), sum e^(t-t_max), sum e^(g-g_max) (g-t)
        self.all_zero = True

    def add(self, g: np.ndarray, t: np.ndarray) -> None:
        d = t - g
        ad = np.abs(d)
        meaningful = np.abs(g) > EPS
        rel = _relative(g, t, meaningful)
        self.gt += float(np.dot(g, t))
        self.gg += float(np.dot(g, g))
        self.tt += float(np.dot(t, t))
        self.dd += float(np.dot(d, d))
        self.g_sum += float(g.sum())
        self.t_sum += float(t.sum())
        masked_ad = np.where(meaningful, ad, 0.0)
        self.abs_d += float(masked_ad.sum())
        self.rel += float(rel.sum())
        self.max_abs = max(self.max_abs, float(masked_ad.max()))
        self.max_rel = max(self.max_rel, float(rel.max()))
        self.all_zero = self.all_zero and not (g.any() or t.any())
        with np.errstate(over="ignore"):
            r16 = np.clip(g, -FP16_MAX, FP16_MAX).astype(np.float16).astype(np.float64) - g
        self.fp16_dd += float(np.dot(r16, r16))
        self._add_softmax(g, t, d)
        self.n += g.size

    def _add_softmax(self, g, t, d) -> None:
        g_max, t_max = max(self.g_max, float(g.max())), max(self.t_max, float(t.max()))
        if g_max > self.g_max:  # rescale what was summed relative to the old max
            scale = math.exp(self.g_max - g_max) if self.n else 0.0
            self.zg *= scale
            self.kl_weighted *= scale
            self.g_max = g_max
        if t_max > self.t_max:
            self.zt *= math.exp(self.t_max - t_max) if self.n else 0.0
            self.t_max = t_max
        eg = np.exp(g - g_max)
        self.zg += float(eg.sum())
        self.zt += float(np.exp(t - t_max).sum())
        self.kl_weighted -= float(np.dot(eg, d))  # d = t - g


def _kl(s: _Sums) -> float:
    """KL(softmax(g) || softmax(t)) = sum p (g - t) + (t_max - g_max) + log Zt - log Zg, p = e^(g-g_max)/Zg."""
    value = s.kl_weighted / s.zg + (s.t_max - s.g_max) + math.log(s.zt) - math.log(s.zg)
    return max(value, 0.0)


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


def _significant(g: np.ndarray, t: np.ndarray, floor: float) -> tuple[float, int]:
    """(sum of msit's relative error, count) over the elements with |g| >= floor."""
    total, count = 0.0, 0
    for gc, tc in _pairs(g, t):
        mask = np.abs(gc) >= floor
        total += float(_relative(gc, tc, mask).sum())
        count += int(mask.sum())
    return total, count


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
    result: dict = _nonfinite_counts(golden, target)
    reasons = []
    if result["golden_nan"] or result["golden_inf"]:
        reasons.append(GOLDEN_NONFINITE)
    if result["target_nan"] or result["target_inf"]:
        reasons.append(TARGET_NONFINITE)
    result["fail_reason"] = " ".join(reasons)
    if reasons or golden.size == 0:
        result["compared"] = 0
        result.update(dict.fromkeys(METRIC_NAMES, math.nan), rmse_fp16_floor=math.nan, exact_cosine=math.nan,
                      significant_mean_rel_error=math.nan, significant_elements=0)
        result.update(target_mean=math.nan, target_std=math.nan, golden_mean=math.nan, golden_std=math.nan)
        return result
    s = _Sums()
    with np.errstate(over="ignore", invalid="ignore"):  # squares beyond float64: inf, judged as such below
        for gc, tc in _pairs(golden, target):
            s.add(gc, tc)
    floor = max(SIGNIFICANT_FRACTION * math.sqrt(s.gg / s.n), math.nextafter(EPS, math.inf))
    significant_rel, significant = _significant(golden, target, floor)
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
    """Largest finite |x| (0 for an empty or all non-finite tensor), without a float64 copy."""
    flat = np.asarray(x).reshape(-1)
    best = 0.0
    for start in range(0, flat.size, CHUNK):
        chunk = np.abs(flat[start : start + CHUNK].astype(np.float64))
        chunk = chunk[np.isfinite(chunk)]
        if chunk.size:
            best = max(best, float(chunk.max()))
    return best
