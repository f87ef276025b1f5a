"""A row compared by statistics only: a dump within a disk budget keeps most tensors as their statistics
(issue 49; ``dump_model(full=...)``), msprobe's statistics level. Pure: two index entries in, facts out.

msprobe's summary compare (mindstudio-probe 26.2.0, ``msprobe/core/compare/utils.py``
``get_rela_diff_summary_mode``; constants ``core/common/const.py``: MAGNITUDE 0.5, EPSILON 1e-10)
takes, for max, min, mean and L2 norm, the difference npu - bench and its relative error |diff / bench|,
and warns ("Need double check api accuracy") where |diff| / (max(|npu|, |bench|) + 1e-10) > 0.5. We keep
those, and read what the statistics *prove* about the full tensors, so a row fails on statistics only
where the full compare would certainly fail too:

- ||t - g|| >= | ||t|| - ||g|| | (the triangle inequality) and ||t - g|| >= sqrt(n) |mean t - mean g|
  (Cauchy-Schwarz), so the relative Euclidean distance is at least either over ||g||: beyond compare's
  threshold, the row fails;
- |max t - max g| <= max |t - g|, and so for the min: the max absolute error is at least either;
- the target holding more inf/NaN than the golden: at least that many positions overflowed (or
  saturated: a float16 target at +-65504), as a full row's inf/NaN would say.

These hold only over every element: with inf/NaN on either side the sums are over the finite values,
so no bound is read. A row the statistics do not fail is not said to pass: it is "not compared in
full", with no cosine (none exists without the tensors).
"""

from __future__ import annotations

import math

from ascendpipe.compare.metrics import FP16_MAX

KEYS = ("max", "min", "mean", "norm")
MAGNITUDE = 0.5  # msprobe CompareConst.MAGNITUDE
EPSILON = 1e-10  # msprobe CompareConst.EPSILON
NOTE = "not compared in full (statistics only)"


def summarised(entry: dict | None) -> bool:
    """A dump entry holding statistics only (no file)."""
    return bool(entry) and "file" not in entry


def _number(value) -> float | None:
    return float(value) if isinstance(value, (int, float)) and not isinstance(value, bool) and math.isfinite(value) \
        else None


def _size(entry: dict) -> int | None:
    shape = entry.get("shape")
    if not isinstance(shape, list) or not all(isinstance(d, int) for d in shape):
        return None
    return math.prod(shape)


def _all_finite(entry: dict) -> bool:
    return not entry.get("nan") and not entry.get("inf")


def side(entry: dict) -> dict:
    """One side's statistics as a row shows them (the four values, the inf/NaN counts)."""
    return {**{k: _number(entry.get(k)) for k in KEYS}, "nan": int(entry.get("nan") or 0),
            "inf": int(entry.get("inf") or 0)}


def pair(golden: dict, target: dict, limits: dict) -> dict:
    """The statistics row facts of a pair: ``{"golden", "target", "diff", "relative", "warning", "bounds"}``,
    and ``reasons`` (the thresholds the statistics prove exceeded) and ``overflow`` ("target" where the
    target holds more inf/NaN than the golden, or a float16 target reaches 65504)."""
    g, t = side(golden), side(target)
    diff, relative, warning = {}, {}, False
    for k in KEYS:
        if g[k] is None or t[k] is None:
            diff[k] = relative[k] = None
            continue
        diff[k] = t[k] - g[k]
        relative[k] = abs(diff[k] / g[k]) if g[k] != 0 else None
        if abs(diff[k]) / (max(abs(t[k]), abs(g[k])) + EPSILON) > MAGNITUDE:
            warning = True
    bounds: dict = {"relative_euclidean": None, "max_abs_error": None}
    reasons: list[str] = []
    n = _size(golden)
    if _all_finite(golden) and _all_finite(target) and n and _size(target) == n:
        if g["norm"] and t["norm"] is not None:
            by_norm = abs(t["norm"] - g["norm"]) / g["norm"]
            by_mean = math.sqrt(n) * abs(diff["mean"]) / g["norm"] if diff["mean"] is not None else 0.0
            bounds["relative_euclidean"] = max(by_norm, by_mean)
        spreads = [abs(diff[k]) for k in ("max", "min") if diff[k] is not None]
        bounds["max_abs_error"] = max(spreads) if spreads else None
        limit = limits.get("relative_euclidean")
        red = bounds["relative_euclidean"]
        if limit is not None and red is not None and red > limit:
            reasons.append(f"RelativeEuclideanDistance >= {red:.6g} > {limit:g} (statistics: L2 norms "
                           f"{t['norm']:.6g} vs {g['norm']:.6g}, means {t['mean']:.6g} vs {g['mean']:.6g})")
    overflow = None
    extra = (t["nan"] + t["inf"]) - (g["nan"] + g["inf"])
    peak = max((abs(v) for v in (t["max"], t["min"]) if v is not None), default=0.0)
    if extra > 0:
        overflow = "target"
        reasons.insert(0, f"target overflows fp16: it holds {extra} more inf/NaN than the golden (statistics)")
    elif str(target.get("dtype")) == "float16" and peak >= FP16_MAX:
        overflow = "target"
        reasons.insert(0, "target overflows fp16: it holds ±65504, fp16's largest value (saturated; statistics)")
    return {"golden": g, "target": t, "diff": diff, "relative": relative, "warning": warning, "bounds": bounds,
            "reasons": reasons, "overflow": overflow}


def abs_max(entry: dict) -> float | None:
    """The largest finite |value| from an entry's min and max (None where it has neither)."""
    values = [abs(v) for v in (_number(entry.get("min")), _number(entry.get("max"))) if v is not None]
    return max(values) if values else None
