"""ONNX external data: a model whose weights lie in files beside it (past protobuf's 2 GB, every LLM).

Which tensors are external and where their bytes lie, one tensor's bytes read (the small ones a
graph edit reads: shapes, norms, biases), and a model's weights files placed beside a copy of it
(reflinked where the file system shares blocks, else copied in the kernel): never the whole model's weights loaded, and
never re-serialised into the protobuf. Locations are relative to the model file's folder (the ONNX
rule onnxruntime follows); one that is absolute or leaves that folder is refused, as onnx's checker
refuses it. onnx is imported by the caller that parsed the model.
"""

from __future__ import annotations

import os
from pathlib import Path

from ascendpipe.errors import Location, UserError

EXTERNAL = 1  # onnx.TensorProto.EXTERNAL
DEFAULT = 0  # onnx.TensorProto.DEFAULT
STRING = 8  # onnx.TensorProto.STRING
_ITEMSIZE = {1: 4, 2: 1, 3: 1, 4: 2, 5: 2, 6: 4, 7: 8, 9: 1, 10: 2, 11: 8, 12: 4, 13: 8, 14: 8, 15: 16, 16: 2,
             17: 1, 18: 1, 19: 1, 20: 1}  # TensorProto.DataType -> bytes per element (complex ones whole)


def graphs(graph):
    """``graph`` and every If/Loop/Scan body in it, at any depth."""
    yield graph
    for node in graph.node:
        for attr in node.attribute:
            if attr.g.node or attr.g.output or attr.g.initializer:
                yield from graphs(attr.g)
            for sub in attr.graphs:
                yield from graphs(sub)


def initializers(model):
    """Every initializer of the model, bodies' included."""
    for graph in graphs(model.graph):
        yield from graph.initializer


def is_external(tensor) -> bool:
    return tensor.data_location == EXTERNAL


def has_external(model) -> bool:
    """Whether any weight of ``model`` (a ModelProto read without its external data) lies in a file."""
    return any(is_external(t) for t in initializers(model))


def external_info(tensor) -> tuple[str, int, int | None]:
    """(location, offset, length or None: to the end of the file) of an external tensor."""
    entries = {e.key: e.value for e in tensor.external_data}
    length = entries.get("length")
    return entries.get("location", ""), int(entries.get("offset") or 0), int(length) if length else None


def tensor_nbytes(tensor) -> int:
    """The bytes of a tensor's data from its dims and type (strings: unknown, 0)."""
    count = 1
    for dim in tensor.dims:
        count *= dim
    return count * _ITEMSIZE.get(tensor.data_type, 0)


def resolve(base_dir: Path, location: str, label: str | None = None) -> Path:
    """The file ``location`` names, relative to ``base_dir``; a location that is absolute or leaves the
    folder is a UserError (onnx's checker and onnxruntime refuse it too)."""
    where = Location(file=label or str(base_dir))
    if not location or os.path.isabs(location) or ".." in Path(location).parts:
        raise UserError(f"external data location '{location}' must be a path inside the model's folder", where)
    path = Path(base_dir) / location
    if not path.is_file():
        raise UserError(f"the model's weights file '{location}' is missing (external data is read from the "
                        f"model's folder): keep it beside the .onnx file", where)
    return path


def read_bytes(tensor, base_dir: Path) -> bytes:
    """An external tensor's bytes, read from its file."""
    location, offset, length = external_info(tensor)
    with open(resolve(base_dir, location), "rb") as handle:
        handle.seek(offset)
        data = handle.read(-1 if length is None else length)
    if length is not None and len(data) != length:
        raise UserError(f"the weights file '{location}' is shorter than tensor '{tensor.name}' needs "
                        f"(offset {offset} + {length} bytes)", Location(file=str(Path(base_dir) / location)))
    return data


def inline(tensor, base_dir: Path) -> None:
    """Put an external tensor's bytes into the tensor itself (raw_data)."""
    tensor.raw_data = read_bytes(tensor, base_dir)
    del tensor.external_data[:]
    tensor.data_location = DEFAULT


