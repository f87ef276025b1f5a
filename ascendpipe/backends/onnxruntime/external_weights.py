"""A converted model whose source keeps its weights in external data (past protobuf's 2 GB).

convert reads the graph without the weights (each a reference into its file), inlines only the small
ones a graph edit reads, and writes the emulated model beside its weights: a weight no fp16 op reads
keeps referencing the source's file (reflinked, else copied, under ``source_weights/``); a weight
the device reads in fp16 is rounded as it is streamed, chunk by chunk, into the model's own
``model.onnx.data``, as is every other weight the conversion made (folds, AIPP). The protobuf stays
the graph's size, and the whole model is never in memory at once.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path

from ascendpipe import onnxexternal
from ascendpipe.backends.onnxruntime.rounding import Rounding
from ascendpipe.errors import Location, UserError
from ascendpipe.fsutil import atomic_path

SOURCE_PREFIX = "source_weights/"  # the source's weights files, under their own names (no clash with ours)
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


def write(model, out_dir: Path, source_dir: Path, rounding: ExternalRounding, data_name: str) -> dict:
    """Write ``out_dir/data_name`` (the rounded weights and the conversion's own big ones) and place the
    source's weights files the model still references; point every reference there. Returns a record:
    {"data_file", "rounded", "own", "source_files": {location: reflinked|copied}}."""
    import numpy as np
    from onnx import numpy_helper

    rounded = own = 0
    offset = 0
    if not any(_ours(t, rounding) for t in onnxexternal.initializers(model)):  # no file of our own to write
        (out_dir / data_name).unlink(missing_ok=True)  # an earlier conversion's, in a reused folder
        placed = onnxexternal.place_weights(model, source_dir, out_dir, SOURCE_PREFIX)
        return {"data_file": None, "rounded": 0, "own": 0, "source_files": placed}
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
        for tensor in onnxexternal.initializers(model):
            source = rounding.pending.get(tensor.name)
            if not _ours(tensor, rounding):
                continue
            if source is not None and onnxexternal.is_external(tensor):
                nbytes = onnxexternal.tensor_nbytes(source)
                at = start(nbytes)
                buffers = buffers or _Buffers()
                _round_stream(source, source_dir, rounding, data, nbytes, buffers,
                              rounding.formats.get(tensor.name, "float16"))
                offset += nbytes
                refer(tensor, at, nbytes)
                rounded += 1
            else:
                raw = np.ascontiguousarray(numpy_helper.to_array(tensor)).tobytes()
                at = start(len(raw))
                data.write(raw)
                offset += len(raw)
                for kind in ("raw_data", "float_data", "int32_data", "int64_data", "double_data", "uint64_data"):
                    tensor.ClearField(kind)
                refer(tensor, at, len(raw))
                own += 1
    placed = onnxexternal.place_weights(model, source_dir, out_dir, SOURCE_PREFIX, keep={data_name})
    return {"data_file": data_name, "rounded": rounded, "own": own, "source_files": placed}


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


def _round_stream(source, source_dir: Path, rounding: Rounding, out, nbytes: int, buffers: _Buffers,
                  fmt: str = "float16") -> None:
    """Read ``source``'s fp32 bytes from its file a chunk at a time, round them to ``fmt``, write them to
    ``out``. fp16 goes through onnxruntime's Cast where it gives the rounding's own bits; bf16 and HF32
    through ``Rounding.values`` (numpy)."""
    import numpy as np

    location, offset, length = onnxexternal.external_info(source)
    if length is not None and length != nbytes:
        raise UserError(f"weight '{source.name}': external data length {length} is not its {nbytes} bytes",
                        Location(op=source.name))
    with open(onnxexternal.resolve(source_dir, location), "rb") as handle:
        handle.seek(offset)
        left = nbytes // 4
        while left:
            view = buffers.read[:min(left, CHUNK)]
            got = handle.readinto(memoryview(view).cast("B"))
            if got != view.nbytes:
                raise UserError(f"the weights file '{location}' is shorter than weight '{source.name}' needs",
                                Location(file=str(source_dir / location)))
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
