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

from ascendpipe.backends.onnxruntime.profile import (attribute_to_model, model_graph, profile_model,
                                                      resolve_settings)
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

    def compare(self, a: dict, b: dict, min_gain_pct: float) -> tuple[dict, list[float], list[float]]:
        """``b`` against ``a``: ``repeats`` pairs, then more while the interval straddles the minimum gain."""
        times_a, times_b = self.measure_pair(a, b)
        gain = stats.paired_gain(times_a, times_b, min_gain_pct=min_gain_pct)
        while stats.undecided(gain, min_gain_pct) and len(times_a) < MAX_PAIRS_FACTOR * self.repeats:
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


def _trial(bench: Bench, min_gain_pct: float, say: Callable[[str], None]):
    def trial(best: dict, candidate: dict) -> search.Trial:
        try:
            gain, base_ms, cand_ms = bench.compare(best, candidate, min_gain_pct)
        except WorkerError as exc:  # a setting this onnxruntime build refuses: skip it, say why
            say(f"  candidate {_key(candidate)} failed to run: {exc}")
            return search.Trial(False, False, {"error": str(exc)[:200]})
        problems = bench.accuracy_violations(candidate) if gain["significant"] else []
        say(f"  {_key(candidate)}: {gain['candidate_median_ms']:.3f} ms vs {gain['baseline_median_ms']:.3f} ms, "
            f"{gain['improvement_pct']:+.1f}% (95% CI {gain['noise_low_pct']:.1f}..{gain['noise_high_pct']:.1f}%, "
            f"{gain['pairs']} pairs)" + (f", rejected: {problems[0]}" if problems else ""))
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
    baseline: dict
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

    @property
    def line(self) -> str:
        return stats.improvement_line(self.final) + self.thread_note

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


def tune_model(model_path: Path, batches: Sequence[dict], *, job_types: Sequence[int] = (1,),
               repeats: int = 7, iterations: int | None = None, max_candidates: int = 24,
               thresholds: dict[str, float] | None = None, baseline: dict | None = None,
               min_gain_pct: float = 2.0, say: Callable[[str], None] = lambda _: None) -> TuneOutcome:
    from ascendpipe.compare.thresholds import resolve

    started = time.perf_counter()
    start = resolve_settings(baseline)
    host = {"cpu_count": usable_cpus(), "load_start": host_load()}
    bench = Bench(model_path, batches, iterations=iterations, repeats=repeats, thresholds=resolve(thresholds))
    try:
        try:
            bench.reference = bench.outputs(start)
            if iterations is None:
                bench.iterations = bench.auto_iterations(start)
        except WorkerError as exc:
            raise _start_error(exc, start) from None
        say(f"tune {model_path.name}: job types {sorted(set(job_types))}, {repeats}+ paired rounds of "
            + (f"{bench.iterations} runs" if iterations else f"~{ROUND_TARGET_MS:g} ms")
            + " per setting, each setting in its own process")
        log = search.search(start, job_types=job_types, cpu_count=host["cpu_count"],
                            op_types=_op_types(model_path), trial=_trial(bench, min_gain_pct, say),
                            max_candidates=max_candidates)
        best = log.best
        if _key(best) != _key(start):  # the steps' gains, confirmed end to end with fresh rounds
            final, base_ms, best_ms = bench.compare(start, best, min_gain_pct)
        else:
            base_ms, _ = bench.measure_pair(start, start)
            best_ms, final = base_ms, {}
    finally:
        bench.close()
    host["load_end"] = host_load()
    reverted = _key(best) != _key(start) and not final["significant"]
    if reverted:  # the end-to-end check does not confirm the steps: keep what we started from
        say(f"  best {_key(best)} not confirmed against the baseline "
            f"({final['improvement_pct']:+.1f}%, 95% CI {final['noise_low_pct']:.1f}..{final['noise_high_pct']:.1f}%); "
            "keeping the baseline settings")
        best = start
    if _key(best) == _key(start):
        best, best_ms = start, base_ms  # same settings: no change, no gain claimed
        final = {**stats.paired_gain(base_ms, base_ms, min_gain_pct=min_gain_pct), "significant": False}
    final["reverted"] = reverted
    operators = []
    if search.JOB_OP in job_types:
        runs = max(5, bench.iterations)
        before = _per_op_durations(model_path, batches, start, runs)
        # one profile serves both sides when the settings did not change: no change is read from noise
        after = before if best is start else _per_op_durations(model_path, batches, best, runs)
        operators = aoe_result.per_op_changes(before, after, min_gain_pct=min_gain_pct)
    outcome = TuneOutcome(start, best, final, log, base_ms, best_ms, operators, sha256_file(model_path),
                          time.perf_counter() - started, bench.iterations, repeats, host,
                          source_sha256(model_path) or "", model_path.name)
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
