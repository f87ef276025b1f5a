"""What to do about a failing op. Pure: rows (graph order) + precision plan + fusion rules -> advice.

Branches, checked in this order for the failing row (its ``mechanism``: see ``compare.mechanism``):
0. a preprocessing row (the AIPP check) carries its own advice (``advice_ready``).
0a. underflow into Log/Div/Sqrt/Reciprocal/Pow: keep the op adding the epsilon and its consumer, or raise the epsilon.
0b. cancellation: keep the op and the ops computing its operands.
1. overflow: the target holds inf/NaN or saturates fp16 -> keep the op in fp32 (``keep_dtype``), with
   its producers whose output already exceeds fp16's range, and every consumer whose golden input
   exceeds it (a kept op's fp32 output is cast to fp16 for an fp16 consumer: it would overflow next),
   walking forward until the golden values are back in range (``overflow_chain``).
2. single bad op near the output while the final outputs pass -> likely harmless (msit's "single-point
   error ... may be caused by Ascend internal optimization").
3. a fused op failing while everything before it passes -> switch that ATC fusion pass off; a pass the
   device cannot switch off (the catalogue's ``switchable``) is never proposed: keep_dtype on its ops instead.
   A UB fusion is never proposed either: its members keep their own dtypes inside the fused kernel (GE's FE
   inserts the Casts before UB fusion runs, docs/emulation.md), so keep_dtype reaches them and its switch
   changes no value.
4. loss without overflow -> ``keep_dtype`` the op, or the milder ``precision_mode: allow_fp32_to_fp16``.
5. after 0a, 0b, 1 and 4 (``compare.impl_advice``): where the failing op's kernel computes in more precision
   under high_precision on the target's SoC (LayerNorm, ReduceMeanD on Ascend310), an ``impl_mode`` item
   (an op_precision_mode file); where neither keep_dtype nor any impl mode changes its kernel there, a plain
   ``kernel`` statement saying so, and no keep_dtype item keeping only that op.

Each advice item is ready to paste: the remedy file (name and content), the ``--set`` line and the
YAML lines that apply it to the convert stage, or to its matrix variant (``paste``). A pasted
keep_dtype list or fusion_switch mapping replaces the stage's, so it carries the target's entries.
"""

from __future__ import annotations

from ascendpipe.compare import impl_advice, mechanism, paste, wording
from ascendpipe.compare.mechanism import FP16_MIN_NORMAL  # below it fp16 loses precision (subnormals); below 5.96e-8 it is 0
from ascendpipe.compare.metrics import FP16_MAX
from ascendpipe.precision.impl_remedy import boundary_holds


