import numpy as np
import pytest


def run(model_path, feeds, level=None, outputs=None):
    import onnxruntime as ort

    options = ort.SessionOptions()
    if level is not None:
        options.graph_optimization_level = level
    session = ort.InferenceSession(str(model_path), options, providers=["CPUExecutionProvider"])
    return session.run(outputs, feeds)


def cosine(a, b):
    a, b = np.asarray(a, np.float64).ravel(), np.asarray(b, np.float64).ravel()
    denom = np.linalg.norm(a) * np.linalg.norm(b)
    return 0.0 if denom == 0 or not np.isfinite(denom) else float(a @ b / denom)


def r16(x):
    with np.errstate(over="ignore", under="ignore"):
        return np.asarray(x, np.float32).astype(np.float16).astype(np.float32)


@pytest.fixture
def convert(tmp_path):
    from ascendpipe.backends.onnxruntime.convert import convert_model
    from ascendpipe.precision.settings import resolve

    counter = iter(range(1000))

    def _convert(model, **params):
        return convert_model(model, tmp_path / f"out{next(counter)}", resolve(params))

    return _convert
