"""The ATC fusion passes the emulation models, by their ATC names; which nodes each one fuses. Pure.

Every entry names the CANN "graph fusion and UB fusion rules reference" page it comes from
(``graphubfusionref``), the pattern (as ONNX op types), the SoCs it applies to and its numeric
effect in the emulation:

- ``fold``: a graph fusion that folds constants into the cube op's weights or bias at compile time,
  in fp32 (Conv+BN, Conv/MatMul + bias). The fused op is one cube op: one rounding, at its output.
- ``ub``: a UB fusion. Its members keep the dtypes the op judge gave them: ATC inserts the Casts
  between ops of different dtypes before UB fusion runs (GE ``fe_graph_optimizer.cc`` L442-474,
  L646-647, in OptimizeOriginalGraph; UB fusion in OptimizeFusedGraph, L1272-1439) and the UB pass
  runners check no dtype (``fusion/graph_optimizer/ub_fusion/*pass_runner.cc``), so each
  intermediate is rounded where its producing member's dtype says, as unfused, keep_dtype included.
  The fusion names the fused op and hides its intermediates from the dump; it changes no value.
- ``kernel``: a graph fusion that makes one kernel of an ONNX chain (the decomposed LayerNorm, the
  erf GELU: ``precision/onnx_passes.py``); the kernel computes as ``precision/kernels.py`` says.

Passes that are not here are not fused (their ops keep every rounding point): e.g. no ATC pass fuses
MatMul with a following scalar Mul (TbeFullyconnectionElemwiseDequantFusionPass: "MatMul +
ElemWise1 cannot be AddN or Mul"), so unscaled attention scores are rounded, and overflow, as on
the device.

Besides the pattern, each entry carries what its page says about switching and shapes: a pass the
reference marks "cannot be disabled" (``switchable=False``) stays on under ``ALL: off`` and an
explicit ``off`` is refused (atc ignores it: "other fusion rules cannot be switched off"); a pass
documented for static (or dynamic) shapes only (``shapes``) does not fire on the other kind of model.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field

from ascendpipe.opnode import Node

REF = "https://www.hiascend.com/document/detail/en/CANNCommunityEdition/900/maintenref/graphubfusionref/"
REF_ZH = "https://www.hiascend.com/document/detail/zh/canncommercial/900/maintenref/graphubfusionref/"
CANNDEV_PASSES = ("GitHub dengguojie/vue-element-admin@7290acc7 (canndev 2022) "
                  "ops/built-in/fusion_pass/graph_fusion/ai_core/")
# the --fusion_switch_file page: "the rules that can be switched off are listed in the graph/UB fusion
# reference; due to the system mechanism, other fusion rules cannot be switched off"
SWITCH_PAGE = "https://www.hiascend.com/document/detail/zh/canncommercial/900/devaids/atctool/atlasatcparam_16_0053.html"
GRAPH, UB = "GraphFusion", "UBFusion"
FOLD, UB_NAMED, KERNEL = "fold", "ub", "kernel"
ALL_SOCS = ("*",)
STATIC, DYNAMIC, ANY_SHAPE = "static", "dynamic", "any"

# op-type families the patterns use (ONNX op types)
CONV = frozenset({"Conv"})
MATMUL = frozenset({"MatMul"})
REDUCE = frozenset({"ReduceSum", "ReduceMean", "ReduceMax", "ReduceMin", "ReduceProd", "ReduceSumSquare",
                    "ReduceL1", "ReduceL2", "ReduceLogSum", "ReduceLogSumExp"})
ELEMWISE = frozenset({"Add", "Sub", "Mul", "Div", "Abs", "Neg", "Exp", "Log", "Sqrt", "Reciprocal", "Pow", "Relu",
                      "LeakyRelu", "Sigmoid", "Tanh", "Erf", "Clip", "Max", "Min", "Cast", "Softplus", "Elu",
                      "HardSigmoid", "Floor", "Ceil", "Round", "Sign", "Sin", "Cos"})


@dataclass(frozen=True)
class Step:
    """One link of a chain pattern: ``lo``..``hi`` consecutive nodes of these op types.

    ``extra``: what a node may read besides the chain's tensor: "const" (initializers only),
    "any" (any tensor), or "bias" (one constant broadcast along the channel / last axis)."""

    types: frozenset
    lo: int = 1
    hi: int = 1
    extra: str = "const"


@dataclass(frozen=True)
class AtcPass:
    name: str
    kind: str  # GRAPH | UB (the fusion switch file's section)
    pattern: str  # in words, ONNX op types
    effect: str  # FOLD | UB_NAMED | KERNEL
    page: str  # the reference page
    socs: tuple[str, ...] = ALL_SOCS  # SoC families it applies to (see soc_family)
    chain: tuple[Step, ...] = field(default=(), repr=False)
    anchor: int = 0  # which step's (first) node names the fused op
    note: str = ""
    switchable: bool = True  # False: the page says "cannot be disabled"
    in_reference: bool = True  # False: not in CANN's graph/UB fusion reference (canndev's source only)
    shapes: str = ANY_SHAPE  # STATIC / DYNAMIC: the page limits the pass to static (dynamic) shape models


# SoC families of a page's "Availability": 310 = Atlas 200/300/500 inference product (listed on the pages
# of CANN 8.x and older), 310P = Atlas inference product, 310B = Atlas 200I/500 A2, training = Atlas
# training product, A2 / A3 = Atlas A2 / A3 training and inference products.
_REDUCE_CHAIN = (Step(ELEMWISE, 0, 1, extra="any"), Step(REDUCE, extra="const"), Step(ELEMWISE, 0, 5, extra="const"))

CATALOGUE: tuple[AtcPass, ...] = (
    AtcPass("ConvBatchnormFusionPass", GRAPH, "Conv + BatchNormalization (constant scale/bias/mean/var) -> Conv",
            FOLD, REF + "atlasrr_30_0021.html", socs=("310", "310P", "310B", "training"),
            chain=(Step(CONV), Step(frozenset({"BatchNormalization"}))),
            note="BN folded into the conv's weights and bias in fp32 at compile time; the folded weights are "
                 "then read in fp16. Availability lists no Atlas A2/A3 product (310 from the CANN 8.2 page)"),
    AtcPass("AABiasaddConvFusion", GRAPH, "Conv without bias + Add(constant per-channel bias) -> Conv with bias",
            FOLD, REF + "atlasrr_30_0152.html", socs=("310", "310P", "310B", "training", "A2"),
            chain=(Step(CONV), Step(frozenset({"Add"}), extra="bias")), switchable=False, shapes=STATIC,
            note="the bias is added in the cube's fp32 accumulator: one rounding after the bias, none between. "
                 "The page: not when the conv already has a bias; dynamic scenarios not supported; 'this fusion "
                 "pattern cannot be disabled'"),
    AtcPass("MatMulBiasAddFusionPass", GRAPH, "MatMul (2-D output) + Add(constant 1-D bias) -> MatMul with bias",
            FOLD, REF + "atlasrr_30_0028.html", socs=("A2", "A3"),
            chain=(Step(MATMUL), Step(frozenset({"Add"}), extra="bias")),
            note="the reference: 'bias is accumulated inside matmul in FP32 after fusion' (a precision gain); "
                 "listed for Atlas A2/A3 only, so other SoCs keep the rounding after the MatMul"),
    AtcPass("TbeConv3dElemwisePass", UB, "Conv3D + Relu, Conv3D + Elemwise(second input) [+ Relu]", UB_NAMED,
            REF + "atlasrr_30_0179.html", socs=("310P", "training"), shapes=STATIC,
            chain=(Step(CONV), Step(frozenset({"Add", "Mul", "Sub", "Relu"}), 1, 2, extra="any")),
            note="each member keeps its dtype: the same rounding points as unfused"),
    AtcPass("TbeConvDoubleInFusionPass", UB, "Conv2D + Elemwise + Elemwise -> one Conv2D fused op", UB_NAMED,
            REF_ZH + "atlasrr_30_0198.html", socs=("310", "310P", "310B", "training"),
            chain=(Step(CONV), Step(ELEMWISE, extra="any"), Step(ELEMWISE, extra="any")),
            note="the page: Conv2D + Elemwise + Elemwise fused into one Conv2D op (Conv + Add + Relu); "
                 "Elemwise2 takes one input from Elemwise1; NCHW/NHWC/HWCN. Availability: Atlas inference, "
                 "200I/500 A2, training (Atlas 200/300/500 on the CANN 8.0 page), not A2/A3. Each member keeps "
                 "its dtype: the same rounding points as unfused"),
    AtcPass("TbeReduceElemwiseFusionPass", UB,
            "[one Elemwise] + one CommReduce + 0..5 single-input Elemwise (static shapes)", UB_NAMED,
            REF + "atlasrr_30_0207.html", chain=_REDUCE_CHAIN, anchor=1, shapes=STATIC,
            note="each member computes in its own dtype (keep_dtype included): the intermediates are rounded "
                 "as unfused; the fused op takes the reduce's name in the dump. The page: 'only static "
                 "scenarios are supported'"),
    AtcPass("TbeDynamicElemwiseReduceFusionPass", UB,
            "[one Elemwise] + one CommReduce + 0..5 single-input Elemwise (dynamic shapes)", UB_NAMED,
            REF_ZH + "atlasrr_30_0213.html", chain=_REDUCE_CHAIN, anchor=1, shapes=DYNAMIC,
            note="TbeReduceElemwiseFusionPass's twin for dynamic shape models ('only dynamic scenarios are "
                 "supported'), the same modes; no value changes either"),
    # canndev's ONNX graph passes (fusion_pass/graph_fusion/ai_core/, 7290acc7), matched by precision/onnx_passes.py
    # with each check of their code. None is in the CANN graph fusion reference, whose --fusion_switch_file page
    # says other rules "cannot be switched off"; GE's code honours a switch on any registered pass but its
    # ForbiddenClosedPass list (precision/pass_names.py), and Huawei's 310P3 recipes switch off passes outside the
    # reference (GroupNormFusionPass) to restore accuracy on hardware: we follow the code, so these switch off,
    # and their chains then run op by op (the side that shows an fp16 failure)
    AtcPass("GeluONNXFusionPass", GRAPH, "Div(x, 1.41421) -> Erf -> Add(1) -> Mul -> Mul(0.5) -> Gelu", KERNEL,
            CANNDEV_PASSES + "gelu_onnx_fusion_pass.cc", in_reference=False,
            note="the exact-erf GELU chain becomes the Gelu kernel, which computes the tanh approximation"),
    AtcPass("LayerNormONNXFusionPass", GRAPH,
            "ReduceMean -> Sub -> [Cast] -> Pow -> ReduceMean -> Add -> [Max/Min clip] -> Sqrt -> Div [-> Mul -> Add] "
            "-> LayerNorm", KERNEL, CANNDEV_PASSES + "layer_norm_onnx_fusion_pass.cc", in_reference=False,
            note="the decomposed LayerNorm becomes one LayerNorm kernel (precision/kernels.py)"),
    AtcPass("LayerNormONNXMULFusionPass", GRAPH,
            "ReduceMean -> two Subs -> Mul(sub, sub) | Pow(sub, 2) -> ReduceMean -> Add -> Sqrt -> Div -> Mul -> Add "
            "-> LayerNorm", KERNEL, CANNDEV_PASSES + "layer_norm_onnx_mul_fusion_pass.cc", in_reference=False,
            note="the same, with x - mean computed twice"),
)


@dataclass(frozen=True)
class NamedPass:
    """A documented pass we accept in fusion switches but do not fuse in the emulation."""

    name: str
    kind: str  # GraphFusion | UBFusion
    page: str
    why: str


# documented passes we know by name but do not model: fusion_switch accepts them, nothing is fused
NOT_MODELLED_PASSES: tuple[NamedPass, ...] = (
    NamedPass("GeluFusionPass", GRAPH, REF + "atlasrr_30_0011.html",
              "the tanh GELU chain (Pow, Mul, Add, Tanh: the page's scenarios; canndev gelu_fusion_pass.cc L84-100) "
              "becomes Gelu on Atlas A2 only: not modelled, the chain keeps its rounding points. The exact-erf "
              "chain is GeluONNXFusionPass's, on every SoC"),
    NamedPass("AutomaticUbFusion", UB, REF + "atlasrr_30_0206.html",
              "fuses the connected Elemwise ops left over by every other UB fusion (at most 29, lowest priority, "
              "no AddN of more than 6 inputs; the CANN 8.0 page: static shapes only). Not modelled: it would "
              "only hide those chains' intermediates from the dump, and which op names the fused kernel is "
              "not documented"),
    NamedPass("TbeConvFixPipeFusionPass", UB, REF_ZH + "atlasrr_30_0230.html",
              "Conv2D + the Fixpipe node of FixPipeFusionPass + optional Elemwise and quant ops (Atlas 200I/500 "
              "A2, A2, A3); which Elemwise ops it takes is not documented: not modelled"),
    NamedPass("TbeFullyconnectionElemwiseDequantFusionPass", UB,
              "https://www.hiascend.com/document/detail/en/canncommercial/800/graph/graphubfusionref/"
              "atlasrr_30_0125.html",
              "quantized FullyConnection + elementwise: no quantization here"),
    NamedPass("SoftmaxFusionPass", GRAPH,
              "https://www.hiascend.com/doc_center/source/zh/canncommercial/601/modeldev/tfmigr1/"
              "tfmigr_tfadapi_0030.html",
              "decomposed softmax chains: not modelled (ONNX exports Softmax as one op); named in the "
              "fusion_switch_file example"),
    NamedPass("LayerNormFusionPass", GRAPH, "",
              "decomposed LayerNorm chains: not modelled (opset 17 exports LayerNormalization); no reference "
              "page found, accepted by name"),
)
NOT_MODELLED = {p.name: p.why for p in NOT_MODELLED_PASSES}

BY_NAME = {p.name: p for p in CATALOGUE}


def known_names() -> list[str]:
    """The passes the emulation models or documents by name (the built-in registry adds every ATC pass
    name: ``is_known``)."""
    return sorted([*BY_NAME, *NOT_MODELLED])


def is_known(name: str) -> bool:
    """A pass name ATC has: catalogued, documented, or registered in its source (precision/pass_names.py)."""
    from ascendpipe.precision import pass_names

    return name in BY_NAME or name in NOT_MODELLED or pass_names.lookup(name) is not None


def modelled(name: str) -> bool:
    """Whether switching this pass changes what the emulation computes (it is in the catalogue)."""
    return name in BY_NAME


_NAMED = {p.name: p for p in NOT_MODELLED_PASSES}


def not_modelled(switches: dict[str, str]) -> dict[str, dict[str, str]]:
    """The switched passes ATC has but the emulation does not fuse (switching them changes nothing here):
    name -> {section, source, why}, for precision_plan.json and a warning line."""
    from ascendpipe.precision import pass_names

    found = {}
    for name in sorted(switches):
        if name == "ALL" or name in BY_NAME:
            continue
        entry = _NAMED.get(name)
        known = pass_names.lookup(name)
        found[name] = {"section": section_of(name),
                       "source": entry.page if entry and entry.page else (known.source if known else ""),
                       "why": entry.why if entry else "ATC's pass, not modelled by the emulation: the switch is "
                                                      "passed to atc and changes nothing in the emulated model"}
    return found


def section_of(name: str) -> str:
    """The fusion switch file's section for a pass (unknown names: GraphFusion)."""
    entry = BY_NAME.get(name) or _NAMED.get(name)
    if entry:
        return entry.kind
    from ascendpipe.precision import pass_names

    found = pass_names.lookup(name)
    return found.section if found else GRAPH


