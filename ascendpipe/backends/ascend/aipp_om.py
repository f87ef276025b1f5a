"""What an AIPP OM takes: its AIPP-connected input is uint8 NHWC of ``src_image_size_h x _w`` with the
channels of ``input_format`` (CANN 900 ``atlasatc_16_0025`` item 9: "using AIPP makes the model input
UINT8"; ``--input_format`` docs, ``atlasatcparam_16_0015``: the AIPP-connected input is forced to NHWC).

Pure: convert.json's ``inputs`` and ``shapes`` rewritten for the AIPP inputs, so infer, dump and compare
feed the OM the bytes ais_bench checks (``tensorsize`` = the OM input's byte size), while ``onnx_inputs``
(and the golden side of a compare) keep the ONNX's float NCHW input.
"""

from __future__ import annotations

from typing import Any

from ascendpipe.errors import Location, UserError


def aipp_input_shapes(blocks: list[dict], inputs: list[dict], *, file: str = "aipp") -> dict[str, list[int]]:
    """Input name -> the NHWC dims without the batch ([H, W, C]) each AIPP block gives its input."""
    from ascendpipe.precision import aipp

    out = {}
    for block in blocks or []:
        rank = block.get("related_input_rank", 0)
        if not isinstance(rank, int) or not 0 <= rank < len(inputs):
            raise UserError(f"AIPP related_input_rank {rank} is not a model input (0..{len(inputs) - 1})",
                            Location(file=file, field="aipp"))
        spec_in = inputs[rank]
        dims = list(spec_in["shape"])
        if len(dims) != 4 or not all(isinstance(d, int) and d > 0 for d in dims[1:]):
            raise UserError(f"AIPP needs a static NCHW input; '{spec_in['name']}' has shape {dims}",
                            Location(file=file, field="aipp"))
        spec = aipp.aipp_spec(block, tuple(dims[1:]), file)
        out[spec_in["name"]] = [spec.src_hw[0], spec.src_hw[1], aipp.input_channels(spec)]
    return out


def with_aipp(facts: dict[str, Any], blocks: list[dict]) -> dict[str, Any]:
    """convert.json's facts (``inputs``, ``shapes``) as the AIPP OM takes them: each AIPP input uint8 NHWC,
    its batch as the OM fixes it (``--input_shape`` / the OM JSON's Data op / a batch gear)."""
    hwc = aipp_input_shapes(blocks, facts.get("onnx_inputs") or facts["inputs"])  # validated on the ONNX's NCHW
    if not hwc:
        return facts
    inputs = []
    for spec in facts["inputs"]:
        if spec["name"] in hwc:
            spec = {**spec, "shape": [spec["shape"][0], *hwc[spec["name"]]], "dtype": "uint8", "layout": "NHWC",
                    "aipp": True}
        inputs.append(spec)
    shapes = dict(facts.get("shapes") or {})
    if shapes.get("accepted"):
        shapes["accepted"] = [{n: ([dims[0], *hwc[n]] if n in hwc else dims) for n, dims in gear.items()}
                              for gear in shapes["accepted"]]
    shapes["aipp_inputs"] = sorted(hwc)
    return {**facts, "inputs": inputs, "shapes": shapes}
