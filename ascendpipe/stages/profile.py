"""``profile``: time a model and break the time down by op, as msprof would."""

from __future__ import annotations

from ascendpipe.stages.base import StageKind


class ProfileKind(StageKind):
    name = "profile"
    version = "3"
    summary = "latency/throughput and per-op time (timeline.json, op_summary.csv, op_statistic.csv, profile.html)"
    input_fields = ("model", "inputs")
    required_inputs = ("model",)
    params_schema = {
        "type": "object",
        "properties": {
            "warmup": {"type": "integer", "minimum": 0, "default": 5},
            "iterations": {"type": "integer", "minimum": 1, "default": 20},
            "batch_size": {"type": "integer", "minimum": 1},
        },
    }
