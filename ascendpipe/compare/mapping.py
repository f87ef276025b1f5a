"""Pairing golden and target tensors: by name, through fused_map.json, or through the OM JSON.

Pure: takes parsed dump index entries (``index.json["tensors"]``) and maps, returns pairs. Tensors on
only one side are kept as one-sided pairs (msit shows an NPU-only op as ``GroundTruth="*"``).
Graph inputs (op_type "Input") are not ops and are not paired.
"""

from __future__ import annotations

from dataclasses import dataclass, field

ORIGINAL_NAMES_ATTR = "_datadump_original_op_names"
# per output (the op's output_desc[k].attr): the original op and which of its outputs this one is
ORIGIN_NAME_ATTR = "_datadump_origin_name"
ORIGIN_INDEX_ATTR = "_datadump_origin_output_index"


@dataclass
class Pair:
    golden: dict | None  # golden index entry, or None for a target-only tensor
    target: dict | None  # target index entry, or None for a golden-only tensor
    golden_ops: list[str] = field(default_factory=list)  # original ops the row stands for
    fused: bool = False  # the target op is a fusion of several original ops
    note: str = ""

    @property
    def side(self) -> str:
        if self.golden and self.target:
            return "both"
        return "golden_only" if self.golden else "target_only"


def _is_input(entry: dict) -> bool:
    return entry.get("op_type") == "Input"


def _output_positions(entries: list[dict]) -> list[int]:
    """Which output of its op each tensor is, by order in the index."""
    seen: dict[str, int] = {}
    positions = []
    for e in entries:
        op = e.get("op_name", e["name"])
        positions.append(seen.get(op, 0))
        seen[op] = positions[-1] + 1
    return positions


def pair_tensors(
    golden: list[dict],
    target: list[dict],
    *,
    tensor_map: dict[str, str] | None = None,
    op_map: dict[str, list[str]] | None = None,
    origins: dict[tuple[str, int], tuple[str, int] | None] | None = None,
) -> list[Pair]:
    """Pair every tensor. ``tensor_map``: target tensor -> original tensor (fused_map.json "tensors").
    ``op_map``: target op -> original ops (fused_map.json "fused", or ``om_original_op_names``).
    ``origins``: (OM op, output k) -> (original op, output index) from the OM JSON (``om_output_origins``);
    where it does not describe an output, a device dump entry's own ``origin`` (the runtime's
    ``original_op``) stands in.

    A target tensor pairs with the golden tensor of the same (mapped) name; failing that, an OM op's
    output pairs as msaccucmp pairs it, through its origin (none when the OM gives it none); an op
    the OM JSON does not describe (an emulated fused op) pairs its k-th output with the k-th output of
    the last of its original ops in golden order (the op whose output the fusion produces)."""
    tensor_map, op_map, origins = tensor_map or {}, op_map or {}, origins or {}
    golden = [e for e in golden if not _is_input(e)]
    target = [e for e in target if not _is_input(e)]
    by_name = {e["name"]: e for e in golden}
    by_op: dict[str, list[dict]] = {}
    for e in golden:
        by_op.setdefault(e.get("op_name", e["name"]), []).append(e)
    used: set[str] = set()
    fused_into = {orig: t_op for t_op, origs in op_map.items() if len(origs) > 1 for orig in origs}
    pairs: list[Pair] = []
    for entry, position in zip(target, _output_positions(target)):
        op = entry.get("op_name", entry["name"])
        originals = list(op_map.get(op) or [op])
        fused = len(originals) > 1
        match = by_name.get(tensor_map.get(entry["name"], entry["name"]))
        note = "no golden tensor for this target op"
        origin, described = origin_of(origins, op, position)
        if not described and isinstance(entry.get("origin"), list) and len(entry["origin"]) == 2:
            # a device dump's own original_op (acl_dump): the same (op, output) msaccucmp reads from the OM JSON
            origin, described = (str(entry["origin"][0]), int(entry["origin"][1])), True
        if (match is None or match["name"] in used) and described:
            outputs = by_op.get(origin[0], []) if origin else []
            match = outputs[origin[1]] if origin and origin[1] < len(outputs) else None
            if match is not None and match["name"] in used:
                match = None
            if origin is None:
                note = "the OM JSON gives this output no origin (_datadump_origin_name)"
        elif match is None or match["name"] in used:
            match = _by_original_op(originals, by_op, position, used)
        if match is not None:
            used.add(match["name"])
            pairs.append(Pair(match, entry, originals, fused))
        else:
            pairs.append(Pair(None, entry, originals, fused, note=note))
    for entry in golden:
        if entry["name"] not in used:
            op = entry.get("op_name", entry["name"])
            note = f"fused into target op '{fused_into[op]}'" if op in fused_into else "not in the target dump"
            pairs.append(Pair(entry, None, [op], False, note=note))
    return pairs


