"""Model inputs from files: loading, checking against the model's inputs, batching.

Pure numpy; no onnx/onnxruntime here (``InputSpec`` values come from a session, see
``ascendpipe.backends.onnxruntime.session.input_specs``).

Accepted sources:

- one ``.npy``: the samples of a single-input model;
- one ``.npz``: keys are input names;
- a directory of ``.npy``/``.npz`` files, taken in name order and concatenated along axis 0.
  A directory whose ``.npy`` stems are exactly the model's input names (an upstream ``infer``
  stage's ``outputs/``) is read as one ``.npz``.

Feeds that fit the model's declared input shapes (every fixed dim equal, any value for a symbolic
one; any rank, 0-d too; any dtype the model declares: bool, integers, strings as numpy unicode or
bytes arrays) run as they are: each file is one run, whatever its inputs' first axes hold (a
broadcasting Add's ``x [3,4,5]`` beside ``y [5]``, an attention's ``Q [2,...]`` beside its mask
``[4,...]``). Samples are re-batched only when asked (``batch_size``) or when a file holds more (or
fewer) samples than the model's fixed batch dim.

Each input has a batch axis: 0 unless declared (``batch_axes: {state: 1}``, ``--batch-axes
state=1``), or found from the model: an input whose axis 0 is fixed but which carries the batch dim's name elsewhere (a state
``[2, B, 128]`` beside ``x [B, 40]``) is batched on that axis. A 0-d input (a sample rate) has no
batch axis: it is one value for every batch (``batch_axes: {NAME: null}`` says the same of any
input). A *sample* is one slice along every batched input's batch axis: for a stateful model, one
stream's input and its state. All samples are concatenated and cut into batches of the batch size:
``batch_size`` if given, else the model's static batch dim; a model with a dynamic batch dim and no
``batch_size`` gets each file as one batch, as given. A last partial batch of a static-batch model
is padded by repeating its last sample; ``Batch.valid`` says how many rows are real.
"""

from __future__ import annotations

from dataclasses import dataclass, replace
from pathlib import Path
from typing import Sequence, Union

import numpy as np

from ascendpipe.errors import Location, UserError, few
from ascendpipe.npyheader import check_npy_sizes, npy_error  # noqa: F401 (npy_error: the readers' one wording)

Dim = Union[int, str, None]  # int: static; str: a named dynamic dim; None: an unnamed dynamic dim


@dataclass(frozen=True)
class InputSpec:
    name: str
    shape: tuple[Dim, ...]
    dtype: str  # a numpy dtype name: 'float32', 'uint8', ...
    batch_axis: int | None = 0  # None: not batched (one value for every batch)

    @property
    def axis(self) -> int | None:
        """The batch axis, or None for a 0-d input or one declared unbatched."""
        return self.batch_axis if self.shape and self.batch_axis is not None else None

    @property
    def static_batch(self) -> int | None:
        """The model's fixed batch size, or None when the batch dim is dynamic (or the input unbatched)."""
        if self.axis is None or not isinstance(self.shape[self.axis], int):
            return None
        return self.shape[self.axis]

    def describe(self) -> str:
        if not self.shape:
            return f"{self.dtype} [] (a scalar)"
        dims = []
        for axis, dim in enumerate(self.shape):
            if axis == self.axis:
                dims.append("N")  # samples are re-batched, so any count is fine on the batch axis
            elif isinstance(dim, int):
                dims.append(str(dim))
            else:
                dims.append(dim if isinstance(dim, str) and dim else "?")
        return f"{self.dtype} [{','.join(dims)}]"


def with_batch_axes(specs: Sequence[InputSpec], declared: dict | None = None) -> list[InputSpec]:
    """Specs with each input's batch axis: ``declared`` (name -> axis or None) first, else found
    from the model (see the module docstring). A declared name or axis the model lacks is a UserError."""
    declared = dict(declared or {})
    where = Location(field="batch_axes")
    names = [s.name for s in specs]
    for name, axis in declared.items():
        if name not in names:
            raise UserError(f"batch_axes names '{name}', which is not a model input; inputs: {few(names)}", where)
        rank = len(next(s for s in specs if s.name == name).shape)
        if axis is not None and (isinstance(axis, bool) or not isinstance(axis, int) or not 0 <= axis < rank):
            raise UserError(f"batch_axes '{name}': {axis!r} is not an axis of a rank-{rank} input "
                            f"(0..{rank - 1}, or null for an unbatched input)", where)
    symbol = next((s.shape[0] for s in specs if s.shape and isinstance(s.shape[0], str) and s.shape[0]), None)
    out = []
    for spec in specs:
        if spec.name in declared:
            axis = declared[spec.name]
        elif spec.batch_axis != 0:  # set before (declared): kept
            axis = spec.batch_axis
        elif not spec.shape:
            axis = None
        elif isinstance(spec.shape[0], int) and symbol is not None and symbol in spec.shape:
            axis = spec.shape.index(symbol)  # the batch dim's name sits on another axis: a state
        else:
            axis = 0
        out.append(replace(spec, batch_axis=axis))
    return out


