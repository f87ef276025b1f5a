"""``infer``: run a model (golden ONNX or converted) over inputs, batched; outputs and latency."""

from __future__ import annotations

from ascendpipe.stages.base import StageKind


class InferKind(StageKind):
    name = "infer"
    version = "2"  # 2: summary.json without timings, pid or absolute paths; no metrics.json in its outputs
    # its metrics are timings: they go to the run record, not into outputs that feed downstream keys
    metrics_in_outputs = False
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
            # input name -> its batch axis where not 0 (a state [2, B, H]: 1); null: not batched
            "batch_axes": {"type": "object", "additionalProperties": {"type": ["integer", "null"], "minimum": 0}},
            "output_names": {"type": "array", "items": {"type": "string"}},
        },
    }
