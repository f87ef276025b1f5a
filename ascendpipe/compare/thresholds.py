"""msit's pass/fail thresholds (``MONITOR_THRESHOLD``) and the per-pipeline overrides.

One deviation, on purpose: RootMeanSquareError is absolute, so on values in the tens of thousands
fp16's own spacing (16 at 30000) exceeds 1.0 for a perfectly computed tensor. RMSE therefore fails only
when it is above the threshold *and* above RMSE_FLOOR_FACTOR times the error of rounding the golden
itself to fp16 (``rmse_fp16_floor``). Otherwise the first failure of an overflowing model would be an
innocent op upstream of the overflow.
"""

from __future__ import annotations

import math

from ascendpipe.errors import Location, UserError

# name -> (default, direction): 'min' fails below the threshold, 'max' fails above it.
THRESHOLDS: dict[str, tuple[float, str]] = {
    "cosine": (0.99, "min"),
    "relative_euclidean": (0.05, "max"),
    "kl": (0.005, "max"),
    "rmse": (1.0, "max"),
    "mean_relative_error": (1.0, "max"),
}
# threshold name -> key in tensor_metrics() output
METRIC_KEY = {"cosine": "cosine", "relative_euclidean": "relative_euclidean", "kl": "kl", "rmse": "rmse",
              "mean_relative_error": "mean_rel_error"}
RMSE_FLOOR_FACTOR = 2.0
LABEL = {"cosine": "CosineSimilarity", "relative_euclidean": "RelativeEuclideanDistance",
         "kl": "KullbackLeiblerDivergence", "rmse": "RootMeanSquareError", "mean_relative_error": "MeanRelativeError"}


def resolve(*overrides: dict | None, location: Location | None = None) -> dict[str, float]:
    """Defaults, then each override dict in turn (later wins). Unknown names or non-numbers are user errors."""
    result = {name: default for name, (default, _) in THRESHOLDS.items()}
    for override in overrides:
        for name, value in (override or {}).items():
            if name not in THRESHOLDS:
                known = ", ".join(THRESHOLDS)
                raise UserError(f"unknown compare threshold '{name}'; known: {known}", location)
            if isinstance(value, bool) or not isinstance(value, (int, float)) or math.isnan(value):
                raise UserError(f"compare threshold '{name}' must be a number, got {value!r}", location)
            result[name] = float(value)
    return result


def violations(metrics: dict, thresholds: dict[str, float]) -> list[str]:
    """Human-readable reasons this tensor fails, e.g. 'CosineSimilarity 0.912 < 0.99'. NaN never fails here."""
    reasons = []
    for name, limit in thresholds.items():
        value = metrics.get(METRIC_KEY[name])
        if value is None or not isinstance(value, float):
            continue
        if math.isnan(value):
            # cosine is NaN when exactly one side is all zeros (a collapsed tensor): that is a failure
            if name == "cosine" and metrics.get("compared", 0) > 0:
                reasons.append(f"{LABEL[name]} NaN (one side is all zeros)")
            continue
        direction = THRESHOLDS[name][1]
        if direction == "min" and value < limit:
            reasons.append(f"{LABEL[name]} {value:.6g} < {limit:g}")
        elif name == "rmse" and value <= RMSE_FLOOR_FACTOR * (metrics.get("rmse_fp16_floor") or 0.0):
            continue  # no more than fp16 storage of the golden would give: representation, not loss
        elif direction == "max" and value > limit:
            reasons.append(f"{LABEL[name]} {value:.6g} > {limit:g}")
    return reasons