def _take(array: np.ndarray, axis: int | None, start: int, stop: int) -> np.ndarray:
    if axis is None:
        return array
    index = [slice(None)] * array.ndim
    index[axis] = slice(start, stop)
    return array[tuple(index)]


class Batch(dict):
    """One feed: input name -> array. ``valid`` rows are real; the rest is padding. ``axes``: each
    input's batch axis (None: unbatched); ``rows``: the samples it holds."""

    def __init__(self, arrays: dict[str, np.ndarray], valid: int | None = None,
                 axes: dict[str, int | None] | None = None):
        super().__init__(arrays)
        self.axes = dict(axes) if axes is not None else {n: (0 if a.ndim else None) for n, a in arrays.items()}
        batched = [(a, self.axes.get(n)) for n, a in arrays.items() if self.axes.get(n) is not None]
        self.rows = batched[0][0].shape[batched[0][1]] if batched else 1
        self.valid = self.rows if valid is None else valid

    def head(self, count: int) -> "Batch":
        """The first ``count`` samples (unbatched inputs whole)."""
        arrays = {n: _take(a, self.axes.get(n), 0, count) for n, a in self.items()}
        return Batch(arrays, min(self.valid, count), self.axes)


def describe_array(array: np.ndarray) -> str:
    if not isinstance(array, np.ndarray):
        return f"a {type(array).__name__}"
    kind = "str" if array.dtype.kind in "US" else str(array.dtype)
    return f"{kind} [{','.join(str(d) for d in array.shape)}]"


STRING = "str"  # InputSpec.dtype of a string tensor
BFLOAT16 = "bfloat16"


def bfloat16() -> np.dtype:
    """numpy's bfloat16: ml_dtypes' (onnx's own dependency; numpy has none)."""
    import ml_dtypes

    return np.dtype(ml_dtypes.bfloat16)


def as_declared(spec: InputSpec, array):
    """``array`` in the dtype ``spec`` declares where it holds that type under another name: a bfloat16
    array saved by ``np.save`` (ml_dtypes 0.5 writes its descr as ``<V2``, numpy's 2-byte void, and
    np.load gives that void back) is read as bfloat16, byte for byte."""
    if (spec.dtype == BFLOAT16 and isinstance(array, np.ndarray) and array.dtype.kind == "V"
            and array.dtype.itemsize == 2 and array.dtype.names is None):
        return array.view(bfloat16())
    return array


def spec_dtype(spec: InputSpec, where: Location | None = None) -> np.dtype | None:
    """The numpy dtype an input takes (None: strings, which numpy holds as unicode, bytes or object
    arrays). A sequence, optional or map input, or an element type numpy has no dtype for, is refused
    in one line naming the input and why."""
    if spec.dtype == STRING:
        return None
    if spec.dtype == BFLOAT16:
        return bfloat16()
    try:
        return np.dtype(spec.dtype)
    except TypeError:
        pass
    kind = spec.dtype.split("(", 1)[0]
    why = {"seq": "a sequence of tensors", "optional": "an optional value", "map": "a map"}.get(kind)
    if why:
        raise UserError(f"input '{spec.name}' is {spec.dtype}, {why}: the device takes tensor inputs only (an "
                        "ATC model's inputs are tensors), so it cannot be fed", where,
                        hint="export the model with tensor inputs; build the sequence inside the graph")
    raise UserError(f"input '{spec.name}' is {spec.dtype}, an element type numpy has no dtype for, so no "
                    ".npy/.npz can feed it", where, hint="export the model with a float, integer, bool or string input")


def check_specs(specs: Sequence[InputSpec], where: Location | None = None) -> None:
    """Every input is a tensor numpy can hold (see ``spec_dtype``)."""
    for spec in specs:
        spec_dtype(spec, where)


