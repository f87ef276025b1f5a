"""Every op output of a model for one feed, one ``.npy`` per tensor, with an index (docs/contracts.md).

How: mark node outputs as graph outputs and let onnxruntime run the model, then write each
returned tensor and drop it before the next. Marking outputs can stop onnxruntime's fusions, and a
fused golden would lose original tensors, so the golden dump runs with fusions off (ORT_DISABLE_ALL);
a converted (emulated) model already carries its fusions and runs as converted, with its
``runtime.json``.

Weights: where onnxruntime can read them from the model's folder (1.21+), the model is parsed and
run with each weight a reference to its bytes in the file (``wire.weights_by_reference``), so
neither protobuf nor onnxruntime copies them: onnxruntime maps them from the page cache. The file
must stay as it is while the dump runs (an atomic replace is noticed and refused; a file rewritten
in place under a running dump is not supported). Otherwise the file's bytes are read whole.

Memory: onnxruntime returns a run's marked outputs all at once, so one run of a big model holds
all its activations. Above ``memory_budget_bytes`` the model runs in consecutive segments
(``segments.py``): each a sub-model of its own nodes and the weights they read (sliced from the
model's bytes, ``onnxwire.py``), whose dumped tensors (estimated by ONNX shape inference with the feed's
shapes) plus weights (counted twice) fit the budget. A segment is fed the graph inputs and the
earlier segments' tensors it reads, each kept until its last reader has run, so every tensor is
computed once: time ~ one run plus a session set-up per segment (a few ms each), peak ~ a few
budgets (a segment's outputs as onnxruntime and numpy copies, its weights: mapped from the file, or
as sub-model bytes and session copies beside the model's bytes where they cannot be referenced) +
a constant. Cuts fall only where every crossing tensor is a dumped one
(a graph output in the single run too: nothing is fused across it) or the emulation's fp16-rounded
copy of a tensor (``crossable``), so a segmented dump has the same bytes as one run; where no cut
is legal the model runs once.

Emulated models: tensors listed in the ``ascendpipe.emulation`` metadata as ``internal_tensors``
are skipped, ``tensor_producer`` names each kept tensor's original op, and a tensor that leaves an
emulation Cast(fp16)->Cast(fp32) pair is stored as float16 (exact: its values are fp16 values),
as the device's dump would hold it. ``Constant`` node outputs are parameters, not activations, and
are not dumped.
"""

from __future__ import annotations

import json
import mmap
import os
from pathlib import Path
from typing import Iterable, Sequence

import numpy as np

from ascendpipe.backends.onnxruntime.dump_run import _Runner, _SegmentBuilder
from ascendpipe.backends.onnxruntime.dump_write import (Planned, _entry, _save_npy, _write_inputs,  # noqa: F401
                                                        compact, planned_bytes, tensor_stats)
from ascendpipe.backends.onnxruntime.segments import plan_segments
from ascendpipe.contract import DUMP_FORMAT, DUMP_INDEX, DUMP_TENSORS_DIR
from ascendpipe.errors import Location, UserError, few
from ascendpipe.inputs import check_array, write_json_atomic
from ascendpipe.onnxgraph import graph_input_specs, graph_summary, name_nodes