def switchable(name: str) -> bool:
    """Whether ATC lets this pass be switched off: the catalogue's pages, and GE's ForbiddenClosedPass
    (precision/pass_names.py; unknown names: atc judges, we say yes)."""
    entry = BY_NAME.get(name)
    if entry and not entry.switchable:
        return False
    from ascendpipe.precision import pass_names

    found = pass_names.lookup(name)
    return found.can_switch_off if found else True


def changes_values(name: str) -> bool:
    """Whether switching this pass off can change a value: not for a UB fusion (its members keep their own
    dtypes: the module's docstring) nor for a name the emulation does not fuse with."""
    entry = BY_NAME.get(name)
    return entry is not None and entry.effect != UB_NAMED


def unswitchable_message(name: str) -> str:
    entry = BY_NAME.get(name)
    if entry is not None and not entry.switchable:
        why = f"the CANN reference, {entry.page}: 'this fusion pattern cannot be disabled'"
    else:
        from ascendpipe.precision.pass_names import FORBIDDEN_CLOSED_SOURCE

        why = f"GE's FE keeps it on: {FORBIDDEN_CLOSED_SOURCE}"
    return (f"ATC fusion pass '{name}' cannot be switched off ({why}; atc keeps it on whatever the fusion switch "
            "says): remove it from fusion_switch, and keep its ops in fp32 with keep_dtype instead")