def _by_original_op(originals: list[str], by_op: dict, position: int, used: set[str]) -> dict | None:
    present = [op for op in originals if op in by_op]
    if not present:
        return None
    last = max(present, key=lambda op: by_op[op][0].get("topo_index", -1))
    outputs = by_op[last]
    if position < len(outputs) and outputs[position]["name"] not in used:
        return outputs[position]
    return None


def fused_map_parts(fused_map: dict | None) -> tuple[dict[str, str], dict[str, list[str]], dict[str, str]]:
    """(tensor_map, op_map, rules) from a parsed fused_map.json; ``rules`` (target op -> fusion rule)
    is read from an optional "rules" key."""
    if not fused_map:
        return {}, {}, {}
    return dict(fused_map.get("tensors") or {}), {k: list(v) for k, v in (fused_map.get("fused") or {}).items()}, dict(
        fused_map.get("rules") or {}
    )


def _attr_values(attr: dict) -> list[str]:
    value = attr.get("value") or {}
    if "list" in value:
        return [str(s) for s in (value["list"].get("s") or [])]
    if "s" in value:
        return [str(value["s"])]
    return []


def _om_ops(om_json: dict):
    for graph in om_json.get("graph") or []:
        yield from graph.get("op") or []


def om_original_op_names(om_json: dict) -> dict[str, list[str]]:
    """OM op -> the original ONNX ops it came from, from ``atc --mode=1`` JSON's
    ``_datadump_original_op_names`` attr. Ops without the attr map to themselves."""
    result: dict[str, list[str]] = {}
    for op in _om_ops(om_json):
        names = []
        for attr in op.get("attr") or []:
            if attr.get("key") == ORIGINAL_NAMES_ATTR:
                names = [n for n in _attr_values(attr) if n]
        result[op["name"]] = names or [op["name"]]
    return result


def _attr_list(items) -> list[dict]:
    return [a for a in items or [] if isinstance(a, dict)]


def _attr_scalar(items, key: str, kind: str):
    for attr in _attr_list(items):
        if attr.get("key") == key:
            value = attr.get("value") or {}
            return value.get(kind) if isinstance(value, dict) else None
    return None


def om_output_origins(om_json: dict) -> dict[tuple[str, int], tuple[str, int] | None]:
    """(OM op, output k) -> (original op, its output index), as msaccucmp maps a dump to the golden.

    The rules of mindstudio-probe 26.2's ``msaccucmp/vector_cmp/fusion_manager/fusion_rule_parser.py``:
    each ``output_desc[k].attr`` names the original op (``_datadump_origin_name``, :459) and its output
    (``_datadump_origin_output_index``, :460; k when absent, :461-462); an op without
    ``_datadump_original_op_names`` is its own origin (``_make_output_desc``, :302-309, called at :529-530);
    an op alone in renaming one original op takes that name (``_adjust_rename_node`` :417, ``_is_rename_node`` :489). An
    output whose origin stays empty has no golden tensor (``fusion_op.py`` ``get_origin_tensor``, :138-142):
    None."""
    ops = [op for op in _om_ops(om_json) if isinstance(op, dict) and op.get("name")]
    originals: dict[str, list[str] | None] = {}
    for op in ops:
        found = None
        for attr in _attr_list(op.get("attr")):
            if attr.get("key") == ORIGINAL_NAMES_ATTR:
                found = [str(n) for n in _attr_values(attr)] or [""]
        originals[op["name"]] = found
    group_size: dict[str, int] = {}  # ops sharing one "fusion op name" (msaccucmp make_fusion_op_name)
    for op in ops:
        names = originals[op["name"]]
        key = names[0] if names and len(names) == 1 and names[0] else op["name"]
        group_size[key] = group_size.get(key, 0) + 1
    result: dict[tuple[str, int], tuple[str, int] | None] = {}
    for op in ops:
        name, names = op["name"], originals[op["name"]]
        descs = [d for d in op.get("output_desc") or [] if isinstance(d, dict)]
        fallback = ""
        if names is None:
            fallback = name
        elif len(names) == 1 and names[0] and group_size.get(names[0]) == 1:
            fallback = names[0]  # a renamed op
        if not descs:  # no output_desc: every output k is the origin's output k (key ANY_OUTPUT)
            result[(name, ANY_OUTPUT)] = (fallback, ANY_OUTPUT) if fallback else None
        for k, desc in enumerate(descs):
            origin = str(_attr_scalar(desc.get("attr"), ORIGIN_NAME_ATTR, "s") or "") or fallback
            index = _attr_scalar(desc.get("attr"), ORIGIN_INDEX_ATTR, "i")
            result[(name, k)] = (origin, int(index) if index is not None else k) if origin else None
    return result


