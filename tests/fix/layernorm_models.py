"""A LayerNorm model whose fp16 kernel breaks on Ascend310 and not where the kernel is fp32 inside.

``layer_norm``: one ONNX ``LayerNormalization`` (opset 17, GE type LayerNorm) over 512 features whose
inputs spread to about +-1200 (std 300). Ascend310's high_performance LayerNorm computes every step in
fp16 (canndev ``layer_norm.py`` L614-623: the fp32 cast needs fp32 vexp), so (x - mean)^2 (about 9e4)
is past 65504 and the output is NaN; under high_precision (L614-623, L668-678) it computes in fp32 inside
and the output matches; on 310P/910/910B the kernel is fp32 inside in both modes. ``scale``: a Mul by it
after the LayerNorm (``scale_up``); with 1e5 its golden output lies beyond 65504 on every SoC (keep_dtype's
case: no impl mode changes the data at a kernel's boundary)."""

from __future__ import annotations

from pathlib import Path

import numpy as np

WIDTH = 512
SPREAD = 300.0


def layer_norm(path: Path, scale: float | None = None) -> Path:
    import onnx
    from onnx import TensorProto, helper, numpy_helper

    x = helper.make_tensor_value_info("x", TensorProto.FLOAT, [4, WIDTH])
    y = helper.make_tensor_value_info("y", TensorProto.FLOAT, [4, WIDTH])
    inits = [numpy_helper.from_array(np.ones(WIDTH, np.float32), "gamma"),
             numpy_helper.from_array(np.zeros(WIDTH, np.float32), "beta")]
    nodes = [helper.make_node("LayerNormalization", ["x", "gamma", "beta"], ["normed" if scale else "y"], name="ln",
                              axis=-1, epsilon=1e-5)]
    if scale:
        inits.append(numpy_helper.from_array(np.array(scale, np.float32), "scale"))
        nodes.append(helper.make_node("Mul", ["normed", "scale"], ["y"], name="scale_up"))
    model = helper.make_model(helper.make_graph(nodes, "ln", [x], [y], inits),
                              opset_imports=[helper.make_opsetid("", 17)])
    model.ir_version = 8
    onnx.save(model, path)
    return Path(path)


def inputs(seed: int = 0) -> dict[str, np.ndarray]:
    return {"x": (np.random.default_rng(seed).standard_normal((4, WIDTH)) * SPREAD).astype(np.float32)}


def emulated_cosine(model: Path, feeds: dict, out: Path, *, soc_version: str, op_precision_mode: Path | None = None,
                    keep=()) -> float:
    """A plain convert (the emulation) with these settings, run on onnxruntime, against the fp32 model:
    numpy's cosine of the outputs (0 where the target holds inf/NaN)."""
    from tests.fix.emulated import cosine

    params = {"precision_mode": "force_fp16", "soc_version": soc_version, "keep_dtype": list(keep)}
    if op_precision_mode is not None:
        params["op_precision_mode"] = str(op_precision_mode)
    return cosine(model, feeds, out, params)


def compare_converted(model: Path, feeds: dict, out: Path, soc_version: str, extra: dict | None = None):
    """A plain convert (force_fp16 on ``soc_version``, ``extra`` params) and compare against the fp32 model:
    (compare's result, the precision plan, convert.json)."""
    import json

    from ascendpipe.backends.compare_sources import dump
    from ascendpipe.backends.onnxruntime.convert import convert_model
    from ascendpipe.compare.runner import compare_dumps, graph_info
    from ascendpipe.precision.settings import resolve

    converted = convert_model(model, out / "model", resolve({"precision_mode": "force_fp16", "soc_version": soc_version,
                                                               **(extra or {})}))
    read = lambda name: json.loads((out / "model" / name).read_text())
    golden = dump(model, feeds, out / "golden", fusions=False)
    target = dump(converted.model_path, feeds, out / "target", fusions=True)
    result = compare_dumps(golden, target, precision_plan=read("precision_plan.json"), fused_map=read("fused_map.json"),
                           graph=graph_info(model), target_settings=read("convert.json"))
    return result, read("precision_plan.json"), read("convert.json")