def _dtype_ok(spec: InputSpec, array: np.ndarray) -> bool:
    dtype = spec_dtype(spec)
    if dtype is None:  # strings: numpy unicode, bytes, or an object array of str
        return array.dtype.kind in "US" or (array.dtype == object and all(isinstance(v, (str, bytes)) for v in array.flat))
    return array.dtype == dtype


def fits(spec: InputSpec, array: np.ndarray) -> bool:
    """The array has the model's declared shape: its rank, every fixed dim (the batch dim too)."""
    return array.ndim == len(spec.shape) and all(
        not isinstance(want, int) or want == have for want, have in zip(spec.shape, array.shape))


def check_array(spec: InputSpec, array: np.ndarray, where: Location | None = None) -> np.ndarray:
    """The array as a batch of samples (the batch axis added when missing); a mismatch is a UserError."""
    if not isinstance(array, np.ndarray):
        raise UserError(f"input '{spec.name}': expected {spec.describe()}, given {describe_array(array)}", where)
    array = given = as_declared(spec, array)
    if spec.axis is not None and array.ndim == len(spec.shape) - 1:
        array = np.expand_dims(array, spec.axis)  # one sample without its batch axis
    ok = _dtype_ok(spec, array) and array.ndim == len(spec.shape)
    if ok:
        for axis, (want, have) in enumerate(zip(spec.shape, array.shape)):
            if axis != spec.axis and isinstance(want, int) and want != have:
                ok = False
    if not ok:
        hint = None
        if not _dtype_ok(spec, array) and array.ndim == len(spec.shape):
            hint = (f"convert the data with .astype('{spec.dtype}')" if spec.dtype != STRING else
                    "give the strings as a numpy unicode array (np.array(['a', 'b']))")
        elif array.ndim == len(spec.shape):
            off = [a for a, (want, have) in enumerate(zip(spec.shape, array.shape)) if isinstance(want, int) and want != have]
            if len(off) == 1 and off[0] != spec.axis:  # the samples sit on another axis than the one assumed
                hint = (f"if axis {off[0]} holds the samples, declare it: --batch-axes {spec.name}={off[0]} "
                        f"(batch_axes: {{{spec.name}: {off[0]}}} in a stage)")
        raise UserError(
            f"input '{spec.name}': expected {spec.describe()}, given {describe_array(given)}",
            where,
            hint=hint,
        )
    return array


def _read_file(path: Path, specs: Sequence[InputSpec]) -> dict[str, np.ndarray]:
    """One file's arrays keyed by input name."""
    import zipfile

    where = Location(file=str(path))
    try:
        if path.suffix in (".npy", ".npz"):
            check_npy_sizes(path)
        if path.suffix == ".npz":
            with np.load(path, allow_pickle=False) as data:
                arrays = {key: data[key] for key in data.files}
        elif path.suffix == ".npy":
            if len(specs) != 1:
                names = ", ".join(s.name for s in specs)
                raise UserError(
                    f"a .npy file feeds only a single-input model; this model has inputs {names}",
                    where,
                    hint="give an .npz keyed by input name, or a directory of <input name>.npy",
                )
            arrays = {specs[0].name: np.load(path, allow_pickle=False)}
        else:
            raise UserError(f"unsupported input file type '{path.suffix}'; give .npy or .npz", where)
    except zipfile.BadZipFile:  # an .npz cut short (np.load sniffs the zip magic, then zipfile refuses)
        raise UserError("cannot read input file: not a whole .npz (a zip of .npy arrays cut short or damaged); "
                        "write it again (np.savez)", where) from None
    except (ValueError, OSError, EOFError) as exc:
        raise UserError(f"cannot read input file: {npy_error(exc)}", where) from None
    _check_names(arrays, specs, where)
    return {s.name: check_array(s, arrays[s.name], where) for s in specs}


def _check_names(arrays: dict, specs: Sequence[InputSpec], where: Location) -> None:
    wanted = [s.name for s in specs]
    missing = [n for n in wanted if n not in arrays]
    extra = sorted(set(arrays) - set(wanted))
    if missing or extra:
        parts = []
        if missing:
            parts.append(f"missing {few(missing)}")
        if extra:
            parts.append(f"unknown {few(extra)}")
        raise UserError(
            f"input names do not match the model ({'; '.join(parts)}); "
            f"model inputs: {few(wanted)}; given: {few(sorted(arrays)) or 'none'}",
            where,
        )


