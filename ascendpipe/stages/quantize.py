"""``quantize``: int8 post-training calibration of an ONNX model, as CANN's AMCT does it.

Pipeline shape::

    quantize:
      kind: quantize
      model: export                          # an .onnx or a stage that made one
      calibration: data/classify/calib       # .npy/.npz, a folder of them, or an upstream stage
      params: {batch_num: 1, batch_size: 16, activation_offset: true, skip_layers: [/fc/Gemm],
               calibration_config: quant.cfg,          # optional: AMCT's simple config file
               auto: {metric: eval_int8.top1, tolerance: 0.01}}   # the target of `fix --quantize`

Outputs (docs/quantize.md): ``model.onnx`` (fake-quant QDQ: infer, dump, compare and eval take the
stage like a converted model), ``deploy/model.onnx`` (what `convert` takes), ``quant.cfg``,
``scales.json``, ``quantize.json``. The onnxruntime backend calibrates with
``onnxruntime.quantization``; the ascend backend runs ``amct_onnx calibration``.
"""

from __future__ import annotations

import importlib

from ascendpipe.stages.base import StageContext, StageKind, StageResult, ascend_tool_versions, package_version

_STR_LIST = {"type": "array", "items": {"type": "string"}}

# backend -> the module holding ``quantize(ctx)`` and ``commands(ctx)``
BACKEND_MODULES = {"onnxruntime": "ascendpipe.backends.onnxruntime.quantize", "ascend": "ascendpipe.backends.ascend.amct"}


class QuantizeKind(StageKind):
    name = "quantize"
    version = "1"
    summary = "int8 calibration (AMCT-style): fake-quant QDQ model for accuracy, deployable model for convert"
    input_fields = ("model", "calibration")
    required_inputs = ("model", "calibration")
    path_params = ("calibration_config",)
    params_schema = {
        "type": "object",
        "properties": {
            "batch_num": {"type": "integer", "minimum": 1, "default": 1},
            "batch_size": {"type": "integer", "minimum": 1},
            "activation_offset": {"type": "boolean", "default": True},
            "skip_layers": _STR_LIST,
            "skip_layer_types": _STR_LIST,
            "channel_wise": {"type": "boolean"},
            "calibrate_method": {"enum": ["minmax", "entropy", "percentile"], "default": "minmax"},
            "calibration_config": {"type": "string"},
            "config": {"type": "object"},  # AMCTConfig fields inline (same names as the file)
            "auto": {"type": "object", "properties": {"metric": {"type": "string"},
                                                      "tolerance": {"type": "number", "minimum": 0}},
                     "required": ["metric"], "additionalProperties": False},
        },
    }

    def tool_versions(self, backend: str) -> dict[str, str]:
        if backend == "ascend":
            return {"onnx": package_version("onnx"), "amct_onnx": package_version("amct_onnx"),
                    **ascend_tool_versions("quantize")}
        return {"onnxruntime": package_version("onnxruntime"), "onnx": package_version("onnx")}

    def commands(self, ctx: StageContext) -> list[list[str]]:
        return importlib.import_module(BACKEND_MODULES[ctx.backend]).commands(ctx)

    def run(self, ctx: StageContext) -> StageResult:
        return importlib.import_module(BACKEND_MODULES[ctx.backend]).quantize(ctx)