def inline_small(model, base_dir: Path, limit: int, names=()) -> int:
    """Inline each external initializer of at most ``limit`` bytes, and those named in ``names``
    (what a graph edit reads: a Reshape's shape for shape inference, a BN's parameters for a fold);
    the count inlined. The weights that make a model big stay in their files."""
    wanted, count = set(names), 0
    for tensor in initializers(model):
        if is_external(tensor) and (tensor_nbytes(tensor) <= limit or tensor.name in wanted):
            inline(tensor, base_dir)
            count += 1
    return count


def place_file(source: Path, target: Path) -> str:
    """``target`` made a copy of ``source``, written atomically (a temp name renamed into place): a
    reflink where the file system shares blocks (btrfs, XFS: no bytes copied), else an in-kernel copy.
    Returns "reflinked" or "copied". Never a hard link: onnx refuses external data with several links
    ("it has multiple hard links, indicating a potential hardlink attack"), in its checker and in
    ``onnx.load``, so a hard-linked weights file would make the model unreadable to onnx."""
    from ascendpipe.fsutil import atomic_path

    target.parent.mkdir(parents=True, exist_ok=True)
    with atomic_path(target) as tmp, open(source, "rb") as src, open(tmp, "wb") as dst:
        if _reflink(src.fileno(), dst.fileno()):
            return "reflinked"
        _copy(src.fileno(), dst.fileno(), os.fstat(src.fileno()).st_size)
    return "copied"


def _reflink(src: int, dst: int) -> bool:
    try:
        import fcntl

        fcntl.ioctl(dst, 0x40049409, src)  # FICLONE (linux/fs.h)
    except (ImportError, OSError):
        return False
    return True


def _copy(src: int, dst: int, size: int) -> None:
    """Copy ``size`` bytes in the kernel (copy_file_range, which moves both files' offsets), the rest
    (a file system that refuses it) through a 16 MB buffer."""
    done = 0
    copy_range = getattr(os, "copy_file_range", None)
    try:
        while copy_range is not None and done < size:
            sent = copy_range(src, dst, size - done)
            if not sent:
                break
            done += sent
    except OSError:
        pass
    while True:
        chunk = memoryview(os.read(src, 16 << 20))
        if not chunk:
            return
        while chunk:
            chunk = chunk[os.write(dst, chunk):]


def place_weights(model, source_dir: Path, target_dir: Path, prefix: str = "", keep=frozenset()) -> dict[str, str]:
    """Make every weights file ``model`` references (relative to ``source_dir``) available under
    ``target_dir`` at ``prefix`` + its location, and point the references there; a location in
    ``keep`` is already in ``target_dir`` and stays. Returns location -> "reflinked" / "copied"."""
    placed: dict[str, str] = {}
    for tensor in initializers(model):
        if not is_external(tensor):
            continue
        location, _, _ = external_info(tensor)
        if location in keep:
            continue
        new = prefix + location
        if new not in placed:
            placed[new] = place_file(resolve(source_dir, location), Path(target_dir) / new)
        for entry in tensor.external_data:
            if entry.key == "location":
                entry.value = new
    return placed


def external_model_bytes(handle, folder: Path, max_file_bytes: int) -> bytes | None:
    """A model file (``handle``, open for reading) whose weights are external data: its graph as bytes to
    give onnxruntime with ``folder`` as where its weights lie, the small weights read in (onnxruntime's
    shape inference reads a Reshape's shape, and reads no external data there: "Cannot parse data from
    external tensors"); the big ones it maps from their files. None for a model without external data,
    or a file over ``max_file_bytes`` (its weights are inline, whatever else is external)."""
    import onnx

    from ascendpipe.onnxwire import REFERENCE_MIN_BYTES

    if os.fstat(handle.fileno()).st_size > max_file_bytes:
        return None
    handle.seek(0)
    raw = handle.read()
    try:
        model = onnx.load_model_from_string(raw)
    except Exception:  # noqa: BLE001 - not ONNX: the caller's own parse says so
        return None
    if not has_external(model):
        return None
    if inline_small(model, folder, REFERENCE_MIN_BYTES) == 0:
        return raw
    return model.SerializeToString()
