"""What a grow step adds: candidates from one failing attempt's own compare, best evidence first.

1. by cause (``fix.causes``): the advice on the failure the search grows from, the advice on every
   other op compare names as breaking on its own, and the same op in every repeated block where its
   own golden carries the same evidence, joined in one step;
2. else the failing rows' ops not kept yet, the first failure's row first, then graph order; a
   failing fused row whose ops are all kept gets its fusion pass switched off (a kept op fused into a
   kernel still computes in that kernel's precision);
3. else the first failure's own op;
3a. else the first failure's producers and consumers (``neighbours``: the cause and its carrier);
4. else, with no usable evidence, ops in graph order from the first failure on, doubling the batch
   each blind step while the first failure stays where it is.
Only ops that keep_dtype can change are ever proposed (``Result.candidates``: float ops the precision
plan would compute differently when kept, i.e. every op the emulation rounds, a ``Cast(to=float)``
included; never Constant, Identity or integer ops), and never an op that only moves values (Reshape,
Transpose, Pad, Slice, Cast, ...: ``compare.mechanism.MOVE_OPS``) while its values lie in fp16's range,
where fp16 holds what it moves as it is; beyond 65504 (a Cast to float of a residual past fp16's range,
which the emulation rounds to inf as the device does) it is proposed like any op. Failing rows compare
calls contained (their error does not reach an output) are not evidence.

The impl-mode remedy (``op_precision_mode``: ``<GE type>=high_precision``) comes first: where a step
would keep an op whose kernel high_precision restores on this SoC (``Result.impl_remedies``, from the
precision plan and ``precision.impl_remedy``: LayerNorm and ReduceMeanD on Ascend310), the step gives
its GE type high_precision instead of keeping the op. On the device that remedy leaves the data in fp16
(no Cast pair, no fp32 tensor between ops) and changes only the kernel's inside, which is what a board
user wants. Should it not restore the outputs, the next step keeps the op as before: the type is then
high_precision and no longer offered, so the ladder costs one evaluation more than keeping the op at once,
and only where an impl remedy exists. Never proposed for a type already high_precision, nor where the
result does not say (``impl_remedies`` None).
"""

from __future__ import annotations

from typing import Callable, Iterable

from ascendpipe.compare.mechanism import compute_producers, consumers_of, golden_peaks, is_move, op_types
from ascendpipe.fix.core import FP16_MAX, FUSION, IMPL, KEEP, Candidate, Result


def _row_ops(row: dict) -> list[str]:
    """Original op names of a row (stable across fusion switches), else its own op name."""
    return list(row.get("golden_ops") or [row.get("golden_op") or row["op_name"]])


def advised(failure: dict | None) -> list[Candidate]:
    """Candidates named by the advisor's advice items, in the advisor's order."""
    found: list[Candidate] = []
    for item in (failure or {}).get("advice") or []:
        if item.get("kind") == "keep_dtype":
            # 'added': the new entries; 'ops' may also repeat what the stage already keeps
            found += [Candidate(KEEP, op) for op in item.get("added", item.get("ops")) or []]
        elif item.get("kind") == "skip_layers":  # a quantized layer kept in float (fix --quantize)
            found += [Candidate(KEEP, layer) for layer in item.get("added", item.get("layers")) or []]
        elif item.get("kind") == "fusion_switch":
            found += [Candidate(FUSION, rule) for rule in item.get("rules") or []]
        elif item.get("kind") == "impl_mode":  # an op_precision_mode line per GE type
            found += [Candidate(IMPL, ge_type) for ge_type in item.get("op_types") or []]
    return list(dict.fromkeys(found))


def per_result(result: Result, attr: str, compute):
    """``compute(result)``, worked out once per result (kept on it)."""
    cached = getattr(result, attr, None)
    if cached is None:
        cached = compute(result)
        object.__setattr__(result, attr, cached)
    return cached


def peaks(result: Result) -> dict[str, float]:
    return per_result(result, "_golden_peaks", lambda r: golden_peaks(r.rows))


