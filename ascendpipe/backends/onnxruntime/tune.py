"""Measured tuning of onnxruntime session settings (AOE's job types 1 and 2 on the emulation).

Every candidate is timed against the current best in adjacent, alternating rounds (A B B A ...),
each setting in a process of its own that is paused while the other runs (``tune_worker``), and kept
only when the 95% interval of its gain lies above ``min_gain_pct`` and its outputs stay within the
compare thresholds of the baseline's outputs on the same inputs.
"""

from __future__ import annotations

import json
import os
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Callable, Sequence

from ascendpipe.backends.onnxruntime.profile import (DEFAULT_SETTINGS, attribute_to_model, model_graph,
                                                      profile_model, resolve_settings)
from ascendpipe.backends.onnxruntime.tune_bank import sha256_file
from ascendpipe.backends.onnxruntime.tune_worker import Worker, WorkerError
from ascendpipe.profiling import aoe_result, search, stats
from ascendpipe.fsutil import write_json_atomic

BANK_FILE = "tune_bank.json"
ROUND_TARGET_MS = 40.0  # auto iterations: a timed round lasts about this long at the baseline
MAX_AUTO_ITERATIONS = 2000
MAX_OPEN_SESSIONS = 3  # baseline, current best, candidate: one process each
MORE_PAIRS = 2  # pairs added while the interval straddles the minimum gain
MAX_PAIRS_FACTOR = 3  # ... up to this many times ``repeats`` pairs
# the end-to-end check decides what is kept: on a loaded host a real 30% gain can still straddle the
# minimum gain after 3x ``repeats`` pairs, and reverting then throws the search's finding away
CONFIRM_PAIRS_FACTOR = 6
OPAT_FILE = "aoe_result_opat.json"


def _key(settings: dict) -> str:
    return json.dumps(settings, sort_keys=True)


def host_load() -> float | None:
    """The 1-minute load average (None where the OS has none)."""
    try:
        return round(os.getloadavg()[0], 2)
    except (AttributeError, OSError):
        return None


def usable_cpus() -> int:
    """Cores this process may run on (its affinity mask where the OS has one, not the host's count)."""
    try:
        return max(1, len(os.sched_getaffinity(0)))
    except AttributeError:
        return os.cpu_count() or 1


