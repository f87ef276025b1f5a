"""Bench: dump every tensor of a ResNet-18-sized model (batch 8, 3x256x128) against one plain inference.

Target (issue 21): the whole dump takes at most 1.5x one plain inference. Each case runs in its own
child process so its peak RSS is its own. Run: ``python bench/dump.py [--budget-mb 64]`` (without it,
the dump's default: one run up to ``dump.ONE_RUN_BYTES``, else segments).

- plain: default session (fusions on), warmed up; the median of 5 runs is "one plain inference".
- dump: ``dump_model`` end to end with fusions off (model load, marking, session, run, every tensor
  written as .npy with stats, index); the median of 3 calls, and the first (cold) one; the golden's
  case (a compare's golden, a dump stage of a plain ONNX).
- dump (budget): the same with another memory budget (a segment's dumped tensors and weights): the
  model runs in segments, each tensor computed once, so peak memory follows the budget at about
  the time of one run.
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import numpy as np

BATCH, SHAPE = 8, (3, 256, 128)


def build_resnet18(path: Path, seed: int = 0) -> Path:
    """ResNet-18 (BN folded into conv bias, as a constant-folded export has it), random weights."""
    import onnx
    from onnx import TensorProto, helper, numpy_helper

    rng = np.random.default_rng(seed)
    nodes, inits, count = [], [], [0]

    def conv(x, cin, cout, k, stride, relu=True):
        count[0] += 1
        n = count[0]
        w = (rng.standard_normal((cout, cin, k, k)) * np.sqrt(2.0 / (cin * k * k))).astype(np.float32)
        inits.extend([numpy_helper.from_array(w, f"conv{n}.w"), numpy_helper.from_array(np.zeros(cout, np.float32), f"conv{n}.b")])
        nodes.append(helper.make_node("Conv", [x, f"conv{n}.w", f"conv{n}.b"], [f"conv{n}"], name=f"Conv_{n}",
                                      strides=[stride, stride], pads=[k // 2] * 4))
        if not relu:
            return f"conv{n}"
        nodes.append(helper.make_node("Relu", [f"conv{n}"], [f"relu{n}"], name=f"Relu_{n}"))
        return f"relu{n}"

    def block(x, cin, cout, stride):
        y = conv(x, cin, cout, 3, stride)
        y = conv(y, cout, cout, 3, 1, relu=False)
        skip = conv(x, cin, cout, 1, stride, relu=False) if (stride != 1 or cin != cout) else x
        name = f"add{len(nodes)}"
        nodes.append(helper.make_node("Add", [y, skip], [name], name=f"Add_{len(nodes)}"))
        nodes.append(helper.make_node("Relu", [name], [name + ".relu"], name=f"Relu_{len(nodes)}"))
        return name + ".relu"

    x = conv("input", 3, 64, 7, 2)
    nodes.append(helper.make_node("MaxPool", [x], ["pool"], name="MaxPool_0", kernel_shape=[3, 3], strides=[2, 2], pads=[1] * 4))
    x, cin = "pool", 64
    for cout, stride in ((64, 1), (128, 2), (256, 2), (512, 2)):
        x = block(x, cin, cout, stride)
        x = block(x, cout, cout, 1)
        cin = cout
    nodes.append(helper.make_node("GlobalAveragePool", [x], ["gap"], name="GlobalAveragePool_0"))
    nodes.append(helper.make_node("Flatten", ["gap"], ["feat"], name="Flatten_0"))
    fc = (rng.standard_normal((751, 512)) * 0.05).astype(np.float32)
    inits.extend([numpy_helper.from_array(fc, "fc.w"), numpy_helper.from_array(np.zeros(751, np.float32), "fc.b")])
    nodes.append(helper.make_node("Gemm", ["feat", "fc.w", "fc.b"], ["logits"], name="Gemm_0", transB=1))
    graph = helper.make_graph(nodes, "resnet18", [helper.make_tensor_value_info("input", TensorProto.FLOAT, ["N", *SHAPE])],
                              [helper.make_tensor_value_info("logits", TensorProto.FLOAT, ["N", 751])], inits)
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    onnx.save(model, str(path))
    return path


def peak_rss_mb() -> float:
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024.0  # Linux: KiB


def case_plain(model: Path, feeds: dict, out: Path, budget_mb: float | None) -> dict:
    from ascendpipe.backends.onnxruntime.session import make_session

    start = time.perf_counter()
    session = make_session(model)
    session.run(None, feeds)
    cold = time.perf_counter() - start
    times = []
    for _ in range(5):
        t0 = time.perf_counter()
        session.run(None, feeds)
        times.append(time.perf_counter() - t0)
    return {"seconds": float(np.median(times)), "cold_seconds": cold}


def case_dump(model: Path, feeds: dict, out: Path, budget_mb: float | None) -> dict:
    from ascendpipe.backends.onnxruntime.dump import AUTO, dump_model

    budget = int(budget_mb * (1 << 20)) if budget_mb else AUTO
    times = []
    for attempt in range(3):  # the first is cold (like plain's first run); each writes a fresh dump
        target = out / str(attempt)
        start = time.perf_counter()
        index_path = dump_model(model, feeds, target, fusions=False, memory_budget_bytes=budget)
        times.append(time.perf_counter() - start)
    index = json.loads(index_path.read_text())
    total = sum(p.stat().st_size for p in (target / "tensors").iterdir())
    stats: dict = {}
    dump_model(model, feeds, out / "stats", fusions=False, memory_budget_bytes=budget, stats=stats)
    return {"seconds": float(np.median(times)), "cold_seconds": times[0], "all_seconds": times,
            "tensors": len(index["tensors"]), "chunks": stats["chunks"], "bytes": total}


def case_paired(model: Path, feeds: dict, out: Path, budget_mb: float | None) -> dict:
    """Plain inference and dump end to end, alternated in one process (5 pairs): on a shared machine
    both see the same load, and CPU time (user + system, this process) is reported beside wall time."""
    import shutil

    from ascendpipe.backends.onnxruntime.dump import AUTO, dump_model
    from ascendpipe.backends.onnxruntime.session import make_session

    budget = int(budget_mb * (1 << 20)) if budget_mb else AUTO
    session = make_session(model)
    session.run(None, feeds)
    dump_model(model, feeds, out / "warm", fusions=False, memory_budget_bytes=budget)  # page cache, imports
    marked = _marked_session(model)

    def timed(fn):
        usage, start = resource.getrusage(resource.RUSAGE_SELF), time.perf_counter()
        fn()
        after = resource.getrusage(resource.RUSAGE_SELF)
        return time.perf_counter() - start, (after.ru_utime - usage.ru_utime) + (after.ru_stime - usage.ru_stime)

    pairs, floors = [], []
    for k in range(5):
        plain = timed(lambda: session.run(None, feeds))
        dumped = timed(lambda: dump_model(model, feeds, out / f"p{k}", fusions=False, memory_budget_bytes=budget))
        shutil.rmtree(out / f"p{k}", ignore_errors=True)
        floors.append(timed(lambda: marked[0].run(marked[1], feeds))[0] / plain[0])
        pairs.append((plain, dumped))
    return {"floor_ratio": float(np.median(floors)), "wall_ratio": float(np.median([d[0] / p[0] for p, d in pairs])),
            "cpu_ratio": float(np.median([d[1] / p[1] for p, d in pairs])),
            "plain_wall": float(np.median([p[0] for p, _ in pairs])), "dump_wall": float(np.median([d[0] for _, d in pairs])),
            "plain_cpu": float(np.median([p[1] for p, _ in pairs])), "dump_cpu": float(np.median([d[1] for _, d in pairs]))}


def _marked_session(model: Path):
    """A warm session of the model with every tensor an output, fusions off, as the dump runs it:
    its run alone, with no session to make and nothing written, is the floor of any dump built on
    onnxruntime's CPU provider (marked outputs are never fused away)."""
    import onnx

    from ascendpipe.backends.onnxruntime.dump import marked_model_bytes
    from ascendpipe.backends.onnxruntime.session import make_session

    graph = onnx.load(str(model)).graph
    names = [o for node in graph.node for o in node.output]
    outputs = {o.name for o in graph.output}
    session = make_session(marked_model_bytes(model.read_bytes(), [n for n in names if n not in outputs]), fusions=False)
    session.run(names, {"input": np.zeros((BATCH, *SHAPE), np.float32)})
    return session, names


