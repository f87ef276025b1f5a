"""Bench: ONNX's node tests through the standalone loop, convert + infer, in the five precision modes.

Run: python bench/onnx_node_tests.py [--sample N] [--match REGEX] [--modes force_fp16,...] [--json FILE]
     python bench/onnx_node_tests.py --per-family   (one test per op family: the CI sample)
     python bench/onnx_node_tests.py --modes force_lowerprecision,allow_mix_precision_bf16 --soc-version Ascend910B1
       (the bf16 modes, against the per-tensor bf16 reference)

Each test of ``onnx.backend.test.loader.load_model_tests(kind="node")`` (the wheel ships the models
and their data sets inline; nothing is downloaded) is written as model.onnx + inputs.npz, then run as
a user would: ``ascendpipe convert --model M --output C --precision-mode MODE`` and ``ascendpipe infer
--model C --input inputs.npz --output O`` (in-process through the CLI's own entry, so exit codes and
error lines are the user's). Each (test, mode) pair is:

- ok: outputs of the model's shapes and dtypes, values within the mode's fp16 error of the fp32 run
  (a node whose kernel computes step by step in fp16, precision_plan.json's ``kernel.emulated``, is
  judged as a test of several nodes: the device rounds its intermediates);
- refused: a one-line error (exit 2) -- where the device truly has no such thing (sequence inputs);
- crash: an internal error (exit 3, a traceback) or an exception;
- wrong: shapes or dtypes differ from onnxruntime's fp32 run of the original model, or values differ
  beyond the mode's expected fp16 error.

The mode's expected error: a float output passes when it equals the fp32 run within 1e-5 (the modes
that keep the op fp32), or the independent per-op fp16 reference (the feeds' floats rounded to
fp16, the original model run in fp32, its float outputs rounded to fp16: what a device computing
the op in fp16 gives) within one fp16 step (2^-10 relative, 2^-24 absolute), or -- for a test of
several nodes, whose intermediates are rounded too -- within 1% of the output's largest magnitude
with the same NaN/inf positions. Integer, bool and string outputs must be equal (integers of a
test of several nodes within one step: a quantised value computed from fp16 intermediates). Tests onnxruntime
cannot run in fp32 (types or ops it lacks) are skipped, not counted.

The bf16 modes (``BF16_MODES``) are judged the same way against a per-tensor bf16 reference (the feeds
rounded to bf16 by ``ml_dtypes``, written apart from the emulation's own rounding; the outputs
likewise) within one bf16 step (2^-7 relative), and a test of several nodes within 8% of the output's
largest magnitude (fp16's 1%, scaled by the 8x coarser step).
"""

from __future__ import annotations

import argparse
import contextlib
import io
import json
import os
import re
import sys
import tempfile
import time
import warnings
from collections import Counter, defaultdict
from pathlib import Path

import numpy as np

MODES = ("force_fp16", "allow_fp32_to_fp16", "allow_mix_precision", "must_keep_origin_dtype", "force_fp32")
BF16_MODES = ("force_lowerprecision", "allow_mix_precision_bf16", "allow_fp32_to_bf16")
# per reference: (relative step, absolute step, a multi-node test's share of the output's largest magnitude)
STEPS = {"float16": (2 ** -10, 2 ** -24, 0.01), "bfloat16": (2 ** -7, 2 ** -126, 0.08)}


def family(case) -> str:
    """The op family of a node test: its (first) node's domain and op type (Conv, ai.onnx.ml.Binarizer)."""
    node = case.model.graph.node[0] if case.model.graph.node else None
    if node is None:
        return "(no node)"
    return f"{node.domain}.{node.op_type}" if node.domain not in ("", "ai.onnx") else node.op_type


def per_family(cases) -> list:
    """The first test of each op family (expanded function bodies left out: their ops have tests of their own)."""
    seen, picked = set(), []
    for case in cases:
        if not case.name.endswith("_expanded") and family(case) not in seen:
            seen.add(family(case))
            picked.append(case)
    return picked


