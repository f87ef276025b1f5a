"""The tuning search, free of any runtime: candidates and AOE's order (pure).

A ``trial(best, candidate)`` callback measures a candidate against the current best and says whether
it is faster beyond the noise and keeps accuracy; the search only decides what to try next.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Callable, Iterable

GRAPH_LEVELS = ("ORT_DISABLE_ALL", "ORT_ENABLE_BASIC", "ORT_ENABLE_EXTENDED", "ORT_ENABLE_ALL")
EXECUTION_MODES = ("ORT_SEQUENTIAL", "ORT_PARALLEL")
JOB_GRAPH, JOB_OP = 1, 2  # AOE's --job_type: 1 subgraph tuning, 2 operator tuning

# onnxruntime graph transformers that act on particular op types: the per-op "fusion switches"
FUSIONS_BY_OP_TYPE: dict[str, tuple[str, ...]] = {
    "Conv": ("ConvActivationFusion", "ConvAddFusion", "ConvBNFusion", "ConvMulFusion", "NchwcTransformer"),
    "MatMul": ("MatMulAddFusion", "MatMulScaleFusion"),
    "Gemm": ("GemmActivationFusion",),
    "Transpose": ("TransposeOptimizer",),
    "Erf": ("GeluFusion", "BiasGeluFusion"),
    "ReduceMean": ("LayerNormFusion", "SimplifiedLayerNormFusion"),
    "Clip": ("ReluClipFusion",),
}
GENERAL_FUSIONS = ("ConstantFolding", "CommonSubexpressionElimination")


@dataclass(frozen=True)
class Trial:
    faster: bool  # beyond the noise
    accurate: bool
    detail: dict[str, Any] = field(default_factory=dict)  # speedup numbers, metric violations

    @property
    def accepted(self) -> bool:
        return self.faster and self.accurate


@dataclass
class SearchLog:
    best: dict[str, Any]
    trials: list[dict[str, Any]] = field(default_factory=list)
    stopped_early: bool = False  # max_candidates reached


def thread_counts(cpu_count: int) -> list[int]:
    """1, 2, 4, ... up to the machine's cores, plus the core count itself."""
    counts, n = [], 1
    while n < cpu_count:
        counts.append(n)
        n *= 2
    counts.append(max(1, cpu_count))
    return sorted(set(counts))


def graph_dimensions(cpu_count: int) -> list[tuple[str, list]]:
    """Job type 1, in the order tried: what changes the most first."""
    return [("graph_optimization_level", list(GRAPH_LEVELS)),
            ("intra_op_num_threads", thread_counts(cpu_count)),
            ("execution_mode", list(EXECUTION_MODES))]


def fusion_candidates(op_types: Iterable[str]) -> list[str]:
    """Job type 2: the transformers that can touch this model's ops, each one a switch to try off."""
    names = list(GENERAL_FUSIONS)
    for op_type in sorted(set(op_types)):
        names += [n for n in FUSIONS_BY_OP_TYPE.get(op_type, ()) if n not in names]
    return names


def _record(log: SearchLog, job: int, change: dict, candidate: dict, trial: Trial) -> None:
    log.trials.append({"job_type": job, "change": change, "settings": candidate,
                       "faster": trial.faster, "accurate": trial.accurate,
                       "accepted": trial.accepted, **trial.detail})


def search(start: dict[str, Any], *, job_types: Iterable[int], cpu_count: int, op_types: Iterable[str],
           trial: Callable[[dict, dict], Trial], max_candidates: int) -> SearchLog:
    """Coordinate search: graph-level settings first (one dimension at a time, each value against
    the current best), then each fusion switch off. A candidate is kept only when ``trial`` accepts it."""
    log = SearchLog(best=dict(start))
    jobs = sorted(set(job_types))
    budget = max_candidates

    def attempt(job: int, change: dict) -> bool:
        nonlocal budget
        if budget <= 0:
            log.stopped_early = True
            return False
        budget -= 1
        candidate = {**log.best, **change}
        result = trial(log.best, candidate)
        _record(log, job, change, candidate, result)
        if result.accepted:
            log.best = candidate
        return True

    if JOB_GRAPH in jobs:
        for key, values in graph_dimensions(cpu_count):
            for value in values:
                if log.best.get(key) != value and not attempt(JOB_GRAPH, {key: value}):
                    return log
    if JOB_OP in jobs and log.best.get("graph_optimization_level") != "ORT_DISABLE_ALL":
        for name in fusion_candidates(op_types):
            disabled = list(log.best.get("disabled_optimizers", []))
            if name in disabled:
                continue
            if not attempt(JOB_OP, {"disabled_optimizers": disabled + [name]}):
                return log
    return log
