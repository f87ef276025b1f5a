"""Batched inference on onnxruntime, timed the way ais_bench reports it.

Each batch is bound once (timed as H2D), run ``loops`` times (each run timed as compute), and its
outputs copied out once (timed as D2H). ``warmup`` untimed runs on the first batch come first.
Outputs are written into ``outputs/<name>.npy`` through a memory map as batches finish, so memory
holds one batch of outputs, not the run's; padding rows of a static-batch model's last batch are
dropped. ``summary.json`` carries ais_bench's summary keys plus our normalised ones.
"""

from __future__ import annotations

import os
import re
import sys
import time
from pathlib import Path
from typing import Sequence, TextIO

import numpy as np

from ascendpipe.errors import UserError, few
from ascendpipe.fsutil import atomic_path
from ascendpipe.inputs import check_array, write_json_atomic
from ascendpipe.profiling.stats import latency_stats, throughput

SUMMARY_FILE = "summary.json"
OUTPUTS_DIR = "outputs"


# --- pure logic ---------------------------------------------------------------------------------

# the latency keys summary.json's ``latency_ms`` holds (docs/contracts.md)
LATENCY_KEYS = ("min", "max", "mean", "median", "p99")


def ais_bench_stats(times_ms: Sequence[float]) -> dict[str, float]:
    """Latency statistics under ais_bench's key names."""
    s = latency_stats(times_ms)
    return {"min": s["min"], "max": s["max"], "mean": s["mean"], "median": s["median"],
            "percentile(99%)": s["p99"], "count": s["count"]}


def output_file_name(name: str) -> str:
    """A tensor name as a safe file name ('/' and ':' are common in exported names)."""
    safe = re.sub(r"[^A-Za-z0-9._-]", "_", name).lstrip(".")
    return (safe or "output") + ".npy"


def unique_file_names(names: Sequence[str]) -> dict[str, str]:
    """Output name -> file name, distinct even when two names sanitise alike."""
    result, taken = {}, set()
    for name in names:
        candidate, n = output_file_name(name), 1
        while candidate in taken:
            candidate = output_file_name(name)[:-4] + f"_{n}.npy"
            n += 1
        taken.add(candidate)
        result[name] = candidate
    return result


# What the emulator's timings are: ais_bench's keys (NPU_compute_time, ...) are kept for the scripts that
# read them, but on this backend they time onnxruntime on the host CPU, which says nothing of NPU time
HOST_TIME = "host_cpu_emulation"
HOST_TIME_NOTE = ("[INFO] emulated: these times are onnxruntime's on the host CPU (time_measured_on: "
                  f"{HOST_TIME}), not the NPU's; ais_bench's key names are kept for scripts")


def console_summary(summary: dict) -> str:
    """ais_bench-style console lines (and, for the emulator's timings, a line saying they are host time)."""
    s = summary["NPU_compute_time"]
    return (
        f"[INFO] NPU_compute_time (ms): min = {s['min']:.3f}, max = {s['max']:.3f}, mean = {s['mean']:.3f}, "
        f"median = {s['median']:.3f}, percentile(99%) = {s['percentile(99%)']:.3f}\n"
        f"[INFO] throughput 1000*batchsize.mean({summary['batch_size']})/NPU_compute_time.mean({s['mean']:.3f}): "
        f"{summary['throughput']:.3f}"
        + (f"\n{HOST_TIME_NOTE}" if summary.get("time_measured_on") == HOST_TIME else "")
    )


# --- progress -----------------------------------------------------------------------------------

class Progress:
    """A dependency-free progress bar: redrawn in place on a TTY, else a line every 10%."""

    def __init__(self, total: int, stream: TextIO | None, label: str = "infer"):
        self.total, self.stream, self.label = total, stream, label
        from ascendpipe import terminal

        self.tty = stream is not None and terminal.redraws(stream)  # a bar redrawn with \r; TERM=dumb: lines
        self.started = time.perf_counter()
        self._last_decile = -1

    def update(self, done: int) -> None:
        from ascendpipe import ticker

        ticker.report(done, self.total, "batches")  # a build's status line (engine/progress.py)
        if self.stream is None or self.total <= 0:
            return
        elapsed = time.perf_counter() - self.started
        rate = f"{elapsed / done * 1000:.1f} ms/batch" if done else ""
        if self.tty:
            width = 30
            filled = width * done // self.total
            self.stream.write(f"\r{self.label} [{'#' * filled}{'-' * (width - filled)}] {done}/{self.total} {rate}")
            if done == self.total:
                self.stream.write("\n")
            self.stream.flush()
            return
        decile = 10 * done // self.total
        if decile > self._last_decile:
            self._last_decile = decile
            self.stream.write(f"{self.label}: {done}/{self.total} batches ({decile * 10}%) {rate}\n")
            self.stream.flush()