def load_cases(pattern: str | None = None):
    from onnx.backend.test.loader import load_model_tests

    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        cases = load_model_tests(kind="node")
    cases = [c for c in cases if c.model is not None and c.data_sets]
    if pattern:
        cases = [c for c in cases if re.search(pattern, c.name)]
    return sorted(cases, key=lambda c: c.name)


def feeds_of(case) -> dict:
    """Input name -> value, as the test's first data set gives them (graph inputs in order): a numpy
    scalar as a 0-d array, a TensorProto (types the data set keeps as protos) as its array."""
    from onnx import TensorProto, numpy_helper

    def value(v):
        if isinstance(v, np.generic):
            return np.asarray(v)
        if isinstance(v, TensorProto):
            return numpy_helper.to_array(v)
        return v

    inits = {i.name for i in case.model.graph.initializer}
    names = [i.name for i in case.model.graph.input if i.name not in inits]
    return {name: value(v) for name, v in zip(names, case.data_sets[0][0])}


def npz_feeds(feeds: dict) -> dict:
    """The feeds an .npz can hold: arrays (object strings as numpy unicode); sequences and optional
    values are left out (the model's input type decides; infer says what it does with them)."""
    out = {}
    for name, value in feeds.items():
        if isinstance(value, np.ndarray):
            out[name] = value.astype(str) if value.dtype == object else value
    return out


def ort_run(model_bytes: bytes, feeds: dict):
    import onnxruntime as ort

    options = ort.SessionOptions()
    options.log_severity_level = 4
    session = ort.InferenceSession(model_bytes, options, providers=["CPUExecutionProvider"])
    names = [o.name for o in session.get_outputs()]
    return names, session.run(names, feeds)


def fp16_reference(model_bytes: bytes, feeds: dict, fmt: str = "float16"):
    """The op computed by a device holding its float tensors in fp16 (or bf16): rounded feeds, rounded outputs."""
    if fmt == "bfloat16":
        import ml_dtypes

        low = ml_dtypes.bfloat16
    else:
        low = np.float16

    def rnd(v):
        if isinstance(v, np.ndarray) and v.dtype == np.float32:
            with np.errstate(over="ignore", under="ignore", invalid="ignore"):
                return v.astype(low).astype(np.float32)
        return v

    names, values = ort_run(model_bytes, {k: rnd(v) for k, v in feeds.items()})
    return [rnd(v) for v in values]


def _close(got: np.ndarray, ref: np.ndarray, rtol: float, atol: float) -> bool:
    if got.shape != ref.shape:
        return False
    g, r = got.astype(np.float64), ref.astype(np.float64)
    if not np.array_equal(np.isnan(g), np.isnan(r)):
        return False
    fin = np.isfinite(r)
    if not np.array_equal(g[~fin & ~np.isnan(r)], r[~fin & ~np.isnan(r)]):
        return False
    both = fin & np.isfinite(g)
    if not np.array_equal(both, fin):
        return False
    return bool(np.all(np.abs(g[both] - r[both]) <= atol + rtol * np.abs(r[both])))


