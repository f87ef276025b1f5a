"""Kept ops the shrink need not test: their golden values alone prove them needed.

Golden values do not depend on the remedy, so the baseline's compare rows decide:
(a) an op whose golden output cannot exist in fp16: beyond 65504 (it becomes inf, or 65504 where the
    SoC saturates), or a nonzero tensor whose every value is below half the smallest subnormal (it
    becomes all zeros);
(b) an op that reads a golden value beyond 65504 and computes on it (``READS_RANGE``: arithmetic,
    reductions, norms, cube ops): left in fp16 it reads that input as inf (or 65504), and what it
    computes from it is inf, NaN or off by the clipped factor while its golden output is a finite
    value (an RMSNorm's Sqrt reading the kept mean of squares: compare's overflow chain names it,
    "would overflow next"). Ops that may map an overflowed input to the right value (Sigmoid, Tanh,
    Clip, Min, Max, Relu, comparisons, selections, Softmax of a masked score, Div and Reciprocal of a
    large denominator) are not in the list: the shrink tests them.
An op whose error compare found absorbed before every output (``contained``) is needed by neither
rule: the shrink tests it (compare names such an own overflow first, issue 40).
"""

from __future__ import annotations

from ascendpipe.compare.mechanism import compute_producers, golden_peaks, op_types, ops_of
from ascendpipe.fix.causes import beyond_fp16
from ascendpipe.fix.core import FP16_FLUSH, FP16_MAX, KEEP

# ops whose output is wrong whenever one input is inf (or clipped to 65504) and the golden output is
# finite: inf propagates through them (or becomes NaN), it is never mapped back to the true value
READS_RANGE = frozenset({
    "Add", "Sub", "Mul", "Sum", "Mean", "Neg", "Abs", "Sqrt", "Pow", "Exp", "Log", "Softplus",
    "ReduceSum", "ReduceMean", "ReduceSumSquare", "ReduceL1", "ReduceL2", "ReduceLogSum", "ReduceLogSumExp",
    "ReduceProd", "CumSum", "MatMul", "Gemm", "Conv", "ConvTranspose", "Einsum", "FusedConv", "FusedMatMul",
    "FusedGemm", "InstanceNormalization", "LayerNormalization", "GroupNormalization", "BatchNormalization",
    "SimplifiedLayerNormalization", "SkipLayerNormalization", "SkipSimplifiedLayerNormalization",
    "LpNormalization", "MeanVarianceNormalization",
})


def out_of_fp16_range(found: frozenset, rows: list[dict], producers: dict[str, list[str]] | None = None) -> frozenset:
    """The kept ops of ``found`` that rules (a) and (b) prove needed (see the module docstring); rule (b)
    needs the op edges (``producers``)."""
    # an op whose error the compare found absorbed before every output (contained) is not needed by
    # range alone: the shrink tests it (compare names such an own overflow first, issue 40)
    reaching = {op for row in rows if row.get("failed") and not row.get("contained") for op in ops_of(row)}
    absorbed = {op for row in rows if row.get("contained") for op in ops_of(row)} - reaching
    biggest: dict[str, float] = {}
    for row in rows:
        value = row.get("golden_abs_max")
        if row.get("op_name") and isinstance(value, (int, float)):
            biggest[row["op_name"]] = max(biggest.get(row["op_name"], 0.0), float(value))
    kinds = op_types(rows) if producers else {}
    peaks = golden_peaks(rows) if producers else {}

    def unrepresentable(name: str) -> bool:
        value = biggest.get(name)
        return value is not None and (value > FP16_MAX or 0.0 < value < FP16_FLUSH)

    def reads_beyond(name: str) -> bool:
        if not producers or kinds.get(name) not in READS_RANGE or not 0.0 < peaks.get(name, 0.0) <= FP16_MAX:
            return False
        return any(beyond_fp16(peaks.get(p)) for p in compute_producers(producers, name, kinds))

    return frozenset(c for c in found if c.kind == KEEP and c.name not in absorbed
                     and (unrepresentable(c.name) or reads_beyond(c.name)))
