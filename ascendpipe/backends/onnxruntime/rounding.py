"""The fp16 emulation's rounding points: which tensors are float (the only ones a Cast pair may
take), and the ``Cast(FLOAT16) -> Cast(FLOAT)`` pairs (a ``Clip`` to +-65504 first in saturation
mode) written where the device holds a tensor in fp16, in the main graph and every If/Loop/Scan
body. Split from ``convert`` (which plans, fuses and writes the model).

Sequence, optional and map values are never rounded (a Cast takes tensors only): their float
elements are fp16 values where an fp16 op made them from rounded tensors, and ``non_tensor_values``
lists them for precision_plan.json.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from ascendpipe.onnxgraph import subgraphs as _subgraphs
from ascendpipe.precision import lists as oplists
from ascendpipe.precision.policy import Decision

EMU = "ascendpipe_emu"


SUBGRAPH_OPS = {"If", "Loop", "Scan"}
FP16_MAX = 65504.0
NON_FLOAT_OPS = {"Shape", "Size", "NonZero", "ArgMax", "ArgMin", "Equal", "Greater", "GreaterOrEqual", "Less",
                 "LessOrEqual", "Not", "And", "Or", "Xor", "IsNaN", "IsInf", "NonMaxSuppression"}
# Ops whose outputs are sequence, optional or map values, never tensors: no Cast pair goes on them
# (a Cast takes tensors only; the emulated model would not load). Their float elements are rounded
# where a tensor op makes or reads them (SequenceAt, ConcatFromSequence read them back as tensors).
NON_TENSOR_OPS = {"SequenceConstruct", "SequenceEmpty", "SequenceInsert", "SequenceErase", "SplitToSequence",
                  "SequenceMap", "Optional", "ZipMap", "CastMap", "DictVectorizer"}


def _float_tensors(model, non_tensor: dict[str, str] | None = None) -> set[str]:
    """Names of float32 tensors in the main graph and every body (inputs, initializers, inferred
    values; unknown ones by op rule). ``non_tensor`` (when given) gets each sequence, optional or map
    value's name and type (``seq(tensor(float))``)."""
    import onnx

    try:
        inferred = onnx.shape_inference.infer_shapes(model, strict_mode=False).graph
    except Exception:  # custom-domain ops can stop inference; the op rule below covers them
        inferred = model.graph
    typed: dict[str, bool] = {}
    _typed_values(inferred, typed, non_tensor if non_tensor is not None else {})
    return _floats_in(model.graph, typed, {})


def _typed_values(graph, typed: dict[str, bool], non_tensor: dict[str, str]) -> None:
    """Every value with a known element type in ``graph`` and its bodies: name -> is float32."""
    from onnx import TensorProto

    for vi in (*graph.input, *graph.value_info, *graph.output):
        if vi.type.tensor_type.elem_type:
            typed[vi.name] = vi.type.tensor_type.elem_type == TensorProto.FLOAT
        elif vi.type.WhichOneof("value") in ("sequence_type", "optional_type", "map_type", "sparse_tensor_type"):
            typed[vi.name] = False  # not a tensor: a Cast cannot take it (its float elements: see NON_TENSOR_OPS)
            non_tensor[vi.name] = type_text(vi.type)
    for node in graph.node:
        for _, sub in _subgraphs(node):
            _typed_values(sub, typed, non_tensor)


def _floats_in(graph, typed: dict[str, bool], outer: dict[str, bool]) -> set[str]:
    """Float tensors of ``graph`` and its bodies; ``typed``: inferred element types; ``outer``: what
    the enclosing graphs know (a body reads their tensors)."""
    from onnx import TensorProto

    known: dict[str, bool] = dict(outer)
    local = _local_names(graph)
    known.update({name: value for name, value in typed.items() if name in local})
    for init in graph.initializer:
        known[init.name] = init.data_type == TensorProto.FLOAT
    found: set[str] = set()
    for node in graph.node:
        guess = node.op_type not in NON_FLOAT_OPS | NON_TENSOR_OPS and any(known.get(t) for t in node.input)
        if node.op_type == "Cast":
            guess = any(a.name == "to" and a.i == TensorProto.FLOAT for a in node.attribute)
        bodies = list(_subgraphs(node))
        for _, sub in bodies:  # outputs come from the body
            found |= _floats_in(sub, typed, known)
        skip = 1 if node.op_type == "Loop" else 0  # a Loop body's first output is its condition

        def body_float(index: int) -> bool:
            """The node's output ``index`` is a float tensor in some body (If: outputs one to one;
            Loop: after the condition; Scan: any)."""
            outs = [sub.output[index + skip] for _, sub in bodies if node.op_type != "Scan" and
                    len(sub.output) > index + skip] or [o for _, sub in bodies for o in sub.output]
            return any(known.get(o.name) or o.name in found or o.type.tensor_type.elem_type == TensorProto.FLOAT
                       for o in outs)

        for index, tensor in enumerate(node.output):
            if tensor not in known:
                made = body_float(index) if bodies else guess
                known[tensor] = made and not (node.op_type == "TopK" and index == 1)
    return found | {name for name, is_float in known.items() if is_float}


