"""The check behind fix's tests: a plain convert (the emulation) of a model with given settings, run on
onnxruntime, against the fp32 model."""

from __future__ import annotations

from pathlib import Path

import numpy as np


def cosine(model: Path, feeds: dict, out: Path, params: dict) -> float:
    """numpy's cosine of the converted model's first output against the fp32 model's (0 where the target
    holds inf/NaN or only zeros)."""
    import onnxruntime as ort

    from ascendpipe.backends.onnxruntime.convert import convert_model
    from ascendpipe.precision.settings import resolve

    converted = convert_model(model, out, resolve(params))
    run = lambda path: ort.InferenceSession(str(path), providers=["CPUExecutionProvider"]).run(None, feeds)[0]
    t, g = run(converted.model_path).astype(np.float64).ravel(), run(model).astype(np.float64).ravel()
    if not np.isfinite(t).all() or not np.linalg.norm(t):
        return 0.0
    return float(t @ g / (np.linalg.norm(t) * np.linalg.norm(g)))
