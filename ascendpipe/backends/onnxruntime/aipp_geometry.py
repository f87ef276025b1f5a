"""AIPP's resize and padding on the onnxruntime backend: ONNX nodes after the crop/CSC/normalisation
subgraph of ``ascendpipe.precision.aipp.build_nodes``, matching ``aipp.reference``.

The device resizes before the normalisation; bilinear weights sum to one and the normalisation is a
per-channel affine map, so resizing its output is the same map (up to float rounding, ~1e-7). The
resize is ONNX ``Resize`` (linear, half_pixel, sizes from the input's batch and channels), the
padding ONNX ``Pad`` (constant ``padding_value``), both on the NCHW tensor the model reads.
"""

from __future__ import annotations

import numpy as np

from ascendpipe.precision import aipp


def aipp_nodes(spec: aipp.AippSpec, input_name: str, output_name: str):
    """(nodes, initializers) from the uint8 NHWC ``input_name`` to the model's NCHW ``output_name``."""
    if not spec.geometry:
        return aipp.build_nodes(spec, input_name, output_name)
    from onnx import helper, numpy_helper

    p = f"{aipp.PREFIX}/{input_name}"
    last = f"{p}/normalised"
    nodes, inits = aipp.build_nodes(spec, input_name, last)
    extra = {}
    if spec.resize_hw is not None:
        extra.update({f"{p}/shape_lo": np.array([0], np.int64), f"{p}/shape_hi": np.array([2], np.int64),
                      f"{p}/resize_hw": np.array(spec.resize_hw, np.int64)})
        nodes += [
            helper.make_node("Shape", [last], [f"{p}/shape"], name=f"{p}/shape"),
            helper.make_node("Slice", [f"{p}/shape", f"{p}/shape_lo", f"{p}/shape_hi"], [f"{p}/nc"], name=f"{p}/nc"),
            helper.make_node("Concat", [f"{p}/nc", f"{p}/resize_hw"], [f"{p}/sizes"], name=f"{p}/sizes", axis=0),
            helper.make_node("Resize", [last, "", "", f"{p}/sizes"], [f"{p}/resized"], name=f"{p}/resize",
                             mode="linear", coordinate_transformation_mode="half_pixel"),
        ]
        last = f"{p}/resized"
    if any(spec.padding):
        top, bottom, left, right = spec.padding
        extra.update({f"{p}/pads": np.array([0, 0, top, left, 0, 0, bottom, right], np.int64),
                      f"{p}/pad_value": np.array(spec.padding_value, np.float32)})
        nodes.append(helper.make_node("Pad", [last, f"{p}/pads", f"{p}/pad_value"], [f"{p}/padded"],
                                      name=f"{p}/pad", mode="constant"))
        last = f"{p}/padded"
    nodes.append(helper.make_node("Identity", [last], [output_name], name=f"{p}/out"))
    return nodes, inits + [numpy_helper.from_array(v, k) for k, v in extra.items()]
