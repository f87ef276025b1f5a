"""The numbers the terminal table and report.html print for a row: finite, or "n/a" with why (issue 49).

result.csv keeps msaccucmp's own cells (``inf``, ``nan``, ``NaN``: msit's format), and result.json its
values (null where not finite). Those are float32 sums: the cosine and RMSE of a finite tensor holding
float32's largest value (a mask) overflow there (``inf``; cosine 0 or NaN), and msaccucmp's cosine of an
all-zero side is ``NaN``. What we print as a number is a number: the cosine, relative Euclidean distance
and RMSE are the decision's float64 values over the same elements (``decision``, ``exact_cosine``:
compare/metrics.py), the rest msaccucmp's where finite; where a value does not exist (a side holds
inf/NaN, one side is all zeros for a cosine, the row was not compared) it is "n/a", never a number
that looks like an answer.
"""

from __future__ import annotations

import math

from ascendpipe.compare.metrics import GOLDEN_NONFINITE, TARGET_NONFINITE

NA = "n/a"
COLUMNS = ("cosine", "max_abs_error", "max_rel_error", "rmse", "kl", "relative_euclidean")


def _finite(value) -> float | None:
    return float(value) if isinstance(value, (int, float)) and not isinstance(value, bool) and math.isfinite(value) \
        else None


def unavailable(row: dict) -> str | None:
    """Why the row has no metric at all (None: it has them)."""
    if row.get("side", "both") != "both":
        return "one-sided"
    if row.get("empty"):
        return "empty"
    if row.get("not_compared"):
        return "not compared"
    if row.get("stats_only"):
        return "statistics only"
    note = row.get("note") or ""
    if row.get("golden_nan") or row.get("golden_inf") or GOLDEN_NONFINITE in note:
        return "golden inf/NaN"
    if row.get("target_nan") or row.get("target_inf") or TARGET_NONFINITE in note:
        return "target inf/NaN"
    return None


def why_missing(row: dict, key: str) -> str:
    """Why ``key`` has no number for ``row``."""
    missing = unavailable(row)
    if missing is not None:
        return missing
    if key == "cosine" and _one_side_zero(row):
        return "one side is all zeros"
    return "not finite in float32 (msaccucmp)"


def values(row: dict) -> dict[str, float | None]:
    """Each column's number for ``row``, None where it has none (print ``NA``)."""
    out: dict[str, float | None] = dict.fromkeys(COLUMNS)
    if unavailable(row) is not None:
        return out
    decision = row.get("decision") or {}
    for key in COLUMNS:
        out[key] = _finite(row.get(key))
    if row.get("decision") is not None or row.get("exact_cosine") is not None:
        # the decision's float64 values: finite wherever both tensors are
        out["cosine"] = _finite(row.get("exact_cosine"))
        out["rmse"] = _finite(decision.get("rmse"))
        out["relative_euclidean"] = _finite(decision.get("relative_euclidean"))
    if _one_side_zero(row):  # the angle to a zero vector does not exist (msaccucmp: NaN; ours: 0)
        out["cosine"] = None
    return out


def _one_side_zero(row: dict) -> bool:
    g, t = row.get("golden_abs_max"), row.get("target_abs_max")
    return g is not None and t is not None and (g == 0) != (t == 0)


def text(value: float | None, fmt: str = "{:.6g}") -> str:
    return NA if value is None else fmt.format(value)
