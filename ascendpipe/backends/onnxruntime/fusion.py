"""Fusion on the onnxruntime backend: ATC's passes from the catalogue (``precision.atc_passes``).

No onnxruntime optimizer stands in for an ATC pass: some of them move fp16 rounding points the
device keeps (MatMulScaleFusion folds an attention scale into the MatMul and the overflowing scores
vanish). The graph the emulation rounds is the original one with only the catalogued passes applied:

0. kernel fusions (``kernel``: canndev's ONNX graph passes, ``precision.onnx_passes``) replace an
   ONNX chain by one op named as ATC names it (``<last Add>/LayerNorm``, ``<last Mul>/Gelu``), written
   as an ONNX ``LayerNormalization`` / ``Gelu`` node that kernel_lowering.py always expands;
1. graph folds (``fold``) rewrite the graph: BN and bias folded into the cube op in fp32;
2. UB fusions (``ub``) keep their nodes; they name the fused op and hide its intermediates from
   the dump. They change no value: each member keeps its own dtype (see ``atc_passes``).

onnxruntime's own optimisations run later, when a session loads the emulated model: the cast pairs
at every rounding point separate the ops, so they cannot move a rounding point.
``fusion_switch`` names are ATC pass names (``ALL`` too; a per-pass entry wins over ALL, as on ATC).
"""

from __future__ import annotations

from dataclasses import dataclass, field

from ascendpipe.errors import Location, UserError, few
from ascendpipe.precision import atc_passes

EMU = "ascendpipe_emu"


def check_rules(switches: dict[str, str], where: Location | None = None) -> None:
    from ascendpipe.precision import pass_names

    unknown = sorted(rule for rule in switches if rule != "ALL" and not atc_passes.is_known(rule))
    if unknown:
        # typos only: a loose match would offer a pass of another meaning (MatMulScaleFusion ~ MatMulBiasAdd...)
        close = [m for rule in unknown[:5] for m in pass_names.close_matches(rule, tuple(atc_passes.known_names()), 1)]
        hint = f" (did you mean {', '.join(repr(m) for m in close)}?)" if close else ""
        raise UserError(
            f"unknown ATC fusion pass {few(unknown, show=repr)} on the onnxruntime backend{hint}: not "
            f"one of ATC's {len(pass_names.registry())} built-in pass names (canndev, GE; precision/pass_names.py); "
            f"catalogued with their reference pages: ALL, {', '.join(atc_passes.known_names())}",
            where or Location(field="fusion_switch"),
        )
    fixed = sorted(rule for rule, value in switches.items() if value == "off" and not atc_passes.switchable(rule))
    if fixed:  # atc would silently keep it on: the emulation says so instead of pretending to switch it off
        raise UserError(atc_passes.unswitchable_message(fixed[0]), where or Location(field="fusion_switch"))


def dynamic_shape(model, input_shape: dict | None = None, input_shape_range: object = None) -> bool:
    """Whether ATC compiles ``model`` with dynamic shapes: ``input_shape`` (or the graph's own dims where
    it names no input) holds -1 or a range, or ``input_shape_range`` is given. A symbolic ONNX dim
    with no ``input_shape`` entry counts as static: atc requires ``--input_shape`` for it, and the
    pipeline gives one from what it feeds. Gears (dynamic_batch_size...) compile static shapes."""
    if input_shape_range:
        return True
    input_shape = input_shape or {}
    inits = {i.name for i in model.graph.initializer}
    for vi in model.graph.input:
        if vi.name in inits:
            continue
        dims = input_shape.get(vi.name)
        if dims is None:
            dims = [d.dim_value if d.HasField("dim_value") else None for d in vi.type.tensor_type.shape.dim]
            dims = [d for d in dims if d is not None]  # symbolic: see above
        if any(not isinstance(d, int) or isinstance(d, bool) or d < 0 for d in dims):
            return True
    return False


