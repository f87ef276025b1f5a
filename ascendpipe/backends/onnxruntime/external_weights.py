"""A converted model whose source keeps its weights in external data (past protobuf's 2 GB).

convert reads the graph without the weights (each a reference into its file), inlines only the small
ones a graph edit reads, and writes the emulated model beside its weights: a weight no fp16 op reads
keeps referencing the source's file (under ``source_weights/``: reflinked, else hard-linked where the
source is a stage's output, else copied); a weight the device reads in fp16 is rounded as it is
streamed, chunk by chunk, into the model's own ``model.emulated.data`` (never a name the source
uses), as is every other weight the conversion made (folds, AIPP). Every source reference is checked
by the strict reader, and the disk's free space against what is written, before a byte is written;
after writing, each weight is compared with what was meant (``verify``). The protobuf stays the
graph's size, and the whole model is never in memory at once.
"""

from __future__ import annotations

import os
from dataclasses import dataclass, field
from pathlib import Path

from ascendpipe import onnxexternal
from ascendpipe.backends.onnxruntime.rounding import Rounding
from ascendpipe.errors import Location, UserError
from ascendpipe.fsutil import atomic_path

SOURCE_PREFIX = "source_weights/"  # the source's weights files, under their own names (no clash with ours)
OWN_DATA = "model.emulated.data"  # the converted model's own weights file: never a name the source uses
# (the source's files all go under SOURCE_PREFIX), never "model.onnx.data" (the name of the source stage's)
INLINE_MAX = 64 << 10  # external weights this small are read into the graph: shapes, norms, biases
OWN_MIN = 1024  # weights the conversion made at least this big go to the model's own data file
CHUNK = 1 << 23  # elements rounded at a time (32 MB of fp32)
PAGE = 4096  # big weights start on a page, so onnxruntime can map them


def read(model_path: Path):
    """(the model read without its weights, the same as the model to edit, external?): an external
    model's small weights are inlined in the copy to edit (what shape inference and the folds read)."""
    import onnx

    original = onnx.load(str(model_path), load_external_data=False)
    if not onnxexternal.has_external(original):
        return original, None, False
    model = onnx.ModelProto()
    model.CopyFrom(original)
    folded = {t for n in model.graph.node if n.op_type in ("BatchNormalization", "Conv") for t in n.input[1:]}
    onnxexternal.inline_small(model, model_path.parent, INLINE_MAX, folded)
    return original, model, True


@dataclass
class ExternalRounding(Rounding):
    """Rounding whose external weights are rounded when they are written (``write``), not in memory."""

    base_dir: Path = Path(".")
    pending: dict = field(default_factory=dict)  # new tensor name -> the source tensor (its bytes' place)
    formats: dict = field(default_factory=dict)  # new tensor name -> the format it is rounded to (fp16, bf16, HF32)

    def weight(self, tensor, name: str, fmt: str = "float16"):
        if not onnxexternal.is_external(tensor):
            return super().weight(tensor, name, fmt)
        import onnx

        if tensor.data_type != onnx.TensorProto.FLOAT:
            raise UserError(f"weight '{tensor.name}' rounded to {fmt} is not float32", Location(op=tensor.name))
        if not onnxexternal.external_info(tensor)[0]:  # rounded already (a second reader): the same values
            source = self.pending[tensor.name]
        else:
            source = onnx.TensorProto()
            source.CopyFrom(tensor)
        self.pending[name] = source
        self.formats[name] = fmt
        rounded = onnx.TensorProto(name=name, data_type=tensor.data_type, dims=tensor.dims,
                                   data_location=onnxexternal.EXTERNAL)
        rounded.external_data.add(key="location", value="")  # set by write()
        return rounded


