"""The emulation's rounding points: which tensors are float (the only ones a Cast pair may take),
and the nodes written where the device holds a tensor in a reduced format, in the main graph and every
If/Loop/Scan body: ``Cast(FLOAT16) -> Cast(FLOAT)`` for fp16, ``Cast(BFLOAT16) -> Cast(FLOAT)`` for
bf16, and for HF32 (an fp32 cube input on Atlas A2/A3) the arithmetic of ``formats.round_mantissa``.
In saturation mode each point maps NaN to 0 and clips to the format's largest finite first, and an
fp32 op's float outputs saturate too (``ascendpipe_emu/sat32_*``). Split from ``convert`` (which
plans, fuses and writes the model).

Sequence, optional and map values are never rounded (a Cast takes tensors only): their float
elements are fp16 values where an fp16 op made them from rounded tensors, and ``non_tensor_values``
lists them for precision_plan.json.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from ascendpipe.errors import Location, UserError
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

    from ascendpipe.onnxgraph import value_type_text

    for vi in (*graph.input, *graph.value_info, *graph.output):
        if vi.type.tensor_type.elem_type:
            typed[vi.name] = vi.type.tensor_type.elem_type == TensorProto.FLOAT
        elif vi.type.WhichOneof("value") in ("sequence_type", "optional_type", "map_type", "sparse_tensor_type"):
            typed[vi.name] = False  # not a tensor: a Cast cannot take it (its float elements: see NON_TENSOR_OPS)
            non_tensor[vi.name] = value_type_text(vi.type)
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


FORMAT_TAG = {"float16": "fp16", "bfloat16": "bf16", "hf32": "hf32"}


@dataclass
class Rounding:
    """How a rounding point is written, per format: fp16 and bf16 by a Cast pair (bf16 below opset 13,
    whose Cast has no bf16, by the arithmetic of ``formats.round_mantissa``), HF32 by that arithmetic
    (ONNX has no bit cast). ``saturate`` (saturation mode): NaN becomes 0 and the value is clipped to
    the format's largest finite first; ``saturate_nodes`` does the same for an fp32 op's output."""

    saturate: bool = False
    opset: int = 17
    hf32_bits: int = 11
    clipped: bool = False  # a saturating Clip was written somewhere: the main graph gets its bounds
    constants: dict = field(default_factory=dict)  # initializer name -> value, written to the main graph

    def _const(self, name: str, value: float) -> str:
        full = f"{EMU}/{name}"
        self.constants[full] = value
        return full

    def _saturation(self, src: str, tensor: str, tag: str, fmt: str, nodes: list, internal: list,
                    dst: str | None = None) -> str:
        """NaN -> 0, then a Clip to +-the format's max: the device's saturation mode."""
        from onnx import helper

        from ascendpipe.precision.formats import format_max

        top = format_max(fmt, self.hf32_bits if fmt == "hf32" else None)
        key = "" if fmt == "float16" else f"_{FORMAT_TAG.get(fmt, 'fp32')}"
        if self.opset >= 9:
            isnan, zeroed = f"{EMU}/isnan{key}/{tensor}", f"{EMU}/nan0{key}/{tensor}"
            nodes += [helper.make_node("IsNaN", [src], [isnan], name=f"{EMU}/{tag}_nan{key}/{tensor}"),
                      helper.make_node("Where", [isnan, self._const("zero", 0.0), src], [zeroed],
                                       name=f"{EMU}/{tag}_nan0{key}/{tensor}")]
            internal += [isnan, zeroed]
            src = zeroed
        clipped = dst or f"{EMU}/sat{key}/{tensor}"
        if self.opset >= 11:
            if fmt == "float16":
                bounds = [f"{EMU}/sat_min", f"{EMU}/sat_max"]
                self.clipped = True
            else:
                bounds = [self._const(f"sat_min{key}", -top), self._const(f"sat_max{key}", top)]
            nodes.append(helper.make_node("Clip", [src, *bounds], [clipped], name=f"{EMU}/{tag}_sat{key}/{tensor}"))
        else:
            nodes.append(helper.make_node("Clip", [src], [clipped], name=f"{EMU}/{tag}_sat{key}/{tensor}",
                                          min=-top, max=top))
        if dst is None:
            internal.append(clipped)
        return clipped

    def nodes(self, src: str, dst: str, tensor: str, tag: str, fmt: str = "float16"):
        """Nodes that write ``src`` rounded to ``fmt`` as ``dst``; (nodes, new internal tensors).
        ``tensor`` carries the body's scope in a subgraph, so every name is unique in the model."""
        from onnx import TensorProto, helper

        nodes, internal = [], []
        if self.saturate:
            src = self._saturation(src, tensor, tag, fmt, nodes, internal)
        if fmt == "float16" or (fmt == "bfloat16" and self.opset >= 13):
            to, short = (TensorProto.FLOAT16, "fp16") if fmt == "float16" else (TensorProto.BFLOAT16, "bf16")
            half = f"{EMU}/{short}/{tensor}"
            internal.insert(0, half)
            nodes += [
                helper.make_node("Cast", [src], [half], name=f"{EMU}/{tag}_{short}/{tensor}", to=to),
                helper.make_node("Cast", [half], [dst], name=f"{EMU}/{tag}_fp32{'' if fmt == 'float16' else '_bf16'}/{tensor}",
                                 to=TensorProto.FLOAT),
            ]
            return nodes, internal
        from ascendpipe.precision.formats import mantissa_bits

        made, more = self._mantissa_nodes(src, dst, tensor, tag, FORMAT_TAG[fmt], mantissa_bits(fmt, self.hf32_bits))
        return nodes + made, internal + more

    def _mantissa_nodes(self, x: str, dst: str, tensor: str, tag: str, short: str, bits: int):
        """``formats.round_mantissa`` as ONNX nodes (nearest even to ``bits`` mantissa bits)."""
        from onnx import helper

        from ascendpipe.precision import formats as f

        c = self._const
        nodes, internal = [], []

        def op(kind: str, inputs: list[str], step: str, out: str | None = None) -> str:
            out = out or f"{EMU}/{short}_{step}/{tensor}"
            nodes.append(helper.make_node(kind, inputs, [out], name=f"{EMU}/{tag}_{short}_{step}/{tensor}"))
            if out != dst:
                internal.append(out)
            return out

        if self.opset < 8:  # Min/Max broadcast from opset 8
            raise UserError(f"rounding to {short} needs opset 8 or later (this model imports opset {self.opset})",
                            Location(op=tensor))
        one, zero = c("one", 1.0), c("zero", 0.0)
        # rounded as |x| (inf as float32's max, which rounds up to inf; NaN passes through Min, Max and the
        # arithmetic), the sign put back by a factor of +-1 (keeps -0); no Where: opset 8 has none
        a = op("Min", [op("Abs", [x], "abs"), c("fp32_max", f.FP32_MAX)], "absc")
        big = op("Cast", [op("Greater", [a, c("ufp_big", f.UFP_BIG)], "gt")], "big")
        nodes[-1].attribute.append(helper.make_attribute("to", 1))  # FLOAT
        small = op("Sub", [one, big], "small")
        down = op("Add", [small, op("Mul", [big, c("ufp_down", f.UFP_DOWN)], "bd")], "down")
        up = op("Add", [small, op("Mul", [big, c("ufp_up", f.UFP_UP)], "bu")], "up")
        xs = op("Mul", [a, down], "xs")
        q = op("Mul", [xs, c("ufp_phi", f.UFP_PHI)], "q")
        ufp = op("Abs", [op("Sub", [q, op("Mul", [q, c("ufp_1mu", f.UFP_ONE_MINUS_U)], "qu")], "d")], "ufp")
        ufp = op("Max", [ufp, c("fp32_min_normal", f.FP32_MIN_NORMAL)], "ufpn")
        magic = op("Mul", [ufp, c(f"magic_{bits}", f.magic_factor(bits))], "c")
        r = op("Mul", [op("Sub", [op("Add", [xs, magic], "add"), magic], "sub"), up], "r")
        # x's sign, -0 and -inf included (1 / -0 is -inf, x < 0 for -inf)
        negative = op("Or", [op("Less", [x, zero], "lt0"), op("Less", [op("Div", [one, x], "inv"), zero], "inv0")], "neg")
        negative = op("Cast", [negative], "negf")
        nodes[-1].attribute.append(helper.make_attribute("to", 1))
        sign = op("Sub", [one, op("Mul", [negative, c("two", 2.0)], "neg2")], "sign")
        op("Mul", [r, sign], "out", dst)
        return nodes, internal

    def saturate_nodes(self, src: str, dst: str, tensor: str):
        """Saturation mode on an fp32 op's output: NaN -> 0, +-inf -> +-float32's max."""
        nodes, internal = [], []
        self._saturation(src, tensor, "sat32", "float32", nodes, internal, dst)
        return nodes, internal

    def weight(self, tensor, name: str, fmt: str = "float16"):
        """The initializer ``tensor`` rounded to ``fmt`` (``values``) as a new TensorProto named ``name``
        (external weights: ``external_weights.ExternalRounding`` rounds fp16 ones as it writes them)."""
        from onnx import numpy_helper

        return numpy_helper.from_array(self.values(numpy_helper.to_array(tensor), fmt), name)

    def values(self, array, fmt: str = "float16"):
        """A weight as the device reads it in ``fmt``: an fp16 weight is converted on the host at compile
        time, in every overflow mode (``precision.fp16.host_fp16``: GE's fp16_t, +-65504 past 131072)."""
        from ascendpipe.precision.formats import round_to, saturate

        if fmt == "float16":
            from ascendpipe.precision.fp16 import host_fp16

            return host_fp16(array)
        if self.saturate:
            array = saturate(array, fmt, self.hf32_bits)
        return round_to(array, fmt, self.hf32_bits)

    def write_constants(self, graph) -> list:
        """The bounds and constants the rounding nodes read, once, in the main graph (bodies see them):
        fp16's saturation bounds as initializers; the others as Constant nodes (returned, to go first),
        which a model of IR version < 4 (initializers must be inputs there) takes as well."""
        import numpy as np
        from onnx import helper, numpy_helper

        names = {i.name for i in graph.initializer} | {t for n in graph.node for t in n.output}
        if self.clipped:
            for name, value in ((f"{EMU}/sat_min", -FP16_MAX), (f"{EMU}/sat_max", FP16_MAX)):
                if name not in names:
                    graph.initializer.append(numpy_helper.from_array(np.array(value, np.float32), name))
        return [helper.make_node("Constant", [], [name], name=f"{EMU}/const/{name}",
                                 value=numpy_helper.from_array(np.array(value, np.float32), name))
                for name, value in self.constants.items() if name not in names]


