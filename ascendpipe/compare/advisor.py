"""What to do about a failing op. Pure: rows (graph order) + precision plan + fusion rules -> advice.

Branches, checked in this order for the failing row:
1. overflow: the target holds inf/NaN or saturates fp16 -> keep the op in fp32 (``keep_dtype``), with
   its producer when the op's input already exceeds fp16's range, and any later op whose golden value
   exceeds it too (it would overflow next).
2. single bad op near the output while the final outputs pass -> likely harmless (msit's "single-point
   error ... may be caused by Ascend internal optimization").
3. a fused op failing while everything before it passes -> switch that fusion rule off.
4. loss without overflow -> ``keep_dtype`` the op, or the milder ``precision_mode: allow_fp32_to_fp16``.

Each advice item is ready to paste: the remedy file (name and content), the ``--set`` line and the
YAML lines that apply it to the convert stage.
"""

from __future__ import annotations

from ascendpipe.compare.metrics import FP16_MAX

FP16_MIN_NORMAL = 6.103515625e-05  # below this fp16 loses precision (subnormals), below 5.96e-8 it is 0


def describe_failure(
    rows: list[dict],
    position: int,
    *,
    precision_plan: dict | None = None,
    fusion_rules: dict[str, str] | None = None,
    producers: dict[str, list[str]] | None = None,
    stage: str = "convert",
) -> dict:
    """The JSON contract's ``first_failure`` object for ``rows[position]``."""
    row = rows[position]
    stage = stage.split("@", 1)[0]  # matrix variants share one stage definition
    plan_nodes = (precision_plan or {}).get("nodes") or {}
    if row["overflow"] == "target":
        kind, advice = "overflow", _overflow_advice(rows, position, producers, plan_nodes, stage)
    elif _likely_harmless(rows, position):
        kind, advice = "harmless", [_harmless_advice(row)]
    elif row.get("fused"):
        rule = (fusion_rules or {}).get(row["op_name"])
        rules = [rule] if rule else guess_rules(row["op_type"], _original_types(rows, row))
        kind, advice = "fusion", [_fusion_advice(row, rules, rule is not None, stage)]
    else:
        kind, advice = "precision_loss", _loss_advice(rows, position, plan_nodes, stage)
    return {
        "index": row["index"],
        "op_name": row["op_name"],
        "op_type": row["op_type"],
        "tensor": row["tensor"],
        "reason": "; ".join(row.get("reasons") or []) or "failed",
        "kind": kind,
        "advice": advice,
    }


def _exceeds_fp16(row: dict) -> bool:
    return (row.get("golden_abs_max") or 0.0) > FP16_MAX


def _ops_of(row: dict) -> list[str]:
    return list(row.get("golden_ops") or [row["op_name"]])


def _overflow_advice(rows, position, producers, plan_nodes, stage) -> list[dict]:
    row = rows[position]
    keep = _ops_of(row)
    by_op = {op: r for r in rows for op in _ops_of(r)}
    upstream: list[str] = []
    if producers is not None:
        for op in _ops_of(row):
            upstream += [p for p in producers.get(op, ()) if p in by_op and _exceeds_fp16(by_op[p])]
    else:  # no graph: the rows right before that already exceed fp16 stand for the producer
        i = position - 1
        while i >= 0 and _exceeds_fp16(rows[i]):
            upstream.insert(0, rows[i]["op_name"])
            i -= 1
    later = [op for r in rows[position + 1 :] if _exceeds_fp16(r) for op in _ops_of(r)]
    names = _unique(upstream + keep + later)
    if plan_nodes:  # an op the plan already keeps in fp32 needs no entry
        names = [n for n in names if plan_nodes.get(n, {}).get("dtype") != "float32"] or names
    why = f"op '{row['op_name']}' overflows fp16 (values beyond 65504 become inf)"
    if upstream:
        why += f"; its input from {', '.join(repr(u) for u in upstream)} already exceeds fp16's range"
    if later:
        why += f"; later ops {', '.join(repr(x) for x in _unique(later))} exceed it too"
    return [_keep_dtype_item(names, stage, why + ": keep them in fp32")]


def _likely_harmless(rows, position) -> bool:
    row = rows[position]
    outputs = [r for r in rows if r.get("is_output") and r["side"] == "both"]
    if row.get("is_output") or not outputs or any(r["failed"] for r in outputs):
        return False
    return not any(r["failed"] for r in rows[position + 1 :])


def _harmless_advice(row) -> dict:
    return {
        "kind": "harmless",
        "message": (f"only op '{row['op_name']}' fails and the final outputs pass: a single-point error, likely "
                    "harmless (e.g. a layout or internal optimisation difference); no change needed"),
    }


