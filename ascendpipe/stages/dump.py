"""``dump``: every op output of a model for the first samples of its inputs, with an index."""

from __future__ import annotations

from ascendpipe.stages.base import StageKind


class DumpKind(StageKind):
    name = "dump"
    version = "2"  # 2: index.json without paths or run counts, graph facts in it, fp16 outputs as fp16
    summary = "dump every op output (tensors/*.npy + index.json); fusions off for a golden ONNX"
    input_fields = ("model", "inputs")
    required_inputs = ("model",)
    params_schema = {
        "type": "object",
        "properties": {
            # auto: off for a plain ONNX (every original tensor exists), as converted for a convert output
            "fusions": {"enum": ["auto", True, False], "default": "auto"},
            "max_batch": {"type": "integer", "minimum": 1, "default": 8},
            "seed": {"type": "integer", "default": 0},
            # input name -> its batch axis where not 0 (a state [2, B, H]: 1); null: not batched
            "batch_axes": {"type": "object", "additionalProperties": {"type": ["integer", "null"], "minimum": 0}},
            # a segment's dumped tensors and weights held at once (default 8); above it the model runs in segments
            "memory_budget_mb": {"type": "number", "exclusiveMinimum": 0},
        },
    }
