"""The search's vocabulary: a remedy (``Candidate``), what one evaluation found (``Result``), one
evaluation in the search (``Attempt``) and its answer (``Outcome``). Pure data, no logic beyond views."""

from __future__ import annotations

from dataclasses import dataclass, field

KEEP = "keep_dtype"
FUSION = "fusion_switch"
IMPL = "op_precision_mode"  # the line '<GE op type>=high_precision' in an --op_precision_mode ini
HIGH_PRECISION = "high_precision"
FP16_MAX = 65504.0
FP16_FLUSH = 2.98e-8  # below half the smallest fp16 subnormal (5.96e-8) a value rounds to 0


@dataclass(frozen=True, order=True)
class Candidate:
    """One remedy: keep an op in fp32 (``keep_dtype``), switch a fusion rule off, or give every op of a GE
    type the high_precision kernel (``op_precision_mode``: ``precision.impl_remedy``)."""

    kind: str  # KEEP | FUSION | IMPL
    name: str  # op name as the convert stage expects it, a fusion rule name, or a GE op type (IMPL)

    def __str__(self) -> str:
        if self.kind == IMPL:
            return f"{self.name}={HIGH_PRECISION}"
        return f"{self.name}:off" if self.kind == FUSION else self.name


Remedy = frozenset  # frozenset[Candidate]


@dataclass
class Result:
    """What one evaluation of a remedy set found."""

    passed: bool
    metric: float | None = None  # the judged number (end-to-end metric, or output cosine)
    output_cosine: float | None = None
    rows: list[dict] = field(default_factory=list)  # compare rows in graph order (runner's shape)
    failure: dict | None = None  # the advisor's first_failure object
    ops: list[str] = field(default_factory=list)  # every op name in graph order (blind fallback)
    note: str = ""
    candidates: frozenset | None = None  # op names keep_dtype can change (None: unknown, all may)
    producers: dict | None = None  # op -> the ops it reads (the golden graph), where the evaluator knows it
    blocked: str | None = None  # why no keep set can work on this target (then the search stops)
    samples: object = None  # per-sample scores behind ``metric`` where known (fix.resolution: Top-k hits)
    causes: list = field(default_factory=list)  # other ops compare names as breaking on their own (also_failing)
    resumed: bool = False  # read back from an earlier run's journal (fix.journal), not evaluated now
    seconds: float | None = None  # how long the evaluation took (None: not measured, or resumed)
    # op name -> GE type, for the ops whose kernel op_precision_mode high_precision restores on this SoC
    # (precision.impl_remedy.remedies; None: not known, no impl remedy is proposed)
    impl_remedies: dict | None = None


@dataclass
class Attempt:
    number: int  # 1-based count of evaluations (resumed ones included)
    remedy: tuple[Candidate, ...]
    phase: str  # 'baseline' | 'grow' | 'shrink'
    result: Result


@dataclass
class Outcome:
    remedy: tuple[Candidate, ...]  # the answer (passing and minimal when both flags say so)
    passed: bool
    minimal: bool
    attempts: list[Attempt]
    message: str
    final: Result | None = None
    interrupted: bool = False  # stopped by Ctrl-C: the attempts so far are kept (fix.journal)
    # kept because their golden values prove it (fix.needed), not tested one by one
    by_range: tuple[Candidate, ...] = ()

    @property
    def keep_dtype(self) -> list[str]:
        return [c.name for c in self.remedy if c.kind == KEEP]

    @property
    def fusion_switch(self) -> dict[str, str]:
        return {c.name: "off" for c in self.remedy if c.kind == FUSION}

    @property
    def op_precision_mode(self) -> dict[str, str]:
        return {c.name: HIGH_PRECISION for c in self.remedy if c.kind == IMPL}

    @property
    def evaluated(self) -> int:
        """Evaluations made by this run (the attempts less those resumed from a journal)."""
        return sum(1 for a in self.attempts if not a.result.resumed)
