"""The tuning search, free of any runtime: candidates and AOE's order (pure).

A ``trial(best, candidate)`` callback measures a candidate against the current best and says whether
it is faster beyond the noise and keeps accuracy; the search only decides what to try next.

Why not one pass, one dimension at a time: the best value of one knob depends on the others. From
ORT_PARALLEL, one intra-op thread beats PARALLEL's default threads; once the mode is back to
SEQUENTIAL that one thread is the slow choice, and a single pass never asks again (ResNet-18 kept
PARALLEL with 1 thread, 2x slower than the defaults). So the search (1) times the documented defaults
first, (2) sweeps the whole graph space (level x threads x mode) when it fits in the trial budget,
and (3) otherwise re-examines every knob after any change until no single change is kept: a fixed
point, not the end of a path.
"""

from __future__ import annotations

import itertools
import json
from dataclasses import dataclass, field
from typing import Any, Callable, Iterable

GRAPH_LEVELS = ("ORT_DISABLE_ALL", "ORT_ENABLE_BASIC", "ORT_ENABLE_EXTENDED", "ORT_ENABLE_ALL")
EXECUTION_MODES = ("ORT_SEQUENTIAL", "ORT_PARALLEL")
JOB_GRAPH, JOB_OP = 1, 2  # AOE's --job_type: 1 subgraph tuning, 2 operator tuning
GRAPH_KNOBS = ("graph_optimization_level", "intra_op_num_threads", "execution_mode")
FUSION_KNOB = "disabled_optimizers"

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
    detail: dict[str, Any] = field(default_factory=dict)  # speedup numbers, metric violations; "error": it did not run

    @property
    def accepted(self) -> bool:
        return self.faster and self.accurate


@dataclass
class SearchLog:
    best: dict[str, Any]
    trials: list[dict[str, Any]] = field(default_factory=list)
    stopped_early: bool = False  # max_candidates reached before the search was done
    start: dict[str, Any] = field(default_factory=dict)
    defaults: dict[str, Any] | None = None  # the defaults candidate (None: the start is the defaults)
    swept: int = 0  # graph settings of the whole space timed by the sweep (0: no sweep, it did not fit)
    space: int = 0  # size of the graph space (level x threads x mode)
    fixed_point: bool = False  # every single change from ``best`` was timed against it and none kept

    @property
    def plan(self) -> str:
        parts = ["the defaults" if self.defaults is not None else "the start is the defaults"]
        if self.swept:
            parts.append(f"the whole graph space ({self.space} settings)")
        parts.append("single changes until none helps" + ("" if self.fixed_point else
                                                          " (stopped by max_candidates first)"))
        return ", then ".join(parts)


def key(settings: dict) -> str:
    return json.dumps(settings, sort_keys=True)


def thread_counts(cpu_count: int) -> list[int]:
    """1, 2, 4, ... up to the machine's cores, plus the core count itself."""
    counts, n = [], 1
    while n < cpu_count:
        counts.append(n)
        n *= 2
    counts.append(max(1, cpu_count))
    return sorted(set(counts))


def graph_dimensions(cpu_count: int) -> list[tuple[str, list]]:
    """Job type 1, in the order tried: what changes the most first. Threads start with 0, onnxruntime's
    own choice (its default), so the default is a value the search can return to."""
    return [("graph_optimization_level", list(GRAPH_LEVELS)),
            ("intra_op_num_threads", [0] + thread_counts(cpu_count)),
            ("execution_mode", list(EXECUTION_MODES))]


def graph_space(cpu_count: int) -> list[dict[str, Any]]:
    """Every graph setting: level x threads x mode, the defaults' level (ENABLE_ALL) first."""
    dims = graph_dimensions(cpu_count)
    names = [name for name, _ in dims]
    values = [list(reversed(v)) if name == "graph_optimization_level" else v for name, v in dims]
    return [dict(zip(names, point)) for point in itertools.product(*values)]


def fusion_candidates(op_types: Iterable[str]) -> list[str]:
    """Job type 2: the transformers that can touch this model's ops, each one a switch to try off."""
    names = list(GENERAL_FUSIONS)
    for op_type in sorted(set(op_types)):
        names += [n for n in FUSIONS_BY_OP_TYPE.get(op_type, ()) if n not in names]
    return names


def defaults_candidate(start: dict, defaults: dict, jobs: Iterable[int]) -> dict:
    """The start with the knobs the job types tune set to their defaults (job type 2 alone: all
    fusions back on, the graph knobs as they started)."""
    jobs = set(jobs)
    knobs = (GRAPH_KNOBS if JOB_GRAPH in jobs else ()) + ((FUSION_KNOB,) if JOB_OP in jobs else ())
    return {**start, **{k: defaults[k] for k in knobs if k in defaults}}


def _record(log: SearchLog, job: int, source: str, best: dict, candidate: dict, trial: Trial) -> None:
    change = {k: v for k, v in candidate.items() if best.get(k) != v}
    log.trials.append({"job_type": job, "change": change, "settings": candidate, "source": source,
                       "faster": trial.faster, "accurate": trial.accurate,
                       "accepted": trial.accepted, **trial.detail})


