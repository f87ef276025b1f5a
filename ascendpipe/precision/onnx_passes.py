"""ATC's graph fusions that redraw op boundaries in an ONNX model before any kernel runs: each check
from the pass's own code. Pure (numpy for constant values, no onnx).

Source: canndev, GitHub ``dengguojie/vue-element-admin`` branch ``stp`` at 7290acc7 (2022-06-29),
``ops/built-in/fusion_pass/graph_fusion/ai_core/``:

- ``LayerNormONNXFusionPass`` (``layer_norm_onnx_fusion_pass.cc``): ReduceMean -> Sub -> [Cast] ->
  Pow|Square -> ReduceMean -> Add -> [Maximum -> Minimum | Minimum -> Maximum] -> Sqrt -> Div
  [-> Mul -> Add] becomes one ``LayerNorm`` named ``<last Add>/LayerNorm`` (six cases, L65-236).
- ``LayerNormONNXMULFusionPass`` (``layer_norm_onnx_mul_fusion_pass.cc``): the same with the
  ``x - mean`` computed twice (two Subs), the square as Mul(sub, sub) or Pow(sub, 2) (L61-105).
- ``GeluONNXFusionPass`` (``gelu_onnx_fusion_pass.cc``): Div(x, 1.41421) -> Erf -> Add(1) -> Mul ->
  Mul(0.5) becomes ``Gelu`` named ``<last Mul>/Gelu`` (two cases, L55-106); the Gelu kernel computes
  the tanh approximation (precision/kernels.py).

The FE runs graph passes in name order (canndev's ``A...`` / ``Z...`` prefixed pass names are there
to run first / last), so ``ConstToAttrPass`` has made ReduceMean a ``ReduceMeanD`` before the
LayerNorm passes: both accept that. The FE's pattern matcher pairs a node's inputs with the
pattern's in input order, first unused pattern input that fits (GE
``graph_metadef/register/graph_optimizer/graph_fusion/pattern_fusion_base_pass_impl.cc`` L219-283),
so operand order matters where a pass wires ``GetInDataAnchor(i)`` by index: such cases are left
unfused here with the reason said (the wired graph would not be the model's; ATC's outcome there is
not read), which is also the side that shows a failure (the unfused chain keeps its fp16 steps).

A fused op inherits ``_keep_dtype`` from any node of its match, the pattern's matched input node
included (GE ``graph_metadef/register/graph_optimizer/graph_fusion/pattern_fusion_base_pass.cc``
L37-50 ``StoreOriginNodes`` and L252, ``graph_pass_util.cc`` L433-472 ``InheritAttrFromOriNodes``):
``KernelFusion.keep_from``.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np

REDUCE_MEAN = ("ReduceMean",)  # the ONNX op; its GE types ReduceMean / ReduceMeanD both fit the LN pass
FLOAT_EPS = float(np.finfo(np.float32).eps)  # std::numeric_limits<float>::epsilon()


@dataclass
class OpView:
    name: str
    op_type: str
    inputs: tuple[str, ...]
    outputs: tuple[str, ...]
    attrs: dict = field(default_factory=dict)


@dataclass
class GraphView:
    """What the passes read of a graph: ops in order, constant values (initializers and Constant
    outputs), static shapes (None for an unknown dim, a missing entry for an unknown rank), the graph
    outputs (a NetOutput peer counts as a consumer) and the model's opset."""

    ops: list[OpView]
    consts: dict[str, np.ndarray]
    shapes: dict[str, tuple]
    graph_outputs: set[str]
    opset: int = 13

    def __post_init__(self):
        self.producer = {t: op for op in self.ops for t in op.outputs if t}
        self.readers: dict[str, list[OpView]] = {}
        for op in self.ops:
            for t in op.inputs:
                if t:
                    self.readers.setdefault(t, []).append(op)

    def peers(self, tensor: str) -> int:
        """GetPeerAnchorsSize of the producing out-anchor: consumer input slots (+1 for a graph output)."""
        slots = sum(sum(1 for t in op.inputs if t == tensor) for op in self.readers.get(tensor, []))
        return slots + (1 if tensor in self.graph_outputs else 0)

    def out_nodes(self, tensor: str) -> int:
        """GetOutDataNodes().size(): distinct consumer nodes (+1 for a graph output)."""
        return len({op.name for op in self.readers.get(tensor, [])}) + (1 if tensor in self.graph_outputs else 0)

    def single_reader(self, tensor: str, types: tuple[str, ...]) -> OpView | None:
        readers = self.readers.get(tensor, [])
        fits = [op for op in readers if op.op_type in types]
        return fits[0] if len(fits) == 1 else None


