"""The AIPP check, the first one the Ascend accuracy guide asks for: does the device's preprocessing
of the uint8 input (``(x - mean_chn - min_chn) * var_reci_chn``, see ``ascendpipe/precision/aipp.py``)
give the training-preprocessed float input the golden model was trained on?

Pure numpy. The check is one compare row (op_name ``aipp``, op_type ``Aipp``) put before every op.
It fails when cosine < 0.99 or the max absolute error exceeds ``tolerance``: half a step of the
int32 ``mean_chn`` (0.5 * var_reci: an int mean cannot match a fractional training mean better)
plus 1e-4 of the golden's magnitude (float rounding). A failing check's advice estimates each
channel's ``mean_chn_i`` / ``var_reci_chn_i`` by least squares between the values entering the
data type conversion and the training-preprocessed values (golden = (x - mean - min) * var_reci),
over the image only (not the padding); a padded border that differs gets its own estimate, the
training's value there as ``padding_value`` (the device pads after the normalisation). With AIPP
resize, the row's note says that the device's filter is emulated as bilinear (not documented).
"""

from __future__ import annotations

import copy
import math
from dataclasses import replace

import numpy as np

from ascendpipe.compare import paste
from ascendpipe.compare.metrics import magnitude_max, tensor_metrics
from ascendpipe.errors import Location, UserError

COSINE_MIN = 0.99


def tolerance(spec, golden: np.ndarray) -> float:
    return 0.5 * float(np.max(np.abs(spec.var_reci))) + 1e-4 * max(1.0, magnitude_max(golden))


def device_input(spec, u8: np.ndarray) -> np.ndarray:
    """What the device feeds the model: the AIPP reference of the uint8 input (float32 NCHW)."""
    from ascendpipe.precision import aipp

    return aipp.reference(spec, u8)


def fit_normalisation(spec, u8: np.ndarray, golden: np.ndarray) -> list[dict]:
    """Per channel: {'mean': int, 'var_reci': float, 'fits': bool} from least squares; ``fits`` is False
    when the channel's input is constant (nothing to fit)."""
    from ascendpipe.precision import aipp

    raw = device_input(replace(spec, mean=np.zeros_like(spec.mean), min=np.zeros_like(spec.min),
                               var_reci=np.ones_like(spec.var_reci)), u8).astype(np.float64)
    golden = np.asarray(golden, dtype=np.float64)
    inside = np.broadcast_to(aipp.image_mask(spec, raw.shape), raw.shape)[:, 0]
    out = []
    for c in range(raw.shape[1]):
        x, g = raw[:, c][inside], golden[:, c][inside]
        if np.ptp(x) == 0:
            out.append({"mean": int(spec.mean[c]), "var_reci": float(spec.var_reci[c]), "fits": False})
            continue
        # g = var_reci * x - var_reci * (mean + min): the slope is var_reci. Only the mean is rounded
        # (it is int32): that keeps the error within half a mean step; refitting the slope would not.
        slope, intercept = (float(v) for v in np.polyfit(x, g, 1))
        mean = int(round(-intercept / slope - spec.min[c])) if slope != 0 else int(spec.mean[c])
        out.append({"mean": mean, "var_reci": float(f"{slope:.10g}"), "fits": bool(slope != 0)})
    return out


def fit_padding(spec, golden: np.ndarray) -> float | None:
    """The training's value in the padded border when it is one value there (the ``padding_value`` to
    paste), None without padding or when the border varies."""
    from ascendpipe.precision import aipp

    if not any(spec.padding):
        return None
    golden = np.asarray(golden, dtype=np.float64)
    border = golden[np.broadcast_to(~aipp.image_mask(spec, golden.shape), golden.shape)]
    if border.size == 0 or np.ptp(border) > 1e-6 * max(1.0, float(np.max(np.abs(border)))):
        return None
    return float(f"{float(border.mean()):.7g}")


