"""Static AIPP as the device defines it: pure math (numpy) and the ONNX preprocessing subgraph.

Order on the device: crop -> channel swap -> colour-space conversion (CSC) -> data type conversion
``(x - mean_chn - min_chn) * var_reci_chn``. The input is uint8 NHWC of src_image_size_h x _w; the
output is float NCHW for the model. CSC: ``clip(floor(M @ (x - input_bias) / 256) + output_bias,
0, 255)``, the ``>> 8`` of the documented formula on integers (YUV->RGB uses input_bias, RGB->YUV
output_bias). The result stays fp32 here; an fp16 consumer rounds it like any fp16 input.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

import numpy as np

from ascendpipe.errors import Location, UserError

CHANNELS = {"RGB888_U8": 3, "YUV400_U8": 1, "XRGB8888_U8": 4, "ARGB8888_U8": 4}
UNSUPPORTED = ("resize", "padding")
PREFIX = "ascendpipe_emu/aipp"


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


def _get(block: dict, key: str, default, kind, file: str):
    value = block.get(key, default)
    if kind is bool and not isinstance(value, bool):
        raise UserError(f"'{key}' must be true or false", _where(block, key, file))
    if kind in (int, float) and (isinstance(value, bool) or not isinstance(value, (int, float))):
        raise UserError(f"'{key}' must be a number, got '{value}'", _where(block, key, file))
    if kind is int and not isinstance(value, int):
        raise UserError(f"'{key}' must be an integer (it is int32 on the device), got {value}", _where(block, key, file))
    return value


def _where(block: dict, key: str, file: str) -> Location:
    return Location(file=file, line=block.get("__lines__", {}).get(key), field="aipp")


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
    for key in UNSUPPORTED:
        if block.get(key):
            raise UserError(f"'{key}' is not emulated on the onnxruntime backend", _where(block, key, file))
    src = (_get(block, "src_image_size_h", 0, int, file) or height, _get(block, "src_image_size_w", 0, int, file) or width)
    crop = _get(block, "crop", False, bool, file)
    start = (_get(block, "load_start_pos_h", 0, int, file), _get(block, "load_start_pos_w", 0, int, file)) if crop else (0, 0)
    size = (_get(block, "crop_size_h", 0, int, file) or height, _get(block, "crop_size_w", 0, int, file) or width) if crop else src
    if size != (height, width):
        raise UserError(f"AIPP output {size[0]}x{size[1]} does not match the model input {height}x{width}",
                        _where(block, "crop_size_w", file))
    if start[0] + size[0] > src[0] or start[1] + size[1] > src[1]:
        raise UserError("crop window falls outside the source image", _where(block, "load_start_pos_w", file))
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
    )


def input_channels(spec: AippSpec) -> int:
    return CHANNELS[spec.input_format]


def reference(spec: AippSpec, image: np.ndarray) -> np.ndarray:
    """The numpy reference: uint8 NHWC -> float32 NCHW, computed in float64."""
    (h0, w0), (h, w) = spec.crop_start, spec.crop_size
    x = image[:, h0:h0 + h, w0:w0 + w, :].astype(np.float64)[..., spec.channel_order]
    if spec.csc is not None:
        x = np.floor((x - spec.input_bias) @ spec.csc.T / 256.0) + spec.output_bias
        x = np.clip(x, 0, 255)
    x = (x - spec.mean - spec.min) * spec.var_reci
    return x.transpose(0, 3, 1, 2).astype(np.float32)


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
