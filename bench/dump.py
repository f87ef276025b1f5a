"""Bench: a whole dump of a ResNet-18-sized model (batch 8, 3x256x128) against one cold inference of the same batch.

Target (issue 32, item 3): the dump end to end, session included, takes at most 2x one cold inference.

Headline (``--rounds`` rounds, default 7; each round one fresh process per side, the side that goes
first alternating, so both see the same machine load):
- cold inference: ``session.make_session(model)`` (fusions on, as ``ascendpipe infer`` makes it) and
  one ``run`` of the batch;
- dump: ``dump.dump_model(model, feeds, out, fusions=False)`` as a golden dump runs it (model read,
  plan, marked session, run, every tensor written as .npy with its stats, the index), with the
  default memory budget (``auto``).
Cold means a fresh process and so a fresh session, arena and onnxruntime environment on both sides.
Process start and imports are excluded on both sides alike: each process imports numpy, onnx,
onnxruntime and the ascendpipe module it calls, and makes the feed, before its clock starts (imports
do not grow with the batch, and a build process pays them once for all its stages). The model file
is in the page cache for both (the bench has just written it). The ratio printed with PASS/FAIL is
the median dump over the median inference; the per-round ratios' range and the whole processes'
times (interpreter start, imports and exit included, measured by the parent) are printed beside it.

Also printed, from one process each: the warm figures of issue 21 (plain inference warmed up,
median of 5, against the dump called again in the same process; the marked model's run alone as
the floor) and the dump with a smaller budget (segments). Run: ``python bench/dump.py [--rounds 7]
[--budget-mb 64]``.
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


def cpu_seconds() -> float:
    """This process's CPU time (user + system, every thread): less sensitive than wall time to what
    else runs on a shared machine."""
    usage = resource.getrusage(resource.RUSAGE_SELF)
    return usage.ru_utime + usage.ru_stime


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


def case_cold_plain(model: Path, feeds: dict, out: Path, budget_mb: float | None) -> dict:
    """One cold inference: a fresh session (fusions on, as ``infer`` makes it) and one run."""
    from ascendpipe.backends.onnxruntime.session import make_session

    start, cpu = time.perf_counter(), cpu_seconds()
    make_session(model).run(None, feeds)
    return {"seconds": time.perf_counter() - start, "cpu_seconds": cpu_seconds() - cpu}


def case_cold_dump(model: Path, feeds: dict, out: Path, budget_mb: float | None) -> dict:
    """One cold dump end to end, as a golden dump runs it."""
    from ascendpipe.backends.onnxruntime.dump import AUTO, dump_model

    budget = int(budget_mb * (1 << 20)) if budget_mb else AUTO
    stats: dict = {}
    start, cpu = time.perf_counter(), cpu_seconds()
    dump_model(model, feeds, out, fusions=False, memory_budget_bytes=budget, stats=stats)
    return {"seconds": time.perf_counter() - start, "cpu_seconds": cpu_seconds() - cpu, "chunks": stats["chunks"],
            "session_seconds": stats["session_seconds"], "plan_seconds": stats["plan_seconds"]}


CASES = {"plain": case_plain, "dump": case_dump, "paired": case_paired,
         "cold_plain": case_cold_plain, "cold_dump": case_cold_dump}


def child(args) -> None:
    import onnx  # noqa: F401  imports are process start-up, not part of either measurement
    import onnxruntime  # noqa: F401

    import ascendpipe.backends.onnxruntime.dump  # noqa: F401  (imports session too)

    model, out = Path(args.model), Path(args.out)
    feeds = {"input": np.random.default_rng(1).standard_normal((BATCH, *SHAPE)).astype(np.float32)}
    result = CASES[args.child](model, feeds, out, args.budget_mb)
    result["peak_rss_mb"] = peak_rss_mb()
    print(json.dumps(result))


def run_child(case: str, model: Path, out: Path, budget_mb: float | None) -> dict:
    argv = [sys.executable, __file__, "--child", case, "--model", str(model), "--out", str(out)]
    if budget_mb:
        argv += ["--budget-mb", str(budget_mb)]
    start = time.perf_counter()
    done = subprocess.run(argv, capture_output=True, text=True)
    whole = time.perf_counter() - start
    if done.returncode:
        raise SystemExit(f"bench child {case} failed:\n{done.stderr}")
    return {**json.loads(done.stdout.strip().splitlines()[-1]), "process_seconds": whole}


def cold_rounds(model: Path, tmp: Path, rounds: int) -> tuple[list[dict], list[dict]]:
    """``rounds`` fresh processes per side, alternating which side goes first."""
    import shutil

    plains, dumps = [], []
    for k in range(rounds):
        order = ("cold_plain", "cold_dump") if k % 2 == 0 else ("cold_dump", "cold_plain")
        for case in order:
            out = tmp / f"cold{k}"
            result = run_child(case, model, out, None)
            shutil.rmtree(out, ignore_errors=True)
            (plains if case == "cold_plain" else dumps).append(result)
    return plains, dumps


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--child")
    parser.add_argument("--model")
    parser.add_argument("--out")
    parser.add_argument("--budget-mb", type=float, default=None)
    parser.add_argument("--rounds", type=int, default=7, help="fresh processes per side for the cold ratio")
    parser.add_argument("--cold-only", action="store_true", help="only the cold ratio (issue 32's target)")
    args = parser.parse_args()
    if args.child:
        child(args)
        return 0
    load = os.getloadavg()[0]
    with tempfile.TemporaryDirectory(prefix="ascendpipe-bench-dump-") as tmp:
        tmp = Path(tmp)
        model = build_resnet18(tmp / "resnet18.onnx")
        plains, dumps = cold_rounds(model, tmp, args.rounds)
        if not args.cold_only:
            plain = run_child("plain", model, tmp / "plain", None)
            dump = run_child("dump", model, tmp / "dump", None)
            small = run_child("dump", model, tmp / "dump-small", args.budget_mb or 64)
            paired = run_child("paired", model, tmp / "paired", None)
    median = lambda rows, key="seconds": float(np.median([r[key] for r in rows]))  # noqa: E731
    cold_plain, cold_dump = median(plains), median(dumps)
    ratio = cold_dump / cold_plain
    per_round = [d["seconds"] / p["seconds"] for p, d in zip(plains, dumps)]
    each = {name: ", ".join(f"{r['seconds'] * 1000:.0f}" for r in rows) for name, rows in (("plain", plains), ("dump", dumps))}
    print(f"ResNet-18, batch {BATCH}, input {list(SHAPE)}, {os.cpu_count()} CPUs; load average {load:.1f} at the start, "
          f"{os.getloadavg()[0]:.1f} at the end")
    print(f"one cold inference (fresh process: session, fusions on, + one run), median of {len(plains)}: "
          f"{cold_plain * 1000:7.1f} ms   (each: {each['plain']})   "
          f"peak RSS {median(plains, 'peak_rss_mb'):.0f} MB")
    print(f"dump end to end (fresh process, session included), median of {len(dumps)}:          "
          f"{cold_dump * 1000:7.1f} ms   (each: {each['dump']})   "
          f"{dumps[0]['chunks']} run(s), its session {median(dumps, 'session_seconds') * 1000:.0f} ms   "
          f"peak RSS {median(dumps, 'peak_rss_mb'):.0f} MB")
    print(f"  whole processes (interpreter start, imports, exit included): inference {median(plains, 'process_seconds'):.2f} s, "
          f"dump {median(dumps, 'process_seconds'):.2f} s")
    print(f"  CPU time (user + system, all threads), medians: inference {median(plains, 'cpu_seconds') * 1000:.0f} ms, "
          f"dump {median(dumps, 'cpu_seconds') * 1000:.0f} ms: {median(dumps, 'cpu_seconds') / median(plains, 'cpu_seconds'):.2f}x")
    print(f"dump end to end / one cold inference of the same batch: {ratio:.2f}x "
          f"(per round {min(per_round):.2f}x-{max(per_round):.2f}x; target <= 2x: {'PASS' if ratio <= 2.0 else 'FAIL'})")
    if args.cold_only:
        return 0
    print(f"warm, one process each: plain inference (fusions on, warm, median of 5) {plain['seconds'] * 1000:.1f} ms; "
          f"dump called 3 times {', '.join(f'{t * 1000:.0f}' for t in dump['all_seconds'])} ms "
          f"({dump['tensors']} tensors, {dump['bytes'] / 1e6:.0f} MB, {dump['chunks']} run(s), peak RSS {dump['peak_rss_mb']:.0f} MB): "
          f"{dump['seconds'] / plain['seconds']:.2f}x the warm inference (issue 21's 1.5x, restated above against a cold one)")
    print(f"dump, budget {args.budget_mb or 64:.0f} MB: median of 3 {small['seconds'] * 1000:.1f} ms, "
          f"{small['chunks']} segment(s), peak RSS {small['peak_rss_mb']:.0f} MB")
    print(f"alternated in one process (5 pairs, medians): plain {paired['plain_wall'] * 1000:.0f} ms wall / "
          f"{paired['plain_cpu'] * 1000:.0f} ms CPU, dump {paired['dump_wall'] * 1000:.0f} ms wall / "
          f"{paired['dump_cpu'] * 1000:.0f} ms CPU: {paired['wall_ratio']:.2f}x wall, {paired['cpu_ratio']:.2f}x CPU; "
          f"floor (the marked model's run alone, warm, nothing written): {paired['floor_ratio']:.2f}x a plain inference")
    return 0


if __name__ == "__main__":
    sys.exit(main())