class Bench:
    """A timing process per settings, the baseline's reference outputs, paired rounds, the accuracy guard."""

    def __init__(self, model_path: Path, batches: Sequence[dict], *, iterations: int | None, repeats: int,
                 thresholds: dict[str, float]):
        self.model_path, self.batches = Path(model_path), list(batches)
        self.iterations, self.repeats, self.thresholds = iterations or 1, repeats, thresholds
        self.auto = iterations is None  # size each comparison's rounds to its faster setting
        self._workers: dict[str, Worker] = {}
        self._run_ms: dict[str, float] = {}  # latest ms per run, per settings
        self.reference: list[list] | None = None

    def worker(self, settings: dict) -> Worker:
        key = _key(settings)
        if key in self._workers:
            self._workers[key] = self._workers.pop(key)  # most recently used last
        else:
            while len(self._workers) >= MAX_OPEN_SESSIONS:  # a big model's sessions are big
                self._workers.pop(next(iter(self._workers))).close()
            self._workers[key] = Worker(self.model_path, settings, self.batches)
        return self._workers[key]

    def close(self) -> None:
        while self._workers:
            self._workers.popitem()[1].close()

    def _round(self, settings: dict, iterations: int) -> float:
        ms = self.worker(settings).round_ms(iterations)
        self._run_ms[_key(settings)] = ms  # the latest: the host's load now
        return ms

    def run_ms(self, settings: dict) -> float:
        """The latest ms per run of ``settings`` (a short probe when it has not run yet)."""
        if _key(settings) not in self._run_ms:
            for runs in (1, 3):
                self._round(settings, runs)
        return self._run_ms[_key(settings)]

    def auto_iterations(self, *settings: dict) -> int:
        """Runs per round so that a round of the fastest of ``settings`` lasts about ``ROUND_TARGET_MS``
        (a round much shorter than a scheduler tick measures the tick)."""
        one = min(self.run_ms(s) for s in settings)
        return max(1, min(MAX_AUTO_ITERATIONS, round(ROUND_TARGET_MS / max(one, 1e-3))))

    def outputs(self, settings: dict) -> list[list]:
        return self.worker(settings).outputs()

    def measure_pair(self, a: dict, b: dict, pairs: int | None = None) -> tuple[list[float], list[float]]:
        """ms per run of ``a`` and ``b``, one sample per round; sample i of each was timed next to the
        other's (A B, then B A, ...), each in its own process, the other one paused."""
        if self.auto and pairs is None:
            self.iterations = self.auto_iterations(a, b)
        times_a, times_b = [], []
        for r in range(self.repeats if pairs is None else pairs):
            order = ((a, times_a), (b, times_b)) if r % 2 == 0 else ((b, times_b), (a, times_a))
            for settings, sink in order:
                sink.append(self._round(settings, self.iterations))
        return times_a, times_b

    def compare(self, a: dict, b: dict, min_gain_pct: float, *, max_pairs_factor: int = MAX_PAIRS_FACTOR
                ) -> tuple[dict, list[float], list[float]]:
        """``b`` against ``a``: ``repeats`` pairs, then more while the interval straddles the minimum gain,
        up to ``max_pairs_factor * repeats`` pairs."""
        times_a, times_b = self.measure_pair(a, b)
        gain = stats.paired_gain(times_a, times_b, min_gain_pct=min_gain_pct)
        while stats.undecided(gain, min_gain_pct) and len(times_a) < max_pairs_factor * self.repeats:
            more_a, more_b = self.measure_pair(a, b, MORE_PAIRS)
            times_a, times_b = times_a + more_a, times_b + more_b
            gain = stats.paired_gain(times_a, times_b, min_gain_pct=min_gain_pct)
        return gain, times_a, times_b

    def accuracy_violations(self, settings: dict) -> list[str]:
        from ascendpipe.compare.metrics import tensor_metrics
        from ascendpipe.compare.thresholds import violations

        problems = []
        for b, (ref, got) in enumerate(zip(self.reference, self.outputs(settings))):
            for o, (r, g) in enumerate(zip(ref, got)):
                if r.shape != g.shape:
                    problems.append(f"batch {b} output {o}: shape {g.shape} != {r.shape}")
                    continue
                problems += [f"batch {b} output {o}: {v}" for v in violations(tensor_metrics(r, g), self.thresholds)]
        return problems


def _ms(value: float) -> str:
    return f"{value:.4g} ms"


def _geomean(samples: Sequence[float]) -> float:
    """The mean the paired gain is computed from: mean ln(a) - mean ln(b) = ln(geomean a / geomean b)
    (medians of each side can disagree with the paired gain's sign; these cannot)."""
    import math

    return math.exp(sum(math.log(max(v, 1e-12)) for v in samples) / len(samples))


def _faster(pct: float) -> str:
    """A paired gain in words: the share of the other's time saved, or the extra time it takes
    (``2.5x the time`` beyond double: "1500% slower" reads badly)."""
    if pct >= 0:
        return f"{pct:.1f}% faster"
    if pct > -100:
        return f"{-pct:.1f}% slower"
    ratio = 1 - pct / 100
    return f"{ratio:.3g}x the time" if ratio < 1000 else f"{ratio:.0f}x the time"


def describe(settings: dict, against: dict | None = None) -> str:
    """``execution_mode=ORT_SEQUENTIAL, intra_op_num_threads=0``: the knobs that differ from ``against``
    (all of them without it)."""
    items = sorted((k, v) for k, v in settings.items() if against is None or against.get(k) != v)
    return ", ".join(f"{k}={v}" for k, v in items) or "(the same settings)"


def short(settings: dict) -> str:
    """Settings as their difference from onnxruntime's defaults."""
    if _key(settings) == _key(DEFAULT_SETTINGS):
        return "onnxruntime's defaults"
    return describe(settings, DEFAULT_SETTINGS)


