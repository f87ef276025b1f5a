"""Static AIPP as the device defines it: pure math (numpy) and the ONNX preprocessing subgraph.

Order on the device: crop -> channel swap -> colour-space conversion (CSC) -> resize -> data type
conversion ``(x - mean_chn - min_chn) * var_reci_chn`` -> padding (the order CANN documents for AIPP:
"Cropping, Color space conversion, Resizing, Mean subtraction/Normalization, Padding", acl
``aclmdlSetInputAIPP`` / ``acl.mdl.set_input_aipp``, CANN 8.5.0 aclpythondevg_01_0183). The input is
uint8 NHWC of src_image_size_h x _w; the output is float NCHW for the model.

Padding (``padding: true``, ``left/right/top/bottom_padding_size``, each 0..32: CANN 8.0.0
aclcppdevg_03_1421 ``aclmdlSetAIPPPaddingParams``) fills with ``padding_value`` (default 0; the ATC
crop/padding example sets it, CANN 8.0.0 atlasatc_16_0023). It comes after the normalisation, so
the value lands in the model input as is: a letterbox whose padded pixels normalise to 0 needs
``padding_value: 0``. Resize (``resize: true``, ``resize_output_w/h``) exists on Atlas inference
products (Ascend310P) only: CANN 8.0.0 aclcppdevg_03_1419 (``aclmdlSetAIPPScfParams``) says the Atlas
200/300/500 inference products (Ascend310) and the training products (Ascend910) do not support it;
input 16..4096, output width 16..1920, ratio 1/16..16 (same page). The device's resize filter is not
documented: it is emulated as bilinear with half-pixel centres (ONNX Resize linear, half_pixel),
unrounded, and the AIPP check says so. CSC: ``clip(floor(M @ (x - input_bias) / 256) + output_bias,
0, 255)``, the ``>> 8`` of the documented formula on integers (YUV->RGB uses input_bias, RGB->YUV
output_bias). The result stays fp32 here; an fp16 consumer rounds it like any fp16 input.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

import numpy as np

from ascendpipe.errors import Location, UserError

from ascendpipe.precision.aipp_schema import (BLOCK_SCHEMA, CHANNELS, PAD_MAX, PREFIX, RESIZE_IN,  # noqa: F401
                                               RESIZE_OUT_H, RESIZE_OUT_W, RESIZE_RATIO, RESIZE_SOCS)


@dataclass
class AippSpec:
    input_rank: int
    input_format: str
    src_hw: tuple[int, int]
    crop_start: tuple[int, int]  # (h, w)
    crop_size: tuple[int, int]
    channel_order: list[int]  # source channels picked, after alpha drop and swap
    csc: np.ndarray | None  # 3x3 int matrix, or None
    input_bias: np.ndarray = field(default_factory=lambda: np.zeros(3))
    output_bias: np.ndarray = field(default_factory=lambda: np.zeros(3))
    mean: np.ndarray = field(default_factory=lambda: np.zeros(3))
    min: np.ndarray = field(default_factory=lambda: np.zeros(3))
    var_reci: np.ndarray = field(default_factory=lambda: np.ones(3))
    resize_hw: tuple[int, int] | None = None  # after the crop, before the padding
    padding: tuple[int, int, int, int] = (0, 0, 0, 0)  # top, bottom, left, right
    padding_value: float = 0.0

    @property
    def geometry(self) -> bool:
        return self.resize_hw is not None or any(self.padding)


def _get(block: dict, key: str, default, kind, file: str):
    value = block.get(key, default)
    if kind is bool and not isinstance(value, bool):
        raise UserError(f"'{key}' must be true or false", _where(block, key, file))
    if kind in (int, float) and (isinstance(value, bool) or not isinstance(value, (int, float))):
        raise UserError(f"'{key}' must be a number, got '{value}'", _where(block, key, file))
    if kind is int and not isinstance(value, int):
        raise UserError(f"'{key}' must be an integer (it is int32 on the device), got {value}", _where(block, key, file))
    if kind in (int, float) and key in block:
        import math

        if not math.isfinite(value):
            raise UserError(f"'{key}' must be a finite number, got {value}", _where(block, key, file))
        # the device's range for the key, as an inline block's schema checks it (aipp_schema.BLOCK_SCHEMA)
        # (padding and resize sizes have checks of their own below, saying more)
        bounds = {} if key.endswith("_padding_size") or key.startswith("resize_output") else \
            BLOCK_SCHEMA["properties"].get(key, {})
        low, high = bounds.get("minimum"), bounds.get("maximum")
        if (low is not None and value < low) or (high is not None and value > high):
            raise UserError(f"{key} {value} is outside {low if low is not None else '-inf'}.."
                            f"{high if high is not None else 'inf'}", _where(block, key, file))
    return value


def _where(block: dict, key: str, file: str) -> Location:
    if file in (None, "<aipp>"):  # an inline block whose file is not known here: the stage says where
        return Location(field=f"aipp.{key}")
    return Location(file=file, line=block.get("__lines__", {}).get(key), field="aipp")


where = _where  # for the callers that check a block against the model (backends' convert)


def aipp_spec(block: dict[str, Any], model_chw: tuple[int, int, int], file: str = "<aipp>") -> AippSpec:
    """Validate one aipp_op block against the model input it feeds (C, H, W)."""
    channels, height, width = model_chw
    mode = block.get("aipp_mode", "static")
    if mode != "static":
        raise UserError(f"aipp_mode '{mode}' is not emulated; only static AIPP is", _where(block, "aipp_mode", file))
    fmt = block.get("input_format", "RGB888_U8")
    if fmt not in CHANNELS:
        raise UserError(
            f"input_format '{fmt}' is not emulated; use one of {', '.join(CHANNELS)}", _where(block, "input_format", file)
        )
    pads = (0, 0, 0, 0)
    if _get(block, "padding", False, bool, file):
        pads = tuple(_get(block, f"{side}_padding_size", 0, int, file) for side in ("top", "bottom", "left", "right"))
        for side, value in zip(("top", "bottom", "left", "right"), pads):
            if not 0 <= value <= PAD_MAX:
                raise UserError(f"{side}_padding_size {value} is outside 0..{PAD_MAX} (the device pads at most "
                                f"{PAD_MAX} pixels a side)", _where(block, f"{side}_padding_size", file))
    inner = (height - pads[0] - pads[1], width - pads[2] - pads[3])
    src = (_get(block, "src_image_size_h", 0, int, file) or inner[0], _get(block, "src_image_size_w", 0, int, file) or inner[1])
    resize = _get(block, "resize", False, bool, file)
    crop = _get(block, "crop", False, bool, file)
    start = (_get(block, "load_start_pos_h", 0, int, file), _get(block, "load_start_pos_w", 0, int, file)) if crop else (0, 0)
    if crop:
        default = (src[0] - start[0], src[1] - start[1]) if resize else inner
        size = (_get(block, "crop_size_h", 0, int, file) or default[0], _get(block, "crop_size_w", 0, int, file) or default[1])
    else:
        size = src
    if start[0] + size[0] > src[0] or start[1] + size[1] > src[1]:
        raise UserError("crop window falls outside the source image", _where(block, "load_start_pos_w", file))
    resize_hw = None
    after = size
    if resize:
        # an absent key is the model input's size; a given one (0 included) is checked against the range
        resize_hw = (_get(block, "resize_output_h", inner[0], int, file), _get(block, "resize_output_w", inner[1], int, file))
        _check_resize(block, size, resize_hw, file)
        after = resize_hw
    if after != inner:
        what = "resize output" if resize else ("crop" if crop else "source image")
        raise UserError(f"AIPP output {after[0] + pads[0] + pads[1]}x{after[1] + pads[2] + pads[3]} ({what} "
                        f"{after[0]}x{after[1]} plus padding) does not match the model input {height}x{width}",
                        _where(block, "resize_output_w" if resize else "crop_size_w", file))
    n_in = CHANNELS[fmt]
    order = list(range(n_in))
    if n_in == 4:  # XRGB/ARGB: alpha first; ax_swap_switch moves it last (RGBX/RGBA)
        order = [0, 1, 2] if _get(block, "ax_swap_switch", False, bool, file) else [1, 2, 3]
    if n_in >= 3 and _get(block, "rbuv_swap_switch", False, bool, file):
        order = [order[2], order[1], order[0]]
    if len(order) != channels:
        raise UserError(f"input_format {fmt} gives {len(order)} channels, the model input has {channels}",
                        _where(block, "input_format", file))
    csc = None
    if _get(block, "csc_switch", False, bool, file):
        if channels != 3:
            raise UserError("csc_switch needs a 3-channel input", _where(block, "csc_switch", file))
        csc = np.array([[_get(block, f"matrix_r{r}c{c}", 0, int, file) for c in range(3)] for r in range(3)], dtype=np.float64)
    vec = lambda prefix, default, kind: np.array(
        [_get(block, f"{prefix}{i}", default, kind, file) for i in range(channels)], dtype=np.float64)
    return AippSpec(
        input_rank=_get(block, "related_input_rank", 0, int, file), input_format=fmt, src_hw=src,
        crop_start=start, crop_size=size, channel_order=order, csc=csc,
        input_bias=vec("input_bias_", 0, int) if channels == 3 else np.zeros(channels),
        output_bias=vec("output_bias_", 0, int) if channels == 3 else np.zeros(channels),
        mean=vec("mean_chn_", 0, int), min=vec("min_chn_", 0.0, float), var_reci=vec("var_reci_chn_", 1.0, float),
        resize_hw=resize_hw, padding=pads,
        padding_value=float(_get(block, "padding_value", 0.0, float, file)) if any(pads) else 0.0,
    )


def _check_resize(block: dict, size: tuple, out: tuple, file: str) -> None:
    for (lo, hi), value, key in ((RESIZE_IN, size[0], "crop_size_h"), (RESIZE_IN, size[1], "crop_size_w"),
                                 (RESIZE_OUT_H, out[0], "resize_output_h"), (RESIZE_OUT_W, out[1], "resize_output_w")):
        if not lo <= value <= hi:
            what = "resize input" if key.startswith("crop") else key
            raise UserError(f"AIPP {what} {value} is outside {lo}..{hi}", _where(block, key, file))
    for a, b, key in ((size[0], out[0], "resize_output_h"), (size[1], out[1], "resize_output_w")):
        if not RESIZE_RATIO[0] <= b / a <= RESIZE_RATIO[1]:
            raise UserError(f"AIPP resize {a} -> {b} is outside the ratio 1/16..16", _where(block, key, file))


def check_soc(block: dict, soc_version: str | None, file: str = "<aipp>") -> None:
    """Refuse what the SoC's AIPP cannot do: resize outside the Atlas inference products (Ascend310P)."""
    if block.get("resize") is True and not (soc_version and soc_version.startswith(RESIZE_SOCS)):
        on = f"soc_version {soc_version}" if soc_version else "no soc_version"
        raise UserError(f"AIPP 'resize' with {on}: only the Atlas inference products (Ascend310P*) resize in AIPP "
                        "(CANN aclmdlSetAIPPScfParams); set soc_version: Ascend310P3, or resize on the host "
                        "(python -m ascendpipe.data.letterbox --resized) and let AIPP pad", _where(block, "resize", file))


