"""ONNX external data: a model whose weights lie in files beside it (past protobuf's 2 GB, every LLM).

The one strict reader (``references``, ``check_model``): every external reference of a model file
resolved once, the same way, before any of its bytes is read or written, as onnxruntime reads it
(the rules at ``ALLOWED_KEYS`` and ``check_reference``): relative to the model file's folder and
inside it after links are resolved, a regular file, whole offsets and lengths within it, the length
the tensor's own size. Anything else is one line naming the tensor, the field and the model. Then
one tensor's bytes read (the small ones a graph edit reads: shapes, norms, biases), and a model's
weights files placed beside a copy of it (``place_file``: a reflink, a hard link for a file of ours,
else a copy): never the whole model's weights loaded, and never re-serialised into the protobuf. The
references are found in the file's bytes (``onnxrefs``); onnx is imported only by the functions that
take a parsed model.
"""

from __future__ import annotations

import os
import stat
from pathlib import Path

from ascendpipe.errors import Location, UserError

EXTERNAL = 1  # onnx.TensorProto.EXTERNAL
DEFAULT = 0  # onnx.TensorProto.DEFAULT
STRING = 8  # onnx.TensorProto.STRING
_ITEMSIZE = {1: 4, 2: 1, 3: 1, 4: 2, 5: 2, 6: 4, 7: 8, 9: 1, 10: 2, 11: 8, 12: 4, 13: 8, 14: 8, 15: 16, 16: 2,
             17: 1, 18: 1, 19: 1, 20: 1, 24: 1}  # TensorProto.DataType -> bytes per element (complex ones whole)
_PACKED = {21: 4, 22: 4, 23: 4, 25: 2, 26: 2, 27: 6, 28: 6}  # bits per element, packed (onnx.proto 1.23: [u]int4,
# float4e2m1, [u]int2, float6e2m3/e3m2), the last byte padded


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
    """Whether any tensor of ``model`` (a ModelProto read without its external data) lies in a file:
    an initializer, or a node attribute's (``Constant``'s value), bodies included."""
    return any(True for _ in external_tensors(model))


def external_info(tensor) -> tuple[str, int, int | None]:
    """(location, offset, length or None) of an external tensor (an onnx TensorProto), its fields
    checked as ``references`` checks them (a UserError naming the tensor and the field)."""
    entries = _entries(tensor.name, [(e.key, e.value) for e in tensor.external_data], None)
    return entries.get("location", ""), _whole(tensor.name, entries, "offset", None) or 0, \
        _whole(tensor.name, entries, "length", None)


def tensor_nbytes(tensor) -> int:
    """The bytes of a tensor's data from its dims and type (strings and unknown types: 0)."""
    return nbytes_of(tensor.data_type, tensor.dims) or 0


def nbytes_of(data_type: int, dims) -> int | None:
    """Bytes of a tensor of ``data_type`` and ``dims`` as ONNX stores it (4-bit and 2-bit types
    packed, rounded up to a whole byte), or None for a type whose size is not fixed (strings) or
    not known, or a negative dim."""
    count = 1
    for dim in dims:
        if dim < 0:
            return None
        count *= dim
    if data_type in _ITEMSIZE:
        return count * _ITEMSIZE[data_type]
    if data_type in _PACKED:
        return (count * _PACKED[data_type] + 7) // 8
    return None


# --- the strict reader: every external reference resolved once, the same way, before a byte is read --

ALLOWED_KEYS = ("location", "offset", "length", "checksum")  # onnxruntime 1.32's tensor_external_data_info.cc
# refuses any other key ("model format error!"), "basepath" included, and a repeated one ("duplicate
# 'location' entries"); offset and length it parses as decimal digits only (parse_string.h), a length
# must equal the tensor's own size ("external data size mismatch"), a missing one is that size.
_SHOWN = 60  # characters of a value from the file shown in a message


class ExternalRef:
    """One external tensor, resolved: its name, where it sits in the model, its location as written,
    the file (absolute, links resolved, a regular file inside the model's folder), its offset and its
    length (its own size: dims x dtype)."""

    __slots__ = ("tensor", "where", "location", "path", "offset", "length")

    def __init__(self, tensor, where, location, path, offset, length):
        self.tensor, self.where, self.location, self.path = tensor, where, location, path
        self.offset, self.length = offset, length

    def __repr__(self) -> str:
        return f"ExternalRef({self.tensor!r}, {self.location!r}, offset={self.offset}, length={self.length})"


