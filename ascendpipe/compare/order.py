"""Row order (topological, from inputs to outputs) and the first-failure strategies.

Strategies (msit's analyser has the same three: FIRST_INVALID_OVERALL, FIRST_INVALID_EACH, ALL_INVALID):
- ``first-overall``: the first failing row in graph order (the default).
- ``first-per-output``: for each graph output, the first failing row among the ops it depends on.
- ``all``: every failing row.

Overflow comes first, in every strategy: an *overflow origin* is picked before any row that only
loses accuracy, even one earlier in graph order. An origin is a failing row whose target holds inf/NaN
or reaches 65504 while no row it reads from overflows, and whose overflow is its own: its golden
exceeds fp16's range (its true values do not fit, whatever its inputs), or its inputs all pass (an
fp16 intermediate inside the op overflowed). Such an overflow wipes out everything downstream; an op
upstream of it that loses accuracy is at most a second problem, often one a threshold decides by a
margin (msit's order, the first row over any threshold, would name it first). An overflow whose
golden is in range and whose input is already wrong (x / 0 after an upstream underflow) is caused by
that input: it keeps its graph order, behind the op that lost the accuracy. A fused kernel one of whose
members' golden exceeds fp16's range overflows on its own too (its intermediates are fp16).

A saturated mask (±float32's largest value, which fp16 holds only as ±inf) that fails on its own
(0 * -inf = NaN in an additive mask) is an origin, but one behind every overflow of a computed value:
the overflowing scores are what break first, and what fixing the mask alone leaves broken.
"""

from __future__ import annotations

from ascendpipe.compare.mapping import Pair
from ascendpipe.compare.metrics import FP16_MAX
from ascendpipe.errors import Location, UserError

STRATEGIES = ("first-overall", "first-per-output", "all")


def order_pairs(pairs: list[Pair]) -> list[Pair]:
    """Golden graph order; a target-only tensor goes right after the paired tensor before it in target order."""
    by_target = sorted((p for p in pairs if p.target), key=lambda p: p.target.get("topo_index", 0))
    anchor: dict[int, int] = {}
    last_golden = -1
    for p in by_target:
        if p.golden:
            last_golden = p.golden.get("topo_index", 0)
        else:
            anchor[id(p)] = last_golden

    def key(p: Pair):
        t_topo = p.target.get("topo_index", 0) if p.target else 0
        if p.golden:
            return (p.golden.get("topo_index", 0), 0, t_topo)
        return (anchor[id(p)], 1, t_topo)

    return sorted(pairs, key=key)


def ancestors(producers: dict[str, list[str]], op: str) -> set[str]:
    """``op`` and every op upstream of it. ``producers``: op -> the ops whose outputs it reads."""
    seen, stack = set(), [op]
    while stack:
        current = stack.pop()
        if current in seen:
            continue
        seen.add(current)
        stack.extend(producers.get(current, ()))
    return seen


def _ops(row: dict) -> list[str]:
    return list(row.get("golden_ops") or [row["op_name"]])


def overflow_origins(rows: list[dict], producers: dict[str, list[str]] | None = None) -> list[int]:
    """Positions of the overflow origins (see the module docstring), in graph order.

    ``producers``: op -> the ops it reads (the golden graph); without it the row before stands for the
    input (graph order)."""
    from ascendpipe.compare.fills import fill_only, is_fill, value_peak
    from ascendpipe.compare.mechanism import golden_peaks

    # (a mask fill's image is carried to its consumers like any overflow: they are not origins for it)
    overflowing = {op for r in rows if r.get("overflow") == "target" for op in _ops(r)}
    failing = {op for r in rows if r.get("failed") for op in _ops(r)}
    peaks = golden_peaks(rows)
    origins = []
    for i, row in enumerate(rows):
        # a mask fill's fp16 image alone (``fills.fill_only``) is no overflow of a computed value
        if not row.get("failed") or row.get("overflow") != "target" or fill_only(row) or (
                row.get("contained") and is_fill(row)):
            continue
        ops = set(_ops(row))
        if producers is not None:
            inputs = {p for op in ops for p in producers.get(op, ()) if p not in ops}
        else:
            inputs = set(_ops(rows[i - 1])) - ops if i > 0 else set()
        if inputs & overflowing:
            continue  # carried in from upstream: the origin is there
        beyond = value_peak(row) > FP16_MAX or (
            row.get("fused") and any(peaks.get(op, 0.0) > FP16_MAX for op in ops))
        if beyond or not inputs & failing:
            origins.append(i)
    # a saturated mask behind every overflow of a computed value (see the module docstring)
    return sorted(origins, key=lambda i: rows[i].get("mechanism") == "saturated_mask")


def check_strategy(strategy: str, location: Location | None = None) -> str:
    if strategy not in STRATEGIES:
        raise UserError(f"unknown compare strategy '{strategy}'; use one of {', '.join(STRATEGIES)}", location)
    return strategy


def select_failures(
    rows: list[dict],
    strategy: str = "first-overall",
    *,
    output_ops: list[str] | None = None,
    producers: dict[str, list[str]] | None = None,
    eligible: set[int] | None = None,
) -> list[int]:
    """Positions (into ``rows``, already in graph order) of the failures the strategy picks, the one to
    report first at the head: overflow origins, then the rest in graph order.

    ``first-per-output`` needs ``output_ops`` (the ops producing graph outputs) and ``producers``;
    without them every row counts as feeding the single last output, i.e. it equals first-overall.
    ``eligible``: the positions that may be picked (the failures reaching a failing output, see
    ``mechanism.reaching``); default every failing row."""
    check_strategy(strategy)
    failed = [i for i, row in enumerate(rows) if row.get("failed") and (eligible is None or i in eligible)]
    if not failed:
        return []
    origins = [i for i in overflow_origins(rows, producers) if eligible is None or i in eligible]
    ranked = origins + [i for i in failed if i not in origins]
    if strategy == "all":
        return ranked
    if strategy == "first-overall" or not output_ops or producers is None:
        return ranked[:1]
    picked: list[int] = []
    for out_op in output_ops:
        upstream = ancestors(producers, out_op)
        first = next((i for i in ranked if set(_ops(rows[i])) & upstream), None)
        if first is not None and first not in picked:
            picked.append(first)
    return sorted(picked, key=ranked.index)
