"""The one table of toolchain backends: name -> class, imported only when a stage uses it.

It feeds the pipeline schema's ``backend`` enum, the CLI's ``--backend`` choices and every dispatch
from a stage kind. Cheap to import (a no-op build and every CLI parser import it).
"""

from __future__ import annotations

from ascendpipe.errors import UserError

DEFAULT = "onnxruntime"

# name -> "module:Class"; the first entry is the default
BACKENDS: dict[str, str] = {
    "onnxruntime": "ascendpipe.backends.onnxruntime.backend:OnnxruntimeBackend",
    "ascend": "ascendpipe.backends.ascend.backend:AscendBackend",
}

_loaded: dict[str, object] = {}


def names() -> list[str]:
    """Backend names in table order (the default first)."""
    return list(BACKENDS)


def register(name: str, target: str) -> None:
    """Add a backend (``"module:Class"``), e.g. one shipped outside ascendpipe or a test double."""
    BACKENDS[name] = target
    _loaded.pop(name, None)


def unregister(name: str) -> None:
    if name == DEFAULT:
        raise ValueError("the default backend cannot be removed")
    BACKENDS.pop(name, None)
    _loaded.pop(name, None)


def get(name: str):
    """The backend's singleton (an ``ascendpipe.backends.base.Backend``)."""
    backend = _loaded.get(name)
    if backend is not None:
        return backend
    target = BACKENDS.get(name)
    if target is None:
        raise UserError(f"unknown backend '{name}'; known: {', '.join(names())}")
    import importlib

    module_name, _, class_name = target.partition(":")
    try:
        module = importlib.import_module(module_name)
    except ImportError as exc:
        raise UserError(f"backend '{name}' is unavailable: {exc}") from None
    backend = getattr(module, class_name)()
    _loaded[name] = backend
    return backend


def running(suffix: str) -> list[str]:
    """Names of the backends whose converted models have ``suffix`` (for 'use --backend X' advice)."""
    return [n for n in names() if suffix in get(n).device_models]
