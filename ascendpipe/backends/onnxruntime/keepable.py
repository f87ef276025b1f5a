"""Whether keep_dtype on a node changes anything: its plan (the dtype it computes and reads in), and then
its kernel's values (``precision.kernels.remedy_effect``). fix proposes only nodes where both change, and
the precision plan says why a node is not (``keepable``, ``keep_changes_nothing``)."""

from __future__ import annotations

from ascendpipe.precision.policy import CubeRules, Decision, Lists, NodeInfo, decide

# Ops that only pass a tensor on (or hold bodies whose ops are counted): counting them says nothing
# about where the model computes, and keeping them changes nothing.
UNCOUNTED_OPS = frozenset({"Constant", "Identity", "If", "Loop", "Scan"})


def keep_changes(info: NodeInfo, decision: Decision, policy: str, op_lists: Lists, cube: CubeRules) -> bool:
    """Whether keep_dtype on this node would change what it computes (fix proposes only those)."""
    if info.op_type in UNCOUNTED_OPS:
        return False
    from dataclasses import replace

    kept = replace(op_lists, keep_names=op_lists.keep_names | {info.name})
    would = decide(info, policy, kept, {}, cube=cube)
    return decision.reason.startswith("keep_dtype") or (would.dtype, would.reads) != (decision.dtype, decision.reads)


def keep_moot_in_kernel(spec, decision: Decision, soc_version: str | None, dynamic: bool) -> str | None:
    """Why keep_dtype on this node changes none of its kernel's values (precision.kernels.remedy_effect:
    e.g. Exp on Ascend310, whose kernel casts an fp32 input to fp16), else None. A node already kept
    stays keepable: it is the user's own line."""
    if spec is None or decision.reason.startswith("keep_dtype"):
        return None
    from ascendpipe.precision.kernels import remedy_effect

    ge, kern = spec
    effect = remedy_effect(ge, soc_version=soc_version, remedy="keep_dtype", impl_mode=kern.impl_mode,
                           reads_fp16=decision.dtype == "float16", dynamic=dynamic)
    return None if effect.changes else effect.why
