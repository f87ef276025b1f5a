"""Checks the standalone commands make before they write or allocate anything (pure but for reading
the files named; no onnxruntime).

- ``refuse_output_over_inputs``: an ``--output`` that is, holds or lies inside one of the command's
  inputs would overwrite or mix with what the user gave (``convert --model m/model.onnx --output m``
  replaced the fp32 model with the emulated one). Paths are compared by their real path, so a link
  or ``./`` spelling changes nothing.
- ``model_file``: the model a flag names, found (a file, or a folder holding one ``.onnx``) and read
  as ONNX: a file that is not one, or a graph with nothing in it, is one line naming the file.
- ``random_input_size``: the random inputs a command makes when ``--input`` is not given, sized
  from the model's dims before one byte is allocated.
- ``text_file``: a config file a flag names (keep_dtype, fusion switch, AIPP) that is not text.
"""

from __future__ import annotations

import os
from pathlib import Path

from ascendpipe.errors import Location, UserError

# random inputs above this are refused (a model whose dims are wrong, or need real data)
MAX_RANDOM_INPUT_BYTES = 4 << 30


def _real(path) -> str:
    return os.path.realpath(os.path.abspath(os.fspath(path)))


def _within(inner: str, outer: str) -> bool:
    return inner == outer or inner.startswith(outer.rstrip(os.sep) + os.sep)


def refuse_output_over_inputs(output, inputs: dict, *, flag: str = "--output",
                              instead: str = "write the output to a folder of its own", shown: str | None = None) -> None:
    """A UserError when ``output`` is, holds or lies inside one of ``inputs`` ({flag: path or None});
    located at ``FLAG SHOWN`` (default the output path as given)."""
    if output is None:
        return
    out = _real(output)
    for in_flag, path in inputs.items():
        if path is None or path == "":
            continue
        inp = _real(path)
        if out == inp:
            how = f"it is {in_flag} {path}: the output would overwrite it"
        elif _within(inp, out):
            how = f"it holds {in_flag} {path}: the output would overwrite it"
        elif _within(out, inp):
            how = f"it lies inside {in_flag} {path}: the output would be written into that input"
        else:
            continue
        raise UserError(f"{how}; {instead}", Location(file=f"{flag} {shown or output}"))


def _size(n: float) -> str:
    units = ("bytes", "KiB", "MiB", "GiB", "TiB", "PiB", "EiB")
    for unit in units[:-1]:
        if n < 1024:
            return f"{n:.0f} {unit}" if unit == "bytes" else f"{n:.1f} {unit}"
        n /= 1024
    return f"{n:.1f} {units[-1]}"


_CHECKED: dict[tuple, list] = {}  # (real path, size, mtime) -> input specs: each model is parsed once


def model_specs(path: Path, flag: str) -> list:
    """The input specs of the ONNX model at ``path``, read once (weights in external files not
    loaded); one located line when the file is not ONNX or its graph is empty."""
    from ascendpipe.onnxgraph import graph_input_specs
    from ascendpipe.onnxgraph import load_model as load

    st = os.stat(path)
    key = (_real(path), st.st_size, st.st_mtime_ns)
    if key not in _CHECKED:
        graph = load(path, label=f"{flag} {path}").graph
        if not graph.node and not graph.output:
            raise UserError("the model's graph is empty (no nodes, no outputs): nothing to run; give the "
                            "exported model", Location(file=f"{flag} {path}"))
        from ascendpipe.onnxgraph import graph_cycle

        cycle = graph_cycle(graph)
        if cycle:
            raise UserError(f"the graph has a cycle ({' -> '.join(cycle)}): an ONNX graph is acyclic, so no tool "
                            "can run it; re-export the model", Location(file=f"{flag} {path}"))
        specs = graph_input_specs(graph)
        from ascendpipe.inputs import check_specs

        # a sequence, optional or map input cannot be fed (infer, dump, compare and fix alike): refused
        # here, before anything is made or written
        check_specs(specs, Location(file=f"{flag} {path}"))
        _CHECKED[key] = specs
    from ascendpipe import onnxexternal

    # its external data (weights files beside it), strictly, before any command reads or writes a byte
    onnxexternal.check_model(path, label=f"{flag} {path}")
    return _CHECKED[key]


def model_file(path, flag: str = "--model") -> Path:
    """The ``.onnx`` file ``path`` names (itself, or the one in a convert output folder), read as
    ONNX once to be sure it is one."""
    from ascendpipe.contract import find_model_file

    try:
        found = find_model_file(Path(path))
    except UserError as err:
        raise UserError(err.message, Location(file=f"{flag} {path}"), hint=err.hint) from None
    model_specs(found, flag)
    return found


def onnx_side(path, flag: str) -> Path | None:
    """For a flag that takes a model or a dump (compare's --golden / --target): the ONNX file when
    ``path`` is one (or a folder holding exactly one, and no dump index), checked as ONNX; else None."""
    path = Path(path)
    if path.is_file():
        if path.suffix.lower() in (".om", ".npy", ".npz", ".json"):
            return None
        model_specs(path, flag)
        return path
    if path.is_dir() and not (path / "index.json").exists():
        found = sorted(p for p in path.iterdir() if p.suffix == ".onnx" and p.is_file())
        if len(found) == 1:
            model_specs(found[0], flag)
            return found[0]
    return None


def random_input_size(model: Path, batch_size: int | None, *, flag: str = "--model") -> None:
    """Refuse, before allocating, random inputs of more than MAX_RANDOM_INPUT_BYTES for ``model``:
    the dims as the model gives them, the batch axis (a symbolic first dim) at ``batch_size`` or 1."""
    import numpy as np

    specs = model_specs(model, flag)
    total, biggest = 0, None
    for spec in specs:
        count = 1
        for axis, dim in enumerate(spec.shape):
            count *= dim if isinstance(dim, int) and dim > 0 else ((batch_size or 1) if axis == 0 else 1)
        nbytes = count * np.dtype(spec.dtype).itemsize
        total += nbytes
        if biggest is None or nbytes > biggest[0]:
            biggest = (nbytes, spec)
    if total > MAX_RANDOM_INPUT_BYTES:
        _, spec = biggest
        dims = ", ".join(str(d) for d in spec.shape)
        raise UserError(f"random inputs for this model would take {_size(total)} (input '{spec.name}' is "
                        f"[{dims}] {spec.dtype}), more than the {_size(MAX_RANDOM_INPUT_BYTES)} made without "
                        f"--input; give the model's real inputs with --input FILE.npy|FILE.npz|FOLDER, or fix "
                        f"its input dims", Location(file=f"{flag} {model}"))


def text_file(path, flag: str) -> None:
    """A config file a flag names (keep_dtype, fusion switch, AIPP) must be text: a binary one is one line."""
    if path is None or not os.path.isfile(path):
        return
    with open(path, "rb") as handle:
        head = handle.read(1 << 20)
    bad = [head.find(b"\0")] if b"\0" in head else []
    try:
        head.decode("utf-8")
    except UnicodeDecodeError as exc:
        if not (exc.reason == "unexpected end of data" and len(head) == 1 << 20):  # not a letter cut at 1 MiB
            bad.append(exc.start)
    if bad:
        raise UserError(f"not a text file (byte {min(bad)} is not UTF-8); {flag} takes a text file "
                        f"(as ATC reads it)", Location(file=f"{flag} {path}"))