def _files_of(path: Path) -> list[Path]:
    files = sorted(p for p in path.iterdir() if p.is_file() and p.suffix in (".npy", ".npz"))
    if not files:
        raise UserError("no .npy or .npz files in the input directory", Location(file=str(path)))
    return files


def _read_source(path: Path, specs: Sequence[InputSpec]) -> list[dict[str, np.ndarray]]:
    """The source's arrays, one dict per file, each checked."""
    if not specs:
        raise UserError("the model has no inputs to feed", Location(file=str(path)))
    if path.is_file():
        return [_read_file(path, specs)]
    if not path.is_dir():
        raise UserError("input path does not exist", Location(file=str(path)))
    files = _files_of(path)
    stems = {p.stem: p for p in files if p.suffix == ".npy"}
    names = {s.name for s in specs}
    if len(specs) > 1 and set(stems) == names:  # a directory of <input name>.npy
        where = Location(file=str(path))
        for s in specs:
            check_npy_sizes(stems[s.name])
        return [{s.name: check_array(s, np.load(stems[s.name], allow_pickle=False), where) for s in specs}]
    return [_read_file(p, specs) for p in files]


def _concat(chunks: list[dict[str, np.ndarray]], specs: Sequence[InputSpec], where: Location) -> dict[str, np.ndarray]:
    out = {}
    for s in specs:
        if s.axis is not None:
            out[s.name] = np.concatenate([c[s.name] for c in chunks], axis=s.axis)
            continue
        first = chunks[0][s.name]
        if any(not np.array_equal(c[s.name], first) for c in chunks[1:]):
            raise UserError(f"input '{s.name}' has no batch axis (one value for every batch) but differs between "
                            "files; give files with the same value, or one file per run", where)
        out[s.name] = first
    return out


def _sample_count(arrays: dict[str, np.ndarray], where: Location, specs: Sequence[InputSpec] | None = None) -> int:
    axes = {s.name: s.axis for s in specs} if specs is not None else {n: 0 for n in arrays}
    counts = {name: a.shape[axes[name]] for name, a in arrays.items() if axes.get(name) is not None}
    if len(set(counts.values())) > 1:
        shown = ", ".join(f"{n}: {c} on axis {axes[n]}" for n, c in counts.items())
        raise UserError(f"inputs hold different numbers of samples ({shown})", where,
                        hint="declare the batch axis of each input whose batch is not on axis 0: "
                             "--batch-axes state=1 (batch_axes: {state: 1} in a stage)")
    return next(iter(counts.values()), 1)


def split_batches(arrays: dict[str, np.ndarray], batch: int, *, pad: bool,
                  specs: Sequence[InputSpec] | None = None) -> list[Batch]:
    """Cut concatenated samples into batches of ``batch`` rows along each input's batch axis; pad
    the last one (repeating its last sample) when ``pad``."""
    axes = {s.name: s.axis for s in specs} if specs is not None else {n: 0 for n in arrays}
    total = _sample_count(arrays, Location(), specs)
    batches = []
    for start in range(0, total, batch):
        part = {name: _take(a, axes[name], start, start + batch) for name, a in arrays.items()}
        valid = min(batch, total - start)
        if pad and valid < batch:
            part = {name: a if axes[name] is None else
                    np.concatenate([a, np.repeat(_take(a, axes[name], valid - 1, valid), batch - valid, axis=axes[name])],
                                   axis=axes[name])
                    for name, a in part.items()}
        batches.append(Batch(part, valid, axes))
    return batches


def _counts(chunk: dict[str, np.ndarray], specs: Sequence[InputSpec]) -> dict[str, int]:
    return {s.name: chunk[s.name].shape[s.axis] for s in specs if s.axis is not None}