def _quote(value: str) -> str:
    return repr(value if len(value) <= _SHOWN else value[:_SHOWN] + "...")


def _fail(tensor: str, field: str, message: str, label, where: str = "initializer") -> UserError:
    """The one line: the tensor (and where it sits, when not an initializer), the field, the model."""
    sits = "" if where == "initializer" else f" ({where})"
    return UserError(f"tensor {_quote(tensor)}{sits}: external data {message}", Location(file=label, field=field))


def _entries(tensor: str, pairs, label, where: str = "initializer") -> dict[str, str]:
    entries: dict[str, str] = {}
    for key, value in pairs:
        if key not in ALLOWED_KEYS:
            raise _fail(tensor, f"external_data.{key}", f"key {_quote(key)} is not one onnxruntime reads ("
                        f"{', '.join(ALLOWED_KEYS)}): it refuses the model; remove the entry", label, where)
        if key in entries:
            raise _fail(tensor, f"external_data.{key}", f"gives {key!r} twice ({_quote(entries[key])} and "
                        f"{_quote(value)}): onnxruntime refuses a repeated key; keep one", label, where)
        entries[key] = value
    return entries


def _whole(tensor: str, entries: dict, key: str, label, where: str = "initializer") -> int | None:
    """The whole non-negative number ``entries[key]`` (decimal digits only, as onnx writes it and
    onnxruntime parses it: no sign, point, exponent, hex or space), None where it is not given."""
    value = entries.get(key)
    if value is None:
        return None
    if not value or not value.isascii() or not value.isdigit():
        raise _fail(tensor, f"external_data.{key}", f"{key} {_quote(value)} is not a whole non-negative number "
                    "of bytes (decimal digits only, as onnx writes it)", label, where)
    return int(value)


def _model_folder(model_path) -> str:
    return os.path.dirname(os.path.abspath(str(model_path)))


def check_reference(name: str, data_type: int, dims, pairs, folder, label, where: str = "initializer",
                    files: dict | None = None) -> ExternalRef:
    """One external tensor (``pairs``: its external_data entries as written) checked and resolved
    against the model's ``folder``: a UserError naming the tensor, the field and the model (``label``)
    for a missing or repeated key, a location outside the folder (after links are resolved), a file
    that is missing or not a regular file, an offset or length that is not a whole non-negative
    number, a length that is not the tensor's size, or bytes past the end of the file. ``files``: the
    locations resolved already in this model (an LLM's hundreds of weights share a file or a few)."""
    entries = _entries(name, pairs, label, where)
    offset = _whole(name, entries, "offset", label, where) or 0
    length = _whole(name, entries, "length", label, where)
    location = entries.get("location", "")
    if not location:
        raise _fail(name, "external_data.location", "has no location (the file holding its bytes): re-save the "
                    "model with onnx.save_model(..., save_as_external_data=True)", label, where)
    resolved = files.get(location) if files is not None else None
    if resolved is None:
        resolved = _resolve_file(name, location, folder, label, where)
        if files is not None:
            files[location] = resolved
    real, st = resolved
    size = nbytes_of(data_type, dims)
    if size is None:
        kind = "strings" if data_type == STRING else f"data type {data_type}"
        raise _fail(name, "external_data", f"cannot be read: a tensor of {kind} with dims {list(dims)[:8]} has no "
                    "fixed size in bytes", label, where)
    if length is not None and length != size:
        raise _fail(name, "external_data.length", f"length {length} is not the tensor's {size} bytes (dims "
                    f"{list(dims)[:8]}, data type {data_type}): onnxruntime refuses it", label, where)
    if offset + size > st.st_size:
        raise _fail(name, "external_data.offset", f"needs bytes {offset} to {offset + size} of {_quote(location)}, "
                    f"which holds {st.st_size}: the file is cut short or the offset is wrong", label, where)
    return ExternalRef(name, where, location, real, offset, size)


