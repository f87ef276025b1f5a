"""The device's AIPP limits (cited in ``precision/aipp.py``) and the schema of an inline ``aipp:`` block,
without numpy: the pipeline's schema reads it on every load."""

from __future__ import annotations

CHANNELS = {"RGB888_U8": 3, "YUV400_U8": 1, "XRGB8888_U8": 4, "ARGB8888_U8": 4}
PAD_MAX = 32  # per side (aclmdlSetAIPPPaddingParams, CANN 8.0.0 aclcppdevg_03_1421)
RESIZE_IN = (16, 4096)  # aclmdlSetAIPPScfParams, CANN 8.0.0 aclcppdevg_03_1419
RESIZE_OUT_W = (16, 1920)
RESIZE_OUT_H = (16, 4096)
RESIZE_RATIO = (1 / 16, 16)
RESIZE_SOCS = ("Ascend310P",)  # SoC name prefixes whose AIPP resizes (Atlas inference products)
PREFIX = "ascendpipe_emu/aipp"

_INT = lambda lo=None, hi=None: {"type": "integer", **({"minimum": lo} if lo is not None else {}),
                                 **({"maximum": hi} if hi is not None else {})}
_BOOL = {"type": "boolean"}
# An inline `aipp:` block of a pipeline, checked when the pipeline loads (its errors at the value's
# file:line, never at run time): the types and the ranges above that need no model; the rest (sizes
# against the model input) is aipp_spec's. Other keys are ATC's and pass through to its config.
BLOCK_SCHEMA = {
    "title": "mapping of aipp_op fields (types and the device's ranges checked)",
    "type": "object",
    "properties": {
        "aipp_mode": {"enum": ["static", "dynamic"]},
        "related_input_rank": _INT(0),
        "input_format": {"type": "string"},
        "src_image_size_w": _INT(0, RESIZE_IN[1]), "src_image_size_h": _INT(0, RESIZE_IN[1]),
        "crop": _BOOL, "load_start_pos_w": _INT(0), "load_start_pos_h": _INT(0),
        "crop_size_w": _INT(0, RESIZE_IN[1]), "crop_size_h": _INT(0, RESIZE_IN[1]),
        "resize": _BOOL, "resize_output_w": _INT(*RESIZE_OUT_W), "resize_output_h": _INT(*RESIZE_OUT_H),
        "padding": _BOOL, **{f"{side}_padding_size": _INT(0, PAD_MAX) for side in ("top", "bottom", "left", "right")},
        "padding_value": {"type": "number"},
        "csc_switch": _BOOL, "rbuv_swap_switch": _BOOL, "ax_swap_switch": _BOOL,
        **{f"mean_chn_{i}": _INT(0, 255) for i in range(4)},
        **{f"min_chn_{i}": {"type": "number", "minimum": 0, "maximum": 255} for i in range(4)},
        **{f"var_reci_chn_{i}": {"type": "number", "minimum": -65504, "maximum": 65504} for i in range(4)},
        **{f"input_bias_{i}": _INT(0, 255) for i in range(3)},
        **{f"output_bias_{i}": _INT(0, 255) for i in range(3)},
    },
}
