"""Measured tuning of onnxruntime session settings (AOE's job types 1 and 2 on the emulation).

Every candidate is timed against the current best in interleaved rounds (so a machine that slows
down mid-run slows both), accepted only when faster beyond the noise range and when its outputs stay
within the compare thresholds of the baseline's outputs on the same inputs.
"""

from __future__ import annotations

import hashlib
import json
import os
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable, Sequence

from ascendpipe.backends.onnxruntime.profile import (attribute_to_model, model_node_index, open_session,
                                                      profile_model, resolve_settings)
from ascendpipe.profiling import aoe_result, search, stats
from ascendpipe.fsutil import write_json_atomic

BANK_FILE = "tune_bank.json"
ROUND_TARGET_MS = 25.0  # auto iterations: a timed round lasts about this long at the baseline
MAX_AUTO_ITERATIONS = 100
MAX_OPEN_SESSIONS = 3  # baseline, current best, candidate
OPAT_FILE = "aoe_result_opat.json"


def _key(settings: dict) -> str:
    return json.dumps(settings, sort_keys=True)


def sha256_file(path: Path) -> str:
    digest = hashlib.sha256()
    with open(path, "rb") as handle:
        for block in iter(lambda: handle.read(1 << 20), b""):
            digest.update(block)
    return digest.hexdigest()


class Bench:
    """Sessions per settings, the baseline's reference outputs, timed rounds and the accuracy guard."""

    def __init__(self, model_path: Path, batches: Sequence[dict], *, iterations: int, repeats: int,
                 thresholds: dict[str, float]):
        self.model_path, self.batches = Path(model_path), list(batches)
        self.iterations, self.repeats, self.thresholds = iterations, repeats, thresholds
        self._sessions: dict[str, Any] = {}
        self.reference: list[list] | None = None

    def auto_iterations(self, settings: dict) -> int:
        """Runs per round so that a round of the baseline lasts about ``ROUND_TARGET_MS``."""
        sess = self.session(settings)
        for feeds in self.batches[:2]:
            sess.run(None, feeds)
        one = min(self._time_once(sess, feeds) for feeds in self.batches[:3] * 2)
        return max(1, min(MAX_AUTO_ITERATIONS, round(ROUND_TARGET_MS / max(one, 1e-3))))

    @staticmethod
    def _time_once(sess, feeds) -> float:
        start = time.perf_counter()
        sess.run(None, feeds)
        return 1000.0 * (time.perf_counter() - start)

    def session(self, settings: dict):
        key = _key(settings)
        if key in self._sessions:
            self._sessions[key] = self._sessions.pop(key)  # most recently used last
        else:
            while len(self._sessions) >= MAX_OPEN_SESSIONS:  # a big model's sessions are big
                self._sessions.pop(next(iter(self._sessions)))
            self._sessions[key] = open_session(self.model_path, settings)
        return self._sessions[key]

    def outputs(self, settings: dict) -> list[list]:
        sess = self.session(settings)
        return [sess.run(None, feeds) for feeds in self.batches]

    def _round_ms(self, sess) -> float:
        start = time.perf_counter()
        for i in range(self.iterations):
            sess.run(None, self.batches[i % len(self.batches)])
        return 1000.0 * (time.perf_counter() - start) / self.iterations

    def measure_pair(self, a: dict, b: dict) -> tuple[list[float], list[float]]:
        """Per-iteration ms of ``a`` and ``b``, one sample per round, rounds interleaved (ABBA)."""
        sa, sb = self.session(a), self.session(b)
        for sess in (sa, sb):  # warm-up: first runs allocate arenas and pick kernels
            for feeds in self.batches[:2]:
                sess.run(None, feeds)
        times_a, times_b = [], []
        for r in range(self.repeats):
            order = ((sa, times_a), (sb, times_b)) if r % 2 == 0 else ((sb, times_b), (sa, times_a))
            for sess, sink in order:
                sink.append(self._round_ms(sess))
        return times_a, times_b

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
            base_ms, cand_ms = bench.measure_pair(best, candidate)
        except Exception as exc:  # a setting this onnxruntime build refuses: skip it, say why
            say(f"  candidate {_key(candidate)} failed to run: {exc}")
            return search.Trial(False, False, {"error": str(exc).splitlines()[0][:200]})
        gain = stats.speedup(base_ms, cand_ms, min_gain_pct=min_gain_pct)
        if gain["significant"]:  # confirm with fresh rounds: on a busy machine one lucky run is common
            again_base, again_cand = bench.measure_pair(best, candidate)
            base_ms, cand_ms = base_ms + again_base, cand_ms + again_cand
            gain = stats.speedup(base_ms, cand_ms, min_gain_pct=min_gain_pct)
            gain["significant"] = gain["significant"] and bool(
                stats.speedup(again_base, again_cand, min_gain_pct=min_gain_pct)["significant"])
        problems = bench.accuracy_violations(candidate) if gain["significant"] else []
        say(f"  {_key(candidate)}: {gain['candidate_median_ms']:.3f} ms vs {gain['baseline_median_ms']:.3f} ms, "
            f"{gain['improvement_pct']:+.1f}% ({gain['noise_low_pct']:.1f}..{gain['noise_high_pct']:.1f}%)"
            + (f", rejected: {problems[0]}" if problems else ""))
        return search.Trial(bool(gain["significant"]), not problems,
                            {"speedup": gain, "baseline_ms": base_ms, "candidate_ms": cand_ms,
                             "accuracy_checked": bool(gain["significant"]),
                             "accuracy_violations": problems[:10]})
    return trial