# --- SoCs ---------------------------------------------------------------------------------------

def soc_family(soc_version: str | None) -> str | None:
    """'310' (Atlas 200/300/500 inference), '310P' (Atlas inference), '310B' (Atlas 200I/500 A2),
    'training' (Atlas training: Ascend910, 910A/B/Pro*/Premium*), 'A2' (Ascend910B1..4),
    'A3' (Ascend910_93*), or None when unknown."""
    if not soc_version:
        return None
    soc = soc_version.strip()
    for pattern, family in ((r"Ascend910_93", "A3"), (r"Ascend910B\d", "A2"), (r"Ascend910", "training"),
                            (r"Ascend310P", "310P"), (r"Ascend310B", "310B"), (r"Ascend310$", "310")):
        if re.match(pattern, soc, re.IGNORECASE):
            return family
    return None


from ascendpipe.precision.socs import SOC_EXAMPLES, SOC_PATTERN  # noqa: E402


def soc_version_problem(soc_version) -> str | None:
    """Why ``soc_version`` is not one the emulation knows (None when it is)."""
    if isinstance(soc_version, str) and re.fullmatch(SOC_PATTERN.rstrip("$"), soc_version):  # "$" would let "...\n" by
        return None
    return f"{soc_version!r} is not an Ascend SoC ascendpipe knows; give one of the form {SOC_EXAMPLES}"