INDEX_FILE = DUMP_INDEX
TENSORS_DIR = DUMP_TENSORS_DIR
FORMAT = DUMP_FORMAT
EMULATION_KEY = "ascendpipe.emulation"
EMU_PREFIX = "ascendpipe_emu/"
ROUNDED_PREFIX = EMU_PREFIX + "round/"  # an fp16-rounded copy of a tensor some fp16 op reads
DEFAULT_MEMORY_BUDGET = 16 << 20  # bytes a segment holds: its dumped tensors and its weights
# With no budget given ("auto"), a dump whose tensors total at most this runs once: each segment costs
# a session (25% more time on a ResNet-18 in 16 segments), and below this the memory saved is less
# than the process already holds for its libraries and the model.
ONE_RUN_BYTES = 128 << 20
# Two dumps made at once (a compare's target and golden) hold at most this together, by their runs'
# estimates (``memory_gate``): a few segments' worth, so the overlap adds little to one dump's peak
# (measured: BERT-shaped encoders at 1x512, 2x128, 4x128 stay within issue 32's bound)
TOGETHER_BYTES = 4 * DEFAULT_MEMORY_BUDGET
AUTO = "auto"
EXTERNAL_GRAPH_MAX = 256 << 20  # an .onnx file this big holds weights inline, whatever else is external
# Bump when the bytes of a dump change for the same model and feeds (part of a shared dump's key).
# 2: no path or run count in index.json, graph facts in it, fp16 ops' outputs stored as fp16
# 3: an unnamed op is named as convert names it (<OpType>_<index>), not by its tensor or node_<index>
# 4: an emulated model's dump carries its conversion's fused_map.json, precision_plan.json, convert.json
DUMP_VERSION = 4
# What a compare of an emulated model's dump needs of its conversion (issue 49): the fused kernels' members
# (a fused kernel's overflow is judged on its members' golden peaks), the precision plan (the overflow
# mode, bf16/HF32 ops) and the settings (SoC, keep_dtype); without them a compare of the two dumps named
# another first failure than a compare of the model (`/ln1/Mul`, precision loss, for `/ln1/ReduceMean`'s
# overflow inside its fused kernel).
CONVERSION_FILES = ("fused_map.json", "precision_plan.json", "convert.json")

_FLOAT = 1  # onnx.TensorProto.FLOAT
_FLOAT16 = 10  # onnx.TensorProto.FLOAT16


# --- pure logic ---------------------------------------------------------------------------------

def emulation_info(metadata: dict[str, str], where: Location) -> tuple[set[str], dict[str, dict]]:
    """(internal tensors, tensor -> {op_name, op_type}) from the model's metadata, if emulated."""
    raw = metadata.get(EMULATION_KEY)
    if raw is None:
        return set(), {}
    try:
        info = json.loads(raw)
        return set(info.get("internal_tensors", [])), dict(info.get("tensor_producer", {}))
    except (json.JSONDecodeError, AttributeError, TypeError) as exc:
        raise UserError(f"model metadata '{EMULATION_KEY}' is not valid: {exc}", where) from None


def plan_tensors(nodes: Iterable, graph_inputs: set[str], internal: set[str],
                 producer: dict[str, dict], fp16_ops: set[str] = frozenset()) -> list[Planned]:
    """The node outputs to dump, in topological (graph) order.

    ``nodes`` are onnx NodeProto-like (name, op_type, input, output, attribute). ``topo_index``
    counts original ops only; an emulation node takes the index of the op it follows. ``fp16_ops``:
    the ops the precision plan runs in fp16 (their float32 outputs are stored compactly, see
    ``compact``).
    """
    plan, seen = [], set(graph_inputs)
    made_by: dict[str, object] = {}
    topo = -1
    for node in nodes:
        emu = node.name.startswith(EMU_PREFIX)
        if not emu:
            topo += 1
        for out in node.output:
            if out:
                made_by[out] = node
        if node.op_type == "Constant":
            continue
        for out in node.output:
            if not out or out in seen or out in internal:
                continue
            seen.add(out)
            source = producer.get(out, {})
            plan.append(Planned(
                name=out,
                op_name=source.get("op_name") or node.name or out,
                op_type=source.get("op_type") or node.op_type,
                topo_index=max(topo, 0),
                as_float16=emu and _is_fp16_round_trip(node, made_by),
                device_fp16=not emu and (node.name in fp16_ops or source.get("op_name") in fp16_ops),
            ))
    return plan


