"""Bench: how dump + compare grow with the model: transformer encoders, fp32 golden vs force_fp16.

Models: BERT-base-shaped encoders (hidden 768, 12 heads, FFN 3072, LayerNorm, erf GELU; random
weights, N(0, 0.02) as BERT's init) built with onnx.helper, fed a [batch, seq, 768] embedding
input, at ``--sizes LAYERSxSEQ,...`` (batch ``--batch``, default 8). Activation bytes: every node
output's fp32 bytes from ONNX shape inference (what a golden dump holds).

Per size, each in its own process (``compare_vs_polygraphy.measure``: wall time, peak RSS from
``getrusage(RUSAGE_CHILDREN)``):
- ``ascendpipe convert --precision-mode force_fp16`` (not in the fit: it does not touch activations);
- ``ascendpipe compare --golden model.onnx --target CONVERTED --input x.npy --output OUT``: both
  dumps and the op-by-op compare, the figure that should grow linearly with the activation bytes;
- Polygraphy's mark-all flow (``compare_vs_polygraphy.run_polygraphy``: save the fp32 outputs, then
  load and compare the fp16 model's) where the activations are at most ``--polygraphy-max-gb``
  (it holds every output in memory, and its JSON, several times over).

Printed: a row per size, the least-squares fit of compare time against activation bytes (slope in
s/GB, intercept, R^2, largest relative residual), and the memory check: peak RSS <= the largest
single activation x 4 + the weights x 2 (``bound``), checked on the peak above a bare process that
imports what compare imports (``baseline``: numpy, onnx, onnxruntime, ~60 MB, which the bound leaves
out: the check is about what grows with the model).

``--past-2gb`` adds a row past protobuf's 2 GB limit: ``convert_external.py``'s FFN stack (9 MatMuls of
4096x16384 fp32 weights, 2.4 GB of ONNX external data, batch ``--batch``), converted and compared the same
way (its convert beside plain onnxruntime's session creation: ``bench/convert_external.py``).

Defaults fit a shared 2-core machine (under ~10 minutes, under ~8 GB): 2x128, 4x128, 4x256, 8x256,
4x512. ``--full`` adds 12x256, 8x512, 12x512 (several GB of activations; needs the disk for two dumps).

    python bench/scale_model.py [--sizes 4x128,8x256] [--full] [--batch 8] [--past-2gb]
           [--polygraphy bench/.peers/bin/polygraphy] [--polygraphy-max-gb 1.0]
"""

from __future__ import annotations

import argparse
import datetime
import os
import shutil
import sys
import tempfile
import time
from pathlib import Path

import numpy as np

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))

from compare_vs_polygraphy import measure, run_polygraphy  # noqa: E402  (the peers' helpers, shared)

HIDDEN, HEADS, FFN = 768, 12, 3072
DEFAULT_SIZES = "2x128,4x128,4x256,8x256,4x512"
FULL_SIZES = "12x256,8x512,12x512"
BASELINE = "import numpy, onnx, onnxruntime"


