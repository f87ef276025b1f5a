"""Which of the model's nodes each onnxruntime kernel computes (pure: graphs in, sources out).

onnxruntime runs an optimised copy of the model: nodes fused (``MatMulAddFusion``, ``SkipLayerNormalization``),
added (``gemm_input_reshape``, ``ReorderInput``), renamed (``<tensor>_nchwc``, ``<name>_token_12``). Kernel
names are that copy's node names. Tensors the two graphs share anchor the mapping, as compare pairs a
fused target op with its original ops through surviving tensor names (``compare.mapping``):

- a kernel whose outputs are tensors of the model (or that is named after one: ``<tensor>_nchwc``)
  computes the model nodes met walking back from them, up to tensors another kernel computes (or
  weights, or the graph's inputs): its fused region;
- a kernel whose outputs are its own (a reshape around a Gemm, a Split feeding Squeezes, a layout
  reorder) serves the kernels it feeds: it takes their sources;
- model nodes folded away (Constant, the shape arithmetic onnxruntime computes once) run no kernel and
  are no kernel's source.

Each kernel then gets an anchor, the node it is named after: the source whose name prefixes the
kernel's (``/l0/MatMul/MatMulAddFusion`` -> ``/l0/MatMul``), else the source of the kernel's own type
(``SkipLayerNormalization`` -> the LayerNormalization), else the one matrix op of the region, else the
only source. Without one, the op type is the region's types joined (``Div+Erf+Add+Mul`` for a Gelu).
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Iterable, Sequence

from ascendpipe.opnode import Node
from ascendpipe.profiling.oprows import CUBE_OP_TYPES

_RENAME = re.compile(r"(_nchwc|_token_\d+|_new_reshape)+$")
# kernel type -> the model op types it implements (beyond its own name and a Fused/Nchwc prefix)
KERNEL_ALIASES = {
    "SkipLayerNormalization": ("LayerNormalization",), "SkipSimplifiedLayerNormalization": ("SimplifiedLayerNormalization",),
    "BiasGelu": ("Erf",), "FastGelu": ("Tanh",), "Gelu": ("Erf",), "QuickGelu": ("Sigmoid",), "BiasSoftmax": ("Softmax",),
    "FusedConv": ("Conv",), "FusedGemm": ("Gemm",), "FusedMatMul": ("MatMul",), "MatMulIntegerToFloat": ("MatMul",),
}
# model ops that are folded when their inputs are constant (shape arithmetic): no kernel runs them
_SHAPE_OPS = {"Shape", "Size"}


@dataclass(frozen=True)
class Source:
    """What a kernel computes: the model's nodes (graph order), the one it is named after, its op type."""
    nodes: tuple[str, ...]
    anchor: str
    op_type: str


def _static_nodes(nodes: Sequence[Node], constants: set[str]) -> set[str]:
    """Nodes whose value is known before a run: Constants, Shape/Size, and nodes fed only by those or weights."""
    known, static = set(constants), set()
    for node in nodes:  # graph order: producers first
        inputs = [t for t in node.inputs if t]
        if node.op_type == "Constant" or node.op_type in _SHAPE_OPS or all(t in known for t in inputs):
            static.add(node.name)
            known.update(node.outputs)
    return static


def _kernel_types(kernel_type: str) -> set[str]:
    names = {kernel_type, *KERNEL_ALIASES.get(kernel_type, ())}
    for prefix in ("Fused", "Nchwc", "QLinear", "Bias", "Skip"):
        if kernel_type.startswith(prefix):
            names.add(kernel_type[len(prefix):])
    return names


def _anchor(kernel: Node, region: list[str], types: dict[str, str]) -> str | None:
    stem = _RENAME.sub("", kernel.name)
    prefixed = [n for n in region if stem == n or stem.startswith(n + "/")]
    if prefixed:
        return max(prefixed, key=len)
    wanted = _kernel_types(kernel.op_type)
    typed = [n for n in region if types[n] in wanted]
    if typed:
        return typed[-1]
    cube = [n for n in region if types[n] in CUBE_OP_TYPES]
    if len(cube) == 1:
        return cube[0]
    return region[0] if len(region) == 1 else None


def attribute_kernels(model_nodes: Sequence[Node], model_constants: Iterable[str], kernel_nodes: Sequence[Node],
                      kernel_constants: Iterable[str]) -> dict[str, Source]:
    """kernel name -> Source, for every kernel node that maps to model nodes.

    ``model_constants``: the model's initializers; ``kernel_constants``: the optimised graph's
    initializers and graph inputs (folded values and the feeds: no kernel computes them)."""
    order = {n.name: i for i, n in enumerate(model_nodes)}
    types = {n.name: n.op_type for n in model_nodes}
    producer = {t: n for n in model_nodes for t in n.outputs if t}
    outputs_of = {n.name: n.outputs for n in model_nodes}
    # a kernel named after a model tensor (onnxruntime's '<tensor>_nchwc' for a layout-rewritten
    # node, whose real outputs are renamed too) stands for the node computing that tensor
    named = {k.name: _RENAME.sub("", k.name) for k in kernel_nodes if _RENAME.sub("", k.name) in producer}
    computed = {t for k in kernel_nodes for t in k.outputs if t} | set(named.values())
    # folded before the run; a node a kernel still runs (its output name kept) is not
    static = {n for n in _static_nodes(model_nodes, set(model_constants))
              if not any(t in computed for t in outputs_of[n])}
    stops = set(kernel_constants)
    regions: dict[str, set[str]] = {}
    for kernel in kernel_nodes:
        own = {t for t in kernel.outputs if t in producer} | ({named[kernel.name]} if kernel.name in named else set())
        region: set[str] = set()
        todo = list(own)
        while todo:
            node = producer.get(todo.pop())
            if node is None or node.name in region or node.name in static:
                continue
            region.add(node.name)
            todo += [t for t in node.inputs if t and t not in stops and (t not in computed or t in own)]
        regions[kernel.name] = region
    consumers: dict[str, list[Node]] = {}
    for kernel in kernel_nodes:
        for t in kernel.inputs:
            consumers.setdefault(t, []).append(kernel)

    def served(kernel: Node, seen: frozenset) -> set[str]:
        """A kernel of its own tensors: the sources of the kernels it feeds (a producer's too, for a
        kernel that feeds nothing, e.g. a layout reorder at the end)."""
        found: set[str] = set()
        for t in kernel.outputs:
            for user in consumers.get(t, []):
                if user.name in seen:
                    continue
                found |= regions[user.name] or served(user, seen | {user.name})
        return found

    result = {}
    for kernel in kernel_nodes:
        region = regions[kernel.name] or served(kernel, frozenset({kernel.name}))
        if not region:
            continue
        ordered = sorted(region, key=order.__getitem__)
        anchor = _anchor(kernel, ordered, types)
        if anchor is not None:
            op_type = types[anchor]
        else:
            anchor = ordered[-1]  # the node whose output the region ends in
            op_type = "+".join(dict.fromkeys(types[n] for n in ordered))
        result[kernel.name] = Source(tuple(ordered), anchor, op_type)
    return result


def expand(source: Source, op_map: dict[str, list[str]]) -> tuple[str, ...]:
    """The source nodes through a converted model's fused_map (fused op -> original ops, as compare
    reads it with ``compare.mapping.fused_map_parts``)."""
    out: list[str] = []
    for name in source.nodes:
        out += [n for n in (op_map.get(name) or [name]) if n not in out]
    return tuple(out)