def _progress_stream(progress):
    if progress is None:  # auto: a bar only for someone watching
        return sys.stderr if sys.stderr.isatty() else None
    return progress or None  # False: off


# --- output writing -----------------------------------------------------------------------------

def _reserve(path: str) -> None:
    """Allocate the memory-mapped file's blocks now. open_memmap makes a sparse file, and a store
    through the map into a block the file system cannot allocate (a full disk) is SIGBUS: the process
    dies without a word. With the blocks reserved a full disk is an OSError (ENOSPC) here instead."""
    if not hasattr(os, "posix_fallocate"):  # macOS: no such call; the map stays sparse there
        return
    fd = os.open(path, os.O_RDWR)
    try:
        size = os.fstat(fd).st_size
        if size:
            os.posix_fallocate(fd, 0, size)
    finally:
        os.close(fd)


def feed_array(array):
    """A batch's array as onnxruntime takes it: C-contiguous, its rank kept (``np.ascontiguousarray``
    makes a 0-d array 1-d); strings as numpy unicode."""
    if isinstance(array, np.ndarray) and array.dtype.kind == "S":
        return array.astype(str)
    return np.require(array, requirements="C") if isinstance(array, np.ndarray) else array


def _bindable(session, names: Sequence[str]) -> bool:
    """onnxruntime's IO binding takes numeric tensors only (not strings, sequences or optionals; nor
    bfloat16, whose outputs it cannot copy to numpy: ``checked_run`` returns those)."""
    def numeric(kind: str) -> bool:
        return kind.startswith("tensor(") and kind not in ("tensor(string)", "tensor(bfloat16)")

    outputs = {o.name: o.type for o in session.get_outputs()}
    return all(numeric(i.type) for i in session.get_inputs()) and all(numeric(outputs[n]) for n in names)


def make_writer(path: Path, name: str, first, batch_rows: int, total_rows: int, n_batches: int, axis: int = 0):
    """The writer of one output: a memory-mapped .npy for a numeric tensor, else one in memory
    (strings as a unicode .npy; a sequence as an .npz of its items; an empty optional as no file)."""
    if isinstance(first, np.ndarray) and first.dtype != object:
        return _OutputWriter(path, first, batch_rows, total_rows, n_batches, axis)
    if n_batches > 1 and not isinstance(first, np.ndarray):
        raise UserError(f"output '{name}' is a sequence or optional value, which cannot be joined across "
                        f"{n_batches} batches", hint="run the inputs as one batch (no --batch-size)")
    return _ValueWriter(path, first, batch_rows, n_batches, axis)


class _ValueWriter:
    """An output held in memory and written at the end: strings (object arrays from onnxruntime),
    sequences (a list: ``<name>.npz`` with items "0", "1", ...) and optionals (None: no file)."""

    def __init__(self, path: Path, first, batch_rows: int, n_batches: int, axis: int):
        self.path, self.n_batches, self.parts = path, n_batches, []
        self.kind = "tensor" if isinstance(first, np.ndarray) else "sequence" if isinstance(first, list) else "optional"
        self.axis = axis if isinstance(first, np.ndarray) and first.ndim > axis and first.shape[axis] == batch_rows else None
        if self.kind == "sequence":
            self.path = path.with_suffix(".npz")

    def add(self, name: str, value, valid: int) -> None:
        if self.kind == "tensor":
            value = np.asarray(value).astype(str)
            if self.axis is not None:
                value = np.moveaxis(np.moveaxis(value, self.axis, 0)[:valid], 0, self.axis)
        self.parts.append(value)

    def close(self) -> None:
        from ascendpipe.fsutil import atomic_path

        if self.kind == "optional" and self.parts[0] is None:
            self.path = None
            return
        if self.kind == "sequence":
            with atomic_path(self.path) as tmp, open(tmp, "wb") as fh:
                np.savez(fh, **{str(i): np.asarray(v) for i, v in enumerate(self.parts[0])})
            return
        value = (self.parts[0] if self.n_batches == 1 else np.concatenate(self.parts, self.axis)
                 if self.axis is not None else np.stack(self.parts))
        self.shape, self.dtype = list(value.shape), "str"
        from ascendpipe.inputs import save_npy_atomic

        save_npy_atomic(self.path, value)

    def entry(self) -> dict:
        if self.path is None:
            return {"file": None, "kind": "optional", "value": None}
        if self.kind == "sequence":
            items = self.parts[0]
            return {"file": f"{OUTPUTS_DIR}/{self.path.name}", "kind": "sequence", "length": len(items),
                    "dtype": str(items[0].dtype) if items else None}
        return {"file": f"{OUTPUTS_DIR}/{self.path.name}", "shape": self.shape, "dtype": self.dtype}