@dataclass
class FusionPlan:
    fused: dict[str, list[str]] = field(default_factory=dict)  # fused op -> original nodes (sorted)
    rules: dict[str, str] = field(default_factory=dict)  # fused op -> ATC pass name(s), '+'-joined
    originals: dict[str, list[str]] = field(default_factory=dict)  # node -> original nodes folded into it
    ub_groups: list = field(default_factory=list)  # atc_passes.Group of UB fusions (nodes kept)
    applied: dict[str, int] = field(default_factory=dict)  # pass -> times applied
    dynamic: bool = False  # compiled as a dynamic-shape model (static-only passes skipped)
    kernels: dict = field(default_factory=dict)  # fused op -> onnx_passes.KernelFusion (LayerNorm, Gelu)
    keep_from: dict = field(default_factory=dict)  # fused op -> [(node, op_type)] whose keep_dtype it inherits
    skipped: list = field(default_factory=list)  # onnx_passes.Skipped: chains a pass matched but left unfused

    def record(self, switches: dict[str, str], soc_version: str | None) -> dict:
        return {"passes": dict(sorted(self.applied.items())), "switches": dict(switches), "soc_version": soc_version,
                "catalogue": [p.name for p in atc_passes.CATALOGUE], "dynamic_shape": self.dynamic,
                "not_fused": [{"pass": s.pass_name, "at": s.at, "why": s.why} for s in self.skipped]}


def _ranks(model) -> dict[str, int]:
    import onnx

    try:
        inferred = onnx.shape_inference.infer_shapes(model, strict_mode=False).graph
    except Exception:  # custom ops can stop inference: then rank-dependent passes do not fire
        inferred = model.graph
    ranks = {}
    for vi in (*inferred.input, *inferred.value_info, *inferred.output):
        if vi.type.tensor_type.HasField("shape"):
            ranks[vi.name] = len(vi.type.tensor_type.shape.dim)
    for init in model.graph.initializer:
        ranks[init.name] = len(init.dims)
    return ranks


def _subgraph_reads(graph) -> set[str]:
    reads = set()
    for node in graph.node:
        for attr in node.attribute:
            for sub in (attr.g, *attr.graphs) if (attr.g.node or attr.graphs) else ():
                reads |= {t for n in sub.node for t in n.input} | _subgraph_reads(sub)
    return reads


def _consts(graph) -> dict[str, tuple[int, ...]]:
    """Constant tensors (initializers and Constant nodes' outputs) -> shape."""
    consts = {i.name: tuple(i.dims) for i in graph.initializer}
    for node in graph.node:
        if node.op_type == "Constant" and node.output:
            value = next((a.t for a in node.attribute if a.name == "value"), None)
            consts[node.output[0]] = tuple(value.dims) if value is not None else ()
    return consts


def _nodes(graph) -> list:
    return [atc_passes.Node(n.name, n.op_type, tuple(n.input), tuple(n.output)) for n in graph.node]


def apply(model, switches: dict[str, str], soc_version: str | None = None, dynamic: bool = False,
          shapes: dict | None = None) -> FusionPlan:
    """Apply the catalogued ATC passes to ``model`` (an onnx ModelProto, changed in place); ``dynamic``:
    ATC compiles it with dynamic shapes (see ``dynamic_shape``); ``shapes``: ``static_shapes(model)``
    where the caller has them."""
    check_rules(switches)
    graph = model.graph
    plan = FusionPlan(dynamic=dynamic)
    _kernel_fusions(model, plan, soc_version, shapes, switches)
    consts = _consts(graph)
    outputs = {o.name for o in graph.output}
    ranks = _ranks(model)
    folds = atc_passes.match(_nodes(graph), consts, outputs, switches, soc_version, ranks, effect=atc_passes.FOLD,
                             dynamic=dynamic)
    for group in folds:
        _fold(graph, group)
        anchor = group.name
        plan.originals[anchor] = sorted(set(plan.originals.get(anchor, [anchor])) | set(group.members))
        plan.rules[anchor] = group.pass_name
        plan.applied[group.pass_name] = plan.applied.get(group.pass_name, 0) + 1
    if folds:  # the folded BN parameters and the unfolded weights: nothing reads them any more
        used = {t for n in graph.node for t in n.input} | {o.name for o in graph.output}
        used |= _subgraph_reads(graph)
        keep = [i for i in graph.initializer if i.name in used]
        del graph.initializer[:]
        graph.initializer.extend(keep)
    consts = _consts(graph)
    ubs = atc_passes.match(_nodes(graph), consts, outputs, switches, soc_version, ranks, effect=atc_passes.UB_NAMED,
                           dynamic=dynamic)
    for group in ubs:
        plan.applied[group.pass_name] = plan.applied.get(group.pass_name, 0) + 1
        originals = sorted({o for m in group.members for o in plan.originals.get(m, [m])})
        plan.fused[group.name] = originals
        earlier = [plan.rules[m] for m in group.members if m in plan.rules]
        plan.rules[group.name] = "+".join([*earlier, group.pass_name]) if earlier else group.pass_name
        for member in group.members:
            if member != group.name:
                plan.rules.pop(member, None)
    for anchor, originals in plan.originals.items():
        if anchor not in plan.fused and len(originals) > 1:
            plan.fused[anchor] = originals
    plan.rules = {k: v for k, v in plan.rules.items() if k in plan.fused}
    plan.ub_groups = ubs
    return plan


