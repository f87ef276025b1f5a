"""Writing a dump: each tensor's ``.npy`` (as the device holds it: float16 where that is exact) and
its index entry. Split from ``dump`` (which plans and runs the model); pure numpy and file writes."""

from __future__ import annotations

import errno
import os
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from ascendpipe.contract import DUMP_TENSORS_DIR
from ascendpipe.tensorstats import tensor_stats  # also dump.tensor_stats, as before

TENSORS_DIR = DUMP_TENSORS_DIR


@dataclass
class Planned:
    """A tensor to dump, known before running."""

    name: str
    op_name: str
    op_type: str
    topo_index: int
    as_float16: bool = False  # leaves an emulation fp16 rounding: store as the device holds it
    size: int | None = None  # estimated bytes, None if unknown
    device_fp16: bool = False  # its op runs in fp16 on the device: stored as fp16 when that is exact


def planned_bytes(plan: list[Planned]) -> int:
    """The tensors' estimated bytes: an unknown size counts as the largest known one (as segments do)."""
    known = [p.size for p in plan if p.size is not None]
    fallback = max(known, default=0)
    return sum(fallback if p.size is None else p.size for p in plan)


def compact(value: np.ndarray, item: Planned) -> np.ndarray:
    """The array as stored: float16 where the device holds float16 and the values are exactly that.

    A tensor leaving an emulation rounding is fp16 by construction. An fp16 op whose output is not
    rounded again (Relu, Flatten, MaxPool of fp16 values, a fused kernel's inner op) holds fp16
    values too, but that is checked element by element (bit-exact round trip, NaN and inf
    included) rather than assumed: the dump never loses a bit, so compare reads the same numbers.
    """
    if value.dtype != np.float32 or not (item.as_float16 or item.device_fp16):
        return value
    from ascendpipe.backends.onnxruntime import half as float16

    if item.as_float16:
        return float16.narrow(value)  # exact: the emulation already rounded to fp16 (no read-back to check)
    # (the conversion keeps the sign of zero, so equal values are equal bits up to NaN payloads)
    half = float16.exact_half(value)
    return value if half is None else half


def _entry(planned: Planned | None, name: str, array: np.ndarray, file: str, values: np.ndarray | None = None) -> dict:
    """The index entry of ``array`` as stored; its stats are read from ``values`` when given (the
    same numbers in another dtype)."""
    entry = {
        "name": name,
        "op_name": planned.op_name if planned else name,
        "op_type": planned.op_type if planned else "Input",
        "topo_index": planned.topo_index if planned else -1,
        "dtype": str(array.dtype),
        "shape": list(array.shape),
        "file": file,
    }
    entry.update(tensor_stats(array if values is None else values))
    return entry


STATS_CHUNK = 1 << 16  # elements per float64 block of the sums


def summary_stats(array: np.ndarray) -> dict:
    """msprobe's statistics level (``TensorStatInfo``: max, min, mean, L2 norm; mindstudio-probe 26.2.0
    ``core/dump/data_dump/data_processor/pytorch_processor.py:380-432``) with the NaN/inf counts compare
    reads: min/max, mean and norm over the finite values, in float64 (msprobe's NaN would propagate into
    all four; the counts say where it is)."""
    stats = tensor_stats(array)
    stats.update(mean=None, norm=None, finite=0)
    if array.size == 0 or array.dtype.kind not in "fiub":
        return stats
    flat = array.reshape(-1)
    total = squares = 0.0
    count = 0
    # float64 work arrays reused per block, numpy's own pairwise sums (never BLAS: its result depends on
    # its build and threads, and the index must be the same everywhere; np.dot here was 30x slower too)
    wide, square = np.empty(min(STATS_CHUNK, flat.size)), np.empty(min(STATS_CHUNK, flat.size))
    masked = bool(stats["nan"] or stats["inf"])
    for start in range(0, flat.size, STATS_CHUNK):
        part = flat[start:start + STATS_CHUNK]
        if masked:
            part = part[np.isfinite(part)]
        block, sq = wide[:part.size], square[:part.size]
        np.copyto(block, part, casting="unsafe")
        np.multiply(block, block, out=sq)
        total += float(np.add.reduce(block))
        squares += float(np.add.reduce(sq))
        count += part.size
    if count:
        stats.update(mean=total / count, norm=float(np.sqrt(squares)), finite=count)
    return stats


def summary_entry(planned: Planned, name: str, value: np.ndarray) -> dict:
    """The index entry of a tensor dumped as statistics only (no file): its stored dtype (``compact``) and
    shape, ``statistics`` true, and ``summary_stats``."""
    stored = compact(value, planned) if isinstance(value, np.ndarray) else value
    entry = {"name": name, "op_name": planned.op_name, "op_type": planned.op_type, "topo_index": planned.topo_index,
             "dtype": str(stored.dtype), "shape": list(stored.shape), "statistics": True}
    entry.update(summary_stats(value))
    return entry


def _save_npy(path: Path, array: np.ndarray) -> None:
    """One tensor file, written in place: the dump's index is removed before and written last
    (atomically), so no index ever names a half-written file; a temp file and rename per tensor
    cost more than the write of a small one."""
    try:
        with open(path, "wb") as handle:
            if array.dtype == object:  # onnxruntime's strings: numpy unicode (an .npy holds no objects)
                array = array.astype(str)
            np.save(handle, np.require(array, requirements="C"), allow_pickle=False)  # a 0-d tensor stays 0-d
    except OSError as exc:
        # numpy reports a short write with no errno or path ("Not enough free space to write N bytes",
        # "N requested and M written"): where the file system has no room for the array, it is the
        # full disk it looks like, said with the file's name
        from ascendpipe.store.failures import free_bytes

        if exc.errno is None and (free_bytes(str(path)) or 0) < array.nbytes:
            raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC), str(path)) from None
        raise


def _write_inputs(specs, feeds, tensors_dir: Path, input_entries: dict) -> list[dict | None]:
    entries = []
    for position, spec in enumerate(specs):
        array = np.asarray(feeds[spec.name])
        file = f"{TENSORS_DIR}/{position:05d}.npy"
        _save_npy(tensors_dir.parent / file, array)
        input_entries[spec.name] = {"shape": list(array.shape), "dtype": str(array.dtype)}
        entries.append(_entry(None, spec.name, array, file))
    return entries
