"""Per-op NPU dumps: the acl.json, the dump tree, the device's dump files, and our dump layout.

Formats: CANN's acl.json dump configuration and msaccucmp documentation; the device's files are read in-process
(``dump_data``: the DumpData header and each tensor's bytes) and laid out as the golden is
(``device_layout``: NC1HWC0, FRACTAL_Z, FRACTAL_NZ, ... converted, padding sliced off); the target layout is
"Dump directory" in docs/contracts.md (index.json + tensors/), so the compare code reads NPU dumps unchanged.
A tensor whose device format cannot be converted is kept as dumped and flagged ``not_compared``.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from ascendpipe.contract import DUMP_FORMAT
from ascendpipe.fsutil import write_json_atomic

DUMP_MODES = ("input", "output", "all")
DUMP_DATA = ("tensor", "stats")
_TS_DIR = re.compile(r"^\d{14}$")
# msaccucmp convert names: '<dump file>.output.<i>.npy' (mindstudio-probe 26.2,
# msaccucmp/dump_parse/dump_data_parser.py:179) or '<dump file>.output.<i>.<shape>.npy' (CANN docs)
_CONVERTED = re.compile(r"^(?P<orig>.+)\.(?P<io>input|output)\.(?P<index>\d+)(?:\.(?P<shape>[\dx]*))?\.npy$")
# A file name of 255+ characters is replaced by a hash and listed in mapping.csv ('hash,original name'
# rows): the device's dump files (digits; msaccucmp dump_parse/dump.py:184 looks them up) and msaccucmp's
# converted files (uuid3 hex + suffix; cmp_utils/file_utils.py:176-188); mapping.py:30-38 reads the rows.
MAPPING_CSV = "mapping.csv"
_NAME_CHARS = re.compile(r"[./\\ ]")


def acl_config(model_name: str, dump_path: Path, *, mode: str = "output", layers: list[str] | None = None,
               op_switch: str = "off", data: str = "tensor") -> dict[str, Any]:
    """The acl.json ``dump`` block: leaving out ``layer`` dumps every op of the model."""
    if mode not in DUMP_MODES:
        raise ValueError(f"dump_mode must be one of {DUMP_MODES}")
    if data not in DUMP_DATA:
        raise ValueError(f"dump_data must be one of {DUMP_DATA}")
    entry: dict[str, Any] = {"model_name": model_name}
    if layers:
        entry["layer"] = list(layers)
    return {"dump": {"dump_list": [entry] if op_switch == "off" else [], "dump_path": str(dump_path),
                     "dump_mode": mode, "dump_op_switch": op_switch, "dump_data": data}}


def sanitize(name: str) -> str:
    """How dump file names spell an op name: ``.``, ``/``, ``\\`` and spaces become ``_``."""
    return _NAME_CHARS.sub("_", name)


@dataclass
class DumpFile:
    path: Path
    op_type: str
    op_name: str  # sanitized, as in the file name
    timestamp: int
    ids: list[str]  # task/stream (and context/thread/device) ids, as they appear


def parse_dump_name(name: str) -> DumpFile | None:
    """``{type}.{name}.{task}.{stream}.{ts}`` or ``{type}.{name}.({stream}.){task}.{ts}.{task_type}...``.

    The timestamp is the first field after the op name with 13 or more digits (microseconds); the
    fields between are ids. Names that fit neither form (e.g. our own .npy files) give None.
    """
    parts = name.split(".")
    if len(parts) < 4 or name.endswith(".npy"):
        return None
    for i in range(2, len(parts)):
        if parts[i].isdigit() and len(parts[i]) >= 13:
            return DumpFile(Path(name), parts[0], parts[1], int(parts[i]), parts[2:i])
    return None


def read_mapping_csv(folder: Path | None) -> dict[str, str]:
    """hash name -> original file name from ``folder/mapping.csv`` ({} when there is none); rows that are
    not two fields are skipped, as msaccucmp skips them."""
    import csv

    path = Path(folder) / MAPPING_CSV if folder else None
    if path is None or not path.is_file():
        return {}
    with open(path, newline="", encoding="utf-8") as fh:
        return {row[0]: row[1] for row in csv.reader(fh) if len(row) == 2}


def find_dump_dirs(dump_path: Path) -> list[Path]:
    """``{dump_path}/{YYYYMMDDhhmmss}/{device}/{model}/{model_id}/{data_index}/``, newest run, by index."""
    runs = sorted(p for p in dump_path.iterdir() if p.is_dir() and _TS_DIR.match(p.name)) if dump_path.is_dir() else []
    if not runs:
        return []
    leaves = [p for p in runs[-1].glob("*/*/*/*") if p.is_dir()]
    return sorted(leaves, key=lambda p: (p.parent.parent.name, p.parent.name, int(p.name) if p.name.isdigit() else 0))


def dump_files(leaf: Path) -> list[DumpFile]:
    """The dump files of one leaf folder; hashed long names are read through its mapping.csv."""
    names = read_mapping_csv(leaf)
    files = []
    for path in leaf.iterdir():
        parsed = parse_dump_name(names.get(path.name, path.name)) if path.is_file() else None
        if parsed:
            parsed.path = path
            files.append(parsed)
    return sorted(files, key=lambda f: f.timestamp)


def convert_argv(python: str | Path, msaccucmp: Path, dump_dir: Path, out_dir: Path) -> list[str]:
    return [str(python), str(msaccucmp), "convert", "-d", str(dump_dir), "-out", str(out_dir), "-t", "npy"]


def parse_converted_name(name: str) -> dict[str, Any] | None:
    """``<original dump file>.output.{i}.{shape}.npy`` (shape like ``1x3x224x224``)."""
    m = _CONVERTED.match(name)
    if not m:
        return None
    shape = [int(d) for d in m["shape"].split("x")] if m["shape"] else []
    return {"original": m["orig"], "io": m["io"], "index": int(m["index"]), "shape": shape}


def _stats(array) -> dict[str, Any]:
    import numpy as np

    finite = array[np.isfinite(array)] if array.dtype.kind == "f" else array
    return {"min": float(finite.min()) if finite.size else None, "max": float(finite.max()) if finite.size else None,
            "nan": int(np.isnan(array).sum()) if array.dtype.kind == "f" else 0,
            "inf": int(np.isinf(array).sum()) if array.dtype.kind == "f" else 0}


@dataclass
class OpNaming:
    """How NPU ops map back: sanitized dump name -> OM op name, type, and original ONNX tensor names."""

    om_names: dict[str, str]  # sanitize(om op name) -> om op name
    op_types: dict[str, str]  # om op name -> type
    tensor_names: dict[tuple[str, int], str]  # (om op name, output index) -> ONNX tensor name
    # (om op name, output k) -> (original op, its output index) or None: the OM JSON's _datadump_origin_name
    # (compare.mapping.om_output_origins); the dump's own original_op is checked against it
    origins: dict = field(default_factory=dict)

    @classmethod
    def from_om(cls, op_types: dict[str, str], tensor_names: dict[tuple[str, int], str] | None = None,
                origins: dict | None = None):
        return cls({sanitize(n): n for n in op_types}, dict(op_types), dict(tensor_names or {}), dict(origins or {}))


def build_index(converted_dir: Path, out_dir: Path, naming: OpNaming, *, model: str,
                feeds: dict[str, Any], dump_dir: Path | None = None) -> Path:
    """Our dump layout from msaccucmp's converted npy files (outputs only, in execution order).

    ``dump_dir``: the device's dump folder the files were converted from: its mapping.csv names the
    dump files the device wrote under a hash (the converted names start with that hash)."""
    import numpy as np

    tensors_dir = out_dir / "tensors"
    tensors_dir.mkdir(parents=True, exist_ok=True)
    converted_names, dump_names = read_mapping_csv(converted_dir), read_mapping_csv(dump_dir)
    rows: list[tuple[int, str, int, Path, dict]] = []
    for path in converted_dir.iterdir():
        if path.name == MAPPING_CSV:
            continue
        info = parse_converted_name(converted_names.get(path.name, path.name))
        dump = parse_dump_name(dump_names.get(info["original"], info["original"])) if info else None
        if dump and info["io"] == "output":
            rows.append((dump.timestamp, dump.op_name, info["index"], path, {"op_type": dump.op_type}))
    entries = []
    for name, array in feeds.items():
        rel = f"tensors/{len(entries):05d}.npy"
        np.save(out_dir / rel, array)
        entries.append({"name": name, "op_name": name, "op_type": "Input", "topo_index": -1,
                        "dtype": str(array.dtype), "shape": list(array.shape), "file": rel, **_stats(array)})
    for topo, (_ts, dumped_name, index, path, extra) in enumerate(sorted(rows, key=lambda r: (r[0], r[2]))):
        om_name = naming.om_names.get(dumped_name, dumped_name)
        array = np.load(path)
        rel = f"tensors/{len(entries):05d}.npy"
        np.save(out_dir / rel, array)
        entries.append({"name": naming.tensor_names.get((om_name, index), f"{om_name}:output:{index}"),
                        "op_name": om_name, "op_type": naming.op_types.get(om_name, extra["op_type"]),
                        "topo_index": topo, "dtype": str(array.dtype), "shape": list(array.shape),
                        "file": rel, **_stats(array)})
    index = {"format": DUMP_FORMAT, "model": model, "backend": "ascend",
             "inputs": {n: {"shape": list(a.shape), "dtype": str(a.dtype)} for n, a in feeds.items()},
             "tensors": entries}
    return write_json_atomic(out_dir / "index.json", index)


def _entry_for(out_dir: Path, position: int, array, **fields) -> dict[str, Any]:
    import numpy as np

    rel = f"tensors/{position:05d}.npy"
    np.save(out_dir / rel, array)
    dtype = fields.pop("dtype", None) or str(array.dtype)
    return {**fields, "dtype": dtype, "shape": list(array.shape), "file": rel, **_stats(array)}


def device_tensor(tensor) -> tuple[Any, str | None]:
    """One dumped tensor as the golden holds it (values in the dtype dumped), or (as dumped, reason)."""
    from ascendpipe.backends.ascend import device_layout
    from ascendpipe.backends.ascend.dump_data import DumpFormatError

    try:
        flat = tensor.array()
    except DumpFormatError:
        import numpy as np

        return np.frombuffer(tensor.data, dtype=np.uint8).copy(), f"device dtype {tensor.dtype_name}"
    array, reason = device_layout.to_golden(flat, tensor.format, tensor.shape, tensor.original_shape,
                                            sub_format=tensor.sub_format)
    if array is None:
        count = _prod(tensor.shape)
        return (flat[:count].reshape(tensor.shape) if flat.size >= count else flat), reason
    return array, None


def _prod(shape) -> int:
    import math

    return math.prod(int(d) for d in shape)


def _read_headers(leaf: Path) -> list[tuple[DumpFile, Any]]:
    """Every dump file's header, each checked against its file (sizes, shapes, tensor count) before a
    tensor is read or a file written: a damaged header is an error naming the file and the field."""
    from ascendpipe.backends.ascend.dump_data import DumpFormatError, header_bytes_needed, read_dump_header
    from ascendpipe.errors import Location, UserError

    headers = []
    for dumped in dump_files(leaf):
        try:
            size = dumped.path.stat().st_size
            with open(dumped.path, "rb") as fh:
                head = fh.read(8)
                head += fh.read(max(0, min(header_bytes_needed(head), size) - len(head)))
            headers.append((dumped, read_dump_header(head, size)))
        except DumpFormatError as exc:
            raise UserError(f"cannot read the device dump {dumped.path.name}: {exc}",
                            Location(file=str(dumped.path), field=exc.field),
                            hint="the dump may be cut short (disk full?) or not a DumpData file; run the dump "
                                 "again") from None
        except OSError as exc:
            raise UserError(f"cannot read the device dump {dumped.path.name}: {exc}", Location(file=str(dumped.path)),
                            hint="check the dump folder is readable") from None
    return headers


def _origin_check(naming: OpNaming, om_name: str, index: int, tensor) -> tuple[list | None, str | None]:
    """The dump's ``original_op`` as [name, output index], and a reason where the OM JSON's
    ``_datadump_origin_name`` names another op for the same output (then neither is trusted)."""
    op = tensor.original_op
    origin = [op.name, int(op.output_index)] if op is not None and op.name else None
    if origin is None or not naming.origins:
        return origin, None
    from ascendpipe.compare.mapping import origin_of

    expected, described = origin_of(naming.origins, om_name, index)
    if described and expected is not None and [expected[0], int(expected[1])] != origin:
        return origin, (f"the dump's original_op {origin[0]}:{origin[1]} is not the OM JSON's "
                        f"_datadump_origin_name {expected[0]}:{expected[1]}")
    return origin, None


def index_from_device_dumps(leaf: Path, out_dir: Path, naming: OpNaming, *, model: str,
                            feeds: dict[str, Any]) -> Path:
    """Our dump layout straight from the device's dump files in ``leaf`` (outputs, in execution order):
    each tensor in the golden's layout and shape, in the dtype it was dumped in; one whose format cannot be
    converted is kept as dumped with ``not_compared: "device format X"`` (compare shows no number for it).
    Each output's ``original_op`` (the op a fused kernel's output stands for) is kept as ``origin``:
    compare pairs by it where no OM JSON is at hand. Every header is checked before anything is written."""
    from ascendpipe.backends.ascend import device_layout
    from ascendpipe.errors import Location, UserError

    headers = _read_headers(leaf)
    (out_dir / "tensors").mkdir(parents=True, exist_ok=True)
    entries = [_entry_for(out_dir, k, array, name=name, op_name=name, op_type="Input", topo_index=-1)
               for k, (name, array) in enumerate(feeds.items())]
    for topo, (dumped, record) in enumerate(headers):
        om_name = record.op_name if record.op_name in naming.op_types else naming.om_names.get(dumped.op_name,
                                                                                             dumped.op_name)
        try:
            with open(dumped.path, "rb") as fh:
                for tensor in record.outputs:
                    if tensor.offset >= 0:
                        fh.seek(tensor.offset)
                        tensor.data = fh.read(tensor.size)
        except OSError as exc:
            raise UserError(f"cannot read the device dump {dumped.path.name}: {exc}", Location(file=str(dumped.path)),
                            hint="check the dump folder is readable") from None
        for index, tensor in enumerate(record.outputs):
            array, reason = device_tensor(tensor)
            tensor.data = b""  # the bytes are in the array now
            origin, disagreement = _origin_check(naming, om_name, index, tensor)
            fields = {"name": naming.tensor_names.get((om_name, index), f"{om_name}:output:{index}"),
                      "op_name": om_name, "op_type": naming.op_types.get(om_name, dumped.op_type), "topo_index": topo,
                      "device_format": device_layout.format_name(tensor.format),
                      "device_shape": [int(d) for d in tensor.shape]}
            if tensor.sub_format:
                fields["device_sub_format"] = int(tensor.sub_format)
            if origin is not None:
                fields["origin"] = origin
            if tensor.dtype_name == "bfloat16" or (reason or "").startswith("device dtype"):
                fields["dtype"] = tensor.dtype_name  # bf16: widened exactly to float32 in the file; else raw bytes
            if reason or disagreement:
                fields["not_compared"] = reason or disagreement
            entries.append(_entry_for(out_dir, len(entries), array, **fields))
    index = {"format": DUMP_FORMAT, "model": model, "backend": "ascend",
             "inputs": {n: {"shape": list(a.shape), "dtype": str(a.dtype)} for n, a in feeds.items()},
             "tensors": entries}
    return write_json_atomic(out_dir / "index.json", index)
