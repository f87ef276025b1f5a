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

from ascendpipe.profiling.attribution import Node, attribute_kernels, expand
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
    """Without the optimised graph: the node producing ``tensor``; when onnxruntime fused a chain
    (Conv+Relu), walk up the first inputs to the node whose type matches the kernel's."""
    first = producers.get(tensor)
    node, steps = first, 0
    while node is not None and steps < 4:
        name, node_type, inputs = node
        if _base_type(node_type) == _base_type(op_type):
            return name
        node, steps = (producers.get(inputs[0]) if inputs else None), steps + 1
    return first[0] if first else None


@dataclasses.dataclass
class ModelGraph:
    """The model as profile names its ops: nodes in graph order, weights, and (a converted model) its
    fused_map's fused op -> original ops."""
    nodes: list[Node]
    constants: set[str]
    op_map: dict[str, list[str]] = dataclasses.field(default_factory=dict)

    @property
    def types(self) -> dict[str, str]:
        return {n.name: n.op_type for n in self.nodes}


def _is_emulation(name: str) -> bool:
    return name.startswith(EMULATION_PREFIX)


def attribute_to_model(data: ProfileData, graph: ModelGraph) -> tuple[ProfileData, float]:
    """Kernel rows named after the model's nodes, without the emulation's rounding casts.

    Each kernel (``attribution.attribute_kernels`` over the optimised graph onnxruntime ran) takes the
    name of the model node it is named after, the model's op type, and the model nodes it computes
    (``sources``, through a converted model's fused_map); the kernel's own name and type stay in
    ``kernel_name``/``kernel_type``. Casts the fp16 emulation inserted (``ascendpipe_emu/...``) do not
    run on the device: they are left out, and their total time (us, over all kept iterations) is
    returned as the overhead. A kernel that maps to no model node keeps its own name and no sources.
    """
    types = graph.types
    sources = attribute_kernels(graph.nodes, graph.constants, data.kernel_nodes, data.kernel_constants) \
        if data.kernel_nodes else {}
    producers = {out: (n.name, n.op_type, n.inputs) for n in graph.nodes for out in n.outputs}
    kept, overhead, position = [], 0.0, {}
    for op in data.ops:
        found = sources.get(op.op_name)
        nodes = tuple(n for n in expand(found, graph.op_map) if not _is_emulation(n)) if found else ()
        if (_is_emulation(op.op_name) and op.op_type == "Cast") or (found and not nodes):
            overhead += op.duration_us  # a rounding cast (or a kernel of nothing but casts)
            continue
        if found:
            name = found.anchor if not _is_emulation(found.anchor) else nodes[-1]
            op_type = found.op_type if name == found.anchor else types.get(name, op.op_type)
        elif op.op_name in types:
            name, op_type, nodes = op.op_name, types[op.op_name], (op.op_name,)
        else:  # no optimised graph to read: the old rule, by the renamed node's output tensor
            name = _model_node_for(_ORT_RENAME.sub("", op.op_name), op.op_type, producers)
            name, op_type, nodes = (name, types[name], (name,)) if name else (op.op_name, op.op_type, ())
        index = position.get(op.iteration, 0)
        position[op.iteration] = index + 1
        kept.append(dataclasses.replace(op, op_name=name, op_type=op_type, index=index, kernel_name=op.op_name,
                                        kernel_type=op.op_type, sources=nodes))
    return ProfileData(data.model_name, list(data.iterations), kept), overhead


def attributed_pct(data: ProfileData) -> float:
    """Share of kernel time attributed to model nodes."""
    total = sum(op.duration_us for op in data.ops)
    return 100.0 * sum(op.duration_us for op in data.ops if op.sources) / total if total else 100.0


def _graph_nodes(graph) -> list[Node]:
    return [Node(n.name, n.op_type, tuple(n.input), tuple(n.output)) for n in graph.node]


def model_graph(model_path: Path) -> ModelGraph:
    """The model's nodes and weights; beside a converted model, its fused_map.json's fused ops."""
    import onnx

    from ascendpipe.compare.mapping import fused_map_parts

    graph = onnx.load(str(model_path), load_external_data=False).graph
    op_map: dict[str, list[str]] = {}
    fused_map = Path(model_path).parent / "fused_map.json"
    if fused_map.is_file():
        try:
            op_map = fused_map_parts(json.loads(fused_map.read_text()))[1]
        except (ValueError, AttributeError, TypeError):
            op_map = {}  # a damaged map: the converted model's own names
    return ModelGraph(_graph_nodes(graph), {i.name for i in graph.initializer}, op_map)


# ----------------------------------------------------------------------------- running

def resolve_settings(settings: dict | None) -> dict[str, Any]:
    merged = dict(DEFAULT_SETTINGS)
    merged.update(settings or {})
    return merged


def open_session(model_path: Path, settings: dict | None = None, *, profile_prefix: str | None = None,
                 optimized_path: str | None = None):
    """A CPU session with the given bank/runtime settings (see ``DEFAULT_SETTINGS``), made by the
    shared ``make_session`` so profile and tune time the sessions infer would run. ``optimized_path``:
    where onnxruntime saves the optimised graph it runs (profile reads kernels' sources from it)."""
    from ascendpipe.backends.onnxruntime.session import make_session, session_options

    if optimized_path is None:
        return make_session(Path(model_path), runtime=resolve_settings(settings), profile_prefix=profile_prefix)
    import onnxruntime as ort

    from ascendpipe import onnxexternal
    from ascendpipe.errors import Location, UserError

    onnxexternal.check_model(model_path)  # its external data, strictly, before onnxruntime reads it
    opts, disabled = session_options(resolve_settings(settings), fusions=True, profile_prefix=profile_prefix)
    opts.optimized_model_filepath = optimized_path
    opts.log_severity_level = 3  # its warning that an NCHWc graph is machine-specific: known, a temp file
    extra = {"disabled_optimizers": disabled} if disabled else {}
    try:
        return ort.InferenceSession(str(model_path), sess_options=opts, providers=["CPUExecutionProvider"], **extra)
    except Exception as exc:  # noqa: BLE001 - onnxruntime's own exception types
        first = str(exc).strip().splitlines()[0] if str(exc).strip() else type(exc).__name__
        raise UserError(f"onnxruntime cannot load the model: {first}", Location(file=str(model_path))) from None


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
    import onnx

    with tempfile.TemporaryDirectory(prefix="ascendpipe-prof-") as tmp:
        optimized = os.path.join(tmp, "optimized.onnx")
        session = open_session(model_path, settings, profile_prefix=os.path.join(tmp, "ort"), optimized_path=optimized)
        for i in range(warmup + iterations):
            session.run(None, batches[i % len(batches)])
        trace_file = session.end_profiling()
        events = json.loads(Path(trace_file).read_text())
        data = parse_ort_profile(events, warmup=warmup, model_name=Path(model_path).stem)
        if os.path.isfile(optimized):  # the graph the kernels belong to (attribute_to_model)
            graph = onnx.load(optimized, load_external_data=False).graph
            data.kernel_nodes = _graph_nodes(graph)
            data.kernel_constants = {i.name for i in graph.initializer} | {i.name for i in graph.input}
    return data
