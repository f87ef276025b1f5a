"""Convert an fp32 ONNX model into its emulated device model (the onnxruntime backend's `atc`).

Steps: ATC's fusion passes from the catalogue (``fusion``) fold and group the fp32 graph; the
precision policy decides each node's dtype; every tensor the device keeps in fp16 is rounded by a
``Cast(FLOAT16) -> Cast(FLOAT)`` pair (a ``Clip`` to +-65504 first in saturation mode), fp16-read
weights are pre-rounded; If/Loop/Scan bodies are rounded the same way (names unique across every
graph, an outer tensor rounded once where it lives); static AIPP is prepended. The written model
must pass onnx's checker and load in onnxruntime. Compute stays fp32, so overflow and underflow
appear exactly where fp16 would.
"""

from __future__ import annotations

import json
import re
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from ascendpipe.errors import Location, UserError, few
from ascendpipe.fsutil import atomic_path, workspace_relative, write_json_atomic, write_text_atomic
from ascendpipe.onnxgraph import name_nodes as _name_nodes
from ascendpipe.onnxgraph import subgraphs as _subgraphs
from ascendpipe.backends.ascend.board import equivalent_argv
from ascendpipe.onnxgraph import graph_input_specs
from ascendpipe.backends.onnxruntime.tune_bank import bank_runtime, sha256_file
from ascendpipe.precision import remedy
from ascendpipe.precision.chips import hf32_bits
from ascendpipe.precision.policy import CubeRules, Decision, Lists, NodeInfo, plan
from ascendpipe.precision.settings import REMEDY_NAMES, ConvertSettings

from ascendpipe.backends.onnxruntime import kernel_plan
from ascendpipe.backends.onnxruntime.keepable import UNCOUNTED_OPS, keep_changes, keep_moot_in_kernel
from ascendpipe.backends.onnxruntime.kernel_lowering import LowerContext
from ascendpipe.backends.onnxruntime.rounding import (EMU, Rounding, _apply_rounding, _float_tensors, default_opset,
                                                       not_rounded)
MODEL_FILE = "model.onnx"
@dataclass
class ConvertResult:
    model_path: Path
    out_dir: Path
    counts: dict[str, int]
    remedy_files: dict[str, Path]
    atc_argv: list[str]
    fusion: dict[str, Any]
    plan: dict[str, Decision] = field(default_factory=dict)
    warnings: list[str] = field(default_factory=list)  # lines for the stage log / terminal


def _apply_aipp(graph, settings: ConvertSettings) -> list[str]:
    from onnx import TensorProto, helper

    from ascendpipe.backends.onnxruntime import aipp_geometry
    from ascendpipe.precision import aipp

    internal: list[str] = []
    inputs = [i for i in graph.input if i.name not in {init.name for init in graph.initializer}]
    for block in settings.aipp:
        rank = block.get("related_input_rank", 0)
        if not isinstance(rank, int) or not 0 <= rank < len(inputs):
            raise UserError(f"related_input_rank {rank} is not a model input (0..{len(inputs) - 1})",
                            aipp.where(block, "related_input_rank", settings.aipp_file))
        vi = inputs[rank]
        dims = [d.dim_value if d.HasField("dim_value") else d.dim_param for d in vi.type.tensor_type.shape.dim]
        if len(dims) != 4 or not all(isinstance(d, int) and d > 0 for d in dims[1:]):
            raise UserError(f"AIPP needs a static NCHW input; '{vi.name}' has shape {dims}", aipp.where(block, "aipp_mode", settings.aipp_file))
        aipp.check_soc(block, settings.soc_version, settings.aipp_file)
        spec = aipp.aipp_spec(block, tuple(dims[1:]), settings.aipp_file)
        out = f"{aipp.PREFIX}/{vi.name}/out"
        for node in graph.node:
            for i, t in enumerate(node.input):
                if t == vi.name:
                    node.input[i] = out
        for o in graph.output:
            if o.name == vi.name:
                raise UserError(f"AIPP input '{vi.name}' is also a model output",
                                aipp.where(block, "related_input_rank", settings.aipp_file))
        nodes, inits = aipp_geometry.aipp_nodes(spec, vi.name, out)  # crop, CSC, resize, normalise, pad
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
            raise UserError(f"input_shape names '{name}', which is not a model input; inputs: {few(names)}",
                            Location(field="input_shape"))