class _OutputWriter:
    """One output's .npy, filled row by row through a memory map; renamed into place at the end.
    One batch keeps the model's shape; batches join along the output's batch axis (an output without
    one, a loss, gets a leading axis of one entry per batch)."""

    def __init__(self, path: Path, first: np.ndarray, batch_rows: int, total_rows: int, n_batches: int,
                 axis: int = 0):
        self.path = path
        if not (first.ndim > axis and first.shape[axis] == batch_rows):
            axis = 0  # the declared batch axis does not hold the batch: fall back to axis 0
        self.axis = axis  # a state output keeps its batch where the model has it ([2, B, H]: axis 1)
        self.batched = first.ndim > axis and first.shape[axis] == batch_rows
        self.single = n_batches == 1 and not self.batched
        rest = first.shape[:axis] + first.shape[axis + 1:]
        shape = ((*first.shape[:axis], total_rows, *first.shape[axis + 1:]) if self.batched
                 else first.shape if self.single else (n_batches, *first.shape))
        self.item_shape = rest if self.batched else first.shape
        self._atomic = atomic_path(path)  # the one temp-file-and-rename (ascendpipe.fsutil)
        tmp = self._atomic.__enter__()
        try:
            self.array = np.lib.format.open_memmap(tmp, mode="w+", dtype=first.dtype, shape=shape)
            _reserve(tmp)
        except BaseException:
            self.array = None
            self._atomic.__exit__(OSError, None, None)  # removes the temp file
            raise
        self.shape, self.dtype = list(shape), str(first.dtype)
        self.row = 0

    def add(self, name: str, value: np.ndarray, valid: int) -> None:
        axis = self.axis
        item_shape = value.shape[:axis] + value.shape[axis + 1:] if self.batched else value.shape
        if tuple(item_shape) != tuple(self.item_shape):
            raise UserError(
                f"output '{name}' changes shape between batches ({list(self.item_shape)} then {list(item_shape)}); "
                "outputs are concatenated along axis 0",
                hint="run with a batch size that keeps the output shape fixed",
            )
        if self.batched:
            rows = np.moveaxis(np.moveaxis(value, axis, 0)[:valid], 0, axis)
            index = (slice(None),) * axis + (slice(self.row, self.row + valid),)
            self.array[index] = rows
            self.row += valid
        elif self.single:
            self.array[...] = value
        else:
            self.array[self.row] = value
            self.row += 1

    def close(self) -> None:
        self.array.flush()
        del self.array
        self._atomic.__exit__(None, None, None)

    def entry(self) -> dict:
        return {"file": f"{OUTPUTS_DIR}/{self.path.name}", "shape": self.shape, "dtype": self.dtype}


# --- running ------------------------------------------------------------------------------------

def _check_batch(specs, batch: dict) -> None:
    names = [s.name for s in specs]
    if sorted(batch) != sorted(names):
        raise UserError(f"feed names {few(sorted(batch))} do not match the model inputs {few(names)}")
    for spec in specs:
        check_array(spec, batch[spec.name])