def _per_op_durations(model_path: Path, batches, settings: dict, iterations: int) -> dict[str, dict]:
    raw = profile_model(model_path, batches, warmup=2, iterations=iterations, settings=settings)
    data, _ = attribute_to_model(raw, *model_node_index(model_path))  # same names at every setting
    grouped: dict[str, list] = {}
    for op in data.ops:
        grouped.setdefault(op.op_name, [op.op_type, []])[1].append(op.duration_us)
    return {name: {"op_type": t, "durations_us": d} for name, (t, d) in grouped.items()}


def _op_types(model_path: Path) -> set[str]:
    import onnx

    model = onnx.load(str(model_path), load_external_data=False)
    return {node.op_type for node in model.graph.node}


@dataclass
class TuneOutcome:
    baseline: dict
    best: dict
    final: dict  # stats.speedup of best over baseline
    log: search.SearchLog
    baseline_ms: list[float]
    best_ms: list[float]
    operators: list[dict] = field(default_factory=list)
    model_sha256: str = ""
    seconds: float = 0.0
    iterations: int = 0  # runs per timed round
    repeats: int = 0  # timed rounds per setting

    @property
    def line(self) -> str:
        return stats.improvement_line(self.final)


def tune_model(model_path: Path, batches: Sequence[dict], *, job_types: Sequence[int] = (1,),
               repeats: int = 7, iterations: int | None = None, max_candidates: int = 24,
               thresholds: dict[str, float] | None = None, baseline: dict | None = None,
               min_gain_pct: float = 2.0, say: Callable[[str], None] = lambda _: None) -> TuneOutcome:
    from ascendpipe.compare.thresholds import resolve

    started = time.perf_counter()
    start = resolve_settings(baseline)
    bench = Bench(model_path, batches, iterations=iterations, repeats=repeats, thresholds=resolve(thresholds))
    bench.reference = bench.outputs(start)
    if iterations is None:
        bench.iterations = bench.auto_iterations(start)
    say(f"tune {model_path.name}: job types {sorted(set(job_types))}, "
        f"{repeats} rounds x {bench.iterations} runs per setting")
    log = search.search(start, job_types=job_types, cpu_count=os.cpu_count() or 1,
                        op_types=_op_types(model_path), trial=_trial(bench, min_gain_pct, say),
                        max_candidates=max_candidates)
    best = log.best
    base_ms, best_ms = bench.measure_pair(start, best)
    final = stats.speedup(base_ms, best_ms, min_gain_pct=min_gain_pct)
    reverted = _key(best) != _key(start) and not final["significant"]
    if reverted:  # the end-to-end check does not confirm the steps: keep what we started from
        say(f"  best {_key(best)} not confirmed against the baseline; keeping the baseline settings")
        best = start
    if _key(best) == _key(start):
        best_ms = base_ms  # same settings: no change, and the noise range is the baseline's own spread
        final = {**stats.speedup(base_ms, best_ms, min_gain_pct=min_gain_pct), "significant": False}
    final["reverted"] = reverted
    operators = []
    if search.JOB_OP in job_types:
        runs = max(5, bench.iterations)
        before = _per_op_durations(model_path, batches, start, runs)
        after = before if best is start else _per_op_durations(model_path, batches, best, runs)
        operators = aoe_result.per_op_changes(before, after, min_gain_pct=min_gain_pct)
    outcome = TuneOutcome(start, best, final, log, base_ms, best_ms, operators,
                          sha256_file(model_path), time.perf_counter() - started, bench.iterations, repeats)
    say(outcome.line)
    return outcome


def bank_of(outcome: TuneOutcome) -> dict:
    measurements = {
        "baseline_session": outcome.baseline,
        "unit": "ms per run; one sample per timed round",
        "iterations_per_round": outcome.iterations,
        "rounds": outcome.repeats,
        "baseline_ms": stats.latency_stats(outcome.baseline_ms),
        "best_ms": stats.latency_stats(outcome.best_ms),
        "improvement": outcome.final,
        "trials": outcome.log.trials,
        "stopped_early": outcome.log.stopped_early,
    }
    return aoe_result.bank_document(model_sha256=outcome.model_sha256, session=outcome.best,
                                    measurements=measurements)


def write_tune_outputs(out_dir: Path, outcome: TuneOutcome, *, tuning_name: str) -> dict[str, Path]:
    out_dir = Path(out_dir)
    report_id = f"{time.strftime('%Y%m%d%H%M%S')}_{os.getpid()}"
    opat = aoe_result.opat_document(
        report_id=report_id, tuning_name=tuning_name, tuning_time_s=outcome.seconds,
        improved=bool(outcome.final["significant"]), operators=outcome.operators,
        baseline_ms=outcome.final["baseline_median_ms"], result_ms=outcome.final["candidate_median_ms"])
    return {"bank": write_json_atomic(out_dir / BANK_FILE, bank_of(outcome)),
            "opat": write_json_atomic(out_dir / OPAT_FILE, opat)}
