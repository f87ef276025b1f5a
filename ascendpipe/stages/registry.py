"""The one table of stage kinds. Modules are imported only when a pipeline uses the kind."""

from __future__ import annotations

import importlib

from ascendpipe.errors import UserError
from ascendpipe.stages.base import StageKind

# kind name -> "module:Class". The module must be cheap to import (no onnx/onnxruntime/torch at top).
KINDS: dict[str, str] = {
    "run": "ascendpipe.stages.run:RunKind",
    "source": "ascendpipe.stages.source:SourceKind",
    "export": "ascendpipe.stages.export:ExportKind",
    "convert": "ascendpipe.stages.convert:ConvertKind",
    "infer": "ascendpipe.stages.infer:InferKind",
    "dump": "ascendpipe.stages.dump:DumpKind",
    "compare": "ascendpipe.stages.compare:CompareKind",
    "eval": "ascendpipe.stages.eval:EvalKind",
    "profile": "ascendpipe.stages.profile:ProfileKind",
    "tune": "ascendpipe.stages.tune:TuneKind",
    "quantize": "ascendpipe.stages.quantize:QuantizeKind",
}

_loaded: dict[str, StageKind] = {}


def kind_names() -> list[str]:
    return sorted(KINDS)


def get_kind(name: str) -> StageKind:
    """The kind's singleton. Unknown or broken kinds are user-facing errors naming the reason."""
    if name in _loaded:
        return _loaded[name]
    target = KINDS.get(name)
    if target is None:
        raise UserError(f"unknown stage kind '{name}'; known kinds: {', '.join(kind_names())}")
    module_name, _, class_name = target.partition(":")
    try:
        module = importlib.import_module(module_name)
    except ImportError as exc:
        raise UserError(f"stage kind '{name}' is unavailable: {exc}") from None
    kind = getattr(module, class_name)()
    _loaded[name] = kind
    return kind


def kind_facts(name: str, cached: dict | None = None) -> dict:
    """What deciding a stage needs from its kind: ``version``, ``uses_backend``, ``uses_thresholds``
    and ``own_tools`` (whether the kind reports its tool versions itself rather than through the
    backend). ``cached`` (from the resolved-pipeline cache, engine/plan.py) stands in for importing
    the kind's module: they are constants of its code, and the cache is keyed on that code (a
    convert kind's module imports precision's settings, most of a no-op build's import time). A kind
    already imported in this process is read live."""
    if cached is not None and name not in _loaded:
        return cached
    kind = get_kind(name)
    return {
        "version": kind.version,
        "uses_backend": bool(kind.uses_backend),
        "uses_thresholds": bool(getattr(kind, "uses_thresholds", name in ("compare", "tune", "fix"))),
        "own_tools": type(kind).tool_versions is not StageKind.tool_versions,
    }


def tool_versions(name: str, backend: str, facts: dict) -> dict[str, str]:
    """The kind's ``tool_versions(backend)``, through the backend table when the kind does not
    report them itself (``StageKind.tool_versions``), so its module need not be imported."""
    if facts["own_tools"]:
        return get_kind(name).tool_versions(backend)
    from ascendpipe.backends import registry

    return registry.get(backend).tool_versions(name)
