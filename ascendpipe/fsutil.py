"""Atomic file writes: a reader (or a build killed half-way) never sees half a file.

One implementation for the whole package: write to a temp file in the same folder, then
``os.replace`` it over the target (atomic on POSIX within one file system).
"""

from __future__ import annotations

import json
import os


def write_bytes_atomic(path, data: bytes) -> str:
    import tempfile

    path = os.fspath(path)
    folder = os.path.dirname(path) or "."
    os.makedirs(folder, exist_ok=True)
    fd, tmp = tempfile.mkstemp(dir=folder, prefix=f".{os.path.basename(path)}.", suffix=".tmp")
    try:
        with os.fdopen(fd, "wb") as handle:
            handle.write(data)
        os.replace(tmp, path)
    except BaseException:
        if os.path.exists(tmp):
            os.unlink(tmp)
        raise
    return path


def write_text_atomic(path, text: str):
    """Write UTF-8 text atomically; returns ``path`` as given (a Path stays a Path)."""
    write_bytes_atomic(path, text.encode("utf-8"))
    return path


def write_json_atomic(path, obj, *, default=None, allow_nan: bool = True):
    text = json.dumps(obj, indent=2, allow_nan=allow_nan, default=default) + "\n"
    return write_text_atomic(path, text)
