"""Bench: a model past protobuf's 2 GB (ONNX external data) through convert, dump and compare, beside
plain onnxruntime in the same run.

Model: ``--matmuls`` MatMuls (default 9) alternating 4096x16384 and 16384x4096 fp32 weights (2.4 GB
at 9: an LLM's FFN stack), fed ``x`` [``--batch``, 4096], weights N(0, 1/fan_in) so the activations
stay near 1 (no fp16 overflow), saved with ``save_as_external_data`` (one ``model.onnx.data``).

Each command runs in its own process (``compare_vs_polygraphy.measure``: wall time, peak RSS):
- plain onnxruntime: ``InferenceSession`` creation alone, and creation plus one run;
- ``ascendpipe convert --precision-mode force_fp16`` (every weight read in fp16: a new weights file,
  rounded and written chunk by chunk) and ``--precision-mode must_keep_origin_dtype`` (no weight
  rounded: the source's weights file referenced, copied beside the output, as onnx refuses a
  hard-linked one; force_fp32 would not do: its cube ops read fp16);
- ``ascendpipe compare`` of the fp16 conversion against the fp32 model (both dumps and the compare);
- ``cp`` of the weights file: what writing the weights once costs on this disk (a convert writes them
  once: rounded, or copied where none is rounded), printed beside the converts.

Targets (issue 40): convert <= 1.5x onnxruntime's session creation with a peak <= 1.2x the model's
bytes; compare within the growth bench's bound (``scale_model.py``: peak above a bare process <=
largest activation x 4 + weights x 2).

    python bench/convert_external.py [--matmuls 9] [--batch 8] [--work bench/.models/external]

The model (and the conversions, ~7 GB in all) is written under ``--work`` and removed at the end.
"""

from __future__ import annotations

import argparse
import datetime
import os
import shutil
import sys
import time
from pathlib import Path

import numpy as np

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))

from compare_vs_polygraphy import measure  # noqa: E402  (the peers' helper, shared)

HIDDEN, FFN = 4096, 16384
BASELINE = "import numpy, onnx, onnxruntime"
SESSION = ("import sys, onnxruntime as ort; o = ort.SessionOptions(); "
           "ort.InferenceSession(sys.argv[1], o, providers=['CPUExecutionProvider'])")
SESSION_RUN = ("import sys, numpy as np, onnxruntime as ort; "
               "s = ort.InferenceSession(sys.argv[1], providers=['CPUExecutionProvider']); "
               "s.run(None, {'x': np.load(sys.argv[2])})")