def _resolve_file(name: str, location: str, folder, label, where: str) -> tuple[str, os.stat_result]:
    """(the file, links resolved; its stat) ``location`` names inside ``folder``, or the one line."""
    if "\x00" in location or os.path.isabs(location) or ".." in location.replace("\\", "/").split("/") \
            or location.endswith(("/", "\\")):
        raise _fail(name, "external_data.location", f"location {_quote(location)} is not a file inside the model's "
                    "folder (absolute, '..', a NUL or a trailing '/'): keep the weights file beside the .onnx file",
                    label, where)
    folder = os.path.abspath(str(folder))
    real_folder = os.path.realpath(folder)
    real = os.path.realpath(os.path.join(folder, location))
    if os.path.commonpath([real_folder, real]) != real_folder:
        raise _fail(name, "external_data.location", f"location {_quote(location)} is a link to {_quote(real)}, "
                    "outside the model's folder: copy the file into the folder instead of linking it", label, where)
    try:
        st = os.stat(real)
    except FileNotFoundError:
        raise _fail(name, "external_data.location", f"file {_quote(location)} is missing (it is read from the "
                    "model's folder): keep it beside the .onnx file", label, where) from None
    except OSError as exc:
        raise _fail(name, "external_data.location", f"file {_quote(location)} cannot be read: {exc.strerror}",
                    label, where) from None
    if not stat.S_ISREG(st.st_mode):
        what = "a folder" if stat.S_ISDIR(st.st_mode) else "not a regular file (a FIFO, socket or device)"
        raise _fail(name, "external_data.location", f"file {_quote(location)} is {what}", label, where)
    if not os.access(real, os.R_OK):
        raise _fail(name, "external_data.location", f"file {_quote(location)} cannot be read (no read permission)",
                    label, where)
    return real, st


_CACHE: dict = {}  # (model path, its stat) -> the model's external tensors (the parse; files are checked per call)


def references(model_path, *, folder=None, label=None) -> list[ExternalRef]:
    """Every external tensor of the ONNX file ``model_path``, checked and resolved (``check_reference``)
    against ``folder`` (default: the model file's folder), before any of their bytes is read; [] for a
    model whose weights are all inline, or a file that is not protobuf (the caller's parser says so).
    ``label`` names the model in errors (default: the path). Reads the file's bytes, never onnx."""
    import mmap

    from ascendpipe.onnxrefs import external_tensors
    from ascendpipe.protowire import WireError

    label = label or str(model_path)
    path = os.path.abspath(str(model_path))
    try:
        st = os.stat(path)
    except OSError:
        return []  # the caller's own read names the missing file
    if not stat.S_ISREG(st.st_mode) or st.st_size == 0:
        return []
    key = (path, st.st_ino, st.st_dev, st.st_size, st.st_mtime_ns, st.st_ctime_ns)
    tensors = _CACHE.get(key)
    if tensors is None:
        try:
            with open(path, "rb") as handle, mmap.mmap(handle.fileno(), 0, access=mmap.ACCESS_READ) as view:
                tensors = external_tensors(view)
        except (OSError, ValueError, WireError):
            return []
        if len(_CACHE) > 64:
            _CACHE.clear()
        _CACHE[key] = tensors
    folder = _model_folder(path) if folder is None else folder
    files: dict = {}
    return [check_reference(t.name, t.data_type, t.dims, t.entries, folder, label, t.where, files) for t in tensors]


def check_model(model_path, *, folder=None, label=None, stage=None) -> list[ExternalRef]:
    """``references``, its error located in ``stage`` too: the pre-check of every command and stage
    that hands a model file to a reader (ours, onnxruntime's, onnx's, atc)."""
    try:
        return references(model_path, folder=folder, label=label)
    except UserError as err:
        raise err.with_location(stage=stage) from None


def resolve_tensor(tensor, base_dir: Path, label: str | None = None) -> ExternalRef:
    """An onnx TensorProto's external data, checked and resolved against ``base_dir``."""
    return check_reference(tensor.name, tensor.data_type, tuple(tensor.dims),
                           [(e.key, e.value) for e in tensor.external_data], base_dir, label or str(base_dir))


def resolve(base_dir: Path, location: str, label: str | None = None) -> Path:
    """The file ``location`` names inside ``base_dir`` (links resolved), checked as a reference is."""
    probe = check_reference("?", 2, (0,), [("location", location)], base_dir, label or str(base_dir))
    return Path(probe.path)


def read_bytes(tensor, base_dir: Path, label: str | None = None) -> bytes:
    """An external tensor's bytes, read from its file after the strict checks (its own size, within
    the file, never past what the machine can hold)."""
    ref = resolve_tensor(tensor, base_dir, label)
    check_memory(ref.length, f"tensor {_quote(ref.tensor)}", label or str(base_dir))
    with open(ref.path, "rb") as handle:
        handle.seek(ref.offset)
        data = handle.read(ref.length)
    if len(data) != ref.length:  # the file shrank since it was checked
        raise _fail(ref.tensor, "external_data.length", f"reads {len(data)} of its {ref.length} bytes from "
                    f"{_quote(ref.location)}: the file changed while it was read", label or str(base_dir))
    return data