def comparison_text(gain: dict, baseline_ms: Sequence[float], candidate_ms: Sequence[float], *,
                    candidate: str, baseline: str) -> str:
    """``the candidate 7.6 ms a run against the best so far 15.1 ms (geometric means of 7 paired rounds):
    49.7% faster, 95% CI 47.0% faster to 52.1% faster``: which side is which, and one direction."""
    return (f"{candidate} {_ms(_geomean(candidate_ms))} a run against {baseline} {_ms(_geomean(baseline_ms))} "
            f"(geometric means of {gain['pairs']} paired rounds): {_faster(gain['improvement_pct'])}, 95% CI "
            f"{_faster(gain['noise_low_pct'])} to {_faster(gain['noise_high_pct'])}")


def _trial(bench: Bench, min_gain_pct: float, say: Callable[[str], None], budget: int, unit: str):
    from ascendpipe import ticker

    count = 0

    def trial(best: dict, candidate: dict) -> search.Trial:
        nonlocal count
        count += 1
        change = describe(candidate, best)
        try:
            gain, base_ms, cand_ms = bench.compare(best, candidate, min_gain_pct)
        except WorkerError as exc:  # a setting this onnxruntime build refuses: skip it, say why
            say(f"  trial {count}: {change} failed to run: {exc}")
            return search.Trial(False, False, {"error": str(exc)[:200]})
        problems = bench.accuracy_violations(candidate) if gain["significant"] else []
        verdict = ("kept" if gain["significant"] and not problems else
                   f"rejected: {problems[0]}" if problems else
                   f"not kept: not {min_gain_pct:g}% faster beyond the noise")
        say(f"  trial {count}: {change}: "
            + comparison_text(gain, base_ms, cand_ms, candidate="candidate", baseline="best so far")
            + f" -> {verdict}")
        ticker.report(count, budget, unit)  # a build's status line on a terminal (engine/progress.py)
        return search.Trial(bool(gain["significant"]), not problems,
                            {"speedup": gain, "baseline_ms": base_ms, "candidate_ms": cand_ms,
                             "accuracy_checked": bool(gain["significant"]),
                             "accuracy_violations": problems[:10]})
    return trial


def _per_op_durations(model_path: Path, batches, settings: dict, iterations: int) -> dict[str, dict]:
    """Per model op (the kernels attributed to it, summed per iteration): its op type and us per iteration."""
    raw = profile_model(model_path, batches, warmup=2, iterations=iterations, settings=settings)
    data, _ = attribute_to_model(raw, model_graph(model_path))  # the model's names at every setting
    grouped: dict[str, list] = {}
    for op in data.ops:
        entry = grouped.setdefault(op.op_name, [op.op_type, {}])
        entry[1][op.iteration] = entry[1].get(op.iteration, 0.0) + op.duration_us
    return {name: {"op_type": t, "durations_us": list(per.values())} for name, (t, per) in grouped.items()}


def _op_types(model_path: Path) -> set[str]:
    import onnx

    model = onnx.load(str(model_path), load_external_data=False)
    return {node.op_type for node in model.graph.node}