def _fix_input_shapes(graph, shapes: dict[str, list]) -> None:
    """ATC builds a dynamic model at the ``--input_shape`` it is given: the emulated model takes that
    shape too, so random inputs and feeds follow it (a dim given as -1 stays dynamic; 0 is pinned: an empty
    past of a KV cache)."""
    for vi in graph.input:
        dims = shapes.get(vi.name)
        if dims is None:
            continue
        model_dims = vi.type.tensor_type.shape.dim
        where = Location(field="input_shape")
        if len(dims) != len(model_dims):
            raise UserError(f"input_shape gives '{vi.name}' {len(dims)} dims; the model's input has {len(model_dims)}", where)
        for axis, (dim, value) in enumerate(zip(model_dims, dims)):
            if not isinstance(value, int) or value < 0:
                continue
            if dim.HasField("dim_value") and dim.dim_value != value:
                raise UserError(f"input_shape gives '{vi.name}' axis {axis} = {value}; the model fixes it at "
                                f"{dim.dim_value}", where)
            dim.dim_value = value


def _write_json(path: Path, data: Any) -> None:
    write_json_atomic(path, data, sort_keys=True)


def _node_infos(graph, floats: set[str], originals: dict[str, list[str]], orig_types: dict[str, str],
                kernels: dict[str, str] | None = None, keep_from: dict | None = None) -> list[NodeInfo]:
    """``kernels``: node name -> the GE kernel type ATC runs it as (the lists' key; op_lists.py). ``keep_from``:
    fused op -> (node, op_type) whose keep_dtype it inherits besides its originals (the pattern's matched input
    node: onnx_passes.KernelFusion.keep_from)."""
    init_names = {i.name for i in graph.initializer}
    infos = []
    for n in graph.node:
        fused = [(o, orig_types.get(o, "")) for o in originals.get(n.name, []) if o != n.name]
        extra = [pair for pair in (keep_from or {}).get(n.name, []) if pair[0] not in dict(fused)]
        infos.append(NodeInfo(n.name, n.op_type, any(t in floats for t in n.output),
                              tuple(t for t in n.input if t and t not in init_names), tuple(n.output),
                              tuple(fused + extra), (kernels or {}).get(n.name, "")))
    return infos


def _body_nodes(graph, prefix: str = ""):
    """(node, body path) of every node inside an If/Loop/Scan body, at any depth, in graph order."""
    for node in graph.node:
        for attr_name, sub in _subgraphs(node):
            path = f"{prefix}{node.name}/{attr_name}"
            for inner in sub.node:
                yield inner, path
            yield from _body_nodes(sub, f"{path}/")


def _plan_bodies(graph, decisions: dict[str, Decision], floats: set[str], policy: str, op_lists: Lists,
                 cube: CubeRules, outer: dict[str, str] | None = None,
                 kernels: dict[str, str] | None = None) -> list[NodeInfo]:
    """Decide every body's nodes (added to ``decisions``): a body reads the enclosing graphs'
    tensors with the dtype their producers have. Returns the bodies' node infos."""
    known = dict(outer or {})
    known.update({t: decisions[n.name].dtype for n in graph.node for t in n.output if n.name in decisions})
    infos: list[NodeInfo] = []
    for node in graph.node:
        for _, sub in _subgraphs(node):
            sub_infos = _node_infos(sub, floats, {}, {}, kernels)
            body_inputs = tuple(i.name for i in sub.input if i.name in floats)
            decisions.update(plan(sub_infos, policy, op_lists, body_inputs, outer=known, cube=cube))
            infos += sub_infos
            infos += _plan_bodies(sub, decisions, floats, policy, op_lists, cube, known, kernels)
    return infos