@dataclass
class KernelFusion:
    """One fused op: ``kind`` 'LayerNorm' | 'Gelu'; ``inputs`` the kernel's (x, gamma, beta | x);
    ``new_consts``: constants the pass creates (gamma 1 / beta 0 without affine)."""

    pass_name: str
    kind: str
    name: str
    members: list[str]
    inputs: list[str]
    output: str
    attrs: dict
    keep_from: list[str]
    new_consts: dict = field(default_factory=dict)
    case: str = ""


@dataclass
class Skipped:
    pass_name: str
    at: str  # the anchor node the match started from
    why: str


def _scalar(graph: GraphView, op: OpView) -> tuple[float | None, str]:
    """GetScalarFromOp: the constant of input x2, else x1; a scalar or shape [1]; float/fp16."""
    for index in (1, 0):
        if index < len(op.inputs) and op.inputs[index] in graph.consts:
            value = graph.consts[op.inputs[index]]
            if value.shape not in ((), (1,)):
                return None, f"the constant of '{op.name}' is not a scalar (shape {list(value.shape)})"
            x2 = graph.consts.get(op.inputs[1]) if len(op.inputs) > 1 else None
            x2_dtype = (x2.dtype if x2 is not None else value.dtype)
            if x2_dtype not in (np.float32, np.float16):
                return None, f"the constant input of '{op.name}' is not float/fp16"
            return float(value.reshape(-1)[0]), ""
    return None, f"'{op.name}' has no constant input"


def _axes(graph: GraphView, op: OpView) -> list[int] | None:
    """ReduceMean's axes: the attribute (opset < 18) or a constant input."""
    if "axes" in op.attrs:
        return [int(a) for a in op.attrs["axes"]]
    if len(op.inputs) > 1 and op.inputs[1] in graph.consts:
        return [int(a) for a in graph.consts[op.inputs[1]].reshape(-1)]
    if len(op.inputs) == 1:
        return []  # no axes: every axis
    return None


def _dims(graph: GraphView, tensor: str) -> tuple | None:
    return graph.shapes.get(tensor)


def _dynamic(graph: GraphView, tensor: str) -> bool:
    dims = _dims(graph, tensor)
    return dims is None or any(d is None for d in dims)


def find(graph: GraphView, soc_version: str | None = None) -> tuple[list[KernelFusion], list[Skipped]]:
    """The fusions ATC makes, in pass order; a node joins at most one."""
    fused: list[KernelFusion] = []
    skipped: list[Skipped] = []
    taken: set[str] = set()
    for pass_fn in (_gelu_onnx, _layer_norm_onnx, _layer_norm_onnx_mul):  # the FE's name order (G < L...F < L...M)
        for op in graph.ops:
            if op.name in taken:
                continue
            result = pass_fn(graph, op)
            if result is None:
                continue
            if isinstance(result, Skipped):
                skipped.append(result)
                continue
            if taken & set(result.members):
                continue
            fused.append(result)
            taken.update(result.members)
    return fused, skipped


# --- LayerNormONNXFusionPass ------------------------------------------------------------------------

LN_PASS = "LayerNormONNXFusionPass"


