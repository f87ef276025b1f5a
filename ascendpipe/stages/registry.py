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
