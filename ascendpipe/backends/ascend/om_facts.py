"""What makes a folder holding an OM a converted-model dir (docs/contracts.md): ``fused_map.json`` from the
OM JSON and ``convert.json`` with the ONNX's input specs, whether atc or aoe wrote the OM.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from ascendpipe.backends.ascend import atc
from ascendpipe.backends.ascend.convert_settings import settings_record
from ascendpipe.backends.ascend.plan import Plan
from ascendpipe.contract import CONVERT_INFO, FUSED_MAP, MODEL_STEM
from ascendpipe.fsutil import write_json_atomic


def onnx_facts(model: Path) -> dict[str, Any]:
    """Input specs, output names and each node's outputs from the ONNX (for infer and the op mapping)."""
    import onnx

    from ascendpipe.onnxgraph import graph_input_specs

    m = onnx.load(str(model), load_external_data=False)
    inputs = [{"name": s.name, "shape": list(s.shape), "dtype": s.dtype} for s in graph_input_specs(m.graph)]
    nodes = {n.name: (list(n.input), list(n.output)) for n in m.graph.node if n.name}
    return {"inputs": inputs, "outputs": [o.name for o in m.graph.output], "node_io": nodes}


def fused_map_from_om(info: atc.OmInfo, node_io: dict[str, tuple[list[str], list[str]]]) -> dict[str, Any]:
    """fused_map.json from the OM JSON: fused op -> originals; its outputs -> the last original's outputs.

    The last original is the one whose outputs no other original of the same fused op reads
    (Conv+Relu -> Relu); when that is not unique, the last one listed.
    """
    fused, tensors = {}, {}
    for op in info.ops:
        originals = [n for n in op.original_names if n]
        if len(originals) > 1:
            fused[op.name] = originals
        read = {t for n in originals for t in node_io.get(n, ([], []))[0]}
        ends = [n for n in originals if n in node_io and not set(node_io[n][1]) & read]
        last = ends[0] if len(ends) == 1 else (originals[-1] if originals else op.name)
        for i, tensor in enumerate(node_io.get(last, ([], []))[1]):
            tensors[f"{op.name}:output:{i}"] = tensor
    return {"format": "ascendpipe-fused-map/1", "fused": fused, "tensors": tensors,
            "rules": {op.name: op.pass_names[0] for op in info.ops if op.pass_names}}


def om_shapes(shapes, onnx_inputs: list[dict], om_inputs: dict[str, list[int]]) -> dict[str, Any]:
    """convert.json's ``inputs`` as the OM takes them (what infer and dump feed), the ONNX's as
    ``onnx_inputs``, and ``shapes``: the --input_shape and gears; a static OM's dims from its JSON's Data ops
    where the JSON has them (the OM's real inputs), else from --input_shape."""
    from ascendpipe.precision.dynamic_shapes import om_input_specs

    record = shapes.record() if shapes is not None else {"mode": "static", "accepted": []}
    if record["mode"] == "static" and om_inputs and all(i["name"] in om_inputs for i in onnx_inputs):
        record["accepted"] = [{i["name"]: om_inputs[i["name"]] for i in onnx_inputs}]
        record["from_om_json"] = True
    return {"inputs": om_input_specs(record, onnx_inputs), "onnx_inputs": onnx_inputs, "shapes": record}


def write_om_facts(ctx, out: Path, plan: Plan, extra: dict[str, Any]) -> tuple[atc.OmInfo, dict, dict]:
    """fused_map.json and convert.json from the OM JSON and the ONNX: what makes ``out`` a converted
    model dir (docs/contracts.md) that infer, dump and compare read, whether atc or aoe wrote the OM."""
    info = atc.load_om_json(out / f"{MODEL_STEM}.json")
    facts = onnx_facts(plan.data["atc"].model)
    fused_map = fused_map_from_om(info, facts.pop("node_io"))
    write_json_atomic(out / FUSED_MAP, fused_map)
    facts.update(om_shapes(plan.data["atc"].shapes, facts["inputs"], info.inputs))
    record = {"backend": "ascend", "settings": settings_record(plan.data["settings"]), **extra,
              "atc_cmdline": info.atc_cmdline, "om_name": info.name, "soc_version": info.attrs.get("soc_version"),
              "opp_version": info.attrs.get("opp_version"), "model": str(plan.data["atc"].model), **facts}
    write_json_atomic(out / CONVERT_INFO, record)
    return info, fused_map, record