def _layer_norm_onnx(graph: GraphView, rm0: OpView):
    if rm0.op_type not in REDUCE_MEAN or not rm0.inputs:
        return None
    x = rm0.inputs[0]
    sub0 = next((op for op in graph.readers.get(rm0.outputs[0], []) if op.op_type == "Sub"), None)
    if sub0 is None or len(sub0.inputs) != 2:
        return None
    skip = lambda why: Skipped(LN_PASS, rm0.name, why)  # noqa: E731
    # the pattern takes Sub's input 0 as the wildcard Input0, input 1 as ReduceMean0 (L116; L219-283)
    if sub0.inputs[1] != rm0.outputs[0] or sub0.inputs[0] != x:
        return skip(f"'{sub0.name}' is not Sub(x, ReduceMean(x)) (CheckEdges L408-414)")
    readers = graph.readers.get(sub0.outputs[0], [])
    cast0 = next((op for op in readers if op.op_type == "Cast"), None)
    square_src = cast0.outputs[0] if cast0 else sub0.outputs[0]
    pow0 = next((op for op in graph.readers.get(square_src, []) if op.op_type == "Pow"
                 or (op.op_type == "Mul" and op.inputs[:2] == (square_src, square_src))), None)
    div0 = next((op for op in readers if op.op_type == "Div"), None)
    if pow0 is None or div0 is None:
        return None
    rm1 = graph.single_reader(pow0.outputs[0], REDUCE_MEAN)
    add0 = graph.single_reader(rm1.outputs[0], ("Add",)) if rm1 else None
    if add0 is None:
        return None
    clip, top = [], add0
    for kinds in (("Max", "Min"), ("Min", "Max")):  # cases 5 and 6 (L191-236)
        first = graph.single_reader(add0.outputs[0], (kinds[0],))
        second = graph.single_reader(first.outputs[0], (kinds[1],)) if first else None
        if second is not None:
            clip, top = [first, second], second
            break
    sqrt0 = graph.single_reader(top.outputs[0], ("Sqrt",))
    if sqrt0 is None or div0.inputs[:2] != (sub0.outputs[0], sqrt0.outputs[0]):
        return None
    if pow0.op_type == "Mul":
        return skip(f"'{pow0.name}' squares with Mul: the pattern takes Pow or Square (L108), not Mul")
    if pow0.inputs[0] != square_src:
        return skip(f"'{pow0.name}' reads its base as input 1 (CheckNodeInputSame L591-621)")
    mul0 = graph.single_reader(div0.outputs[0], ("Mul",))
    add1 = graph.single_reader(mul0.outputs[0], ("Add",)) if mul0 else None
    affine = mul0 is not None and add1 is not None
    members = [rm0, sub0, *([cast0] if cast0 else []), pow0, rm1, add0, *clip, sqrt0, div0,
               *([mul0, add1] if affine else [])]
    out = add1 if affine else div0
    # CheckEdges (L427-441): Sub0 feeds exactly 2, every other member but the last exactly 1
    for op in members:
        want = 2 if op is sub0 else 1
        if op is not out and graph.peers(op.outputs[0]) != want:
            return skip(f"'{op.name}' feeds {graph.peers(op.outputs[0])} consumer(s), the pass needs {want} "
                        f"(CheckEdges L427-441)")
    # CheckValue (L521-589)
    if int(rm0.attrs.get("keepdims", 1)) != 1:
        return skip(f"'{rm0.name}' keepdims is 0 (CheckValue L525-532)")
    exponent, why = _scalar(graph, pow0)
    if exponent is None:
        return skip(why + " (GetScalarFromOp)")
    if abs(exponent - 2.0) > FLOAT_EPS:
        return skip(f"'{pow0.name}' exponent is {exponent}, not 2 (L545-548)")
    if clip:
        low = _scalar(graph, clip[0] if clip[0].op_type == "Max" else clip[1])[0]
        high = _scalar(graph, clip[0] if clip[0].op_type == "Min" else clip[1])[0]
        if high != float("inf") or low != 0:
            return skip("the Maximum/Minimum clip is not [0, inf) (L551-564)")
    eps, why = _scalar(graph, add0)
    if eps is None:
        return skip(why + " (epsilon, L580-582)")
    if eps > 0.1:
        return skip(f"epsilon {eps} > 0.1 (L583-586)")
    dims = _dims(graph, x)
    if dims is None or len(dims) < 1:
        return skip("the input's rank is unknown or 0 (L654-659)")
    axes = _axes(graph, rm0)
    if axes is None:
        return skip(f"'{rm0.name}' axes are not constant (L663-675)")
    rank = len(dims)
    axes = list(range(rank)) if not axes else axes
    norm = [a if a > 0 else a + rank for a in axes]  # L683-685, as written: axis 0 becomes the rank
    trailing = list(range(rank - len(norm), rank))
    if sorted(norm) != trailing or norm != sorted(norm):
        return skip(f"reduced axes {axes} are not the trailing axes: the fused kernel would normalise "
                    f"axes {norm[0]}..{rank - 1} (begin_norm_axis = axes[0], L686), not modelled")
    x_dynamic = _dynamic(graph, x)
    new_consts, inputs = {}, [x]
    if affine:
        gamma = mul0.inputs[1] if mul0.inputs[0] == div0.outputs[0] else None
        beta = add1.inputs[1] if add1.inputs[0] == mul0.outputs[0] else None
        if gamma is None or beta is None:
            return skip("gamma must be Mul's input 1 and beta Add's input 1: the pass wires those anchors "
                        "(L771-780); the other order is not the model's graph")
        for op, tensor in ((mul0, gamma), (add1, beta)):
            dynamic = any(_dynamic(graph, t) for t in op.inputs[:2])
            if dynamic:
                continue
            if tensor not in graph.consts:
                return skip(f"'{op.name}' has no constant input (CheckShape L491-519)")
            shape = tuple(graph.consts[tensor].shape)
            if len(shape) != len(norm) or any(shape[i] != dims[a] for i, a in enumerate(norm)):
                return skip(f"'{op.name}' constant has shape {list(shape)}, the pass needs "
                            f"{[dims[a] for a in norm]} (CheckShape L506-516)")
        inputs += [gamma, beta]
    else:
        if x_dynamic:
            return skip("dynamic input without affine: not changed (L723-726)")
        shape = tuple(dims[a] for a in norm)
        gamma, beta = f"{div0.name}/Mul/gamma", f"{div0.name}/Mul/Add/beta"
        new_consts = {gamma: np.ones(shape, np.float32), beta: np.zeros(shape, np.float32)}
        inputs += [gamma, beta]
    anchor = add1.name if affine else f"{div0.name}/Mul/Add"  # the Add the pass creates (L353-404)
    case = ("cast" if cast0 else "") + ("clip" if clip else "") + ("affine" if affine else "no_affine")
    return KernelFusion(LN_PASS, "LayerNorm", f"{anchor}/LayerNorm", [op.name for op in members], inputs,
                        out.outputs[0], {"begin_norm_axis": norm[0], "epsilon": float(np.float32(eps)),
                                         "begin_params_axis": -len(norm)},
                        _keep_from(graph, members, x), new_consts, case)


