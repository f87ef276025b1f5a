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
``scales.json``, ``quantize.json``. The work is the pipeline's backend's (``Backend.run("quantize",
ctx)``): onnxruntime calibrates with ``onnxruntime.quantization``, ascend runs ``amct_onnx calibration``.
"""

from __future__ import annotations

from ascendpipe.stages.base import StageKind

_STR_LIST = {"type": "array", "items": {"type": "string"}}


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
