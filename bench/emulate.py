"""Benchmark: convert a ResNet-18-sized ONNX model and compare emulated vs fp32 inference time.

Run: python bench/emulate.py [--batch 8] [--repeat 10]
Targets: convert < 2 s; emulated inference <= 1.5x the fp32 model on the same provider. The emulated
model carries ATC's fusions (Conv+BN folded, conv + relu/add kernels rounded as on the device); the
fp32 model gets onnxruntime's own optimisations when its session loads.
"""

from __future__ import annotations

import argparse
import tempfile
import time
from pathlib import Path

import numpy as np


def resnet18(path: Path, classes: int = 1000) -> Path:
    import onnx
    from onnx import TensorProto, helper, numpy_helper

    rng = np.random.default_rng(0)
    nodes, inits = [], []

    def conv(x, cin, cout, k, stride, name):
        w = (rng.standard_normal((cout, cin, k, k)) * np.sqrt(2.0 / (cin * k * k))).astype(np.float32)
        inits.append(numpy_helper.from_array(w, f"{name}.w"))
        for part, value in (("scale", np.ones(cout)), ("bias", np.zeros(cout)), ("mean", rng.standard_normal(cout) * 0.01),
                            ("var", np.ones(cout))):
            inits.append(numpy_helper.from_array(value.astype(np.float32), f"{name}.bn.{part}"))
        nodes.append(helper.make_node("Conv", [x, f"{name}.w"], [f"{name}.c"], name=name, strides=[stride] * 2,
                                      pads=[k // 2] * 4))
        nodes.append(helper.make_node("BatchNormalization", [f"{name}.c"] + [f"{name}.bn.{p}" for p in
                                      ("scale", "bias", "mean", "var")], [f"{name}.o"], name=f"{name}.bn"))
        return f"{name}.o"

    def relu(x, name):
        nodes.append(helper.make_node("Relu", [x], [f"{name}.r"], name=f"{name}.relu"))
        return f"{name}.r"

    x = relu(conv("input", 3, 64, 7, 2, "stem"), "stem")
    nodes.append(helper.make_node("MaxPool", [x], ["pool0"], name="maxpool", kernel_shape=[3, 3], strides=[2, 2], pads=[1] * 4))
    x, cin = "pool0", 64
    for stage, cout in enumerate((64, 128, 256, 512)):
        for block in range(2):
            stride = 2 if stage and not block else 1
            name = f"layer{stage + 1}.{block}"
            y = relu(conv(x, cin, cout, 3, stride, f"{name}.conv1"), f"{name}.1")
            y = conv(y, cout, cout, 3, 1, f"{name}.conv2")
            short = conv(x, cin, cout, 1, stride, f"{name}.down") if (stride != 1 or cin != cout) else x
            nodes.append(helper.make_node("Add", [y, short], [f"{name}.sum"], name=f"{name}.add"))
            x, cin = relu(f"{name}.sum", name), cout
    nodes.append(helper.make_node("GlobalAveragePool", [x], ["gap"], name="gap"))
    nodes.append(helper.make_node("Flatten", ["gap"], ["flat"], name="flatten"))
    inits.append(numpy_helper.from_array((rng.standard_normal((classes, 512)) * 0.02).astype(np.float32), "fc.w"))
    inits.append(numpy_helper.from_array(np.zeros(classes, np.float32), "fc.b"))
    nodes.append(helper.make_node("Gemm", ["flat", "fc.w", "fc.b"], ["logits"], name="fc", transB=1))
    graph = helper.make_graph(nodes, "resnet18", [helper.make_tensor_value_info("input", TensorProto.FLOAT, ["N", 3, 224, 224])],
                              [helper.make_tensor_value_info("logits", TensorProto.FLOAT, ["N", classes])], initializer=inits)
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    model.ir_version = 8
    onnx.save(model, str(path))
    return path


def _time_session(path: Path, feeds: dict, repeat: int) -> float:
    import onnxruntime as ort

    session = ort.InferenceSession(str(path), providers=["CPUExecutionProvider"])
    session.run(None, feeds)  # warm-up
    best = float("inf")
    for _ in range(repeat):
        start = time.perf_counter()
        session.run(None, feeds)
        best = min(best, time.perf_counter() - start)
    return best


def main() -> None:
    from ascendpipe.backends.onnxruntime.convert import convert_model
    from ascendpipe.precision.settings import resolve

    parser = argparse.ArgumentParser()
    parser.add_argument("--batch", type=int, default=4)
    parser.add_argument("--repeat", type=int, default=10)
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        model = resnet18(Path(tmp) / "resnet18.onnx")
        size_mb = model.stat().st_size / 1e6
        start = time.perf_counter()
        result = convert_model(model, Path(tmp) / "out", resolve({}))
        convert_s = time.perf_counter() - start
        feeds = {"input": np.random.default_rng(0).standard_normal((args.batch, 3, 224, 224)).astype(np.float32)}
        fp32_s = _time_session(model, feeds, args.repeat)
        emu_s = _time_session(result.model_path, feeds, args.repeat)
    print(f"model: ResNet-18, {size_mb:.1f} MB, batch {args.batch}; {result.counts}")
    print(f"ATC passes applied: {result.fusion['passes']}")
    print(f"convert: {convert_s:.2f} s (target < 2 s, ratio to target {convert_s / 2:.2f})")
    print(f"inference fp32 {fp32_s * 1e3:.1f} ms, emulated {emu_s * 1e3:.1f} ms, "
          f"ratio {emu_s / fp32_s:.2f} (target <= 1.5)")


if __name__ == "__main__":
    main()
