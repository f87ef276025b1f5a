"""Advice for a quantized (fake-quant) target: which layers lose most cosine themselves, and which to
keep in float (``skip_layers``). Pure: compare rows + the quantize stage's record -> ranking and advice."""

from __future__ import annotations

from ascendpipe.compare import paste


def _unique(items: list[str]) -> list[str]:
    return list(dict.fromkeys(items))


def _decision_cosine(row: dict) -> float | None:
    """Our cosine (exact_cosine): the msit-named one is msaccucmp's, which is NaN (None in JSON) when
    one side is all zero, the very case a collapsed int8 layer produces."""
    exact = row.get("exact_cosine")
    return exact if exact is not None else row.get("cosine")


def _row_loss(row: dict) -> float | None:
    cosine = _decision_cosine(row)
    if row.get("side", "both") != "both" or cosine is None:
        return None
    return 1.0 if cosine != cosine else max(0.0, 1.0 - float(cosine))  # NaN: one side collapsed to zeros


def quantization_losses(rows: list[dict], layers: list[str], producers: dict[str, list[str]] | None) -> list[dict]:
    """Each quantized layer's loss (1 - cosine of its output vs golden) and its own share of it (that
    loss minus the largest loss among the ops feeding it), largest share first: quantization error
    accumulates downstream, so the layer that loses most is the one whose share is largest."""
    loss_by_op: dict[str, float] = {}
    cosine_by_op: dict[str, float] = {}
    for row in rows:
        loss = _row_loss(row)
        if loss is None:
            continue
        for op in row.get("golden_ops") or [row.get("golden_op") or row["op_name"]]:
            loss_by_op[op] = loss
            cosine_by_op[op] = _decision_cosine(row)
    ranked = []
    for layer in layers:
        if layer not in loss_by_op:
            continue
        feeding = [loss_by_op[p] for p in (producers or {}).get(layer, []) if p in loss_by_op]
        input_loss = max(feeding, default=0.0)
        ranked.append({"layer": layer, "cosine": cosine_by_op[layer], "loss": loss_by_op[layer],
                       "input_loss": input_loss, "local_loss": max(0.0, loss_by_op[layer] - input_loss)})
    return sorted(ranked, key=lambda r: (-r["local_loss"], r["layer"]))


def skip_layers_advice(ranked: list[dict], stage: str = "quantize", existing: list[str] | None = None,
                       limit: int = 3) -> dict | None:
    """Keep the lossiest quantized layers in float: those whose own loss is at least half the largest
    (at most ``limit``), on top of the stage's ``skip_layers`` (a pasted list replaces the stage's)."""
    existing = [str(x) for x in existing or []]
    fresh = [r for r in ranked if r["layer"] not in existing and r["local_loss"] > 0.0]
    if not fresh:
        return None
    top = fresh[0]["local_loss"]
    added = [r["layer"] for r in fresh if r["local_loss"] >= 0.5 * top][:limit]
    layers = _unique(existing + added)
    return {
        "kind": "skip_layers",
        "layers": layers,
        "added": added,
        "message": f"keep {', '.join(added)} in float (skip_layers): "
                   + ", ".join(f"{r['layer']} loses {r['local_loss']:.3g} of cosine itself" for r in fresh[:len(added)]),
        "set": paste.set_line(stage, ["skip_layers"], layers),
        "yaml": paste.yaml_lines(stage, {"skip_layers": layers}),
    }


def quantization_report(result: dict, record: dict, producers: dict[str, list[str]] | None) -> dict:
    """Add ``result["quantization"]`` for a fake-quant target (``record``: its quantize.json): the
    quantized layers by loss and the skip_layers advice. A failure's advice becomes that advice: the
    target is a quantize stage, whose remedy is keeping layers in float, not a convert setting."""
    settings = record.get("settings") or {}
    stage = record.get("stage") or "quantize"
    ranked = quantization_losses(result["rows"], list(record.get("quantized_layers") or []), producers)
    advice = skip_layers_advice(ranked, stage, settings.get("skip_layers"))
    result["quantization"] = {"stage": stage, "layers": ranked, "advice": advice,
                              "skipped_layers": list(record.get("skipped_layers") or [])}
    for failure in result.get("failures") or []:
        failure["advice"] = [advice] if advice else []
        failure["kind"] = "quantization"
    return result["quantization"]