def describe_failure(
    rows: list[dict],
    position: int,
    *,
    precision_plan: dict | None = None,
    fusion_rules: dict[str, str] | None = None,
    producers: dict[str, list[str]] | None = None,
    stage: str = "convert",
    target_settings: dict | None = None,
    convert_params: set[str] | None = None,
) -> dict:
    """The JSON contract's ``first_failure`` object for ``rows[position]``.

    ``stage``: the target's convert stage, e.g. ``convert@fp16`` (paste lines go under its matrix
    variant). ``target_settings``: the target's convert.json; its keep_dtype and fusion_switch are
    carried into the advice, because a pasted list or mapping replaces the stage's. ``convert_params``: the params the convert kind has; advice for
    any other is left out (default: the convert kind's schema)."""
    row = rows[position]
    plan_nodes = (precision_plan or {}).get("nodes") or {}
    known = convert_params if convert_params is not None else _convert_params()
    settings = target_settings or {}
    existing_keep = [str(k) for k in settings.get("keep_dtype") or []]
    mode = settings.get("precision_mode") or (precision_plan or {}).get("precision_mode")
    cause = row.get("mechanism")
    overflow_mode = wording.overflow_mode(precision_plan, settings)  # what the chip stores for an overflow
    if row.get("advice_ready") is not None:  # a preprocessing row (AIPP) brings its own advice
        kind, advice = row.get("failure_kind", "preprocessing"), list(row["advice_ready"])
    elif cause == "underflow" and (row.get("golden_op_type") or row["op_type"]) in mechanism.ZERO_TO_INF_OPS:
        kind, advice = "underflow", [_zero_to_inf_advice(rows, position, producers, plan_nodes, stage, existing_keep,
                                                         overflow_mode)]
    elif cause == "cancellation":
        kind, advice = "cancellation", _cancellation_advice(rows, position, producers, plan_nodes, stage, existing_keep)
    elif row["overflow"] == "target":
        kind, advice = "overflow", _overflow_advice(rows, position, producers, plan_nodes, stage, existing_keep,
                                                    overflow_mode)
        if cause == "saturated_mask":  # the mask's own value is what fp16 cannot hold
            advice[0]["message"] += ("; or give the mask a value fp16 holds (e.g. -1e4 instead of float32's lowest): "
                                     "Softmax weighs it as 0 all the same")
    elif cause in ("hf32_rounding", "bf16_rounding") and not _likely_harmless(rows, position):
        kind, advice = cause, _low_format_advice(rows, position, cause, plan_nodes, stage, existing_keep, known, settings)
    elif _likely_harmless(rows, position):
        kind, advice = "harmless", [_harmless_advice(row)]
    elif row.get("fused") and _value_changing(row, rows, fusion_rules):
        rule = (fusion_rules or {}).get(row["op_name"])
        rules = rule.split("+") if rule else guess_rules(row["op_type"], _original_types(rows, row))
        rules = [r for r in rules if _changes_values(r)]  # a UB fusion changes no value: never proposed
        fixed = [r for r in rules if not _switchable(r)]
        rules = [r for r in rules if _switchable(r)]
        if rules or not fixed:
            kind, advice = "fusion", [_fusion_advice(row, rules, rule is not None, stage, settings.get("fusion_switch"),
                                                     fixed=fixed)]
        else:  # the device cannot switch the pass off: keep the fused op's ops in fp32 instead
            kind, advice = "fusion", [_unswitchable_advice(row, fixed, stage, existing_keep)]
    else:
        kind, advice = "precision_loss", _loss_advice(rows, position, plan_nodes, stage, existing_keep, known, mode)
    if kind in ("overflow", "precision_loss", "underflow", "cancellation"):  # what the kernel itself can change
        peaks = mechanism.golden_peaks(rows)
        in_range = all(boundary_holds(op, peaks, producers) for op in _ops_of(row)) and not _exceeds_fp16(row)
        advice = impl_advice.apply(advice, row, _unique([row["op_name"], *_ops_of(row)]), precision_plan, settings,
                                   stage, known, in_range=in_range,
                                   rebuild_keep=lambda item, names, added: _keep_dtype_item(
                                       names, stage, item["message"], added=added, existing=existing_keep))
    return {
        "index": row["index"],
        "op_name": row["op_name"],
        "op_type": row["op_type"],
        "tensor": row["tensor"],
        "reason": "; ".join(row.get("reasons") or []) or "failed",
        "kind": kind,
        "mechanism": cause,
        "advice": advice,
    }


def own_breaks(rows: list[dict], producers: dict[str, list[str]] | None, eligible: set[int]) -> list[int]:
    """Positions of the failing rows (among ``eligible``: those reaching a failing output) whose own
    computation breaks: an overflow origin (``order.overflow_origins``), or a failing row none of whose
    compute inputs fails. Fixing another op leaves each of them failing."""
    from ascendpipe.compare import order

    origins = set(order.overflow_origins(rows, producers))
    by_op = {op: i for i, r in enumerate(rows) for op in _ops_of(r)}
    types = mechanism.op_types(rows)
    found = []
    for i in sorted(eligible):
        r = rows[i]
        if not r.get("failed") or r.get("pre") or r.get("contained"):
            continue
        if r.get("overflow") == "target":  # inf/NaN: its own only when it is an origin
            if i in origins:
                found.append(i)
            continue
        if producers is None:
            inputs = [i - 1] if i > 0 else []
        else:
            inputs = [by_op[p] for op in _ops_of(r) for p in mechanism.compute_producers(producers, op, types)
                      if p in by_op and p not in _ops_of(r)]
        if not any(rows[j].get("failed") for j in inputs):
            found.append(i)
    return found


