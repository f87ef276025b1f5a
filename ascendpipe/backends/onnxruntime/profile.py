"""Profile a model with onnxruntime's profiler: run it, then parse the trace into op rows.

``parse_ort_profile`` is pure (events in, rows out). ``open_session``, ``time_runs`` and
``profile_model`` do the running.
"""

from __future__ import annotations

import dataclasses
import json
import os
import re
import tempfile
import time
from pathlib import Path
from typing import Any, Sequence

from ascendpipe.profiling.oprows import Iteration, OpRow, ProfileData, TensorDesc

KERNEL_SUFFIX = "_kernel_time"
EMULATION_PREFIX = "ascendpipe_emu/"  # nodes the fp16 emulation inserts (see docs/contracts.md)
# names onnxruntime gives the nodes its transformers rewrite: '<output tensor>_nchwc', '<name>_token_3'
_ORT_RENAME = re.compile(r"(_nchwc|_token_\d+)+$")
# session settings a knowledge bank / runtime.json may carry, with onnxruntime's defaults
DEFAULT_SETTINGS: dict[str, Any] = {
    "graph_optimization_level": "ORT_ENABLE_ALL",
    "intra_op_num_threads": 0,  # 0: onnxruntime picks (one per physical core)
    "execution_mode": "ORT_SEQUENTIAL",
    "disabled_optimizers": [],
}


# ----------------------------------------------------------------------------- parsing (pure)

def _descs(type_shapes: Any) -> tuple[TensorDesc, ...]:
    out = []
    for entry in type_shapes or ():
        if isinstance(entry, dict):
            for dtype, shape in entry.items():
                out.append(TensorDesc(str(dtype).upper(), tuple(int(d) for d in shape or ())))
    return tuple(out)


def parse_ort_profile(events: Sequence[dict], *, warmup: int = 0, model_name: str = "model") -> ProfileData:
    """Op rows, one per kernel execution per iteration, skipping the first ``warmup`` runs.

    Times are microseconds from the first kept iteration. A kernel belongs to the ``model_run``
    span that contains its start.
    """
    runs = sorted((e for e in events if e.get("cat") == "Session" and e.get("name") == "model_run"),
                  key=lambda e: e["ts"])
    kernels = sorted((e for e in events if e.get("cat") == "Node"
                      and str(e.get("name", "")).endswith(KERNEL_SUFFIX)), key=lambda e: e["ts"])
    kept = runs[warmup:]
    data = ProfileData(model_name=model_name)
    if not kept:
        return data
    origin = float(kept[0]["ts"])
    for index, run in enumerate(kept):
        data.iterations.append(Iteration(index, float(run["ts"]) - origin, float(run["dur"])))
    k = 0
    for index, run in enumerate(kept):
        begin, end = float(run["ts"]), float(run["ts"]) + float(run["dur"])
        while k < len(kernels) and kernels[k]["ts"] < begin:
            k += 1  # kernels of warm-up runs
        previous_end, position = begin, 0
        while k < len(kernels) and kernels[k]["ts"] <= end:
            event, args = kernels[k], kernels[k].get("args", {})
            start, dur = float(event["ts"]), float(event.get("dur", 0))
            data.ops.append(OpRow(
                iteration=index, index=position, op_name=event["name"][: -len(KERNEL_SUFFIX)],
                op_type=str(args.get("op_name", "")), start_us=start - origin, duration_us=dur,
                wait_us=max(0.0, start - previous_end), inputs=_descs(args.get("input_type_shape")),
                outputs=_descs(args.get("output_type_shape")), provider=str(args.get("provider", ""))))
            previous_end = max(previous_end, start + dur)
            position += 1
            k += 1
    return data


def _base_type(op_type: str) -> str:
    return op_type[len("Fused"):] if op_type.startswith("Fused") else op_type


