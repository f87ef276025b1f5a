"""The remedy search: grow a remedy set from compare evidence until the target holds, then shrink it.

Pure logic: no I/O. An ``Evaluator`` turns a remedy set into a ``Result`` (did the target hold,
the metric, the output cosine, the per-op compare rows and the advisor's first failure); how it
does so (in-process conversion, an engine build, ATC on a device) is the caller's business.

Growing (``fix.propose``): each failing attempt names what to add next from that attempt's own
compare. One step joins every cause it names (the failure the search grows from, every other op
breaking on its own, and the same op in each repeated block where its own golden carries the same
evidence: ``fix.causes``), so a model whose 32 blocks overflow alike is grown in one step, not 32;
without such evidence the failing rows, the failure's neighbours, then a blind walk in graph order.
A fusion pass is proposed only where switching it off can change a value: never a UB fusion, whose
members keep their own dtypes (precision/atc_passes.py).
A result that is ``blocked`` (no keep set can work on the target, e.g. a cube op reading an
overflowed input on a SoC whose cube reads fp16) ends the search after the baseline, saying why.

Shrinking: delta debugging (ddmin: halves first, then quarters...) over the passing set, or for a few
candidates removing each once, so every kept candidate is needed (1-minimal). A kept op whose golden
values prove it needed (``fix.needed``: its output beyond fp16's range or wholly below its
subnormals, or a computing op reading a value beyond 65504) is not re-tested. Every evaluation counts
against ``max_attempts``; a set already evaluated is never evaluated again.

A ``watch`` (``started(number, phase, remedy)``, ``ended(attempt)``) hears of every attempt as it
starts and ends (fix's progress lines; the journal writes each one). Ctrl-C ends the search with what it
has (``Outcome.interrupted``).
"""

from __future__ import annotations

import time
from typing import Callable, Iterable, Protocol

from ascendpipe.fix.core import (FP16_FLUSH, FP16_MAX, FUSION, IMPL, KEEP, Attempt, Candidate, Outcome,  # noqa: F401
                                 Remedy, Result)
from ascendpipe.fix.needed import out_of_fp16_range  # noqa: F401  (re-exported: fix.cases, tests)
from ascendpipe.fix.propose import (advised, by_cause, first_failing, keepable, neighbours,  # noqa: F401
                                    propose, types)

LINEAR_SHRINK_MAX = 4  # up to this many candidates, shrink by removing each once (n evaluations)
_keepable = keepable  # the name tests and compare's checks import


class Evaluator(Protocol):
    def evaluate(self, remedy: frozenset) -> Result: ...


class OutOfAttempts(Exception):
    pass


class _Interrupted(Exception):
    pass


class _Trials:
    """Evaluations with memo and budget; records every evaluation as an Attempt."""

    def __init__(self, evaluator: Evaluator, max_attempts: int, rank: Callable[[Candidate], int], watch=None):
        self.evaluator, self.max_attempts, self.rank, self.watch = evaluator, max_attempts, rank, watch
        self.memo: dict[frozenset, Result] = {}
        self.attempts: list[Attempt] = []

    def run(self, remedy: frozenset, phase: str) -> Result:
        remedy = frozenset(remedy)
        if remedy in self.memo:
            return self.memo[remedy]
        if len(self.attempts) >= self.max_attempts:
            raise OutOfAttempts()
        number, ordered = len(self.attempts) + 1, self.ordered(remedy)
        if self.watch is not None:
            self.watch.started(number, phase, ordered)
        began = time.monotonic()
        try:
            result = self.evaluator.evaluate(remedy)
        except KeyboardInterrupt:
            raise _Interrupted() from None
        if result.seconds is None and not result.resumed:
            result.seconds = time.monotonic() - began
        self.memo[remedy] = result
        attempt = Attempt(number, ordered, phase, result)
        self.attempts.append(attempt)
        if self.watch is not None:
            self.watch.ended(attempt)
        return result

    def ordered(self, remedy: Iterable[Candidate]) -> tuple[Candidate, ...]:
        return tuple(sorted(remedy, key=lambda c: (self.rank(c), c)))

    def passes(self, remedy: Iterable[Candidate]) -> bool:
        return self.run(frozenset(remedy), "shrink").passed

    def best_passing(self) -> frozenset | None:
        passing = [r for r, res in self.memo.items() if res.passed]
        return min(passing, key=lambda r: (len(r), self.ordered(r))) if passing else None