def note_unresolved(failure: dict, rows: list[dict], producers: dict[str, list[str]] | None,
                    eligible: set[int]) -> None:
    """Say where the advice cannot restore the outputs: another op reaching them breaks on its own
    (``own_breaks``) and the advice does not keep it. Sets ``restores`` (False, or None: not known
    without running it) and ``also_failing``; the first advice item's message says so. compare does not
    run the emulation with its advice applied: ``verified`` is False (``ascendpipe fix`` verifies)."""
    kept = {op for item in failure.get("advice") or [] for op in item.get("ops") or item.get("layers") or []}
    first = failure["index"]
    others = []
    for i in own_breaks(rows, producers, eligible):
        ops = set(_ops_of(rows[i]))
        if i == first or ops <= kept:
            continue
        others.append({"index": rows[i]["index"], "op_name": rows[i]["op_name"], "op_type": rows[i]["op_type"],
                       "mechanism": rows[i].get("mechanism")})
    failure["verified"] = False
    failure["restores"] = False if others else None
    failure["also_failing"] = others
    advice = failure.get("advice") or []
    if others and advice and advice[0].get("kind") not in ("harmless",):
        shown = ", ".join(f"'{o['op_name']}' ({o['op_type']}, {o['mechanism'] or 'failed'})" for o in others[:3])
        more = f" and {len(others) - 3} more" if len(others) > 3 else ""
        advice[0]["message"] += (f". Not enough on its own: {shown}{more} also break{'s' if len(others) == 1 else ''} "
                                 "on {} own and reach{} the outputs, which stay wrong until {} fixed too "
                                 "(`ascendpipe fix` searches and verifies a whole keep set in the emulation)").format(
            "its" if len(others) == 1 else "their", "es" if len(others) == 1 else "",
            "it is" if len(others) == 1 else "they are")
        advice[0]["restores"] = False


def note_blocked(failure: dict, why: str) -> None:
    """No keep_dtype set can restore the outputs on this SoC (``compare.cube.cube_blocked``): say so on
    the keep_dtype advice, never printed as a fix."""
    failure["restores"] = False
    failure["blocked"] = why
    for item in failure.get("advice") or []:
        if item.get("kind") == "keep_dtype":
            item["message"] += f". It cannot restore the outputs alone: {why}"
            item["restores"] = False


def _float_names(rows, plan_nodes, names: list[str]) -> list[str]:
    skip = non_float_ops(rows, plan_nodes)
    return [n for n in names if n not in skip]


def _zero_to_inf_advice(rows, position, producers, plan_nodes, stage, existing_keep, mode=None) -> dict:
    """An underflow into Log/Div/Sqrt/Reciprocal: the op feeding it (the one adding the epsilon) flushed
    to 0 in fp16, and the op turned 0 into inf. Keep both in fp32, or raise the epsilon."""
    row = rows[position]
    types = mechanism.op_types(rows)
    ops = _ops_of(row)
    feeding = [p for op in ops for p in mechanism.compute_producers(producers or {}, op, types) if p not in ops]
    flushed = {op for r in rows if r.get("flushed") for op in _ops_of(r)}
    if producers is None and position > 0:
        feeding = _ops_of(rows[position - 1])
    feeding = [p for p in feeding if p in flushed] or feeding
    names = _float_names(rows, plan_nodes, _unique(feeding + ops))
    source = ", ".join(repr(f) for f in feeding) or "its input"
    message = (f"op '{row['op_name']}' ({row['op_type']}) reads 0 where the golden is small but not 0: fp16 flushed "
               f"{source}'s values below {FP16_MIN_NORMAL:.3g} (an epsilon such as 1e-10 too) to 0 or to subnormals, "
               f"and {wording.zero_to_inf(row['op_type'], mode)}: an underflow, not an overflow. Keep the op adding "
               "the epsilon "
               f"and its consumer in fp32, or raise the epsilon to at least {FP16_MIN_NORMAL:.3g} (fp16's smallest "
               "normal value)")
    return _keep_dtype_item(_unique(list(existing_keep or []) + names), stage, message, added=names,
                            existing=existing_keep)


def _cancellation_advice(rows, position, producers, plan_nodes, stage, existing_keep) -> list[dict]:
    """Near-equal operands subtracted: the operands' fp16 rounding is the result's error. Keep the op and
    the ops computing its operands in fp32 (the difference must be taken of fp32 values)."""
    row = rows[position]
    types = mechanism.op_types(rows)
    ops = _ops_of(row)
    feeding = [p for op in ops for p in mechanism.compute_producers(producers or {}, op, types) if p not in ops]
    names = _float_names(rows, plan_nodes, _unique(feeding + ops))
    message = (f"op '{row['op_name']}' ({row['op_type']}) cancels: its operands are far larger than its result "
               f"(at most {row.get('golden_abs_max') or 0:.3g}), so their fp16 rounding is all that is left: keep it "
               "and the ops computing its operands in fp32")
    return [_keep_dtype_item(_unique(list(existing_keep or []) + names), stage, message, added=names,
                             existing=existing_keep)]


def _convert_params() -> set[str]:
    from ascendpipe.stages.convert import ConvertKind

    return set(ConvertKind.params_schema["properties"])


