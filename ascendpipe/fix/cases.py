"""One keep set over several (model, input) cases: a decoder's prefill and decode graphs, several past
lengths. ``CasesEvaluator`` judges a remedy on every case (each a ``StandaloneEvaluator``): the target
holds when it holds on all of them (a keep_dtype name a case's graph lacks is left out of that case's
conversion); the evidence the search grows from is the first failing case's
(its compare rows first, then the other cases' rows, so a kept op beyond fp16's range in any case is
known to be needed). ``needed_for`` says, for each remedy of the answer, which cases it was needed for.

The CLI spells a case ``--case MODEL[:INPUT]`` (``parse_case``); ``--golden M --input X`` is the first.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path

from ascendpipe.errors import Location, UserError
from ascendpipe.fix.search import KEEP, Candidate, Outcome, Result, out_of_fp16_range

INPUT_SUFFIXES = (".npy", ".npz")


def parse_case(text: str) -> tuple[Path, Path | None]:
    """``MODEL[:INPUT]`` -> (model, input or None). The input is split off at the last ':' only when
    it names a .npy or .npz file, so a model path holding ':' still reads as a model."""
    model, colon, given = text.rpartition(":")
    if colon and model and given.endswith(INPUT_SUFFIXES):
        return Path(model), Path(given)
    if not text:
        raise UserError("--case needs MODEL[:INPUT], e.g. --case decoder.onnx:past8.npz", Location(field="--case"))
    return Path(text), None


def case_label(model: Path, input_path: Path | None) -> str:
    return f"{Path(model).name}:{Path(input_path).name}" if input_path else f"{Path(model).name} (random input)"


@dataclass
class CaseResult:
    label: str
    passed: bool
    metric: float | None
    failure: str | None  # the case's first failing op, where it fails


@dataclass
class CasesResult(Result):
    """A ``Result`` over several cases; ``cases``: each case's own verdict."""

    cases: list[CaseResult] = field(default_factory=list)
    case_rows: list[list[dict]] = field(default_factory=list)  # each case's own compare rows, in label order


class CasesEvaluator:
    """Evaluate a remedy on every case; see the module docstring."""

    def __init__(self, evaluators: list, labels: list[str]):
        if len(evaluators) != len(labels) or not evaluators:
            raise ValueError("one label per case, at least one case")
        self.evaluators, self.labels = list(evaluators), list(labels)
        self.order = self.evaluators[0].order
        self.ops = list(dict.fromkeys(op for e in self.evaluators for op in e.ops))

    def full_remedy(self, remedy):
        return self.evaluators[0].full_remedy(remedy)

    def impl_file(self, remedy):
        return self.evaluators[0].impl_file(remedy)

    def evaluate(self, remedy: frozenset) -> CasesResult:
        results = [e.evaluate(_in_graph(remedy, e)) for e in self.evaluators]
        failing = [k for k, r in enumerate(results) if not r.passed]
        lead = results[failing[0]] if failing else results[0]
        ranked = failing + [k for k in range(len(results)) if k not in failing]
        rows = [row for k in ranked for row in results[k].rows]
        candidates = None
        if all(r.candidates is not None for r in results):  # an op the emulation rounds in any of the graphs
            candidates = frozenset().union(*(r.candidates for r in results))
        impl = None
        if any(r.impl_remedies is not None for r in results):  # an op type high_precision restores in any graph
            impl = {op: t for r in results for op, t in (r.impl_remedies or {}).items()}
        metrics = [r.metric for r in results if r.metric is not None]
        cosines = [r.output_cosine for r in results if r.output_cosine is not None]
        cases = [CaseResult(label, r.passed, r.metric, (r.failure or {}).get("op_name") if not r.passed else None)
                 for label, r in zip(self.labels, results)]
        blocked = next((f"{self.labels[k]}: {results[k].blocked}" for k in failing if results[k].blocked), None)
        note = ("; ".join(f"fails on {cases[k].label}" + (f" ({results[k].note})" if results[k].note else "")
                          for k in failing) or f"passes on all {len(cases)} cases")
        return CasesResult(not failing, min(metrics) if len(metrics) == len(results) else None,
                           min(cosines) if len(cosines) == len(results) else None, rows=rows, failure=lead.failure,
                           ops=self.ops, note=note, candidates=candidates, producers=lead.producers, blocked=blocked,
                           causes=list(lead.causes or []), impl_remedies=impl,
                           cases=cases, case_rows=[r.rows for r in results])


def _in_graph(remedy: frozenset, evaluator) -> frozenset:
    """The remedy as one case's graph takes it: a keep_dtype name that graph lacks (a prefill graph
    without the decode graph's cache ops) is left out of its conversion, as it would be of its ATC run."""
    names = set(evaluator.ops)
    return frozenset(c for c in remedy if c.kind != KEEP or c.name in names)


def needed_for(outcome: Outcome, labels: list[str]) -> dict[str, list[str] | None]:
    """Each remedy of the answer -> the cases that fail without it (read from the search's own trials of
    the answer less that remedy, or of a failing superset of it: a keep set that fails fails with less
    kept too); a kept op whose golden lies beyond fp16's range in a case is needed
    for that case by range alone. None: not measured (the shrink did not try the answer without it)."""
    answer = frozenset(outcome.remedy)
    trials = {frozenset(a.remedy): a.result for a in outcome.attempts}
    baseline = outcome.attempts[0].result if outcome.attempts else None
    found: dict[str, list[str] | None] = {}
    for c in outcome.remedy:
        without = trials.get(answer - {c})
        if without is None:  # a failing trial of a superset of the answer less it: less fails too
            supersets = [(len(r), r) for r in trials if c not in r and r >= answer - {c} and not trials[r].passed]
            without = trials[min(supersets, key=lambda x: (x[0], sorted(map(str, x[1]))))[1]] if supersets else None
        if isinstance(without, CasesResult) and without.cases:
            found[str(c)] = [case.label for case in without.cases if not case.passed]
            continue
        by_range = _beyond_range_cases(c, baseline, labels)
        found[str(c)] = by_range or None
    return found


def _beyond_range_cases(c: Candidate, baseline: Result | None, labels: list[str]) -> list[str]:
    if c.kind != KEEP or not isinstance(baseline, CasesResult):
        return []
    return [label for label, rows in zip(labels, baseline.case_rows)
            if out_of_fp16_range(frozenset({c}), rows, baseline.producers)]
