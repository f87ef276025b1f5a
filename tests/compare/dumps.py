"""Write dump directories by hand (index.json + npy files), in the contract's format."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np


def write_dump(out_dir: Path, tensors: list[tuple], model: str | None = None) -> Path:
    """``tensors``: (name, op_name, op_type, array) in topological order; dtype comes from the array."""
    out_dir = Path(out_dir)
    (out_dir / "tensors").mkdir(parents=True, exist_ok=True)
    entries = []
    for i, (name, op, op_type, array) in enumerate(tensors):
        array = np.asarray(array)
        rel = f"tensors/{i:05d}.npy"
        np.save(out_dir / rel, array)
        finite = array[np.isfinite(array)] if array.dtype.kind == "f" else array
        entries.append({
            "name": name, "op_name": op, "op_type": op_type, "topo_index": -1 if op_type == "Input" else i,
            "dtype": str(array.dtype), "shape": list(array.shape), "file": rel,
            "min": float(finite.min()) if finite.size else 0.0, "max": float(finite.max()) if finite.size else 0.0,
            "nan": int(np.isnan(array).sum()) if array.dtype.kind == "f" else 0,
            "inf": int(np.isinf(array).sum()) if array.dtype.kind == "f" else 0,
        })
    index = {"format": "ascendpipe-dump/1", "model": model, "backend": "onnxruntime", "inputs": {}, "tensors": entries}
    (out_dir / "index.json").write_text(json.dumps(index))
    return out_dir