def build_encoder(path: Path, layers: int, seq: int, batch: int, seed: int = 0) -> Path:
    """A post-LN transformer encoder (BERT-base layer shapes) with random weights."""
    import onnx
    from onnx import TensorProto, helper, numpy_helper

    rng = np.random.default_rng(seed)
    nodes, inits = [], []
    dh = HIDDEN // HEADS

    def const(name, array):
        inits.append(numpy_helper.from_array(np.asarray(array), name))
        return name

    def weight(name, shape):
        return const(name, (rng.standard_normal(shape) * 0.02).astype(np.float32))

    def node(op, ins, name, **attrs):
        nodes.append(helper.make_node(op, ins, [name], name=name, **attrs))
        return name

    def dense(x, cin, cout, name):
        y = node("MatMul", [x, weight(f"{name}.w", (cin, cout))], f"{name}.matmul")
        return node("Add", [y, const(f"{name}.b", np.zeros(cout, np.float32))], f"{name}.add")

    def layer_norm(x, name):
        return node("LayerNormalization", [x, const(f"{name}.g", np.ones(HIDDEN, np.float32)),
                                           const(f"{name}.b", np.zeros(HIDDEN, np.float32))], name, axis=-1, epsilon=1e-12)

    heads_shape = const("heads_shape", np.array([batch, seq, HEADS, dh], np.int64))
    hidden_shape = const("hidden_shape", np.array([batch, seq, HIDDEN], np.int64))
    scale = const("scale", np.array(1.0 / np.sqrt(dh), np.float32))
    half, one, rsqrt2 = (const(n, np.array(v, np.float32)) for n, v in (("half", 0.5), ("one", 1.0), ("rsqrt2", 1 / np.sqrt(2))))
    x = "embeddings"
    for i in range(layers):
        p = f"l{i}"
        q = node("Transpose", [node("Reshape", [dense(x, HIDDEN, HIDDEN, f"{p}.q"), heads_shape], f"{p}.q.heads")],
                 f"{p}.q.t", perm=[0, 2, 1, 3])
        k = node("Transpose", [node("Reshape", [dense(x, HIDDEN, HIDDEN, f"{p}.k"), heads_shape], f"{p}.k.heads")],
                 f"{p}.k.t", perm=[0, 2, 3, 1])
        v = node("Transpose", [node("Reshape", [dense(x, HIDDEN, HIDDEN, f"{p}.v"), heads_shape], f"{p}.v.heads")],
                 f"{p}.v.t", perm=[0, 2, 1, 3])
        scores = node("Mul", [node("MatMul", [q, k], f"{p}.scores"), scale], f"{p}.scaled")
        probs = node("Softmax", [scores], f"{p}.softmax", axis=-1)
        ctx = node("Transpose", [node("MatMul", [probs, v], f"{p}.context")], f"{p}.context.t", perm=[0, 2, 1, 3])
        ctx = node("Reshape", [ctx, hidden_shape], f"{p}.context.merged")
        x = layer_norm(node("Add", [x, dense(ctx, HIDDEN, HIDDEN, f"{p}.o")], f"{p}.attn.res"), f"{p}.ln1")
        h = dense(x, HIDDEN, FFN, f"{p}.ffn1")
        erf = node("Erf", [node("Mul", [h, rsqrt2], f"{p}.gelu.scaled")], f"{p}.gelu.erf")
        gelu = node("Mul", [node("Mul", [h, half], f"{p}.gelu.half"), node("Add", [erf, one], f"{p}.gelu.erf1")], f"{p}.gelu")
        x = layer_norm(node("Add", [x, dense(gelu, FFN, HIDDEN, f"{p}.ffn2")], f"{p}.ffn.res"), f"{p}.ln2")
    graph = helper.make_graph(nodes, "encoder", [helper.make_tensor_value_info("embeddings", TensorProto.FLOAT, [batch, seq, HIDDEN])],
                              [helper.make_tensor_value_info(x, TensorProto.FLOAT, [batch, seq, HIDDEN])], inits)
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)], producer_name="bench.scale_model")
    model.ir_version = 8
    onnx.save(model, str(path))
    return path


def activation_facts(path: Path) -> dict:
    """fp32 bytes of every node output (shape inference), the largest one, and the weights' bytes."""
    import onnx

    model = onnx.shape_inference.infer_shapes(onnx.load(str(path), load_external_data=False))  # dims only
    sizes = []
    for vi in list(model.graph.value_info) + list(model.graph.output):
        dims = [d.dim_value for d in vi.type.tensor_type.shape.dim]
        sizes.append(int(np.prod(dims, dtype=np.int64)) * 4)
    weights = sum(int(np.prod(t.dims, dtype=np.int64)) * 4 for t in model.graph.initializer)
    return {"activations": sum(sizes), "largest": max(sizes), "weights": weights, "tensors": len(sizes)}


