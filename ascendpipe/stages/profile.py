"""``profile``: time a model and break the time down by op, as msprof would (issue #7)."""

from __future__ import annotations

from ascendpipe.stages.base import StageContext, StageKind, StageResult, ascend_tool_versions, package_version, write_metrics


class ProfileKind(StageKind):
    name = "profile"
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

    def tool_versions(self, backend: str) -> dict[str, str]:
        if backend == "ascend":
            return ascend_tool_versions(self.name)
        return {"onnxruntime": package_version("onnxruntime")}

    def run(self, ctx: StageContext) -> StageResult:
        if ctx.backend == "ascend":
            from ascendpipe.backends.ascend import stages as ascend_stages

            return ascend_stages.profile(ctx)
        from ascendpipe.backends.onnxruntime.profile_tune_stages import profile

        result = profile(ctx)
        write_metrics(ctx.out_dir, result.metrics)
        return result
