"""The ``convert`` stage kind: ONNX -> device model (the backend converts: ATC, or the fp16 emulation)."""

from __future__ import annotations

from ascendpipe.precision.aipp_schema import BLOCK_SCHEMA as AIPP_BLOCK
from ascendpipe.precision.socs import SOC_PATTERN
from ascendpipe.precision.settings import HIF8_MODES, PRECISION_MODES, PRECISION_MODES_V2
from ascendpipe.stages.base import StageKind

_STR_LIST = {"type": "array", "items": {"type": "string"}}


class ConvertKind(StageKind):
    name = "convert"
    # 5: ATC's ONNX graph fusions (LayerNorm, GELU) and each kernel's inside (precision/kernels.py), UB fusions
    #    keep member dtypes, weights converted as GE's host does, impl modes emulated; the device's per-SoC
    #    mixed-precision lists by GE kernel type (a CANN install's own where found, keyed), keep_dtype OpType::
    #    by GE parse-time type, customize_dtypes; 4: bf16/HF32 policies per SoC class, saturation in every float
    #    dtype (NaN -> 0); 3: the fusion catalogue checked against its pages (SoCs, shapes, unswitchable passes);
    #    2: ATC's passes from the catalogue instead of onnxruntime's optimizers, overflow_mode
    version = "5"
    summary = "convert an ONNX model for the device (ATC flags; fp16 emulation on onnxruntime)"
    input_fields = ("model",)
    required_inputs = ("model",)
    path_params = ("keep_dtype", "fusion_switch_file", "insert_op_conf", "modify_mixlist", "tune_bank",
                   "customize_dtypes", "op_precision_mode")
    params_schema = {
        "type": "object",
        "properties": {
            # the hif8 modes (Ascend 950) are accepted here, refused by the emulator with a clear error
            "precision_mode": {"enum": list(PRECISION_MODES)},
            "precision_mode_v2": {"enum": list(PRECISION_MODES_V2) + list(HIF8_MODES)},
            # --allow_hf32 (Atlas A2/A3): true/false for both switches, or {conv, matmul}; default conv on, matmul off
            "allow_hf32": {"oneOf": [{"type": "boolean"}, {"enum": ["true", "false"]},
                                     {"type": "object", "properties": {"conv": {"type": "boolean"},
                                                                       "matmul": {"type": "boolean"}},
                                      "additionalProperties": False}]},
            "keep_dtype": {"oneOf": [{"type": "string"}, _STR_LIST]},
            "fusion_switch": {"type": "object",
                              "additionalProperties": {"oneOf": [{"enum": ["on", "off"]}, {"type": "boolean"}]}},
            "fusion_switch_file": {"type": "string"},
            "aipp": {"oneOf": [AIPP_BLOCK, {"type": "array", "items": AIPP_BLOCK}]},
            "insert_op_conf": {"type": "string"},
            "modify_mixlist": {"oneOf": [{"type": "string"}, {"type": "object"}]},
            # --customize_dtypes: a file in ATC's format, or its lines ("Name::InputDtype:float16,OutputDtype:float")
            "customize_dtypes": {"oneOf": [{"type": "string"}, _STR_LIST]},
            "input_shape": {"type": "string"},
            # ATC's dynamic gears (one of them; docs/ascend.md): "1,2,4,8", "224,224;448,448", "1,32;8,64"
            "dynamic_batch_size": {"oneOf": [{"type": "string"}, {"type": "array", "items": {"type": "integer"}}]},
            "dynamic_image_size": {"oneOf": [{"type": "string"}, {"type": "array", "items": {"type": "array"}}]},
            "dynamic_dims": {"oneOf": [{"type": "string"}, {"type": "array", "items": {"type": "array"}}]},
            "input_shape_range": {"type": "string"},
            "input_format": {"enum": ["NCHW", "NHWC", "ND", "NCDHW", "NDHWC"]},
            "soc_version": {"type": "string", "pattern": SOC_PATTERN},
            "tune_bank": {"type": "string"},
            # fp16 overflow: inf/NaN (IEEE) or saturation to +-65504; default: the SoC's (docs/emulation.md)
            "overflow_mode": {"enum": ["inf_nan", "saturation"]},
            # emulate ops outside ai.onnx (contrib ops) that ATC cannot convert; refused by default, and on ascend
            "allow_custom_ops": {"type": "boolean"},
            # ATC's per-op implementation modes (precision/implmode.py): emulated, and passed to atc
            "op_select_implmode": {"enum": ["high_performance", "high_precision", "high_precision_for_all",
                                            "high_performance_for_all"]},
            "optypelist_for_implmode": {"oneOf": [{"type": "string"}, _STR_LIST]},
            "op_precision_mode": {"type": "string"},
            # ATC options without an emulation counterpart: passed to atc, recorded on onnxruntime
            "buffer_optimize": {"enum": ["l2_optimize", "l1_optimize", "off_optimize"]},
            "out_nodes": {"type": "string"},
            "log": {"enum": ["debug", "info", "warning", "error", "null"]},
        },
    }

    def check_params(self, params: dict) -> None:
        from ascendpipe.precision.settings import check_params

        check_params(params)  # atc's own checks of its options (precision/settings.py), at validate