def search(evaluator: Evaluator, *, max_attempts: int = 30, start: Iterable[Candidate] = (), watch=None) -> Outcome:
    """Find a small remedy set that makes the evaluator's target hold (see the module docstring)."""
    discovered: dict[Candidate, int] = {}  # candidate -> discovery order (reports list in this order)

    def rank(c: Candidate) -> int:
        return discovered.setdefault(c, len(discovered))

    trials = _Trials(evaluator, max(1, max_attempts), rank, watch)
    current = frozenset(start)
    for c in current:
        rank(c)
    try:
        result = trials.run(current, "baseline")
        if result.passed and not current:
            return _outcome(trials, current, True, True, "the target already holds: no remedy needed")
        if result.blocked and not result.passed:  # no keep set can work here: say why, try nothing
            return _outcome(trials, current, False, False, f"target not met: {result.blocked}")
        found, last, tried = _grow(trials, current, result, rank)
        if found is None:
            return _outcome(trials, current, False, False,
                            _unmet_message(trials, "no more candidates to try" + _why_stuck(last, tried)))
        forced = out_of_fp16_range(found, result.rows, result.producers)
        minimal = _shrink(trials, found, forced)
        outcome = _outcome(trials, minimal, True, True, _met_message(minimal, forced))
        outcome.by_range = trials.ordered(forced & minimal)
        return outcome
    except OutOfAttempts:
        best = trials.best_passing()
        if best is None:
            return _outcome(trials, current, False, False,
                            _unmet_message(trials, f"stopped after --max-attempts {trials.max_attempts}"))
        return _outcome(trials, best, True, False,
                        f"target met, but --max-attempts {trials.max_attempts} ran out while shrinking: "
                        "the set may hold remedies that are not needed")
    except _Interrupted:
        best = trials.best_passing()
        done = len(trials.attempts)
        why = f"interrupted after {done} attempt{'s' if done != 1 else ''}"
        if best is None:
            outcome = _outcome(trials, current, False, False, _unmet_message(trials, why))
        else:
            outcome = _outcome(trials, best, True, False, f"{why}: the smallest passing set so far is shown; "
                               "it may hold remedies that are not needed")
        outcome.interrupted = True
        return outcome


def _grow(trials: _Trials, current: frozenset, result: Result, rank) -> tuple[frozenset | None, Result, frozenset]:
    """(a passing remedy set, or None when no candidate is left; the last evaluation's result and
    the remedy set it evaluated)."""
    blind_batch, last_failure = 1, None
    while not result.passed:
        failure = (result.failure or {}).get("op_name")
        if failure != last_failure:  # the last pick moved the first failure: step from there one by one
            blind_batch, last_failure = 1, failure
        fresh, blind = propose(result, current, blind_batch)
        if not fresh:
            return None, result, current
        blind_batch = blind_batch * 2 if blind else 1
        for c in fresh:
            rank(c)
        current = current | frozenset(fresh)
        result = trials.run(current, "grow")
    return current, result, current


def _why_stuck(result: Result, kept: frozenset) -> str:
    """Why the ops still failing take no remedy: ops that only move values are never kept (fp16 holds
    what they move as it is: they fail with the values their producers rounded), kept ops still
    differ (what reaches them was rounded upstream, or the target is tighter than fp32 itself keeps
    between two runs), others are ops keep_dtype cannot change. Empty when the rows do not say."""
    from ascendpipe.compare.mechanism import is_move
    from ascendpipe.fix.propose import _row_ops

    failing = list(dict.fromkeys(op for row in result.rows if row.get("failed") for op in _row_ops(row)))
    if not failing:
        return ""
    kinds = types(result)

    def shown(ops):
        return ", ".join(f"{op} ({kinds[op]})" if kinds.get(op) else op for op in ops[:4]) + (
            f" and {len(ops) - 4} more" if len(ops) > 4 else "")

    moves = [op for op in failing if is_move(kinds.get(op)) and not keepable(result, op)
             and Candidate(KEEP, op) not in kept]
    held = [op for op in failing if op not in moves and Candidate(KEEP, op) in kept]
    other = [op for op in failing if op not in moves and op not in held and not keepable(result, op)]
    parts = []
    if moves:
        one = len(moves) == 1
        parts.append(f"{shown(moves)} only move{'s' if one else ''} values, so {'it is' if one else 'they are'} never kept: "
                     f"{'it carries' if one else 'they carry'} what the ops before rounded")
    if held:
        one = len(held) == 1
        parts.append(f"{shown(held)} {'is' if one else 'are'} kept in fp32 and still differ{'s' if one else ''}: "
                     f"{'its' if one else 'their'} inputs arrive rounded, or the target is tighter than the kept precision reaches")
    if other:
        parts.append(f"{shown(other)} {'is' if len(other) == 1 else 'are'} not an op keep_dtype can change")
    return "; still failing: " + "; ".join(parts)


