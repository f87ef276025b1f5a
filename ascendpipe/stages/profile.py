"""``profile``: time a model and break the time down by op, as msprof would (issue #7)."""

from __future__ import annotations

from ascendpipe.stages.base import StageContext, StageKind, StageResult, run_on_backend, write_metrics


class ProfileKind(StageKind):
    name = "profile"
    runtime_tools = ("onnxruntime",)
    version = "2"
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

    def run(self, ctx: StageContext) -> StageResult:
        result = run_on_backend(ctx, "profile", "ascendpipe.backends.onnxruntime.profile_tune_stages")
        if ctx.backend != "ascend":
            write_metrics(ctx.out_dir, result.metrics)
        return result