def crossable(plan: list[Planned], internal: set[str], nodes: Iterable) -> set[str]:
    """The tensors a segment cut may carry: the dumped ones of known size, and the emulation's
    rounded copies of a tensor (``ascendpipe_emu/round/<t>``: the float32 end of a Cast(fp16) ->
    Cast(fp32) pair, as a dumped fp16 op output is) that no If/Loop/Scan body reads.

    A copy read by Q, K, V and a residual Add (a transformer's input) would otherwise keep the whole
    block between its first and last reader in one segment (a BERT layer's attention: 504 MB at seq
    512). Carried, it is fed to the later segment as the same fp16 values (the pair's end is
    exact), so the dump keeps its bytes. Copies a body reads from the outer scope are left out:
    onnxruntime passes those as implicit inputs, a case the segmented dump has no test for.
    """
    tensors = {p.name for p in plan if p.size is not None}
    rounded = {t for t in internal if t.startswith(ROUNDED_PREFIX)}
    if rounded:
        from ascendpipe.backends.onnxruntime.segments import _subgraphs, outer_reads

        body_reads = {x for node in nodes for body in _subgraphs(node) for x in outer_reads(body)}
        tensors |= rounded - body_reads
    return tensors


def fp16_ops(precision_plan: dict | None) -> set[str]:
    """The ops a converted model's precision_plan.json runs in fp16 (empty for anything else)."""
    nodes = (precision_plan or {}).get("nodes")
    if not isinstance(nodes, dict):
        return set()
    return {name for name, node in nodes.items() if isinstance(node, dict) and node.get("dtype") == "float16"}


def _cast_to(node) -> int | None:
    if node.op_type != "Cast":
        return None
    for attr in node.attribute:
        if attr.name == "to":
            return attr.i
    return None


def _is_fp16_round_trip(node, made_by: dict) -> bool:
    if _cast_to(node) != _FLOAT or not node.input:
        return False
    inner = made_by.get(node.input[0])
    return inner is not None and _cast_to(inner) == _FLOAT16


# --- I/O ----------------------------------------------------------------------------------------

def cache_key(model: Path, feeds: dict[str, np.ndarray], *, fusions: bool, full: set[str] | None = None) -> str:
    """The key of this model's dump for ``feeds`` in the shared dump cache (``store.dump_cache``);
    ``full``: a dump that writes only these tensors in full (the rest as statistics)."""
    from ascendpipe.store.dump_cache import dump_key
    from ascendpipe.versions import package_version

    tools = {dist: package_version(dist) for dist in ("onnxruntime", "onnx", "numpy")}
    settings = {"format": FORMAT, "version": DUMP_VERSION, "fusions": bool(fusions)}
    if full is not None:
        settings["full"] = sorted(full)
    return dump_key(Path(model), feeds, settings=settings, tools=tools)


def _probe_model(model, feeds: dict[str, np.ndarray]):
    """A weight-free copy for shape inference: big initializers become typed inputs, inputs get the feed's shapes.

    Copying and re-serialising the weights would cost more than the whole estimate is worth; small
    initializers keep their data (shape-computing ops such as Reshape read it).
    """
    import onnx
    from onnx import helper

    graph = model.graph
    probe_graph = onnx.GraphProto(name=graph.name, node=graph.node, output=graph.output)
    for inp in graph.input:
        copy = probe_graph.input.add()
        copy.CopyFrom(inp)
        if inp.name in feeds and copy.type.HasField("tensor_type"):
            for dim, size in zip(copy.type.tensor_type.shape.dim, feeds[inp.name].shape):
                dim.Clear()
                dim.dim_value = size
    declared = {i.name for i in graph.input}
    for init in graph.initializer:
        small = int(np.prod(init.dims, dtype=np.int64)) <= 64 and init.data_location != onnx.TensorProto.EXTERNAL
        if small:
            probe_graph.initializer.append(init)
        elif init.name not in declared:
            probe_graph.input.append(helper.make_tensor_value_info(init.name, init.data_type, list(init.dims)))
    probe = onnx.ModelProto(ir_version=model.ir_version, graph=probe_graph)
    probe.opset_import.extend(model.opset_import)
    return probe


