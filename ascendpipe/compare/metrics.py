"""Per-tensor accuracy metrics, as msit / msaccucmp name them. Pure numpy, float64, NaN/inf-safe.

``g`` is the golden (fp32 reference) tensor, ``t`` the target. Both are flattened; every sum is
accumulated in float64 over chunks, so a tensor is never copied whole into float64.

Non-finite values: elements where either side is NaN or +-inf are left out of every metric below and
counted instead (``golden_nan``, ``golden_inf``, ``target_nan``, ``target_inf``, and ``nonfinite_mismatch``
= positions where the target is non-finite but the golden is finite). The caller flags such a tensor
as an overflow, so the metric values stay meaningful for the finite part. With no finite pair at all
every metric is NaN.

Formulas (sums over the finite pairs, ``n`` of them; ``rel_i = |t_i - g_i| / |g_i|`` where
``|g_i| > EPS`` and 0 elsewhere, EPS = float32 machine epsilon, as msit's ``cmp_algorithm`` does):

- CosineSimilarity          = sum(g*t) / (sqrt(sum g^2) * sqrt(sum t^2)); 1.0 when both are all zero,
                              NaN when exactly one is (msaccucmp shows NaN there).
- RelativeEuclideanDistance = sqrt(sum (t-g)^2) / sqrt(sum g^2); 0.0 when ||g|| <= EPS (msit).
- KullbackLeiblerDivergence = KL(softmax(g) || softmax(t)) over the flattened tensor, clipped at 0
                              (msit: ``kl_div(log_softmax(t), softmax(g), 'sum')``); computed with
                              log-sum-exp so large values do not overflow.
- MaxAbsoluteError          = max |t-g|
- MeanAbsoluteError         = sum |t-g| / n
- RootMeanSquareError       = sqrt(sum (t-g)^2 / n)
- MaxRelativeError          = max rel_i
- MeanRelativeError         = sum rel_i / n
- AccumulatedRelativeError  = sum rel_i  (the reference gives no formula; "accumulated" read literally)
- rmse_fp16_floor (ours)     = the RMSE of rounding the golden itself to fp16: the error floor any fp16
                              tensor has, used so that RMSE > 1.0 on large values is not a failure.
- StandardDeviation         = (mean_t; std_t), (mean_g; std_g): population std, msaccucmp's
                              "mean;std" pair for each side (target first, as NPUDump precedes GroundTruth).
"""

from __future__ import annotations

import math

import numpy as np

EPS = float(np.finfo(np.float32).eps)
FP16_MAX = 65504.0
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


_COUNT_KEYS = ("golden_nan", "golden_inf", "target_nan", "target_inf", "nonfinite_mismatch")


def _chunks(g: np.ndarray, t: np.ndarray):
    """Aligned float64 chunks of the finite pairs, with the non-finite counts of each chunk."""
    gf, tf = g.reshape(-1), t.reshape(-1)
    for start in range(0, gf.size, CHUNK):
        gc = gf[start : start + CHUNK].astype(np.float64)
        tc = tf[start : start + CHUNK].astype(np.float64)
        g_ok, t_ok = np.isfinite(gc), np.isfinite(tc)
        if g_ok.all() and t_ok.all():  # the common case: skip the counting
            yield gc, tc, None
            continue
        counts = {
            "golden_nan": int(np.isnan(gc).sum()),
            "golden_inf": int(np.isinf(gc).sum()),
            "target_nan": int(np.isnan(tc).sum()),
            "target_inf": int(np.isinf(tc).sum()),
            "nonfinite_mismatch": int((g_ok & ~t_ok).sum()),
        }
        both = g_ok & t_ok
        yield gc[both], tc[both], counts


class _Sums:
    """Running float64 sums over chunks. The softmax sums for KL are kept relative to a running max
    (online log-sum-exp), so one pass suffices."""

    def __init__(self) -> None:
        self.n = 0
        self.gt = self.gg = self.tt = self.dd = self.abs_d = self.rel = self.g_sum = self.t_sum = 0.0
        self.max_abs = self.max_rel = 0.0
        self.fp16_dd = 0.0  # sum of squared errors of rounding the golden itself to fp16
        self.g_max = self.t_max = -math.inf
        self.zg = self.zt = self.kl_weighted = 0.0  # sum e^(g-g_max), sum e^(t-t_max), sum e^(g-g_max) (g-t)
        self.counts = dict.fromkeys(_COUNT_KEYS, 0)

    def add(self, g: np.ndarray, t: np.ndarray, counts: dict | None) -> None:
        for key, value in (counts or {}).items():
            self.counts[key] += value
        if g.size == 0:
            return
        d = t - g
        ad = np.abs(d)
        ag = np.abs(g)
        rel = np.divide(ad, ag, out=np.zeros_like(ad), where=ag > EPS)
        self.gt += float(np.dot(g, t))
        self.gg += float(np.dot(g, g))
        self.tt += float(np.dot(t, t))
        self.dd += float(np.dot(d, d))
        self.g_sum += float(g.sum())
        self.t_sum += float(t.sum())
        self.abs_d += float(ad.sum())
        self.rel += float(rel.sum())
        self.max_abs = max(self.max_abs, float(ad.max()))
        self.max_rel = max(self.max_rel, float(rel.max()))
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
    if s.gg == 0.0 and s.tt == 0.0:
        return 1.0
    if s.gg == 0.0 or s.tt == 0.0:
        return math.nan
    return max(-1.0, min(1.0, s.gt / (math.sqrt(s.gg) * math.sqrt(s.tt))))


def tensor_metrics(golden: np.ndarray, target: np.ndarray) -> dict:
    """Every metric for one pair of same-size tensors (shapes may differ in layout only)."""
    golden, target = np.asarray(golden), np.asarray(target)
    if golden.size != target.size:
        raise ValueError(f"size mismatch: golden {list(golden.shape)} vs target {list(target.shape)}")
    s = _Sums()
    for gc, tc, counts in _chunks(golden, target):
        s.add(gc, tc, counts)
    result: dict = dict(s.counts)
    result["compared"] = s.n
    if s.n == 0:
        result.update(dict.fromkeys(METRIC_NAMES, math.nan), rmse_fp16_floor=math.nan)
        result.update(target_mean=math.nan, target_std=math.nan, golden_mean=math.nan, golden_std=math.nan)
        return result
    norm_g = math.sqrt(s.gg)
    result.update(
        cosine=_cosine(s),
        max_abs_error=s.max_abs,
        mean_abs_error=s.abs_d / s.n,
        rmse=math.sqrt(s.dd / s.n),
        rmse_fp16_floor=math.sqrt(s.fp16_dd / s.n),
        max_rel_error=s.max_rel,
        mean_rel_error=s.rel / s.n,
        accumulated_rel_error=s.rel,
        relative_euclidean=0.0 if norm_g <= EPS else math.sqrt(s.dd) / norm_g,
        kl=_kl(s),
        target_mean=s.t_sum / s.n,
        target_std=math.sqrt(max(s.tt / s.n - (s.t_sum / s.n) ** 2, 0.0)),
        golden_mean=s.g_sum / s.n,
        golden_std=math.sqrt(max(s.gg / s.n - (s.g_sum / s.n) ** 2, 0.0)),
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