def convert_model(model_path: Path, out_dir: Path, settings: ConvertSettings, *,
                  workspace: Path | None = None, allow_custom_ops: bool = False,
                  link_weights: bool = False, shape_params: dict | None = None,
                  examples: dict | None = None) -> ConvertResult:
    """Write the emulated device model and its records to ``out_dir``. Paths under ``workspace``
    are recorded relative to it, so the outputs do not depend on where the workspace lives.
    ``allow_custom_ops``: emulate ops ATC cannot convert (outside ai.onnx) instead of refusing them.
    ``link_weights``: the source is a file of ours (a stage's output, never written in place), so a
    weights file the converted model references unrounded may be a hard link to it, not a copy.
    ``shape_params`` (the stage's input_shape and gear options) and ``examples`` (the shapes an export
    stage feeds it): what the recorded atc line's --input_shape is made of (``ascend.board``)."""
    import onnx

    from ascendpipe import onnxexternal
    from ascendpipe.backends.onnxruntime import fusion

    model_path, out_dir = Path(model_path), Path(out_dir)
    onnxexternal.check_model(model_path)  # every external reference, strictly, before a byte is read or written
    fusion.check_rules(settings.fusion_switch)
    try:
        original, model, external = _read_source(model_path)
    except UserError:
        raise
    except Exception as exc:
        raise UserError(f"cannot read ONNX model: {exc}", Location(file=str(model_path))) from None
    out_dir.mkdir(parents=True, exist_ok=True)
    _name_nodes(original.graph)  # (named as the refusal and the plan name them; naming again changes nothing)
    _refuse_custom_ops(original, allow_custom_ops)  # before anything is written
    _check_input_shape(settings, original)
    source_sha = sha256_file(model_path)  # a tune bank names the model it belongs to (docs/profile-tune.md)
    runtime = bank_runtime(settings.tune_bank, out_dir, model_path, source_sha)  # another model's: refused
    _fix_input_shapes(model.graph, settings.input_shape)
    _name_nodes(original.graph)
    _name_nodes(model.graph)
    graph = model.graph
    dynamic = fusion.dynamic_shape(original, settings.input_shape, getattr(settings, "input_shape_range", None))
    shapes = fusion.static_shapes(model)  # before the fusions: onnx infers no op it does not know at this opset
    non_tensor: dict[str, str] = {}
    floats = _float_tensors(model, non_tensor)
    fusion_plan = fusion.apply(model, settings.fusion_switch, settings.soc_version, dynamic, shapes)
    floats |= {i.name for i in graph.initializer if i.data_type == onnx.TensorProto.FLOAT}  # folds' weights
    mapping = fusion.fused_map(fusion_plan, list(original.graph.node), list(graph.node))
    orig_types = {n.name: n.op_type for n in original.graph.node}
    floats, untyped = _custom_op_floats(model, floats) if allow_custom_ops else (floats, {})
    # an op making a sequence of floats computes in the policy's dtype (its float inputs rounded
    # where it reads fp16), though its sequence output takes no Cast pair (floats holds tensors only)
    float_like = floats | {name for name, kind in non_tensor.items() if "tensor(float)" in kind}
    init_names = {i.name for i in graph.initializer}
    from ascendpipe.backends.onnxruntime import op_lists as soc_op_lists

    soc_lists, remedies, kernels = soc_op_lists.resolve(settings, model, original, fusion_plan.originals,
                                                        default_opset(original))
    op_lists = remedies.lists
    infos = _node_infos(graph, float_like, fusion_plan.originals, orig_types, kernels, fusion_plan.keep_from)
    body_nodes = list(_body_nodes(graph))
    graph_inputs = tuple(i.name for i in graph.input if i.name in floats and i.name not in init_names)
    cube = settings.cube_rules()  # what an fp32 cube op reads on this SoC (HF32 on Atlas A2/A3)
    decisions = plan(infos, settings.policy, op_lists, graph_inputs, cube=cube)
    body_infos = _plan_bodies(graph, decisions, float_like, settings.policy, op_lists, cube, kernels=kernels)
    opset = default_opset(model)
    consts = fusion.graph_view(model, shapes).consts
    impl_modes = settings.impl_modes()
    specs = kernel_plan.plan_kernels(graph, decisions, consts, opset, settings.soc_version, impl_modes, shapes, dynamic)
    producer = {t: {"op_name": n.name, "op_type": specs[n.name][0] if n.op_type in kernel_plan.FUSED_KERNEL_OPS
                    and n.name in specs else n.op_type} for n in graph.node for t in n.output if t}
    node_type = {n.name: n.op_type for n in graph.node}
    for group in fusion_plan.ub_groups:  # the fused op's outputs carry its name, as in the device's dump
        for t in group.outputs:
            producer[t] = {"op_name": group.name, "op_type": node_type[group.name]}
    rounding = _rounding(settings, opset, model_path.parent if external else None)
    lower_ctx = LowerContext(rounding, opset, shapes, consts)
    internal = _apply_rounding(graph, decisions, floats, rounding, kernels=kernel_plan.lowered(specs),
                               lower_ctx=lower_ctx)
    if internal and not any(o.domain in ("", "ai.onnx") for o in model.opset_import):
        model.opset_import.append(onnx.helper.make_opsetid("", opset))  # the Casts' domain (an all-ai.onnx.ml model)
    internal += [t for group in fusion_plan.ub_groups for t in group.internal]
    internal += _apply_aipp(graph, settings)
    fusion_info = fusion_plan.record(settings.fusion_switch, settings.soc_version)
    from ascendpipe.precision.atc_passes import not_modelled

    unmodelled = not_modelled(settings.fusion_switch)
    meta = {"format": 1, "internal_tensors": internal, "tensor_producer": producer, "source_sha256": source_sha}
    entry = model.metadata_props.add()
    entry.key, entry.value = "ascendpipe.emulation", json.dumps(meta)

    weights, expected = _write_weights(model, out_dir, model_path, rounding, link_weights) if external else (None, [])
    with atomic_path(out_dir / MODEL_FILE) as tmp:
        saved = _save_model(model, tmp)
        if saved is not None:
            weights, expected = saved
        # never leave a model that does not load: the error names the op (onnx's checker knows no op
        # outside its schemas, an allowed onnxruntime op in the default domain included: onnxruntime's load decides)
        check_loads(tmp, producer, check_schemas=not (allow_custom_ops and _off_schema_default(original)))
        if expected:  # and never one whose weights are not the bytes meant for them
            from ascendpipe.backends.onnxruntime.external_weights import verify

            verify(Path(tmp), out_dir, expected, rounding, str(model_path))

    custom = custom_domain_ops([*((n.name, n.op_type, n.domain) for n in graph.node),
                                *((n.name, n.op_type, n.domain) for n, _ in body_nodes)], model_opsets(original))
    body_of = {n.name: path for n, path in body_nodes}
    plan_nodes = {}
    for info in (*infos, *body_infos):
        entry = {"op_type": info.op_type, "ge_type": info.kernel_type,
                 "dtype": decisions[info.name].dtype, "reason": decisions[info.name].reason,
                 "reads_fp16": decisions[info.name].reads_fp16,
                 "keepable": keep_changes(info, decisions[info.name], settings.policy, op_lists, cube)}
        moot = keep_moot_in_kernel(specs.get(info.name), decisions[info.name], settings.soc_version, dynamic)
        if entry["keepable"] and moot:  # the plan would change, the kernel's values would not
            entry["keepable"], entry["keep_changes_nothing"] = False, moot
        if decisions[info.name].read_as:  # 'bfloat16' / 'hf32': the format its float inputs are rounded to
            entry["reads"] = decisions[info.name].read_as
        if info.name in specs:  # the op as ATC compiles it, and what its kernel computes in
            ge, kern = specs[info.name]
            entry["ge_type"] = ge
            entry["kernel"] = {**kern.record(), "emulated": "step by step" if info.name in kernel_plan.lowered(specs)
                               and info.name not in lower_ctx.notes else "boundary"}
            if info.name in lower_ctx.notes:
                entry["kernel"]["not_emulated"] = lower_ctx.notes[info.name]
        if info.name in body_of:
            entry["subgraph"] = body_of[info.name]  # 'IF_NODE/then_branch': where the body sits
        plan_nodes[info.name] = entry
    counts = count_dtypes(plan_nodes)
    _write_json(out_dir / "precision_plan.json", {
        "format": "ascendpipe-precision-plan/1", "precision_mode": settings.precision_mode,
        "precision_mode_v2": settings.precision_mode_v2,
        "nodes": plan_nodes,
        "counts": counts,  # ops by dtype over every graph, Constant/Identity left out
        "custom_domain_ops": custom,
        # sequence/optional/map values an fp16 op makes: no Cast pair can take them (see rounding.py)
        "not_rounded": {**not_rounded(non_tensor, decisions,
                                      {**{t: {"op_name": n.name} for n, _ in body_nodes for t in n.output}, **producer}),
                        **_untyped_entries(untyped)},
        "overflow_mode": settings.effective_overflow_mode,
        "op_lists": soc_lists.record,  # where the mixed-precision lists came from (precision/lists.py)
        "fusion_switch_not_modelled": unmodelled,  # switched ATC passes the emulation does not fuse
        "remedy_names": remedies.translated,  # ONNX-only type names in remedies -> the GE names written for atc
        # UB-fused kernels: each member keeps its own dtype, so the intermediates are held as their producers hold them
        "ub_fusion": {g.name: {"pass": g.pass_name, "members": g.members,
                               "intermediates": _ub_intermediates(g, decisions)}
                      for g in fusion_plan.ub_groups},
        # canndev's ONNX graph passes: each fused op, the chain it replaced, and the chains left unfused (why)
        "graph_fusion": {name: {"pass": f.pass_name, "ge_type": f.kind, "members": f.members, "case": f.case,
                                "attrs": f.attrs} for name, f in fusion_plan.kernels.items()},
        "impl_modes": impl_modes.record(),
    })
    _write_json(out_dir / "fused_map.json", {"format": "ascendpipe-fused-map/1", **mapping})  # "rules": ATC passes
    remedy_paths = {}
    for name, text in settings.remedy_files(soc_lists).items():
        remedy_paths[name] = write_text_atomic(out_dir / REMEDY_NAMES[name], text)
    # the atc line the board takes: --input_shape for every open dim, or gears (ascend/board.py)
    argv, board_lines, atc_shapes = equivalent_argv(settings, str(model_path), "model",
                                                    graph_input_specs(original.graph), shape_params, examples=examples)
    record = {**settings.record(), "atc_argv": argv, "atc_shapes": atc_shapes, "fusion": fusion_info,
              "runtime": runtime, "custom_domain_ops": custom, "op_lists": soc_lists.record}
    if remedies.translated:
        record["remedy_names"] = remedies.translated
    if weights is not None:
        record["external_data"] = weights  # where the weights were written or placed
    if custom:
        record["allow_custom_ops"] = allow_custom_ops  # emulated although ATC cannot convert them
    if workspace is not None:
        argv, record = workspace_relative(argv, workspace), workspace_relative(record, workspace)
    _write_json(out_dir / "convert.json", record)
    warnings = settings.warnings() + remedies.warnings + ([custom_domain_warning(custom)] if custom else [])
    warnings += [f"warning: {note}" for note in impl_modes.notes]
    if unmodelled:
        warnings.append(f"warning: fusion_switch names ATC pass(es) the emulation does not model: "
                        f"{', '.join(unmodelled)}; atc gets the switch, the emulated model is as without it "
                        "(precision_plan.json fusion_switch_not_modelled)")
    warnings += board_lines
    if untyped:
        warnings.append(f"warning: {len(untyped)} output(s) of ops outside ai.onnx left unrounded, their type "
                        f"unknown here: {', '.join(sorted(untyped)[:5])}{' ...' if len(untyped) > 5 else ''} "
                        f"(precision_plan.json not_rounded)")
    return ConvertResult(out_dir / MODEL_FILE, out_dir, counts, remedy_paths, argv, fusion_info, decisions, warnings)


