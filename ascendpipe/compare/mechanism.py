"""Why an op diverges, and whether that divergence reaches an output. Pure: rows (graph order) + op edges.

A row beyond the thresholds is one of:
- ``overflow``: its values leave fp16's range (beyond 65504 they become inf, or ±65504 in saturation
  mode: ``compare.wording`` words it by the target's mode), its own or carried in; also
  a failing row that holds no inf where the golden of a member of its fused kernel (whose
  intermediates stay fp16) lies beyond 65504, or of the op whose target saturates at 65504: what fp16
  cannot hold overflowed, whatever the relative error of what comes out (``beyond_range``: 1/sqrt(inf)
  is a finite 0);
- ``underflow``: values (or a constant, such as the epsilon of ``Log(x + 1e-10)``) flushed to 0 or to
  fp16's subnormals; an op that turns a flushed 0 into inf (Log, Div, Reciprocal, Sqrt's gradient-free
  forms, Pow) shows it as a non-finite value, yet nothing overflowed;
- ``saturated_mask``: the golden holds ±float32's largest value or another fill constant beyond 65504
  (an additive attention mask, ``compare.fills``), which fp16 can only hold as ±inf (±65504 in saturation
  mode); a Softmax downstream absorbs it. Where the target holds the fill's fp16 image at every fill
  position, every other value passes and a Softmax reads it (through ops that only move, add or select
  values), the row is not a failure: ``contained`` says so (``fills``);
- ``cancellation``: the op subtracts near-equal operands, so their fp16 rounding is all that is left;
- ``quantisation``: a quantised tensor (a DequantizeLinear output, a QuantizeLinear output, or the
  float tensor a QuantizeLinear reads) judged against its QDQ pair's step: within it, not a failure;
- ``precision_loss``: fp16 rounding otherwise;
- ``hf32_rounding`` / ``bf16_rounding``: where the precision plan says the op (or the failing op feeding
  an fp32 op) reads HF32 (an fp32 Conv/MatMul on Atlas A2/A3, ``--allow_hf32``) or computes in bf16,
  the loss is that rounding, not fp16's.

A failure *reaches* a failing output when a chain of failing tensors (ops without a compared row, and
golden-only tensors the target fused away, count as links) joins it to that output; one that does not is *contained*, listed apart with why
(the op downstream that passes: a saturated mask absorbed by Softmax, ...). msaccucmp's and msit's
columns are not touched here: only our decision (``failed``) and these keys.
"""

from __future__ import annotations

from ascendpipe.compare import fills as fill_values
from ascendpipe.compare import wording
from ascendpipe.compare.metrics import FP16_MAX

FP16_MIN_NORMAL = 6.103515625e-05  # below: fp16 subnormals (fewer bits); below 2.98e-8: 0
SATURATED = 1.0e38  # |golden| this large is a sentinel (float32's max is 3.4e38), not a computed value
CANCELLATION_RATIO = 64.0  # operands 2^6 larger than the result: 6 of fp16's 11 bits are gone
ZERO_TO_INF_OPS = frozenset({"Log", "Div", "Reciprocal", "Sqrt", "Rsqrt", "Pow"})
CANCELLING_OPS = frozenset({"Sub", "Add", "Sum", "ReduceSum", "ReduceMean"})
QUANT_OPS = frozenset({"DequantizeLinear", "QuantizeLinear", "DynamicQuantizeLinear"})
# ops that only move, select or copy values: never the cause of a numeric divergence, never a remedy
MOVE_OPS = frozenset({
    "Reshape", "Transpose", "Pad", "Slice", "Squeeze", "Unsqueeze", "Concat", "Gather", "GatherElements",
    "GatherND", "Flatten", "Identity", "Split", "Expand", "Tile", "DepthToSpace", "SpaceToDepth", "Shape",
    "Size", "Constant", "ConstantOfShape", "Dropout", "Cast", "CastLike", "Compress", "ScatterND",
    "ScatterElements", "Trilu", "ReverseSequence", "SplitToSequence", "SequenceAt", "Input",
})