def applies_to(entry: AtcPass, soc_version: str | None, dynamic: bool = False) -> bool:
    """Whether the pass fires for this SoC and this kind of model (``dynamic``: a dynamic-shape one).

    A pass limited to some SoCs applies when the SoC is one of them; with no (or an unknown) SoC, the
    passes documented for the Atlas 200/300/500 inference products (Ascend310, the Atlas 200 DK)
    apply: the family the forum cases come from."""
    if entry.shapes != ANY_SHAPE and (entry.shapes == DYNAMIC) != bool(dynamic):
        return False
    if entry.socs == ALL_SOCS:
        return True
    return (soc_family(soc_version) or "310") in entry.socs


# aclrtFloatOverflowMode / set_device_sat_mode: Atlas inference (310P), Atlas 200I/500 A2 (310B) and
# Atlas training products support only saturation; Atlas A2/A3 default to INF/NaN.
OVERFLOW_DEFAULTS = {"310P": "saturation", "310B": "saturation", "training": "saturation", "A2": "inf_nan",
                     "A3": "inf_nan"}
OVERFLOW_MODES = ("inf_nan", "saturation")


def default_overflow_mode(soc_version: str | None) -> str:
    """The SoC's documented default; unknown SoCs (Ascend310 included) get inf_nan, the side that shows
    an overflow as inf."""
    return OVERFLOW_DEFAULTS.get(soc_family(soc_version) or "", "inf_nan")


