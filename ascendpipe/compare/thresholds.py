"""msit's pass/fail thresholds (``MONITOR_THRESHOLD``) and where our decision differs from msit's.

msit (package ``msit``: ``msquickcmp.net_compare.analyser.MONITOR_THRESHOLD`` and
``msquickcmp.cmp_process._is_row_precision_error``) fails a row when CosineSimilarity < 0.99,
RelativeEuclideanDistance > 0.05, KullbackLeiblerDivergence > 0.005, RootMeanSquareError > 1.0 or
MeanRelativeError > 1.0, any one alone. Cosine and relative Euclidean distance measure the whole
tensor against its own magnitude; the other three do not, so on real weights each trips on a tensor
that is computed well. We keep the five thresholds (result.csv shows msaccucmp's values and msit's
IsPrecisionError; our decision is its own columns), and decide on float64 values (``metrics``) so:

- CosineSimilarity: decided on ``exact_cosine``, the cosine without torch's 1e-8 floor on each norm
  that msit's value has (with it, two identical tensors of norm 1e-9 have cosine 0.01).
- RelativeEuclideanDistance: as msit.
- MeanRelativeError: decided on ``significant_mean_rel_error``, the mean relative error over the
  elements whose golden magnitude is at least 2^-10 of the tensor's RMS (``metrics.SIGNIFICANT_FRACTION``).
  msit's mean divides by each golden element, so a few elements near zero decide it: an absolute error
  the size of fp16's rounding of the tensor's typical values, on an element a thousand times smaller,
  is a relative error of 100% or more (the ReID model's square: MeanRelativeError 15.8 with cosine
  0.99999, and 3.0 for the fp32 control). The reported value stays msit's.
- RootMeanSquareError is absolute: on large values fp16's own spacing (16 at 30000) and the rounding
  carried in from upstream exceed 1.0 for a well computed tensor (the ReID square, values near 11000:
  RMSE 5.6, relative RMS error 0.37%, cosine 0.99999). It fails only when above the threshold, above
  RMSE_FLOOR_FACTOR times the error of rounding the golden itself to fp16 (``rmse_fp16_floor``), *and*
  when the relative Euclidean distance exceeds RELATIVE_MIN (1%: 20x fp16's unit roundoff of 2^-11,
  more than a chain of roundings accumulates).
- KullbackLeiblerDivergence is the KL of softmax over the flattened tensor at temperature 1: on values
  far from 1 it reads the absolute error of the few largest elements (the ReID square in the fp32
  control: KL 0.81 at relative Euclidean distance 0.2%). It fails only when the relative Euclidean
  distance exceeds RELATIVE_MIN too. Where a softmax means something (logits of magnitude 1-10, errors
  spread over them) KL reaches 0.005 only at a relative distance of 2-5%, so the gate costs KL nothing
  there.
- An overflow of the target (inf/NaN where the golden is finite, or fp16's 65504 reached) fails the
  row whatever its metrics (``runner``); msit computes no metric for such a tensor and its analyser
  skips NaN values, so it would pass.
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
# the value each threshold decides on (see the module docstring): msit's, except for cosine and mean relative error
DECISION_KEY = dict(METRIC_KEY, cosine="exact_cosine", mean_relative_error="significant_mean_rel_error")
RMSE_FLOOR_FACTOR = 2.0
RELATIVE_MIN = 0.01
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
    """Human-readable reasons this tensor fails, e.g. 'CosineSimilarity 0.912 < 0.99'. NaN never fails here
    (a tensor without metrics: msit's analyser skips NaN too; overflow is judged by the caller)."""
    reasons = []
    relative = _relative(metrics)
    for name, limit in thresholds.items():
        key = DECISION_KEY[name] if DECISION_KEY[name] in metrics else METRIC_KEY[name]
        value = metrics.get(key)
        if value is None or not isinstance(value, (float, int)) or isinstance(value, bool):
            continue
        value = float(value)
        if math.isnan(value):
            continue
        direction = THRESHOLDS[name][1]
        if direction == "min":
            if value < limit:
                reasons.append(f"{LABEL[name]} {value:.6g} < {limit:g}")
            continue
        if value <= limit:
            continue
        if name == "rmse" and value <= RMSE_FLOOR_FACTOR * (metrics.get("rmse_fp16_floor") or 0.0):
            continue  # no more than fp16 storage of the golden would give: representation, not loss
        if name in ("rmse", "kl") and relative is not None and relative <= RELATIVE_MIN:
            continue  # small against the golden's own magnitude: the scale, not a loss
        if key == "significant_mean_rel_error":
            reasons.append(f"{LABEL[name]} {value:.6g} > {limit:g} (over the {metrics.get('significant_elements')} "
                           "elements of significant magnitude)")
        else:
            reasons.append(f"{LABEL[name]} {value:.6g} > {limit:g}")
    return reasons


def _relative(metrics: dict) -> float | None:
    value = metrics.get("relative_euclidean")
    return float(value) if isinstance(value, (float, int)) and not math.isnan(value) else None