def _exceeds_fp16(row: dict) -> bool:
    return (row.get("golden_abs_max") or 0.0) > FP16_MAX


def _ops_of(row: dict) -> list[str]:
    return list(row.get("golden_ops") or [row["op_name"]])


def overflow_chain(rows: list[dict], position: int, producers: dict[str, list[str]] | None) -> tuple[list, list, list]:
    """(upstream, ops, downstream) to keep in fp32 for the overflow at ``rows[position]``.

    A kept op still hands its fp32 output to fp16 consumers through a cast, so keeping only the
    overflowing op moves the overflow one op down. Keep: the op; its producers (transitively) whose
    golden output already exceeds fp16's range; and, walking forward, every consumer whose golden
    *input* from a kept op exceeds it, until the golden values are back in range.
    Without a graph, neighbouring rows in graph order stand for producers and consumers."""
    ops = _ops_of(rows[position])
    peak: dict[str, float] = {}
    for r in rows:
        # a fused row's golden value is its last op's; the golden-only rows of its members say the rest
        for op in ([r["golden_op"]] if r.get("fused") and r.get("golden_op") else _ops_of(r)):
            peak[op] = max(peak.get(op, 0.0), r.get("golden_abs_max") or 0.0)
    over = lambda op: peak.get(op, 0.0) > FP16_MAX
    if rows[position].get("fused") and producers is not None and any(over(op) for op in ops):
        members = set(ops)
        ops = [op for op in ops if over(op)]  # the members whose own value leaves fp16's range
        for op in list(ops):  # and the members that read them (inside the kernel)
            ops += [m for m, ins in producers.items() if m in members and op in ins and m not in ops]
    if producers is None:  # no graph: the chain of adjacent rows beyond fp16's range
        up, i = [], position - 1
        while i >= 0 and _exceeds_fp16(rows[i]):
            up.insert(0, rows[i]["op_name"])
            i -= 1
        down, i = [], position
        while i + 1 < len(rows) and _exceeds_fp16(rows[i]):
            down += _ops_of(rows[i + 1])
            i += 1
        return up, ops, [op for op in _unique(down) if op not in ops]
    up, stack, seen = [], list(ops), set(ops)
    while stack:
        for p in producers.get(stack.pop(), ()):
            if p not in seen and over(p):
                seen.add(p)
                up.insert(0, p)
                stack.append(p)
    consumers: dict[str, list[str]] = {}
    for op, ins in producers.items():
        for p in ins:
            consumers.setdefault(p, []).append(op)
    down, frontier = [], [op for op in ops if over(op)]
    while frontier:
        op = frontier.pop(0)
        for c in consumers.get(op, ()):
            if c not in seen:
                seen.add(c)
                down.append(c)
                if over(c):
                    frontier.append(c)
    order = {op: i for i, r in enumerate(rows) for op in _ops_of(r)}
    up.sort(key=lambda op: order.get(op, -1))
    down.sort(key=lambda op: order.get(op, len(rows)))
    return up, ops, down


def non_float_ops(rows: list[dict], plan_nodes: dict) -> set[str]:
    """Ops whose outputs are integers or bools (every row of theirs, or the precision plan's "other"):
    fp16 never holds them, so keep_dtype has nothing to keep."""
    floats: dict[str, bool] = {}
    for r in rows:
        if "float_tensor" in r:
            for op in _ops_of(r) if not r.get("fused") else [r["op_name"]]:
                floats[op] = floats.get(op, False) or bool(r["float_tensor"])
    ops = {op for op, is_float in floats.items() if not is_float}
    return ops | {op for op, node in plan_nodes.items() if node.get("dtype") == "other"}


def _overflow_advice(rows, position, producers, plan_nodes, stage, existing_keep, mode=None) -> list[dict]:
    row = rows[position]
    upstream, keep, later = overflow_chain(rows, position, producers)
    skip = non_float_ops(rows, plan_nodes)
    upstream, keep, later = ([op for op in ops if op not in skip] for ops in (upstream, keep, later))
    names = _unique(upstream + keep + later)
    if plan_nodes:  # an op the plan already keeps in fp32 (and not by keep_dtype, which is listed) needs no entry
        names = [n for n in names if plan_nodes.get(n, {}).get("dtype") != "float32"] or names
    why = f"op '{row['op_name']}' overflows fp16 ({wording.beyond_fp16(mode)})"
    if upstream:
        why += f"; its input from {', '.join(repr(u) for u in upstream)} already exceeds fp16's range"
    if later:
        why += (f"; {', '.join(repr(x) for x in later)} read{'s' if len(later) == 1 else ''} a value beyond fp16's "
                "range and would overflow next")
    return [_keep_dtype_item(_unique(list(existing_keep or []) + names), stage, why + ": keep them in fp32",
                             added=names, existing=existing_keep)]


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


