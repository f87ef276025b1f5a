"""Benchmark: ascendpipe's dump-both-and-compare vs Polygraphy's layerwise flow, in the same run.

Model: ``--model detector`` (default): ``tests/modelzoo.text_detector``, a DBNet-shaped text detector of
430 nodes at ``--size`` (736: issue 21's case, >= 400 nodes and >= 700x700); ``--model reid``: a
compact ResNet-18 ReID (batch 8, 3x256x128, needs torch). fp32 golden vs the emulated force_fp16 model.
Issue 32's targets: ascendpipe >= 12x faster and >= 6x less peak memory than Polygraphy, and the
compare after both dumps <= 1.5x the two dumps' time (the flow times both phases inside its process).
Polygraphy (a separate venv, default /tmp/peers): ``polygraphy run --onnxrt --onnx-outputs mark all
--save-outputs`` on the fp32 model, then the fp16 model with ``--load-outputs``. Each flow runs as a
child process under ``/usr/bin/time``-free accounting: wall time, and peak RSS from
``resource.getrusage(RUSAGE_CHILDREN)`` read in a fresh wrapper process per flow.

Also ``--big-dump GB``: compare two synthetic dumps of that size and report the peak RSS, to show
the streaming compare stays near the two largest tensors plus a constant.

Usage: python bench/compare_vs_polygraphy.py [--model detector|reid] [--size 736] [--width 16]
       [--polygraphy /tmp/peers/bin/polygraphy] [--repeat 3] [--big-dump 2]
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent

# Runs one command and prints {"wall": s, "peak_rss_mb": MB} of it (its own children only).
MEASURE = r"""
import json, resource, subprocess, sys, time
start = time.perf_counter()
rc = subprocess.run(sys.argv[1:], stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
wall = time.perf_counter() - start
peak = resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss / 1024
if rc.returncode:
    sys.stderr.write(rc.stderr[-3000:])
print(json.dumps({"wall": wall, "peak_rss_mb": peak, "rc": rc.returncode}))
"""


def measure(argv: list[str], ok_codes: tuple[int, ...] = (0,)) -> dict:
    out = subprocess.run([sys.executable, "-c", MEASURE, *argv], capture_output=True, text=True)
    if out.returncode:
        raise SystemExit(out.stderr)
    result = json.loads(out.stdout.strip().splitlines()[-1])
    if result["rc"] not in ok_codes:
        raise SystemExit(f"command failed: {' '.join(argv)}\n{out.stderr}")
    return result


def build_resnet18_reid(path: Path, batch: int = 8) -> Path:
    import torch
    from torch import nn

    class Block(nn.Module):
        def __init__(self, cin, cout, stride):
            super().__init__()
            self.conv1 = nn.Conv2d(cin, cout, 3, stride, 1, bias=False)
            self.bn1 = nn.BatchNorm2d(cout)
            self.conv2 = nn.Conv2d(cout, cout, 3, 1, 1, bias=False)
            self.bn2 = nn.BatchNorm2d(cout)
            self.down = None
            if stride != 1 or cin != cout:
                self.down = nn.Sequential(nn.Conv2d(cin, cout, 1, stride, bias=False), nn.BatchNorm2d(cout))

        def forward(self, x):
            y = torch.relu(self.bn1(self.conv1(x)))
            y = self.bn2(self.conv2(y))
            return torch.relu(y + (self.down(x) if self.down is not None else x))

    class ReID(nn.Module):
        def __init__(self):
            super().__init__()
            self.stem = nn.Sequential(nn.Conv2d(3, 64, 7, 2, 3, bias=False), nn.BatchNorm2d(64), nn.ReLU(),
                                      nn.MaxPool2d(3, 2, 1))
            layers, cin = [], 64
            for cout, stride in ((64, 1), (128, 2), (256, 2), (512, 1)):  # last stride 1, as ReID models do
                layers += [Block(cin, cout, stride), Block(cout, cout, 1)]
                cin = cout
            self.layers = nn.Sequential(*layers)
            self.bnneck = nn.BatchNorm1d(512)

        def forward(self, x):
            f = torch.flatten(nn.functional.adaptive_avg_pool2d(self.layers(self.stem(x)), 1), 1)
            f = self.bnneck(f)
            return f / torch.sqrt((f * f).sum(1, keepdim=True))  # the L2 norm that overflows in fp16

    torch.manual_seed(0)
    model = ReID().eval()
    with torch.no_grad():  # non-trivial BN statistics so activations grow like a trained model's
        for m in model.modules():
            if isinstance(m, (nn.BatchNorm2d, nn.BatchNorm1d)):
                m.running_mean.uniform_(-0.1, 0.1)
                m.running_var.uniform_(0.5, 1.5)
    torch.onnx.export(model, torch.randn(batch, 3, 256, 128), str(path), input_names=["image"],
                      output_names=["embedding"], opset_version=17, dynamo=False)
    return path


ASCENDPIPE_FLOW = r"""
import json, sys, time
from pathlib import Path
from ascendpipe.compare import runner
from ascendpipe.backends import compare_sources as sources
from ascendpipe.backends.compare_sources import run_compare
from ascendpipe.compare.thresholds import resolve
from ascendpipe.compare.writers import write_results
golden, target, inputs, work = map(Path, sys.argv[1:5])
spans = {"dumps": [], "compare": []}

def timed(phase, function):
    def call(*args, **kwargs):
        start = time.perf_counter()
        try:
            return function(*args, **kwargs)
        finally:
            spans[phase].append((start, time.perf_counter()))
    return call

def covered(intervals):  # seconds inside any interval: the two dumps run at once on two cores
    total, end = 0.0, None
    for a, b in sorted(intervals):
        if end is None or a > end:
            total, end = total + b - a, b
        elif b > end:
            total, end = total + b - end, b
    return total

sources.dump = timed("dumps", sources.dump)  # both models' dumps (run_compare calls it for each)
runner.compare_dumps = timed("compare", runner.compare_dumps)  # the compare of the two dumps
result, note = run_compare(golden, target, input_path=inputs, work_dir=work, limits=resolve())
write_results(result, work, note)
(work / "phases.json").write_text(json.dumps({phase: covered(v) for phase, v in spans.items()}))
print(result["summary"])
"""


def run_ascendpipe(golden: Path, target: Path, inputs: Path, work: Path) -> dict:
    """The whole flow in a child process; also ``dumps`` and ``compare``: the seconds of the two dumps
    (wall time while either runs: they run at once where there are two cores) and of the compare
    after them, timed inside it."""
    script = work.parent / "ascendpipe_flow.py"
    script.write_text(ASCENDPIPE_FLOW)
    result = measure([sys.executable, str(script), str(golden), str(target), str(inputs), str(work)])
    result.update(json.loads((work / "phases.json").read_text()))
    return result


def run_polygraphy(polygraphy: str, golden: Path, target: Path, work: Path) -> tuple[dict, dict]:
    inputs_json, golden_json = work / "inputs.json", work / "golden.json"
    save = measure([polygraphy, "run", str(golden), "--onnxrt", "--onnx-outputs", "mark", "all",
                    "--save-inputs", str(inputs_json), "--save-outputs", str(golden_json)])
    load = measure([polygraphy, "run", str(target), "--onnxrt", "--onnx-outputs", "mark", "all",
                    "--load-inputs", str(inputs_json), "--load-outputs", str(golden_json)],
                   ok_codes=(0, 1))  # 1: the fp16 outputs do not match, which is the expected verdict
    return save, load


IMPORT_ONNX = ("import time; t = time.perf_counter(); import onnx, ml_dtypes; "
               "print(f'{time.perf_counter() - t:.2f} s with ml_dtypes {ml_dtypes.__version__}')")


def onnx_import_note(polygraphy: str) -> str:
    """What `import onnx` costs in each venv: it imports ml_dtypes, whose 0.7.0 takes ~0.8 s on numpy
    2.4 (ascendpipe excludes that release); each flow pays it once per process, Polygraphy's twice."""
    peer_python = str(Path(polygraphy).parent / "python")
    ours = subprocess.run([sys.executable, "-c", IMPORT_ONNX], capture_output=True, text=True).stdout.strip()
    theirs = subprocess.run([peer_python, "-c", IMPORT_ONNX], capture_output=True, text=True).stdout.strip()
    return f"import onnx: {ours or '?'} (ascendpipe's venv), {theirs or '?'} (Polygraphy's venv)"


BIG_FLOW = r"""
import sys
from ascendpipe.compare.runner import compare_dumps
r = compare_dumps(sys.argv[1], sys.argv[2], graph={})
print(r["summary"])
"""


def big_dump(gb: float, work: Path) -> dict:
    """Two synthetic dumps of ``gb`` GB each (64 tensors), compared; peak RSS vs the largest tensor."""
    import numpy as np

    sys.path.insert(0, str(ROOT))
    from tests.compare.dumps import write_dump

    count = 64
    per = int(gb * 1e9 / 4 / count)
    rng = np.random.default_rng(0)
    base = rng.standard_normal(per).astype(np.float32)

    def tensors(noise):
        for i in range(count):
            yield (f"t{i}", f"op{i}", "Mul", base * (i + 1) + noise)

    write_dump(work / "g", list(tensors(0.0)))
    write_dump(work / "t", list(tensors(np.float32(1e-3))))
    script = work / "big_flow.py"
    script.write_text(BIG_FLOW)
    m = measure([sys.executable, str(script), str(work / "g"), str(work / "t")])
    m.update(tensor_mb=per * 4 / 1e6, dump_gb=per * 4 * count / 1e9)
    return m


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--polygraphy", default="/tmp/peers/bin/polygraphy")
    parser.add_argument("--big-dump", type=float, default=0.0, help="also compare two synthetic dumps of this many GB")
    parser.add_argument("--skip-model", action="store_true")
    parser.add_argument("--model", choices=("detector", "reid"), default="detector")
    parser.add_argument("--size", type=int, default=736)
    parser.add_argument("--width", type=int, default=16)
    parser.add_argument("--repeat", type=int, default=3, help="alternated runs of each flow; medians are reported")
    args = parser.parse_args()
    with tempfile.TemporaryDirectory(prefix="bench-compare-") as tmp:
        tmp = Path(tmp)
        if not args.skip_model:
            import numpy as np
            import onnx

            from ascendpipe.backends.onnxruntime.convert import convert_model
            from ascendpipe.precision.settings import ConvertSettings

            if args.model == "reid":
                golden = build_resnet18_reid(tmp / "reid.onnx")
                x = np.random.default_rng(0).standard_normal((8, 3, 256, 128)).astype(np.float32)
                label = "ResNet-18 ReID, batch 8, 3x256x128"
            else:
                sys.path.insert(0, str(ROOT))
                from tests import modelzoo

                golden = modelzoo.text_detector(tmp / "det.onnx", size=args.size, width=args.width)
                x = modelzoo.text_detector_inputs(size=args.size)["image"]
                label = f"text detector ({len(onnx.load(str(golden), load_external_data=False).graph.node)} nodes), {args.size}x{args.size}"
            convert_model(golden, tmp / "conv", ConvertSettings(precision_mode="force_fp16"))
            target = tmp / "conv" / "model.onnx"
            np.save(tmp / "x.npy", x)
            print(label)
            (tmp / "poly").mkdir()
            runs = []
            for k in range(args.repeat):  # alternated, so both flows see the same machine load
                shutil.rmtree(tmp / "ours", ignore_errors=True)
                (tmp / "ours").mkdir()
                ours = run_ascendpipe(golden, tmp / "conv", tmp / "x.npy", tmp / "ours")
                save, load = run_polygraphy(args.polygraphy, golden, target, tmp / "poly")
                runs.append((ours, save, load))
                print(f"run {k + 1}: ascendpipe {ours['wall']:.2f} s / {ours['peak_rss_mb']:.0f} MB (dumps "
                      f"{ours['dumps']:.2f} s, compare {ours['compare']:.2f} s); polygraphy "
                      f"{save['wall'] + load['wall']:.2f} s / {max(save['peak_rss_mb'], load['peak_rss_mb']):.0f} MB; "
                      f"load average {os.getloadavg()[0]:.1f}")
            ours_wall = statistics.median(r[0]["wall"] for r in runs)
            ours_peak = statistics.median(r[0]["peak_rss_mb"] for r in runs)
            save_wall = statistics.median(r[1]["wall"] for r in runs)
            load_wall = statistics.median(r[2]["wall"] for r in runs)
            poly_wall = statistics.median(r[1]["wall"] + r[2]["wall"] for r in runs)
            poly_peak = statistics.median(max(r[1]["peak_rss_mb"], r[2]["peak_rss_mb"]) for r in runs)
            dumps = statistics.median(r[0]["dumps"] for r in runs)
            compare = statistics.median(r[0]["compare"] for r in runs)
            ratios = sorted(r[0]["compare"] / r[0]["dumps"] for r in runs)
            print(f"ascendpipe compare (median of {args.repeat}): {ours_wall:.2f} s, peak {ours_peak:.0f} MB")
            print(f"  of which the two dumps {dumps:.2f} s and the compare after them {compare:.2f} s: compare / dumps "
                  f"{statistics.median(ratios):.2f}x (runs {ratios[0]:.2f}x-{ratios[-1]:.2f}x; target <= 1.5x)")
            print(f"polygraphy layerwise (median of {args.repeat}): {save_wall:.2f} s save + {load_wall:.2f} s "
                  f"load/compare = {poly_wall:.2f} s, peak {poly_peak:.0f} MB")
            print(onnx_import_note(args.polygraphy))
            per_run = sorted((r[1]["wall"] + r[2]["wall"]) / r[0]["wall"] for r in runs)  # each run's own ratio
            print(f"polygraphy / ascendpipe: time {poly_wall / ours_wall:.2f}x (runs {per_run[0]:.1f}x-{per_run[-1]:.1f}x; "
                  f"target >= 12x), "
                  f"peak memory {poly_peak / ours_peak:.2f}x (target >= 6x); "
                  f"load average {os.getloadavg()[0]:.1f} on {os.cpu_count()} CPUs")
        if args.big_dump:
            (tmp / "big").mkdir()
            m = big_dump(args.big_dump, tmp / "big")
            print(f"synthetic dump {m['dump_gb']:.2f} GB x2 ({m['tensor_mb']:.0f} MB tensors): compare {m['wall']:.1f} s, "
                  f"peak {m['peak_rss_mb']:.0f} MB (two largest tensors: {2 * m['tensor_mb']:.0f} MB)")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
