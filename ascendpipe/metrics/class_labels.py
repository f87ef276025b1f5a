"""Classification ground truth: one class index per sample, in the order of the outputs' rows.

Three formats, told apart by the file's suffix (in a folder, the first of ``labels.npy``,
``labels.txt``, ``labels.json``):
- ``.npy``: an integer array (any shape, read flat); floats only where every value is a whole number.
- ``.txt``: one sample a line, its class index (``7``); a line may start with the sample's file name
  (``img_0001.png 7``, as ImageNet's val list does): the last field is the index. Blank lines and
  ``#`` comments are skipped.
- ``.json``: a list of class indices, or ``{"labels": [...]}``.
Every bad entry is a ``UserError`` naming the file and the line (or entry) and what to write.
"""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np

from ascendpipe.errors import Location, UserError

FILE_NAMES = ("labels.npy", "labels.txt", "labels.json")
DOC = """### Classification

`task: classification` scores `top1` and `top5` (`params.topk`) of the outputs' rows against the
ground truth: one class index (0..C-1) per sample, in the order the infer stage ran them. `labels` is
the file, or a folder holding `labels.npy`, `labels.txt` or `labels.json` (the first of them, in that order):

| format | holds | example |
| --- | --- | --- |
| `.npy` | an integer array (`numpy.save`), read flat; floats only if every value is whole | `np.save("labels.npy", np.array([3, 0, 7]))` |
| `.txt` | one sample a line: its class index, or its file name then the index (ImageNet's val list); blank lines and `#` comments skipped | `3` / `img_0002.png 0` |
| `.json` | a list of class indices, or `{"labels": [...]}` | `[3, 0, 7]` |

A bad entry is one line naming the file and its line (or entry) and what to write there: a class
name where an index belongs (`labels.txt:4: 'cat' is not a class index; ...`), an `.npy` that holds
Python objects or is text, an index beyond the outputs' classes. Ties count against the sample: the
true class is in the top k only if fewer than k other classes score at least as high.

"""
FORMATS = "an .npy integer array, a .txt file of one class index a line, or a .json list of class indices"


def find_labels_file(base: Path, where: Location) -> Path:
    """``base`` itself, or the one labels file in the folder ``base``."""
    base = Path(base)
    if base.is_file():
        return base
    found = [base / name for name in FILE_NAMES if (base / name).is_file()]  # the first, in this order
    if not found:
        raise UserError(f"labels: {base} has none of {', '.join(FILE_NAMES)} (classification reads {FORMATS})", where)
    return found[0]


def read_class_labels(path: Path, where: Location | None = None) -> np.ndarray:
    """The class index of every sample (int64, flat) from ``path`` in any of the three formats."""
    path = Path(path)
    where = where or Location()
    located = Location(**{**where.parts(), "file": str(path)})
    suffix = path.suffix.lower()
    if suffix == ".txt":
        return _from_text(path, where)
    if suffix == ".json":
        return _from_json(path, located)
    if suffix == ".npy":
        return _from_npy(path, located)
    raise UserError(f"labels: {path.name} is not .npy, .txt or .json; classification reads {FORMATS}", located)


def _from_npy(path: Path, where: Location) -> np.ndarray:
    with open(path, "rb") as f:
        magic = f.read(6)
    if magic != b"\x93NUMPY":
        raise UserError(f"labels: {path.name} is not an .npy file (numpy.save writes one); a text file of one "
                        "class index a line is read when named .txt", where)
    from ascendpipe.npyheader import check_npy_sizes

    check_npy_sizes(path, where, f"labels: {path.name}")  # its header's claim, before numpy allocates it
    try:
        values = np.load(path, allow_pickle=False)
    except ValueError:  # an object array: numpy would need allow_pickle
        raise UserError(f"labels: {path.name} holds Python objects, not numbers; save the class indices as an "
                        "integer array (numpy.save(path, numpy.array(indices, dtype=numpy.int64)))", where) from None
    except (OSError, EOFError) as err:
        raise UserError(f"labels: {path.name} cannot be read as .npy ({err})", where) from None
    if values.dtype.kind in "iub":
        return values.reshape(-1).astype(np.int64)
    if values.dtype.kind == "f":
        flat = values.reshape(-1)
        bad = np.flatnonzero(~np.isfinite(flat) | (flat != np.round(flat)))
        if bad.size:
            raise UserError(f"labels: {path.name} entry {int(bad[0])} is {float(flat[bad[0]])!r}, not a class index "
                            "(a whole number)", where)
        return flat.astype(np.int64)
    raise UserError(f"labels: {path.name} holds {values.dtype} values, not class indices; save an integer array",
                    where)


def _index(text: str) -> int | None:
    try:
        return int(text)
    except ValueError:
        return None


def _from_text(path: Path, where: Location) -> np.ndarray:
    try:
        lines = path.read_text(encoding="utf-8").splitlines()
    except UnicodeDecodeError:
        raise UserError(f"labels: {path.name} is not UTF-8 text (a .txt labels file holds one class index a line)",
                        Location(**{**where.parts(), "file": str(path)})) from None
    out = []
    for number, line in enumerate(lines, 1):
        text = line.split("#", 1)[0].strip()
        if not text:
            continue
        fields = text.split()
        value = _index(fields[-1])
        if value is None:
            raise UserError(f"'{fields[-1]}' is not a class index; write one class index a line (e.g. 7), or the "
                            "sample's file name then its index (img_0001.png 7)",
                            Location(**{**where.parts(), "file": str(path), "line": number}))
        out.append(value)
    if not out:
        raise UserError(f"labels: {path.name} holds no class index", Location(**{**where.parts(), "file": str(path)}))
    return np.asarray(out, dtype=np.int64)


def _from_json(path: Path, where: Location) -> np.ndarray:
    from ascendpipe.userfile import load_json

    try:
        doc = load_json(path, "labels file")
    except UserError as err:  # empty, not text, not JSON, nested too deep, too large
        raise UserError(f"labels: {err.message}", where) from None
    if isinstance(doc, dict) and "labels" in doc:
        doc = doc["labels"]
    if not isinstance(doc, list):
        raise UserError(f"labels: {path.name} holds a {type(doc).__name__}; write a list of class indices "
                        "([3, 0, 7, ...]) or {\"labels\": [...]}", where)
    for i, value in enumerate(doc):
        if isinstance(value, bool) or not isinstance(value, int):
            raise UserError(f"labels: {path.name} entry {i} is {json.dumps(value)}, not a class index (a whole number)",
                            where)
    if not doc:
        raise UserError(f"labels: {path.name} holds no class index", where)
    return np.asarray(doc, dtype=np.int64)