def infer_model(model_path, batches: Sequence[dict], out_dir, *, warmup: int = 1, loops: int = 1,
                progress=None, output_names: Sequence[str] | None = None, session=None,
                source: str | None = None, timings_in_file: bool = True, workspace=None) -> dict:
    """Run ``batches`` through the model; write ``outputs/*.npy`` and ``summary.json``; return the summary.

    ``timings_in_file=False`` (a pipeline stage): summary.json keeps only what the outputs determine
    (no timings, no pid; paths relative to ``workspace``), so two builds write it byte-identical and
    a downstream stage is cut off when the outputs did not change; the returned summary has it all."""
    from ascendpipe.backends.onnxruntime.session import input_specs, make_session

    if loops < 1 or warmup < 0:
        raise UserError(f"loops must be >= 1 and warmup >= 0 (given loops={loops}, warmup={warmup})")
    if not batches:
        raise UserError("no input batches to run")
    session = session or make_session(model_path)
    specs = input_specs(session)
    names = list(output_names) if output_names else [o.name for o in session.get_outputs()]
    known = {o.name for o in session.get_outputs()}
    unknown = [n for n in names if n not in known]
    if unknown:
        raise UserError(f"unknown output names {few(unknown)}; the model outputs {few(sorted(known), 12)}")
    for batch in batches:
        _check_batch(specs, batch)
    out_axes = _output_batch_axes(session, batches[0])

    out_dir = Path(out_dir)
    outputs_dir = out_dir / OUTPUTS_DIR
    outputs_dir.mkdir(parents=True, exist_ok=True)
    files = unique_file_names(names)
    rows_of = [_rows(b) for b in batches]
    valid_of = [getattr(b, "valid", r) for b, r in zip(batches, rows_of)]
    total_valid = sum(valid_of)

    from ascendpipe.backends.onnxruntime.session import checked_run, ort_value

    for _ in range(warmup):
        checked_run(session.run, names, dict(batches[0]))

    compute, h2d, d2h = [], [], []
    writers: dict[str, _OutputWriter] = {}
    bar = Progress(len(batches), _progress_stream(progress))
    bindable = _bindable(session, names)
    for index, batch in enumerate(batches):
        t0 = time.perf_counter()
        feed = {name: feed_array(array) for name, array in batch.items()}
        if bindable:
            binding = session.io_binding()
            for name, array in feed.items():
                value = ort_value(array)  # a bfloat16 array goes as an OrtValue
                if value is array:
                    binding.bind_cpu_input(name, array)
                else:
                    binding.bind_ortvalue_input(name, value)
            for name in names:
                binding.bind_output(name)
        h2d.append((time.perf_counter() - t0) * 1000)
        for _ in range(loops):
            t0 = time.perf_counter()
            if bindable:
                checked_run(session.run_with_iobinding, binding)
            else:  # strings, sequences, optionals: onnxruntime binds numeric tensors only
                values = checked_run(session.run, names, feed)
            compute.append((time.perf_counter() - t0) * 1000)
        t0 = time.perf_counter()
        if bindable:
            values = binding.copy_outputs_to_cpu()
        d2h.append((time.perf_counter() - t0) * 1000)
        for name, value in zip(names, values):
            if name not in writers:
                writers[name] = make_writer(outputs_dir / files[name], name, value, rows_of[index],
                                            total_valid, len(batches), out_axes.get(name, 0))
            writers[name].add(name, value, valid_of[index])
        bar.update(index + 1)
    for writer in writers.values():
        writer.close()

    batch_size = rows_of[0]
    stats = {k: v for k, v in latency_stats(compute).items() if k in LATENCY_KEYS}
    summary = {
        "filesinfo": {"source": source, "batches": len(batches), "samples": total_valid},
        "args": {"model": str(model_path), "warmup_count": warmup, "loop": loops, "batchsize": batch_size,
                 "backend": "onnxruntime"},
        "time_measured_on": HOST_TIME,  # every time below is the host CPU's (onnxruntime), not an NPU's
        "host_compute_time": ais_bench_stats(compute),  # the same numbers as NPU_compute_time, named for what they are
        "NPU_compute_time": ais_bench_stats(compute),
        "H2D_latency": ais_bench_stats(h2d),
        "D2H_latency": ais_bench_stats(d2h),
        "throughput": throughput(batch_size, stats["mean"]),
        "npu_compute_time_list": compute,
        "pid": os.getpid(),
        "latency_ms": stats,
        "batch_size": batch_size,
        "batches": len(batches),
        "samples": total_valid,
        "outputs": {name: w.entry() for name, w in writers.items()},
    }
    write_json_atomic(out_dir / SUMMARY_FILE, summary if timings_in_file else deterministic_summary(summary, workspace))
    return summary


def _output_batch_axes(session, batch) -> dict[str, int]:
    """Each output's batch axis: where its declared shape has the batch dim's name (a state output
    [2, B, H] keeps its batch on axis 1), else 0."""
    axes = getattr(batch, "axes", None) or {}
    symbols = []  # the batch dim's names: each batched input's (x [B, 4] and a state [2, S, 4]: B and S)
    for spec in session.get_inputs():
        axis = axes.get(spec.name, 0)
        if axis is not None and len(spec.shape or []) > axis and isinstance(spec.shape[axis], str):
            symbols.append(spec.shape[axis])
    found = {}
    for out in session.get_outputs():
        shape = list(out.shape or [])
        symbol = next((s for s in symbols if s in shape), None)
        if symbol is not None:
            found[out.name] = shape.index(symbol)
    return found