# --- matching -----------------------------------------------------------------------------------

@dataclass
class Group:
    """One fused op: ``members`` in chain order; ``name`` (the anchor's) names the fused op."""

    pass_name: str
    effect: str
    members: list[str]
    name: str
    internal: list[str]  # tensors between members (they never leave the kernel)
    outputs: list[str]  # the last member's outputs


def _extra_ok(node: Node, chain_input: str, rule: str, consts: dict) -> bool:
    others = [t for t in node.inputs if t and t != chain_input]
    if rule == "any":
        return True
    if rule == "const":
        return all(t in consts for t in others)
    if rule == "bias":  # one constant, 1-D of the channel / last dim (or broadcastable as such)
        if len(others) != 1 or others[0] not in consts:
            return False
        dims = [d for d in consts[others[0]] if d != 1]
        return len(dims) <= 1
    return False


def match(nodes: list[Node], consts: dict[str, tuple[int, ...]], graph_outputs: set[str],
          switches: dict[str, str], soc_version: str | None = None,
          ranks: dict[str, int] | None = None, effect: str | None = None, dynamic: bool = False) -> list[Group]:
    """Fused groups, in catalogue order then graph order; a node joins at most one group.

    ``consts``: initializer name -> shape. ``ranks``: tensor -> rank where known (MatMul's 2-D
    output rule, Conv2D vs Conv3D). A pass switched off (or ``ALL: off`` without it on) is skipped.
    ``effect``: only passes with this numeric effect (graph folds run first, on the folded graph the
    UB fusions). ``dynamic``: the model is compiled with dynamic shapes (static-only passes skip it).
    """
    ranks = ranks or {}
    consumers: dict[str, list[Node]] = {}
    for node in nodes:
        for t in node.inputs:
            consumers.setdefault(t, []).append(node)
    taken: set[str] = set()
    groups: list[Group] = []
    for entry in CATALOGUE:
        if not entry.chain or not enabled(entry.name, switches) or not applies_to(entry, soc_version, dynamic):
            continue
        if effect is not None and entry.effect != effect:
            continue
        for start in nodes:
            if start.name in taken:
                continue
            found = _match_chain(entry, start, consumers, consts, graph_outputs, taken, ranks)
            if found:
                members = [n.name for n in found]
                internal = [t for n in found[:-1] for t in n.outputs if t]
                anchor = _anchor(entry, found)
                groups.append(Group(entry.name, entry.effect, members, anchor, internal, [t for t in found[-1].outputs if t]))
                taken.update(members)
    return groups