@dataclass
class Rounding:
    """How a rounding point is written: ``saturate`` clips to +-65504 first (saturation mode)."""

    saturate: bool = False
    opset: int = 17
    clipped: bool = False  # a saturating Clip was written somewhere: the main graph gets its bounds

    def nodes(self, src: str, dst: str, tensor: str, tag: str):
        """Nodes that write ``src`` rounded to fp16 as ``dst``; (nodes, new internal tensors).
        ``tensor`` carries the body's scope in a subgraph, so every name is unique in the model."""
        from onnx import TensorProto, helper

        half = f"{EMU}/fp16/{tensor}"
        nodes, internal = [], [half]
        if self.saturate:
            clipped = f"{EMU}/sat/{tensor}"
            if self.opset >= 11:
                nodes.append(helper.make_node("Clip", [src, f"{EMU}/sat_min", f"{EMU}/sat_max"], [clipped],
                                              name=f"{EMU}/{tag}_sat/{tensor}"))
                self.clipped = True
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

    def weight(self, tensor, name: str):
        """The initializer ``tensor`` rounded (``values``) as a new TensorProto named ``name``
        (external weights: ``external_weights.ExternalRounding`` rounds them as it writes them)."""
        from onnx import numpy_helper

        return numpy_helper.from_array(self.values(numpy_helper.to_array(tensor)), name)

    def values(self, array):
        import numpy as np

        from ascendpipe.precision.fp16 import round_fp16

        if self.saturate:
            array = np.clip(array, -FP16_MAX, FP16_MAX)
        return round_fp16(array)


@dataclass
class Scope:
    """Where a graph sits: ``prefix`` names its internal tensors uniquely ('' for the main graph);
    ``fp16``: tensors of the enclosing graphs that already hold fp16 values; ``hoist``: asks the
    enclosing graph for an fp16 copy of one of its tensors (rounded once, before the subgraph op)."""

    prefix: str = ""
    fp16: frozenset = frozenset()
    hoist: Any = None


def _local_names(graph) -> set[str]:
    return ({i.name for i in graph.input} | {i.name for i in graph.initializer}
            | {t for n in graph.node for t in n.output})


def _outer_reads(graph, decisions: dict[str, Decision]) -> list[tuple[str, bool]]:
    """(tensor, read as fp16) for every read of a name that ``graph`` (and its bodies) do not define."""
    local = _local_names(graph)
    reads = []
    for node in graph.node:
        reads += [(t, decisions[node.name].reads_fp16) for t in node.input if t and t not in local]
        for _, sub in _subgraphs(node):
            reads += [(t, fp16) for t, fp16 in _outer_reads(sub, decisions) if t not in local]
    return reads


