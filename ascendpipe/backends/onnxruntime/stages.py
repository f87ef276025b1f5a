"""onnxruntime backend stage functions: ``<kind>(ctx) -> StageResult`` (dispatched by ``backend.py``)."""

from __future__ import annotations

import shlex

from ascendpipe.contract import StageContext, StageResult, find_model_file, write_metrics


def convert(ctx: StageContext) -> StageResult:
    from ascendpipe.backends.onnxruntime.convert import convert_model
    from ascendpipe.errors import Location, UserError
    from ascendpipe.precision.settings import resolve

    where = Location(stage=ctx.name)
    try:
        settings = resolve(ctx.params, ctx.path, where)
        model = find_model_file(ctx.inputs["model"], what="input model")
        from ascendpipe.backends.ascend.convert_settings import example_shapes

        # an upstream stage's model is ours, never written in place: its weights may be hard-linked
        result = convert_model(model, ctx.out_dir, settings, workspace=ctx.workspace,
                               allow_custom_ops=bool(ctx.params.get("allow_custom_ops")),
                               link_weights="model" in ctx.upstream,
                               shape_params=ctx.params, examples=example_shapes(ctx))  # the atc line's shapes
        from ascendpipe.precision.dynamic_shapes import record_emulated_shapes  # ATC's gears (docs/ascend.md)

        record_emulated_shapes(model, ctx.params, ctx.out_dir, settings.soc_version)
    except UserError as err:
        raise err.with_location(stage=ctx.name) from None
    metrics = {"ops_fp16": result.counts["float16"], "ops_fp32": result.counts["float32"],
               "ops_other": result.counts["other"]}
    if result.counts.get("bfloat16"):  # a bf16 mode (Atlas A2/A3, 310B)
        metrics["ops_bf16"] = result.counts["bfloat16"]
    write_metrics(ctx.out_dir, metrics)
    for line in result.warnings:
        ctx.say(line)
    bf16 = f", {metrics['ops_bf16']} bf16" if "ops_bf16" in metrics else ""
    ctx.say(f"converted {model} -> {result.model_path} ({metrics['ops_fp16']} ops fp16, {metrics['ops_fp32']} fp32{bf16})")
    ctx.say("equivalent: " + shlex.join(result.atc_argv))  # quoted: an --input_shape holds ';'
    return StageResult(
        metrics=metrics,
        remedy_files={name: path.relative_to(ctx.out_dir) for name, path in result.remedy_files.items()},
        info={"atc_argv": result.atc_argv, "policy": settings.policy, "fusion": result.fusion,
              "tune_bank": settings.tune_bank,
              **({"allow_custom_ops": True} if ctx.params.get("allow_custom_ops") else {})},
    )


# --- infer and dump (runtime area): thin, the work is in infer.py and dump.py ---------------------

def infer(ctx: StageContext) -> StageResult:
    """Run the model over the inputs (or random ones); outputs/*.npy, summary.json, latency metrics."""
    from ascendpipe.backends.onnxruntime.infer import run_stage

    return run_stage(ctx)


def dump(ctx: StageContext) -> StageResult:
    """Every op output for the first samples of the inputs; index.json and tensors/*.npy."""
    from ascendpipe.backends.onnxruntime.dump_stage import run_stage

    return run_stage(ctx)


# --- profile and tune: the work is in profile_tune_stages.py -------------------------------------

def profile(ctx: StageContext) -> StageResult:
    """Latency and per-op time as msprof would report it (timeline.json, op_summary.csv, ...)."""
    from ascendpipe.backends.onnxruntime.profile_tune_stages import profile as run_profile

    result = run_profile(ctx)
    write_metrics(ctx.out_dir, result.metrics)
    return result


def tune(ctx: StageContext) -> StageResult:
    """A measured search over session settings; a knowledge bank in the stage's output."""
    from ascendpipe.backends.onnxruntime.profile_tune_stages import tune as run_tune

    result = run_tune(ctx)
    write_metrics(ctx.out_dir, result.metrics)
    return result