def ops_of(row: dict) -> list[str]:
    return list(row.get("golden_ops") or [row["op_name"]])


def op_types(rows: list[dict]) -> dict[str, str]:
    """Original op name -> its op type, as the rows know them."""
    types: dict[str, str] = {}
    for r in rows:
        kind = r.get("golden_op_type") or r.get("op_type") or ""
        for op in [r.get("golden_op") or r["op_name"]] if r.get("fused") else ops_of(r):
            types.setdefault(op, kind)
    return types


def is_move(op_type: str | None) -> bool:
    return (op_type or "") in MOVE_OPS


def consumers_of(producers: dict[str, list[str]]) -> dict[str, list[str]]:
    out: dict[str, list[str]] = {}
    for op, ins in producers.items():
        for p in ins:
            out.setdefault(p, []).append(op)
    return out


def compute_producers(producers: dict[str, list[str]], op: str, types: dict[str, str]) -> list[str]:
    """The ops computing ``op``'s inputs, looking through the ops that only move values."""
    found, stack, seen = [], list(producers.get(op, ())), set()
    while stack:
        p = stack.pop(0)
        if p in seen:
            continue
        seen.add(p)
        if is_move(types.get(p)):
            stack += list(producers.get(p, ()))
        else:
            found.append(p)
    return found


def golden_peaks(rows: list[dict]) -> dict[str, float]:
    """Each original op's largest golden |value| over the rows; a fused row's value is its last op's
    (``golden_op``), its members' come from their golden-only rows."""
    peak: dict[str, float] = {}
    for r in rows:
        for op in ([r["golden_op"]] if r.get("fused") and r.get("golden_op") else ops_of(r)):
            peak[op] = max(peak.get(op, 0.0), r.get("golden_abs_max") or 0.0)
    return peak


def beyond_range(rows: list[dict], precision_plan: dict | None = None) -> None:
    """A failing row without inf/NaN that overflowed all the same gets ``overflow`` 'target' and why:
    a fused kernel (its intermediates in fp16) one of whose members' golden exceeds 65504, or an op whose
    golden exceeds 65504 while its target saturates at 65504 (saturation mode's clip). An op the target's
    plan computes in bf16 or reads in bf16/HF32 (fp32's range) cannot overflow fp16's range: skipped."""
    plan_nodes = (precision_plan or {}).get("nodes") or {}
    peak = golden_peaks(rows)
    for r in rows:
        if (not r.get("failed") or r.get("overflow") == "target" or r.get("side") != "both" or r.get("pre")
                or r.get("float_tensor") is False or _saturated(r) or fill_values.is_fill(r)
                or _low_format(r, plan_nodes)):
            continue
        if r.get("fused"):
            over = [op for op in ops_of(r) if peak.get(op, 0.0) > FP16_MAX and not _saturated({"golden_abs_max": peak[op]})]
            if not over:
                continue
            top = max(over, key=lambda op: peak[op])
            why = (f"target overflows fp16 inside the fused kernel: '{top}' reaches {peak[top]:.3g} in the golden, "
                   "beyond fp16's 65504")
        else:
            golden, target = r.get("golden_abs_max") or 0.0, r.get("target_abs_max")
            # saturated at fp16's largest value (saturation mode clips there); a target merely smaller than
            # its golden may carry an upstream error instead
            if golden <= FP16_MAX or target is None or not FP16_MAX * (1 - 2.0 ** -11) <= target <= FP16_MAX:
                continue
            why = f"target overflows fp16: the golden reaches {golden:.3g}, the target saturates at 65504"
        r["overflow"] = "target"
        r["reasons"] = [why, *(r.get("reasons") or [])]


def _saturated(row: dict) -> bool:
    return (row.get("golden_abs_max") or 0.0) >= SATURATED