def _apply_rounding(graph, decisions: dict[str, Decision], floats: set[str], rounding: Rounding,
                    force: set[str] = frozenset(), scope: Scope | None = None) -> list[str]:
    """Rewrite ``graph`` and its If/Loop/Scan bodies in place; return the internal tensor names added.

    ``floats``: float tensors of every graph; ``force``: tensors rounded to fp16 where they are made
    whatever their producer's dtype (a UB fusion's intermediates in an fp16 kernel)."""
    from onnx import numpy_helper

    scope = scope or Scope()
    inits = {i.name: i for i in graph.initializer}
    local = _local_names(graph)
    produced_fp16 = {t for n in graph.node if decisions[n.name].dtype == "float16" for t in n.output} | set(force)
    readers: dict[str, list[bool]] = {}
    for node in graph.node:
        for t in node.input:
            readers.setdefault(t, []).append(decisions[node.name].reads_fp16)
        for _, sub in _subgraphs(node):  # a body's reads of this graph's weights count too
            for t, fp16 in _outer_reads(sub, decisions):
                readers.setdefault(t, []).append(fp16)
    internal: list[str] = []
    rounded_inputs: dict[str, str] = {}
    new_nodes = []
    pending: list = []  # rounding nodes a body asked for, written before the subgraph op

    def fp16_copy(t: str) -> str:
        """The name of ``t`` rounded to fp16, written once in this graph (or asked of the outer one)."""
        if t in rounded_inputs:
            return rounded_inputs[t]
        if t not in local and scope.hoist is not None:  # an outer tensor: round it where it lives
            rounded_inputs[t] = scope.hoist(t)
            return rounded_inputs[t]
        if t in inits:
            copy = f"{EMU}/fp16_init/{scope.prefix}{t}"
            graph.initializer.append(rounding.weight(inits[t], copy))
            internal.append(copy)
        else:
            copy = f"{EMU}/round/{scope.prefix}{t}"
            pair, half = rounding.nodes(t, copy, f"{scope.prefix}{t}", "in")
            pending.extend(pair)
            internal.extend([*half, copy])
        rounded_inputs[t] = copy
        return copy

    for node in list(graph.node):
        decision = decisions[node.name]
        if decision.reads_fp16:
            for i, t in enumerate(node.input):
                if not t or t not in floats or t in produced_fp16 or t in scope.fp16:
                    continue
                if t in inits and all(readers[t]):  # only fp16 readers: round the weight itself
                    inits[t].CopyFrom(rounding.weight(inits[t], t))
                    continue
                node.input[i] = fp16_copy(t)
        for attr_name, sub in _subgraphs(node):
            inner = Scope(f"{scope.prefix}{node.name}/{attr_name}/", frozenset(scope.fp16 | produced_fp16), fp16_copy)
            internal += _apply_rounding(sub, decisions, floats, rounding, scope=inner)
        new_nodes += pending
        pending.clear()
        new_nodes.append(node)
        # an fp16 copy/select op read fp16 values: its outputs are fp16 values already
        exact_fp16 = decision.dtype == "float16" and node.op_type in oplists.EXACT_OPS
        for i, t in enumerate(node.output):
            if not t or t not in floats or exact_fp16:
                continue
            if decision.dtype == "float16" or t in force:
                raw = f"{EMU}/raw/{scope.prefix}{t}"
                node.output[i] = raw
                pair, half = rounding.nodes(raw, t, f"{scope.prefix}{t}", "out")
                new_nodes += pair
                internal += [raw, *half]
    if not scope.prefix and rounding.clipped:  # the bounds live in the main graph; bodies see them
        import numpy as np

        names = {i.name for i in graph.initializer}
        for name, value in ((f"{EMU}/sat_min", -FP16_MAX), (f"{EMU}/sat_max", FP16_MAX)):
            if name not in names:
                graph.initializer.append(numpy_helper.from_array(np.array(value, np.float32), name))
    del graph.node[:]
    graph.node.extend(new_nodes)
    return internal


def default_opset(model) -> int:
    """The model's default-domain opset; for a model without one (every op ``ai.onnx.ml``), the
    ai.onnx version released with its ``ai.onnx.ml`` one (onnx's version table), so the Casts the
    emulation adds have a domain the model imports."""
    from onnx import helper

    found = next((o.version for o in model.opset_import if o.domain in ("", "ai.onnx")), None)
    if found is not None:
        return found
    ml = next((o.version for o in model.opset_import if o.domain == "ai.onnx.ml"), None)
    rows = [row for row in helper.VERSION_TABLE if row[1] <= max(model.ir_version, 3)]
    matching = [row[2] for row in rows if ml is not None and row[3] == ml]
    return max(matching) if matching else max((row[2] for row in rows), default=13)


def type_text(value_type) -> str:
    """An ONNX type as onnxruntime spells it: tensor(float), seq(tensor(float)), optional(...), map(...)."""
    from onnx import helper

    kind = value_type.WhichOneof("value")
    if kind == "tensor_type":
        return f"tensor({helper.tensor_dtype_to_string(value_type.tensor_type.elem_type).split('.')[-1].lower()})"
    if kind == "sequence_type":
        return f"seq({type_text(value_type.sequence_type.elem_type)})"
    if kind == "optional_type":
        return f"optional({type_text(value_type.optional_type.elem_type)})"
    if kind == "map_type":
        key = helper.tensor_dtype_to_string(value_type.map_type.key_type).split(".")[-1].lower()
        return f"map({key},{type_text(value_type.map_type.value_type)})"
    return kind or "unknown"


def not_rounded(non_tensor: dict[str, str], decisions: dict[str, Decision], producer: dict[str, dict]) -> dict:
    """The precision plan's ``not_rounded``: each sequence/optional/map value holding floats that an
    fp16 op makes, with why it carries no rounding point."""
    found = {}
    for name, kind in sorted(non_tensor.items()):
        made_by = producer.get(name, {}).get("op_name")
        if "float" not in kind or made_by is None or decisions.get(made_by, Decision("other", "")).dtype != "float16":
            continue
        found[name] = {"type": kind, "op_name": made_by,
                       "why": "not a tensor: a Cast pair cannot take it; its float elements are fp16 values where "
                              "the op made them from rounded tensors, and are rounded again where a tensor op reads them"}
    return found
