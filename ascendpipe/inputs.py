"""Model inputs from files: loading, checking against the model's inputs, batching.

Pure numpy; no onnx/onnxruntime here (``InputSpec`` values come from a session, see
``ascendpipe.backends.onnxruntime.session.input_specs``).

Accepted sources:

- one ``.npy``: the samples of a single-input model;
- one ``.npz``: keys are input names;
- a directory of ``.npy``/``.npz`` files, taken in name order and concatenated along axis 0.
  A directory whose ``.npy`` stems are exactly the model's input names (an upstream ``infer``
  stage's ``outputs/``) is read as one ``.npz``.

Axis 0 is the batch axis. All samples are concatenated and cut into batches of the batch size:
``batch_size`` if given, else the model's static batch dim; a model with a dynamic batch dim and no
``batch_size`` gets each file as one batch, as given. A last partial batch of a static-batch model
is padded by repeating its last sample; ``Batch.valid`` says how many rows are real.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Sequence, Union

import numpy as np

from ascendpipe.errors import Location, UserError

Dim = Union[int, str, None]  # int: static; str: a named dynamic dim; None: an unnamed dynamic dim


@dataclass(frozen=True)
class InputSpec:
    name: str
    shape: tuple[Dim, ...]
    dtype: str  # a numpy dtype name: 'float32', 'uint8', ...

    @property
    def static_batch(self) -> int | None:
        """The model's fixed batch size, or None when axis 0 is dynamic (or the input is a scalar)."""
        if not self.shape or not isinstance(self.shape[0], int):
            return None
        return self.shape[0]

    def describe(self) -> str:
        dims = []
        for axis, dim in enumerate(self.shape):
            if isinstance(dim, int) and axis > 0:
                dims.append(str(dim))
            elif axis == 0:
                dims.append("N")  # samples are re-batched, so any count is fine on axis 0
            else:
                dims.append(dim if isinstance(dim, str) and dim else "?")
        return f"{self.dtype} [{','.join(dims)}]"


class Batch(dict):
    """One feed: input name -> array. ``valid`` rows are real; the rest is padding."""

    def __init__(self, arrays: dict[str, np.ndarray], valid: int | None = None):
        super().__init__(arrays)
        first = next(iter(arrays.values()), None)
        rows = first.shape[0] if first is not None and first.ndim else 1
        self.valid = rows if valid is None else valid


def describe_array(array: np.ndarray) -> str:
    return f"{array.dtype} [{','.join(str(d) for d in array.shape)}]"


def check_array(spec: InputSpec, array: np.ndarray, where: Location | None = None) -> np.ndarray:
    """The array as a batch of samples (axis 0 added when missing); a mismatch is a UserError."""
    given = array
    if array.ndim == len(spec.shape) - 1 and len(spec.shape) > 0:
        array = array[np.newaxis]  # one sample without its batch axis
    ok = array.dtype == np.dtype(spec.dtype) and array.ndim == len(spec.shape)
    if ok:
        for axis, (want, have) in enumerate(zip(spec.shape, array.shape)):
            if axis > 0 and isinstance(want, int) and want != have:
                ok = False
    if not ok:
        hint = None
        if array.dtype != np.dtype(spec.dtype) and array.ndim == len(spec.shape):
            hint = f"convert the data with .astype('{spec.dtype}')"
        raise UserError(
            f"input '{spec.name}': expected {spec.describe()}, given {describe_array(given)}",
            where,
            hint=hint,
        )
    return array


def _read_file(path: Path, specs: Sequence[InputSpec]) -> dict[str, np.ndarray]:
    """One file's arrays keyed by input name."""
    where = Location(file=str(path))
    try:
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
    except (ValueError, OSError, EOFError) as exc:
        raise UserError(f"cannot read input file: {exc}", where) from None
    _check_names(arrays, specs, where)
    return {s.name: check_array(s, arrays[s.name], where) for s in specs}


