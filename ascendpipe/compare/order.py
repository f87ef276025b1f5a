"""Row order (topological, from inputs to outputs) and the first-failure strategies.

Strategies (msit's analyser has the same three: FIRST_INVALID_OVERALL, FIRST_INVALID_EACH, ALL_INVALID):
- ``first-overall``: the first failing row in graph order (the default).
- ``first-per-output``: for each graph output, the first failing row among the ops it depends on.
- ``all``: every failing row.
"""

from __future__ import annotations

from ascendpipe.compare.mapping import Pair
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
) -> list[int]:
    """Positions (into ``rows``, already in graph order) of the failures the strategy picks.

    ``first-per-output`` needs ``output_ops`` (the ops producing graph outputs) and ``producers``;
    without them every row counts as feeding the single last output, i.e. it equals first-overall."""
    check_strategy(strategy)
    failed = [i for i, row in enumerate(rows) if row.get("failed")]
    if strategy == "all" or not failed:
        return failed
    if strategy == "first-overall" or not output_ops or producers is None:
        return failed[:1]
    picked: list[int] = []
    for out_op in output_ops:
        upstream = ancestors(producers, out_op)
        first = next((i for i in failed if set(rows[i].get("golden_ops") or [rows[i]["op_name"]]) & upstream), None)
        if first is not None and first not in picked:
            picked.append(first)
    return sorted(picked)
