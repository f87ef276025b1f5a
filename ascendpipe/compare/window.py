"""Which tensors a statistics-first compare dumps again in full (issue 49 item 9). Pure: rows in, names out.

After a compare of two statistics-only dumps (``compare.statistics``), the rows the statistics fail
(an inf/NaN or saturated target, a relative Euclidean distance they prove beyond the threshold) or flag
(msprobe's warning: a statistic off by more than half its magnitude) point at the first failure. Its
neighbourhood is dumped again in full, within the disk budget, in this order until the budget is spent:
the first flagged row (an overflow origin before any other: ``order.select_failures``), the ops
computing its inputs, the rows after it and before it in graph order (nearest first, up to ``AFTER`` and
``BEFORE``), then the graph outputs (the verdict reads them). Without a flagged row, the outputs alone.
"""

from __future__ import annotations

import math

import numpy as np

BEFORE, AFTER = 8, 24  # rows before and after the first flagged one, in graph order
NPY_HEADER = 128  # an .npy file's header (numpy's format 1.0 pads it to a multiple of 64: 128 for a tensor)


def row_bytes(row: dict) -> int:
    """The bytes of a row's tensors in full: its shape times the itemsize of each side it has."""
    shape = row.get("shape") or []
    if not all(isinstance(d, int) for d in shape):
        return 0
    count = math.prod(shape)
    sides = {"both": (row.get("dtype"), row.get("golden_dtype")), "golden_only": (row.get("golden_dtype"),),
             "target_only": (row.get("dtype"),)}.get(row.get("side"), ())
    total = 0
    for dtype in sides:
        try:
            total += count * np.dtype(dtype or "float32").itemsize + NPY_HEADER
        except TypeError:
            total += count * 4 + NPY_HEADER
    return total


def flagged(rows: list[dict]) -> list[int]:
    """Positions of the rows the statistics fail or flag, in graph order."""
    return [i for i, r in enumerate(rows) if r.get("stats_only") and (
        r.get("failed") or (r.get("statistics") or {}).get("warning"))]


def choose(rows: list[dict], producers: dict[str, list[str]] | None, budget: int | None) -> dict:
    """``{"names": tensor names of both sides to dump in full, "first": the anchor row's index or None,
    "rows": [indices chosen], "bytes": their full size}`` within ``budget`` bytes (None: no limit)."""
    from ascendpipe.compare import mechanism, order

    paired = [i for i, r in enumerate(rows) if r.get("side") == "both" and not r.get("pre")]
    marks = set(flagged(rows))
    anchor = None
    if marks:
        picked = order.select_failures(rows, "first-overall", producers=producers,
                                       eligible={i for i in marks if rows[i].get("failed")})
        anchor = picked[0] if picked else min(marks)
    priority: list[int] = []
    if anchor is not None:
        priority.append(anchor)
        by_op = {op: i for i, r in enumerate(rows) for op in mechanism.ops_of(r)}
        types = mechanism.op_types(rows)
        for op in mechanism.ops_of(rows[anchor]):
            for p in mechanism.compute_producers(producers or {}, op, types):
                if p in by_op:
                    priority.append(by_op[p])
        where = paired.index(anchor) if anchor in paired else 0
        after, before = paired[where + 1:where + 1 + AFTER], list(reversed(paired[max(0, where - BEFORE):where]))
        for k in range(max(len(after), len(before))):
            priority += [x for x in (after[k] if k < len(after) else None, before[k] if k < len(before) else None)
                         if x is not None]
    priority += [i for i in paired if rows[i].get("is_output")]
    chosen, spent = [], 0
    for i in dict.fromkeys(priority):
        if i not in paired:
            continue
        size = row_bytes(rows[i])
        if budget is not None and spent + size > budget:
            continue
        chosen.append(i)
        spent += size
    names = {n for i in chosen for n in (rows[i].get("tensor"), rows[i].get("golden_tensor")) if n}
    return {"names": names, "first": rows[anchor]["index"] if anchor is not None else None,
            "rows": sorted(rows[i]["index"] for i in chosen), "bytes": spent}