def guess_rules(fused_type: str, original_types: list[str]) -> list[str]:
    """The ATC fusion passes (catalogue names) whose pattern merges these op types."""
    from ascendpipe.precision import atc_passes

    return atc_passes.guess(list(original_types) or [fused_type])


def _switchable(name: str) -> bool:
    from ascendpipe.precision import atc_passes

    return atc_passes.switchable(name)


def _changes_values(name: str) -> bool:
    """A pass whose switch can change a value (a UB fusion's members keep their own dtypes: atc_passes)."""
    from ascendpipe.precision import atc_passes

    return atc_passes.changes_values(name) or name not in atc_passes.BY_NAME


def _value_changing(row, rows, fusion_rules) -> bool:
    """Whether the fused row was made by some pass whose switch can change its values."""
    rule = (fusion_rules or {}).get(row["op_name"])
    rules = rule.split("+") if rule else guess_rules(row["op_type"], _original_types(rows, row))
    return any(_changes_values(r) for r in rules) or not rules


def _unswitchable_advice(row, passes: list[str], stage: str, existing_keep: list[str]) -> dict:
    named = ", ".join(f"'{p}'" for p in passes)
    ops = _ops_of(row)
    message = (f"fused op '{row['op_name']}' (from {', '.join(ops)}) fails while its inputs pass; it is made by "
               f"{named}, which ATC cannot switch off (the CANN reference: 'this fusion pattern cannot be "
               "disabled'): keep its ops in fp32 instead")
    return _keep_dtype_item(_unique(list(existing_keep or []) + ops), stage, message, added=ops, existing=existing_keep)


def _original_types(rows: list[dict], row: dict) -> list[str]:
    by_op = {}
    for r in rows:
        by_op.setdefault(r.get("golden_op") or r["op_name"], r.get("golden_op_type") or r["op_type"])
    return [by_op[op] for op in row.get("golden_ops") or [] if op in by_op]


def _fusion_advice(row, rules: list[str], known: bool, stage: str, existing: dict | None,
                   fixed: list[str] | None = None) -> dict:
    from ascendpipe.precision.remedy import format_fusion_switch

    originals = ", ".join(row.get("golden_ops") or [])
    rules = rules or [f"{row['op_type']}FusionPass"]
    named = ", ".join(f"'{r}'" for r in rules)
    message = f"fused op '{row['op_name']}' (from {originals}) fails while its inputs pass: switch fusion rule {named} off"
    if not known:
        message += " (rule inferred from the fused op types)"
    if fixed:
        message += f" ({', '.join(repr(f) for f in fixed)} cannot be switched off on the device)"
    # a pasted fusion_switch replaces the stage's (or variant's) whole mapping: carry the rules already set
    switches = {**{str(k): str(v) for k, v in (existing or {}).items()}, **{r: "off" for r in rules}}
    return {
        "kind": "fusion_switch",
        "message": message,
        "rules": rules,
        # ATC's JSON form, each pass in its section: the same file convert, fix and atc read
        "file": {"name": "fusion_switch.cfg", "content": format_fusion_switch(switches)},
        "set": paste.set_line(stage, ["fusion_switch"], switches),
        "yaml": paste.yaml_lines(stage, {"fusion_switch": switches}),
    }


def _underflows(row: dict) -> bool:
    peak = row.get("golden_abs_max")
    return peak is not None and 0.0 < peak < FP16_MIN_NORMAL


