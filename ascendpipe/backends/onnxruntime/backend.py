"""The ``onnxruntime`` backend: the faithful CPU emulation of the device (the default backend)."""

from __future__ import annotations

from ascendpipe.backends.base import Backend
from ascendpipe.versions import package_version

# distributions whose versions key each kind's stages on this backend
_TOOLS = {
    "convert": ("onnxruntime", "onnx"),
    "infer": ("onnxruntime", "onnx", "numpy"),
    "dump": ("onnxruntime", "onnx", "numpy"),
    "profile": ("onnxruntime",),
    "tune": ("onnxruntime",),
    "compare": ("numpy", "onnxruntime"),
    "quantize": ("onnxruntime", "onnx"),
}

# kind -> "module:function(ctx) -> StageResult", imported when the kind runs
_RUNS = {
    "convert": "ascendpipe.backends.onnxruntime.stages:convert",
    "infer": "ascendpipe.backends.onnxruntime.stages:infer",
    "dump": "ascendpipe.backends.onnxruntime.stages:dump",
    "profile": "ascendpipe.backends.onnxruntime.stages:profile",
    "tune": "ascendpipe.backends.onnxruntime.stages:tune",
    "quantize": "ascendpipe.backends.onnxruntime.quantize:quantize",
}


class _InProcess(list):
    """A dry-run line for work done in-process: shown as ``= note``, not as a command (``$ argv``)."""

    def __init__(self, note: str):
        super().__init__()
        self.note = note


class OnnxruntimeBackend(Backend):
    name = "onnxruntime"
    summary = "faithful CPU emulation of the device's fp16 behaviour (onnxruntime)"
    kinds = tuple(_RUNS)
    device_models = (".onnx",)

    def tool_versions(self, kind: str) -> dict[str, str]:
        versions = {dist: package_version(dist) for dist in _TOOLS.get(kind, ())}
        if kind in ("convert", "tune"):  # the mixed-precision lists the emulation reads (a CANN install's, or ours)
            from ascendpipe.versions import op_lists_key

            versions["op_lists"] = op_lists_key()
        return versions

    def commands(self, kind, ctx) -> list[list[str]]:
        if kind != "convert":
            return []
        from ascendpipe.backends.ascend.atc import settings_argv
        from ascendpipe.precision.settings import resolve

        # this backend runs no tool: the dry run says so, with the atc options the same settings would drive
        # on --backend ascend (not a command line: there atc also needs --soc_version and the model file)
        argv = settings_argv(resolve(ctx.params, ctx.path), "MODEL", "model")
        options = " ".join(a for a in argv[1:] if not a.startswith(("--model=", "--output=", "--framework=")))
        return [_InProcess(f"onnxruntime emulation of atc, in-process (no atc runs); atc options on --backend "
                           f"ascend: {options or '(none)'}")]

    def run(self, kind, ctx):
        target = _RUNS.get(kind)
        if target is None:
            raise self.unsupported(kind, ctx)
        import importlib

        module, _, function = target.partition(":")
        return getattr(importlib.import_module(module), function)(ctx)

    def dump_model(self, model, feeds, out, *, log=None, run_command=None, stage="compare"):
        from ascendpipe.backends.onnxruntime.dump import dump_model
        from ascendpipe.contract import find_model_file
        from ascendpipe.errors import UserError

        try:
            return dump_model(find_model_file(model), feeds, out, fusions=True).parent
        except UserError as err:
            raise err.with_location(stage=stage) from None