def write(model, out_dir: Path, source_dir: Path, rounding: ExternalRounding, data_name: str = OWN_DATA, *,
          link: bool = False, label: str | None = None) -> dict:
    """Write ``out_dir/data_name`` (the rounded weights and the conversion's own big ones) and place the
    source's weights files the model still references under ``source_weights/`` (``link``: hard-linked
    where no reflink is possible, for a source that is a file of ours); point every reference there.
    Every source reference is checked (the strict reader) and the disk's free space against what will
    be written, before a byte is written. Returns (the record for convert.json: {"data_file",
    "rounded", "own", "source_files": {location: reflinked|linked|copied}}, what ``verify`` checks)."""
    import hashlib

    import numpy as np
    from onnx import numpy_helper

    label = label or str(source_dir)
    rounded_tensors, own_tensors = [], []
    for tensor in onnxexternal.initializers(model):
        if _ours(tensor, rounding):
            (rounded_tensors if onnxexternal.is_external(tensor) else own_tensors).append(tensor)
    # every other external tensor, a Constant's value included, still reads the source's bytes
    source_tensors = [t for t in onnxexternal.external_tensors(model) if not _ours(t, rounding)]
    sources = {id(t): onnxexternal.resolve_tensor(t, source_dir, label) for t in source_tensors}
    pending = {t.name: onnxexternal.resolve_tensor(rounding.pending[t.name], source_dir, label)
               for t in rounded_tensors}
    _check_disk(out_dir, rounded_tensors, own_tensors, sources.values(), link, label)
    expected: list[tuple] = []
    rounded = own = 0
    offset = 0
    if not rounded_tensors and not own_tensors:  # no file of our own to write
        (out_dir / data_name).unlink(missing_ok=True)  # an earlier conversion's, in a reused folder
    else:
        with atomic_path(out_dir / data_name) as tmp, open(tmp, "wb") as handle, _Writer(handle) as data:
            def start(nbytes: int) -> int:
                nonlocal offset
                align = PAGE if nbytes >= PAGE else 16
                pad = -offset % align
                data.write(b"\0" * pad)
                offset += pad
                return offset

            def refer(tensor, at: int, nbytes: int) -> None:
                del tensor.external_data[:]
                tensor.data_location = onnxexternal.EXTERNAL
                for key, value in (("location", data_name), ("offset", str(at)), ("length", str(nbytes))):
                    tensor.external_data.add(key=key, value=value)

            buffers = None
            for tensor in rounded_tensors:
                ref = pending[tensor.name]
                fmt = rounding.formats.get(tensor.name, "float16")
                at = start(ref.length)
                buffers = buffers or _Buffers()
                _round_stream(ref, rounding, data, buffers, fmt)
                offset += ref.length
                refer(tensor, at, ref.length)
                expected.append((tensor.name, "rounded", ref, fmt))
                rounded += 1
            for tensor in own_tensors:
                # raw_data as ONNX stores it (4-bit types packed, little-endian); else the values' bytes
                raw = tensor.raw_data if tensor.HasField("raw_data") else \
                    np.ascontiguousarray(numpy_helper.to_array(tensor)).tobytes()
                at = start(len(raw))
                data.write(raw)
                offset += len(raw)
                for kind in ("raw_data", "float_data", "int32_data", "int64_data", "double_data", "uint64_data"):
                    tensor.ClearField(kind)
                refer(tensor, at, len(raw))
                expected.append((tensor.name, "own", hashlib.sha256(raw).hexdigest(), len(raw)))
                own += 1
    # each file placed once, however many tensors read it
    placed = onnxexternal.place_weights(source_tensors, source_dir, out_dir, SOURCE_PREFIX, link=link, label=label)
    expected += [(tensor.name, "source", sources[id(tensor)], None) for tensor in source_tensors]
    record = {"data_file": data_name if rounded or own else None, "rounded": rounded, "own": own,
              "source_files": placed}
    return record, expected