# --- kernel fusions (canndev's ONNX graph passes) ---------------------------------------------------

def graph_view(model, shapes: dict | None = None):
    """The graph as ``precision.onnx_passes`` reads it (constant values, static shapes, outputs)."""
    from onnx import helper, numpy_helper

    from ascendpipe.onnxexternal import is_external
    from ascendpipe.precision.onnx_passes import GraphView, OpView

    from ascendpipe.backends.onnxruntime.rounding import default_opset

    graph = model.graph
    consts = {}
    for init in graph.initializer:
        if not is_external(init):
            consts[init.name] = numpy_helper.to_array(init)
    ops = []
    for node in graph.node:
        attrs = {}
        for a in node.attribute:
            if a.type in (a.INT, a.INTS, a.FLOAT, a.FLOATS, a.STRING):
                attrs[a.name] = helper.get_attribute_value(a)
            elif node.op_type == "Constant" and a.name == "value":
                consts[node.output[0]] = numpy_helper.to_array(a.t)
        ops.append(OpView(node.name, node.op_type, tuple(node.input), tuple(node.output), attrs))
    return GraphView(ops, consts, shapes if shapes is not None else static_shapes(model),
                     {o.name for o in graph.output}, default_opset(model))


def static_shapes(model) -> dict[str, tuple]:
    """tensor -> dims (an int, or None where unknown) from onnx's shape inference and the initializers."""
    import onnx

    try:
        inferred = onnx.shape_inference.infer_shapes(model, strict_mode=False).graph
    except Exception:  # custom ops can stop inference
        inferred = model.graph
    shapes = {}
    for vi in (*inferred.input, *inferred.value_info, *inferred.output):
        t = vi.type.tensor_type
        if t.HasField("shape"):
            shapes[vi.name] = tuple(d.dim_value if d.HasField("dim_value") and d.dim_value > 0 else None
                                    for d in t.shape.dim)
    for init in model.graph.initializer:
        shapes[init.name] = tuple(init.dims)
    return shapes


def _kernel_fusions(model, plan: FusionPlan, soc_version: str | None, shapes: dict | None = None,
                    switches: dict[str, str] | None = None) -> None:
    """Replace each chain canndev's ONNX passes fuse by one node named as ATC names the fused op, unless the
    fusion switch turns its pass off (GE honours a switch on any registered pass: precision/atc_passes.py);
    a chain left unfused runs op by op."""
    from onnx import helper, numpy_helper

    from ascendpipe.precision import onnx_passes

    graph = model.graph
    fusions, plan.skipped = onnx_passes.find(graph_view(model, shapes), soc_version)
    fusions = [f for f in fusions if atc_passes.enabled(f.pass_name, switches or {})]
    if not fusions:
        return
    by_name = {n.name: n for n in graph.node}
    types = {n.name: n.op_type for n in graph.node}
    for fusion in fusions:
        last = max(list(graph.node).index(by_name[m]) for m in fusion.members)
        if fusion.kind == "LayerNorm":
            fused = helper.make_node("LayerNormalization", fusion.inputs, [fusion.output], name=fusion.name,
                                     axis=fusion.attrs["begin_norm_axis"], epsilon=fusion.attrs["epsilon"])
        else:
            fused = helper.make_node("Gelu", fusion.inputs, [fusion.output], name=fusion.name, approximate="tanh")
        graph.node.insert(last + 1, fused)
        for member in fusion.members:
            graph.node.remove(by_name[member])
        for name, value in fusion.new_consts.items():
            graph.initializer.append(numpy_helper.from_array(value, name))
        plan.kernels[fusion.name] = fusion
        plan.originals[fusion.name] = sorted(fusion.members)
        plan.rules[fusion.name] = fusion.pass_name
        plan.keep_from[fusion.name] = [(n, types.get(n, "")) for n in fusion.keep_from]
        plan.applied[fusion.pass_name] = plan.applied.get(fusion.pass_name, 0) + 1
    used = {t for n in graph.node for t in n.input} | {o.name for o in graph.output} | _subgraph_reads(graph)
    keep = [i for i in graph.initializer if i.name in used]
    del graph.initializer[:]
    graph.initializer.extend(keep)


