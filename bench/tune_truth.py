"""Benchmark: does tune keep the fastest setting from any start? Its choice against an exhaustive sweep.

Run: python bench/tune_truth.py [--models resnet,transformer] [--size small|issue]
                                [--starts defaults,disable_all,parallel,one_thread,other_bank]
                                [--blocks 3] [--runs 8] [--repeats 3] [--max-candidates 12]

Models (random weights): a ResNet-18 (bench/emulate.py's) and a 4-layer transformer encoder
(tests/profiling/models.py: MatMul+Add, Softmax attention, LayerNormalization, Erf GELU, as torch
exports one); --size issue: 224x224 and d=256, seq 128 as in issue 44; --size small (the default, a
short run on a loaded machine): 112x112 and d=128, seq 64. Starts: onnxruntime's defaults, ORT_DISABLE_ALL, ORT_PARALLEL, 1 intra-op
thread, and the bank another machine chose (16 threads, ORT_PARALLEL, ORT_ENABLE_BASIC: what a
16-core host may keep). From each, tune (job type 1) runs as the stage runs it, with --repeats paired
rounds and at most --max-candidates trials.

Then the truth, independent of tune's own timing machinery: every setting of the same graph space
(level x threads x mode, ``search.graph_space`` for this host's cores), every start and every kept
setting, each timed in a fresh process of its own, alone (one process at a time), --blocks blocks in
turn (each block in another order, so a load change hits every setting), --runs timed runs each after
2 warm-ups; a setting's time is the median over its blocks of its per-run median.

Pass (per start): the kept setting runs within 10% of the sweep's fastest (ratio <= 1.10), and the
defaults were among tune's candidates (timed, or the start). The date and the load average are printed
with each case: other work on the machine moves every number.
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

STARTS = {"defaults": {},
          "disable_all": {"graph_optimization_level": "ORT_DISABLE_ALL"},
          "parallel": {"execution_mode": "ORT_PARALLEL"},
          "one_thread": {"intra_op_num_threads": 1},
          "other_bank": {"graph_optimization_level": "ORT_ENABLE_BASIC", "intra_op_num_threads": 16,
                         "execution_mode": "ORT_PARALLEL"}}
WITHIN = 1.10  # kept / sweep's fastest


SIZES = {"issue": {"image": 224, "d": 256, "seq": 128}, "small": {"image": 112, "d": 128, "seq": 64}}


def build(name: str, out: Path, size: str) -> tuple[Path, dict]:
    dims = SIZES[size]
    if name == "resnet":
        import onnx

        from bench.emulate import resnet18

        path = resnet18(out / "resnet18.onnx")
        if dims["image"] != 224:  # convolutions and a global pool: any image size; the declared one changes
            model = onnx.load(str(path))
            for d in model.graph.input[0].type.tensor_type.shape.dim[2:]:
                d.dim_value = dims["image"]
            onnx.save(model, str(path))
        image = np.random.default_rng(0).standard_normal((1, 3, dims["image"], dims["image"])).astype(np.float32)
        return path, {"input": image}
    from tests.profiling.models import transformer_encoder, transformer_inputs

    path = transformer_encoder(out / "encoder4.onnx", d=dims["d"], heads=4, layers=4, seq=dims["seq"])
    return path, transformer_inputs(d=dims["d"], seq=dims["seq"])


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


def label(settings: dict) -> str:
    from ascendpipe.backends.onnxruntime.tune import short

    return (short(settings).replace("graph_optimization_level=", "").replace("intra_op_num_threads=", "threads=")
            .replace("execution_mode=", ""))


def now() -> str:
    return f"load {os.getloadavg()[0]:.1f}, {time.strftime('%Y-%m-%d %H:%M', time.gmtime())} UTC"


def tune_from(model: Path, feeds: dict, start_name: str, args) -> dict:
    from ascendpipe.backends.onnxruntime.profile import resolve_settings
    from ascendpipe.backends.onnxruntime.tune import tune_model

    start = resolve_settings(STARTS[start_name])
    began = time.perf_counter()
    outcome = tune_model(model, [feeds], job_types=[1], repeats=args.repeats, max_candidates=args.max_candidates,
                         baseline=start, say=lambda _: None)
    log = outcome.log
    defaults_timed = log.defaults is None or any(t.get("source") == "defaults" and "error" not in t for t in log.trials)
    print(f"  tune from {start_name} [{label(start)}]: kept [{label(outcome.best)}] after {len(log.trials)} trials "
          f"in {time.perf_counter() - began:.0f} s ({log.plan}); {now()}")
    return {"start_name": start_name, "start": start, "kept": outcome.best, "trials": len(log.trials),
            "tune_s": time.perf_counter() - began, "defaults_timed": defaults_timed, "line": outcome.line,
            "load": os.getloadavg()[0]}


def sweep(model: Path, feeds_file: Path, settings: list[dict], args) -> dict[str, float]:
    """Median over blocks of each setting's median ms a run, each run in a fresh process."""
    times: dict[str, list[float]] = {key(s): [] for s in settings}
    for block in range(args.blocks):
        shift = block * len(settings) // args.blocks
        for s in settings[shift:] + settings[:shift]:
            times[key(s)].append(time_alone(model, feeds_file, s, args.runs))
    return {k: statistics.median(v) for k, v in times.items()}