def _estimate_sizes(model, feeds: dict[str, np.ndarray], names: list[str]) -> list[int | None]:
    """Bytes per tensor from ONNX shape inference with the feed's concrete shapes (None: unknown)."""
    from onnx import helper, shape_inference

    try:
        inferred = shape_inference.infer_shapes(_probe_model(model, feeds))
    except Exception:  # shape inference is only a size estimate; unknown sizes are handled
        return [None] * len(names)
    known = {}
    for vi in list(inferred.graph.value_info) + list(inferred.graph.output):
        t = vi.type.tensor_type
        if not t.HasField("shape") or not t.elem_type:
            continue
        dims = [d.dim_value if d.HasField("dim_value") else None for d in t.shape.dim]
        if all(d is not None for d in dims):
            itemsize = np.dtype(helper.tensor_dtype_to_np_dtype(t.elem_type)).itemsize
            known[vi.name] = int(np.prod(dims, dtype=np.int64)) * itemsize
    return [known.get(n) for n in names]


def _tensor_bytes(init) -> int:
    from onnx import helper

    try:
        itemsize = np.dtype(helper.tensor_dtype_to_np_dtype(init.data_type)).itemsize
    except (KeyError, TypeError):  # strings and unknown types: a guess is enough for a budget
        itemsize = 4
    return int(np.prod(init.dims, dtype=np.int64)) * itemsize


def marked_model_bytes(model_bytes: bytes, names: Sequence[str]) -> bytes:
    """The model with ``names`` added as graph outputs, without re-serialising its weights.

    Concatenated protobuf messages parse as one merged message, and a merged repeated field is
    appended to: so ``model + ModelProto(graph=GraphProto(output=[...]))`` is the model with
    those extra outputs.
    """
    import onnx

    extra = onnx.ModelProto(graph=onnx.GraphProto(output=[onnx.ValueInfoProto(name=n) for n in names]))
    return model_bytes + extra.SerializeToString()


