"""The SoC's mixed-precision lists and the remedies that edit them (keep_dtype, modify_mixlist,
customize_dtypes), resolved against a model's nodes for ``convert``.

Each node gets the two GE types ATC gives it (``precision/ge_types.py``): its parse-time type
(``keep_dtype``'s ``OpType::``) and its kernel type (the lists, modify_mixlist, customize_dtypes), the
latter depending on whether a const-to-attr pass can fold its axes (a constant: an attribute, an
initializer or a Constant node's output).
"""

from __future__ import annotations

import os
from typing import Iterable, Mapping

from ascendpipe.onnxgraph import subgraphs as _subgraphs
from ascendpipe.precision import ge_types, list_remedies, lists

# reduce ops whose axes are an attribute before the opset given, an input from it (ONNX's operator changelog)
_AXES_INPUT_SINCE = {"ReduceSum": 13, "ReduceMean": 18, "ReduceMax": 18, "ReduceMin": 18, "ReduceProd": 18,
                     "ReduceL1": 18, "ReduceL2": 18, "ReduceLogSum": 18, "ReduceLogSumExp": 18,
                     "ReduceSumSquare": 18}


def _constants(graph) -> set[str]:
    found = {i.name for i in graph.initializer}
    found |= {t for n in graph.node if n.op_type == "Constant" for t in n.output}
    return found


def _const_axes(node, opset: int | None, consts: set[str]) -> bool | None:
    since = _AXES_INPUT_SINCE.get(node.op_type)
    if since is None:
        return None
    if opset is not None and opset < since:
        return True  # an attribute
    axes = node.input[1] if len(node.input) > 1 else ""
    return True if not axes else axes in consts


def node_types(graph, opset: int | None, fused_into: Mapping[str, str] | None = None,
               prefix_consts: set[str] | None = None) -> Iterable[list_remedies.NodeTypes]:
    """NodeTypes of every node of ``graph`` and its If/Loop/Scan bodies."""
    consts = _constants(graph) | (prefix_consts or set())
    for node in graph.node:
        kernel = ge_types.ge_type(node.op_type, const_axes=_const_axes(node, opset, consts), opset=opset)
        yield list_remedies.NodeTypes(node.name, node.op_type, ge_types.parse_type(node.op_type, opset=opset), kernel,
                                      (fused_into or {}).get(node.name, ""))
        for _, sub in _subgraphs(node):
            yield from node_types(sub, opset, fused_into, consts)


def resolve(settings, model, original, originals: Mapping[str, list[str]], opset: int | None,
            env: Mapping[str, str] | None = None) -> tuple[lists.SocLists, list_remedies.Resolved,
                                                             dict[str, str]]:
    """(the SoC's lists, the remedies resolved on them, node name -> GE kernel type) for the emulated
    ``model``; ``original``: the graph before ATC's folds, whose node names keep_dtype and customize_dtypes
    may give (``originals``: emulated node -> the original nodes folded into it)."""
    from ascendpipe.precision import chips

    soc_lists = lists.for_soc(settings.soc_version, os.environ if env is None else env)
    merged_into = {o: node for node, names in originals.items() for o in names if o != node}
    nodes = {n.name: n for n in node_types(model.graph, opset)}
    parsed = list(node_types(original.graph, opset, merged_into))
    for n in parsed:
        nodes.setdefault(n.name, n)
    resolved = list_remedies.resolve(soc_lists, list(nodes.values()), settings.keep_dtype, settings.modify_mixlist,
                                     settings.customize_dtypes, cube_fp32_input=settings.cube_rules().fp32_input,
                                     bf16=chips.supports_bf16(settings.soc_version), parsed=parsed)
    kernels = {name: n.kernel_type for name, n in nodes.items()}
    return soc_lists, resolved, kernels