def build(path: Path, matmuls: int, batch: int, seed: int = 0) -> int:
    """Write the model with its weights in ``model.onnx.data``; return the weights' bytes. Each weight
    is made and written one at a time (the whole model is never in memory)."""
    import onnx
    from onnx import TensorProto, helper

    rng = np.random.default_rng(seed)
    data_name = path.name + ".data"
    nodes, inits, offset, x = [], [], 0, "x"
    with open(path.parent / data_name, "wb") as data:
        for i in range(matmuls):
            rows, cols = (HIDDEN, FFN) if i % 2 == 0 else (FFN, HIDDEN)
            weight = (rng.standard_normal((rows, cols), dtype=np.float32) / np.float32(np.sqrt(rows)))
            data.write(weight.tobytes())
            init = onnx.TensorProto(name=f"w{i}", data_type=TensorProto.FLOAT, dims=[rows, cols],
                                    data_location=TensorProto.EXTERNAL)
            for key, value in (("location", data_name), ("offset", str(offset)), ("length", str(weight.nbytes))):
                entry = init.external_data.add()
                entry.key, entry.value = key, value
            offset += weight.nbytes
            del weight
            inits.append(init)
            nodes.append(helper.make_node("MatMul", [x, f"w{i}"], [f"y{i}"], name=f"matmul{i}"))
            x = f"y{i}"
    out = FFN if matmuls % 2 else HIDDEN
    graph = helper.make_graph(nodes, "ffn_stack", [helper.make_tensor_value_info("x", TensorProto.FLOAT, [batch, HIDDEN])],
                              [helper.make_tensor_value_info(x, TensorProto.FLOAT, [batch, out])], inits)
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)], producer_name="bench.convert_external")
    model.ir_version = 8
    onnx.save(model, str(path))
    return offset


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--matmuls", type=int, default=9)
    ap.add_argument("--batch", type=int, default=8)
    ap.add_argument("--work", default=str(HERE / ".models" / "external"))
    ap.add_argument("--keep", action="store_true", help="leave the model and outputs in --work")
    args = ap.parse_args()
    work = Path(args.work)
    shutil.rmtree(work, ignore_errors=True)
    work.mkdir(parents=True)
    started = time.perf_counter()
    print(f"{datetime.datetime.now(datetime.timezone.utc):%Y-%m-%d %H:%M} UTC, {os.cpu_count()} CPUs, "
          f"load average {os.getloadavg()[0]:.1f}; {args.matmuls} MatMuls {HIDDEN}x{FFN}, batch {args.batch}")
    try:
        model = work / "model.onnx"
        weights = build(model, args.matmuls, args.batch)
        x = work / "x.npy"
        np.save(x, np.random.default_rng(1).standard_normal((args.batch, HIDDEN)).astype(np.float32))
        gb = weights / 1e9
        base = measure([sys.executable, "-c", BASELINE])["peak_rss_mb"]
        print(f"model: {gb:.2f} GB of weights in {model.name}.data ({model.stat().st_size} bytes of graph); "
              f"baseline process (numpy, onnx, onnxruntime): {base:.0f} MB")
        rows = []

        def row(label: str, argv: list[str], ok=(0,)) -> dict:
            result = measure(argv, ok_codes=ok)
            rows.append((label, result))
            print(f"  {label:<44} {result['wall']:>7.1f} s  peak {result['peak_rss_mb']:>6.0f} MB "
                  f"({result['peak_rss_mb'] * 1e6 / weights:.2f}x the model)", flush=True)
            return result

        session = row("onnxruntime: session creation", [sys.executable, "-c", SESSION, str(model)])
        row("onnxruntime: session creation + one run", [sys.executable, "-c", SESSION_RUN, str(model), str(x)])
        # the disk's floor for a convert that writes the weights once: a plain copy of the weights file
        floor = row("cp model.onnx.data (writing 2.4 GB here)",
                    ["cp", str(work / "model.onnx.data"), str(work / "copy.data")])
        (work / "copy.data").unlink()
        ascendpipe = [sys.executable, "-m", "ascendpipe"]
        fp16 = row("ascendpipe convert --precision-mode force_fp16",
                   [*ascendpipe, "convert", "--model", str(model), "--output", str(work / "fp16"),
                    "--precision-mode", "force_fp16"])
        fp32 = row("ascendpipe convert must_keep_origin_dtype",
                   [*ascendpipe, "convert", "--model", str(model), "--output", str(work / "fp32"),
                    "--precision-mode", "must_keep_origin_dtype"])
        shutil.rmtree(work / "fp32", ignore_errors=True)
        compare = row("ascendpipe compare (fp16 against the fp32 model)",
                      [*ascendpipe, "compare", "--golden", str(model), "--target", str(work / "fp16"),
                       "--input", str(x), "--output", str(work / "cmp")], ok=(0, 1))
        again = row("onnxruntime: session creation (again, last)", [sys.executable, "-c", SESSION, str(model)])
        largest = args.batch * FFN * 4
        bound = (largest * 4 + weights * 2) / 1e6
        # the machine's load moves every figure: each convert against both session creations (the first and
        # the last command of the run) and against their mean
        mean = (session["wall"] + again["wall"]) / 2
        for label, result in (("force_fp16", fp16), ("must_keep_origin_dtype", fp32)):
            ratio, peak = result["wall"] / mean, result["peak_rss_mb"] * 1e6 / weights
            print(f"convert {label}: {ratio:.2f}x onnxruntime's mean session creation ({result['wall'] / session['wall']:.2f}x "
                  f"the first, {result['wall'] / again['wall']:.2f}x the last; target <= 1.5), peak "
                  f"{peak:.2f}x the model's bytes (target <= 1.2): "
                  f"{'within' if ratio <= 1.5 and peak <= 1.2 else 'NOT within'} the targets")
        print(f"convert force_fp16 / cp of the weights: {fp16['wall'] / floor['wall']:.2f}x; must_keep_origin_dtype (a "
              f"copy of the weights file): {fp32['wall'] / floor['wall']:.2f}x (the disk's share of the convert)")
        above = compare["peak_rss_mb"] - base
        print(f"compare: peak {compare['peak_rss_mb']:.0f} MB, {above:.0f} MB above the baseline; bound (largest "
              f"activation x 4 + weights x 2) {bound:.0f} MB: {'within' if above <= bound else 'NOT within'}")
    finally:
        if not args.keep:
            shutil.rmtree(work, ignore_errors=True)
    print(f"whole run {time.perf_counter() - started:.0f} s, load average {os.getloadavg()[0]:.1f} at the end")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