def _keep_from(graph: GraphView, members: list[OpView], x: str) -> list[str]:
    producer = graph.producer.get(x)
    return [op.name for op in members] + ([producer.name] if producer else [])


# --- LayerNormONNXMULFusionPass ---------------------------------------------------------------------

LN_MUL_PASS = "LayerNormONNXMULFusionPass"


def _layer_norm_onnx_mul(graph: GraphView, mean0: OpView):
    if mean0.op_type not in REDUCE_MEAN or not mean0.inputs:
        return None
    x = mean0.inputs[0]
    subs = [op for op in graph.readers.get(mean0.outputs[0], []) if op.op_type == "Sub"]
    if len(subs) != 2:
        return None
    skip = lambda why: Skipped(LN_MUL_PASS, mean0.name, why)  # noqa: E731
    for sub0, sub1 in (subs, subs[::-1]):
        square = next((op for op in graph.readers.get(sub1.outputs[0], [])
                       if op.op_type == "Pow" or (op.op_type == "Mul" and op.inputs[:2] == (sub1.outputs[0],) * 2)),
                      None)
        div0 = graph.single_reader(sub0.outputs[0], ("Div",))
        if square is not None and div0 is not None:
            break
    else:
        return None
    mean1 = graph.single_reader(square.outputs[0], REDUCE_MEAN)
    add0 = graph.single_reader(mean1.outputs[0], ("Add",)) if mean1 else None
    sqrt0 = graph.single_reader(add0.outputs[0], ("Sqrt",)) if add0 else None
    if sqrt0 is None or div0.inputs[:2] != (sub0.outputs[0], sqrt0.outputs[0]):
        return None
    mul1 = graph.single_reader(div0.outputs[0], ("Mul",))
    add1 = graph.single_reader(mul1.outputs[0], ("Add",)) if mul1 else None
    if mul1 is None or add1 is None:
        return skip("no Mul/Add affine: the pass wires its created Mul's input 0 as gamma (L620), which is the "
                    "Div there: not modelled")
    if sub0.inputs[0] != x or sub1.inputs[0] != x:
        return skip("a Sub does not read x as input 0 (L454-464)")
    with_pow = square.op_type == "Pow"
    counts = [(mean0, 2), (sub0, 1), (square, 1), (sub1, 1 if with_pow else 2), (mean1, 1), (add0, 1), (sqrt0, 1),
              (div0, 1), (mul1, 1)]
    for op, want in counts:  # L466-513
        if graph.peers(op.outputs[0]) != want:
            return skip(f"'{op.name}' feeds {graph.peers(op.outputs[0])} consumer(s), the pass needs {want} (L466-513)")
    axes0, axes1 = _axes(graph, mean0), _axes(graph, mean1)
    if not axes0 or not axes1 or len(axes0) != 1 or len(axes1) != 1 or axes0 != axes1:
        return skip("the two ReduceMeans do not reduce the same single axis (L538-541)")
    if int(mean0.attrs.get("keepdims", 1)) != 1:  # L534 reads keep_dims of mean0 twice
        return skip(f"'{mean0.name}' keepdims is 0 (L542-545)")
    dims = _dims(graph, x)
    if dims is None or len(dims) < 1:
        return skip("the input's rank is unknown (L546-552)")
    if axes0[0] not in (-1, len(dims) - 1):
        return skip(f"axis {axes0[0]} is not the last (L553-556)")
    if with_pow:
        if len(square.inputs) < 2 or square.inputs[1] not in graph.consts:
            return skip(f"'{square.name}' exponent is not input x2 as a constant (L352-358)")
        exponent, why = _scalar(graph, square)
        if exponent is None or abs(exponent - 2.0) > FLOAT_EPS:
            return skip(why or f"'{square.name}' exponent is {exponent}, not 2 (L559-569)")
    eps, why = _scalar(graph, add0)
    if eps is None:
        return skip(why + " (L570-573)")
    gamma, beta = mul1.inputs[0], add1.inputs[1]  # L620, L626: input 0 of Mul, input 1 of Add
    if gamma == div0.outputs[0] or beta == mul1.outputs[0]:
        return skip("gamma must be Mul's input 0 and beta Add's input 1: the pass wires those anchors (L620-631)")
    for tensor in (gamma, beta):
        shape = graph.shapes.get(tensor)
        if shape is None or tuple(shape) not in ((dims[-1],),):
            return skip(f"'{tensor}' has shape {list(shape) if shape else 'unknown'}, the LayerNorm kernel takes "
                        f"[{dims[-1]}] (layer_norm.py L821-829)")
    members = [mean0, sub0, sub1, square, mean1, add0, sqrt0, div0, mul1, add1]
    return KernelFusion(LN_MUL_PASS, "LayerNorm", f"{add1.name}/LayerNorm", [op.name for op in members],
                        [x, gamma, beta], add1.outputs[0],
                        {"begin_norm_axis": len(dims) - 1, "epsilon": float(np.float32(eps)), "begin_params_axis": -1},
                        _keep_from(graph, members, x), {}, "pow" if with_pow else "mul")