def _check_names(arrays: dict, specs: Sequence[InputSpec], where: Location) -> None:
    wanted = [s.name for s in specs]
    missing = [n for n in wanted if n not in arrays]
    extra = sorted(set(arrays) - set(wanted))
    if missing or extra:
        parts = []
        if missing:
            parts.append(f"missing {', '.join(missing)}")
        if extra:
            parts.append(f"unknown {', '.join(extra)}")
        raise UserError(
            f"input names do not match the model ({'; '.join(parts)}); "
            f"model inputs: {', '.join(wanted)}; given: {', '.join(sorted(arrays)) or 'none'}",
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
        return [{s.name: check_array(s, np.load(stems[s.name], allow_pickle=False), where) for s in specs}]
    return [_read_file(p, specs) for p in files]


def _concat(chunks: list[dict[str, np.ndarray]], specs: Sequence[InputSpec]) -> dict[str, np.ndarray]:
    return {s.name: np.concatenate([c[s.name] for c in chunks], axis=0) for s in specs}


def _sample_count(arrays: dict[str, np.ndarray], where: Location) -> int:
    counts = {name: a.shape[0] for name, a in arrays.items()}
    if len(set(counts.values())) > 1:
        shown = ", ".join(f"{n}: {c}" for n, c in counts.items())
        raise UserError(f"inputs hold different numbers of samples ({shown})", where)
    return next(iter(counts.values()))


def split_batches(arrays: dict[str, np.ndarray], batch: int, *, pad: bool) -> list[Batch]:
    """Cut concatenated samples into batches of ``batch`` rows; pad the last one when ``pad``."""
    total = _sample_count(arrays, Location())
    batches = []
    for start in range(0, total, batch):
        part = {name: a[start:start + batch] for name, a in arrays.items()}
        valid = next(iter(part.values())).shape[0]
        if pad and valid < batch:
            part = {name: np.concatenate([a, np.repeat(a[-1:], batch - valid, axis=0)]) for name, a in part.items()}
        batches.append(Batch(part, valid))
    return batches


def load_inputs(path: str | Path, input_specs: Sequence[InputSpec], batch_size: int | None = None) -> list[Batch]:
    """Batches (input name -> array) read from ``path`` and checked against ``input_specs``."""
    path = Path(path)
    where = Location(file=str(path))
    if batch_size is not None and batch_size < 1:
        raise UserError(f"batch size must be at least 1, given {batch_size}", where)
    chunks = _read_source(path, input_specs)
    for chunk in chunks:
        _sample_count(chunk, where)
    static = {s.static_batch for s in input_specs}
    static_batch = static.pop() if len(static) == 1 else None
    if static_batch is not None:
        if batch_size is not None and batch_size != static_batch:
            raise UserError(
                f"batch size {batch_size} given, but the model's batch dim is fixed at {static_batch}",
                where,
                hint="drop the batch size or convert the model with a dynamic batch",
            )
        return split_batches(_concat(chunks, input_specs), static_batch, pad=True)
    if batch_size is None:
        return [Batch(chunk) for chunk in chunks]
    return split_batches(_concat(chunks, input_specs), batch_size, pad=False)


def random_inputs(input_specs: Sequence[InputSpec], seed: int = 0, batch_size: int | None = None) -> Batch:
    """One batch of reproducible random data; dynamic dims become ``batch_size`` (axis 0) or 1."""
    rng = np.random.default_rng(seed)
    arrays = {}
    for spec in input_specs:
        shape = []
        for axis, dim in enumerate(spec.shape):
            if isinstance(dim, int):
                shape.append(dim)
            else:
                shape.append((batch_size or 1) if axis == 0 else 1)
        dtype = np.dtype(spec.dtype)
        if dtype.kind == "f":
            array = rng.standard_normal(shape).astype(dtype)
        elif dtype == np.uint8:
            array = rng.integers(0, 256, shape, dtype=np.uint8)
        elif dtype.kind in "iu":
            array = rng.integers(0, 10, shape).astype(dtype)
        elif dtype.kind == "b":
            array = rng.integers(0, 2, shape).astype(bool)
        else:
            raise UserError(f"input '{spec.name}': cannot make random data of type {spec.dtype}; give inputs")
        arrays[spec.name] = array
    return Batch(arrays)


def save_npy_atomic(path: str | Path, array: np.ndarray) -> None:
    """``np.save`` to a temp file in the same directory, then rename: never a half-written .npy."""
    from ascendpipe.fsutil import atomic_path

    with atomic_path(path) as tmp, open(tmp, "wb") as fh:
        np.save(fh, np.ascontiguousarray(array), allow_pickle=False)


def write_json_atomic(path: str | Path, data) -> None:
    from ascendpipe.fsutil import write_json_atomic as _write

    _write(path, data, default=_json_default, allow_nan=False)


def _json_default(value):
    if isinstance(value, np.generic):
        return value.item()
    if isinstance(value, Path):
        return str(value)
    raise TypeError(f"not JSON serialisable: {type(value).__name__}")