def _mask_like(row: dict) -> bool:
    """A sentinel (float32's largest) or a fill constant beyond fp16's range stored as its fp16 image."""
    return _saturated(row) or fill_values.is_fill(row)


# what carries a mask's fill to a Softmax unchanged in kind: ops that move or select values, and the
# additions of the scores (the fill stays the most negative value a Softmax reads, weighed 0 either way)
FILL_CARRIERS = MOVE_OPS | {"Add", "Sub", "Where", "Min", "Max", "Expand"}
FILL_ABSORBERS = frozenset({"Softmax", "LogSoftmax"})


def fills(rows: list[dict], producers: dict[str, list[str]] | None, mode: str | None = None) -> None:
    """A failing row whose golden holds a mask's fill beyond fp16's range (``row["fill"]``,
    ``compare.fills``) is no cause where the target holds the fill's fp16 image at every fill position,
    every other value passes the thresholds, the row is no graph output, and a Softmax reads it through
    ops that carry the fill unchanged in kind (``FILL_CARRIERS``): the Softmax weighs -65504 (or -inf) and
    the golden's -3.4e38 alike as 0. Such a row keeps ``failed`` (the thresholds' word, as msit's) and gets
    mechanism ``saturated_mask`` and ``contained`` (why): its divergence reaches no output (``reaching``
    treats it as passing), so no verdict, advice or ``also_failing`` names it. Without the graph nothing
    is contained (the side that shows the failure)."""
    if producers is None:
        return
    consumers = consumers_of(producers)
    types = op_types(rows)
    for r in rows:
        fill = r.get("fill")
        if (not r.get("failed") or r.get("pre") or r.get("is_output") or not fill_values.is_fill(r)
                or fill["rest"]["reasons"]):
            continue
        absorber = _fill_absorber(ops_of(r), consumers, types)
        if absorber is None:
            continue
        rest = fill["rest"]
        others = ("; every other value matches (cosine {:.6g}, relative Euclidean {:.3g})".format(
            rest["exact_cosine"], rest["relative_euclidean"]) if rest["compared"] and rest["exact_cosine"] is not None
            else "")
        r.update(mechanism="saturated_mask", contained=(
            f"a mask fill: the golden's {fill['value']:.3g} at {fill['count']} position"
            f"{'s' if fill['count'] != 1 else ''} is stored as {_held(fill['stored_as'])} in fp16"
            f"{wording.mode_note(mode)}"
            f"{others}; '{absorber[0]}' ({absorber[1]}) absorbs it: it weighs both as 0, so it is no cause"))


def _held(value: float) -> str:
    if value != value:  # NaN: never a fill's image (is_fill refuses it)
        return "NaN"
    if value in (float("inf"), float("-inf")):
        return "-inf" if value < 0 else "inf"
    return f"{value:.6g}"


def _fill_absorber(ops: list[str], consumers: dict[str, list[str]], types: dict[str, str]) -> tuple | None:
    """(op, type) of the first Softmax reached from ``ops`` through ``FILL_CARRIERS``, or None."""
    seen, frontier = set(ops), list(ops)
    while frontier:
        op = frontier.pop(0)
        for c in consumers.get(op, ()):
            if c in seen:
                continue
            seen.add(c)
            kind = types.get(c)
            if kind in FILL_ABSORBERS:
                return c, kind
            if kind in FILL_CARRIERS:
                frontier.append(c)
    return None


def _rows_by_op(rows: list[dict]) -> dict[str, int]:
    """Each op's first row, a compared one before a golden-only one (a fused kernel's member has both)."""
    by_op: dict[str, int] = {}
    for i, r in enumerate(rows):
        for op in ops_of(r):
            j = by_op.get(op)
            if j is None or (rows[j].get("side") == "golden_only" and r.get("side") != "golden_only"):
                by_op[op] = i
    return by_op