ANY_OUTPUT = -1


def origin_of(origins: dict, op: str, k: int) -> tuple[tuple[str, int] | None, bool]:
    """(origin of output k of ``op`` or None, whether the OM JSON describes that output at all)."""
    if (op, k) in origins:
        return origins[(op, k)], True
    if (op, ANY_OUTPUT) in origins:
        origin = origins[(op, ANY_OUTPUT)]
        return ((origin[0], k) if origin else None), True
    return None, False


def om_fusion_passes(om_json: dict) -> dict[str, str]:
    """OM op -> the fusion pass that made it (``pass_name`` list, else ``pass_name_ub``)."""
    result: dict[str, str] = {}
    for op in _om_ops(om_json):
        passes: list[str] = []
        for attr in op.get("attr") or []:
            if attr.get("key") in ("pass_name", "pass_name_ub"):
                passes += _attr_values(attr)
        if passes:
            result[op["name"]] = passes[0]
    return result


# --- quantized (fake-quant / QDQ) models -----------------------------------------------------------

QDQ_OP_TYPES = ("QuantizeLinear", "DequantizeLinear", "AscendQuant", "AscendDequant", "AscendAntiQuant",
                "AscendDequantS16", "AscendRequant", "AscendRequantS16")


def qdq_map(nodes, original_tensors: set[str] | None = None) -> dict:
    """How a fake-quant model's quantize/dequantize nodes map back to the original ops.

    ``nodes``: the quantized graph's nodes in order (objects with name, op_type, input, output).
    ``original_tensors``: the fp32 model's node outputs. Returns
    ``{"qdq_nodes": {node: the op it serves}, "quantized_layers": [op, ...], "internal_tensors": [...],
    "tensor_producer": {tensor: {"op_name", "op_type"}}}``: a Q/DQ node serves the first original op
    its chain feeds (else, at a graph output, the op that produced the chain's input); its outputs are
    internal (not dumped, not compared) unless one carries an original tensor's name, which then stands
    for the op whose value it dequantizes. A quantized layer is an original op reading a quantized value."""
    nodes = list(nodes)
    original_tensors = set(original_tensors or ())
    is_qdq = {n.name: n.op_type in QDQ_OP_TYPES for n in nodes}
    producer = {out: n for n in nodes for out in n.output if out}
    consumers: dict[str, list] = {}
    for n in nodes:
        for t in n.input:
            consumers.setdefault(t, []).append(n)

    def downstream_op(node, seen=()):
        for out in node.output:
            for c in consumers.get(out, []):
                if not is_qdq[c.name]:
                    return c
                if c.name not in seen:
                    found = downstream_op(c, (*seen, node.name))
                    if found is not None:
                        return found
        return None

    def upstream_op(node, seen=()):
        for t in node.input:
            p = producer.get(t)
            if p is None:
                continue
            if not is_qdq[p.name]:
                return p
            if p.name not in seen:
                found = upstream_op(p, (*seen, node.name))
                if found is not None:
                    return found
        return None

    served, internal, tensor_producer = {}, [], {}
    for n in nodes:
        if not is_qdq[n.name]:
            continue
        target = downstream_op(n)
        served[n.name] = target.name if target is not None else None
        for out in n.output:
            if not out:
                continue
            if out in original_tensors:
                source = upstream_op(n) or target
                if source is not None:
                    tensor_producer[out] = {"op_name": source.name, "op_type": source.op_type}
            else:
                internal.append(out)
    def quantized_input(tensor: str) -> bool:
        """The tensor comes through Q/DQ nodes from a quantize node or a quantized initializer (a
        dequantize of a layer's accumulator, as AMCT's AscendDequant, does not make its reader int8)."""
        p = producer.get(tensor)
        if p is None or not is_qdq[p.name]:
            return False
        todo, seen = [p], set()
        while todo:
            q = todo.pop()
            if q.name in seen:
                continue
            seen.add(q.name)
            if q.op_type in ("QuantizeLinear", "AscendQuant"):
                return True
            source = producer.get(q.input[0]) if q.input else None
            if source is None:
                return True  # an initializer stored quantized (weights, bias)
            if is_qdq[source.name]:
                todo.append(source)
        return False

    layers = [n.name for n in nodes if not is_qdq[n.name] and any(quantized_input(t) for t in n.input)]
    return {"qdq_nodes": served, "quantized_layers": layers, "internal_tensors": internal,
            "tensor_producer": tensor_producer}