# onnxruntime optimizer (the emulator's fusion rule) by the original op types it merges.
_ORT_RULES = (
    ({"Conv", "BatchNormalization"}, "ConvBNFusion"),
    ({"MatMul", "BatchNormalization"}, "MatmulBNFusion"),
    ({"Conv", "Mul"}, "ConvMulFusion"),
    ({"MatMul", "Add"}, "MatMulAddFusion"),
    ({"Add", "Gelu"}, "BiasGeluFusion"),
    ({"Add", "Softmax"}, "BiasSoftmaxFusion"),
    ({"ReduceMean", "Sub", "Pow", "Sqrt", "Div"}, "LayerNormFusion"),
    ({"ReduceMean", "Pow", "Sqrt", "Div"}, "SimplifiedLayerNormFusion"),
    ({"Erf", "Mul", "Add", "Div"}, "GeluFusion"),
    ({"Pad", "Conv"}, "PadFusion"),
)
_ACTIVATIONS = {"Relu", "Clip", "Sigmoid", "Tanh", "LeakyRelu", "HardSigmoid"}


def guess_rules(fused_type: str, original_types: list[str]) -> list[str]:
    """The emulator's fusion rules (onnxruntime optimizer names) that merge these op types."""
    types = set(original_types)
    rules = [rule for needed, rule in _ORT_RULES if needed <= types]
    if types & _ACTIVATIONS and ("Conv" in types or fused_type == "FusedConv"):
        rules.append("ConvAddActivationFusion" if "Add" in types else "ConvActivationFusion")
    if types & _ACTIVATIONS and ("Gemm" in types or fused_type == "FusedGemm"):
        rules.append("GemmActivationFusion")
    if "Conv" in types and "Add" in types and not types & _ACTIVATIONS:
        rules.append("ConvAddFusion")
    return list(dict.fromkeys(rules))


def _original_types(rows: list[dict], row: dict) -> list[str]:
    by_op = {}
    for r in rows:
        by_op.setdefault(r.get("golden_op") or r["op_name"], r.get("golden_op_type") or r["op_type"])
    return [by_op[op] for op in row.get("golden_ops") or [] if op in by_op]


def _fusion_advice(row, rules: list[str], known: bool, stage: str) -> dict:
    originals = ", ".join(row.get("golden_ops") or [])
    rules = rules or [f"{row['op_type']}FusionPass"]
    named = ", ".join(f"'{r}'" for r in rules)
    message = f"fused op '{row['op_name']}' (from {originals}) fails while its inputs pass: switch fusion rule {named} off"
    if not known:
        message += " (rule inferred from the fused op types)"
    return {
        "kind": "fusion_switch",
        "message": message,
        "rules": rules,
        "file": {"name": "fusion_switch.cfg", "content": "".join(f"{r}:off\n" for r in rules)},
        "set": " ".join(f"--set stages.{stage}.params.fusion_switch.{r}=off" for r in rules),
        "yaml": f"stages:\n  {stage}:\n    params:\n      fusion_switch:\n" + "".join(f"        {r}: \"off\"\n" for r in rules),
    }


def _underflows(row: dict) -> bool:
    peak = row.get("golden_abs_max")
    return peak is not None and 0.0 < peak < FP16_MIN_NORMAL


def _loss_advice(rows, position, plan_nodes, stage) -> list[dict]:
    row = rows[position]
    ops = _ops_of(row)
    if plan_nodes and all(plan_nodes.get(op, {}).get("dtype") == "float32" for op in ops):
        return [{
            "kind": "implementation",
            "message": (f"op '{row['op_name']}' already runs in fp32 in the target, so the loss is not fp16 rounding: "
                        "try op_select_implmode high_precision for its type, or check its inputs"),
            "set": f"--set stages.{stage}.params.op_select_implmode=high_precision",
            "yaml": f"stages:\n  {stage}:\n    params:\n      op_select_implmode: high_precision\n",
        }]
    if _underflows(row):
        later = [op for r in rows[position + 1 :] if _underflows(r) for op in _ops_of(r)]
        names = _unique(ops + later)
        why = (f"op '{row['op_name']}' underflows fp16 (its values, at most {row['golden_abs_max']:.3g}, are below fp16's "
               f"normal range {FP16_MIN_NORMAL:.3g})")
        if later:
            why += f"; later ops {', '.join(repr(x) for x in _unique(later))} underflow too"
        keep = _keep_dtype_item(names, stage, why + ": keep them in fp32")
    else:
        keep = _keep_dtype_item(ops, stage, f"op '{row['op_name']}' loses accuracy in fp16 without overflowing: keep it in fp32")
    mode = {
        "kind": "precision_mode",
        "message": "or let ATC keep fp32 ops whose fp16 kernels lose accuracy: precision_mode allow_fp32_to_fp16",
        "set": f"--set stages.{stage}.params.precision_mode=allow_fp32_to_fp16",
        "yaml": f"stages:\n  {stage}:\n    params:\n      precision_mode: allow_fp32_to_fp16\n",
    }
    return [keep, mode]


def _keep_dtype_item(names: list[str], stage: str, message: str) -> dict:
    listed = ", ".join(names)
    yaml_list = "".join(f"        - {n}\n" for n in names)
    return {
        "kind": "keep_dtype",
        "message": message,
        "ops": names,
        "file": {"name": "keep_dtype.cfg", "content": "".join(f"{n}\n" for n in names)},
        "set": f"--set stages.{stage}.params.keep_dtype=[{listed}]",
        "yaml": f"stages:\n  {stage}:\n    params:\n      keep_dtype:\n{yaml_list}",
    }


def _unique(items: list[str]) -> list[str]:
    return list(dict.fromkeys(items))
