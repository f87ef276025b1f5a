"""Advice that knows the kernels (``precision.impl_remedy``): the impl-mode remedy where the failing op's
kernel computes in more precision under high_precision on the target's SoC, and a plain statement where
neither keep_dtype nor any impl mode changes the kernel there. Pure: rows, plan and settings in, items out.

The impl item: ``{"kind": "impl_mode", "op_types": [...], "message", "file": {"name":
"op_precision_mode.ini", "content"}, "set", "yaml"}``. Its file carries the modes already in force (the
plan's ``impl_modes``: ATC reads an op_precision_mode file instead of the op_select_implmode ini) with the
types' lines set to high_precision; the ``--set``/YAML lines name the file as written next to the
compare result (the convert param is a path). It follows the keep_dtype item (the remedy lists read
keep_dtype first); fix tries it first (fix.propose).
"""

from __future__ import annotations

from ascendpipe.compare import paste
from ascendpipe.precision import impl_remedy


def _soc(precision_plan: dict | None, settings: dict | None) -> tuple[bool, str | None]:
    """(known, soc_version): the target's SoC as its convert.json says; unknown without one (an absent
    SoC is computed as Ascend310 by the emulation, and the advice says so)."""
    soc = (settings or {}).get("soc_version") or (precision_plan or {}).get("soc_version")
    return bool(soc), soc


def _nodes_of(ops: list[str], plan_nodes: dict, fused: dict) -> list[tuple[str, dict]]:
    """(plan node name, entry) of each op of the row, a fused node standing for its original ops."""
    members = {orig: node for node, origs in fused.items() for orig in origs}
    found = {}
    for op in ops:
        node = op if op in plan_nodes else members.get(op)
        if node in plan_nodes:
            found[node] = plan_nodes[node]
    return list(found.items())


def items(row: dict, ops: list[str], precision_plan: dict | None, settings: dict | None, stage: str,
          known: set[str], fused: dict | None = None, in_range: bool = True) -> tuple[list[dict], str | None]:
    """(impl_mode items to add, the plain statement where no remedy changes the row's kernel, else None).
    ``in_range``: the row's golden output and inputs lie in fp16's range (``impl_remedy.boundary_holds``);
    else no impl item (the data crosses the kernel's boundary in fp16 under every mode)."""
    plan_nodes = (precision_plan or {}).get("nodes") or {}
    if not plan_nodes:
        return [], None
    _known, soc = _soc(precision_plan, settings)
    nodes = _nodes_of(ops, plan_nodes, fused or {})
    types, whys = [], []
    for _name, entry in nodes:
        effect = impl_remedy.node_effect(entry, soc)
        if effect is not None and effect.changes and entry.get("ge_type") not in types:
            types.append(entry.get("ge_type"))
            whys.append(f"{entry.get('ge_type')} {effect.why}")
    out = []
    if types and in_range and "op_precision_mode" in known:
        modes = (precision_plan or {}).get("impl_modes") or {}
        content = impl_remedy.ini_text(modes.get("by_type") or {}, modes.get("by_name") or {}, types)
        where = soc or "Ascend310 (no SoC given: the emulation's default)"
        out.append({
            "kind": "impl_mode",
            "op_types": types,
            "message": (f"or keep the data in fp16 and give the {', '.join(types)} kernel{'s' if len(types) > 1 else ''} "
                        f"high_precision on {where}: an op_precision_mode file with "
                        f"{', '.join(f'{t}=high_precision' for t in types)} (the modes in force kept for every other "
                        f"op type: the file replaces op_select_implmode's ini; save it as {impl_remedy.FILE_NAME} "
                        f"in the workspace); " + "; ".join(whys)),
            "file": {"name": impl_remedy.FILE_NAME, "content": content},
            "set": paste.set_line(stage, ["op_precision_mode"], impl_remedy.FILE_NAME),
            "yaml": paste.yaml_lines(stage, {"op_precision_mode": impl_remedy.FILE_NAME}),
        })
    fixed = [impl_remedy.unchangeable(entry, soc) for _name, entry in nodes]
    statement = None
    if nodes and all(fixed):
        statement = "; ".join(dict.fromkeys(fixed))
    return out, statement


def apply(failure_advice: list[dict], row: dict, ops: list[str], precision_plan: dict | None, settings: dict | None,
          stage: str, known: set[str], fused: dict | None = None, in_range: bool = True,
          rebuild_keep=None) -> list[dict]:
    """The advice with the impl_mode item after the keep_dtype one; where no keep_dtype or impl mode changes
    the failing op's kernel, the plain statement first, the op left out of every keep_dtype item
    (``rebuild_keep(item, names)``: the item for the other names, the advisor's own builder; an item left
    with no new name is dropped) and no precision_mode item (it only lets ATC keep ops in fp32)."""
    extra, statement = items(row, ops, precision_plan, settings, stage, known, fused, in_range)
    advice = list(failure_advice)
    if statement:
        fixed = set(ops)
        kept = []
        for item in advice:
            if item.get("kind") == "precision_mode":
                continue
            if item.get("kind") == "keep_dtype" and fixed & set(item.get("ops") or []):
                added = [n for n in item.get("added") or [] if n not in fixed]
                if not added or rebuild_keep is None:
                    continue
                left_out = ", ".join(repr(n) for n in item["ops"] if n in fixed)
                item = rebuild_keep({**item, "message": item["message"] + f" (without {left_out}: keeping it changes "
                                     "no value of its kernel on this SoC)"}, [n for n in item["ops"] if n not in fixed],
                                    added)
            kept.append(item)
        advice = [{"kind": "kernel", "restores": False, "message": f"op '{row['op_name']}': {statement}"}, *kept]
    at = next((i + 1 for i, item in enumerate(advice) if item.get("kind") == "keep_dtype"), len(advice))
    return advice[:at] + extra + advice[at:]