def input_channels(spec: AippSpec) -> int:
    return CHANNELS[spec.input_format]


def reference(spec: AippSpec, image: np.ndarray) -> np.ndarray:
    """The numpy reference: uint8 NHWC -> float32 NCHW, computed in float64."""
    (h0, w0), (h, w) = spec.crop_start, spec.crop_size
    x = image[:, h0:h0 + h, w0:w0 + w, :].astype(np.float64)[..., spec.channel_order]
    if spec.csc is not None:
        x = np.floor((x - spec.input_bias) @ spec.csc.T / 256.0) + spec.output_bias
        x = np.clip(x, 0, 255)
    if spec.resize_hw is not None:
        from ascendpipe.data.letterbox import resize_bilinear

        x = resize_bilinear(x, spec.resize_hw)
    x = (x - spec.mean - spec.min) * spec.var_reci
    if any(spec.padding):
        top, bottom, left, right = spec.padding
        x = np.pad(x, ((0, 0), (top, bottom), (left, right), (0, 0)), constant_values=spec.padding_value)
    return x.transpose(0, 3, 1, 2).astype(np.float32)


def image_mask(spec: AippSpec, shape_nchw) -> np.ndarray:
    """True where the model input holds image (not padding), broadcastable to NCHW."""
    mask = np.zeros(tuple(shape_nchw[2:]), bool)
    top, bottom, left, right = spec.padding
    mask[top:shape_nchw[2] - bottom, left:shape_nchw[3] - right] = True
    return mask[None, None]