def _shrink(trials: _Trials, found: frozenset, forced: frozenset = frozenset()) -> frozenset:
    """ddmin (Zeller) over what is not ``forced``: split into n chunks (halves first), keep a chunk or a
    complement that still passes (every trial keeps the forced candidates)."""
    if forced:
        inner = _Forced(trials, forced)
        return frozenset(_shrink(inner, frozenset(found) - forced)) | forced
    items = list(trials.ordered(found))
    if len(items) <= LINEAR_SHRINK_MAX:  # few items: removing each once is cheaper than splitting
        for c in list(items):
            rest = [x for x in items if x != c]
            if trials.passes(rest):
                items = rest
        return frozenset(items)
    n = 2
    while len(items) >= 2:
        chunks = _split(items, n)
        reduced = None
        if n < len(items):  # at full granularity the subsets are single items: complements suffice
            reduced = next((c for c in chunks if trials.passes(c)), None)
            if reduced is not None:
                items, n = reduced, 2
                continue
        for chunk in chunks:
            rest = [c for c in items if c not in chunk]
            if trials.passes(rest):
                reduced = rest
                break
        if reduced is not None:
            items, n = reduced, max(n - 1, 2)
            continue
        if n >= len(items):
            break
        n = min(2 * n, len(items))
    if len(items) == 1 and trials.passes([]):
        items = []
    return frozenset(items)


class _Forced:
    """A view of the trials in which every tested set also holds the forced candidates."""

    def __init__(self, trials: _Trials, forced: frozenset):
        self.trials = trials
        self.forced = forced

    def ordered(self, remedy):
        return self.trials.ordered(remedy)

    def passes(self, items) -> bool:
        return self.trials.passes(list(items) + list(self.trials.ordered(self.forced)))


def _split(items: list, n: int) -> list[list]:
    size, extra = divmod(len(items), n)
    chunks, start = [], 0
    for i in range(n):
        end = start + size + (1 if i < extra else 0)
        chunks.append(items[start:end])
        start = end
    return [c for c in chunks if c]


def metric_text(value: float) -> str:
    """A metric with enough digits to tell it from a target it missed: a cosine of 0.99998977 shown
    as ``.6g`` reads 0.99999, the very target it fell short of. Near 1, three digits past the
    leading nines; otherwise six significant digits."""
    nines = 0
    if 0.9 <= value < 1.0:
        frac = f"{value:.17f}"[2:]
        nines = len(frac) - len(frac.lstrip("9"))
    return f"{value:.{max(6, nines + 3)}g}"


def _met_message(answer: frozenset, forced: frozenset) -> str:
    """What the shrink showed: every tested remedy is needed (a trial without it fails); those kept by
    range (``fix.needed``) were not tested one by one, and the message says so rather than claim them."""
    n = len(answer)
    text = f"target met with {n} {'remedy' if n == 1 else 'remedies'}"
    kept = forced & answer
    if not kept:
        return text + "; each one is needed"
    tested = n - len(kept)
    names = sorted(str(c) for c in kept)
    shown = ", ".join(names) if len(names) <= 4 else f"{', '.join(names[:3])} and {len(names) - 3} more"
    tried = {1: "; the one tested is needed (a trial without it fails)"}.get(
        tested, f"; each of the {tested} tested is needed (a trial without it fails)" if tested else "")
    return (text + tried
            + f"; {len(kept)} kept by range, not tested one by one ({shown}): "
            + ("it computes" if len(kept) == 1 else "each computes")
            + " or reads a value beyond fp16's 65504 (inf in fp16) or below its smallest subnormal (0)")


def _unmet_message(trials: _Trials, why: str) -> str:
    best = max((a for a in trials.attempts if a.result.metric is not None), key=lambda a: a.result.metric, default=None)
    text = f"target not met: {why}"
    if best is not None:
        text += f"; best attempt #{best.number} reached {metric_text(best.result.metric)}"
    return text


def _outcome(trials: _Trials, remedy: frozenset, passed: bool, minimal: bool, message: str) -> Outcome:
    final = trials.memo.get(frozenset(remedy))
    return Outcome(trials.ordered(remedy), passed, minimal, trials.attempts, message, final)


def one_by_one_cost(ops_in_order: list[str], needed: set[str]) -> int:
    """Evaluations that trying ops one by one in graph order needs (baseline, then keep the first
    1, 2, ... ops until every needed op is kept): the yardstick the search must beat."""
    last = max(ops_in_order.index(op) for op in needed) if needed else -1
    return last + 2