@dataclass
class TuneOutcome:
    baseline: dict  # the start
    best: dict
    final: dict  # stats.paired_gain of best over baseline
    log: search.SearchLog
    baseline_ms: list[float]
    best_ms: list[float]
    operators: list[dict] = field(default_factory=list)
    model_sha256: str = ""
    seconds: float = 0.0
    iterations: int = 0  # runs per timed round
    repeats: int = 0  # timed rounds per setting (pairs; more where the interval was undecided)
    host: dict = field(default_factory=dict)  # cores and load while tuning
    source_sha256: str = ""  # the model a converted model was converted from, when it says so
    model_name: str = ""
    defaults: dict = field(default_factory=dict)  # the defaults candidate (the start when it is the defaults)
    start_vs_defaults: dict | None = None  # stats.paired_gain of the start over the defaults (+ "verdict", "text")
    kept_vs_defaults: dict | None = None  # ... of the kept setting over the defaults

    @property
    def line(self) -> str:
        return stats.improvement_line(self.final) + self.start_note + self.thread_note

    @property
    def start_note(self) -> str:
        """Where the start was not the defaults: how it and the kept setting compare with them."""
        if _key(self.defaults) == _key(self.baseline):
            return ""
        parts = []
        # job type 2 alone tunes the fusions only: its defaults are the start with every fusion on
        name = "onnxruntime's defaults" if _key(self.defaults) == _key(DEFAULT_SETTINGS) else "the default fusions"
        vs = self.start_vs_defaults
        if vs is not None and vs["verdict"] == "slower":
            parts.append(f"the start ({describe(self.baseline, self.defaults)}) is SLOWER than {name}: {vs['text']}")
        elif vs is not None:
            parts.append(f"the start ({describe(self.baseline, self.defaults)}) against {name}: {vs['text']}")
        kept = self.kept_vs_defaults
        if _key(self.best) == _key(self.defaults):
            parts.append(f"kept: {name}")
        elif kept is not None:
            parts.append(f"kept ({describe(self.best, self.defaults)}) against the defaults: {kept['text']}")
        return "".join(f"; {p}" for p in parts)

    @property
    def thread_note(self) -> str:
        if self.best.get("intra_op_num_threads") == self.baseline.get("intra_op_num_threads"):
            return ""
        return (f"; intra_op_num_threads {self.best.get('intra_op_num_threads')} was chosen on this host "
                f"({self.host.get('cpu_count')} cores, load {self.host.get('load_start')} -> "
                f"{self.host.get('load_end')}): it depends on the host's load at that time")


def _start_error(exc: WorkerError, start: dict):
    from ascendpipe.errors import Location, UserError

    return UserError(f"onnxruntime cannot run the model with the starting settings {_key(start)}: {exc}",
                     Location(field="baseline"))


def versus(x_ms: Sequence[float], y_ms: Sequence[float], min_gain_pct: float, *, x: str, y: str) -> dict:
    """``x`` against ``y`` from paired rounds: stats.paired_gain of x over y, with ``verdict`` (faster,
    slower: beyond the noise by ``min_gain_pct``; else within the noise) and a one-line ``text``."""
    gain = stats.paired_gain(y_ms, x_ms, min_gain_pct=min_gain_pct)
    slower = stats.paired_gain(x_ms, y_ms, min_gain_pct=min_gain_pct)["significant"]
    verdict = "faster" if gain["significant"] else "slower" if slower else "within the noise"
    return {**gain, "verdict": verdict, "text": comparison_text(gain, y_ms, x_ms, candidate=x, baseline=y)}


def _confirm_defaults(bench, start: dict, defaults: dict, min_gain_pct: float, say) -> tuple | None:
    """The defaults against the start in fresh rounds: (gain, start's ms, defaults' ms) where they are
    faster beyond the noise, else None."""
    again, start_ms, defaults_ms = bench.compare(start, defaults, min_gain_pct, max_pairs_factor=CONFIRM_PAIRS_FACTOR)
    say("  " + comparison_text(again, start_ms, defaults_ms, candidate="the defaults", baseline="the start"))
    return (again, start_ms, defaults_ms) if again["significant"] else None


def _defaults_trial(log: search.SearchLog) -> dict | None:
    """The first trial, the defaults against the start (None: the start is the defaults, or they failed)."""
    return next((t for t in log.trials if t.get("source") == "defaults" and "error" not in t), None)