def available_memory() -> int | None:
    """Bytes the kernel says can be allocated without swapping (MemAvailable), None where unknown."""
    try:
        with open("/proc/meminfo", "rb") as handle:
            for line in handle:
                if line.startswith(b"MemAvailable:"):
                    return int(line.split()[1]) * 1024
    except (OSError, ValueError, IndexError):
        pass
    try:
        return os.sysconf("SC_AVPHYS_PAGES") * os.sysconf("SC_PAGE_SIZE")
    except (ValueError, OSError, AttributeError):
        return None


def check_memory(nbytes: int, what: str, label, factor: float = 1.0) -> None:
    """A UserError (one line with the numbers) where ``nbytes`` x ``factor`` is past the memory free now."""
    free = available_memory()
    if free is not None and nbytes * factor > free:
        raise UserError(f"{what} needs {size_text(nbytes * factor)} of memory and {size_text(free)} is available: free "
                        "memory or use a machine with more", Location(file=str(label)))


def size_text(nbytes: float) -> str:
    for unit in ("B", "KB", "MB", "GB"):
        if nbytes < 1000 or unit == "GB":
            return f"{nbytes:.0f} {unit}" if unit == "B" else f"{nbytes:.2f} {unit}"
        nbytes /= 1000
    return f"{nbytes:.2f} TB"


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


def place_file(source: Path, target: Path, link: bool = False) -> str:
    """``target`` made to hold ``source``'s bytes, atomically (``fsutil.share_file``): a reflink where
    the file system shares blocks (btrfs, XFS: no bytes copied), else, with ``link``, a hard link (the
    caller's promise: ``source`` is a file of ours that is never written in place, a stage's output
    or a cache object), else an in-kernel copy. Returns "reflinked", "linked" or "copied". A hard
    link costs no disk, and onnxruntime and our reader take it; onnx refuses to load such a weights
    file ("it has multiple hard links, indicating a potential hardlink attack", its checker's
    ``_open_external_data``, onnx 1.23), so a user's own file is never linked: the user may edit it
    in place, and our copy must not change with it."""
    from ascendpipe.fsutil import share_file

    return share_file(source, target, link=link)


def place_weights(tensors, source_dir: Path, target_dir: Path, prefix: str = "", *, link: bool = False,
                  label: str | None = None) -> dict[str, str]:
    """Make every weights file the external ``tensors`` (onnx TensorProtos read from a model in
    ``source_dir``) reference available under ``target_dir`` at ``prefix`` + its location, each
    checked as the strict reader checks it first, and point the tensors there (offsets and lengths
    kept). Returns new location -> "reflinked" / "linked" / "copied" (``place_file``)."""
    refs = [(tensor, resolve_tensor(tensor, source_dir, label)) for tensor in tensors]  # all checked first
    placed: dict[str, str] = {}
    for tensor, ref in refs:
        new = prefix + ref.location
        if new not in placed:
            placed[new] = place_file(Path(ref.path), Path(target_dir) / new, link)
        for entry in tensor.external_data:
            if entry.key == "location":
                entry.value = new
    return placed


def external_tensors(model):
    """The external tensors of ``model`` (a ModelProto read without its external data): initializers
    and node attributes' tensors (``Constant``), bodies included, as onnx's ``_get_all_tensors``."""
    for graph in graphs(model.graph):
        for tensor in graph.initializer:
            if is_external(tensor):
                yield tensor
        for node in graph.node:
            for attr in node.attribute:
                for tensor in (attr.t, *attr.tensors):
                    if is_external(tensor):
                        yield tensor


def check_structure(model) -> None:
    """onnx's checker over ``model``'s graph, its external tensors left out (our reader has checked
    them and onnxruntime loads them): onnx's own check of external data refuses a hard-linked file
    and resolves a model given in memory against the working folder."""
    import onnx

    light = onnx.ModelProto()
    light.CopyFrom(model)
    for tensor in external_tensors(light):
        del tensor.external_data[:]
        tensor.data_location = DEFAULT
        del tensor.dims[:]
        tensor.dims.append(0)
    onnx.checker.check_model(light)


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
