"""Which dtype every node computes in, and why: pure logic, no onnx.

The modes of ATC's ``--precision_mode`` / ``--precision_mode_v2`` fold into five policies:

- ``fp16``: every float op in fp16 (force_fp16, v2 fp16).
- ``cube_fp16``: cube ops in fp16, the rest fp32 (allow_fp32_to_fp16).
- ``mixed``: white fp16, black fp32, gray follows its first float data input
  (allow_mix_precision[_fp16], v2 mixed_float16).
- ``cube_fp16in_fp32out``: everything fp32, but cube ops read fp16 and write fp32 (force_fp32,
  cube_fp16in_fp32out: "preferred input float16, output float32" for cube ops on every SoC,
  hiascend CANN ``atlasatcparam_16_0067``).
- ``origin``: everything in its original dtype (must_keep_origin_dtype, v2 origin).

``keep_dtype`` (names, and op types) wins over every policy and keeps the node fp32, also when the
node it names was fused into another one (then the fused node stays fp32). ATC keeps an op's
original dtype "if supported, else the highest precision the op supports" (hiascend CANN
``atlasatcparam_16_0074``, --keep_dtype). For a cube op (Conv, MatMul, Gemm) that is fp32 in/out
only where the cube unit takes fp32 input (``cube_fp32_input``: Atlas A2/A3, see
``lists.cube_reads_fp32``); elsewhere the kept cube op reads fp16 and writes fp32, which is also
what force_fp32 gives every cube op (``atlasatcparam_16_0067``: fp16 in / fp32 out preferred).
"""

from __future__ import annotations

from dataclasses import dataclass, field

from ascendpipe.precision.lists import CUBE_OPS, NON_FP16_OPS

CONTROL_FLOW_OPS = frozenset({"If", "Loop", "Scan"})

MODE_POLICY = {
    "force_fp16": "fp16",
    "allow_fp32_to_fp16": "cube_fp16",
    "allow_mix_precision": "mixed",
    "allow_mix_precision_fp16": "mixed",
    "must_keep_origin_dtype": "origin",
    "force_fp32": "cube_fp16in_fp32out",
    "cube_fp16in_fp32out": "cube_fp16in_fp32out",
}
MODE_V2_POLICY = {
    "fp16": "fp16",
    "origin": "origin",
    "mixed_float16": "mixed",
    "cube_fp16in_fp32out": "cube_fp16in_fp32out",
}


@dataclass(frozen=True)
class NodeInfo:
    name: str
    op_type: str
    float_out: bool  # produces at least one float tensor
    inputs: tuple[str, ...] = ()  # data inputs (initializers left out)
    outputs: tuple[str, ...] = ()
    originals: tuple[tuple[str, str], ...] = ()  # (name, op_type) of original nodes it replaces


@dataclass(frozen=True)
class Decision:
    dtype: str  # 'float16' | 'float32' | 'other': what the node computes in and writes
    reason: str
    reads_fp16: bool = False  # its float inputs are rounded to fp16 first


@dataclass
class Lists:
    white: frozenset[str]
    black: frozenset[str]
    keep_names: frozenset[str] = frozenset()
    keep_types: frozenset[str] = frozenset()  # ONNX op types
    sources: dict[str, str] = field(default_factory=dict)  # op type -> 'default' | 'modify_mixlist'


def _keep_reason(node: NodeInfo, lists: Lists) -> str | None:
    for name, op_type in ((node.name, node.op_type), *node.originals):
        via = "" if name == node.name else f" (fused into '{node.name}')"
        if name in lists.keep_names:
            return f"keep_dtype: name '{name}'{via}"
        if op_type in lists.keep_types:
            return f"keep_dtype: OpType::{op_type}{via}"
    return None


def _mixed(node: NodeInfo, lists: Lists, producer_dtype: dict[str, str]) -> Decision:
    where = lists.sources.get(node.op_type, "default")
    if node.op_type in lists.black:
        return Decision("float32", f"mixed: black list ({where})")
    if node.op_type in lists.white:
        return Decision("float16", f"mixed: white list ({where})", True)
    for tensor in node.inputs:
        upstream = producer_dtype.get(tensor)
        if upstream in ("float16", "float32"):
            if upstream == "float16":
                return Decision("float16", "mixed: gray, follows fp16 input", True)
            return Decision("float32", "mixed: gray, follows fp32 input")
    return Decision("float32", "mixed: gray, no float data input")


def decide(node: NodeInfo, policy: str, lists: Lists, producer_dtype: dict[str, str],
           cube_fp32_input: bool = False) -> Decision:
    if not node.float_out:
        return Decision("other", "no float output")
    if node.op_type in NON_FP16_OPS:
        return Decision("other", "integer/quantized op: no fp16 form")
    if node.op_type in CONTROL_FLOW_OPS:  # its outputs are its body's, rounded there
        return Decision("float32", "control flow: the ops of its bodies decide")
    if policy == "origin":
        return Decision("float32", "origin: keeps the original dtype")
    cube = node.op_type in CUBE_OPS
    keep = _keep_reason(node, lists)
    if keep:
        if cube and not cube_fp32_input:  # the highest precision the cube unit has: fp16 in, fp32 out
            return Decision("float32", f"{keep}; cube op reads fp16 (no fp32 cube input on this SoC)", True)
        return Decision("float32", keep)
    if node.op_type == "Constant" and policy == "fp16":
        # a Constant is a weight to ATC (folded into a Const), as an initializer is: each fp16 reader
        # rounds its own copy, and an op kept in fp32 (keep_dtype) reads it in fp32. Rounded at the
        # source, a BN variance of 1e7 kept by keep_dtype still read inf (a Paddle export's weights).
        return Decision("float32", "Constant: a weight; rounded where an fp16 op reads it")
    if policy == "fp16":
        return Decision("float16", "force_fp16: every float op in fp16", True)
    if policy == "cube_fp16":
        if cube:
            return Decision("float16", "allow_fp32_to_fp16: cube op in fp16", True)
        return Decision("float32", "allow_fp32_to_fp16: non-cube op keeps fp32")
    if policy == "cube_fp16in_fp32out":
        if cube:
            return Decision("float32", "cube_fp16in_fp32out: cube op reads fp16, writes fp32", True)
        return Decision("float32", "cube_fp16in_fp32out: fp32")
    if policy == "mixed":
        return _mixed(node, lists, producer_dtype)
    raise ValueError(f"unknown precision policy {policy!r}")


def plan(
    nodes: list[NodeInfo], policy: str, lists: Lists, graph_inputs: tuple[str, ...] = (), *,
    outer: dict[str, str] | None = None, cube_fp32_input: bool = False,
) -> dict[str, Decision]:
    """Decisions for nodes given in topological order (gray ops need their producers first).

    ``graph_inputs`` are the float graph inputs: fp32, as the model's inputs are. ``outer``: the
    dtype of each tensor an enclosing graph made (a subgraph body reads them).
    """
    producer_dtype: dict[str, str] = {**(outer or {}), **{name: "float32" for name in graph_inputs}}
    decisions: dict[str, Decision] = {}
    for node in nodes:
        decision = decide(node, policy, lists, producer_dtype, cube_fp32_input)
        decisions[node.name] = decision
        for tensor in node.outputs:
            producer_dtype[tensor] = decision.dtype
    return decisions