def _within_step(row: dict, step: float | None, half: bool) -> bool:
    if not step or row.get("side") != "both" or row.get("max_abs_error") is None:
        return False
    if row.get("target_nan") or row.get("target_inf"):
        return False
    peak = row.get("golden_abs_max") or 0.0
    # a float tensor may also carry fp16's rounding of its largest value (2^-11 relative)
    allowance = (0.5 if half else 1.0) * step + (peak * 2.0 ** -10 if row.get("float_tensor") else 0.0)
    return row["max_abs_error"] <= allowance * (1 + 1e-6)


def quantisation(rows: list[dict], producers: dict[str, list[str]] | None) -> None:
    """Judge quantised tensors against their step: a DequantizeLinear output within one step (its
    ``quant_step``, read from the golden's grid), an integer QuantizeLinear output within one unit, a
    float tensor a QuantizeLinear reads within half the pair's step. Such a row is not a failure: it
    gets ``contained`` (why) and mechanism ``quantisation``."""
    by_op = _rows_by_op(rows)
    consumers = consumers_of(producers or {})
    types = op_types(rows)
    for r in rows:
        kind = r.get("golden_op_type") or r.get("op_type")
        step, half = None, False
        if kind == "DequantizeLinear":
            step = r.get("quant_step")
        elif kind in ("QuantizeLinear", "DynamicQuantizeLinear") and r.get("float_tensor") is False:
            step = 1.0
        elif r.get("float_tensor") and producers is not None:
            # the float tensor a QuantizeLinear reads: its DequantizeLinear partner's step
            for q in (c for op in ops_of(r) for c in consumers.get(op, ()) if types.get(c) == "QuantizeLinear"):
                steps = [rows[by_op[d]].get("quant_step") for d in consumers.get(q, ())
                         if types.get(d) == "DequantizeLinear" and d in by_op]
                steps = [s for s in steps if s]
                if steps:
                    step, half = min(steps), True
                    break
        if step is None:
            continue
        r["quant_step"] = step
        if not (r.get("failed") and r.get("overflow") != "target"):
            continue
        if _within_step(r, step, half):
            r.update(failed=False, mechanism="quantisation",
                     contained=(f"within {'half ' if half else ''}one quantisation step ({step:.3g}) of its QDQ pair: "
                                "not a failure"))
        else:
            r["mechanism"] = "quantisation"


def _low_format(row: dict, plan_nodes: dict) -> str | None:
    """'hf32' / 'bfloat16' where the plan says the row's op reads or computes in that format."""
    for op in ops_of(row):
        node = plan_nodes.get(op) or {}
        if node.get("reads") in ("hf32", "bfloat16"):
            return node["reads"]
        if node.get("dtype") == "bfloat16":
            return "bfloat16"
    return None


def _fp32_op(row: dict, plan_nodes: dict) -> bool:
    nodes = [plan_nodes.get(op) for op in ops_of(row)]
    return bool(nodes) and all(n and n.get("dtype") == "float32" and not n.get("reads_fp16") for n in nodes)