def types(result: Result) -> dict[str, str]:
    return per_result(result, "_op_types", lambda r: op_types(r.rows))


def keepable(result: Result, name: str) -> bool:
    """An op keep_dtype can change: a float op the emulation rounds (the plan's ``keepable``); one that
    only moves values (Reshape, Transpose, Cast...) only where its golden lies beyond fp16's range
    (elsewhere fp16 holds what it moves as it is)."""
    if is_move(types(result).get(name)) and peaks(result).get(name, 0.0) <= FP16_MAX:
        return False
    return result.candidates is None or name in result.candidates


def by_cause(result: Result) -> list[Candidate]:
    """Step 1 (``fix.causes``): the growing failure's advice, every other cause's advice, and each
    cause's siblings in the repeated blocks (with their own evidence), in that order."""
    from ascendpipe.fix.causes import Blocks, sibling_causes

    found = advised(result.failure)
    rows = result.rows
    if not rows:
        return found
    position = {r.get("index"): i for i, r in enumerate(rows)}
    causes = [c for c in result.causes or [] if position.get(c.get("index")) is not None]
    for cause in causes:
        found += _advice_at(result, position[cause["index"]])
    blocks = per_result(result, "_blocks", lambda r: Blocks(r.rows, r.producers, r.ops))
    named = ([result.failure] if result.failure and result.failure.get("op_name") else []) + causes
    for i in sibling_causes(rows, result.producers, named, blocks):
        found += _advice_at(result, i, overflow=(rows[i].get("golden_abs_max") or 0.0) > FP16_MAX)
    return list(dict.fromkeys(found))


def _advice_at(result: Result, position: int, overflow: bool | None = None) -> list[Candidate]:
    """What compare's advice would keep were ``rows[position]`` the first failure; ``overflow``: read it
    as an overflow whatever its target shows (a sibling whose golden lies beyond 65504, which the
    target may not show while an earlier block has already broken what reaches it)."""
    from ascendpipe.compare import advisor

    rows = result.rows
    if overflow:
        up, ops, down = advisor.overflow_chain(rows, position, result.producers)
        skip = advisor.non_float_ops(rows, {})
        # a fused kernel's members keep their own dtypes (precision/atc_passes.py): keep_dtype reaches them,
        # and no fusion switch is needed
        return [Candidate(KEEP, op) for op in dict.fromkeys(up + ops + down) if op not in skip]
    rules = {r["op_name"]: r["pass_name"] for r in rows if r.get("fused") and r.get("pass_name")}
    return advised(advisor.describe_failure(rows, position, fusion_rules=rules, producers=result.producers))


def neighbours(result: Result, kept: Iterable[Candidate], keepable: Callable[[str], bool]) -> list[Candidate]:
    """The first failure's producers and consumers (through ops that only move values), not kept yet:
    where its cause and its carrier sit when the advice and the failing rows are used up."""
    name = (result.failure or {}).get("op_name")
    if not name or not result.producers:
        return []
    kept_names = {c.name for c in kept if c.kind == KEEP}
    kinds = types(result)
    consumers = consumers_of(result.producers)
    near = compute_producers(result.producers, name, kinds)
    stack, seen = list(consumers.get(name, ())), set()
    while stack:  # consumers, looking through the ops that only move values
        c = stack.pop(0)
        if c in seen:
            continue
        seen.add(c)
        if is_move(kinds.get(c)):
            stack += list(consumers.get(c, ()))
        else:
            near.append(c)
    return [Candidate(KEEP, op) for op in dict.fromkeys(near) if op not in kept_names and keepable(op)]


