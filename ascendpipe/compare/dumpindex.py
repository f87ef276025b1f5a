"""A dump folder's index and tensors as compare reads them: the index checked entry by entry before
any path is built from it, tensors memory-mapped, and the graph the dump recorded (or the model's)."""

from __future__ import annotations

import json
from pathlib import Path

from ascendpipe.compare import npymap
from ascendpipe.contract import DUMP_FORMAT
from ascendpipe.errors import Location, UserError


def load_index(dump_dir, what: str = "dump") -> dict:
    """A dump's index: from a folder, or from a dump held in the cache (``store.dump_cache.CachedDump``)."""
    if hasattr(dump_dir, "read_index"):
        index = dump_dir.read_index()
        path = dump_dir
    else:
        path = Path(dump_dir) / "index.json"
        if not path.is_file():
            raise UserError(f"{what} directory {dump_dir} has no index.json; give a dump directory or a model", Location(file=str(dump_dir)))
        try:
            index = json.loads(path.read_text())
        except json.JSONDecodeError as exc:
            raise UserError(f"{path} is not valid JSON: {exc.msg} (line {exc.lineno})", Location(file=str(path))) from None
        except UnicodeDecodeError as exc:
            raise UserError(f"{path} is not a text file (byte {exc.start} is not UTF-8): not a dump index",
                            Location(file=str(path))) from None
        except RecursionError:
            raise UserError(f"{path} is JSON nested deeper than it can be read: not a dump index",
                            Location(file=str(path))) from None
    if not isinstance(index, dict) or index.get("format") != DUMP_FORMAT or not isinstance(index.get("tensors"), list):
        raise UserError(f"{path} is not an ascendpipe dump index (expected format '{DUMP_FORMAT}')", Location(file=str(path)))
    _check_entries(index, path)
    return index


def _check_entries(index: dict, path) -> None:
    """Every tensor entry of an index read from disk (a dump made elsewhere, or edited) checked before
    use: an object with a text ``name`` and a ``file`` inside the dump folder (never ``../`` nor an
    absolute path: nothing is read from out of it), a ``shape`` of whole numbers where given."""
    where = Location(file=str(path))
    for i, entry in enumerate(index["tensors"]):
        if not isinstance(entry, dict):
            raise UserError(f"tensors[{i}]: expected an object, got {json.dumps(entry)[:40]}", where)
        # a statistics-only entry (a dump within a disk budget: ``dump_model(full=...)``) has no file
        keys = ("name",) if entry.get("statistics") is True and "file" not in entry else ("name", "file")
        for key in keys:
            if not isinstance(entry.get(key), str) or not entry.get(key):
                raise UserError(f"tensors[{i}].{key}: {json.dumps(entry.get(key))[:40]} is not a name", where)
        parts = Path(entry["file"]).parts if "file" in entry else ()
        if "file" in entry and (Path(entry["file"]).is_absolute() or ".." in parts):
            raise UserError(f"tensors[{i}].file: '{entry['file']}' is outside the dump folder; a dump "
                            "names its tensors inside it (tensors/00001.npy)", where)
        shape = entry.get("shape")
        if shape is not None and (not isinstance(shape, list)
                                  or not all(isinstance(d, int) and not isinstance(d, bool) and d >= 0 for d in shape)):
            raise UserError(f"tensors[{i}].shape: {json.dumps(shape)[:40]} is not a list of sizes", where)
    if "graph" in index and index["graph"] is not None and not isinstance(index["graph"], dict):
        raise UserError(f"graph: expected an object, got {json.dumps(index['graph'])[:40]}", where)


def _load_tensor(dump_dir, entry: dict) -> npymap.Mapped:
    """A dump's tensor; from a folder, memory-mapped (read-only): the compare reads it block by block,
    and its pages are the page cache's, handed back as it goes (``npymap``) or with the map."""
    if hasattr(dump_dir, "load_tensor"):
        return _as_dumped(npymap.Mapped(dump_dir.load_tensor(entry["file"])), entry)
    path = Path(dump_dir) / entry["file"]
    try:
        return _as_dumped(npymap.map_npy(path), entry)
    except (OSError, ValueError) as exc:
        from ascendpipe.inputs import npy_error

        raise UserError(f"cannot read tensor '{entry['name']}' from {path}: {npy_error(exc)}", Location(file=str(path))) from None


def _as_dumped(mapped: npymap.Mapped, entry: dict) -> npymap.Mapped:
    """A bfloat16 tensor comes back from its .npy as numpy's 2-byte void (``<V2``, how ml_dtypes' dtype is
    saved): read as the bfloat16 the index names, byte for byte."""
    array = mapped.array
    if entry.get("dtype") == "bfloat16" and array.dtype.kind == "V" and array.dtype.itemsize == 2:
        from ascendpipe.inputs import bfloat16

        mapped.array = array.view(bfloat16())
    return mapped


def _as_dump(d):
    """A dump folder as a Path; a cached dump as it is."""
    return d if hasattr(d, "read_index") else Path(d)


def dump_graph(dump_dir) -> dict:
    """The graph facts of a dump's model: stored in its index (``graph``), else read from the model
    its index names (older dumps name it by path; a relative one is relative to the dump folder)."""
    index = load_index(dump_dir, "golden dump")
    if isinstance(index.get("graph"), dict):
        return index["graph"]
    model = index.get("model")
    if model and not hasattr(dump_dir, "read_index") and not Path(model).is_absolute():
        model = Path(dump_dir) / model
    return graph_info(model)


def graph_info(model_path: Path | str | None) -> dict:
    """Graph outputs and op edges of an ONNX model: {"outputs", "output_ops", "producers"}; {} if unreadable."""
    if not model_path or not str(model_path).endswith(".onnx") or not Path(model_path).is_file():
        return {}
    from ascendpipe.onnxgraph import graph_summary, load_graph, name_nodes

    graph = load_graph(model_path).graph  # the nodes only: no weight is read
    name_nodes(graph)  # as the dump names unnamed ops
    return graph_summary(graph)


def output_indices(graph) -> dict[str, int]:
    """Each tensor's position among its producer's outputs: msaccucmp's TensorIndex is `op:output:<it>`."""
    return {out: k for node in graph.node for k, out in enumerate(node.output) if out}


def model_output_indices(model_path: Path | str | None) -> dict[str, int]:
    if not model_path or not str(model_path).endswith(".onnx") or not Path(model_path).is_file():
        return {}
    import onnx

    return output_indices(onnx.load(str(model_path), load_external_data=False).graph)
