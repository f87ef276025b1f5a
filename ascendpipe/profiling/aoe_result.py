"""Documents tune writes: the knowledge bank and an ``aoe_result_opat``-shaped result (pure)."""

from __future__ import annotations

from typing import Any

BANK_FORMAT = "ascendpipe-tune-bank/1"
SESSION_KEYS = ("graph_optimization_level", "intra_op_num_threads", "execution_mode", "disabled_optimizers")


def bank_document(*, model_sha256: str, session: dict, measurements: dict, model: str = "",
                  source_sha256: str | None = None) -> dict:
    """``model``: the tuned file's name; ``source_sha256``: when the tuned model is a converted one,
    the ONNX it was converted from (a convert of that ONNX may take the bank too)."""
    doc = {"format": BANK_FORMAT, "model": model, "model_sha256": model_sha256,
           "session": {k: session[k] for k in SESSION_KEYS}, "measurements": measurements}
    if source_sha256:
        doc["source_sha256"] = source_sha256
    return doc


def bank_model_mismatch(bank: dict, model_sha256: str, model_label: str) -> str | None:
    """Why the bank does not belong to the model being converted (None when it does, or when the bank
    names no model: a hand-written bank holds settings only). The bank belongs to the model it was
    tuned on, and to the ONNX that model was converted from."""
    tuned = bank.get("model_sha256")
    if not tuned or model_sha256 in (tuned, bank.get("source_sha256")):
        return None
    name = bank.get("model") or "another model"
    return (f"the bank was tuned on '{name}' (sha256 {str(tuned)[:12]}...), not on the model converted here "
            f"'{model_label}' (sha256 {model_sha256[:12]}...): tune this model, or delete model_sha256 from "
            "the bank to apply its settings anyway")


def _pct(before: float, after: float) -> str:
    # AOE's definition: (before - after) / after, i.e. speed-up minus one, not the share of time
    # saved: its result-file example (hiascend 900 doc aoeep_16_044, "aoe_result_opat" format)
    # reads performance_before_tune 134 us, after 99 us, performance_improvement "35.35%" =
    # (134 - 99) / 99; (134 - 99) / 134 would be 26.12%
    return f"{100.0 * (before - after) / after:.2f}%" if after > 0 else "0.00%"


def per_op_changes(before: dict[str, dict], after: dict[str, dict], *, min_gain_pct: float = 2.0) -> list[dict]:
    """Per op, before and after tuning, from per-iteration kernel times
    (``{op_name: {"op_type": T, "durations_us": [...]}}``), largest time first.

    ``update_mode`` says what the measurement supports: "add" (faster beyond the noise), "removed"
    (the op no longer runs: fused or folded away), "unchanged" (inside the noise or slower).
    """
    from ascendpipe.profiling.stats import speedup

    rows = []
    for name, b in before.items():
        a = after.get(name)
        if a is None:
            gain, after_us, mode = speedup(b["durations_us"], [0.0]), 0.0, "removed"
        else:
            gain = speedup(b["durations_us"], a["durations_us"], min_gain_pct=min_gain_pct)
            after_us, mode = gain["candidate_median_ms"], "add" if gain["significant"] else "unchanged"
        before_us = gain["baseline_median_ms"]  # speedup() is unit-free; these are us here
        rows.append({"op_name": name, "op_type": b["op_type"], "tune_performance": {"Format": {
            "performance_after_tune(us)": round(after_us, 3),
            "performance_before_tune(us)": round(before_us, 3),
            "performance_improvement": _pct(before_us, after_us),
            "update_mode": mode}}})
    rows.sort(key=lambda r: -r["tune_performance"]["Format"]["performance_before_tune(us)"])
    return rows


def opat_document(*, report_id: str, tuning_name: str, tuning_time_s: float, improved: bool,
                  operators: list[dict], baseline_ms: float, result_ms: float) -> dict[str, Any]:
    """AOE's newer layout ({"report_<ts>_<tid>": [basic, OPAT]}), with 63RC2's model-level fields."""
    return {f"report_{report_id}": [
        {"basic": {"tuning_name": tuning_name, "tuning_time(s)": round(tuning_time_s, 3)}},
        {"OPAT": {"opat_tuning_result": "tuning successful" if improved else "tuning no gain",
                  "model_baseline_performance(ms)": round(baseline_ms, 4),
                  "model_result_performance(ms)": round(result_ms, 4),
                  "model_performance_improvement": _pct(baseline_ms, result_ms),
                  "repo_modified_operators": operators}},
    ]}
