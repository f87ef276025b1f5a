"""msit's pass/fail thresholds (``MONITOR_THRESHOLD``) and the per-pipeline overrides.

One deviation, on purpose: RootMeanSquareError is absolute, so on large values fp16's own spacing (16
at 30000) and the rounding carried in from upstream exceed 1.0 for a well computed tensor (the ReID
model's square, values near 11000: RMSE 5.6, yet relative RMS error 0.37% and cosine 0.99999).
RMSE therefore fails only when it is above the threshold, above RMSE_FLOOR_FACTOR times the error of
rounding the golden itself to fp16 (``rmse_fp16_floor``), *and* above RMSE_RELATIVE_MIN of the
golden's RMS magnitude (i.e. ``relative_euclidean`` > 1%: 20x fp16's unit roundoff of 2^-11, more
than a chain of roundings accumulates). On values near 1 the rule is msit's. Otherwise the first
failure of an overflowing model would be an innocent op upstream of the overflow.
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
RMSE_RELATIVE_MIN = 0.01
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
        elif name == "rmse" and _relative(metrics) is not None and _relative(metrics) <= RMSE_RELATIVE_MIN:
            continue  # small against the golden's own magnitude: the scale, not a loss
        elif direction == "max" and value > limit:
            reasons.append(f"{LABEL[name]} {value:.6g} > {limit:g}")
    return reasons


def _relative(metrics: dict) -> float | None:
    value = metrics.get("relative_euclidean")
    return value if isinstance(value, float) and not math.isnan(value) else None
