"""``tune``: a measured search over the session settings the backend can change (AOE's role)."""

from __future__ import annotations

from ascendpipe.stages.convert import ConvertKind
from ascendpipe.stages.base import StageKind

_SESSION = {
    "type": "object",
    "additionalProperties": False,
    "properties": {
        "graph_optimization_level": {"enum": ["ORT_DISABLE_ALL", "ORT_ENABLE_BASIC", "ORT_ENABLE_EXTENDED",
                                              "ORT_ENABLE_ALL"]},
        "intra_op_num_threads": {"type": "integer", "minimum": 0},
        "execution_mode": {"enum": ["ORT_SEQUENTIAL", "ORT_PARALLEL"]},
        "disabled_optimizers": {"type": "array", "items": {"type": "string"}},
    },
}


class TuneKind(StageKind):
    name = "tune"
    version = "5"  # 5: the fixed-point search timing the defaults and the start (issue 44)
    summary = "measured search of session settings; writes a knowledge bank (tune_bank.json) and aoe_result_opat.json"
    input_fields = ("model", "inputs")
    required_inputs = ("model",)
    # on ascend, aoe reads the conversion's files (keep_dtype, fusion_switch_file, ...): hashed as deps
    path_params = tuple(p for p in ConvertKind.path_params if p != "tune_bank")
    params_schema = {
        "type": "object",
        "properties": {
            # no schema default: left out, the backend picks (onnxruntime: 1; ascend: the SoC's, AOE_MODE)
            "job_type": {"oneOf": [{"enum": [1, 2]},
                                   {"type": "array", "items": {"enum": [1, 2]}, "minItems": 1, "uniqueItems": True}]},
            "repeats": {"type": "integer", "minimum": 3, "default": 7},
            "iterations": {"type": "integer", "minimum": 1},  # runs per timed round; default: ~40 ms rounds of the faster setting
            "max_candidates": {"type": "integer", "minimum": 1, "default": 24},
            "min_gain_pct": {"type": "number", "minimum": 0, "default": 2.0},
            "thresholds": {"type": "object", "additionalProperties": {"type": "number"}},
            "baseline": _SESSION,  # settings to start from (default: runtime.json beside the model, else ORT's)
            "batch_size": {"type": "integer", "minimum": 1},
            # on ascend, aoe takes the conversion's settings (soc_version, precision mode, ...)
            **{k: v for k, v in ConvertKind.params_schema["properties"].items() if k != "tune_bank"},
        },
    }

    def check_params(self, params: dict) -> None:
        ConvertKind.check_params(self, params)  # aoe takes the conversion's options: atc's checks