def check_row(spec, block_index: int, input_name: str, u8: np.ndarray, golden: np.ndarray, *, blocks: list[dict],
              stage: str) -> dict:
    """The compare row of the AIPP check for one input, with its advice when it fails."""
    device = device_input(spec, u8)
    golden = np.asarray(golden)
    if golden.shape != device.shape:
        raise UserError(f"golden_inputs '{input_name}' has shape {list(golden.shape)}, but AIPP gives the model "
                        f"{list(device.shape)}; give the training-preprocessed float input (NCHW)",
                        Location(field="golden_inputs"))
    m = tensor_metrics(golden, device)
    tol = tolerance(spec, golden)
    reasons = []
    if math.isnan(m["cosine"]) or m["cosine"] < COSINE_MIN:
        reasons.append(f"CosineSimilarity {m['cosine']:.6g} < {COSINE_MIN:g}")
    if m["max_abs_error"] > tol:
        reasons.append(f"MaxAbsoluteError {m['max_abs_error']:.6g} > {tol:.3g} (half an int mean step)")
    row = {
        "index": 0, "op_name": "aipp", "op_type": "Aipp", "tensor": input_name, "golden_tensor": input_name,
        "golden_ops": ["aipp"], "shape": list(device.shape), "dtype": "float32", "golden_dtype": str(golden.dtype),
        "golden_op": "aipp", "golden_op_type": "Aipp", "side": "both", "fused": False, "is_output": False,
        "note": "AIPP preprocessing of the uint8 input vs the training preprocessing (golden_inputs)"
                + ("; AIPP resize emulated as bilinear (half-pixel), the device's filter is not documented"
                   if spec.resize_hw is not None else ""),
        "overflow": None, "golden_abs_max": magnitude_max(golden), "failed": bool(reasons), "reasons": reasons,
        **{k: m[k] for k in ("cosine", "max_abs_error", "mean_abs_error", "rmse", "max_rel_error", "mean_rel_error",
                             "accumulated_rel_error", "relative_euclidean", "kl", "target_mean", "target_std",
                             "golden_mean", "golden_std", "golden_nan", "golden_inf", "target_nan", "target_inf")},
    }
    if reasons:
        row["failure_kind"] = "aipp"
        row["advice_ready"] = [aipp_advice(spec, block_index, u8, golden, blocks, stage)]
    return row


def corrected_blocks(blocks: list[dict], block_index: int, fit: list[dict]) -> list[dict]:
    fixed = copy.deepcopy(blocks)
    for c, channel in enumerate(fit):
        if channel["fits"]:
            fixed[block_index][f"mean_chn_{c}"] = channel["mean"]
            fixed[block_index][f"var_reci_chn_{c}"] = channel["var_reci"]
    return fixed


def aipp_advice(spec, block_index: int, u8, golden, blocks: list[dict], stage: str) -> dict:
    from ascendpipe.precision import remedy

    fit = fit_normalisation(spec, u8, golden)
    fixed = corrected_blocks(blocks, block_index, fit)
    pad = fit_padding(spec, golden)
    fixed_spec = replace(spec, mean=np.array([c["mean"] for c in fit], dtype=np.float64),
                         var_reci=np.array([c["var_reci"] for c in fit], dtype=np.float64))
    if pad is not None:
        fixed_spec = replace(fixed_spec, padding_value=pad)
        if pad != spec.padding_value:
            fixed[block_index]["padding_value"] = pad
    residual = float(np.max(np.abs(device_input(fixed_spec, u8).astype(np.float64) - golden))) if golden.size else 0.0
    tol = tolerance(fixed_spec, golden)
    changes = ", ".join(
        f"channel {c}: mean_chn_{c} {int(spec.mean[c])} -> {ch['mean']}, var_reci_chn_{c} {spec.var_reci[c]:.6g} -> "
        f"{ch['var_reci']:.6g}" for c, ch in enumerate(fit) if ch["fits"])
    message = ("AIPP preprocessing does not match the training preprocessing (golden_inputs); least squares over the "
               f"uint8 input gives {changes or 'no estimate (constant input)'}")
    if pad is not None and pad != spec.padding_value:
        message += f"; the training pads with {pad:.6g} after normalising: padding_value {spec.padding_value:g} -> {pad:.6g}"
    if residual > tol:
        message += (f"; even then the max error is {residual:.3g}: no mean/var_reci fits, so check the channel order "
                    "(rbuv_swap_switch), crop, csc, input_format, resize and padding sizes")
    value = fixed[0] if len(fixed) == 1 else fixed
    return {
        "kind": "aipp",
        "message": message,
        "channels": fit,
        "residual_max_abs_error": residual,
        "file": {"name": "aipp.cfg", "content": remedy.format_aipp(fixed)},
        "set": paste.set_line(stage, ["aipp"], value),
        "yaml": paste.yaml_lines(stage, {"aipp": value}),
    }