def load_inputs(path: str | Path, input_specs: Sequence[InputSpec], batch_size: int | None = None, *,
                batch_axes: dict | None = None, cap: bool = False) -> list[Batch]:
    """Batches (input name -> array) read from ``path`` and checked against ``input_specs``;
    ``batch_axes``: input name -> its batch axis (None: unbatched), where not axis 0 (see the module docstring).

    A file whose arrays fit the model's declared shapes runs as it is (one batch), unless
    ``batch_size`` asks for batches; samples are re-batched along the batch axes only then, or when
    a file holds another number of samples than the model's fixed batch dim. ``cap``: ``batch_size``
    is a most (a dump's ``max_batch``), so feeds whose inputs hold no common batch run as given."""
    path = Path(path)
    where = Location(file=str(path))
    if batch_size is not None and batch_size < 1:
        raise UserError(f"batch size must be at least 1, given {batch_size}", where)
    check_specs(input_specs, where)
    input_specs = with_batch_axes(input_specs, batch_axes)
    chunks = _read_source(path, input_specs)
    fixed_empty = {s.name for s in input_specs if s.axis is not None and s.shape[s.axis] == 0}
    for chunk in chunks:
        counts = _counts(chunk, input_specs)
        empty = [n for n, c in counts.items() if c == 0 and n not in fixed_empty]  # the model's own [0, 5] runs
        if counts and len(empty) == len(counts):  # an empty run's outputs would score as 0/0 downstream
            shown = ", ".join(f"'{n}'" for n in empty)
            raise UserError(f"the inputs hold no samples ({shown} empty along the batch axis)", where,
                            hint="give at least one sample")
    axes = {s.name: s.axis for s in input_specs}
    as_given = all(fits(s, chunk[s.name]) for chunk in chunks for s in input_specs)
    static = {s.static_batch for s in input_specs if s.axis is not None}
    static_batch = next(iter(static)) if len(static) == 1 else None
    unbatchable = static_batch is None and static - {None} or any(
        len(set(_counts(c, input_specs).values())) > 1 for c in chunks)
    if as_given and (batch_size is None or cap and unbatchable):
        # the feeds are what the model takes: run each file once, as it is (its inputs' first axes
        # need not agree: they are the model's dims, not a batch)
        return [Batch(chunk, axes=axes) for chunk in chunks]
    if static_batch is None and static - {None}:
        wrong = next((s for s in input_specs if not all(fits(s, c[s.name]) for c in chunks)), None)
        if wrong is None:  # every array fits, but a batch size was asked of inputs whose batch dims are fixed
            fixed = next(s for s in input_specs if s.static_batch is not None)
            free = next((a for a, d in enumerate(fixed.shape) if not isinstance(d, int)), None)
            declare = f"{fixed.name}={free}" if free is not None else "NAME=AXIS"
            raise UserError(f"batch size {batch_size} asks for batches, but input '{fixed.name}' fixes its batch axis "
                            f"{fixed.axis} at {fixed.static_batch}", where,
                            hint=f"declare the axis that holds its samples (--batch-axes {declare}; batch_axes: "
                                 f"{{{declare.replace('=', ': ')}}} in a stage), or drop the batch size to run the file "
                                 "as given (its arrays fit the model)")
        given = next(c[wrong.name] for c in chunks if not fits(wrong, c[wrong.name]))
        raise UserError(f"input '{wrong.name}': the model fixes it at {list(wrong.shape)}, given "
                        f"{describe_array(given)}; the model's inputs fix different batch dims, so the samples "
                        "cannot be re-batched", where,
                        hint="give arrays of the model's shapes, or declare each input's batch axis "
                             "(--batch-axes NAME=AXIS; batch_axes: {NAME: AXIS} in a stage)")
    if static_batch is not None:
        if batch_size is not None and batch_size != static_batch:
            raise UserError(
                f"batch size {batch_size} given, but the model's batch dim is fixed at {static_batch}",
                where,
                hint="drop the batch size or convert the model with a dynamic batch",
            )
        return split_batches(_concat(chunks, input_specs, where), static_batch, pad=True, specs=input_specs)
    if batch_size is None:
        return [Batch(chunk, axes=axes) for chunk in chunks]
    return split_batches(_concat(chunks, input_specs, where), batch_size, pad=False, specs=input_specs)