def tune_model(model_path: Path, batches: Sequence[dict], *, job_types: Sequence[int] = (1,),
               repeats: int = 7, iterations: int | None = None, max_candidates: int = 24,
               thresholds: dict[str, float] | None = None, baseline: dict | None = None,
               min_gain_pct: float = 2.0, say: Callable[[str], None] = lambda _: None,
               progress_unit: str = "trials") -> TuneOutcome:
    """Each trial is told to ``ascendpipe.ticker`` as done of ``max_candidates`` ``progress_unit`` (a
    build shows a long stage's counts on a terminal; the stage's unit names its log, where ``say``
    writes every trial)."""
    from ascendpipe.compare.thresholds import resolve

    started = time.perf_counter()
    start = resolve_settings(baseline)
    host = {"cpu_count": usable_cpus(), "load_start": host_load()}
    bench = Bench(model_path, batches, iterations=iterations, repeats=repeats, thresholds=resolve(thresholds))
    kept_vs_defaults = None
    try:
        try:
            bench.reference = bench.outputs(start)
            if iterations is None:
                bench.iterations = bench.auto_iterations(start)
        except WorkerError as exc:
            raise _start_error(exc, start) from None
        say(f"tune {model_path.name}: job types {sorted(set(job_types))}, {repeats}+ paired rounds of "
            + (f"{bench.iterations} runs" if iterations else f"~{ROUND_TARGET_MS:g} ms")
            + " per setting, each setting in its own process; start: " + describe(start))
        log = search.search(start, job_types=job_types, cpu_count=host["cpu_count"],
                            op_types=_op_types(model_path),
                            trial=_trial(bench, min_gain_pct, say, max_candidates, progress_unit),
                            max_candidates=max_candidates, defaults=DEFAULT_SETTINGS)
        say(f"  search: {log.plan}; {len(log.trials)} trials")
        best = log.best
        defaults = log.defaults or start
        if _key(best) != _key(start):  # the steps' gains, confirmed end to end with fresh rounds
            final, base_ms, best_ms = bench.compare(start, best, min_gain_pct, max_pairs_factor=CONFIRM_PAIRS_FACTOR)
        else:
            base_ms, _ = bench.measure_pair(start, start)
            best_ms, final = base_ms, {}
        reverted = _key(best) != _key(start) and not final["significant"]
        reverted_to = None
        if reverted:  # the end-to-end check does not confirm the steps: keep what is confirmed
            first = _defaults_trial(log)
            fallback = defaults if first is not None and first["accepted"] and _key(best) != _key(defaults) else start
            say("  best " + describe(best, start) + " not confirmed against the start: "
                + comparison_text(final, base_ms, best_ms, candidate="best", baseline="start")
                + ("; the defaults were faster than the start in trial 1: confirming them" if fallback is defaults
                   else "; keeping the starting settings"))
            best, reverted_to = start, "start"
            if fallback is defaults:  # a start measured slower than the defaults is no safe place to fall back to
                confirmed = _confirm_defaults(bench, start, defaults, min_gain_pct, say)
                if confirmed is not None:
                    best, reverted_to, (final, base_ms, best_ms) = defaults, "defaults", confirmed
        if _key(best) not in (_key(start), _key(defaults)):  # the kept setting against the defaults, fresh rounds
            _, defaults_ms, kept_ms = bench.compare(defaults, best, min_gain_pct)
            kept_vs_defaults = versus(kept_ms, defaults_ms, min_gain_pct, x="the kept setting", y="the defaults")
            first = _defaults_trial(log)
            # a setting measured slower than onnxruntime's defaults is never the advice: where the defaults
            # beat the start (trial 1) and again now, they are kept instead (on a loaded host the steps'
            # small gains can turn out to be the load's)
            if kept_vs_defaults["verdict"] == "slower" and first is not None and first["accepted"]:
                say("  the kept setting " + describe(best, defaults) + " is slower than the defaults in fresh rounds: "
                    + kept_vs_defaults["text"] + "; confirming the defaults against the start")
                confirmed = _confirm_defaults(bench, start, defaults, min_gain_pct, say)
                if confirmed is not None:
                    best, reverted, reverted_to, (final, base_ms, best_ms) = defaults, True, "defaults", confirmed
                    kept_vs_defaults = None
    finally:
        bench.close()
    host["load_end"] = host_load()
    if _key(best) == _key(start):
        best, best_ms = start, base_ms  # same settings: no change, no gain claimed
        final = {**stats.paired_gain(base_ms, base_ms, min_gain_pct=min_gain_pct), "significant": False}
    final["reverted"] = reverted
    final["reverted_to"] = reverted_to  # "start", or "defaults" where they were confirmed faster than the start
    start_vs_defaults, first = None, _defaults_trial(log)
    if first is not None:  # its rounds read the other way round: the start against the defaults
        start_vs_defaults = versus(first["baseline_ms"], first["candidate_ms"], min_gain_pct,
                                   x="the start", y="the defaults")
        if _key(best) == _key(start):
            kept_vs_defaults = versus(first["baseline_ms"], first["candidate_ms"], min_gain_pct,
                                      x="the kept setting (the start)", y="the defaults")
    elif _key(defaults) == _key(start) and _key(best) != _key(start):  # the start is the defaults
        kept_vs_defaults = versus(best_ms, base_ms, min_gain_pct, x="the kept setting", y="the defaults (the start)")
    operators = []
    if search.JOB_OP in job_types:
        runs = max(5, bench.iterations)
        before = _per_op_durations(model_path, batches, start, runs)
        # one profile serves both sides when the settings did not change: no change is read from noise
        after = before if best is start else _per_op_durations(model_path, batches, best, runs)
        operators = aoe_result.per_op_changes(before, after, min_gain_pct=min_gain_pct)
    outcome = TuneOutcome(start, best, final, log, base_ms, best_ms, operators, sha256_file(model_path),
                          time.perf_counter() - started, bench.iterations, repeats, host,
                          source_sha256(model_path) or "", model_path.name, defaults, start_vs_defaults,
                          kept_vs_defaults)
    say(outcome.line)
    return outcome


