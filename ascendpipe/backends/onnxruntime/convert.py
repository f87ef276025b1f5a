"""Convert an fp32 ONNX model into its emulated device model (the onnxruntime backend's `atc`).

Steps: ATC's fusion passes from the catalogue (``fusion``) fold and group the fp32 graph; the
precision policy decides each node's dtype; every tensor the device keeps in fp16 is rounded by a
``Cast(FLOAT16) -> Cast(FLOAT)`` pair (a ``Clip`` to +-65504 first in saturation mode), fp16-read
weights are pre-rounded; If/Loop/Scan bodies are rounded the same way; static AIPP is prepended.
Compute stays fp32, so overflow and underflow appear exactly where fp16 would.
"""

from __future__ import annotations

import json
import shutil
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from ascendpipe.errors import Location, UserError
from ascendpipe.fsutil import atomic_path, workspace_relative, write_json_atomic, write_text_atomic
from ascendpipe.precision import lists as oplists
from ascendpipe.precision import remedy
from ascendpipe.precision.policy import Decision, Lists, NodeInfo, plan
from ascendpipe.precision.settings import REMEDY_NAMES, ConvertSettings

EMU = "ascendpipe_emu"
MODEL_FILE = "model.onnx"
SUBGRAPH_OPS = {"If", "Loop", "Scan"}
FP16_MAX = 65504.0
NON_FLOAT_OPS = {"Shape", "Size", "NonZero", "ArgMax", "ArgMin", "Equal", "Greater", "GreaterOrEqual", "Less",
                 "LessOrEqual", "Not", "And", "Or", "Xor", "IsNaN", "IsInf", "NonMaxSuppression"}


@dataclass
class ConvertResult:
    model_path: Path
    out_dir: Path
    counts: dict[str, int]
    remedy_files: dict[str, Path]
    atc_argv: list[str]
    fusion: dict[str, Any]
    plan: dict[str, Decision] = field(default_factory=dict)


def _float_tensors(model) -> set[str]:
    """Names of float32 tensors (inputs, initializers, inferred values; unknown ones by op rule)."""
    import onnx
    from onnx import TensorProto

    try:
        inferred = onnx.shape_inference.infer_shapes(model, strict_mode=False).graph
    except Exception:  # custom-domain ops can stop inference; the op rule below covers them
        inferred = model.graph
    return _floats_in(model.graph, inferred, {})


def _floats_in(graph, inferred, outer: dict[str, bool]) -> set[str]:
    """Float tensors of ``graph`` (``inferred``: the same graph with inferred value_info);
    ``outer``: what the enclosing graphs know (a subgraph reads their tensors)."""
    from onnx import TensorProto

    known: dict[str, bool] = dict(outer)
    for vi in (*inferred.input, *inferred.value_info, *inferred.output):
        if vi.type.tensor_type.elem_type:
            known[vi.name] = vi.type.tensor_type.elem_type == TensorProto.FLOAT
    for init in graph.initializer:
        known[init.name] = init.data_type == TensorProto.FLOAT
    for node in graph.node:
        guess = node.op_type not in NON_FLOAT_OPS and any(known.get(t) for t in node.input)
        if node.op_type == "Cast":
            guess = any(a.name == "to" and a.i == TensorProto.FLOAT for a in node.attribute)
        if node.op_type in SUBGRAPH_OPS:  # outputs come from the body
            guess = any(vi.type.tensor_type.elem_type == TensorProto.FLOAT
                        for a in node.attribute if a.g.name or a.g.node for vi in a.g.output)
        for index, tensor in enumerate(node.output):
            if tensor not in known:
                known[tensor] = guess and not (node.op_type == "TopK" and index == 1)
    return {name for name, is_float in known.items() if is_float}


