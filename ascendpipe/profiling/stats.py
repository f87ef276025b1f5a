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
    noise = f"noise range {low:.1f}%..{high:.1f}%"
    if result["significant"]:
        return f"{task} process finished. Performance improved by {gain:.1f}% ({noise})"
    return f"{task} process finished. No performance improvement: {gain:+.1f}% is within the noise ({noise})"