def _model_node_for(tensor: str, op_type: str, producers: dict[str, tuple]) -> str | None:
    """The node producing ``tensor``; when onnxruntime fused a chain (Conv+Relu), walk up the first
    inputs to the node whose type matches the kernel's (the conv, not the relu)."""
    first = producers.get(tensor)
    node, steps = first, 0
    while node is not None and steps < 4:
        name, node_type, inputs = node
        if _base_type(node_type) == _base_type(op_type):
            return name
        node, steps = (producers.get(inputs[0]) if inputs else None), steps + 1
    return first[0] if first else None


def attribute_to_model(data: ProfileData, node_names: set[str],
                       producers: dict[str, tuple]) -> tuple[ProfileData, float]:
    """Kernel rows named after the model's nodes, without the emulation's rounding casts.

    onnxruntime renames nodes it rewrites after their output tensor (``<tensor>_nchwc``): such a
    kernel gets the name of the model node producing that tensor (``producers``: tensor ->
    (node name, op type, input tensors)). Casts the fp16 emulation inserted (``ascendpipe_emu/...``)
    do not run on the device: they are left out, and their total time (us, over all kept iterations)
    is returned as the overhead.
    """
    kept, overhead, position = [], 0.0, {}
    for op in data.ops:
        if op.op_name.startswith(EMULATION_PREFIX) and op.op_type == "Cast":
            overhead += op.duration_us
            continue
        name = op.op_name
        if name not in node_names:
            name = _model_node_for(_ORT_RENAME.sub("", name), op.op_type, producers) or name
        index = position.get(op.iteration, 0)
        position[op.iteration] = index + 1
        kept.append(dataclasses.replace(op, op_name=name, index=index))
    return ProfileData(data.model_name, list(data.iterations), kept), overhead


def model_node_index(model_path: Path) -> tuple[set[str], dict[str, tuple]]:
    """The model's node names and, per output tensor, (producing node, its op type, its inputs)."""
    import onnx

    graph = onnx.load(str(model_path), load_external_data=False).graph
    producers = {out: (node.name, node.op_type, tuple(node.input))
                 for node in graph.node for out in node.output if node.name}
    return {node.name for node in graph.node if node.name}, producers


# ----------------------------------------------------------------------------- running

def resolve_settings(settings: dict | None) -> dict[str, Any]:
    merged = dict(DEFAULT_SETTINGS)
    merged.update(settings or {})
    return merged


def open_session(model_path: Path, settings: dict | None = None, *, profile_prefix: str | None = None):
    """A CPU session with the given bank/runtime settings (see ``DEFAULT_SETTINGS``), made by the
    shared ``make_session`` so profile and tune time the sessions infer would run."""
    from ascendpipe.backends.onnxruntime.session import make_session

    return make_session(Path(model_path), runtime=resolve_settings(settings), profile_prefix=profile_prefix)


def time_runs(session, batches: Sequence[dict], *, warmup: int, iterations: int) -> list[float]:
    """Per-iteration wall-clock latency in ms, after ``warmup`` untimed runs; batches cycle."""
    for i in range(warmup):
        session.run(None, batches[i % len(batches)])
    samples = []
    for i in range(iterations):
        feeds = batches[i % len(batches)]
        start = time.perf_counter()
        session.run(None, feeds)
        samples.append(1000.0 * (time.perf_counter() - start))
    return samples


def profile_model(model_path: Path, batches: Sequence[dict], *, warmup: int, iterations: int,
                  settings: dict | None = None) -> ProfileData:
    """Run with the profiler on and return the parsed rows of the timed iterations (raw kernel
    names; see ``attribute_to_model``)."""
    with tempfile.TemporaryDirectory(prefix="ascendpipe-prof-") as tmp:
        session = open_session(model_path, settings, profile_prefix=os.path.join(tmp, "ort"))
        for i in range(warmup + iterations):
            session.run(None, batches[i % len(batches)])
        trace_file = session.end_profiling()
        events = json.loads(Path(trace_file).read_text())
    return parse_ort_profile(events, warmup=warmup, model_name=Path(model_path).stem)
