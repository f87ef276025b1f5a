"""What compare and its advice say a value becomes on the device, by the target's overflow mode. Pure.

In ``saturation`` mode (the only mode of Ascend310P*, Ascend310B* and the Atlas training products
Ascend910*, and a setting on Atlas A2/A3) a result that would be inf is stored as the dtype's largest
value (fp16: +-65504) and a NaN as 0 (CANN runtime API ``aclrtFloatOverflowMode``, aclcppdevg_03_1389;
docs/emulation.md "Overflow mode"); in ``inf_nan`` mode it is +-inf and NaN. compare says what the chip
stores, never "becomes inf" on a chip that never holds one (issue 49). Where neither the precision plan
nor convert.json says the mode (a dump made elsewhere), the text names both.
"""

from __future__ import annotations

SATURATION, INF_NAN = "saturation", "inf_nan"


def overflow_mode(precision_plan: dict | None = None, settings: dict | None = None) -> str | None:
    """The target's overflow mode: as its precision plan or convert.json records it, else the default of
    the SoC convert.json names, else None (not known)."""
    for record in (settings or {}, precision_plan or {}):
        mode = record.get("overflow_mode") if isinstance(record, dict) else None
        if mode in (SATURATION, INF_NAN):
            return mode
    soc = (settings or {}).get("soc_version") if isinstance(settings, dict) else None
    if isinstance(soc, str) and soc:
        from ascendpipe.precision.atc_passes import default_overflow_mode

        return default_overflow_mode(soc)
    return None


def beyond_fp16(mode: str | None) -> str:
    """What a value beyond fp16's range becomes on the device."""
    if mode == SATURATION:
        return "values beyond fp16's 65504 are stored as ±65504: saturation mode"
    if mode == INF_NAN:
        return "values beyond fp16's 65504 become ±inf"
    return "values beyond fp16's 65504 become ±inf (±65504 in saturation mode)"


def mask_value(mode: str | None) -> str:
    """What an additive mask's ±float32-largest value is in fp16."""
    if mode == SATURATION:
        return "±float32's largest value is stored as ±65504 in fp16: saturation mode"
    if mode == INF_NAN:
        return "±float32's largest value is ±inf in fp16"
    return "±float32's largest value is ±inf in fp16 (±65504 in saturation mode)"


def zero_to_inf(op_type: str, mode: str | None) -> str:
    """What an op that turns 0 into inf (Log, Div, Reciprocal, ...) gives on the device."""
    if mode == SATURATION:
        return f"{op_type} turns 0 into ±inf, which saturation mode stores as ±65504 (and a NaN as 0)"
    return f"{op_type} turns 0 into inf"



def mode_note(mode: str | None) -> str:
    """' (saturation mode)' / ' (inf_nan mode)' after a value the target holds; '' when not known."""
    return f" ({mode} mode)" if mode in (SATURATION, INF_NAN) else ""
