"""A mask's fill value beyond fp16's range, read from a row's two tensors (issue 49). Pure numpy.

An attention mask fills the positions it hides with one large negative constant: float32's lowest
(-3.4e38, ``torch.finfo(float32).min``), or -1e9, ``(1 - mask) * lowest`` or ``Where(mask, scores,
lowest)``, and the sum of such a mask and the scores. fp16 cannot hold the constant: the device stores
-65504 (saturation mode) or -inf (inf_nan mode) there, and a Softmax downstream weighs either as 0,
as it weighs the golden's constant. Compared as numbers, the row "fails" (its relative Euclidean
distance is ~1) though nothing a consumer reads changed. ``fill_facts`` tells such a row from an
overflowing activation by the values: some positions, not all, hold golden values beyond -65504, every
one negative and within fp16's relative step (2^-10) of one magnitude (a fill, where an activation's
overflowing values spread or fill the whole tensor: a saturated network's class scores all near 1e10
are no mask; a single value counts only at float32's largest, a sentinel), and the target holds that
constant's fp16 image (+-65504 or +-inf of the same sign, less the scores added to it, and still
more than exp's range beneath them) at each of them. The other values are
compared apart (the decision's metrics and thresholds): a NaN there (0 x -inf) or an upstream error
keeps the row failing. ``compare.mechanism.fills`` decides with the graph whether a Softmax absorbs it.
"""

from __future__ import annotations

import numpy as np

from ascendpipe.compare import thresholds as thr
from ascendpipe.compare.metrics import FP16_MAX, magnitude_max, tensor_metrics

SENTINEL = 1.0e38  # |golden| this large is float32's largest (3.4e38) standing for "minus infinity"
FILL_SPREAD = 2.0 ** -10  # fp16's relative step: a fill's values (constant + a score) stay within it
STORED_MIN = FP16_MAX * (1 - 2.0 ** -11)  # the target holds the fill as fp16's largest (or inf)
EXP_ZERO = 104.0  # exp(-104) is below float32's smallest subnormal (1.4e-45): a Softmax weighs it 0


def fill_facts(golden: np.ndarray, target: np.ndarray, limits: dict) -> dict | None:
    """{"value", "count", "stored", "stored_as", "rest": {"compared", "exact_cosine", "relative_euclidean",
    "reasons", "nonfinite", "golden_peak", "target_peak"}} for a float pair whose golden holds a fill beyond
    fp16's range; None otherwise.
    ``stored``: how many of the ``count`` fill positions the target holds as the fill's fp16 image;
    ``rest``: the decision's metrics over every other position, and the thresholds' reasons (empty:
    they pass)."""
    g = np.asarray(golden).reshape(-1)
    t = np.asarray(target).reshape(-1)
    if g.size != t.size or g.dtype.kind != "f" or t.dtype.kind != "f":
        return None
    with np.errstate(invalid="ignore", over="ignore"):
        beyond = np.abs(g) > FP16_MAX  # NaN compares False: a NaN golden is not compared anyway
        count = int(np.count_nonzero(beyond))
        if not count:
            return None
        if count == g.size:  # no position left unfilled: a tensor wholly beyond range is no mask
            return None
        values = g[beyond].astype(np.float64)
        if not np.isfinite(values).all():
            return None
        # a mask hides positions with a large *negative* value (a Softmax weighs it 0); a large positive
        # value would dominate the Softmax instead: an overflow of its own, never a fill
        negative = True
        if bool(np.any(values >= 0)):
            return None
        magnitudes = np.abs(values)
        low, high = float(magnitudes.min()), float(magnitudes.max())
        if high - low > FILL_SPREAD * high or (count < 2 and high < SENTINEL):
            return None  # an activation's overflowing values spread; one value alone is a fill only as a sentinel
        held = t[beyond].astype(np.float64)
        rest_g, rest_t = g[~beyond], t[~beyond]
        others = magnitude_max(rest_t)
        # the fill's fp16 image (±65504, ±inf), less what was added to it (an Add of the scores: at most the
        # other values' largest), and still so far beneath them that exp() reads 0 for it, as for the golden's
        least = max(STORED_MIN - others, others + EXP_ZERO)
        stored = int(np.count_nonzero(((held < 0) == negative) & (np.abs(held) >= least)))
    rest: dict = {"compared": int(rest_g.size), "exact_cosine": None, "relative_euclidean": None, "reasons": [],
                  "nonfinite": 0, "golden_peak": magnitude_max(rest_g), "target_peak": others}
    if rest_g.size:
        m = tensor_metrics(rest_g, rest_t)
        if m["fail_reason"]:  # inf/NaN among the other values (0 x -inf)
            rest["nonfinite"] = int(m["target_nan"] + m["target_inf"])
            rest["reasons"] = [f"{rest['nonfinite']} inf/NaN outside the fill"]
        else:
            rest.update(exact_cosine=float(m["exact_cosine"]), relative_euclidean=float(m["relative_euclidean"]),
                        reasons=thr.violations(m, limits))
    return {"value": float(-high if negative else high), "count": count, "stored": stored,
            "stored_as": float(held[0]), "rest": rest}


def is_fill(row: dict) -> bool:
    """The row's golden holds a fill beyond fp16's range and the target holds its fp16 image everywhere."""
    fill = row.get("fill")
    return bool(fill) and fill["stored"] == fill["count"]


def fill_only(row: dict) -> bool:
    """The row's overflow is its fill's image alone: a fill (``is_fill``) whose other values hold no
    inf/NaN and stay below fp16's largest value, so the values a consumer reads did not overflow here."""
    if not is_fill(row):
        return False
    rest = row["fill"]["rest"]
    return not rest["nonfinite"] and rest["target_peak"] < STORED_MIN


def value_peak(row: dict) -> float:
    """The largest golden |value| the row computes: a fill's other values' (``fill_only``), else the row's."""
    if fill_only(row):
        return row["fill"]["rest"]["golden_peak"]
    return row.get("golden_abs_max") or 0.0