def _loss_advice(rows, position, plan_nodes, stage, existing_keep, known, mode=None) -> list[dict]:
    row = rows[position]
    ops = _ops_of(row)
    if row.get("float_tensor") is False or (plan_nodes and all(plan_nodes.get(op, {}).get("dtype") == "other" for op in ops)):
        # an integer or bool output: no precision mode or keep_dtype changes how it is computed
        return [{"kind": "implementation",
                 "message": (f"op '{row['op_name']}' outputs {row.get('dtype') or 'a non-float type'}, which fp16 "
                             "does not touch: its difference comes from its inputs (look at the float ops feeding it) "
                             "or its implementation on the device")}]
    if plan_nodes and all(plan_nodes.get(op, {}).get("dtype") == "float32" for op in ops):
        item = {"kind": "implementation",
                "message": (f"op '{row['op_name']}' already runs in fp32 in the target, so the loss is not fp16 "
                            "rounding: check its inputs and its implementation on the device")}
        if "op_select_implmode" in known:
            item["message"] += "; try op_select_implmode high_precision"
            item["set"] = paste.set_line(stage, ["op_select_implmode"], "high_precision")
            item["yaml"] = paste.yaml_lines(stage, {"op_select_implmode": "high_precision"})
        return [item]
    if _underflows(row):
        later = [op for r in rows[position + 1 :] if _underflows(r) for op in _ops_of(r)]
        names = _unique(ops + later)
        why = (f"op '{row['op_name']}' underflows fp16 (its values, at most {row['golden_abs_max']:.3g}, are below fp16's "
               f"normal range {FP16_MIN_NORMAL:.3g})")
        if later:
            why += f"; later ops {', '.join(repr(x) for x in _unique(later))} underflow too"
        message = why + ": keep them in fp32"
    else:
        names = ops
        message = f"op '{row['op_name']}' loses accuracy in fp16 without overflowing: keep it in fp32"
    advice = [_keep_dtype_item(_unique(list(existing_keep or []) + names), stage, message, added=names,
                               existing=existing_keep)]
    if "precision_mode" in known and mode != "allow_fp32_to_fp16":  # never the mode already in use
        advice.append({
            "kind": "precision_mode",
            "message": "or let ATC keep fp32 ops whose fp16 kernels lose accuracy: precision_mode allow_fp32_to_fp16",
            "set": paste.set_line(stage, ["precision_mode"], "allow_fp32_to_fp16"),
            "yaml": paste.yaml_lines(stage, {"precision_mode": "allow_fp32_to_fp16"}),
        })
    return advice


def _low_format_advice(rows, position, cause, plan_nodes, stage, existing_keep, known, settings) -> list[dict]:
    """In the SoC's terms (Atlas A2/A3): an HF32 cube op -> allow_hf32 false; a bf16 op -> keep it in
    fp32, or the fp32 mode (origin) in the key the stage already uses (never both precision options)."""
    row = rows[position]
    ops = _ops_of(row)
    if cause == "hf32_rounding":
        item = {"kind": "allow_hf32",
                "message": (f"op '{row['op_name']}' ({row['op_type']}) loses accuracy to HF32: Atlas A2/A3 round an "
                            "fp32 Conv's inputs to an 11-bit mantissa by default (allow_hf32: conv on, matmul off); "
                            "allow_hf32 false computes fp32 Conv and MatMul in fp32")}
        if "allow_hf32" in known:
            item["set"] = paste.set_line(stage, ["allow_hf32"], False)
            item["yaml"] = paste.yaml_lines(stage, {"allow_hf32": False})
        return [item]
    message = (f"op '{row['op_name']}' ({row['op_type']}) loses accuracy in bf16 (8 mantissa bits; its range is "
               "fp32's): keep it in fp32")
    advice = [_keep_dtype_item(_unique(list(existing_keep or []) + ops), stage, message, added=ops,
                               existing=existing_keep)]
    key = "precision_mode_v2" if settings.get("precision_mode_v2") else "precision_mode"
    value = "origin" if key == "precision_mode_v2" else "must_keep_origin_dtype"
    if key in known:
        advice.append({"kind": "precision_mode",
                       "message": f"or compute every op in its original fp32 (Conv in HF32): {key} {value}",
                       "set": paste.set_line(stage, [key], value), "yaml": paste.yaml_lines(stage, {key: value})})
    return advice


def _keep_dtype_item(names: list[str], stage: str, message: str, added: list[str] | None = None,
                     existing: list[str] | None = None) -> dict:
    """``ops``: the whole list to paste (it replaces the stage's keep_dtype); ``added``: the entries it
    adds, never one the stage's keep_dtype (``existing``) already holds."""
    kept = set(existing or [])
    return {
        "kind": "keep_dtype",
        "message": message,
        "ops": names,
        "added": [n for n in (added if added is not None else names) if n not in kept],
        "file": {"name": "keep_dtype.cfg", "content": "".join(f"{n}\n" for n in names)},
        "set": paste.set_line(stage, ["keep_dtype"], names),
        "yaml": paste.yaml_lines(stage, {"keep_dtype": names}),
    }


def _unique(items: list[str]) -> list[str]:
    return list(dict.fromkeys(items))
