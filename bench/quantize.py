"""Benchmark: int8 (the quantize stage's QDQ model) vs fp32 inference on onnxruntime, and the
automatic quantization search's evaluations vs a one-layer-at-a-time search.

Run: python bench/quantize.py [--batch 8] [--repeat 20] [--layers 12] [--sensitive 9]

1. Speed: a VGG-style stack of 3x3 convolutions (64-128 channels, 56x56, biases folded in as an
   exported model has them) quantized by the onnxruntime backend with the default calibration; both
   models timed in the same process with the same session options (median of --repeat runs).
2. Search: a CNN with --layers convolutions where layer --sensitive is made sensitive to int8 on
   purpose (an outlier weight on a dead input channel); the target is Top-1 within 0.02 of fp32 on
   300 inputs labelled by the fp32 model. The automatic search (fix's grow-from-compare + shrink) and
   the yardstick (keep one layer at a time in float, in graph order, until the target holds) run on
   the same in-process evaluator; both must find the sensitive layer alone.
"""

from __future__ import annotations

import argparse
import statistics
import sys
import tempfile
import time
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))


def vgg_like(path: Path, widths=(64, 64, 128, 128, 128, 128)) -> Path:
    import onnx
    from onnx import TensorProto, helper, numpy_helper

    rng = np.random.default_rng(0)
    nodes, inits, x, cin = [], [], "input", 3
    for i, cout in enumerate(widths):
        w = (rng.standard_normal((cout, cin, 3, 3)) * np.sqrt(2.0 / (cin * 9))).astype(np.float32)
        inits += [numpy_helper.from_array(w, f"w{i}"), numpy_helper.from_array(np.zeros(cout, np.float32), f"b{i}")]
        stride = 2 if i in (2, 4) else 1
        nodes += [helper.make_node("Conv", [x, f"w{i}", f"b{i}"], [f"c{i}"], name=f"conv{i}", pads=[1] * 4,
                                   strides=[stride] * 2),
                  helper.make_node("Relu", [f"c{i}"], [f"r{i}"], name=f"relu{i}")]
        x, cin = f"r{i}", cout
    wf = (rng.standard_normal((10, cin)) * 0.1).astype(np.float32)
    inits += [numpy_helper.from_array(wf, "wf"), numpy_helper.from_array(np.zeros(10, np.float32), "bf")]
    nodes += [helper.make_node("GlobalAveragePool", [x], ["g"], name="gap"),
              helper.make_node("Flatten", ["g"], ["f"], name="flat"),
              helper.make_node("Gemm", ["f", "wf", "bf"], ["logits"], name="fc", transB=1)]
    graph = helper.make_graph(nodes, "vgg", [helper.make_tensor_value_info("input", TensorProto.FLOAT, ["N", 3, 56, 56])],
                              [helper.make_tensor_value_info("logits", TensorProto.FLOAT, ["N", 10])], inits)
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 13)])
    model.ir_version = 8
    onnx.save(model, str(path))
    return path


def deep_sensitive(path: Path, layers: int, sensitive: int) -> list[str]:
    """x[N,3,8,8] -> conv0 ... conv{layers-1} (8 channels, ReLU) -> gap -> fc. Channel 7 of conv0 is dead
    and carried through (identity-like weights keep it zero); conv{sensitive} has an outlier weight on it."""
    import onnx
    from onnx import TensorProto, helper, numpy_helper

    rng = np.random.default_rng(0)
    nodes, inits, x, cin, names = [], [], "x", 3, []
    for i in range(layers):
        w = (rng.standard_normal((8, cin, 3, 3)) * np.sqrt(2.0 / (cin * 9))).astype(np.float32)
        b = (rng.standard_normal(8) * 0.05).astype(np.float32)
        w[7], b[7] = 0.0, -1.0  # channel 7 stays dead after every ReLU
        if i == sensitive:
            w[:, 7, 1, 1] = 1000.0 * np.abs(w).reshape(8, -1).max(axis=1)
        inits += [numpy_helper.from_array(w, f"w{i}"), numpy_helper.from_array(b, f"b{i}")]
        nodes += [helper.make_node("Conv", [x, f"w{i}", f"b{i}"], [f"c{i}"], name=f"conv{i}", pads=[1] * 4),
                  helper.make_node("Relu", [f"c{i}"], [f"r{i}"], name=f"relu{i}")]
        names.append(f"conv{i}")
        x, cin = f"r{i}", 8
    wf = rng.standard_normal((5, 8)).astype(np.float32)
    inits += [numpy_helper.from_array(wf, "wf"), numpy_helper.from_array(np.zeros(5, np.float32), "bf")]
    nodes += [helper.make_node("GlobalAveragePool", [x], ["g"], name="gap"),
              helper.make_node("Flatten", ["g"], ["f"], name="flat"),
              helper.make_node("Gemm", ["f", "wf", "bf"], ["logits"], name="fc", transB=1)]
    graph = helper.make_graph(nodes, "deep", [helper.make_tensor_value_info("x", TensorProto.FLOAT, ["N", 3, 8, 8])],
                              [helper.make_tensor_value_info("logits", TensorProto.FLOAT, ["N", 5])], inits)
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 13)])
    model.ir_version = 8
    onnx.save(model, str(path))
    return names + ["fc"]