@dataclass
class Scope:
    """Where a graph sits: ``prefix`` names its internal tensors uniquely ('' for the main graph);
    ``held``: tensors of the enclosing graphs that already hold reduced values ((tensor, format)
    pairs); ``hoist``: asks the enclosing graph for a rounded copy of one of its tensors (rounded
    once, before the subgraph op)."""

    prefix: str = ""
    held: frozenset = frozenset()
    hoist: Any = None


def _local_names(graph) -> set[str]:
    return ({i.name for i in graph.input} | {i.name for i in graph.initializer}
            | {t for n in graph.node for t in n.output})


def _outer_reads(graph, decisions: dict[str, Decision]) -> list[tuple[str, str | None]]:
    """(tensor, the format it is read as, or None) for every read of a name that ``graph`` (and its
    bodies) do not define."""
    local = _local_names(graph)
    reads = []
    for node in graph.node:
        reads += [(t, decisions[node.name].reads) for t in node.input if t and t not in local]
        for _, sub in _subgraphs(node):
            reads += [(t, fp16) for t, fp16 in _outer_reads(sub, decisions) if t not in local]
    return reads


def _apply_rounding(graph, decisions: dict[str, Decision], floats: set[str], rounding: Rounding,
                    force=frozenset(), scope: Scope | None = None, kernels: dict | None = None,
                    lower_ctx=None) -> list[str]:
    """Rewrite ``graph`` and its If/Loop/Scan bodies in place; return the internal tensor names added.

    ``floats``: float tensors of every graph; ``force``: tensors rounded where they are made whatever
    their producer's dtype: a set (fp16) or a mapping tensor -> format. In saturation mode an fp32 op's
    float outputs saturate too. ``kernels``: main-graph node -> ``precision.kernels.Kernel`` of the ops
    computed step by step (``kernel_lowering``, with ``lower_ctx``); the rest are rounded at their
    boundary only."""
    from ascendpipe.precision.policy import CONTROL_FLOW_OPS

    scope = scope or Scope()
    force = force if isinstance(force, dict) else {t: "float16" for t in force}
    inits = {i.name: i for i in graph.initializer}
    # a Constant node's value is a weight too: an fp16 reader gets it converted on the host (Rounding.values)
    const_values = {n.output[0]: a.t for n in graph.node if n.op_type == "Constant" and n.output
                    for a in n.attribute if a.name == "value" and a.t.data_type == 1}
    local = _local_names(graph)
    # tensor -> the format it already holds (made by a bf16/fp16 op, or a forced kernel intermediate)
    produced = {t: decisions[n.name].dtype for n in graph.node if decisions[n.name].dtype in FORMAT_TAG
                for t in n.output}
    produced.update(force)
    held = dict(scope.held)
    readers: dict[str, list] = {}
    for node in graph.node:
        for i, t in enumerate(node.input):
            reads = decisions[node.name].reads
            readers.setdefault(t, []).append(None if reads == "hf32" and i >= 2 else reads)
        for _, sub in _subgraphs(node):  # a body's reads of this graph's weights count too
            for t, fmt in _outer_reads(sub, decisions):
                readers.setdefault(t, []).append(fmt)
    internal: list[str] = []
    rounded_inputs: dict[tuple[str, str], str] = {}
    new_nodes = []
    pending: list = []  # rounding nodes a body asked for, written before the subgraph op

    def low_copy(t: str, fmt: str = "float16") -> str:
        """The name of ``t`` rounded to ``fmt``, written once in this graph (or asked of the outer one)."""
        if (t, fmt) in rounded_inputs:
            return rounded_inputs[(t, fmt)]
        if t not in local and scope.hoist is not None:  # an outer tensor: round it where it lives
            rounded_inputs[(t, fmt)] = scope.hoist(t, fmt)
            return rounded_inputs[(t, fmt)]
        key = "" if fmt == "float16" else f"_{FORMAT_TAG[fmt]}"
        if t in inits or t in const_values:
            copy = f"{EMU}/fp16_init{key}/{scope.prefix}{t}"
            graph.initializer.append(rounding.weight(inits[t] if t in inits else const_values[t], copy, fmt))
            internal.append(copy)
        else:
            copy = f"{EMU}/round{key}/{scope.prefix}{t}"
            pair, half = rounding.nodes(t, copy, f"{scope.prefix}{t}", "in", fmt)
            pending.extend(pair)
            internal.extend([*half, copy])
        rounded_inputs[(t, fmt)] = copy
        return copy

    from ascendpipe.backends.onnxruntime import kernel_lowering

    for node in list(graph.node):
        decision = decisions[node.name]
        fmt = decision.reads
        spec = (kernels or {}).get(node.name) if not scope.prefix else None
        raw_inputs = kernel_lowering.RAW_WEIGHT_INPUTS.get(spec.recipe, ()) if spec is not None else ()
        original_inputs = list(node.input)
        if fmt:
            for i, t in enumerate(node.input):
                if not t or t not in floats or produced.get(t) == fmt or held.get(t) == fmt or i in raw_inputs:
                    continue
                if fmt == "hf32" and i >= 2:  # HF32 rounds what the cube reads from L0A/L0B; the bias is added in fp32
                    continue
                if t in inits and all(r == fmt for r in readers[t]):  # one format reads it: round the weight itself
                    inits[t].CopyFrom(rounding.weight(inits[t], t, fmt))
                    produced[t] = fmt
                    continue
                node.input[i] = low_copy(t, fmt)
        for attr_name, sub in _subgraphs(node):
            inner = Scope(f"{scope.prefix}{node.name}/{attr_name}/", frozenset({**held, **produced}.items()), low_copy)
            internal += _apply_rounding(sub, decisions, floats, rounding, scope=inner)
        new_nodes += pending
        pending.clear()
        at = len(new_nodes)
        new_nodes.append(node)
        # a low-precision copy/select op read rounded values: its outputs hold that format already
        exact = decision.dtype in FORMAT_TAG and node.op_type in oplists.EXACT_OPS
        # saturation mode: an fp32 op's result saturates too (inf -> float32's max, NaN -> 0)
        sat32 = (rounding.saturate and decision.dtype == "float32" and node.op_type not in oplists.EXACT_OPS
                 and node.op_type not in CONTROL_FLOW_OPS and node.op_type != "Constant")
        for i, t in enumerate(node.output):
            if not t or t not in floats or exact:
                continue
            out_fmt = force.get(t) or (decision.dtype if decision.dtype in FORMAT_TAG else None)
            if out_fmt or sat32:
                raw = f"{EMU}/raw/{scope.prefix}{t}"
                node.output[i] = raw
                if out_fmt:
                    pair, half = rounding.nodes(raw, t, f"{scope.prefix}{t}", "out", out_fmt)
                else:
                    pair, half = rounding.saturate_nodes(raw, t, f"{scope.prefix}{t}")
                new_nodes += pair
                internal += [raw, *half]
        if spec is not None:  # the kernel step by step, in place of the op (its outputs renamed above)
            done = kernel_lowering.lower(node, spec, lower_ctx, original_inputs)
            if done is not None:
                new_nodes[at:at + 1] = done[0]
                internal += done[1]
    if not scope.prefix:  # the bounds and constants live in the main graph; bodies see them
        constants = rounding.write_constants(graph)
        new_nodes = constants + new_nodes
        internal += [n.output[0] for n in constants]
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