def child(args) -> None:
    import onnx  # noqa: F401  imports are process start-up, not part of either measurement
    import onnxruntime  # noqa: F401

    model, out = Path(args.model), Path(args.out)
    feeds = {"input": np.random.default_rng(1).standard_normal((BATCH, *SHAPE)).astype(np.float32)}
    result = {"plain": case_plain, "dump": case_dump, "paired": case_paired}[args.child](model, feeds, out, args.budget_mb)
    result["peak_rss_mb"] = peak_rss_mb()
    print(json.dumps(result))


def run_child(case: str, model: Path, out: Path, budget_mb: float | None) -> dict:
    argv = [sys.executable, __file__, "--child", case, "--model", str(model), "--out", str(out)]
    if budget_mb:
        argv += ["--budget-mb", str(budget_mb)]
    done = subprocess.run(argv, capture_output=True, text=True, check=True)
    return json.loads(done.stdout.strip().splitlines()[-1])


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--child")
    parser.add_argument("--model")
    parser.add_argument("--out")
    parser.add_argument("--budget-mb", type=float, default=None)
    args = parser.parse_args()
    if args.child:
        child(args)
        return 0
    with tempfile.TemporaryDirectory(prefix="ascendpipe-bench-dump-") as tmp:
        tmp = Path(tmp)
        model = build_resnet18(tmp / "resnet18.onnx")
        plain = run_child("plain", model, tmp / "plain", None)
        dump = run_child("dump", model, tmp / "dump", None)
        small = run_child("dump", model, tmp / "dump-small", args.budget_mb or 64)
        paired = run_child("paired", model, tmp / "paired", None)
    ratio = dump["seconds"] / plain["seconds"]
    print(f"ResNet-18, batch {BATCH}, input {list(SHAPE)}; load average at the end: {os.getloadavg()[0]:.1f} "
          f"on {os.cpu_count()} CPUs")
    print(f"plain inference (fusions on, warm, median of 5): {plain['seconds'] * 1000:8.1f} ms   "
          f"(cold incl. session: {plain['cold_seconds'] * 1000:.1f} ms)   peak RSS {plain['peak_rss_mb']:.0f} MB")
    print(f"dump, fusions off, end to end (median of 3):     {dump['seconds'] * 1000:8.1f} ms   "
          f"(each: {', '.join(f'{t * 1000:.0f}' for t in dump['all_seconds'])} ms)   "
          f"{dump['tensors']} tensors, {dump['bytes'] / 1e6:.0f} MB, {dump['chunks']} segment(s)   peak RSS {dump['peak_rss_mb']:.0f} MB")
    print(f"dump, budget {args.budget_mb or 64:.0f} MB:                            {small['seconds'] * 1000:8.1f} ms   "
          f"{small['chunks']} segment(s)   peak RSS {small['peak_rss_mb']:.0f} MB")
    print(f"alternated in one process (5 pairs, medians): plain {paired['plain_wall'] * 1000:.0f} ms wall / "
          f"{paired['plain_cpu'] * 1000:.0f} ms CPU, dump {paired['dump_wall'] * 1000:.0f} ms wall / "
          f"{paired['dump_cpu'] * 1000:.0f} ms CPU: ratio {paired['wall_ratio']:.2f}x wall, {paired['cpu_ratio']:.2f}x CPU "
          f"(target <= 1.5x: {'met' if paired['wall_ratio'] <= 1.5 else 'NOT met'})")
    print(f"floor: the marked model's run alone (warm session, nothing written) is {paired['floor_ratio']:.2f}x "
          "a plain inference")
    print(f"ratio dump / plain inference: {ratio:.2f}x (separate processes; target <= 1.5x: {'met' if ratio <= 1.5 else 'NOT met'}); "
          f"cold dump / cold plain (incl. session): {dump['cold_seconds'] / plain['cold_seconds']:.2f}x")
    return 0


if __name__ == "__main__":
    sys.exit(main())