def _lists(settings: ConvertSettings, names: set[str], types: set[str]) -> Lists:
    white, black = set(oplists.WHITE_LIST), set(oplists.BLACK_LIST)
    sources: dict[str, str] = {}
    for key, edits in (settings.modify_mixlist or {}).items():
        for action, entries in edits.items():
            for entry in entries:
                for op_type in oplists.onnx_types(entry):
                    target = {"white-list": white, "black-list": black}.get(key)  # gray = in neither
                    if action == "to-add":  # an op sits in one list: adding moves it
                        white.discard(op_type), black.discard(op_type)
                        if target is not None:
                            target.add(op_type)
                    elif target is not None:
                        target.discard(op_type)
                    sources[op_type] = "modify_mixlist"
    keep_names, keep_types = remedy.split_keep_entries(settings.keep_dtype)
    where = Location(field="keep_dtype")
    for name in keep_names:
        if name not in names:
            near = ", ".join(sorted(names)[:12])
            raise UserError(f"keep_dtype names op '{name}', which is not in the model; ops: {near}...", where)
    onnx_keep_types = {t for entry in keep_types for t in oplists.onnx_types(entry)}
    for entry in keep_types:
        if not set(oplists.onnx_types(entry)) & types:
            raise UserError(f"keep_dtype 'OpType::{entry}' matches no op; op types here: {', '.join(sorted(types))}", where)
    return Lists(frozenset(white), frozenset(black), frozenset(keep_names), frozenset(onnx_keep_types), sources)


@dataclass
class Rounding:
    """How a rounding point is written: ``saturate`` clips to +-65504 first (saturation mode)."""

    saturate: bool = False
    opset: int = 17

    def nodes(self, src: str, dst: str, tensor: str, tag: str):
        """Nodes that write ``src`` rounded to fp16 as ``dst``; (nodes, new internal tensors)."""
        from onnx import TensorProto, helper

        half = f"{EMU}/fp16/{tensor}"
        nodes, internal = [], [half]
        if self.saturate:
            clipped = f"{EMU}/sat/{tensor}"
            if self.opset >= 11:
                nodes.append(helper.make_node("Clip", [src, f"{EMU}/sat_min", f"{EMU}/sat_max"], [clipped],
                                              name=f"{EMU}/{tag}_sat/{tensor}"))
            else:
                nodes.append(helper.make_node("Clip", [src], [clipped], name=f"{EMU}/{tag}_sat/{tensor}",
                                              min=-FP16_MAX, max=FP16_MAX))
            src = clipped
            internal.append(clipped)
        nodes += [
            helper.make_node("Cast", [src], [half], name=f"{EMU}/{tag}_fp16/{tensor}", to=TensorProto.FLOAT16),
            helper.make_node("Cast", [half], [dst], name=f"{EMU}/{tag}_fp32/{tensor}", to=TensorProto.FLOAT),
        ]
        return nodes, internal

    def values(self, array):
        import numpy as np

        from ascendpipe.precision.fp16 import round_fp16

        if self.saturate:
            array = np.clip(array, -FP16_MAX, FP16_MAX)
        return round_fp16(array)