def _read_source(model_path: Path):
    """(the source graph without its weights, the model to edit, whether its weights are external).
    An external model is edited as its graph with references to its weights files (only the small
    weights inlined: ``external_weights.read``); an inline one (under 2 GB) is read whole."""
    import onnx

    from ascendpipe.backends.onnxruntime import external_weights

    original, model, external = external_weights.read(model_path)
    return original, model if external else onnx.load(str(model_path)), external


def _rounding(settings: ConvertSettings, opset: int, external_dir: Path | None) -> Rounding:
    """How rounding points are written; with external weights, fp16-read weights are rounded as they
    are streamed into the converted model's data file."""
    saturate = settings.effective_overflow_mode == "saturation"
    bits = hf32_bits(settings.soc_version)
    if external_dir is None:
        return Rounding(saturate=saturate, opset=opset, hf32_bits=bits)
    from ascendpipe.backends.onnxruntime.external_weights import ExternalRounding

    return ExternalRounding(saturate=saturate, opset=opset, hf32_bits=bits, base_dir=external_dir)


def _write_weights(model, out_dir: Path, model_path: Path, rounding, link: bool) -> tuple[dict, list]:
    """An external model's weights beside the converted one (``external_weights.write``), under the
    converted model's own name (never one the source uses)."""
    from ascendpipe.backends.onnxruntime import external_weights

    return external_weights.write(model, out_dir, model_path.parent, rounding, link=link, label=str(model_path))


