"""The device toolchain's own accuracy standard for a tensor, applied to a model's outputs (issue 47 item 7).

compare's thresholds are msit's per-row monitor (cosine < 0.99, relative Euclidean > 0.05, ...:
``thresholds``): a row beyond any one of them is flagged for a look. They are no pass mark for a
model: a model whose outputs keep their direction (cosine 0.9999) fails relative Euclidean 0.05 on a
few percent of scale, and a precision setting may change nothing there (the reporters' model of issue
47: relative Euclidean 0.066 at cosine 0.9999, no setting changed anything). Naming a cause for it
sends the user after a fix that does not exist.

The standard read here is msprobe's "Accuracy Reached or Not" (package mindstudio-probe 26.2.0,
``msprobe/core/compare/multiprocessing_compute.py:85-101``, ``check_accuracy(cos, max_abs_err)``, with
``msprobe/core/common/const.py:901-905``: COS_THRESHOLD 0.99, MAX_ABS_ERR_THRESHOLD 0.001,
COS_MAX_THRESHOLD 0.9, MAX_ABS_ERR_MAX_THRESHOLD 1): a tensor is *not* reached when its cosine is below
0.99 while its max absolute error exceeds 0.001, when its cosine is below 0.9, or when its max absolute
error exceeds 1; else it is reached. msprobe computes both in float64 over every element
(``core/compare/utils.py:1240-1249`` ``flatten_numpy``; ``alg_cosine_similarity.py``,
``alg_max_absolute_error.py``). We read the exact cosine (float64, ``metrics.exact_cosine``) and
msaccucmp's MaxAbsoluteError (max |t - g| over every element, in float32: within one float32 rounding of
msprobe's). Where msprobe has no number (a side holds inf/NaN, one side is all zeros, a single element,
an empty tensor) we say "not known" and never "reached" (msprobe's ``check_accuracy`` turns a "Nan"
cosine into a float NaN that no threshold comparison catches, and answers "Yes": not followed).

Standards surveyed and not used for the verdict (docs/contracts.md says why): msit's thresholds
(``msquickcmp/cmp_process.py:66-70``) are the row monitor above; the "dual one-thousandth" rule (every
element within 1e-3 relative, at most 1e-3 of them beyond: CANN's Mmad documentation, on an fp16
kernel's result) and msprobe's per-API "thousandth" pass rule (``core/common/const.py`` THOUSANDTH_PASS_VALUE
0.999) judge one kernel's output against a high-precision reference, which no output of a network of
fp16 kernels meets; msit's LLM logits compare (``msit_llm/logits_compare/logits_cmp.py``: cosine > 0.999,
KL < 1e-4, L1 < 0.01, or the max logit within one ULP) is for logits only.

The verdict: where the outputs fail compare's thresholds but every compared output reaches the
standard, compare blames no cause (``first_failure`` null) and says so; ``summary.outputs_pass`` stays
false (the thresholds, which ``--check`` reads), ``summary.outputs_meet_standard`` is true.
"""

from __future__ import annotations

import math

NAME = "msprobe"
COS_THRESHOLD = 0.99
MAX_ABS_ERR_THRESHOLD = 0.001
COS_MAX_THRESHOLD = 0.9
MAX_ABS_ERR_MAX_THRESHOLD = 1.0
RULE = ("msprobe's accuracy check: cosine >= 0.99 (or max abs error <= 0.001), cosine >= 0.9 and max abs "
        "error <= 1")


def reached(cosine: float | None, max_abs_error: float | None) -> bool | None:
    """msprobe's ``check_accuracy`` on two numbers; None where either is missing or not finite."""
    if cosine is None or max_abs_error is None or not (math.isfinite(cosine) and math.isfinite(max_abs_error)):
        return None
    if cosine < COS_THRESHOLD and max_abs_error > MAX_ABS_ERR_THRESHOLD:
        return False
    if cosine < COS_MAX_THRESHOLD or max_abs_error > MAX_ABS_ERR_MAX_THRESHOLD:
        return False
    return True


def _elements(row: dict) -> int | None:
    shape = row.get("shape")
    if not isinstance(shape, list) or not all(isinstance(d, int) for d in shape):
        return None
    return math.prod(shape)


def output_item(row: dict) -> dict:
    """One output's standard: its numbers and whether it is reached (None: not known, and why)."""
    from ascendpipe.compare import shown

    numbers = shown.values(row)
    cosine, max_abs = numbers["cosine"], numbers["max_abs_error"]
    why = None
    if _elements(row) is not None and _elements(row) <= 1:
        why, verdict = "a single element: msprobe compares none", None
    else:
        verdict = reached(cosine, max_abs)
        if verdict is None:
            why = shown.why_missing(row, "cosine" if cosine is None else "max_abs_error")
    return {"index": row["index"], "op_name": row["op_name"], "tensor": row["tensor"], "cosine": cosine,
            "max_abs_error": max_abs, "reached": verdict, "why": why}


def judge(rows: list[dict]) -> dict | None:
    """``{"name", "rule", "met", "outputs": [...]}`` over the compared outputs, None when none was compared.
    ``met``: every output reached (False when any is not, None when one is not known)."""
    outputs = [r for r in rows if r.get("is_output") and r.get("side") == "both" and not r.get("empty")
               and not r.get("not_compared")]
    if not outputs:
        return None
    items = [output_item(r) for r in outputs]
    verdicts = [i["reached"] for i in items]
    met = False if False in verdicts else (None if None in verdicts else True)
    return {"name": NAME, "rule": RULE, "met": met, "outputs": items}


def verdict_text(standard: dict, rows: list[dict], tail: str = "") -> str:
    """The verdict line where the outputs fail the thresholds but meet the standard: no cause blamed."""
    worst = min(standard["outputs"], key=lambda i: (i["cosine"], -i["max_abs_error"]))
    failing = [r for r in rows if r.get("is_output") and r.get("failed")]
    beyond = "; ".join(dict.fromkeys(reason for r in failing for reason in (r.get("reasons") or [])[:1]))
    return (f"outputs meet the device's accuracy standard ({RULE}; worst output '{worst['op_name']}': cosine "
            f"{worst['cosine']:.6g}, max abs error {worst['max_abs_error']:.3g}) though beyond compare's thresholds"
            + (f" ({beyond})" if beyond else "") + ": no cause blamed; the ops beyond thresholds are listed as "
            "divergences within it" + tail)