def _apply_rounding(graph, decisions: dict[str, Decision], floats: set[str], rounding: Rounding,
                    force: set[str] = frozenset()) -> list[str]:
    """Rewrite ``graph`` in place; return the internal tensor names added.

    ``force``: tensors rounded to fp16 where they are made whatever their producer's dtype (a UB
    fusion's intermediates in an fp16 kernel)."""
    from onnx import numpy_helper

    round_fp16 = rounding.values
    inits = {i.name: i for i in graph.initializer}
    produced_fp16 = {t for n in graph.node if decisions[n.name].dtype == "float16" for t in n.output} | set(force)
    readers: dict[str, list[bool]] = {}
    for node in graph.node:
        for t in node.input:
            readers.setdefault(t, []).append(decisions[node.name].reads_fp16)
    internal: list[str] = []
    rounded_inputs: dict[str, str] = {}
    new_nodes = []
    for node in list(graph.node):
        decision = decisions[node.name]
        if decision.reads_fp16:
            for i, t in enumerate(node.input):
                if not t or t not in floats or t in produced_fp16:
                    continue
                if t in inits:
                    if all(readers[t]):  # only fp16 readers: round the weight itself
                        inits[t].CopyFrom(numpy_helper.from_array(round_fp16(numpy_helper.to_array(inits[t])), t))
                        continue
                    if t not in rounded_inputs:
                        copy = f"{EMU}/fp16_init/{t}"
                        graph.initializer.append(numpy_helper.from_array(round_fp16(numpy_helper.to_array(inits[t])), copy))
                        rounded_inputs[t] = copy
                        internal.append(copy)
                elif t not in rounded_inputs:
                    rounded = f"{EMU}/round/{t}"
                    pair, half = rounding.nodes(t, rounded, t, "in")
                    new_nodes += pair
                    internal += [*half, rounded]
                    rounded_inputs[t] = rounded
                node.input[i] = rounded_inputs[t]
        new_nodes.append(node)
        # an fp16 copy/select op read fp16 values: its outputs are fp16 values already
        exact_fp16 = decision.dtype == "float16" and node.op_type in oplists.EXACT_OPS
        for i, t in enumerate(node.output):
            if not t or t not in floats or exact_fp16:
                continue
            if decision.dtype == "float16" or t in force:
                raw = f"{EMU}/raw/{t}"
                node.output[i] = raw
                pair, half = rounding.nodes(raw, t, t, "out")
                new_nodes += pair
                internal += [raw, *half]
    if rounding.saturate and any(n.op_type == "Clip" and n.name.startswith(EMU) for n in new_nodes) and rounding.opset >= 11:
        names = {i.name for i in graph.initializer}
        for name, value in ((f"{EMU}/sat_min", -FP16_MAX), (f"{EMU}/sat_max", FP16_MAX)):
            if name not in names:
                import numpy as np

                graph.initializer.append(numpy_helper.from_array(np.array(value, np.float32), name))
    del graph.node[:]
    graph.node.extend(new_nodes)
    return internal


def _apply_aipp(graph, settings: ConvertSettings) -> list[str]:
    from onnx import TensorProto, helper

    from ascendpipe.precision import aipp

    internal: list[str] = []
    inputs = [i for i in graph.input if i.name not in {init.name for init in graph.initializer}]
    for block in settings.aipp:
        rank = block.get("related_input_rank", 0)
        if not isinstance(rank, int) or not 0 <= rank < len(inputs):
            raise UserError(f"related_input_rank {rank} is not a model input (0..{len(inputs) - 1})",
                            Location(file=settings.aipp_file, field="aipp"))
        vi = inputs[rank]
        dims = [d.dim_value if d.HasField("dim_value") else d.dim_param for d in vi.type.tensor_type.shape.dim]
        if len(dims) != 4 or not all(isinstance(d, int) and d > 0 for d in dims[1:]):
            raise UserError(f"AIPP needs a static NCHW input; '{vi.name}' has shape {dims}", Location(file=settings.aipp_file))
        spec = aipp.aipp_spec(block, tuple(dims[1:]), settings.aipp_file)
        out = f"{aipp.PREFIX}/{vi.name}/out"
        for node in graph.node:
            for i, t in enumerate(node.input):
                if t == vi.name:
                    node.input[i] = out
        for o in graph.output:
            if o.name == vi.name:
                raise UserError(f"AIPP input '{vi.name}' is also a model output", Location(file=settings.aipp_file))
        nodes, inits = aipp.build_nodes(spec, vi.name, out)
        for n in reversed(nodes):
            graph.node.insert(0, n)
        graph.initializer.extend(inits)
        internal += [t for n in nodes for t in n.output]
        new_vi = helper.make_tensor_value_info(
            vi.name, TensorProto.UINT8, [dims[0], spec.src_hw[0], spec.src_hw[1], aipp.input_channels(spec)])
        vi.CopyFrom(new_vi)
    return internal


def _check_input_shape(settings: ConvertSettings, model) -> None:
    names = [i.name for i in model.graph.input]
    for name in settings.input_shape:
        if name not in names:
            raise UserError(f"input_shape names '{name}', which is not a model input; inputs: {', '.join(names)}",
                            Location(field="input_shape"))


def _write_json(path: Path, data: Any) -> None:
    write_json_atomic(path, data, sort_keys=True)