def classify(rows: list[dict], producers: dict[str, list[str]] | None, precision_plan: dict | None = None) -> None:
    """Set ``mechanism`` on every failing row (see the module docstring)."""
    plan_nodes = (precision_plan or {}).get("nodes") or {}
    by_op = _rows_by_op(rows)
    types = op_types(rows)
    for i, r in enumerate(rows):
        if not r.get("failed") or r.get("mechanism") or r.get("pre"):
            continue
        inputs = _input_rows(rows, i, producers, by_op, types)
        kind = r.get("golden_op_type") or r.get("op_type")
        peak = fill_values.value_peak(r)  # a mask fill's other values: the fill itself is no computed value
        carried = [x.get("mechanism") for x in inputs if x.get("overflow") == "target" and x.get("mechanism")
                   and not x.get("contained")]
        # a fill's fp16 image alone (the other values in range) is no overflow of what this row computes
        if r.get("overflow") == "target" and not fill_values.fill_only(r):
            if _mask_like(r) or any(_mask_like(x) and x.get("overflow") == "target" and not x.get("contained")
                                    for x in inputs):
                r["mechanism"] = "saturated_mask"
            elif peak > FP16_MAX:
                r["mechanism"] = "overflow"
            elif carried:  # inf/NaN carried in from upstream: the cause is upstream's
                r["mechanism"] = carried[0]
            elif kind in ZERO_TO_INF_OPS and any(x.get("flushed") for x in inputs):
                r["mechanism"] = "underflow"
            else:
                r["mechanism"] = "overflow"  # an fp16 intermediate inside the op
        elif _mostly_flushed(r) or 0.0 < peak < FP16_MIN_NORMAL:
            r["mechanism"] = "underflow"
        elif kind in CANCELLING_OPS and peak > 0 and any(
                fill_values.value_peak(x) >= CANCELLATION_RATIO * peak for x in inputs if not x.get("contained")):
            r["mechanism"] = "cancellation"
        else:
            low = _low_format(r, plan_nodes)
            if low is None and _fp32_op(r, plan_nodes):  # an fp32 op carries what its failing input lost
                low = next((LOW_FORMAT_OF[x["mechanism"]] for x in inputs if x.get("failed")
                            and x.get("mechanism") in LOW_FORMAT_OF), None)
            r["mechanism"] = {"hf32": "hf32_rounding", "bfloat16": "bf16_rounding"}.get(low, "precision_loss")


LOW_FORMAT_OF = {"hf32_rounding": "hf32", "bf16_rounding": "bfloat16"}
FLUSHED_SHARE = 0.01  # a row whose failure is an underflow: at least this share of its values flushed to 0


def _mostly_flushed(row: dict) -> bool:
    size = 1
    for d in row.get("shape") or []:
        size *= int(d) if isinstance(d, int) and d > 0 else 1
    return (row.get("flushed") or 0) >= max(1, FLUSHED_SHARE * size)


def _input_rows(rows, i, producers, by_op, types) -> list[dict]:
    if producers is None:
        return [rows[i - 1]] if i > 0 else []
    own = set(ops_of(rows[i]))
    found = []
    for op in own:
        for p in compute_producers(producers, op, types):
            if p not in own and p in by_op:
                found.append(rows[by_op[p]])
    return found


def reaching(rows: list[dict], producers: dict[str, list[str]] | None) -> tuple[set[int], bool | None]:
    """(positions of the failing rows whose divergence reaches a failing output, whether every compared
    output passes: None when no output was compared). Without op edges, every failing row before a
    failing output reaches it (graph order)."""
    # a device tensor not laid out as the golden (acl_dump's not_compared) has no number: not a compared output
    # an output compared by statistics only counts where they fail it; unfailed, it is not known to pass
    outputs = [i for i, r in enumerate(rows) if r.get("is_output") and r.get("side") == "both"
               and not r.get("not_compared") and not (r.get("stats_only") and not r.get("failed"))]
    # a row already contained (a mask fill absorbed downstream: ``fills``) passes on nothing
    failing = {i for i, r in enumerate(rows) if r.get("failed") and not r.get("contained")}
    if not outputs:
        return failing, None
    bad_outputs = [i for i in outputs if i in failing]
    if not bad_outputs:
        return set(), True
    if producers is None:
        last = max(bad_outputs)
        return {i for i in failing if i <= last}, False
    by_op = _rows_by_op(rows)
    reach_ops: set[str] = set()
    stack = [op for i in bad_outputs for op in ops_of(rows[i])]
    while stack:
        op = stack.pop()
        if op in reach_ops:
            continue
        row = by_op.get(op)
        # a passing tensor: the divergence does not come through it (a golden-only row is no evidence either way:
        # the target has no tensor there, fused into a kernel; like an op without a row, it is a link)
        if row is not None and row not in failing and rows[row].get("side") != "golden_only":
            continue
        reach_ops.add(op)
        stack += list(producers.get(op, ()))
    return {i for i in failing if set(ops_of(rows[i])) & reach_ops}, False


