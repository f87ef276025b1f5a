"""What makes a folder holding an OM a converted-model dir (docs/contracts.md): ``fused_map.json`` from the
OM JSON and ``convert.json`` with the ONNX's input specs, whether atc or aoe wrote the OM.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from ascendpipe.backends.ascend import atc
from ascendpipe.backends.ascend.aipp_om import with_aipp
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


def fused_map_from_om(info: atc.OmInfo, node_io: dict[str, tuple[list[str], list[str]]],
                      origins: dict[tuple[str, int], tuple[str, int] | None] | None = None) -> dict[str, Any]:
    """fused_map.json from the OM JSON: fused op -> originals; each output -> its original tensor.

    ``origins``: (OM op, output k) -> (original op, output index), msaccucmp's mapping from the OM JSON's
    ``output_desc`` attrs (``compare.mapping.om_output_origins``). Without them (an OM JSON that has no
    output_desc), an op standing for one original op takes its outputs, as msaccucmp's default origin
    does; a fused op's outputs then have none (msaccucmp compares nothing for them either).
    """
    from ascendpipe.compare.mapping import ANY_OUTPUT, origin_of

    fused, tensors = {}, {}
    for op in info.ops:
        originals = [n for n in op.original_names if n]
        if len(originals) > 1:
            fused[op.name] = originals
        if origins is None:  # msaccucmp's default without output_desc: one original op's outputs, in order
            single = originals[0] if len(originals) == 1 else None
            origins_here = {(op.name, ANY_OUTPUT): (single, ANY_OUTPUT) if single else None}
        else:
            origins_here = origins
        described = sorted(k for (name, k) in origins_here if name == op.name and k != ANY_OUTPUT)
        if not described:
            any_origin = origin_of(origins_here, op.name, 0)[0]
            described = list(range(len(node_io.get(any_origin[0], ([], []))[1]))) if any_origin else []
        for k in described:
            origin = origin_of(origins_here, op.name, k)[0]
            outputs = node_io.get(origin[0], ([], []))[1] if origin else []
            if origin and origin[1] < len(outputs) and outputs[origin[1]]:
                tensors[f"{op.name}:output:{k}"] = outputs[origin[1]]
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


def record_soc(plan: Plan) -> str | None:
    return getattr(plan.data["atc"], "soc_version", None)


def _atc_lists(soc_version: str | None) -> dict[str, Any]:
    """convert.json's ``op_lists`` on ascend: atc reads its own install's lists (GE FE, precision/opsinfo.py
    says where); the folder it reads for this SoC, where this process's environment finds one."""
    import os

    from ascendpipe.precision import opsinfo

    root, folder = opsinfo.config_root(os.environ), opsinfo.soc_folder(soc_version)
    path = str(root / folder) if root is not None and folder and (root / folder).is_dir() else None
    return {"source": "atc", "soc": folder, "path": path,
            "why": "atc reads the mixed-precision lists of the CANN install it runs from"}


def write_om_facts(ctx, out: Path, plan: Plan, extra: dict[str, Any]) -> tuple[atc.OmInfo, dict, dict]:
    """fused_map.json and convert.json from the OM JSON and the ONNX: what makes ``out`` a converted
    model dir (docs/contracts.md) that infer, dump and compare read, whether atc or aoe wrote the OM."""
    import json

    from ascendpipe.compare.mapping import om_output_origins

    info = atc.load_om_json(out / f"{MODEL_STEM}.json")
    origins = om_output_origins(json.loads((out / f"{MODEL_STEM}.json").read_text()))
    facts = onnx_facts(plan.data["atc"].model)
    fused_map = fused_map_from_om(info, facts.pop("node_io"), origins)
    write_json_atomic(out / FUSED_MAP, fused_map)
    facts.update(om_shapes(plan.data["atc"].shapes, facts["inputs"], info.inputs))
    facts = with_aipp(facts, plan.data["settings"].aipp)  # an AIPP input takes uint8 NHWC (aipp_om)
    record = {"backend": "ascend", "settings": settings_record(plan.data["settings"]), **extra,
              "atc_cmdline": info.atc_cmdline, "om_name": info.name, "soc_version": info.attrs.get("soc_version"),
              "opp_version": info.attrs.get("opp_version"), "model": str(plan.data["atc"].model), **facts,
              "op_lists": _atc_lists(record_soc(plan))}
    write_json_atomic(out / CONVERT_INFO, record)
    return info, fused_map, record
