"""The remedy search: grow a remedy set from compare evidence until the target holds, then shrink it.

Pure logic: no I/O. An ``Evaluator`` turns a remedy set into a ``Result`` (did the target hold,
the metric, the output cosine, the per-op compare rows and the advisor's first failure); how it
does so (in-process conversion, an engine build, ATC on a device) is the caller's business.

Growing: each failing attempt names what to add next from that attempt's own compare, best evidence
first:
1. the advisor's advice on the attempt's first failure (``keep_dtype`` ops, overflow producers first
   as the advisor lists them; fusion rules where it points at a fused op);
2. else the failing rows' ops not kept yet, the first failure's row first, then graph order; a
   failing fused row whose ops are all kept gets its fusion pass switched off (a kept op folded into
   a kernel still computes in that kernel's precision), unless it is a UB fusion (members keep their dtypes);
3. else the first failure's own op;
4. else, with no usable evidence, ops in graph order from the first failure on, doubling the batch
   each blind step while the first failure stays where it is.
3a. else the first failure's producers and consumers (``neighbours``: the cause and its carrier);
Only ops that keep_dtype can change are ever proposed (``Result.candidates``: float ops the
precision plan would compute differently when kept, i.e. every op the emulation rounds, a
``Cast(to=float)`` included; never Constant, Identity or integer ops), and never an op that only moves
values (Reshape, Transpose, Pad, Slice, Cast, ...: ``compare.mechanism.MOVE_OPS``) while its values lie
in fp16's range, where fp16 holds what it moves as it is; beyond 65504 (a Cast to float of a residual
past fp16's range, which the emulation rounds to inf as the device does) it is proposed like any op.
Failing rows compare calls contained (their error does not reach an output) are not evidence.
A result that is ``blocked`` (no keep set can work on the target, e.g. a cube op reading an
overflowed input on a SoC whose cube reads fp16) ends the search after the baseline, saying why.
Shrinking: delta debugging (ddmin) over the passing set, or for a few candidates removing each
once, so every kept candidate is needed (1-minimal). A kept op whose golden output cannot exist in
fp16 (beyond 65504, or wholly below its smallest subnormal) is needed by range alone and is not
re-tested. Every evaluation counts against ``max_attempts``; a set already evaluated is never
evaluated again.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Callable, Iterable, Protocol

from ascendpipe.compare.mechanism import compute_producers, consumers_of, golden_peaks, is_move, op_types

KEEP = "keep_dtype"
FUSION = "fusion_switch"
LINEAR_SHRINK_MAX = 4  # up to this many candidates, shrink by removing each once (n evaluations)


@dataclass(frozen=True, order=True)
class Candidate:
    """One remedy: keep an op in fp32 (``keep_dtype``) or switch a fusion rule off."""

    kind: str  # KEEP | FUSION
    name: str  # op name as the convert stage expects it, or a fusion rule name

    def __str__(self) -> str:
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


class Evaluator(Protocol):
    def evaluate(self, remedy: frozenset) -> Result: ...


@dataclass
class Attempt:
    number: int  # 1-based count of real evaluations
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

    @property
    def keep_dtype(self) -> list[str]:
        return [c.name for c in self.remedy if c.kind == KEEP]

    @property
    def fusion_switch(self) -> dict[str, str]:
        return {c.name: "off" for c in self.remedy if c.kind == FUSION}


class OutOfAttempts(Exception):
    pass


# --- candidate proposal --------------------------------------------------------------------

def _row_ops(row: dict) -> list[str]:
    """Original op names of a row (stable across fusion switches), else its own op name."""
    return list(row.get("golden_ops") or [row.get("golden_op") or row["op_name"]])


def advised(failure: dict | None) -> list[Candidate]:
    """Candidates named by the advisor's advice items, in the advisor's order."""
    found: list[Candidate] = []
    for item in (failure or {}).get("advice") or []:
        if item.get("kind") == "keep_dtype":
            # 'added': the new entries; 'ops' may also repeat what the stage already keeps
            found += [Candidate(KEEP, op) for op in item.get("added", item.get("ops")) or []]
        elif item.get("kind") == "skip_layers":  # a quantized layer kept in float (fix --quantize)
            found += [Candidate(KEEP, layer) for layer in item.get("added", item.get("layers")) or []]
        elif item.get("kind") == "fusion_switch":
            found += [Candidate(FUSION, rule) for rule in item.get("rules") or []]
    return list(dict.fromkeys(found))


def _keepable(result: Result, name: str) -> bool:
    """An op keep_dtype can change: a float op the emulation rounds (the plan's ``keepable``); one that
    only moves values (Reshape, Transpose, Cast...) only where its golden lies beyond fp16's range
    (elsewhere fp16 holds what it moves as it is)."""
    if is_move(_types(result).get(name)) and _peaks(result).get(name, 0.0) <= FP16_MAX:
        return False
    return result.candidates is None or name in result.candidates


def _per_result(result: Result, attr: str, compute):
    """``compute(result.rows)``, worked out once per result (kept on it)."""
    cached = getattr(result, attr, None)
    if cached is None:
        cached = compute(result.rows)
        object.__setattr__(result, attr, cached)
    return cached


def _peaks(result: Result) -> dict[str, float]:
    return _per_result(result, "_golden_peaks", golden_peaks)


def _types(result: Result) -> dict[str, str]:
    return _per_result(result, "_op_types", op_types)


def neighbours(result: Result, kept: Iterable[Candidate], keepable: Callable[[str], bool]) -> list[Candidate]:
    """The first failure's producers and consumers (through ops that only move values), not kept yet:
    where its cause and its carrier sit when the advice and the failing rows are used up."""
    name = (result.failure or {}).get("op_name")
    if not name or not result.producers:
        return []
    kept_names = {c.name for c in kept if c.kind == KEEP}
    types = _types(result)
    consumers = consumers_of(result.producers)
    near = compute_producers(result.producers, name, types)
    stack, seen = list(consumers.get(name, ())), set()
    while stack:  # consumers, looking through the ops that only move values
        c = stack.pop(0)
        if c in seen:
            continue
        seen.add(c)
        if is_move(types.get(c)):
            stack += list(consumers.get(c, ()))
        else:
            near.append(c)
    return [Candidate(KEEP, op) for op in dict.fromkeys(near) if op not in kept_names and keepable(op)]


def first_failing(rows: list[dict], kept: Iterable[Candidate], failure: dict | None = None,
                  keepable: Callable[[str], bool] = lambda name: True) -> list[Candidate]:
    """The ops of the first failure's row (else the first failing row in graph order) that are not
    kept yet; a failing fused row whose ops are all kept: its fusion pass, switched off."""
    kept_names = {c.name for c in kept if c.kind == KEEP}
    kept_rules = {c.name for c in kept if c.kind == FUSION}
    # a contained failure does not reach an output (see compare.mechanism): keeping it changes nothing there
    failing = [row for row in rows if row.get("failed") and row.get("side", "both") != "golden_only"]
    # unless the target is stricter than compare's thresholds (its outputs pass there): then they are all there is
    failing = [row for row in failing if not row.get("contained")] or failing
    first = (failure or {}).get("op_name")
    failing.sort(key=lambda row: row.get("op_name") != first)  # stable: the failure's row, then graph order
    for row in failing:
        fresh = [op for op in _row_ops(row) if op not in kept_names and keepable(op)]
        if fresh:
            return [Candidate(KEEP, op) for op in fresh]
        rule = row.get("pass_name")
        if rule and "+" not in rule and rule not in kept_rules and _switch_changes_values(rule):
            return [Candidate(FUSION, rule)]
    return []


def _switch_changes_values(rule: str) -> bool:
    """Whether switching ``rule`` off can change a value: never a UB fusion, whose members keep their
    own dtypes (precision/atc_passes.py); a pass we do not know is tried."""
    from ascendpipe.precision import atc_passes

    return rule not in atc_passes.BY_NAME or atc_passes.changes_values(rule)


def propose(result: Result, current: frozenset, blind_batch: int) -> tuple[list[Candidate], bool]:
    """(candidates to add, whether this was a blind pick). Never proposes one already in ``current``
    nor an op keep_dtype cannot change."""
    keepable = lambda name: _keepable(result, name)
    fresh = [c for c in advised(result.failure) if c not in current and (c.kind != KEEP or keepable(c.name))]
    if fresh:
        return fresh, False
    fresh = first_failing(result.rows, current, result.failure, keepable)
    if fresh:
        return fresh, False
    name = (result.failure or {}).get("op_name")
    if name and keepable(name) and Candidate(KEEP, name) not in current:  # the failure's own op, no rows
        return [Candidate(KEEP, name)], False
    fresh = neighbours(result, current, keepable)
    if fresh:
        return fresh, False
    order = list(dict.fromkeys([op for row in result.rows for op in _row_ops(row)] + list(result.ops)))
    start = _first_failure_position(result, order)
    order = order[start:] + order[:start]  # from the first failure on: upstream of it is not to blame first
    blind = [Candidate(KEEP, op) for op in order if Candidate(KEEP, op) not in current and keepable(op)]
    return blind[:blind_batch], True


def _first_failure_position(result: Result, order: list[str]) -> int:
    names = [(result.failure or {}).get("op_name")]
    names += [op for row in result.rows if row.get("failed") for op in _row_ops(row)]
    for name in names:
        if name in order:
            return order.index(name)
    return 0


# --- the search ----------------------------------------------------------------------------

class _Trials:
    """Evaluations with memo and budget; records every real evaluation as an Attempt."""

    def __init__(self, evaluator: Evaluator, max_attempts: int, rank: Callable[[Candidate], int]):
        self.evaluator, self.max_attempts, self.rank = evaluator, max_attempts, rank
        self.memo: dict[frozenset, Result] = {}
        self.attempts: list[Attempt] = []

    def run(self, remedy: frozenset, phase: str) -> Result:
        remedy = frozenset(remedy)
        if remedy in self.memo:
            return self.memo[remedy]
        if len(self.attempts) >= self.max_attempts:
            raise OutOfAttempts()
        result = self.evaluator.evaluate(remedy)
        self.memo[remedy] = result
        self.attempts.append(Attempt(len(self.attempts) + 1, self.ordered(remedy), phase, result))
        return result

    def ordered(self, remedy: Iterable[Candidate]) -> tuple[Candidate, ...]:
        return tuple(sorted(remedy, key=lambda c: (self.rank(c), c)))

    def passes(self, remedy: Iterable[Candidate]) -> bool:
        return self.run(frozenset(remedy), "shrink").passed

    def best_passing(self) -> frozenset | None:
        passing = [r for r, res in self.memo.items() if res.passed]
        return min(passing, key=lambda r: (len(r), self.ordered(r))) if passing else None


def search(evaluator: Evaluator, *, max_attempts: int = 30, start: Iterable[Candidate] = ()) -> Outcome:
    """Find a small remedy set that makes the evaluator's target hold (see the module docstring)."""
    discovered: dict[Candidate, int] = {}  # candidate -> discovery order (reports list in this order)

    def rank(c: Candidate) -> int:
        return discovered.setdefault(c, len(discovered))

    trials = _Trials(evaluator, max(1, max_attempts), rank)
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
        forced = out_of_fp16_range(found, result.rows)
        minimal = _shrink(trials, found, forced)
        return _outcome(trials, minimal, True, True, f"target met with {len(minimal)} {'remedy' if len(minimal) == 1 else 'remedies'}; each one is needed")
    except OutOfAttempts:
        best = trials.best_passing()
        if best is None:
            return _outcome(trials, current, False, False,
                            _unmet_message(trials, f"stopped after --max-attempts {trials.max_attempts}"))
        return _outcome(trials, best, True, False,
                        f"target met, but --max-attempts {trials.max_attempts} ran out while shrinking: "
                        "the set may hold remedies that are not needed")


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
    failing = list(dict.fromkeys(op for row in result.rows if row.get("failed") for op in _row_ops(row)))
    if not failing:
        return ""
    types = _types(result)

    def shown(ops):
        return ", ".join(f"{op} ({types[op]})" if types.get(op) else op for op in ops[:4]) + (
            f" and {len(ops) - 4} more" if len(ops) > 4 else "")

    moves = [op for op in failing if is_move(types.get(op)) and not _keepable(result, op)
             and Candidate(KEEP, op) not in kept]
    held = [op for op in failing if op not in moves and Candidate(KEEP, op) in kept]
    other = [op for op in failing if op not in moves and op not in held and not _keepable(result, op)]
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


FP16_MAX = 65504.0
FP16_FLUSH = 2.98e-8  # below half the smallest fp16 subnormal (5.96e-8) a value rounds to 0


def out_of_fp16_range(found: frozenset, rows: list[dict]) -> frozenset:
    """Kept ops whose golden output cannot exist in fp16: beyond 65504 (it becomes inf), or a nonzero
    tensor whose every value is below half the smallest subnormal (it becomes all zeros). They are
    needed without a trial to prove it. Golden values do not depend on the remedy, so the
    baseline's compare rows decide."""
    # an op whose error the compare found absorbed before every output (contained) is not needed by
    # range alone: the shrink tests it (compare names such an own overflow first, issue 40)
    reaching = {op for row in rows if row.get("failed") and not row.get("contained") for op in _row_ops(row)}
    absorbed = {op for row in rows if row.get("contained") for op in _row_ops(row)} - reaching
    biggest: dict[str, float] = {}
    for row in rows:
        value = row.get("golden_abs_max")
        if row.get("op_name") and isinstance(value, (int, float)):
            biggest[row["op_name"]] = max(biggest.get(row["op_name"], 0.0), float(value))
    def unrepresentable(name: str) -> bool:
        value = biggest.get(name)
        return value is not None and (value > FP16_MAX or 0.0 < value < FP16_FLUSH)

    return frozenset(c for c in found if c.kind == KEEP and unrepresentable(c.name) and c.name not in absorbed)


def _shrink(trials: _Trials, found: frozenset, forced: frozenset = frozenset()) -> frozenset:
    """ddmin (Zeller) over what is not ``forced``: split into n chunks, keep a chunk or a complement
    that still passes (every trial keeps the forced candidates)."""
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
