"""Hostile and careless external-data models for the strict reader's tests (tests/test_onnxexternal.py,
tests/cli/test_external_refusals.py): one small model (x [1, 16] -> MatMul W [16, 16] -> y), its
weight ``W`` external in ``w.bin`` at offset 4096, then one thing wrong with it per case."""

from __future__ import annotations

import os
from pathlib import Path

import numpy as np

W = (np.arange(256, dtype=np.float32).reshape(16, 16) - 128) / 64  # the weight's values
GOOD = [("location", "w.bin"), ("offset", "4096"), ("length", "1024")]


def model_with(folder: Path, entries=GOOD, *, dims=(16, 16), data_type: int = 1, name: str = "model.onnx",
               constant: bool = False, data: bytes | None = None) -> Path:
    """``folder/name``: the model, its ``W`` external with ``entries`` (key, value pairs as written),
    ``dims`` and ``data_type`` as declared; ``w.bin`` holds 4096 zero bytes then ``W``'s bytes (or
    ``data``). ``constant``: ``W`` is a Constant node's value instead of an initializer."""
    import onnx
    from onnx import TensorProto, helper

    folder = Path(folder)
    folder.mkdir(parents=True, exist_ok=True)
    (folder / "w.bin").write_bytes(b"\0" * 4096 + W.tobytes() if data is None else data)
    tensor = TensorProto(name="W", data_type=data_type, dims=list(dims), data_location=TensorProto.EXTERNAL)
    for key, value in entries:
        tensor.external_data.add(key=key, value=value)
    nodes = [helper.make_node("MatMul", ["x", "W"], ["y"], name="mm")]
    inits = [tensor]
    if constant:
        nodes.insert(0, helper.make_node("Constant", [], ["W"], name="const_w", value=tensor))
        inits = []
    graph = helper.make_graph(nodes, "g", [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 16])],
                              [helper.make_tensor_value_info("y", TensorProto.FLOAT, [1, 16])], inits)
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    model.ir_version = 8
    onnx.save(model, str(folder / name))
    return folder / name


def with_location(folder: Path, location: str, **kw) -> Path:
    return model_with(folder, [("location", location), ("offset", "4096"), ("length", "1024")], **kw)


# case -> (what to make, the words the one line must hold: the tensor, the field's words)
def make_case(case: str, root: Path) -> Path:
    """The model of one hostile case under ``root/model`` (a secret file beside ``root`` for the
    cases that reach out of the folder)."""
    root = Path(root).absolute()
    folder = root / "model"
    root.mkdir(parents=True, exist_ok=True)
    secret = root / "secret.bin"
    secret.write_bytes(b"\0" * 4096 + (W * 7).tobytes())
    entries = {
        "no_location": [("offset", "4096"), ("length", "1024")],
        "empty_location": [("location", ""), ("offset", "4096"), ("length", "1024")],
        "offset_abc": [("location", "w.bin"), ("offset", "abc"), ("length", "1024")],
        "offset_float": [("location", "w.bin"), ("offset", "4096.0"), ("length", "1024")],
        "offset_hex": [("location", "w.bin"), ("offset", "0x1000"), ("length", "1024")],
        "offset_negative": [("location", "w.bin"), ("offset", "-1"), ("length", "1024")],
        "offset_plus": [("location", "w.bin"), ("offset", "+4096"), ("length", "1024")],
        "length_fraction": [("location", "w.bin"), ("offset", "4096"), ("length", "262144.5")],
        "length_wrong": [("location", "w.bin"), ("offset", "4096"), ("length", "512")],
        "past_the_end": [("location", "w.bin"), ("offset", "4608"), ("length", "1024")],
        "offset_huge": [("location", "w.bin"), ("offset", "9" * 30), ("length", "1024")],
        "duplicate_key": [("location", "w.bin"), ("location", "secret.bin"), ("offset", "4096"), ("length", "1024")],
        "unknown_key": [*GOOD, ("basepath", "/etc")],
        "absolute": [("location", str(secret)), ("offset", "4096"), ("length", "1024")],
        "dotdot": [("location", "../secret.bin"), ("offset", "4096"), ("length", "1024")],
        "nul": [("location", "w.bin\x00x"), ("offset", "4096"), ("length", "1024")],
        "trailing_slash": [("location", "w.bin/"), ("offset", "4096"), ("length", "1024")],
    }
    if case in entries:
        return model_with(folder, entries[case])
    if case == "symlink_outside":
        path = model_with(folder)
        (folder / "w.bin").unlink()
        os.symlink(secret, folder / "w.bin")
        return path
    if case == "symlinked_folder":
        path = with_location(folder, "sub/w.bin")
        os.symlink(root, folder / "sub")
        (root / "w.bin").write_bytes(secret.read_bytes())
        return path
    if case == "missing":
        path = model_with(folder)
        (folder / "w.bin").unlink()
        return path
    if case == "folder":
        path = with_location(folder, "d")
        (folder / "d").mkdir()
        return path
    if case == "fifo":
        path = model_with(folder)
        (folder / "w.bin").unlink()
        os.mkfifo(folder / "w.bin")
        return path
    if case == "no_length_huge_dims":  # a missing length, dims far past the (sparse) file
        path = model_with(folder, [("location", "w.bin"), ("offset", "0")], dims=(1 << 20, 1 << 20))
        with open(folder / "w.bin", "r+b") as handle:
            handle.truncate(64 << 30)  # 64 GiB, sparse
        return path
    if case == "string_tensor":
        return model_with(folder, GOOD, data_type=8)
    if case == "negative_dim":
        return model_with(folder, GOOD, dims=(-16, 16))
    if case == "constant_attribute":
        return model_with(folder, [("location", "w.bin"), ("offset", "0x1000"), ("length", "1024")], constant=True)
    raise KeyError(case)


# the words each case's one line holds (besides the tensor's name, 'W', and "external data")
CASES = {
    "no_location": "has no location",
    "empty_location": "has no location",
    "offset_abc": "offset 'abc' is not a whole non-negative number",
    "offset_float": "offset '4096.0' is not a whole non-negative number",
    "offset_hex": "offset '0x1000' is not a whole non-negative number",
    "offset_negative": "offset '-1' is not a whole non-negative number",
    "offset_plus": "offset '+4096' is not a whole non-negative number",
    "length_fraction": "length '262144.5' is not a whole non-negative number",
    "length_wrong": "length 512 is not the tensor's 1024 bytes",
    "past_the_end": "needs bytes 4608 to 5632 of 'w.bin', which holds 5120",
    "offset_huge": "needs bytes 999999999999999999999999999999",
    "duplicate_key": "gives 'location' twice",
    "unknown_key": "key 'basepath' is not one onnxruntime reads",
    "absolute": "is not a file inside the model's folder",
    "dotdot": "location '../secret.bin' is not a file inside the model's folder",
    "nul": "is not a file inside the model's folder",
    "trailing_slash": "location 'w.bin/' is not a file inside the model's folder",
    "symlink_outside": "location 'w.bin' is a link to",
    "symlinked_folder": "location 'sub/w.bin' is a link to",
    "missing": "file 'w.bin' is missing",
    "folder": "file 'd' is a folder",
    "fifo": "file 'w.bin' is not a regular file",
    "no_length_huge_dims": "needs bytes 0 to 4398046511104 of 'w.bin', which holds 68719476736",
    "string_tensor": "a tensor of strings",
    "negative_dim": "with dims [-16, 16] has no fixed size",
    "constant_attribute": "offset '0x1000' is not a whole non-negative number",
}
