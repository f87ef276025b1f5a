"""Which dtype every node computes in, and why: pure logic, no onnx.

The modes of ATC's ``--precision_mode`` / ``--precision_mode_v2`` fold into five policies:

- ``fp16``: every float op in fp16 (force_fp16, v2 fp16).
- ``cube_fp16``: cube ops in fp16, the rest fp32 (allow_fp32_to_fp16).
- ``mixed``: white fp16, black fp32, gray follows its first float data input
  (allow_mix_precision[_fp16], v2 mixed_float16). A node is looked up by the GE kernel type ATC runs it
  as (``NodeInfo.ge_type``, ``precision/ge_types.py``) in the SoC's lists (``precision/lists.py``).
- ``cube_fp16in_fp32out``: everything fp32, but cube ops read fp16 and write fp32 (force_fp32,
  cube_fp16in_fp32out: "preferred input float16, output float32" for cube ops on every SoC,
  hiascend CANN ``atlasatcparam_16_0067``).
- ``origin``: everything in its original dtype (must_keep_origin_dtype, v2 origin); on a C32 SoC
  (Atlas A2/A3) an fp32 cube op reads HF32 where ``--allow_hf32`` says (conv on, matmul off).
- ``fp32_to_bf16``: as origin: fp32 kept where the op has an fp32 kernel, bf16 only where it lacks one
  (allow_fp32_to_bf16; every op we emulate has an fp32 kernel on the SoCs that take bf16).
- ``mixed_bf16``: mixed with bf16 in place of fp16 (allow_mix_precision_bf16, v2 mixed_bfloat16).
- ``bf16``: every float op in bf16 (ATC's undocumented force_lowerprecision: "Match bf16 if original
  Dtype is fp32", GE op_dtype_selection_strategy_force_lowerprecision.cc).

The SoC's cube rules (``CubeRules``, precision/chips.py) decide what an fp32 cube op reads: C32 SoCs
take fp32 (HF32 per ``allow_hf32``), the others fp16.

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

from ascendpipe.precision.chips import ALLOW_HF32_DEFAULT, cube_kind
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
    "allow_mix_precision_bf16": "mixed_bf16",
    "allow_fp32_to_bf16": "fp32_to_bf16",
    "force_lowerprecision": "bf16",  # accepted by ATC's code, not in its docs (a warning says so)
}
# v2 is a renaming of v1 (GE fe_context_utils.cc L27-44, kPrecisionModeMap), plus the hif8 modes
MODE_V2_POLICY = {
    "fp16": "fp16",
    "origin": "origin",
    "mixed_float16": "mixed",
    "cube_fp16in_fp32out": "cube_fp16in_fp32out",
    "mixed_bfloat16": "mixed_bf16",
}
BF16_POLICIES = frozenset({"mixed_bf16", "fp32_to_bf16", "bf16"})


@dataclass(frozen=True)
class CubeRules:
    """What a cube op reads on the SoC: ``fp32_input`` (a C32 SoC: Atlas A2/A3), the ``--allow_hf32``
    switches there, and what force_fp32 makes a cube op read (precision/chips.py's choice)."""

    fp32_input: bool = False
    hf32: tuple[tuple[str, bool], ...] = tuple(ALLOW_HF32_DEFAULT.items())  # ('conv', True), ('matmul', False)
    force_fp32_reads: str = "float16"

    def fp32_read(self, op_type: str) -> str:
        """'hf32' where the SoC's cube reads this fp32 op's inputs as HF32, else '' (exact fp32)."""
        kind = cube_kind(op_type)
        return "hf32" if self.fp32_input and kind and dict(self.hf32).get(kind) else ""


@dataclass(frozen=True)
class NodeInfo:
    name: str
    op_type: str
    float_out: bool  # produces at least one float tensor
    inputs: tuple[str, ...] = ()  # data inputs (initializers left out)
    outputs: tuple[str, ...] = ()
    originals: tuple[tuple[str, str], ...] = ()  # (name, op_type) of original nodes it replaces
    ge_type: str = ""  # the GE kernel type ATC runs it as (precision/ge_types.py); "" = ge_type(op_type)

    @property
    def kernel_type(self) -> str:
        if self.ge_type:
            return self.ge_type
        from ascendpipe.precision.ge_types import ge_type

        return ge_type(self.op_type)


@dataclass(frozen=True)
class Decision:
    dtype: str  # 'float16' | 'bfloat16' | 'float32' | 'other': what the node computes in and writes
    reason: str
    reads_fp16: bool = False  # its float inputs are rounded to fp16 first
    read_as: str = ""  # 'bfloat16' | 'hf32': its float inputs are rounded to that format first

    @property
    def reads(self) -> str | None:
        """The format its float inputs are rounded to ('float16', 'bfloat16', 'hf32'), or None."""
        return "float16" if self.reads_fp16 else (self.read_as or None)


@dataclass
class Lists:
    white: frozenset[str]  # GE kernel types (precision/lists.py)
    black: frozenset[str]
    keep_names: frozenset[str] = frozenset()
    keep_types: frozenset[str] = frozenset()  # ONNX op types (resolved from keep_dtype's OpType:: entries)
    sources: dict[str, str] = field(default_factory=dict)  # GE type -> where its flag was read, or 'modify_mixlist'
    # node name -> (input dtype, output dtype, why) from --customize_dtypes (precision/list_remedies.py)
    custom: dict[str, tuple] = field(default_factory=dict)


def _keep_reason(node: NodeInfo, lists: Lists) -> str | None:
    for name, op_type in ((node.name, node.op_type), *node.originals):
        via = "" if name == node.name else f" (fused into '{node.name}')"
        if name in lists.keep_names:
            return f"keep_dtype: name '{name}'{via}"
        if op_type in lists.keep_types:
            return f"keep_dtype: OpType::{op_type}{via}"
    return None


def _mixed(node: NodeInfo, lists: Lists, producer_dtype: dict[str, str], low: str = "float16") -> Decision:
    """ATC's mixed modes: white ``low`` (fp16, or bf16 for mixed_bfloat16), black fp32, gray follows
    its first float data input (GE op_dtype_selection_strategy_allow_mix_precision_base.cc)."""
    ge = node.kernel_type
    where = lists.sources.get(ge, "default")
    name = "fp16" if low == "float16" else "bf16"
    as_low = {"reads_fp16": True} if low == "float16" else {"read_as": low}
    if ge in lists.black:
        return Decision("float32", f"mixed: black list: {ge} ({where})")
    if ge in lists.white:
        return Decision(low, f"mixed: white list: {ge} ({where})", **as_low)
    for tensor in node.inputs:
        upstream = producer_dtype.get(tensor)
        if upstream in ("float16", "bfloat16", "float32"):
            if upstream == low:
                return Decision(low, f"mixed: gray ({ge}), follows {name} input", **as_low)
            if upstream == "float32":
                return Decision("float32", f"mixed: gray ({ge}), follows fp32 input")
            other = {"reads_fp16": True} if upstream == "float16" else {"read_as": upstream}
            return Decision(upstream, f"mixed: gray ({ge}), follows {upstream} input", **other)
    return Decision("float32", f"mixed: gray ({ge}), no float data input")


def _fp32_cube(node: NodeInfo, cube: CubeRules, reason: str) -> Decision:
    """An fp32 cube op: exact fp32 in, or HF32 in where the SoC's --allow_hf32 switch for it is on."""
    read = cube.fp32_read(node.op_type)
    if read:
        return Decision("float32", f"{reason}; {cube_kind(node.op_type)}-class cube op reads HF32 (allow_hf32)",
                        read_as=read)
    return Decision("float32", reason)


def _customized(node: NodeInfo, custom: tuple, cube: CubeRules) -> Decision:
    """The dtypes customize_dtypes gives: its inputs read in one, its outputs written in the other (an
    unset side takes the set one's dtype, as the kernel's dtype rows pair them)."""
    read, out, why = custom
    read, out = read or out or "float32", out or read or "float32"
    if read == "float16":
        return Decision(out, why, reads_fp16=True)
    if read == "bfloat16":
        return Decision(out, why, read_as="bfloat16")
    hf32 = cube.fp32_read(node.op_type) if node.op_type in CUBE_OPS else ""
    return Decision(out, why + ("; reads HF32 (allow_hf32)" if hf32 else ""), read_as=hf32)


def decide(node: NodeInfo, policy: str, lists: Lists, producer_dtype: dict[str, str],
           cube_fp32_input: bool = False, cube: CubeRules | None = None) -> Decision:
    """``cube``: the SoC's cube rules (``cube_fp32_input`` alone: fp32 cube input, no HF32)."""
    cube = cube or CubeRules(fp32_input=cube_fp32_input, hf32=())
    if not node.float_out:
        return Decision("other", "no float output")
    if node.op_type in NON_FP16_OPS:
        return Decision("other", "integer/quantized op: no fp16 form")
    if node.op_type in CONTROL_FLOW_OPS:  # its outputs are its body's, rounded there
        return Decision("float32", "control flow: the ops of its bodies decide")
    is_cube = node.op_type in CUBE_OPS
    if node.name in lists.custom:  # customize_dtypes wins over the mode and keep_dtype (--customize_dtypes.md L18)
        return _customized(node, lists.custom[node.name], cube)
    if policy in ("origin", "fp32_to_bf16"):
        why = ("origin: keeps the original dtype" if policy == "origin"
               else "allow_fp32_to_bf16: keeps fp32 (the op has an fp32 kernel)")
        return _fp32_cube(node, cube, why) if is_cube else Decision("float32", why)
    keep = _keep_reason(node, lists)
    if keep:
        if is_cube and not cube.fp32_input:  # the highest precision the cube unit has: fp16 in, fp32 out
            return Decision("float32", f"{keep}; cube op reads fp16 (no fp32 cube input on this SoC)", True)
        return _fp32_cube(node, cube, keep) if is_cube else Decision("float32", keep)
    if node.op_type == "Constant" and policy in ("fp16", "bf16"):
        # a Constant is a weight to ATC (folded into a Const), as an initializer is: each fp16 reader
        # rounds its own copy, and an op kept in fp32 (keep_dtype) reads it in fp32. Rounded at the
        # source, a BN variance of 1e7 kept by keep_dtype still read inf (a Paddle export's weights).
        return Decision("float32", "Constant: a weight; rounded where an fp16 op reads it")
    if policy == "fp16":
        return Decision("float16", "force_fp16: every float op in fp16", True)
    if policy == "bf16":
        return Decision("bfloat16", "force_lowerprecision: every float op in bf16", read_as="bfloat16")
    if policy == "cube_fp16":
        if is_cube:
            return Decision("float16", "allow_fp32_to_fp16: cube op in fp16", True)
        return Decision("float32", "allow_fp32_to_fp16: non-cube op keeps fp32")
    if policy == "cube_fp16in_fp32out":
        if is_cube and cube.fp32_input and cube.force_fp32_reads != "float16":
            return _fp32_cube(node, cube, "cube_fp16in_fp32out: cube op reads fp32 (the fp32 kernel)")
        if is_cube:
            return Decision("float32", "cube_fp16in_fp32out: cube op reads fp16, writes fp32", True)
        return Decision("float32", "cube_fp16in_fp32out: fp32")
    if policy == "mixed":
        return _mixed(node, lists, producer_dtype)
    if policy == "mixed_bf16":
        return _mixed(node, lists, producer_dtype, "bfloat16")
    raise ValueError(f"unknown precision policy {policy!r}")


def plan(
    nodes: list[NodeInfo], policy: str, lists: Lists, graph_inputs: tuple[str, ...] = (), *,
    outer: dict[str, str] | None = None, cube_fp32_input: bool = False, cube: CubeRules | None = None,
) -> dict[str, Decision]:
    """Decisions for nodes given in topological order (gray ops need their producers first).

    ``graph_inputs`` are the float graph inputs: fp32, as the model's inputs are. ``outer``: the
    dtype of each tensor an enclosing graph made (a subgraph body reads them).
    """
    producer_dtype: dict[str, str] = {**(outer or {}), **{name: "float32" for name in graph_inputs}}
    decisions: dict[str, Decision] = {}
    for node in nodes:
        decision = decide(node, policy, lists, producer_dtype, cube_fp32_input, cube)
        decisions[node.name] = decision
        for tensor in node.outputs:
            producer_dtype[tensor] = decision.dtype
    return decisions