class _Budget(Exception):
    """max_candidates reached."""


def search(start: dict[str, Any], *, job_types: Iterable[int], cpu_count: int, op_types: Iterable[str],
           trial: Callable[[dict, dict], Trial], max_candidates: int,
           defaults: dict[str, Any] | None = None) -> SearchLog:
    """Find the fastest accurate settings from ``start``. A candidate is kept only when ``trial``
    (candidate against the current best) accepts it. In order, within ``max_candidates`` trials:

    1. ``defaults`` (the knobs of the job types at their documented defaults), when they differ
       from the start: the start and the defaults are always both candidates;
    2. job type 1, when the graph space not yet timed fits in the budget (less one trial per fusion
       switch where job type 2 follows): every graph setting, each against the best so far;
    3. single changes (each graph knob's every value, each fusion switch flipped), AOE's order (graph
       level first, then per op), repeated after any change until a whole pass keeps nothing. A pair
       already timed against each other is not timed again; a change tried against an earlier best is;
    4. at the fixed point, budget left, a second look (one each, largest mean gain first) at the
       changes from the best whose trial was rejected though its mean was a gain: the interval rule
       still decides, with fresh rounds. A kept one starts step 3 again.
    """
    jobs = sorted(set(job_types))
    op_types = list(op_types)
    log = SearchLog(best=dict(start), start=dict(start))
    compared: set[frozenset] = set()
    broken: set[str] = set()  # settings that failed to run: not tried again
    # pair -> (mean gain %, job, candidate) of a trial rejected though its mean was a gain: on a
    # loaded host a 2x faster setting can miss the interval rule once (a second look, below)
    undecided: dict[frozenset, tuple[float, int, dict]] = {}
    looked: set[frozenset] = set()
    left = max_candidates

    def attempt(job: int, source: str, candidate: dict) -> bool:
        nonlocal left
        pair = frozenset((key(log.best), key(candidate)))
        if len(pair) == 1 or pair in compared or key(candidate) in broken:
            return False
        if left <= 0:
            log.stopped_early = True
            raise _Budget
        left -= 1
        compared.add(pair)
        best = log.best
        result = trial(best, candidate)
        _record(log, job, source, best, candidate, result)
        if "error" in result.detail:
            broken.add(key(candidate))
        gain = (result.detail.get("speedup") or {}).get("improvement_pct")
        if not result.faster and "error" not in result.detail and isinstance(gain, (int, float)) and gain > 0:
            undecided[pair] = (float(gain), job, dict(candidate))
        if result.accepted:
            log.best = dict(candidate)
        return result.accepted

    fusions = fusion_candidates(op_types) if JOB_OP in jobs else []
    space = graph_space(cpu_count) if JOB_GRAPH in jobs else []
    log.space = len(space)
    try:
        if defaults is not None:
            wanted = defaults_candidate(start, defaults, jobs)
            if key(wanted) != key(start):
                log.defaults = wanted
                attempt(JOB_GRAPH if JOB_GRAPH in jobs else JOB_OP, "defaults", wanted)
        settled = None  # the best whose graph neighbours the sweep has answered for
        timed = {key({k: s.get(k) for k in GRAPH_KNOBS}) for s in (start, log.defaults) if s is not None}
        todo = [p for p in space if key(p) not in timed]
        if space and len(todo) <= left - len(fusions):
            for point in todo:
                attempt(JOB_GRAPH, "sweep", {**log.best, **point})
            log.swept = len(space)
            # every graph setting was timed: each lost to the best of its time, which the final best
            # beat (or is), so its single graph changes are answered
            settled = key(log.best)
        while True:
            before = key(log.best)
            if JOB_GRAPH in jobs and key(log.best) != settled:
                for name, values in graph_dimensions(cpu_count):
                    for value in values:
                        if log.best.get(name) != value:
                            attempt(JOB_GRAPH, "step", {**log.best, name: value})
            if JOB_OP in jobs and log.best.get("graph_optimization_level") != "ORT_DISABLE_ALL":
                for name in fusions + [n for n in log.best.get(FUSION_KNOB, []) if n not in fusions]:
                    disabled = list(log.best.get(FUSION_KNOB, []))
                    flipped = [n for n in disabled if n != name] if name in disabled else disabled + [name]
                    attempt(JOB_OP, "step", {**log.best, FUSION_KNOB: flipped})
            if key(log.best) != before:
                continue
            log.fixed_point = True  # no single change kept; now a second look at the closest calls
            again = sorted(((g, p, j, c) for p, (g, j, c) in undecided.items()
                            if key(log.best) in p and key(c) != key(log.best) and p not in looked),
                           key=lambda x: -x[0])
            if not again or left <= 0:
                return log
            _, pair, job, candidate = again[0]
            looked.add(pair)  # one look per pair: this loop ends
            compared.discard(pair)
            if attempt(job, "second look", candidate):
                log.fixed_point = False  # a change: every knob again
    except _Budget:
        return log