def dump_model(model_path, feeds: dict[str, np.ndarray], out_dir, *, fusions: bool,
               memory_budget_bytes: int | str | None = AUTO, log=None, stats: dict | None = None,
               gate=None, full: set[str] | frozenset[str] | None = None) -> Path:
    """Dump every op output of the model for ``feeds``; return the path of ``index.json``.

    The index depends only on the model's content and the feeds (no path, time or process id in
    it), so the same dump has the same bytes wherever and whenever it is made (a shared, cached
    dump can stand for it). ``stats``, if given, receives what is not content: the number of runs
    (``chunks``: segments, 1 for one run), the seconds spent and the seconds of session set-up.
    ``memory_budget_bytes``: the most a segment holds; None: one run; "auto": one run when the
    dump's tensors total at most ``ONE_RUN_BYTES``, else segments of ``DEFAULT_MEMORY_BUDGET``.
    ``gate``: a ``memory_gate.MemoryGate`` shared with a dump made at the same time (each run holds
    its estimated bytes there; the dump's content is the same with or without).
    ``full``: the op outputs written as ``.npy`` files; every other one gets a statistics-only entry
    (``dump_write.summary_entry``: no file; msprobe's statistics level, for a compare that must stay
    within a disk budget). None: every tensor in full. Graph inputs are always written.
    """
    import time

    import onnx

    started = time.perf_counter()
    model_path = Path(model_path)
    where = Location(file=str(model_path))
    model, raw, weights_dir, identity = _load(model_path, where)
    external = weights_dir is None and any(i.data_location == onnx.TensorProto.EXTERNAL for i in model.graph.initializer)
    if external:
        # onnxruntime cannot read external weights of a model given as bytes for every op (its shape
        # inference wants them inline), so inline them: this path is limited to protobuf's 2 GiB
        model = onnx.load(str(model_path))
        raw = None
    name_nodes(model.graph)  # unnamed ops get the names convert gives them (both sides of a compare agree)
    specs = graph_input_specs(model.graph)
    _check_feeds(specs, feeds, where)
    emulated = EMULATION_KEY in {p.key for p in model.metadata_props}
    internal, producer = emulation_info({p.key: p.value for p in model.metadata_props}, where)
    half_ops = fp16_ops(_read_plan(model_path.parent)) if emulated else set()
    plan = plan_tensors(model.graph.node, {i.name for i in model.graph.input}, internal, producer, half_ops)
    auto = memory_budget_bytes == AUTO
    if auto and fits_without_estimate(model, feeds, len(plan), ONE_RUN_BYTES):
        segments = []
    elif not fits_without_estimate(model, feeds, len(plan), DEFAULT_MEMORY_BUDGET if auto else memory_budget_bytes):
        for planned, size in zip(plan, _estimate_sizes(model, feeds, [p.name for p in plan])):
            planned.size = size
        if auto:
            memory_budget_bytes = None if planned_bytes(plan) <= ONE_RUN_BYTES else DEFAULT_MEMORY_BUDGET
        segments = [] if memory_budget_bytes is None else plan_segments(model.graph.node, {p.name: p.size for p in plan},
                                 crossable(plan, internal, model.graph.node), memory_budget_bytes,
                                 graph_inputs=[s.name for s in specs],
                                 initializers={i.name: _tensor_bytes(i) for i in model.graph.initializer},
                                 graph_outputs={o.name for o in model.graph.output})
    else:
        segments = []
    summary = graph_summary(model.graph)
    planned_at = time.perf_counter()

    out_dir = Path(out_dir)
    (out_dir / INDEX_FILE).unlink(missing_ok=True)  # no index over half-rewritten tensors
    (out_dir / TENSORS_DIR).mkdir(parents=True, exist_ok=True)
    input_entries: dict[str, dict] = {}
    entries: list[dict | None] = _write_inputs(specs, feeds, out_dir / TENSORS_DIR, input_entries)
    entries.extend([None] * len(plan))
    write = _write_tensor if full is None else _write_or_summarise(frozenset(full))
    run = _Runner(plan, feeds, out_dir, entries, first_position=len(specs), fusions=fusions,
                  runtime_dir=model_path.parent, weights_dir=weights_dir, log=log, write=write, gate=gate)
    if len(segments) > 1:
        builder = _SegmentBuilder(model, model.SerializeToString() if external else raw)
        del model, raw  # the weights stay in memory once (or in the file), as the bytes each segment slices
        run.segments(builder, segments)
    else:
        from ascendpipe.backends.onnxruntime.dump_run import ALONE_WEIGHT_BYTES

        run.alone = sum(_tensor_bytes(i) for i in model.graph.initializer) >= ALONE_WEIGHT_BYTES
        existing_outputs = {o.name for o in model.graph.output}
        model_bytes = model.SerializeToString() if external else raw
        del model, raw  # the parsed weights go before the marked copy is made
        model_bytes = marked_model_bytes(model_bytes, [p.name for p in plan if p.name not in existing_outputs])
        run.whole(model_bytes)
    if identity is not None and _identity(os.stat(model_path)) != identity:
        raise UserError("the model file changed while it was dumped (its weights are read from the file as "
                        "the dump runs); dump it again", where)
    runs = max(len(segments), 1)
    if full is not None:  # no file of an earlier dump here outlives its index
        kept = {e["file"] for e in entries if e is not None and e.get("file")}
        for stale in (out_dir / TENSORS_DIR).glob("*.npy"):
            if f"{TENSORS_DIR}/{stale.name}" not in kept:
                stale.unlink(missing_ok=True)
    index = {
        "format": FORMAT,
        "model": model_path.name,  # the file name only: a path would differ between clones and folders
        "backend": "onnxruntime",
        "fusions": fusions,
        "emulated": emulated,
        "inputs": input_entries,
        "graph": summary,
        "tensors": [e for e in entries if e is not None],
    }
    carry_conversion(model_path.parent, out_dir, emulated=emulated)
    write_json_atomic(out_dir / INDEX_FILE, index)
    if stats is not None:
        stats.update(chunks=runs, plan_seconds=planned_at - started, session_seconds=run.session_seconds,
                     seconds=time.perf_counter() - started)
    return out_dir / INDEX_FILE