def _absorber(rows, i, producers, by_op) -> dict | None:
    """The first op downstream of ``rows[i]`` whose row passes (graph order), if the graph says."""
    if producers is None:
        return None
    consumers = consumers_of(producers)
    seen, frontier, found = set(ops_of(rows[i])), list(ops_of(rows[i])), []
    while frontier:
        op = frontier.pop(0)
        for c in consumers.get(op, ()):
            if c in seen:
                continue
            seen.add(c)
            j = by_op.get(c)
            if j is not None and not rows[j].get("failed") and rows[j].get("side") != "golden_only":
                found.append(j)
            else:
                frontier.append(c)
    return rows[min(found)] if found else None


def contain(rows: list[dict], producers: dict[str, list[str]] | None, reach: set[int], mode: str | None = None) -> None:
    """``contained`` (why) on each failing row whose divergence does not reach a failing output; ``mode``:
    the target's overflow mode (``compare.wording``), for what a mask's value becomes."""
    by_op = _rows_by_op(rows)
    for i, r in enumerate(rows):
        r["reaches_output"] = i in reach
        if not r.get("failed") or i in reach or r.get("pre") or r.get("contained"):
            continue  # (a row ``fills`` contained keeps its why)
        absorber = _absorber(rows, i, producers, by_op)
        where = (f"'{absorber['op_name']}' ({absorber['op_type']}) downstream passes" if absorber
                 else "no failing output depends on it")
        if r.get("mechanism") == "saturated_mask":
            why = (f"a saturated mask value ({r.get('golden_abs_max') or 0:.3g}): {wording.mask_value(mode)}; "
                   + (f"'{absorber['op_name']}' ({absorber['op_type']}) absorbs it and passes" if absorber
                      else "no failing output depends on it"))
        else:
            why = f"its error does not reach an output: {where}"
        r["contained"] = why


def contained_items(rows: list[dict]) -> list[dict]:
    """result.json's ``contained``: rows beyond thresholds (or within a quantisation step) that are not
    failures, each with its mechanism and why."""
    return [{"index": r["index"], "op_name": r["op_name"], "op_type": r["op_type"], "tensor": r["tensor"],
             "mechanism": r.get("mechanism"), "why": r["contained"]}
            for r in rows if r.get("contained")]


def annotate(rows: list[dict], producers: dict[str, list[str]] | None,
             precision_plan: dict | None = None, mode: str | None = None) -> tuple[set[int], bool | None]:
    """Quantisation steps, mask fills, mechanisms, reach and containment on ``rows`` (in place); returns
    ``reaching``'s answer. ``precision_plan``: the target's (bf16 / HF32 ops get their own mechanism);
    ``mode``: the target's overflow mode (default: the plan's; ``compare.wording``)."""
    mode = mode or wording.overflow_mode(precision_plan)
    for r in rows:
        r.setdefault("mechanism", None)
        r.setdefault("contained", None)
    quantisation(rows, producers)
    fills(rows, producers, mode)
    beyond_range(rows, precision_plan)
    classify(rows, producers, precision_plan)
    reword(rows, mode)
    reach, outputs_pass = reaching(rows, producers)
    contain(rows, producers, reach, mode)
    return reach, outputs_pass


MECHANISM_TEXT = {  # mode-neutral; ``mechanism_text`` words overflow and masks by the target's mode
    "overflow": f"overflow ({wording.beyond_fp16(None)})",
    "underflow": "underflow (values or a constant flushed to 0 or subnormal in fp16)",
    "saturated_mask": f"saturated mask ({wording.mask_value(None)})",
    "cancellation": "cancellation (near-equal operands subtracted: their fp16 rounding is what is left)",
    "quantisation": "quantisation error beyond its QDQ step",
    "precision_loss": "fp16 rounding",
    "hf32_rounding": "HF32 rounding (an fp32 Conv/MatMul reads its inputs with an 11-bit mantissa on Atlas A2/A3: "
                     "allow_hf32)",
    "bf16_rounding": "bf16 rounding (bf16 keeps fp32's range with an 8-bit mantissa)",
}