def _tune_runtime(settings: ConvertSettings, out_dir: Path) -> dict | None:
    if not settings.tune_bank:
        return None
    where = Location(file=settings.tune_bank, field="tune_bank")
    try:
        bank = json.loads(Path(settings.tune_bank).read_text())
    except OSError as exc:
        raise UserError(f"cannot read tune bank: {exc.strerror}", where) from None
    except json.JSONDecodeError as exc:
        raise UserError(f"tune bank is not JSON: {exc.msg} (line {exc.lineno})", where) from None
    if not isinstance(bank, dict):
        raise UserError("tune bank must be a JSON object at the top level", where)
    session = bank.get("session", {})
    if not isinstance(session, dict):
        raise UserError("tune bank 'session' must be an object", where)
    # the contract (docs/contracts.md): {"session": {...}}, what session.read_runtime reads
    _write_json(out_dir / "runtime.json", {"session": session, "tune_bank": str(settings.tune_bank)})
    return session


def _node_infos(graph, floats: set[str], originals: dict[str, list[str]], orig_types: dict[str, str]) -> list[NodeInfo]:
    init_names = {i.name for i in graph.initializer}
    return [
        NodeInfo(n.name, n.op_type, any(t in floats for t in n.output),
                 tuple(t for t in n.input if t and t not in init_names), tuple(n.output),
                 tuple((o, orig_types.get(o, "")) for o in originals.get(n.name, []) if o != n.name))
        for n in graph.node
    ]


def _name_nodes(graph, prefix: str = "") -> None:
    for index, node in enumerate(graph.node):
        if not node.name:
            node.name = f"{prefix}{node.op_type}_{index}"
        for attr in node.attribute:
            for sub in (attr.g, *attr.graphs) if (attr.g.node or attr.graphs) else ():
                _name_nodes(sub, f"{node.name}/{attr.name}/")


def _subgraph_names(graph) -> tuple[set[str], set[str]]:
    """(node names, op types) inside every If/Loop/Scan body, at any depth."""
    names, types = set(), set()
    for node in graph.node:
        for attr in node.attribute:
            for sub in (attr.g, *attr.graphs) if (attr.g.node or attr.graphs) else ():
                names |= {n.name for n in sub.node}
                types |= {n.op_type for n in sub.node}
                deeper = _subgraph_names(sub)
                names |= deeper[0]
                types |= deeper[1]
    return names, types


def _round_subgraphs(graph, floats: set[str], policy: str, op_lists: Lists, rounding: Rounding) -> None:
    """Round every If/Loop/Scan body like the main graph (the body reads the outer graph's tensors)."""
    outer = {t: True for t in floats}
    for node in graph.node:
        for attr in node.attribute:
            for sub in (attr.g, *attr.graphs) if (attr.g.node or attr.graphs) else ():
                sub_floats = _floats_in(sub, sub, outer)
                infos = _node_infos(sub, sub_floats, {}, {})
                decisions = plan(infos, policy, op_lists, ())
                _round_subgraphs(sub, sub_floats, policy, op_lists, rounding)
                _apply_rounding(sub, decisions, sub_floats, rounding)


def _kernel_fp16(groups, infos: list[NodeInfo], policy: str, op_lists: Lists, graph_inputs) -> set[str]:
    """Intermediates of UB-fused kernels that the mode puts in fp16 (keep_dtype does not reach them)."""
    if not groups:
        return set()
    by_mode = plan(infos, policy, Lists(op_lists.white, op_lists.black, sources=op_lists.sources), graph_inputs)
    force = set()
    for group in groups:
        if any(by_mode[m].dtype == "float16" for m in group.members):
            force.update(group.internal)
    return force