def source_sha256(model_path: Path) -> str | None:
    """The sha256 of the ONNX a converted model was made from, as convert recorded it in the model's
    ``ascendpipe.emulation`` metadata (None for a model convert did not write)."""
    import onnx

    model = onnx.load(str(model_path), load_external_data=False)
    for prop in model.metadata_props:
        if prop.key == "ascendpipe.emulation":
            try:
                return json.loads(prop.value).get("source_sha256")
            except (ValueError, AttributeError):
                return None
    return None


def bank_of(outcome: TuneOutcome) -> dict:
    measurements = {
        "baseline_session": outcome.baseline,
        "unit": "ms per run; one sample per timed round",
        "method": stats.PAIRED_METHOD + "; each setting timed in its own process, the other paused",
        "iterations_per_round": outcome.iterations,
        "rounds": outcome.repeats,
        "baseline_ms": stats.latency_stats(outcome.baseline_ms),
        "best_ms": stats.latency_stats(outcome.best_ms),
        "improvement": outcome.final,
        "host": outcome.host,
        "thread_choice": outcome.thread_note.lstrip("; ") or None,
        "trials": outcome.log.trials,
        "stopped_early": outcome.log.stopped_early,
        # issue 44: where the search started, the defaults it always times, how the kept setting
        # compares with both ("X_vs_Y": paired gain of X over Y, positive when X takes less time)
        "start": {"session": outcome.baseline, "is_defaults": _key(outcome.baseline) == _key(outcome.defaults),
                  "slower_than_defaults": (outcome.start_vs_defaults or {}).get("verdict") == "slower"},
        "defaults_session": outcome.defaults,
        "kept_is_defaults": _key(outcome.best) == _key(outcome.defaults),
        "comparisons": {"kept_vs_start": outcome.final, "kept_vs_defaults": outcome.kept_vs_defaults,
                        "start_vs_defaults": outcome.start_vs_defaults},
        "search": {"plan": outcome.log.plan, "graph_space": outcome.log.space, "graph_swept": outcome.log.swept,
                   "fixed_point": outcome.log.fixed_point, "defaults_timed": outcome.log.defaults is not None},
        "summary": outcome.line,
    }
    return aoe_result.bank_document(model_sha256=outcome.model_sha256, session=outcome.best,
                                    measurements=measurements, model=outcome.model_name,
                                    source_sha256=outcome.source_sha256 or None)


def write_tune_outputs(out_dir: Path, outcome: TuneOutcome, *, tuning_name: str) -> dict[str, Path]:
    out_dir = Path(out_dir)
    report_id = f"{time.strftime('%Y%m%d%H%M%S')}_{os.getpid()}"
    opat = aoe_result.opat_document(
        report_id=report_id, tuning_name=tuning_name, tuning_time_s=outcome.seconds,
        improved=bool(outcome.final["significant"]), operators=outcome.operators,
        baseline_ms=outcome.final["baseline_median_ms"], result_ms=outcome.final["candidate_median_ms"])
    return {"bank": write_json_atomic(out_dir / BANK_FILE, bank_of(outcome)),
            "opat": write_json_atomic(out_dir / OPAT_FILE, opat)}