def judge(got: np.ndarray, fp32: np.ndarray, fp16: np.ndarray | None, nodes: int, fmt: str = "float16") -> str | None:
    """None when ``got`` is within the mode's expected error, else why not (``fp16``: the per-tensor
    reference in ``fmt``)."""
    rel, absolute, share = STEPS[fmt]
    if not isinstance(fp32, np.ndarray):
        return None  # a sequence/optional output: onnxruntime's own, not read back from a file
    if got.shape != fp32.shape:
        return f"shape {list(got.shape)} != {list(fp32.shape)}"
    if got.dtype.kind in "fc" and fp32.dtype.kind in "fc":
        if got.dtype != fp32.dtype:
            return f"dtype {got.dtype} != {fp32.dtype}"
        if _close(got, fp32, 1e-5, 1e-6):
            return None
        if fp16 is not None and _close(got, fp16, rel, absolute):
            return None
        if nodes > 1:
            finite = np.abs(fp32[np.isfinite(fp32)]).astype(np.float64)
            scale = float(finite.max()) if finite.size else 1.0
            if _close(got, fp32, 0.0, share * max(scale, 1e-6)):
                return None
            # the same share of the per-tensor reference: the inputs' own rounding (10001 -> 10000 in fp16)
            # moves the output as much on the device, before any intermediate is rounded
            if fp16 is not None and _close(got, fp16, 0.0, share * max(scale, 1e-6)):
                return None
        diff = np.abs(got.astype(np.float64) - fp32.astype(np.float64))
        return f"values differ (max abs {np.nanmax(diff) if diff.size else 0:.3g})"
    if got.dtype.kind in "US" or fp32.dtype.kind in "OUS":
        return None if np.array_equal(got.astype(str), fp32.astype(str)) else "strings differ"
    if got.dtype != fp32.dtype:
        return f"dtype {got.dtype} != {fp32.dtype}"
    if np.array_equal(got, fp32):
        return None
    if nodes > 1 and got.dtype.kind in "iu":  # integers from fp16 intermediates (a quantised scale): one step
        diff = np.abs(got.astype(np.int64) - fp32.astype(np.int64))
        if diff.max() <= 1:
            return None
    return "values differ"


def cli(argv: list[str]) -> tuple[int, str]:
    from ascendpipe.cli.main import main

    err, out = io.StringIO(), io.StringIO()
    with contextlib.redirect_stderr(err), contextlib.redirect_stdout(out):
        try:
            code = main(argv)
        except SystemExit as exc:  # argparse
            code = exc.code if isinstance(exc.code, int) else 2
        except BaseException as exc:  # noqa: BLE001 - the bench counts it as a crash
            return 3, f"{type(exc).__name__}: {exc}"
    return code, err.getvalue().strip().splitlines()[-1] if err.getvalue().strip() else ""


