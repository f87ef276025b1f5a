"""Benchmark: ascendpipe's remedy search vs onnxconverter-common and a Polygraphy-style bisection.

    python bench/fix_vs_peers.py [--peer-python /tmp/peers-fix/bin/python] [--json OUT.json]

Models with known fp16 failures of several kinds (overflow and underflow, in sums, products and
exponentials, a fused BatchNorm) and a ResNet-style ReID net ending in an L2 norm. For each:

- ascendpipe: ``fix_standalone`` (compare-guided growth, ddmin shrink) on the faithful emulation;
- one-by-one: keep ops 1, 2, ... in graph order until it passes (the yardstick to beat);
- prefix bisection (Polygraphy ``debug precision`` style): bisect N, keeping the first N ops in fp32;
- onnxconverter-common ``auto_convert_mixed_precision``, run in its own venv on the plain CPU run as
  users do (validated by cosine >= 0.99); its ``node_block_list`` is then judged here.

Every answer is judged on the faithful emulation (convert with keep_dtype = the answer, run, cosine
of every output >= 0.99), never on the plain CPU run, which hides fp16 overflow (docs/emulation.md).
Peer setup: ``python -m venv /tmp/peers-fix && /tmp/peers-fix/bin/pip install onnxconverter-common
onnx onnxruntime numpy``.
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from tests import modelzoo  # noqa: E402
from tests import modelzoo as fixmodels  # noqa: E402
from tests.modelzoo import _const, _save  # noqa: E402

MIN_COSINE = 0.99


# --- extra models ------------------------------------------------------------------------------

def _graph(name, nodes, inputs, outputs, inits=()):
    from onnx import TensorProto, helper

    return helper.make_graph(nodes, name, [helper.make_tensor_value_info(n, TensorProto.FLOAT, s) for n, s in inputs],
                             [helper.make_tensor_value_info(n, TensorProto.FLOAT, s) for n, s in outputs],
                             initializer=list(inits))


def exp_softmax_model(path):
    """softmax without the max subtraction: exp(x) for x in [10, 12] exceeds 65504 (exponential overflow)."""
    from onnx import helper

    nodes = [helper.make_node("Exp", ["x"], ["e"], name="exp"),
             helper.make_node("ReduceSum", ["e", "axes"], ["s"], name="sum", keepdims=1),
             helper.make_node("Div", ["e", "s"], ["y"], name="div")]
    return _save(_graph("exp_softmax", nodes, [("x", [2, 16])], [("y", [2, 16])],
                        [_const("axes", np.array([1], np.int64))]), path)


def exp_softmax_inputs(seed=0):
    return {"x": np.random.default_rng(seed).uniform(10, 12, (2, 16)).astype(np.float32)}


def product_underflow_model(path):
    """(a * b) * 1e4 with a, b ~ 1e-4: the product (~1e-8) is below fp16's smallest subnormal."""
    from onnx import helper

    nodes = [helper.make_node("Mul", ["a", "b"], ["ab"], name="product"),
             helper.make_node("Mul", ["ab", "scale"], ["y"], name="rescale")]
    return _save(_graph("product_underflow", nodes, [("a", [1, 32]), ("b", [1, 32])], [("y", [1, 32])],
                        [_const("scale", np.float32(1e4))]), path)


def product_underflow_inputs(seed=0):
    rng = np.random.default_rng(seed)
    return {k: rng.uniform(0.5e-4, 1.5e-4, (1, 32)).astype(np.float32) for k in ("a", "b")}


def sum_underflow_model(path):
    """sum of 1024 values ~1e-8 (each 0 in fp16), then * 100: the inputs underflow where they are read."""
    from onnx import helper

    nodes = [helper.make_node("ReduceSum", ["x", "axes"], ["s"], name="sum", keepdims=1),
             helper.make_node("Mul", ["s", "scale"], ["y"], name="scale_up")]
    return _save(_graph("sum_underflow", nodes, [("x", [4, 1024])], [("y", [4, 1])],
                        [_const("axes", np.array([1], np.int64)), _const("scale", np.float32(100.0))]), path)


def sum_underflow_inputs(seed=0):
    return {"x": np.random.default_rng(seed).uniform(0.5e-8, 1.5e-8, (4, 1024)).astype(np.float32)}