def first_failing(rows: list[dict], kept: Iterable[Candidate], failure: dict | None = None,
                  keepable: Callable[[str], bool] = lambda name: True) -> list[Candidate]:
    """The ops of the first failure's row (else the first failing row in graph order) that are not
    kept yet; a failing fused row whose ops are all kept: its fusion pass, switched off."""
    kept_names = {c.name for c in kept if c.kind == KEEP}
    kept_rules = {c.name for c in kept if c.kind == FUSION}
    # a contained failure does not reach an output (see compare.mechanism): keeping it changes nothing there
    failing = [row for row in rows if row.get("failed") and row.get("side", "both") != "golden_only"]
    # unless the target is stricter than compare's thresholds (its outputs pass there): then they are all there is
    failing = [row for row in failing if not row.get("contained")] or failing
    first = (failure or {}).get("op_name")
    failing.sort(key=lambda row: row.get("op_name") != first)  # stable: the failure's row, then graph order
    for row in failing:
        fresh = [op for op in _row_ops(row) if op not in kept_names and keepable(op)]
        if fresh:
            return [Candidate(KEEP, op) for op in fresh]
        rule = row.get("pass_name")
        if rule and "+" not in rule and rule not in kept_rules and _switch_changes_values(rule):
            return [Candidate(FUSION, rule)]
    return []


def _switch_changes_values(rule: str) -> bool:
    """Whether switching ``rule`` off can change a value: never a UB fusion, whose members keep their
    own dtypes (precision/atc_passes.py); a pass we do not know is tried."""
    from ascendpipe.precision import atc_passes

    return rule not in atc_passes.BY_NAME or atc_passes.changes_values(rule)


def impl_first(result: Result, fresh: list[Candidate], current: frozenset) -> list[Candidate]:
    """``fresh`` with each op whose kernel high_precision restores (``Result.impl_remedies``) replaced by its
    GE type's op_precision_mode line, where that type is not in ``current`` yet and the op's golden output
    and inputs lie in fp16's range (``precision.impl_remedy.boundary_holds``: the data stays fp16 at its
    boundary); an impl candidate the result does not back is dropped."""
    from ascendpipe.precision.impl_remedy import boundary_holds

    golden = peaks(result)
    restorable = {op: t for op, t in (result.impl_remedies or {}).items()
                  if boundary_holds(op, golden, result.producers)}  # an overflow at its boundary: keep_dtype's
    types_here = set(restorable.values())
    out: list[Candidate] = []
    for c in fresh:
        if c.kind == IMPL:
            if c.name in types_here and c not in current:
                out.append(c)
            continue
        ge_type = restorable.get(c.name) if c.kind == KEEP else None
        impl = Candidate(IMPL, ge_type) if ge_type else None
        out.append(impl if impl is not None and impl not in current else c)
    return list(dict.fromkeys(out))


def propose(result: Result, current: frozenset, blind_batch: int) -> tuple[list[Candidate], bool]:
    """(candidates to add, whether this was a blind pick). Never proposes one already in ``current``
    nor an op keep_dtype cannot change; an op high_precision restores gets its type's impl line first."""
    can = lambda name: keepable(result, name)
    fresh = impl_first(result, [c for c in by_cause(result) if c not in current and (c.kind != KEEP or can(c.name))],
                       current)
    if fresh:
        return fresh, False
    fresh = impl_first(result, first_failing(result.rows, current, result.failure, can), current)
    if fresh:
        return fresh, False
    name = (result.failure or {}).get("op_name")
    if name and can(name) and Candidate(KEEP, name) not in current:  # the failure's own op, no rows
        return impl_first(result, [Candidate(KEEP, name)], current), False
    fresh = impl_first(result, neighbours(result, current, can), current)
    if fresh:
        return fresh, False
    order = list(dict.fromkeys([op for row in result.rows for op in _row_ops(row)] + list(result.ops)))
    start = _first_failure_position(result, order)
    order = order[start:] + order[:start]  # from the first failure on: upstream of it is not to blame first
    blind = [Candidate(KEEP, op) for op in order if Candidate(KEEP, op) not in current and can(op)]
    return blind[:blind_batch], True


def _first_failure_position(result: Result, order: list[str]) -> int:
    names = [(result.failure or {}).get("op_name")]
    names += [op for row in result.rows if row.get("failed") for op in _row_ops(row)]
    for name in names:
        if name in order:
            return order.index(name)
    return 0
