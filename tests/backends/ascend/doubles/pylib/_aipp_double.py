"""TEST DOUBLE of static AIPP in an OM (not CANN code): the atc double puts it in front of the fake OM's input.

The device's rule (CANN 900 ``atlasatc_16_0025`` item 9; ``insert_op.proto`` ``AippOpParams``): with AIPP the
model input becomes UINT8, NHWC, ``src_image_size_h x src_image_size_w`` with the channels of ``input_format``,
and the device computes ``(x - mean_chn_i - min_chn_i) * var_reci_chn_i`` per channel before the model. The
double emulates static AIPP without crop, resize, padding or colour-space conversion (it fails on those).
"""

from __future__ import annotations

import re
from pathlib import Path

CHANNELS = {"YUV400_U8": 1, "RGB888_U8": 3}
PREFIX = "aipp_double/"  # nodes of the AIPP prelude: not OM ops, never dumped


def read_blocks(path: str) -> list[dict]:
    """The ``aipp_op { key: value ... }`` blocks of a prototxt config."""
    text = re.sub(r"#[^\n]*", "", Path(path).read_text())
    blocks = []
    for body in re.findall(r"aipp_op\s*\{(.*?)\}", text, re.S):
        block = {}
        for key, value in re.findall(r"(\w+)\s*:\s*([^\s]+)", body):
            block[key] = value.strip('"')
        blocks.append(block)
    return blocks


def apply(model, blocks: list[dict], fail) -> None:
    """Rewrite the fake OM (an ONNX) so its AIPP input takes uint8 NHWC and the prelude normalises it."""
    import numpy as np
    from onnx import TensorProto, helper, numpy_helper

    inits = {i.name for i in model.graph.initializer}
    inputs = [i for i in model.graph.input if i.name not in inits]
    for k, block in enumerate(blocks):
        if block.get("aipp_mode", "static") != "static":
            fail(f"the double emulates static AIPP only, not aipp_mode {block.get('aipp_mode')}")
        for switch in ("crop", "resize", "padding", "csc_switch"):
            if block.get(switch, "false") == "true":
                fail(f"the double does not emulate AIPP {switch}")
        fmt = block.get("input_format")
        if fmt not in CHANNELS:
            fail(f"the double emulates AIPP input_format {sorted(CHANNELS)}, not {fmt}")
        rank = int(block.get("related_input_rank", 0))
        if not 0 <= rank < len(inputs):
            fail(f"related_input_rank {rank}: the model has {len(inputs)} inputs")
        vi = inputs[rank]
        dims = [d.dim_value if d.HasField("dim_value") and d.dim_value > 0 else None for d in vi.type.tensor_type.shape.dim]
        c = CHANNELS[fmt]
        h, w = int(block.get("src_image_size_h", 0)), int(block.get("src_image_size_w", 0))
        if len(dims) != 4 or dims[1:] != [c, h, w]:
            fail(f"AIPP {fmt} {h}x{w} ({c} channels) does not feed input '{vi.name}' {dims} without crop/resize")
        mean = np.array([float(int(block.get(f"mean_chn_{i}", 0))) + float(block.get(f"min_chn_{i}", 0.0))
                         for i in range(c)], np.float32).reshape(1, c, 1, 1)
        scale = np.array([float(block.get(f"var_reci_chn_{i}", 1.0)) for i in range(c)], np.float32).reshape(1, c, 1, 1)
        if c == 3 and block.get("rbuv_swap_switch", "false") == "true":
            order = [2, 1, 0]
        else:
            order = list(range(c))
        p = f"{PREFIX}{k}/"
        model.graph.initializer.extend([numpy_helper.from_array(mean, p + "mean"), numpy_helper.from_array(scale, p + "scale"),
                                        numpy_helper.from_array(np.array(order, np.int64), p + "order")])
        nodes = [helper.make_node("Cast", [vi.name], [p + "f"], name=p + "cast", to=TensorProto.FLOAT),
                 helper.make_node("Transpose", [p + "f"], [p + "nchw"], name=p + "nchw", perm=[0, 3, 1, 2]),
                 helper.make_node("Gather", [p + "nchw", p + "order"], [p + "swapped"], name=p + "swap", axis=1),
                 helper.make_node("Sub", [p + "swapped", p + "mean"], [p + "centred"], name=p + "sub"),
                 helper.make_node("Mul", [p + "centred", p + "scale"], [p + "out"], name=p + "mul")]
        for node in model.graph.node:
            for i, t in enumerate(node.input):
                if t == vi.name:
                    node.input[i] = p + "out"
        for node in reversed(nodes):
            model.graph.node.insert(0, node)
        batch = dims[0]
        vi.CopyFrom(helper.make_tensor_value_info(vi.name, TensorProto.UINT8, [batch if batch else "gear", h, w, c]))
