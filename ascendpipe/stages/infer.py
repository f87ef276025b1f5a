"""``infer``: run a model (golden ONNX or converted) over inputs, batched; outputs and latency."""

from __future__ import annotations

import importlib

from ascendpipe.errors import UserError
from ascendpipe.stages.base import StageContext, StageKind, StageResult, package_version


def dispatch(ctx: StageContext, kind: str) -> StageResult:
    """Call ``ascendpipe.backends.<backend>.stages.<kind>(ctx)``, imported only now."""
    try:
        module = importlib.import_module(f"ascendpipe.backends.{ctx.backend}.stages")
    except ImportError as exc:
        raise UserError(f"backend '{ctx.backend}' is unavailable: {exc}") from None
    function = getattr(module, kind, None)
    if function is None:
        raise UserError(f"backend '{ctx.backend}' does not implement stage kind '{kind}'")
    return function(ctx)


def runtime_versions(backend: str) -> dict[str, str]:
    if backend == "onnxruntime":
        return {name: package_version(name) for name in ("onnxruntime", "onnx", "numpy")}
    return {}


def kind_versions(kind: str, backend: str) -> dict[str, str]:
    if backend == "ascend":
        from ascendpipe.stages.base import ascend_tool_versions

        return ascend_tool_versions(kind)
    return runtime_versions(backend)


class InferKind(StageKind):
    name = "infer"
    version = "1"
    summary = "run a model over inputs, batched; outputs/*.npy and an ais_bench-like latency summary"
    input_fields = ("model", "inputs")
    required_inputs = ("model",)
    params_schema = {
        "type": "object",
        "properties": {
            "batch_size": {"type": "integer", "minimum": 1},
            "warmup": {"type": "integer", "minimum": 0, "default": 1},
            "loops": {"type": "integer", "minimum": 1, "default": 1},
            "seed": {"type": "integer", "default": 0},
            "output_names": {"type": "array", "items": {"type": "string"}},
        },
    }

    def tool_versions(self, backend: str) -> dict[str, str]:
        return kind_versions(self.name, backend)

    def run(self, ctx: StageContext) -> StageResult:
        return dispatch(ctx, "infer")