def resnet_reid_model(path, width=8, features=64):
    """A ResNet-style ReID net: stem conv-bn-relu, two residual blocks, pooling, an fc to 64 features
    of magnitude ~60 and the L2 norm (whose sum of squares, ~2e5, overflows fp16)."""
    from onnx import helper

    rng = np.random.default_rng(7)
    f32 = np.float32
    inits, nodes = [], []

    def conv_bn(name, x, cin, cout, relu=True):
        inits.extend([_const(f"{name}.w", (rng.standard_normal((cout, cin, 3, 3)) * (2.0 / (9 * cin)) ** 0.5).astype(f32)),
                      _const(f"{name}.g", rng.uniform(0.8, 1.2, cout).astype(f32)),
                      _const(f"{name}.b", (rng.standard_normal(cout) * 0.1).astype(f32)),
                      _const(f"{name}.m", (rng.standard_normal(cout) * 0.1).astype(f32)),
                      _const(f"{name}.v", rng.uniform(0.8, 1.2, cout).astype(f32))])
        nodes.append(helper.make_node("Conv", [x, f"{name}.w"], [f"{name}_c"], name=f"{name}_conv", pads=[1, 1, 1, 1]))
        nodes.append(helper.make_node("BatchNormalization", [f"{name}_c", f"{name}.g", f"{name}.b", f"{name}.m", f"{name}.v"],
                                      [f"{name}_bn"], name=f"{name}_bn"))
        if not relu:
            return f"{name}_bn"
        nodes.append(helper.make_node("Relu", [f"{name}_bn"], [f"{name}_r"], name=f"{name}_relu"))
        return f"{name}_r"

    x = conv_bn("stem", "image", 3, width)
    for block in ("block1", "block2"):
        y = conv_bn(f"{block}a", x, width, width)
        y = conv_bn(f"{block}b", y, width, width, relu=False)
        nodes.append(helper.make_node("Add", [x, y], [f"{block}_sum"], name=f"{block}_add"))
        nodes.append(helper.make_node("Relu", [f"{block}_sum"], [f"{block}_out"], name=f"{block}_relu"))
        x = f"{block}_out"
    inits += [_const("fc.w", (rng.standard_normal((features, width)) * 60.0).astype(f32)),
              _const("fc.b", np.zeros(features, f32)), _const("axes", np.array([1], np.int64))]
    nodes += [helper.make_node("GlobalAveragePool", [x], ["pooled"], name="pool"),
              helper.make_node("Flatten", ["pooled"], ["flat"], name="flatten", axis=1),
              helper.make_node("Gemm", ["flat", "fc.w", "fc.b"], ["feat"], name="fc", transB=1),
              helper.make_node("Mul", ["feat", "feat"], ["sq"], name="square"),
              helper.make_node("ReduceSum", ["sq", "axes"], ["ss"], name="sumsq", keepdims=1),
              helper.make_node("Sqrt", ["ss"], ["norm"], name="sqrt"),
              helper.make_node("Div", ["feat", "norm"], ["embedding"], name="normalize")]
    return _save(_graph("resnet_reid", nodes, [("image", [4, 3, 32, 16])], [("embedding", [4, features])], inits), path)


def resnet_reid_inputs(seed=0):
    return {"image": np.random.default_rng(seed).standard_normal((4, 3, 32, 16)).astype(np.float32)}


MODELS = {
    "l2norm (sum-of-squares overflow)": (modelzoo.l2norm_model, modelzoo.l2norm_inputs),
    "addn (sum overflow)": (modelzoo.addn_model, modelzoo.addn_inputs),
    "epsilon (underflow)": (modelzoo.epsilon_model, modelzoo.epsilon_inputs),
    "exp softmax (exp overflow)": (exp_softmax_model, exp_softmax_inputs),
    "product underflow": (product_underflow_model, product_underflow_inputs),
    "sum underflow": (sum_underflow_model, sum_underflow_inputs),
    "folded BN (fused weights overflow)": (fixmodels.folded_bn_model, fixmodels.folded_bn_inputs),
    "ResNet-style ReID + L2 norm": (resnet_reid_model, resnet_reid_inputs),
}


# --- judging on the faithful emulation --------------------------------------------------------------