def carry_conversion(model_dir: Path, out_dir: Path, *, emulated: bool) -> list[str]:
    """Copy the conversion's files (``CONVERSION_FILES``) found beside an emulated model (in ``model_dir``)
    into its dump folder, so the dump describes itself wherever it is compared
    (``compare_sources.resolve_side`` reads them beside index.json); one left there by an earlier dump
    of another model goes. Returns the names copied."""
    from ascendpipe.fsutil import copy_atomic

    copied: list[str] = []
    if Path(model_dir).resolve() == Path(out_dir).resolve():
        return copied  # dumped into the model's own folder: its files are its own
    for name in CONVERSION_FILES:
        source = Path(model_dir) / name
        if emulated and source.is_file():
            copy_atomic(source, Path(out_dir) / name)
            copied.append(name)
        else:
            (Path(out_dir) / name).unlink(missing_ok=True)  # a stale file from an earlier dump here
    return copied


def model_input_specs(model_path) -> list:
    """The model's real inputs (``InputSpec``) as a dump reads them, from the graph: no session, and
    the weights are not read where they can be referenced (see ``_model_bytes``)."""
    model_path = Path(model_path)
    return graph_input_specs(_load(model_path, Location(file=str(model_path)))[0].graph)


def _load(model_path: Path, where: Location) -> tuple:
    """(the parsed model, its bytes, the folder of its referenced weights, the file's identity): see
    ``_model_bytes``."""
    import onnx

    if not model_path.is_file():
        raise UserError("model file does not exist", where)
    from ascendpipe import onnxexternal

    # its external data, strictly, from the folder onnxruntime is given (the model file's, links resolved)
    onnxexternal.check_model(model_path, folder=model_path.resolve().parent, label=where.file)
    raw, weights_dir, identity = _model_bytes(model_path)
    try:
        return onnx.load_model_from_string(raw), raw, weights_dir, identity
    except Exception as exc:  # onnx raises DecodeError and friends for a bad file
        raise UserError(f"cannot read the ONNX model: {exc}", where) from None


def _model_bytes(model_path: Path) -> tuple[bytes, Path | None, tuple | None]:
    """The model's bytes to parse and run, the folder its weights are read from (None: they are in
    the bytes) and the file's identity (to check it is unchanged once the runs are done).

    Where this onnxruntime can read weights by reference (``session.weights_dir_supported``), the
    bytes are the file's with each weight a reference into the file (``wire.weights_by_reference``):
    only the graph is copied and parsed, and onnxruntime maps the weights from the page cache. A
    ResNet-18 (46 MB), cold: 20-60 ms of reading, parsing, marking and session creation against
    ~200 ms when the file's bytes are read, parsed, copied with the marked outputs and parsed again
    by onnxruntime, which copies the weights once more (the dump's outputs are the same bytes).
    Otherwise, and for weights already external, the file's bytes as they are.
    """
    from ascendpipe.backends.onnxruntime.session import weights_dir_supported
    from ascendpipe.onnxexternal import external_model_bytes
    from ascendpipe.onnxwire import weights_by_reference

    if weights_dir_supported():
        # the file itself (a link resolved): onnxruntime refuses weights outside the folder it is given
        real = model_path.resolve()
        with open(real, "rb") as handle:
            stat = os.fstat(handle.fileno())
            try:
                with mmap.mmap(handle.fileno(), 0, access=mmap.ACCESS_READ) as view:
                    light = weights_by_reference(view, real.name)
            except (OSError, ValueError):  # an empty file, a file system that cannot map: read it whole
                light = None
            if light is not None:
                return light, real.parent, _identity(stat)
            external = external_model_bytes(handle, real.parent, EXTERNAL_GRAPH_MAX)
            if external is not None:
                return external, real.parent, _identity(stat)
    return model_path.read_bytes(), None, None