def one_model(name: str, tmp: Path, args) -> list[dict]:
    from ascendpipe.backends.onnxruntime.tune import usable_cpus
    from ascendpipe.profiling.search import graph_space

    model, feeds = build(name, tmp, args.size)
    feeds_file = tmp / f"{name}_feeds.npz"
    np.savez(feeds_file, **feeds)
    cores = usable_cpus()
    print(f"{name} ({model.name}, {args.size}: {SIZES[args.size]}): {cores} usable cores; {now()}")
    cases = [tune_from(model, feeds, s, args) for s in args.starts.split(",")]
    from ascendpipe.backends.onnxruntime.profile import resolve_settings

    space = [resolve_settings(p) for p in graph_space(cores)]
    extra = {key(s): s for c in cases for s in (c["start"], c["kept"]) if key(s) not in {key(p) for p in space}}
    began = time.perf_counter()
    ms = sweep(model, feeds_file, space + list(extra.values()), args)
    fastest = min(space, key=lambda s: ms[key(s)])
    best_ms = ms[key(fastest)]
    print(f"  sweep: {len(space)} settings + {len(extra)} outside the space, {args.blocks} blocks of {args.runs} runs, "
          f"each in a fresh process, {time.perf_counter() - began:.0f} s; fastest [{label(fastest)}] {best_ms:.2f} ms; "
          f"defaults {ms[key(resolve_settings({}))]:.2f} ms; {now()}")
    for c in cases:
        c.update(model=name, kept_ms=ms[key(c["kept"])], start_ms=ms[key(c["start"])], fastest_ms=best_ms,
                 fastest=fastest, ratio=ms[key(c["kept"])] / best_ms, start_ratio=ms[key(c["start"])] / best_ms)
        c["ok"] = c["ratio"] <= WITHIN and c["defaults_timed"]
        print(f"    from {c['start_name']:<11} kept {c['kept_ms']:7.2f} ms = {c['ratio']:.2f}x the sweep's fastest "
              f"(start {c['start_ms']:.2f} ms = {c['start_ratio']:.2f}x), defaults timed: "
              f"{'yes' if c['defaults_timed'] else 'NO'}  {'PASS' if c['ok'] else 'FAIL'}")
    slowest = sorted(space, key=lambda s: ms[key(s)])
    print("  sweep, fastest first: " + "; ".join(f"{label(s)} {ms[key(s)]:.1f}" for s in slowest))
    return cases


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--models", default="resnet,transformer")
    parser.add_argument("--starts", default=",".join(STARTS))
    parser.add_argument("--size", choices=sorted(SIZES), default="small",
                        help="issue: ResNet-18 at 224x224 and the encoder at d=256, seq 128 (issue 44's models); "
                             "small (default, a short run on a loaded machine): 112x112, d=128, seq 64")
    parser.add_argument("--blocks", type=int, default=3)
    parser.add_argument("--runs", type=int, default=8)
    parser.add_argument("--repeats", type=int, default=3, help="tune's paired rounds per comparison (its minimum: a short run)")
    parser.add_argument("--max-candidates", type=int, default=12, help="tune's trial budget (the stage's default: 24)")
    args = parser.parse_args()
    began = time.perf_counter()
    results = []
    with tempfile.TemporaryDirectory() as tmp:
        for name in args.models.split(","):
            results += one_model(name, Path(tmp), args)
    print(f"\n{'model':<12}{'start':<13}{'kept/fastest':>13}{'start/fastest':>15}{'trials':>8}{'tune s':>8}{'load':>6}")
    for r in results:
        print(f"{r['model']:<12}{r['start_name']:<13}{r['ratio']:>13.2f}{r['start_ratio']:>15.2f}{r['trials']:>8}"
              f"{r['tune_s']:>8.0f}{r['load']:>6.1f}")
    failed = [r for r in results if not r["ok"]]
    print(f"{len(results) - len(failed)}/{len(results)} cases within {WITHIN:.2f}x of the sweep's fastest "
          f"with the defaults among the candidates; {time.perf_counter() - began:.0f} s; {now()}")
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