def convert_model(model_path: Path, out_dir: Path, settings: ConvertSettings, *,
                  workspace: Path | None = None) -> ConvertResult:
    """Write the emulated device model and its records to ``out_dir``. Paths under ``workspace``
    are recorded relative to it, so the outputs do not depend on where the workspace lives."""
    import onnx

    from ascendpipe.backends.onnxruntime import fusion

    model_path, out_dir = Path(model_path), Path(out_dir)
    out_dir.mkdir(parents=True, exist_ok=True)
    fusion.check_rules(settings.fusion_switch)
    try:
        original = onnx.load(str(model_path), load_external_data=False)
        model = onnx.load(str(model_path))
    except Exception as exc:
        raise UserError(f"cannot read ONNX model: {exc}", Location(file=str(model_path))) from None
    _check_input_shape(settings, original)
    _name_nodes(original.graph)
    _name_nodes(model.graph)
    graph = model.graph
    dynamic = fusion.dynamic_shape(original, settings.input_shape, getattr(settings, "input_shape_range", None))
    fusion_plan = fusion.apply(model, settings.fusion_switch, settings.soc_version, dynamic)
    mapping = fusion.fused_map(fusion_plan, list(original.graph.node), list(graph.node))
    orig_types = {n.name: n.op_type for n in original.graph.node}
    floats = _float_tensors(model)
    init_names = {i.name for i in graph.initializer}
    infos = _node_infos(graph, floats, fusion_plan.originals, orig_types)
    sub_names, sub_types = _subgraph_names(graph)
    names = {i.name for i in infos} | set(orig_types) | sub_names
    types = {i.op_type for i in infos} | set(orig_types.values()) | sub_types
    op_lists = _lists(settings, names, types)
    graph_inputs = tuple(i.name for i in graph.input if i.name in floats and i.name not in init_names)
    decisions = plan(infos, settings.policy, op_lists, graph_inputs)
    force = _kernel_fp16(fusion_plan.ub_groups, infos, settings.policy, op_lists, graph_inputs) & floats
    producer = {t: {"op_name": n.name, "op_type": n.op_type} for n in graph.node for t in n.output if t}
    node_type = {n.name: n.op_type for n in graph.node}
    for group in fusion_plan.ub_groups:  # the fused op's outputs carry its name, as in the device's dump
        for t in group.outputs:
            producer[t] = {"op_name": group.name, "op_type": node_type[group.name]}
    opset = next((o.version for o in model.opset_import if o.domain in ("", "ai.onnx")), 17)
    rounding = Rounding(saturate=settings.effective_overflow_mode == "saturation", opset=opset)
    _round_subgraphs(graph, floats, settings.policy, op_lists, rounding)
    internal = _apply_rounding(graph, decisions, floats, rounding, force)
    internal += [t for group in fusion_plan.ub_groups for t in group.internal]
    internal += _apply_aipp(graph, settings)
    fusion_info = fusion_plan.record(settings.fusion_switch, settings.soc_version)
    meta = {"format": 1, "internal_tensors": internal, "tensor_producer": producer}
    entry = model.metadata_props.add()
    entry.key, entry.value = "ascendpipe.emulation", json.dumps(meta)

    with atomic_path(out_dir / MODEL_FILE) as tmp:
        onnx.save(model, tmp)

    _write_json(out_dir / "precision_plan.json", {
        "format": "ascendpipe-precision-plan/1", "precision_mode": settings.precision_mode,
        "precision_mode_v2": settings.precision_mode_v2,
        "nodes": {i.name: {"op_type": i.op_type, "dtype": decisions[i.name].dtype, "reason": decisions[i.name].reason}
                  for i in infos},
        "overflow_mode": settings.effective_overflow_mode,
        # UB-fused kernels: where their intermediates are rounded (float16 also under keep_dtype)
        "ub_fusion": {g.name: {"pass": g.pass_name, "members": g.members,
                               "intermediates": "float16" if set(g.internal) & force else "float32"}
                      for g in fusion_plan.ub_groups},
    })
    _write_json(out_dir / "fused_map.json", {"format": "ascendpipe-fused-map/1", **mapping})  # "rules": ATC passes
    remedy_paths = {}
    for name, text in settings.remedy_files().items():
        remedy_paths[name] = write_text_atomic(out_dir / REMEDY_NAMES[name], text)
    argv = settings.atc_argv(str(model_path), "model")
    runtime = _tune_runtime(settings, out_dir)
    record = {**settings.record(), "atc_argv": argv, "fusion": fusion_info, "runtime": runtime}
    if workspace is not None:
        argv, record = workspace_relative(argv, workspace), workspace_relative(record, workspace)
    _write_json(out_dir / "convert.json", record)
    counts = {d: sum(1 for x in decisions.values() if x.dtype == d) for d in ("float16", "float32", "other")}
    return ConvertResult(out_dir / MODEL_FILE, out_dir, counts, remedy_paths, argv, fusion_info, decisions)