TIMING_KEYS = ("time_measured_on", "host_compute_time", "NPU_compute_time", "H2D_latency", "D2H_latency", "throughput", "npu_compute_time_list", "pid",
               "latency_ms")


def deterministic_summary(summary: dict, workspace=None) -> dict:
    """The keys of a summary that the model and inputs fix, paths made workspace-relative."""
    from ascendpipe.fsutil import workspace_relative

    kept = {k: v for k, v in summary.items() if k not in TIMING_KEYS}
    # warm-up and loop counts shape the timings only: with them the outputs would differ by a setting
    # that cannot change a value, and every stage downstream would rerun
    kept["args"] = {k: v for k, v in kept.get("args", {}).items() if k not in ("warmup_count", "loop")}
    kept["timings"] = "in the run record: `ascendpipe show RUN` (info.latency and the stage's metrics)"
    return workspace_relative(kept, workspace) if workspace is not None else kept


def _rows(batch: dict) -> int:
    if hasattr(batch, "rows"):  # an inputs.Batch knows each input's batch axis (a state's may be 1)
        return batch.rows
    first = next(iter(batch.values()))
    return first.shape[0] if first.ndim else 1


# --- the stage (called by ascendpipe.backends.onnxruntime.stages.infer) --------------------------

INPUT_SUBDIRS = ("outputs", "data", "inputs")  # where upstream stages keep arrays in their out dir


def resolve_inputs_path(path: Path) -> Path:
    """An inputs path as given, or the arrays folder inside an upstream stage's output directory."""
    path = Path(path)
    if not path.is_dir() or any(p.suffix in (".npy", ".npz") for p in path.iterdir() if p.is_file()):
        return path
    for sub in INPUT_SUBDIRS:
        candidate = path / sub
        if candidate.is_dir() and any(p.suffix in (".npy", ".npz") for p in candidate.iterdir()):
            return candidate
    return path  # load_inputs says what is missing


def stage_batches(ctx, specs, *, batch_size: int | None, seed: int, cap: bool = False) -> tuple[list, str]:
    """The stage's batches and a description of where they came from (``cap``: see ``load_inputs``)."""
    from ascendpipe.inputs import load_inputs, random_inputs

    axes = ctx.params.get("batch_axes")
    if "inputs" in ctx.inputs:
        from ascendpipe.precision.dynamic_shapes import check_feeds  # a feed the OM would refuse

        path = resolve_inputs_path(ctx.inputs["inputs"])
        batches = load_inputs(path, specs, batch_size=batch_size, batch_axes=axes, cap=cap)
        check_feeds(ctx, batches)
        return batches, str(path)
    ctx.say(f"no inputs given: using random inputs (seed {seed})")
    return [random_inputs(specs, seed=seed, batch_size=batch_size, batch_axes=axes)], f"random(seed={seed})"


def run_stage(ctx):
    from ascendpipe.backends.onnxruntime.session import input_specs, make_session
    from ascendpipe.contract import StageResult, find_model_file

    params = ctx.params
    try:
        model = find_model_file(ctx.inputs["model"])
        session = make_session(model)
        batches, source = stage_batches(ctx, input_specs(session), batch_size=params.get("batch_size"),
                                        seed=params.get("seed", 0))
        summary = infer_model(model, batches, ctx.out_dir, warmup=params.get("warmup", 1),
                              loops=params.get("loops", 1), progress=ctx.log, session=session,
                              output_names=params.get("output_names"), source=source,
                              timings_in_file=False, workspace=ctx.workspace)
    except UserError as err:
        raise err.with_location(stage=ctx.name)
    ctx.say(console_summary(summary))
    # timings are the run record's (metrics, info.latency), never the outputs': outputs feed keys
    metrics = {"latency_ms_mean": summary["latency_ms"]["mean"], "latency_ms_p99": summary["latency_ms"]["p99"],
               "throughput": summary["throughput"]}
    from ascendpipe.fsutil import workspace_relative

    latency = {k: summary[k] for k in ("time_measured_on", "NPU_compute_time", "H2D_latency", "D2H_latency", "latency_ms",
                                       "throughput")}
    latency["warmup_count"], latency["loop"] = summary["args"]["warmup_count"], summary["args"]["loop"]
    return StageResult(metrics=metrics, info=workspace_relative({"model": str(model), "inputs": source, "samples": summary["samples"],
                                                                 "batch_size": summary["batch_size"], "latency": latency}, ctx.workspace))