def fit(xs: list[float], ys: list[float]) -> tuple[float, float, float, float]:
    """Least squares y = a + b x: (b, a, R^2, largest |residual| / y)."""
    x, y = np.asarray(xs, float), np.asarray(ys, float)
    b, a = np.polyfit(x, y, 1)
    pred = a + b * x
    ss_res, ss_tot = float(((y - pred) ** 2).sum()), float(((y - y.mean()) ** 2).sum())
    return float(b), float(a), 1.0 - ss_res / ss_tot if ss_tot else 1.0, float(np.max(np.abs(y - pred) / y))


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--sizes", default=None, help=f"LAYERSxSEQ,... (default {DEFAULT_SIZES})")
    ap.add_argument("--full", action="store_true", help=f"also the big sizes: {FULL_SIZES}")
    ap.add_argument("--batch", type=int, default=8)
    ap.add_argument("--polygraphy", default=str(HERE / ".peers" / "bin" / "polygraphy"))
    ap.add_argument("--polygraphy-max-gb", type=float, default=1.0, help="run Polygraphy up to this many GB of activations")
    ap.add_argument("--work", default=None, help="folder for models and dumps (default: a temp folder, removed)")
    ap.add_argument("--past-2gb", action="store_true", help="add a 2.4 GB model with external data (FFN stack, 9 MatMuls)")
    args = ap.parse_args()
    sizes = args.sizes or (DEFAULT_SIZES + ("," + FULL_SIZES if args.full else ""))
    points = [tuple(int(v) for v in s.split("x")) for s in sizes.split(",") if s]
    if args.past_2gb:
        points.append(("ffn", 9))  # the FFN stack past 2 GB: 9 MatMuls
    ascendpipe = [sys.executable, "-m", "ascendpipe"]
    poly = args.polygraphy if os.path.exists(args.polygraphy) else None
    work = Path(args.work or tempfile.mkdtemp(prefix="bench-scale-model-"))
    work.mkdir(parents=True, exist_ok=True)
    started = time.perf_counter()
    print(f"{datetime.datetime.now(datetime.timezone.utc):%Y-%m-%d %H:%M} UTC, {os.cpu_count()} CPUs, "
          f"load average {os.getloadavg()[0]:.1f}; encoder hidden {HIDDEN}, {HEADS} heads, FFN {FFN}, batch {args.batch}")
    base = measure([sys.executable, "-c", BASELINE])["peak_rss_mb"]
    print(f"baseline (a process importing numpy, onnx, onnxruntime): {base:.0f} MB")
    head = (f"{'size':>7} {'act GB':>7} {'largest MB':>10} {'weights MB':>10} {'convert s':>9} {'compare s':>9} "
            f"{'peak MB':>8} {'-baseline':>9} {'bound MB':>8} {'bounded':>7}  polygraphy")
    print(head)
    rows = []
    try:
        for layers, seq in points:
            case = work / f"{layers}x{seq}"
            shutil.rmtree(case, ignore_errors=True)
            case.mkdir()
            if layers == "ffn":  # past 2 GB: weights in model.onnx.data, written one at a time
                from convert_external import HIDDEN as FFN_HIDDEN
                from convert_external import build as build_ffn_stack

                model = case / "model.onnx"
                build_ffn_stack(model, seq, args.batch)
                x = np.random.default_rng(0).standard_normal((args.batch, FFN_HIDDEN)).astype(np.float32)
            else:
                model = build_encoder(case / "model.onnx", layers, seq, args.batch)
                x = np.random.default_rng(0).standard_normal((args.batch, seq, HIDDEN)).astype(np.float32)
            facts = activation_facts(model)
            np.save(case / "x.npy", x)
            conv = measure([*ascendpipe, "convert", "--model", str(model), "--output", str(case / "conv"),
                            "--precision-mode", "force_fp16"])
            cmp_ = measure([*ascendpipe, "compare", "--golden", str(model), "--target", str(case / "conv"),
                            "--input", str(case / "x.npy"), "--output", str(case / "out")], ok_codes=(0, 1))
            bound = (facts["largest"] * 4 + facts["weights"] * 2) / 1e6
            peer = "-"
            if layers == "ffn":
                peer = "(see bench/convert_external.py)"
            elif poly and facts["activations"] <= args.polygraphy_max_gb * 1e9:
                (case / "poly").mkdir()
                save, load = run_polygraphy(poly, model, case / "conv" / "model.onnx", case / "poly")
                peer = f"{save['wall'] + load['wall']:.1f} s / {max(save['peak_rss_mb'], load['peak_rss_mb']):.0f} MB"
            elif poly:
                peer = f"skipped (> {args.polygraphy_max_gb:g} GB)"
            else:
                peer = "not installed (bench/setup_peers.sh)"
            rows.append({"size": f"{layers}x{seq}", **facts, "convert": conv["wall"], "compare": cmp_["wall"],
                         "peak": cmp_["peak_rss_mb"], "above": cmp_["peak_rss_mb"] - base, "bound": bound})
            print(f"{layers:>3}x{seq:<3} {facts['activations'] / 1e9:>7.2f} {facts['largest'] / 1e6:>10.1f} "
                  f"{facts['weights'] / 1e6:>10.1f} {conv['wall']:>9.1f} {cmp_['wall']:>9.1f} {cmp_['peak_rss_mb']:>8.0f} "
                  f"{cmp_['peak_rss_mb'] - base:>9.0f} {bound:>8.0f} {'yes' if cmp_['peak_rss_mb'] - base <= bound else 'NO':>7}  {peer}",
                  flush=True)
            shutil.rmtree(case, ignore_errors=True)
    finally:
        if not args.work:
            shutil.rmtree(work, ignore_errors=True)
    bounded = [r["size"] for r in rows if r["above"] <= r["bound"]]
    all_rows, rows = rows, [r for r in rows if not r["size"].startswith("ffn")]  # the fits: encoders only
    if len(rows) >= 2:
        slope, intercept, r2, worst = fit([r["activations"] / 1e9 for r in rows], [r["compare"] for r in rows])
        print(f"compare time ~ {intercept:.2f} s + {slope:.2f} s/GB x activations (least squares over {len(rows)} sizes): "
              f"R^2 {r2:.3f}, largest residual {worst:.0%}")
        mem_slope, mem_icpt, _, _ = fit([r["activations"] / 1e9 for r in rows], [r["peak"] for r in rows])
        print(f"peak memory ~ {mem_icpt:.0f} MB + {mem_slope:.0f} MB/GB x activations")
    print(f"peak - baseline <= largest activation x 4 + weights x 2: {len(bounded)} of {len(all_rows)} sizes"
          + (f" (not: {', '.join(r['size'] for r in all_rows if r['above'] > r['bound'])})"
             if len(bounded) < len(all_rows) else ""))
    print(f"whole run {time.perf_counter() - started:.0f} s, load average {os.getloadavg()[0]:.1f} at the end")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
