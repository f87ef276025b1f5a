"""Latency statistics and the noise rule used to call a speed-up real (pure, numpy only)."""

from __future__ import annotations

from typing import Sequence

import numpy as np


def throughput(batch_size: int, mean_ms: float) -> float:
    """Samples per second, ais_bench's formula: 1000 * batchsize / mean latency (ms); 0 when the mean
    is not positive (a clock too coarse to time the run says nothing about its speed)."""
    return 1000.0 * batch_size / mean_ms if mean_ms > 0 else 0.0


def latency_stats(samples_ms: Sequence[float], *, batch_size: int = 1) -> dict[str, float]:
    """ais_bench-style summary of per-iteration latencies in ms, plus throughput in samples/s.
    Percentiles by linear interpolation (numpy's default). No samples is a bug in the caller."""
    values = np.asarray(samples_ms, dtype=np.float64)
    if values.size == 0:
        raise ValueError("no latency samples")
    mean = float(values.mean())
    q1, median, q3 = (float(v) for v in np.percentile(values, [25, 50, 75]))
    return {
        "count": int(values.size),
        "min": float(values.min()),
        "max": float(values.max()),
        "mean": mean,
        "median": median,
        "p99": float(np.percentile(values, 99)),
        "std": float(values.std()),
        "q1": q1,
        "q3": q3,
        "throughput": throughput(batch_size, mean),
    }


def speedup(baseline_ms: Sequence[float], candidate_ms: Sequence[float], *,
            min_gain_pct: float = 1.0) -> dict[str, float | bool]:
    """How much faster the candidate is, in % of the baseline median, with a noise range.

    The noise range compares the quartiles: the worst case is the baseline's first quartile against
    the candidate's third, the best case the reverse. A gain counts only when even the worst case is
    a gain of at least ``min_gain_pct``: a result inside the noise is no improvement.
    """
    base = latency_stats(baseline_ms)
    cand = latency_stats(candidate_ms)
    ref = base["median"]
    gain = 100.0 * (ref - cand["median"]) / ref
    # a time cannot fall below zero, so no gain exceeds 100%
    low = min(100.0, 100.0 * (base["q1"] - cand["q3"]) / ref)
    high = min(100.0, 100.0 * (base["q3"] - cand["q1"]) / ref)
    return {
        "baseline_median_ms": ref,
        "candidate_median_ms": cand["median"],
        "improvement_pct": gain,
        "noise_low_pct": low,
        "noise_high_pct": high,
        "significant": bool(low >= min_gain_pct),
    }


def improvement_line(result: dict, task: str = "tune") -> str:
    """AOE's success line, only claimed when the measurement says so."""
    gain, low, high = result["improvement_pct"], result["noise_low_pct"], result["noise_high_pct"]
    noise = (f"95% interval {low:.1f}%..{high:.1f}% over {result['pairs']} paired rounds" if "pairs" in result
             else f"noise range {low:.1f}%..{high:.1f}%")
    if result["significant"]:
        return f"{task} process finished. Performance improved by {gain:.1f}% ({noise})"
    return f"{task} process finished. No performance improvement: {gain:+.1f}% is within the noise ({noise})"


# two-sided 95% Student t quantiles t(0.975, df) for df = 1..30 (beyond: the normal's 1.96)
_T975 = (12.706, 4.303, 3.182, 2.776, 2.571, 2.447, 2.365, 2.306, 2.262, 2.228, 2.201, 2.179, 2.160, 2.145,
         2.131, 2.120, 2.110, 2.101, 2.093, 2.086, 2.080, 2.074, 2.069, 2.064, 2.060, 2.056, 2.052, 2.048,
         2.045, 2.042)
PAIRED_METHOD = "95% t-interval of the mean log ratio over paired adjacent rounds"


def t975(df: int) -> float:
    return _T975[df - 1] if 1 <= df <= len(_T975) else 1.96


def paired_gain(baseline_ms: Sequence[float], candidate_ms: Sequence[float], *,
                min_gain_pct: float = 1.0) -> dict[str, float | bool | int | str]:
    """How much faster the candidate is, from rounds timed in adjacent pairs (sample i of each side
    was timed next to the other's sample i), with a 95% confidence interval.

    Per pair d = ln(baseline / candidate); the interval is mean(d) +- t(0.975, n-1) * sd(d) / sqrt(n)
    (a ratio, so a machine slowing down for a pair slows both sides alike). Gains are the share of
    the baseline's time saved, 100 * (1 - exp(-d)): ``improvement_pct`` at the mean,
    ``noise_low_pct``/``noise_high_pct`` at the interval's ends. ``significant`` only when the whole
    interval lies at or above ``min_gain_pct`` (so it excludes 0): a gain inside the noise is none.
    """
    base = np.asarray(baseline_ms, dtype=np.float64)
    cand = np.asarray(candidate_ms, dtype=np.float64)
    if base.size != cand.size or base.size < 2:
        raise ValueError("paired_gain needs two or more pairs of samples")
    d = np.log(np.maximum(base, 1e-12) / np.maximum(cand, 1e-12))
    mean, n = float(d.mean()), int(d.size)
    half = t975(n - 1) * float(d.std(ddof=1)) / np.sqrt(n)

    def pct(x: float) -> float:
        return 100.0 * (1.0 - float(np.exp(-x)))

    low, high = pct(mean - half), pct(mean + half)
    return {
        "baseline_median_ms": float(np.median(base)),
        "candidate_median_ms": float(np.median(cand)),
        "improvement_pct": pct(mean),
        "noise_low_pct": low,
        "noise_high_pct": high,
        "speedup_x": float(np.exp(mean)),
        "pairs": n,
        "method": PAIRED_METHOD,
        "significant": bool(low >= min_gain_pct and low > 0),
    }


def undecided(result: dict, min_gain_pct: float) -> bool:
    """The interval straddles the minimum gain: more pairs may decide it."""
    return result["noise_low_pct"] < min_gain_pct <= result["noise_high_pct"]