# An inline model whose weights the conversion took past this (an fp16 copy of a weight also read in
# fp32, AIPP, folds) is written with its weights as external data: protobuf holds at most 2 GiB
INLINE_LIMIT = (2 << 30) - (64 << 20)


def _save_model(model, path: str) -> tuple[dict, list] | None:
    """``onnx.save``; an inline model past ``INLINE_LIMIT`` is saved with its weights in the converted
    model's own data file beside it (the record for convert.json, and each weight's digest for
    ``external_weights.verify``), never meeting protobuf's limit."""
    import hashlib

    import onnx

    from ascendpipe import onnxexternal
    from ascendpipe.backends.onnxruntime.external_weights import OWN_DATA

    inline = (t for t in onnxexternal.initializers(model) if not onnxexternal.is_external(t))
    if sum(onnxexternal.tensor_nbytes(t) for t in inline) < INLINE_LIMIT:  # from dims: reading raw_data copies it
        onnx.save(model, path)
        return None
    expected = [(t.name, "own", hashlib.sha256(t.raw_data).hexdigest(), len(t.raw_data))
                for t in onnxexternal.initializers(model)
                if not onnxexternal.is_external(t) and t.HasField("raw_data") and len(t.raw_data) >= 1024]
    (Path(path).parent / OWN_DATA).unlink(missing_ok=True)  # onnx appends to an existing data file
    onnx.save_model(model, path, save_as_external_data=True, all_tensors_to_one_file=True, location=OWN_DATA,
                    size_threshold=1024)
    record = {"data_file": OWN_DATA, "rounded": 0, "own": sum(1 for t in onnxexternal.initializers(model)
                                                              if onnxexternal.is_external(t)), "source_files": {}}
    return record, expected