def _check_disk(out_dir: Path, rounded, own, sources, link: bool, label: str) -> None:
    """A UserError, one line with the numbers, where the bytes this conversion writes are past the
    free space of ``out_dir``'s file system (a source file linked or reflinked costs none; counted
    as a copy where neither may work)."""
    import shutil

    from ascendpipe.onnxexternal import size_text

    files = {ref.path: os.path.getsize(ref.path) for ref in sources}
    writing = sum(onnxexternal.tensor_nbytes(t) for t in rounded) + sum(onnxexternal.tensor_nbytes(t) for t in own)
    copying = 0 if link else sum(files.values())
    try:
        free = shutil.disk_usage(out_dir).free
    except OSError:
        return
    if writing + copying > free:
        raise UserError(f"convert needs {size_text(writing + copying)} of disk in {out_dir} (weights written: "
                        f"{size_text(writing)}, weights files copied: {size_text(copying)}) and {size_text(free)} "
                        "is free: free space there or convert to another disk", Location(file=label))


WINDOW = 4096  # bytes compared at the start, middle and end of each weight (all of a smaller one)


def _windows(nbytes: int, align: int = 16) -> list[tuple[int, int]]:
    """(start, size) of the parts of a weight of ``nbytes`` that ``verify`` compares."""
    if nbytes <= 3 * WINDOW:
        return [(0, nbytes)]
    middle = (nbytes // 2) // align * align
    last = (nbytes - WINDOW) // align * align
    return [(0, WINDOW), (middle, WINDOW), (last, nbytes - last)]


def verify(model_file: Path, out_dir: Path, expected: list[tuple], rounding: Rounding, label: str) -> None:
    """The written model's weights hold the bytes meant for them: each reference of ``model_file``
    (re-read from disk, through the strict reader, against ``out_dir``) compared, at its start, middle
    and end, with the source's bytes (a weight placed unrounded), the source's bytes rounded (a weight
    rounded as it was streamed), or, whole, with the digest of what was written (a weight the
    conversion made). A difference is a bug of ours and says so: no model is left that loads and
    reads another weight's bytes."""
    import hashlib

    import numpy as np

    written: dict[str, list] = {}
    for ref in onnxexternal.references(model_file, folder=out_dir, label=label):
        written.setdefault(ref.tensor, []).append(ref)
    for name, kind, meant, fmt in expected:
        refs = written.get(name) or []
        if not refs:
            raise _mismatch(name, "is not external data in the written model", label)
        ref = refs.pop(0)
        with open(ref.path, "rb") as handle:
            if kind == "own":
                digest, nbytes = meant, fmt
                handle.seek(ref.offset)
                if ref.length != nbytes or hashlib.sha256(handle.read(ref.length)).hexdigest() != digest:
                    raise _mismatch(name, f"does not hold the {nbytes} bytes written for it", label)
                continue
            if ref.length != meant.length:
                raise _mismatch(name, f"has {ref.length} bytes where {meant.length} were meant", label)
            with open(meant.path, "rb") as source:
                for at, size in _windows(ref.length):
                    handle.seek(ref.offset + at)
                    got = handle.read(size)
                    source.seek(meant.offset + at)
                    want = source.read(size)
                    if kind == "rounded":
                        values = np.frombuffer(want, dtype="<f4").copy()
                        want = np.ascontiguousarray(rounding.values(values, fmt), dtype="<f4").tobytes()
                    if got != want:
                        raise _mismatch(name, f"holds other bytes than its {kind} values at byte {at}", label)


def _mismatch(name: str, what: str, label: str) -> UserError:
    return UserError(f"the converted model's weight '{name}' {what}: a bug in ascendpipe's convert (please report "
                     "it); the model is not written", Location(file=label))


class _Writer:
    """Writes to ``handle`` on one thread of its own, in order, so rounding the next chunk overlaps
    writing this one (a 2.4 GB model: 4.5 s of rounding and 7.5 s of writing, one after the other).
    At most ``depth`` chunks wait; an error in a write is raised at the next write or at the end."""

    def __init__(self, handle, depth: int = 2):  # depth + 1 < _Buffers.RING
        from concurrent.futures import ThreadPoolExecutor

        self.handle, self.depth, self.waiting = handle, depth, []
        self.pool = ThreadPoolExecutor(max_workers=1)

    def write(self, data) -> None:
        while len(self.waiting) >= self.depth:
            self.waiting.pop(0).result()
        self.waiting.append(self.pool.submit(self.handle.write, data))

    def __enter__(self):
        return self

    def __exit__(self, *exc) -> None:
        try:
            for job in self.waiting:
                job.result()
        finally:
            self.pool.shutdown(wait=True)


def _ours(tensor, rounding: ExternalRounding) -> bool:
    """Whether ``tensor`` goes to the converted model's own data file: a weight rounded as it is
    written, or a big one the conversion made in memory."""
    if onnxexternal.is_external(tensor):
        return tensor.name in rounding.pending and not onnxexternal.external_info(tensor)[0]
    return tensor.data_type != onnxexternal.STRING and onnxexternal.tensor_nbytes(tensor) >= OWN_MIN


class _Buffers:
    """The chunk buffers of one ``write``, made once: the read buffer, the float16 one and a ring of
    output buffers the writer thread reads from (``RING`` > the writer's depth + 1, so a buffer is
    reused only once its write is done). Fresh arrays per chunk cost their page faults: measured 0.75 s
    a GB of rounding against 0.2 s with the ring."""

    RING = 4

    def __init__(self):
        import numpy as np

        self.read = np.empty(CHUNK, np.float32)
        self.half = np.empty(CHUNK, np.float16)
        self.ring = [np.empty(CHUNK, np.float32) for _ in range(self.RING)]
        self.turn = 0
        self.fast = None  # onnxruntime's Cast gives the rounding's own bits: checked on the first chunk

    def output(self, size: int):
        self.turn = (self.turn + 1) % self.RING
        return self.ring[self.turn][:size]


def _round_stream(ref, rounding: Rounding, out, buffers: _Buffers, fmt: str = "float16") -> None:
    """Read a source weight's fp32 bytes (``ref``: resolved by the strict reader) from its file a chunk
    at a time, round them to ``fmt``, write them to ``out``. fp16 goes through onnxruntime's Cast where
    it gives the rounding's own bits; bf16 and HF32 through ``Rounding.values`` (numpy)."""
    import numpy as np

    with open(ref.path, "rb") as handle:
        handle.seek(ref.offset)
        left = ref.length // 4
        while left:
            view = buffers.read[:min(left, CHUNK)]
            got = handle.readinto(memoryview(view).cast("B"))
            if got != view.nbytes:
                raise UserError(f"the weights file '{ref.location}' is shorter than weight '{ref.tensor}' needs "
                                "(it changed while it was read)", Location(file=str(ref.path)))
            if fmt != "float16":
                rounded = rounding.values(view, fmt)
            elif buffers.fast is False:
                rounded = rounding.values(view)
            else:
                reference = rounding.values(view) if buffers.fast is None else None
                rounded = _cast_round_trip(view, buffers, rounding.saturate)
                if reference is not None:
                    from ascendpipe.backends.onnxruntime.half import equal_bits

                    buffers.fast = equal_bits(rounded, reference)
                    rounded = rounded if buffers.fast else reference
            out.write(memoryview(np.ascontiguousarray(rounded, dtype="<f4")).cast("B"))
            left -= view.size


def _cast_round_trip(view, buffers: _Buffers, saturate: bool):
    """``view`` (float32) as GE's host conversion makes it fp16 (``precision.fp16.host_fp16``, the same
    in every overflow mode): rounded to fp16 and back through onnxruntime's vectorised Cast (``half.py``:
    ~1 ns an element here against numpy's scalar ~11, under load), into the next ring buffer (the writer
    thread reads it), then the host's exceptions past 65504."""
    from ascendpipe.backends.onnxruntime.half import MIN_ELEMENTS, _cast_into
    from ascendpipe.precision.fp16 import host_fp16, host_rule

    if view.size < MIN_ELEMENTS:
        return host_fp16(view)
    back = buffers.output(view.size)
    _cast_into("narrow", "half", view, buffers.half[:view.size])
    _cast_into("widen", "wide", buffers.half[:view.size], back)
    return host_rule(view, back)