def random_inputs(input_specs: Sequence[InputSpec], seed: int = 0, batch_size: int | None = None, *,
                  shapes: dict[str, Sequence[int]] | None = None, batch_axes: dict | None = None) -> Batch:
    """One batch of reproducible random data. The batch dim becomes ``batch_size`` (else 1); every
    other dim must be fixed (by the model, or by ``shapes``: input name -> dims, ATC's
    ``--input_shape``): a symbolic one is a UserError naming each, never a guessed 1."""
    rng = np.random.default_rng(seed)
    check_specs(input_specs, Location(field="inputs"))
    specs = with_batch_axes(input_specs, batch_axes)
    shapes = dict(shapes or {})
    arrays, symbolic, planned = {}, [], []
    for spec in specs:
        wanted = list(shapes.get(spec.name) or spec.shape)
        if len(wanted) != len(spec.shape):
            raise UserError(f"input shape for '{spec.name}' has {len(wanted)} dims; the model's input has "
                            f"{len(spec.shape)} ({spec.describe()})", Location(field="input_shape"))
        shape = []
        for axis, dim in enumerate(wanted):
            if isinstance(dim, int) and dim >= 0:
                shape.append(dim)
            elif axis == spec.axis:
                shape.append(batch_size or 1)
            else:
                symbolic.append(f"'{spec.name}' axis {axis} ({dim if isinstance(dim, str) and dim else '?'})")
                shape.append(1)
        planned.append((spec, shape, spec_dtype(spec) or np.dtype(object)))
    if symbolic:
        example = next(s for s in specs if any(not isinstance(d, int) for i, d in enumerate(s.shape) if i != s.axis))
        dims = ",".join(str(d) if isinstance(d, int) else ("1" if i == example.axis else "640")
                        for i, d in enumerate(example.shape))
        raise UserError(
            f"random inputs need fixed shapes, and these dims are symbolic: {'; '.join(symbolic)}",
            Location(field="inputs"),
            hint=f"give real inputs (--input FILE.npz, or a stage's inputs:), or convert with the shape the device "
                 f"will take, as ATC needs for a dynamic model (convert --input-shape \"{example.name}:{dims}\", "
                 f"param input_shape) and feed the converted model")
    _check_random_size(planned)
    for spec, shape, dtype in planned:
        if dtype.kind == "f":
            array = rng.standard_normal(shape).astype(dtype)
        elif dtype.name == BFLOAT16:  # drawn as float32's would be, then rounded
            array = rng.standard_normal(shape).astype(np.float32).astype(dtype)
        elif dtype == np.uint8:
            array = rng.integers(0, 256, shape, dtype=np.uint8)
        elif dtype.kind in "iu":
            array = rng.integers(0, 10, shape).astype(dtype)
        elif dtype.kind == "b":
            array = rng.integers(0, 2, shape).astype(bool)
        else:
            raise UserError(f"input '{spec.name}': cannot make random data of type {spec.dtype}; give inputs")
        arrays[spec.name] = array
    return Batch(arrays, axes={s.name: s.axis for s in specs})


def _check_random_size(planned: list) -> None:
    """Refuse random inputs this machine cannot hold before drawing them: numpy draws a float input in
    float64 (and an integer one in int64) and then casts, so the peak is every array kept plus the
    largest draw (the dims are the model's word: a 10^11 dim would ask for terabytes)."""
    from ascendpipe.hostmemory import check_fits

    kept, draw, biggest = 0, 0, None
    for spec, shape, dtype in planned:
        count = 1
        for dim in shape:
            count *= dim
        if dtype.kind not in "fiub" and dtype.name != BFLOAT16:
            continue  # refused as it is reached
        nbytes = count * dtype.itemsize
        kept += nbytes
        if dtype.kind in "fib" and dtype != np.uint8 or dtype.name == BFLOAT16:
            draw = max(draw, count * 8)
        if biggest is None or nbytes > biggest[0]:
            biggest = (nbytes, spec, shape)
    if biggest is not None:
        _, spec, shape = biggest
        dims = ", ".join(map(str, shape))
        check_fits(kept + draw, f"making random inputs for this model (input '{spec.name}' is [{dims}] {spec.dtype})",
                   Location(field="inputs"),
                   hint="give the model's real inputs (--input FILE.npy|FILE.npz|FOLDER, or a stage's inputs:), "
                        "or fix its input dims")


def save_npy_atomic(path: str | Path, array: np.ndarray) -> None:
    """``np.save`` to a temp file in the same directory, then rename: never a half-written .npy."""
    from ascendpipe.fsutil import atomic_path

    with atomic_path(path) as tmp, open(tmp, "wb") as fh:
        np.save(fh, np.require(array, requirements="C"), allow_pickle=False)  # ascontiguousarray makes 0-d 1-d


def write_json_atomic(path: str | Path, data) -> None:
    from ascendpipe.fsutil import write_json_atomic as _write

    _write(path, data, default=_json_default, allow_nan=False)


def _json_default(value):
    if isinstance(value, np.generic):
        return value.item()
    if isinstance(value, Path):
        return str(value)
    raise TypeError(f"not JSON serialisable: {type(value).__name__}")