def run_case(case, modes, work: Path, soc_version: str | None = None) -> dict:
    """{mode: (verdict, detail)} for one test, or {'skip': reason}. ``soc_version``: passed to convert
    (the bf16 modes need a SoC that has bf16, or none)."""
    import onnx

    model_bytes = case.model.SerializeToString()
    feeds = feeds_of(case)
    try:
        names, fp32 = ort_run(model_bytes, feeds)
    except Exception as exc:  # noqa: BLE001 - onnxruntime cannot run the test itself
        return {"skip": f"onnxruntime fp32: {str(exc).splitlines()[0][:120]}"}
    references = {}
    for fmt in {"bfloat16" if m in BF16_MODES else "float16" for m in modes}:
        try:
            references[fmt] = fp16_reference(model_bytes, feeds, fmt)
        except Exception:  # noqa: BLE001 - rounded inputs out of the op's domain
            references[fmt] = None
    nodes = len(case.model.graph.node)
    folder = work / case.name
    folder.mkdir(parents=True, exist_ok=True)
    model_path = folder / "model.onnx"
    onnx.save(case.model, str(model_path))
    arrays = npz_feeds(feeds)
    inputs_path = folder / "inputs.npz"
    np.savez(inputs_path, **arrays)
    result = {}
    for mode in modes:
        conv, out = folder / f"conv_{mode}", folder / f"infer_{mode}"
        fmt = "bfloat16" if mode in BF16_MODES else "float16"
        fp16 = references[fmt]
        soc = ["--soc-version", soc_version] if soc_version else []
        # ai.onnx.ml node tests: ATC converts ai.onnx only (convert refuses the rest); emulated anyway here
        code, line = cli(["convert", "--model", str(model_path), "--output", str(conv), "--precision-mode", mode, *soc,
                          "--allow-custom-ops"])
        if code == 0:
            argv = ["infer", "--model", str(conv), "--output", str(out), "--warmup", "0"]
            code, line = cli(argv + (["--input", str(inputs_path)] if feeds else []))
        if code == 2:
            result[mode] = ("refused", line)
            continue
        if code != 0:
            result[mode] = ("crash", line)
            continue
        summary = json.loads((out / "summary.json").read_text())
        # an op whose kernel takes several fp16 steps inside (precision/kernels.py) is judged as a test of
        # several nodes: its intermediates are rounded as theirs are
        plan = json.loads((conv / "precision_plan.json").read_text())
        stepped = any((entry.get("kernel") or {}).get("emulated") == "step by step" for entry in plan["nodes"].values())
        steps = max(nodes, 2) if stepped else nodes
        why = None
        for index, name in enumerate(names):
            entry = summary["outputs"].get(name)
            if entry is None:
                why = f"output {name} missing"
                break
            got = np.load(out / entry["file"], allow_pickle=False)
            why = judge(got, fp32[index], fp16[index] if fp16 is not None else None, steps, fmt)
            if why:
                why = f"{name}: {why}"
                break
        result[mode] = ("wrong", why) if why else ("ok", "")
    return result


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--sample", type=int, help="every Nth test only")
    parser.add_argument("--per-family", action="store_true", help="the first test of each op family")
    parser.add_argument("--match", help="tests whose name matches this regex")
    parser.add_argument("--modes", default=",".join(MODES))
    parser.add_argument("--json", type=Path, help="write every (test, mode) verdict here")
    parser.add_argument("--show", type=int, default=8, help="examples shown per non-ok verdict")
    parser.add_argument("--soc-version", help="passed to convert (e.g. Ascend910B1 for the bf16 modes)")
    args = parser.parse_args(argv)
    os.environ.setdefault("ORT_DISABLE_TELEMETRY", "1")
    import onnxruntime

    onnxruntime.set_default_logger_severity(3)  # the node tests' models make onnxruntime warn a lot
    modes = [m for m in args.modes.split(",") if m]
    cases = load_cases(args.match)
    if args.per_family:
        cases = per_family(cases)
    if args.sample:
        cases = cases[::args.sample]
    tally: dict[str, Counter] = defaultdict(Counter)
    examples: dict[str, list] = defaultdict(list)
    verdicts, skipped = {}, {}
    started = time.perf_counter()
    with tempfile.TemporaryDirectory(prefix="ascendpipe-node-tests-") as tmp:
        for case in cases:
            result = run_case(case, modes, Path(tmp), args.soc_version)
            if "skip" in result:
                skipped[case.name] = result["skip"]
                continue
            verdicts[case.name] = result
            for mode, (verdict, detail) in result.items():
                tally[mode][verdict] += 1
                if verdict != "ok" and len(examples[verdict]) < args.show:
                    examples[verdict].append(f"{case.name} [{mode}]: {detail}")
    elapsed = time.perf_counter() - started
    kinds = ("ok", "refused", "crash", "wrong")
    print(f"{len(verdicts)} node tests x {len(modes)} modes ({len(skipped)} skipped: onnxruntime cannot run them "
          f"in fp32), {elapsed:.0f} s")
    print(f"{'mode':<24}" + "".join(f"{k:>9}" for k in kinds))
    total = Counter()
    for mode in modes:
        total.update(tally[mode])
        print(f"{mode:<24}" + "".join(f"{tally[mode][k]:>9}" for k in kinds))
    pairs = sum(total.values())
    print(f"{'all':<24}" + "".join(f"{total[k]:>9}" for k in kinds)
          + (f"   ok {100 * total['ok'] / pairs:.1f}% of {pairs} pairs" if pairs else ""))
    for kind in ("refused", "crash", "wrong"):
        for line in examples[kind]:
            print(f"  {kind}: {line}")
    if args.json:
        args.json.write_text(json.dumps({"verdicts": verdicts, "skipped": skipped}, indent=1))
    return 0 if not total["crash"] and not total["wrong"] else 1


if __name__ == "__main__":
    sys.exit(main())