# --- graph folds (compile-time, fp32) -------------------------------------------------------------

def _fold(graph, group) -> None:
    import numpy as np
    from onnx import helper, numpy_helper

    by_name = {n.name: n for n in graph.node}
    inits = {i.name: i for i in graph.initializer}
    inits.update({n.output[0]: a.t for n in graph.node if n.op_type == "Constant" for a in n.attribute if a.name == "value"})
    anchor, rest = by_name[group.members[0]], [by_name[m] for m in group.members[1:]]
    arr = lambda name: numpy_helper.to_array(inits[name]).astype(np.float64)

    def add_init(suffix: str, value) -> str:
        name = f"{EMU}/fold/{anchor.name}/{suffix}"
        graph.initializer.append(numpy_helper.from_array(np.asarray(value, np.float32), name))
        return name

    if group.pass_name == "ConvBatchnormFusionPass":
        bn = rest[0]
        eps = next((a.f for a in bn.attribute if a.name == "epsilon"), 1e-5)
        scale, beta, mean, var = (arr(t) for t in bn.input[1:5])
        factor = scale / np.sqrt(var + eps)
        weight = arr(anchor.input[1])
        bias = arr(anchor.input[2]) if len(anchor.input) > 2 and anchor.input[2] else np.zeros(weight.shape[0])
        new_w = weight * factor.reshape(-1, *([1] * (weight.ndim - 1)))
        new_b = (bias - mean) * factor + beta
        inputs = [anchor.input[0], add_init("W", new_w), add_init("B", new_b)]
        del anchor.input[:]
        anchor.input.extend(inputs)
    elif group.pass_name == "AABiasaddConvFusion":
        add = rest[0]
        const = next(t for t in add.input if t in inits)
        weight_out = inits[anchor.input[1]].dims[0]
        bias = arr(anchor.input[2]) if len(anchor.input) > 2 and anchor.input[2] else np.zeros(weight_out)
        inputs = [anchor.input[0], anchor.input[1], add_init("B", bias + np.broadcast_to(arr(const).reshape(-1), bias.shape))]
        del anchor.input[:]
        anchor.input.extend(inputs)
    elif group.pass_name == "MatMulBiasAddFusionPass":
        add = rest[0]
        const = next(t for t in add.input if t in inits)
        gemm = helper.make_node("Gemm", [anchor.input[0], anchor.input[1], const], list(anchor.output), name=anchor.name)
        anchor.CopyFrom(gemm)
    last = rest[-1]
    del anchor.output[:]
    anchor.output.extend(last.output)
    for node in rest:
        graph.node.remove(node)


def fused_map(plan: FusionPlan, original_nodes: list, final_nodes: list) -> dict:
    """fused_map.json's content: fused op -> originals, surviving tensors, fused op -> ATC pass."""
    original_tensors = {t for n in original_nodes for t in (*n.input, *n.output)}
    live = {t for n in final_nodes for t in (*n.input, *n.output)}
    hidden = {t for g in plan.ub_groups for t in g.internal}
    tensors = {t: t for t in sorted((live & original_tensors) - hidden) if t}
    return {"fused": dict(sorted(plan.fused.items())), "tensors": tensors, "rules": dict(sorted(plan.rules.items()))}