def _anchor(entry: AtcPass, found: list) -> str:
    """The node of the anchor step: the first node whose type is in that step's types."""
    types = entry.chain[entry.anchor].types
    return next((n.name for n in found if n.op_type in types), found[0].name)


def _match_chain(entry, start, consumers, consts, graph_outputs, taken, ranks) -> list | None:
    chain = entry.chain
    # the chain's first step may be optional: try the start node against the first step that can take it
    for first in range(len(chain)):
        if start.op_type in chain[first].types and _start_ok(entry, start, ranks, consts):
            found = _walk(chain, first, start, consumers, consts, graph_outputs, taken)
            if found and len(found) > 1:
                return found
        if chain[first].lo > 0:
            break
    return None


def _start_ok(entry: AtcPass, start: Node, ranks: dict, consts: dict) -> bool:
    if entry.name in ("TbeConv3dElemwisePass", "TbeConvDoubleInFusionPass"):
        rank = ranks.get(start.inputs[0]) if start.inputs else None
        if rank is None:
            return entry.name == "TbeConvDoubleInFusionPass"
        return (rank == 5) == (entry.name == "TbeConv3dElemwisePass")
    if entry.name == "AABiasaddConvFusion":  # "if the Conv operator already has Bias, fusion is not supported"
        return len(start.inputs) < 3 or not start.inputs[2]
    if entry.name == "MatMulBiasAddFusionPass":
        return ranks.get(start.outputs[0]) == 2
    if entry.name == "ConvBatchnormFusionPass":
        return len(start.inputs) > 1 and start.inputs[1] in consts
    return True


def _walk(chain, step_index, start, consumers, consts, graph_outputs, taken) -> list | None:
    """Greedy walk: fill each step with as many nodes as it takes, then the next step."""
    found = [start]
    current, count, step = start, 1, step_index
    while True:
        out = [t for t in current.outputs if t]
        nxt = consumers.get(out[0], []) if len(out) == 1 else []
        single = len(nxt) == 1 and out[0] not in graph_outputs
        candidate = nxt[0] if single else None
        advanced = False
        if candidate is not None and candidate.name not in taken:
            # stay in this step, or move on to the next one
            options = []
            if count < chain[step].hi:
                options.append((step, count + 1))
            for later in range(step + 1, len(chain)):
                options.append((later, 1))
                if chain[later].lo > 0:
                    break
            for s, c in options:
                if count < chain[step].lo and s != step:
                    continue
                if candidate.op_type in chain[s].types and _extra_ok(candidate, out[0], chain[s].extra, consts):
                    found.append(candidate)
                    current, step, count, advanced = candidate, s, c, True
                    break
        if not advanced:
            break
    if count < chain[step].lo or any(chain[s].lo > 0 for s in range(step + 1, len(chain))):
        return None
    return found


def enabled(name: str, switches: dict[str, str]) -> bool:
    """A per-pass entry wins over ALL, as on ATC; a pass that cannot be disabled stays on ("ALL: off only
    turns off the rules that can be switched off")."""
    if not switchable(name):
        return True
    if name in switches:
        return switches[name] == "on"
    return switches.get("ALL", "on") == "on"


def guess(original_types: list[str]) -> list[str]:
    """ATC passes whose pattern covers these original op types (for a fused op without a pass name)."""
    types = set(original_types)
    names = []
    for entry in CATALOGUE:
        if not entry.chain:
            continue
        need = [s.types for s in entry.chain if s.lo > 0]
        if len(original_types) < sum(s.lo for s in entry.chain):  # fewer ops than the pattern's required ones
            continue
        if all(types & t for t in need) and len(types & set().union(*(s.types for s in entry.chain))) >= 2:
            names.append(entry.name)
    if "TbeConv3dElemwisePass" in names:  # the conv's rank is unknown here: assume the common 2-D conv
        names.remove("TbeConv3dElemwisePass")
    if "TbeDynamicElemwiseReduceFusionPass" in names:  # shapes unknown: the static twin, the common case
        names.remove("TbeDynamicElemwiseReduceFusionPass")
    return names
