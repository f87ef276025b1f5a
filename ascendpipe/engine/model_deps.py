"""The weights files a model dep references (ONNX external data) are deps of the stage too.

A stage that reads ``models/m.onnx`` reads ``models/m.onnx.data`` as well: its content is part of
the stage's key, so rewriting the weights makes the stage stale and ``status`` names the file
(``dep models/m.onnx.data modified``). Each reference is checked by the strict reader
(``onnxexternal.references``) before its file is hashed: a location outside the model's folder
(a link out of it included) is never read, even to hash it, and a bad reference is the stage's
one-line error at its field's line, in ``status`` and ``build`` alike. The references come from the
model file's bytes (``onnxrefs``), never from onnx: a deciding no-op build imports nothing heavy,
and the hasher's stats of the data files are what the no-op memo keeps (``engine/noop_memo.py``).
"""

from __future__ import annotations

import os

from ascendpipe.errors import Location, UserError
from ascendpipe.store.hashing import DIR_SUFFIX


def is_model_file(rel: str, digest) -> bool:
    """Whether a dep could hold external references: an ONNX file (not a folder: a folder's hash
    holds every file inside it, and a model's weights must lie inside its folder)."""
    return bool(digest) and not digest.endswith(DIR_SUFFIX) and rel.lower().endswith(".onnx")


def external_deps(hasher, workspace: str, rel: str, where: Location) -> dict[str, str | None]:
    """{path of each weights file ``rel`` references, as a dep is written: its hash}; a UserError at
    ``where`` naming the model, the tensor and the field for a reference the strict reader refuses."""
    from ascendpipe import onnxexternal

    model = os.path.join(workspace, rel)
    try:
        refs = onnxexternal.references(model, label=rel)
    except UserError as err:
        raise UserError(f"'{rel}': {err.message}", where) from None
    deps: dict[str, str | None] = {}
    folder = os.path.dirname(rel)
    for location in sorted({ref.location for ref in refs}):
        data = os.path.normpath(os.path.join(folder, location)).replace(os.sep, "/")
        if data not in deps:
            deps[data] = hasher.hash_path(data)
    return deps