def build_nodes(spec: AippSpec, input_name: str, output_name: str):
    """(nodes, initializers) computing ``reference`` in ONNX, from ``input_name`` to ``output_name``."""
    from onnx import TensorProto, helper, numpy_helper

    p = f"{PREFIX}/{input_name}"
    f32 = lambda a: np.asarray(a, dtype=np.float32)
    inits = {
        f"{p}/starts": np.array(spec.crop_start, dtype=np.int64),
        f"{p}/ends": np.array([spec.crop_start[0] + spec.crop_size[0], spec.crop_start[1] + spec.crop_size[1]], dtype=np.int64),
        f"{p}/axes": np.array([1, 2], dtype=np.int64),
        f"{p}/order": np.array(spec.channel_order, dtype=np.int64),
        f"{p}/offset": f32(spec.mean + spec.min),
        f"{p}/scale": f32(spec.var_reci),
    }
    node = lambda op, ins, out, **kw: helper.make_node(op, ins, [out], name=f"{p}/{out.rsplit('/', 1)[-1]}", **kw)
    nodes = [
        node("Cast", [input_name], f"{p}/float", to=TensorProto.FLOAT),
        node("Slice", [f"{p}/float", f"{p}/starts", f"{p}/ends", f"{p}/axes"], f"{p}/crop"),
        node("Gather", [f"{p}/crop", f"{p}/order"], f"{p}/swap", axis=3),
    ]
    last = f"{p}/swap"
    if spec.csc is not None:
        inits.update({f"{p}/in_bias": f32(spec.input_bias), f"{p}/csc_t": f32(spec.csc.T / 256.0),
                      f"{p}/out_bias": f32(spec.output_bias), f"{p}/lo": f32(0.0), f"{p}/hi": f32(255.0)})
        nodes += [
            node("Sub", [last, f"{p}/in_bias"], f"{p}/centered"),
            node("MatMul", [f"{p}/centered", f"{p}/csc_t"], f"{p}/mixed"),
            node("Floor", [f"{p}/mixed"], f"{p}/shifted"),
            node("Add", [f"{p}/shifted", f"{p}/out_bias"], f"{p}/biased"),
            node("Clip", [f"{p}/biased", f"{p}/lo", f"{p}/hi"], f"{p}/csc"),
        ]
        last = f"{p}/csc"
    nodes += [
        node("Sub", [last, f"{p}/offset"], f"{p}/dtc_sub"),
        node("Mul", [f"{p}/dtc_sub", f"{p}/scale"], f"{p}/dtc"),
        helper.make_node("Transpose", [f"{p}/dtc"], [output_name], name=f"{p}/nchw", perm=[0, 3, 1, 2]),
    ]
    return nodes, [numpy_helper.from_array(v, k) for k, v in inits.items()]
