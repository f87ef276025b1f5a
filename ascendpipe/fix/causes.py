"""What one grow step joins: every cause compare names, and the same op in every repeated block.

Pure: compare rows + op edges -> candidate groups. A deep model breaks the same way in every block (an
RMSNorm whose mean of squares overflows in each of 24 layers); growing one block per attempt would
take as many evaluations as there are blocks. So a grow step joins, in one set:

1. the advice on the failure the search grows from (compare's ``first_reaching_failure``);
2. the advice on every other op compare names as breaking on its own (its ``also_failing``: a failure
   none of whose inputs fails, or an overflow origin), as compare would give it were that op first;
3. the same op in every repeated block: ops of the same type whose names differ only in a scope's
   numbers (``/model/layers.3/input_layernorm/Pow`` ~ ``/model/layers.17/input_layernorm/Pow``), or,
   where names carry no scope (``/Pow_12``), ops of the same type feeding the same kinds of ops
   (``OpType::`` with the same consumers) -- each only with its own evidence: its golden lies
   beyond fp16's range (an overflow, or a value wholly below fp16's smallest subnormal for an
   underflow), and compare did not find its error absorbed before the outputs (``contained``). A block
   whose norm stays in range is never joined for its name alone.

Each group is what compare's advice would keep for that cause (``compare.advisor``): for an overflow
its chain (producers already beyond 65504, the op, consumers reading a value beyond 65504).
"""

from __future__ import annotations

import re

from ascendpipe.compare.mechanism import SATURATED, consumers_of, golden_peaks, is_move, op_types, ops_of
from ascendpipe.compare.metrics import FP16_MAX

FP16_FLUSH = 2.98e-8  # below half the smallest fp16 subnormal (5.96e-8) a value rounds to 0
_NUMBER = re.compile(r"\d+")
SIGNATURE_DEPTH = 2  # consumer levels that tell one block's op from another op of the same type


def block_pattern(name: str) -> str | None:
    """The op's name with the numbers of its scopes replaced by ``#`` (the last part, the op's own name
    within its scope, kept as it is); None where no scope holds a number (a flat name)."""
    sep = "/" if "/" in name else "."
    parts = name.split(sep)
    if len(parts) < 2:
        return None
    scope = [_NUMBER.sub("#", p) for p in parts[:-1]]
    if scope == parts[:-1]:
        return None
    return sep.join(scope + parts[-1:])


def beyond_fp16(peak: float | None) -> bool:
    """A computed value fp16 cannot hold (not ±float32's largest: a mask's sentinel)."""
    return peak is not None and FP16_MAX < peak < SATURATED


def below_fp16(peak: float | None) -> bool:
    """A nonzero tensor whose every value rounds to 0 in fp16."""
    return peak is not None and 0.0 < peak < FP16_FLUSH


class Blocks:
    """The repeated blocks of one graph, as the rows and op edges tell them (worked out once per result)."""

    def __init__(self, rows: list[dict], producers: dict[str, list[str]] | None, extra_ops=()):
        self.types = op_types(rows)
        self.producers = producers or {}
        self.consumers = consumers_of(self.producers)
        names = list(dict.fromkeys([op for r in rows for op in ops_of(r)] + list(self.producers) + list(extra_ops)))
        self.by_pattern: dict[str, list[str]] = {}
        self.by_signature: dict[tuple, list[str]] = {}
        for op in names:
            pattern = block_pattern(op)
            if pattern is not None:
                self.by_pattern.setdefault(pattern, []).append(op)
            elif self.types.get(op):
                self.by_signature.setdefault(self.signature(op), []).append(op)

    def signature(self, op: str) -> tuple:
        """(op type, the types of the ops it feeds, SIGNATURE_DEPTH levels down, looking through moves)."""
        def below(name: str, depth: int) -> tuple:
            if depth == 0:
                return ()
            found = []
            for c in self._compute_consumers(name):
                found.append((self.types.get(c, "?"), below(c, depth - 1)))
            return tuple(sorted(set(found)))

        return self.types.get(op, "?"), below(op, SIGNATURE_DEPTH)

    def _compute_consumers(self, op: str) -> list[str]:
        found, stack, seen = [], list(self.consumers.get(op, ())), set()
        while stack:
            c = stack.pop(0)
            if c in seen:
                continue
            seen.add(c)
            if is_move(self.types.get(c)):
                stack += list(self.consumers.get(c, ()))
            else:
                found.append(c)
        return found

    def siblings(self, op: str) -> list[str]:
        """The same op in the other repeated blocks (same type; same scoped name but for its numbers, or
        for a flat name the same consumers), in graph order; never ``op`` itself."""
        pattern = block_pattern(op)
        kind = self.types.get(op)
        if pattern is not None:
            group = self.by_pattern.get(pattern, [])
        elif kind:
            group = self.by_signature.get(self.signature(op), [])
        else:
            group = []
        return [o for o in group if o != op and self.types.get(o) == kind]


def sibling_causes(rows: list[dict], producers: dict[str, list[str]] | None, causes: list[dict],
                   blocks: Blocks) -> list[int]:
    """Row positions of the siblings of each cause (``{"op_name", "mechanism"}``) that carry the same
    evidence in their own golden values: beyond fp16's range for an overflow, wholly below its smallest
    subnormal for an underflow. Other mechanisms join no sibling (their evidence is the failure itself,
    which compare names on its own)."""
    peaks = golden_peaks(rows)
    position = {}
    for i, r in enumerate(rows):
        for op in ops_of(r):
            position.setdefault(op, i)
    reaching = {op for r in rows if r.get("failed") and not r.get("contained") for op in ops_of(r)}
    absorbed = {op for r in rows if r.get("contained") for op in ops_of(r)} - reaching
    found: list[int] = []
    for cause in causes:
        test = {"overflow": beyond_fp16, "underflow": below_fp16}.get(cause.get("mechanism") or "")
        if test is None:
            continue
        for op in ops_of_cause(cause):
            for sibling in blocks.siblings(op):
                i = position.get(sibling)
                # a sibling whose error compare found absorbed before every output (contained) is not joined:
                # these outputs do not need it kept (a later attempt's compare names it where they do)
                if i is not None and test(peaks.get(sibling)) and sibling not in absorbed and i not in found:
                    found.append(i)
    return found


def ops_of_cause(cause: dict) -> list[str]:
    return list(cause.get("golden_ops") or [cause["op_name"]])