def mechanism_text(name: str | None, mode: str | None = None) -> str | None:
    """The words for a mechanism, an overflow's and a mask's by the target's overflow mode."""
    if name == "overflow":
        return f"overflow ({wording.beyond_fp16(mode)})"
    if name == "saturated_mask":
        return f"saturated mask ({wording.mask_value(mode)})"
    return MECHANISM_TEXT.get(name or "")


def reword(rows: list[dict], mode: str | None = None) -> None:
    """A non-finite (or saturated) target caused by an underflow or a saturated mask is not said to be an
    overflow; what the target holds is read from its values."""
    for r in rows:
        reasons = r.get("reasons") or []
        if reasons and reasons[0].startswith("target overflows fp16") and r.get("mechanism") in ("underflow",
                                                                                                 "saturated_mask"):
            held = "inf/NaN" if r.get("target_nan") or r.get("target_inf") else "±65504 (saturated)"
            reasons[0] = f"target is {held} where the golden is finite: " + mechanism_text(r["mechanism"], mode)


def divergence(row: dict) -> dict:
    """result.json's ``first_divergence``: the first op beyond thresholds in msit's order, reaching an output or not."""
    return {"index": row["index"], "op_name": row["op_name"], "op_type": row["op_type"], "tensor": row["tensor"],
            "reason": "; ".join(row.get("reasons") or []) or "failed", "mechanism": row.get("mechanism"),
            "reaches_output": bool(row.get("reaches_output")), "contained": row.get("contained")}


def contained_tail(rows: list[dict]) -> str:
    contained = sum(1 for r in rows if r.get("contained"))
    if not contained:
        return ""
    return f"; {contained} op{'s' if contained != 1 else ''} beyond thresholds contained (listed apart)"


def verdict(rows: list[dict], failures: list[dict], outputs_pass: bool | None, mode: str | None = None) -> str:
    """One line, what matters first: do the outputs pass; if not, the failure that reaches them."""
    tail = contained_tail(rows)
    paired = [r for r in rows if r.get("side") == "both"]
    unread = [r for r in paired if r.get("not_compared")]
    if paired and len(unread) == len(paired) and not failures:
        return (f"nothing could be compared: all {len(paired)} paired tensors were not compared "
                f"(first: #{unread[0]['index']} {unread[0]['op_name']}, {unread[0]['not_compared']}): no verdict")
    if unread:
        tail += f"; {len(unread)} tensor{'s' if len(unread) != 1 else ''} not compared (device layout)"
    summarised = [r for r in paired if r.get("stats_only")]
    if summarised:
        tail += (f"; {len(summarised)} tensor{'s' if len(summarised) != 1 else ''} compared by statistics only, not "
                 "in full (disk budget)")
    if failures:
        first = failures[0]
        what = mechanism_text(first.get("mechanism"), mode) or first.get("kind", "failed")
        row = next((r for r in rows if r["index"] == first["index"]), {})
        if row.get("reaches_output") is False:  # an own overflow whose error is absorbed on the way (runner)
            return (f"outputs fail: first failure #{first['index']} {first['op_name']} ({first['op_type']}), {what}: "
                    f"it overflows on its own, upstream of the failure reaching them, and its error is absorbed on the "
                    f"way{tail}")
        return (f"outputs fail: first failure reaching them #{first['index']} {first['op_name']} ({first['op_type']}), "
                f"{what}{tail}")
    if outputs_pass:
        return "every output passes" + tail
    if outputs_pass is None:
        return "no output was compared: no verdict on the outputs" + tail
    return "outputs fail, but no compared op before them fails the thresholds" + tail
