"""Benchmark: does tune keep what is really faster? tune's claimed gain beside an independent one.

Run: python bench/tune_truth.py [--models resnet,transformer] [--starts parallel,disable_all,defaults]
                                [--blocks 5] [--runs 6] [--repeats 7]

Models (random weights): a ResNet-18 at 224x224 (bench/emulate.py's) and a 4-layer transformer encoder,
d=256, seq 128 (tests/profiling/models.py: MatMul+Add, Softmax attention, LayerNormalization, Erf GELU,
as torch exports one). For each start (ORT_PARALLEL, ORT_DISABLE_ALL, onnxruntime's defaults) tune
(job type 1) runs as the stage runs it; then the start, tune's choice and every setting tune tried are
re-timed independently: each in a fresh process of its own, alone on the machine (one process at a
time), --blocks blocks in turn (so a load change hits every setting), --runs timed runs each after 2
warm-ups; a setting's time is the median over its blocks of its per-run median.

Pass (per start): where some setting is >= 1.3x faster than the start, tune keeps one that is >= 1.3x
faster too; tune never keeps a setting slower than the start (independent speed-up >= 0.97, the
re-timing's own noise). The load average is printed: other work on the machine moves every number.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

STARTS = {"parallel": {"execution_mode": "ORT_PARALLEL"},
          "disable_all": {"graph_optimization_level": "ORT_DISABLE_ALL"},
          "defaults": {}}
FASTER = 1.3
NOT_SLOWER = 0.97


def build(name: str, out: Path) -> tuple[Path, dict]:
    if name == "resnet":
        from bench.emulate import resnet18

        path = resnet18(out / "resnet18.onnx")
        return path, {"input": np.random.default_rng(0).standard_normal((1, 3, 224, 224)).astype(np.float32)}
    from tests.profiling.models import transformer_encoder, transformer_inputs

    path = transformer_encoder(out / "encoder4.onnx", d=256, heads=4, layers=4, seq=128)
    return path, transformer_inputs(d=256, seq=128)


def time_alone(model: Path, feeds_file: Path, settings: dict, runs: int) -> float:
    """Median ms per run of ``settings`` in a fresh process, nothing else of ours running."""
    code = ("import json, sys, time, numpy as np\n"
            "from pathlib import Path\n"
            "from ascendpipe.backends.onnxruntime.profile import open_session\n"
            "feeds = dict(np.load(sys.argv[2]))\n"
            "s = open_session(Path(sys.argv[1]), json.loads(sys.argv[3]))\n"
            "[s.run(None, feeds) for _ in range(2)]\n"
            "t = []\n"
            "for _ in range(int(sys.argv[4])):\n"
            "    a = time.perf_counter(); s.run(None, feeds); t.append(1000 * (time.perf_counter() - a))\n"
            "print(sorted(t)[len(t) // 2])\n")
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    out = subprocess.run([sys.executable, "-c", code, str(model), str(feeds_file), json.dumps(settings), str(runs)],
                         capture_output=True, text=True, env=env, check=True).stdout
    return float(out.strip().splitlines()[-1])


def key(settings: dict) -> str:
    return json.dumps(settings, sort_keys=True)


def label(settings: dict, start: dict) -> str:
    changed = {k: v for k, v in settings.items() if start.get(k) != v}
    return ", ".join(f"{k}={v}" for k, v in sorted(changed.items())) or "(start)"


def one_case(model: Path, feeds: dict, feeds_file: Path, start_name: str, args) -> dict:
    from ascendpipe.backends.onnxruntime.profile import resolve_settings
    from ascendpipe.backends.onnxruntime.tune import tune_model

    start = resolve_settings(STARTS[start_name])
    began = time.perf_counter()
    outcome = tune_model(model, [feeds], job_types=[1], repeats=args.repeats, baseline=start, say=lambda _: None)
    tune_s = time.perf_counter() - began
    tried = [t["settings"] for t in outcome.log.trials if "error" not in t]
    settings = {key(s): s for s in [start, outcome.best, *tried]}
    times: dict[str, list[float]] = {k: [] for k in settings}
    for _ in range(args.blocks):
        for k, s in settings.items():
            times[k].append(time_alone(model, feeds_file, s, args.runs))
    ms = {k: statistics.median(v) for k, v in times.items()}
    speedup = {k: ms[key(start)] / ms[k] for k in ms}
    best_alt = max(speedup, key=speedup.get)
    kept = key(outcome.best)
    ok = speedup[kept] >= NOT_SLOWER and (speedup[best_alt] < FASTER or speedup[kept] >= FASTER)
    claimed = outcome.final
    print(f"  start {start_name}: tune kept [{label(outcome.best, start)}] in {tune_s:.0f} s; claimed "
          f"{claimed['improvement_pct']:+.1f}% (95% CI {claimed['noise_low_pct']:.1f}..{claimed['noise_high_pct']:.1f}%, "
          f"{'kept' if claimed['significant'] else 'not kept: within the noise'}); independent: "
          f"{ms[key(start)]:.1f} -> {ms[kept]:.1f} ms = {speedup[kept]:.2f}x ({100 * (1 - 1 / speedup[kept]):+.1f}%)")
    claims = {key(t["settings"]): t for t in outcome.log.trials if "error" not in t}
    for k in sorted(ms, key=ms.get):
        t = claims.get(k)
        claim = (f"tune's trial {t['speedup']['improvement_pct']:+.1f}% [{t['speedup']['noise_low_pct']:.1f}.."
                 f"{t['speedup']['noise_high_pct']:.1f}] vs its best then, {t['speedup']['pairs']} pairs"
                 if t else "")
        print(f"      {ms[k]:8.1f} ms  {speedup[k]:5.2f}x  {label(settings[k], start)}"
              f"{'  <- kept' if k == kept else ''}  blocks {[round(v, 1) for v in times[k]]}  {claim}")
    print(f"    {'PASS' if ok else 'FAIL'}: fastest alternative {speedup[best_alt]:.2f}x [{label(settings[best_alt], start)}]")
    return {"start": start_name, "kept": outcome.best, "claimed": claimed, "independent_x": speedup[kept],
            "best_alternative_x": speedup[best_alt], "ok": ok, "tune_s": tune_s}


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--models", default="resnet,transformer")
    parser.add_argument("--starts", default="parallel,disable_all,defaults")
    parser.add_argument("--blocks", type=int, default=5)
    parser.add_argument("--runs", type=int, default=6)
    parser.add_argument("--repeats", type=int, default=7)
    args = parser.parse_args()
    results = []
    with tempfile.TemporaryDirectory() as tmp:
        for name in args.models.split(","):
            model, feeds = build(name, Path(tmp))
            feeds_file = Path(tmp) / f"{name}_feeds.npz"
            np.savez(feeds_file, **feeds)
            print(f"{name} ({model.name}): {os.cpu_count()} cores, load average {os.getloadavg()[0]:.1f}")
            for start_name in args.starts.split(","):
                results.append(one_case(model, feeds, feeds_file, start_name, args))
            print(f"  load average now {os.getloadavg()[0]:.1f}")
    failed = [r for r in results if not r["ok"]]
    print(f"{len(results) - len(failed)}/{len(results)} cases pass")
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