def _ub_intermediates(group, decisions: dict) -> str:
    """The dtype a UB-fused kernel holds its intermediates in: its producing members' own ('mixed' when they differ)."""
    held = {decisions[m].dtype for m in group.members[:-1] if m in decisions}
    return held.pop() if len(held) == 1 else ("mixed" if held else "float32")




def count_dtypes(plan_nodes: dict[str, dict]) -> dict[str, int]:
    """Ops by dtype over every graph (bodies included), Constant/Identity left out."""
    counts = {"float16": 0, "float32": 0, "other": 0}
    for entry in plan_nodes.values():
        if entry["op_type"] not in UNCOUNTED_OPS:
            counts[entry["dtype"]] = counts.get(entry["dtype"], 0) + 1  # 'bfloat16' only where a bf16 mode is on
    return counts


def _refuse_custom_ops(model, allow: bool) -> None:
    """Ops ATC cannot convert (outside ONNX's published schemas at the model's opsets, any domain, the
    default one included; bodies included) are refused, one line naming each, unless ``allow``
    (``--allow-custom-ops``) emulates them anyway: then only those onnxruntime does not run either
    (``custom_ops.not_run``) are refused, as nothing could run them."""
    from ascendpipe.backends.ascend.atc import unconvertible_error, unconvertible_ops
    from ascendpipe.backends.onnxruntime.custom_ops import not_run, not_run_error

    graph = model.graph
    nodes = [*graph.node, *(n for n, _ in _body_nodes(graph))]
    ops = unconvertible_ops(((n.name, n.op_type, n.domain) for n in nodes), model_opsets(model))
    if ops and not allow:
        raise unconvertible_error(ops, emulated=True)
    missing = not_run(ops, model_opsets(model))
    if missing:
        raise not_run_error(missing)


def model_opsets(model) -> dict[str, int]:
    """The model's opset imports, domain -> version ('' for ai.onnx)."""
    return {("" if o.domain == "ai.onnx" else o.domain): int(o.version) for o in model.opset_import}


def _off_schema_default(model) -> bool:
    """Whether the model holds an op in the default domain outside ONNX's published schemas."""
    from ascendpipe.backends.ascend.atc import ONNX_DOMAINS, unconvertible_ops

    graph = model.graph
    nodes = [*graph.node, *(n for n, _ in _body_nodes(graph))]
    return any(op["domain"] in ONNX_DOMAINS
               for op in unconvertible_ops(((n.name, n.op_type, n.domain) for n in nodes), model_opsets(model)))


def _custom_op_floats(model, floats: set[str]) -> tuple[set[str], dict]:
    """The float tensors with custom ops' outputs typed by their schema (``custom_ops.typed_floats``)."""
    from ascendpipe.backends.onnxruntime.custom_ops import typed_floats

    return typed_floats(model, floats)