def _median_ms(session, feeds, repeat: int) -> float:
    session.run(None, feeds)  # warm-up
    times = []
    for _ in range(repeat):
        start = time.perf_counter()
        session.run(None, feeds)
        times.append((time.perf_counter() - start) * 1e3)
    return statistics.median(times)


def speed(work: Path, batch: int, repeat: int) -> None:
    import onnxruntime as ort

    from ascendpipe.backends.onnxruntime.quantize import quantize_model
    from ascendpipe.quantize.config import resolve

    fp32 = vgg_like(work / "vgg.onnx")
    rng = np.random.default_rng(1)
    calib = [{"input": rng.standard_normal((16, 3, 56, 56)).astype(np.float32)}]
    int8 = work / "vgg_int8.onnx"
    start = time.perf_counter()
    quantize_model(fp32, calib, int8, resolve({}))
    calib_s = time.perf_counter() - start
    feeds = {"input": rng.standard_normal((batch, 3, 56, 56)).astype(np.float32)}
    options = ort.SessionOptions()
    options.intra_op_num_threads = 2
    times = {}
    for name, path in (("fp32", fp32), ("int8 (QDQ)", int8)):
        session = ort.InferenceSession(str(path), options, providers=["CPUExecutionProvider"])
        times[name] = _median_ms(session, feeds, repeat)
    print(f"== inference on onnxruntime {ort.__version__} (CPU, 2 threads), VGG-style 6 convs, batch {batch}, "
          f"median of {repeat}")
    print(f"calibration (16 samples, MinMax): {calib_s:.2f} s")
    for name, ms in times.items():
        print(f"  {name:<12} {ms:8.2f} ms")
    print(f"  int8 / fp32 time: {times['int8 (QDQ)'] / times['fp32']:.2f}x")


def search_cost(work: Path, layers: int, sensitive: int) -> None:
    import onnxruntime as ort

    from ascendpipe.fix.quantize import StandaloneQuantizeEvaluator, one_layer_at_a_time, quantize_search

    model = work / "deep.onnx"
    names = deep_sensitive(model, layers, sensitive)
    rng = np.random.default_rng(2)
    val = rng.standard_normal((300, 3, 8, 8)).astype(np.float32)
    labels = np.argmax(ort.InferenceSession(str(model), providers=["CPUExecutionProvider"]).run(None, {"x": val})[0], axis=1)
    calib = [{"x": rng.standard_normal((16, 3, 8, 8)).astype(np.float32)}]
    results = {}
    for name in ("automatic search", "one layer at a time"):
        evaluator = StandaloneQuantizeEvaluator(model, calib, {"x": val}, labels, tolerance=0.02, work_dir=work / name)
        start = time.perf_counter()
        if name == "automatic search":
            outcome = quantize_search(evaluator)
            answer = [c.name for c in outcome.remedy] if outcome.passed else None
        else:
            answer, _ = one_layer_at_a_time(evaluator, names)
        results[name] = (answer, evaluator.count, time.perf_counter() - start)
    print(f"== automatic quantization: {len(names)} quantizable layers, conv{sensitive} made sensitive, "
          "target Top-1 within 0.02 of fp32")
    for name, (answer, count, seconds) in results.items():
        print(f"  {name:<20} kept in float: {answer}  evaluations: {count:3d}  ({seconds:.1f} s)")
    auto, yard = results["automatic search"][1], results["one layer at a time"][1]
    print(f"  evaluations, one-at-a-time / automatic: {yard / auto:.1f}x")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--batch", type=int, default=8)
    parser.add_argument("--repeat", type=int, default=20)
    parser.add_argument("--layers", type=int, default=12)
    parser.add_argument("--sensitive", type=int, default=9)
    args = parser.parse_args()
    with tempfile.TemporaryDirectory(prefix="ascendpipe-bench-quantize-") as tmp:
        speed(Path(tmp), args.batch, args.repeat)
        search_cost(Path(tmp), args.layers, args.sensitive)


if __name__ == "__main__":
    main()