def _cosine(a, b) -> float:
    a = np.asarray(a, np.float64).ravel()
    b = np.asarray(b, np.float64).ravel()
    if not np.isfinite(a).all():
        return 0.0
    na, nb = np.linalg.norm(a), np.linalg.norm(b)
    if na == 0 and nb == 0:
        return 1.0
    return float(a @ b / (na * nb)) if na and nb else 0.0


class Judge:
    """Cosine of the emulated fp16 model (keep_dtype = the answer) against the fp32 outputs."""

    def __init__(self, model: Path, feeds: dict, work: Path):
        import onnxruntime as ort

        self.model, self.feeds, self.work = model, feeds, work
        self.golden = ort.InferenceSession(str(model), providers=["CPUExecutionProvider"]).run(None, feeds)
        self.count = 0

    def cosine(self, keep, fusion=None) -> float:
        import onnxruntime as ort

        from ascendpipe.backends.onnxruntime.convert import convert_model
        from ascendpipe.precision.settings import resolve

        self.count += 1
        out = self.work / f"judge-{self.count}"
        converted = convert_model(self.model, out, resolve({"precision_mode": "force_fp16", "keep_dtype": list(keep),
                                                            "fusion_switch": dict(fusion or {})}))
        outputs = ort.InferenceSession(str(converted.model_path), providers=["CPUExecutionProvider"]).run(None, self.feeds)
        return min(_cosine(t, g) for t, g in zip(outputs, self.golden))

    def passes(self, keep, fusion=None) -> bool:
        """An answer with its fusion switches (ascendpipe's; the peers' answers have none)."""
        return self.cosine(keep, fusion) >= MIN_COSINE


def graph_ops(model: Path) -> list[str]:
    import onnx

    return [n.name for n in onnx.load(str(model)).graph.node]


# --- the tools -----------------------------------------------------------------------------------

def run_ascendpipe(model, feeds_path):
    from ascendpipe.fix.run import fix_standalone

    start = time.perf_counter()
    report = fix_standalone(model, input_path=feeds_path, min_cosine=MIN_COSINE, max_attempts=60)
    return {"keep": report.keep_dtype, "fusion": report.fusion_switch, "evaluations": len(report.outcome.attempts),
            "wall_s": time.perf_counter() - start, "error": None if report.outcome.passed else report.outcome.message}


def run_one_by_one(model, judge):
    ops = graph_ops(model)
    start, evaluations = time.perf_counter(), 0
    for n in range(len(ops) + 1):
        evaluations += 1
        if judge.passes(ops[:n]):
            return {"keep": ops[:n], "evaluations": evaluations, "wall_s": time.perf_counter() - start, "error": None}
    return {"keep": ops, "evaluations": evaluations, "wall_s": time.perf_counter() - start, "error": "never passes"}


def run_prefix_bisection(model, judge):
    """Smallest N with the first N ops in fp32 passing, by bisection (assumes monotone in N)."""
    ops = graph_ops(model)
    start, evaluations = time.perf_counter(), 0
    lo, hi = 0, len(ops)  # invariant: prefix hi passes (checked), prefix lo-1 fails
    evaluations += 1
    if not judge.passes(ops):
        return {"keep": ops, "evaluations": evaluations, "wall_s": time.perf_counter() - start, "error": "all-fp32 fails"}
    while lo < hi:
        mid = (lo + hi) // 2
        evaluations += 1
        if judge.passes(ops[:mid]):
            hi = mid
        else:
            lo = mid + 1
    return {"keep": ops[:hi], "evaluations": evaluations, "wall_s": time.perf_counter() - start, "error": None}


PEER_SCRIPT = r"""
import json, sys, time, contextlib, io
import numpy as np, onnx
from onnxconverter_common import auto_mixed_precision as amp
model_path, feeds_path = sys.argv[1:3]
feeds = dict(np.load(feeds_path))
calls, lists = [0], []
original = amp.float16.convert_float_to_float16
def recording(model, *a, **k):
    lists.append(list(k.get("node_block_list") or []))
    return original(model, *a, **k)
amp.float16.convert_float_to_float16 = recording
def cosine_ok(res1, res2):
    calls[0] += 1
    for r1, r2 in zip(res1, res2):
        a, b = np.asarray(r1, np.float64).ravel(), np.asarray(r2, np.float64).ravel()
        if not np.isfinite(b).all():
            return False
        na, nb = np.linalg.norm(a), np.linalg.norm(b)
        if not (na == 0 and nb == 0) and (na == 0 or nb == 0 or a @ b / (na * nb) < 0.99):
            return False
    return True
start, error = time.perf_counter(), None
try:
    with contextlib.redirect_stdout(io.StringIO()):
        amp.auto_convert_mixed_precision(onnx.load(model_path), feeds, validate_fn=cosine_ok, keep_io_types=True)
except Exception as exc:
    error = f"{type(exc).__name__}: {exc}"
print(json.dumps({"keep": lists[-1] if lists else [], "evaluations": max(calls[0] - 1, 0),
                  "wall_s": time.perf_counter() - start, "error": error}))
"""