# --- GeluONNXFusionPass -----------------------------------------------------------------------------

GELU_PASS = "GeluONNXFusionPass"
SQRT2_CONST = 1.41421  # gelu_onnx_fusion_pass.cc L201
DIV0_TOLERANCE = 0.00001  # L43


def _gelu_onnx(graph: GraphView, div0: OpView):
    if div0.op_type != "Div" or len(div0.inputs) != 2:
        return None
    erf0 = graph.single_reader(div0.outputs[0], ("Erf",))
    add0 = graph.single_reader(erf0.outputs[0], ("Add",)) if erf0 else None
    if add0 is None:
        return None
    x = div0.inputs[0]
    case, mul0, mul1 = None, None, None
    for op in graph.readers.get(add0.outputs[0], []):
        if op.op_type != "Mul":
            continue
        other = [t for t in op.inputs if t != add0.outputs[0]]
        source = graph.producer.get(other[0]) if other else None
        if other and other[0] == x:  # case 2: Mul0(x, Add0) -> Mul1(Mul0, 0.5)
            mul0, case = op, "mul_after"
            mul1 = graph.single_reader(op.outputs[0], ("Mul",))
        elif source is not None and source.op_type == "Mul":  # case 1: Mul1(Mul0(?, 0.5), Add0)
            mul0, mul1, case = source, op, "mul_before"
        if mul1 is not None:
            break
    if mul1 is None:
        return None
    skip = lambda why: Skipped(GELU_PASS, div0.name, why)  # noqa: E731
    if div0.inputs[1] not in graph.consts:
        return skip(f"'{div0.name}' divides by a non-constant (L202-204)")
    # link checks (L166-197): in/out node counts
    checks = [(div0, 2, 1), (erf0, 1, 1), (add0, 2, 1), (mul0, 2, 1)]
    for op, ins, outs in checks:
        in_nodes = len({(graph.producer[t].name if t in graph.producer else t) for t in op.inputs if t})
        if in_nodes != ins or graph.out_nodes(op.outputs[0]) != outs:
            return skip(f"'{op.name}' has {in_nodes} input node(s) / {graph.out_nodes(op.outputs[0])} output node(s), "
                        f"the pass needs {ins} / {outs} (L166-197)")
    value, why = _scalar(graph, div0)
    if value is None or abs(value - SQRT2_CONST) > DIV0_TOLERANCE:
        return skip(why or f"'{div0.name}' divides by {value}, not 1.41421 (L205-208)")
    value, why = _scalar(graph, add0)
    if value is None or abs(value - 1.0) > FLOAT_EPS:
        return skip(why or f"'{add0.name}' adds {value}, not 1 (L212-215)")
    half = _scalar(graph, mul0)[0] if case == "mul_before" else _scalar(graph, mul1)[0]
    if half is None or abs(half - 0.5) > FLOAT_EPS:
        return skip(f"the Mul constant is {half}, not 0.5 (L216-236)")
    members = [div0, erf0, add0, mul0, mul1]
    return KernelFusion(GELU_PASS, "Gelu", f"{mul1.name}/Gelu", [op.name for op in members], [x], mul1.outputs[0],
                        {}, _keep_from(graph, members, x) if case == "mul_after" else [op.name for op in members],
                        {}, case)


PASSES = {LN_PASS: "layer_norm_onnx_fusion_pass.cc", LN_MUL_PASS: "layer_norm_onnx_mul_fusion_pass.cc",
          GELU_PASS: "gelu_onnx_fusion_pass.cc"}