def _untyped_entries(untyped: dict[str, dict]) -> dict[str, dict]:
    """precision_plan.json's ``not_rounded`` entries for custom ops' outputs of unknown type."""
    return {name: {"type": "unknown", "op_name": op["op_name"], "domain": op["domain"],
                   "why": f"an output of {op['domain']}.{op['op_type']}, whose type is not known here (no schema, "
                          f"or one its inputs do not fix): left unrounded rather than given a float type"}
            for name, op in sorted(untyped.items())}


def custom_domain_ops(nodes, opsets: dict[str, int] | None = None) -> list[dict]:
    """Ops outside ONNX's published schemas ((name, op_type, domain) triples; ``opsets``: the model's,
    domain -> version): another domain, or an op the default domain does not define at the model's
    opset (``atc.unconvertible_ops``). ATC would refuse them:
    its ONNX parsers are registered per ``domain::version::type`` (E19010 "No parser is registered for
    Op [..., optype [pkg.onnxscript.torch_lib.common::1::Cast]]", hiascend forum thread
    0292174974303120058), and a model importing a second opset domain fails with E16005 ("only one
    [--domain_version] is allowed", CANN error reference atlaserrorcode_15_0095)."""
    from ascendpipe.backends.ascend.atc import unconvertible_ops

    return unconvertible_ops(nodes, opsets)


def custom_domain_warning(custom: list[dict[str, str]]) -> str:
    shown = ", ".join(f"{c['op_name']} ({(c['domain'] + '.') if c['domain'] else ''}{c['op_type']})"
                      for c in custom[:5])
    more = f" and {len(custom) - 5} more" if len(custom) > 5 else ""
    return (f"warning: {len(custom)} op(s) outside ONNX's published schemas emulated (allow_custom_ops): "
            f"{shown}{more}; "
            "emulated with onnxruntime's kernels, but ATC would reject them (E19010 no parser / E16005 a second "
            "opset domain): export them as standard ONNX ops")


def check_loads(path: str, producer: dict | None = None, *, check_schemas: bool = True) -> None:
    """The written model passes onnx's checker and loads in onnxruntime, else a UserError naming the op.
    ``check_schemas`` False: onnx's checker is skipped (a model holding onnxruntime's own ops in the
    default domain, emulated by ``--allow-custom-ops``: onnx knows no schema for them, onnxruntime runs them)."""
    import onnx
    import onnxruntime as ort

    from ascendpipe import onnxexternal

    try:
        if check_schemas:
            onnxexternal.check_structure(onnx.load(str(path), load_external_data=False))  # its weights: our reader's
        options = ort.SessionOptions()
        options.graph_optimization_level = ort.GraphOptimizationLevel.ORT_DISABLE_ALL  # load checks, no work
        options.log_severity_level = 3
        # a load check packs no weights: packing copies every MatMul weight (a 2.4 GB model: 10.5 s and
        # 2.6 GB against 0.6 s and 54 MB, its weights mapped from the file and never touched)
        options.add_session_config_entry("session.disable_prepacking", "1")
        ort.InferenceSession(path, options, providers=["CPUExecutionProvider"])
    except Exception as exc:
        text = " ".join(str(exc).split()).replace(str(path), "the emulated model")
        text = re.sub(r"Load model from \S+ failed:\s*", "", text)
        op = _failing_op(text)
        made = re.match(rf"{EMU}/(?:in|out|sat32)_(?:fp16|fp32|sat|nan|nan0|bf16|hf32)\w*/(.*)$", op or "")
        if made:  # a rounding Cast of ours: name the model's op whose tensor it rounds
            tensor = made.group(1).rsplit("/", 1)[-1]
            source = (producer or {}).get(tensor, {}).get("op_name")
            text = f"the fp16 rounding of tensor '{tensor}'" + (f" (made by op '{source}')" if source else "") + f": {text}"
            op = source or op
        raise UserError(f"the emulated model does not load: {text[:300]}", Location(op=op)) from None


def _failing_op(text: str) -> str | None:
    """The node an onnx checker or onnxruntime message names."""
    for pattern in (r'In Node, \("([^"]*)"', r"Name: ([^\s]+) OpType", r"node (?:name )?'?([^\s':]+)'? of type",
                    r"in node \(([^)]*)\)", r"Node \(([^)]*)\) Op"):
        found = re.search(pattern, text)
        if found:
            return found.group(1)
    return None
