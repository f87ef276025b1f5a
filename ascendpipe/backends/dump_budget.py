"""How much disk a compare's dumps may take, and what a full dump would take (issue 49 item 9).

A compare dumps every op output of both models; a decoder at a long sequence (2048 tokens, 24 layers)
writes tens of GB of activations per side. Where the estimate passes the budget, the compare goes
statistics-first (``compare_sources.run_compare``): both dumps keep every tensor as msprobe's statistics
(``dump_model(full=...)``), and only the tensors around the first failure the statistics show are dumped
again in full (``compare.window``).

The budget: ``--dump-budget`` / the compare param ``dump_budget`` ("500M", "2G", a number of bytes;
"none" for no limit); by default half the free space of the file system the dumps go to, read when the
compare starts (the other half stays for the rest of the build and whatever else shares the disk).
"""

from __future__ import annotations

import re
from pathlib import Path

from ascendpipe.errors import Location, UserError

AUTO, NONE = "auto", "none"
FREE_SHARE = 0.5
_UNITS = {"": 1, "b": 1, "k": 1 << 10, "kb": 1 << 10, "m": 1 << 20, "mb": 1 << 20, "g": 1 << 30, "gb": 1 << 30,
          "t": 1 << 40, "tb": 1 << 40}


def parse_budget(value, where: Location | None = None) -> int | str | None:
    """A budget as given: bytes (an int, or '500M', '2G', '1.5GB'), 'auto' (the default: half the free
    space) or 'none' / None-like (no limit: None). A bad value is a located one-line error."""
    label = (where.field if where is not None and where.field else None) or "dump budget"
    if value is None or value == AUTO:
        return AUTO
    if isinstance(value, bool):
        raise UserError(f"{label} {value!r} is not a size: give bytes (500M, 2G), auto or none", where)
    if isinstance(value, (int, float)):
        if value < 0:
            raise UserError(f"{label} {value} is negative: give bytes (500M, 2G), auto or none", where)
        return int(value)
    text = str(value).strip().lower()
    if text in (NONE, "off", "unlimited"):
        return None
    if text == AUTO:
        return AUTO
    match = re.fullmatch(r"(\d+(?:\.\d+)?)\s*([kmgt]?b?)", text)
    if not match:
        raise UserError(f"{label} '{value}' is not a size: give bytes (500M, 2G, 1.5GB), auto or none", where)
    return int(float(match.group(1)) * _UNITS[match.group(2)])


def resolve_budget(budget, folder: Path) -> int | None:
    """The budget in bytes (None: no limit); 'auto' reads the free space of ``folder``'s file system."""
    if budget == AUTO:
        from ascendpipe.store.failures import free_bytes

        free = free_bytes(str(folder))
        return None if free is None else int(free * FREE_SHARE)
    return budget


def dump_bytes(model: Path, feeds: dict) -> int | None:
    """An upper estimate of what one full dump of ``model`` for ``feeds`` writes: each op output's bytes
    by ONNX shape inference with the feeds' shapes (float32 for a float tensor: an fp16 one is stored in
    half that), and where inference gives no size, ``dump.GROWTH`` times the largest of the feeds and the
    weights (the dump's own generous bound, ``fits_without_estimate``); plus the feeds. An emulated
    model's internal tensors are not dumped and not counted. None: the model cannot be read."""
    import numpy as np

    from ascendpipe.backends.onnxruntime.dump import (EMULATION_KEY, GROWTH, _estimate_sizes, emulation_info,
                                                      plan_tensors)
    from ascendpipe.onnxgraph import load_graph, name_nodes

    try:
        proto = load_graph(model)
    except (OSError, UserError, ValueError):
        return None
    name_nodes(proto.graph)
    metadata = {p.key: p.value for p in proto.metadata_props}
    internal, producer = (emulation_info(metadata, Location(file=str(model))) if EMULATION_KEY in metadata
                          else (set(), {}))
    plan = plan_tensors(proto.graph.node, {i.name for i in proto.graph.input}, internal, producer)
    sizes = _estimate_sizes(proto, feeds, [p.name for p in plan])
    fed = [int(getattr(a, "nbytes", 0)) for a in feeds.values()]
    weights = [int(np.prod(i.dims, dtype=np.int64)) * 4 if i.dims else 4 for i in proto.graph.initializer]
    unknown = GROWTH * max(fed + weights + [0])
    return sum(unknown if s is None else s for s in sizes) + sum(fed)


class StatisticsFirst:
    """One compare's plan for its dumps within the budget (``compare_sources.run_compare``): ``full`` is
    what ``dump_model`` writes in full (None: everything), ``active`` whether a statistics pass runs first."""

    def __init__(self, budget: int | None, bound: int | None):
        self.budget, self.bound = budget, bound
        self.full: frozenset | None = None
        self.active = False
        self.exact: int | None = None
        self.window: dict | None = None

    def dump_kwargs(self) -> dict:
        """What the dump calls take: ``full`` where only some tensors go in full (none where all do)."""
        return {} if self.full is None else {"full": self.full}

    @classmethod
    def start(cls, golden, target, batches: list, golden_feeds: list, budget, folder: Path) -> "StatisticsFirst":
        """Both sides ONNX models (a dump or an OM is as given): statistics first where the bound of their
        full dumps (``dump_bytes``, every batch) passes the budget."""
        limit = resolve_budget(parse_budget(budget, Location(field="dump_budget")), Path(folder))
        if limit is None or golden.model is None or target.model is None:
            return cls(limit, None)
        bound = 0
        for feeds, gold in zip(batches, golden_feeds):
            sizes = (dump_bytes(target.model, feeds or {}), dump_bytes(golden.model, gold or {}))
            if None in sizes:
                return cls(limit, None)  # a model that cannot be read: its dump says why
            bound += sum(sizes)
        state = cls(limit, bound)
        if bound > limit:
            state.full, state.active = frozenset(), True
        return state

    def narrow(self, result: dict, producers: dict | None, batches: int) -> None:
        """After the statistics compare: everything in full where the dumps' exact size fits the budget,
        else the window around the first failure (``compare.window``, the budget shared by the batches)."""
        from ascendpipe.compare import window

        self.exact = batches * sum(window.row_bytes(r) for r in result["rows"] if not r.get("pre"))
        if self.exact <= self.budget:
            self.full = None
            return
        self.window = window.choose(result["rows"], producers, self.budget // max(batches, 1))
        self.full = frozenset(self.window["names"])

    def record(self, dumps: list) -> dict:
        """``summary.statistics_first``: the budget, the bound that started it, the full dumps' exact size,
        what was dumped in full (the window's first flagged row and rows), the bytes the dumps hold."""
        from ascendpipe.backends.dump_retention import folder_bytes

        held = sum(int(getattr(d, "bytes", 0)) if hasattr(d, "key") else folder_bytes(Path(d)) for d in dumps)
        window = None if self.window is None else {k: v for k, v in self.window.items() if k != "names"}
        return {"budget_bytes": self.budget, "estimated_bytes": self.bound, "full_bytes": self.exact,
                "in_full": "all" if self.full is None else "window", "window": window, "dump_bytes": held}