def _identity(stat: os.stat_result) -> tuple:
    return stat.st_dev, stat.st_ino, stat.st_size, stat.st_mtime_ns


def _read_plan(folder: Path) -> dict | None:
    from ascendpipe.contract import PRECISION_PLAN

    try:
        return json.loads((folder / PRECISION_PLAN).read_text())
    except (OSError, ValueError):
        return None  # no plan: nothing is stored compactly beyond the emulation's own roundings


def fits_without_estimate(model, feeds: dict[str, np.ndarray], tensors: int, budget: int | None) -> bool:
    """Whether the budget holds every tensor by a generous bound, so the per-tensor estimate (ONNX
    shape inference, ~30 ms on a ResNet-18) can be skipped and the model runs once.

    The bound: ``tensors`` x ``GROWTH`` x the largest of the feeds and the initializers (an op output
    of a convolutional or dense model is rarely over 32x that: a 64-channel stride-1 conv on a
    3-channel image is 21x its input). Ops that make sizes from values (Expand, Tile, Resize,
    ConstantOfShape, ...) or hold subgraphs void the bound: then shape inference decides. The
    budget is a bound on a guess either way (unknown sizes are guessed too).
    """
    if budget is None:
        return True
    if any(node.op_type in _SIZE_FROM_VALUES for node in model.graph.node):
        return False
    largest = max([a.nbytes for a in feeds.values()] + [0])
    for init in model.graph.initializer:
        count = int(np.prod(init.dims, dtype=np.int64)) if init.dims else 1
        largest = max(largest, count * 4)
    return tensors * GROWTH * largest <= budget


GROWTH = 32
_SIZE_FROM_VALUES = frozenset({"Expand", "Tile", "Resize", "Upsample", "ConstantOfShape", "Pad", "Range",
                               "NonZero", "Loop", "Scan", "If", "OneHot", "ConvTranspose"})


def _write_tensor(item: Planned, value, out_dir: Path, position: int) -> dict | None:
    if not isinstance(value, np.ndarray):
        return None  # a sequence or map output: not a tensor
    stored = compact(value, item)
    file = f"{TENSORS_DIR}/{position:05d}.npy"
    _save_npy(out_dir / file, stored)
    # the stats from the float32 values: a float16 copy holds the same numbers (compact keeps it only
    # then), and numpy's float16 min/max are scalar loops (the 430-node detector's target dump: 0.55 s
    # of its writers' 1.1 s)
    return _entry(item, item.name, stored, file, values=value)


def _write_or_summarise(full: frozenset[str]):
    """The writer of a dump that writes ``full``'s tensors and summarises the rest (``summary_entry``)."""
    from ascendpipe.backends.onnxruntime.dump_write import summary_entry

    def write(item: Planned, value, out_dir: Path, position: int) -> dict | None:
        if item.name in full:
            return _write_tensor(item, value, out_dir, position)
        if not isinstance(value, np.ndarray):
            return None
        return summary_entry(item, item.name, value)

    return write


def _check_feeds(specs, feeds: dict, where: Location) -> None:
    wanted = {s.name for s in specs}
    if set(feeds) != wanted:
        raise UserError(f"feeds {few(sorted(feeds)) or 'none'} do not match the model inputs "
                        f"{few(sorted(wanted))}", where)
    for spec in specs:
        check_array(spec, feeds[spec.name], where)