def run_onnxconverter(peer_python, model, feeds_path):
    if not Path(peer_python).exists():
        return {"keep": None, "evaluations": 0, "wall_s": 0.0, "error": f"peer venv missing: {peer_python}"}
    proc = subprocess.run([peer_python, "-c", PEER_SCRIPT, str(model), str(feeds_path)], capture_output=True, text=True,
                          timeout=600)
    if proc.returncode != 0:
        return {"keep": None, "evaluations": 0, "wall_s": 0.0, "error": proc.stderr.strip().splitlines()[-1]}
    return json.loads(proc.stdout.strip().splitlines()[-1])


# --- the run ------------------------------------------------------------------------------------

def bench(peer_python: str) -> list[dict]:
    results = []
    with tempfile.TemporaryDirectory(prefix="ascendpipe-bench-fix-") as scratch:
        for i, (name, (build, inputs)) in enumerate(MODELS.items()):
            work = Path(scratch) / f"m{i}"
            work.mkdir()
            model = build(work / "model.onnx")
            feeds = inputs(0)
            feeds_path = work / "feeds.npz"
            np.savez(feeds_path, **feeds)
            judge = Judge(model, feeds, work)
            tools = {"ascendpipe": run_ascendpipe(model, feeds_path),
                     "one-by-one": run_one_by_one(model, judge),
                     "prefix-bisect": run_prefix_bisection(model, judge),
                     "onnxconverter-common": run_onnxconverter(peer_python, model, feeds_path)}
            for tool in tools.values():
                tool["restores"] = tool["keep"] is not None and judge.passes(tool["keep"], tool.get("fusion"))
                tool["fp32_ops"] = None if tool["keep"] is None else len(tool["keep"])
            results.append({"model": name, "ops": len(graph_ops(model)), "tools": tools})
    return results


def print_table(results: list[dict]) -> None:
    header = f"{'model':36} {'ops':>3}  {'tool':20} {'restores':8} {'evals':>5} {'wall s':>7} {'fp32 ops':>8}  answer"
    print(header)
    print("-" * len(header))
    for r in results:
        for tool, t in r["tools"].items():
            answer = "error: " + t["error"] if t.get("error") else ", ".join(
                (t["keep"] or []) + [f"{rule}:off" for rule in t.get("fusion") or {}]) or "(none)"
            print(f"{r['model'][:36]:36} {r['ops']:>3}  {tool:20} {'yes' if t['restores'] else 'NO':8} {t['evaluations']:>5} "
                  f"{t['wall_s']:>7.2f} {str(t['fp32_ops']):>8}  {answer[:60]}")
    ours = [r["tools"]["ascendpipe"] for r in results]
    print()
    print(f"ascendpipe restores {sum(t['restores'] for t in ours)}/{len(ours)} models")
    no_larger = all(r["tools"]["ascendpipe"]["fp32_ops"] <= t["fp32_ops"] for r in results
                    for name, t in r["tools"].items() if name != "ascendpipe" and t["restores"])
    print(f"ascendpipe's kept sets no larger than any working peer answer: {'yes' if no_larger else 'NO'}")
    fewer = sum(r["tools"]["ascendpipe"]["evaluations"] < r["tools"]["one-by-one"]["evaluations"] for r in results)
    print(f"fewer evaluations than one-by-one in graph order: {fewer}/{len(results)} models")


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--peer-python", default="/tmp/peers-fix/bin/python")
    parser.add_argument("--json", type=Path, help="also write the results here")
    args = parser.parse_args()
    results = bench(args.peer_python)
    print_table(results)
    if args.json:
        args.json.write_text(json.dumps(results, indent=2))
    return 0


if __name__ == "__main__":
    sys.exit(main())
