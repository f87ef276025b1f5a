"""The profile and tune stages on the onnxruntime backend, and the library calls the CLI shares."""

from __future__ import annotations

from pathlib import Path
from typing import Any, Callable

from ascendpipe.profiling import msprof_csv, prof_folder, report, stats, timeline
from ascendpipe.fsutil import write_json_atomic, write_text_atomic

Say = Callable[[str], None]


def _batches(model_path: Path, inputs_path: Path | None, batch_size: int | None, say: Say, batch_axes: dict | None = None):
    from ascendpipe.backends.onnxruntime.infer import resolve_inputs_path
    from ascendpipe.backends.onnxruntime.session import input_specs, make_session
    from ascendpipe.inputs import load_inputs, random_inputs

    specs = input_specs(make_session(model_path))
    if inputs_path is None:
        say("no inputs given: using random inputs (seed 0)")
        return [random_inputs(specs, seed=0, batch_size=batch_size, batch_axes=batch_axes)]
    # an upstream stage's output directory holds its arrays in a subfolder
    return load_inputs(resolve_inputs_path(inputs_path), specs, batch_size, batch_axes=batch_axes)


def _rows_of(batch) -> int:
    valid = getattr(batch, "valid", None)
    if valid:
        return int(valid)
    first = next(iter(batch.values()))
    return int(first.shape[0]) if first.ndim else 1


def model_title(model_path: Path, stage: str | None = None, model_stage: str | None = None) -> str:
    """'Profile of export/model.onnx converted by convert@fp16 (variant fp16, stage profile@fp16)': the
    model a page is about, not the file name every converted model shares."""
    import json

    model_path = Path(model_path)
    name = model_path.name
    record = model_path.parent / "convert.json"
    if record.is_file():
        try:
            argv = json.loads(record.read_text()).get("atc_argv") or []
            source = next((a.split("=", 1)[1] for a in argv if str(a).startswith("--model=")), None)
        except (ValueError, AttributeError):
            source = None
        made_by = model_stage or model_path.parent.name
        shown = "/".join(Path(source).parts[-2:]) if source else ""  # 'export/model.onnx': whose model.onnx
        name = f"{shown} converted by {made_by}" if source else f"{name} of {made_by}"
    variant = (stage or "").partition("@")[2] or (model_stage or "").partition("@")[2]
    where = [f"variant {variant}"] if variant else []
    where += [f"stage {stage}"] if stage else []
    return f"Profile of {name}" + (f" ({', '.join(where)})" if where else "")


def run_profile(model_path: Path, inputs_path: Path | None, out_dir: Path, *, warmup: int = 5,
                iterations: int = 20, batch_size: int | None = None, say: Say = print,
                title: str | None = None, batch_axes: dict | None = None) -> dict[str, Any]:
    """Time the model, profile it, write the profile files; returns {"metrics", "info", "table"}."""
    from ascendpipe.backends.onnxruntime.profile import (attribute_to_model, attributed_pct, model_graph,
                                                          open_session, profile_model, resolve_settings,
                                                          time_runs)
    from ascendpipe.backends.onnxruntime.session import read_runtime

    settings = read_runtime(model_path)  # a tuned model runs with its bank's settings
    batches = _batches(model_path, inputs_path, batch_size, say, batch_axes)
    rows = _rows_of(batches[0])
    # latency from a session without the profiler: its per-kernel bookkeeping would inflate it
    latency = stats.latency_stats(time_runs(open_session(model_path, settings), batches,
                                            warmup=warmup, iterations=iterations), batch_size=rows)
    raw = profile_model(model_path, batches, warmup=warmup, iterations=iterations, settings=settings)
    data, emulation_us = attribute_to_model(raw, model_graph(model_path))
    kernel_us = sum(op.duration_us for op in raw.ops)
    emulation_pct = 100.0 * emulation_us / kernel_us if kernel_us else 0.0
    if emulation_us:
        say(f"fp16 emulation casts: {emulation_pct:.1f}% of kernel time, left out of the op tables "
            "(the device does not run them; latency includes them)")
    attributed = attributed_pct(data)
    if attributed < 100.0:
        missing = sorted({op.kernel_name for op in data.ops if not op.sources})
        say(f"{100 - attributed:.1f}% of kernel time is in kernels no model node is found for: {', '.join(missing[:5])}")
    totals = msprof_csv.op_type_totals(data.ops)
    device = [t for t in msprof_csv.ranked(totals) if not t["host"]]
    sums = msprof_csv.subtotals(totals)
    out_dir = Path(out_dir)
    write_json_atomic(out_dir / "timeline.json", timeline.trace_document(data))
    summary_csv = msprof_csv.render_csv(msprof_csv.OP_SUMMARY_COLUMNS, msprof_csv.op_summary_rows(data))
    statistic_csv = msprof_csv.render_csv(msprof_csv.OP_STATISTIC_COLUMNS, msprof_csv.op_statistic_rows(data))
    write_text_atomic(out_dir / "op_summary.csv", summary_csv)
    write_text_atomic(out_dir / "op_statistic.csv", statistic_csv)
    # the same CSVs in msprof's export layout, for `ascendpipe import` and msprof-analyze
    prof_folder.write_prof_folder(out_dir, summary_csv, statistic_csv)
    write_text_atomic(out_dir / "profile.html", report.render_profile_html(
        title=title or model_title(model_path), totals=totals, latency=latency, batch_size=rows,
        iterations=iterations, session=resolve_settings(settings), emulation_pct=emulation_pct,
        attributed_pct=attributed, data=data, emulated=True))
    table = report.top_ops_table(totals)
    write_text_atomic(out_dir / "top_ops.txt", table + "\n")
    # ais_bench's summary keys, in ms
    from ascendpipe.backends.onnxruntime.infer import HOST_TIME, HOST_TIME_NOTE

    summary = {"time_measured_on": HOST_TIME,  # host CPU time of onnxruntime; the key names are ais_bench's
               "NPU_compute_time": {"min": latency["min"], "max": latency["max"], "mean": latency["mean"],
                                    "median": latency["median"], "percentile(99%)": latency["p99"],
                                    "count": latency["count"]},
               "throughput": latency["throughput"], "batch_size": rows, "session": settings or {}}
    write_json_atomic(out_dir / "summary.json", summary)
    say(f"[INFO] NPU_compute_time (ms): min = {latency['min']:.3f}, max = {latency['max']:.3f}, "
        f"mean = {latency['mean']:.3f}, median = {latency['median']:.3f}, percentile(99%) = {latency['p99']:.3f}")
    say(f"[INFO] throughput 1000*batchsize.mean({rows})/NPU_compute_time.mean({latency['mean']:.3f}): "
        f"{latency['throughput']:.3f}")
    say(HOST_TIME_NOTE + "; Core Type says where each op would run on the device, not where it ran")
    say(table)
    metrics = {"latency_ms_mean": latency["mean"], "latency_ms_median": latency["median"],
               "latency_ms_p99": latency["p99"], "throughput": latency["throughput"],
               "top_op_type_ratio_pct": device[0]["share_pct"] if device else 0.0,
               "emulation_overhead_pct": emulation_pct, "host_ops_pct": sums["host_pct"],
               "attributed_pct": attributed}
    info = {"top_op_type": device[0]["op_type"] if device else None, "batch_size": rows,
            "warmup": warmup, "iterations": iterations, "session": settings or {}}
    return {"metrics": metrics, "info": info, "table": table}


def job_types_of(value: Any) -> list[int]:
    return sorted(set(value if isinstance(value, list) else [value]))


def run_tune(model_path: Path, inputs_path: Path | None, out_dir: Path, *, job_type: Any = 1,
             repeats: int = 7, iterations: int | None = None, max_candidates: int = 24,
             thresholds: dict | None = None, baseline: dict | None = None, min_gain_pct: float = 2.0,
             batch_size: int | None = None, say: Say = print, progress_unit: str = "trials") -> dict[str, Any]:
    """Tune, write the knowledge bank and the opat result; returns {"metrics", "info", "line", "files"}.
    ``progress_unit``: what its trials are counted as on a build's status line (``ascendpipe.ticker``)."""
    from ascendpipe.backends.onnxruntime.session import read_runtime
    from ascendpipe.backends.onnxruntime.tune import tune_model, write_tune_outputs

    start = {**(read_runtime(model_path) or {}), **(baseline or {})}
    batches = _batches(model_path, inputs_path, batch_size, say)
    outcome = tune_model(model_path, batches, job_types=job_types_of(job_type), repeats=repeats,
                         iterations=iterations, max_candidates=max_candidates, thresholds=thresholds,
                         baseline=start, min_gain_pct=min_gain_pct, say=say, progress_unit=progress_unit)
    files = write_tune_outputs(Path(out_dir), outcome, tuning_name=model_path.stem)
    final = outcome.final
    metrics = {"tune_baseline_ms": final["baseline_median_ms"], "tune_best_ms": final["candidate_median_ms"],
               "tune_improvement_pct": final["improvement_pct"] if final["significant"] else 0.0,
               "tune_measured_improvement_pct": final["improvement_pct"],
               "tune_noise_low_pct": final["noise_low_pct"], "tune_noise_high_pct": final["noise_high_pct"],
               "tune_trials": len(outcome.log.trials)}
    info = {"session": outcome.best, "baseline_session": outcome.baseline, "line": outcome.line,
            "improved": bool(final["significant"])}
    return {"metrics": metrics, "info": info, "line": outcome.line, "files": files}


def _inputs_of(ctx) -> tuple[Path, Path | None]:
    from ascendpipe.contract import find_model_file

    model = find_model_file(ctx.inputs["model"])
    return model, ctx.inputs.get("inputs")


def profile(ctx):
    from ascendpipe.errors import UserError
    from ascendpipe.contract import StageResult

    try:
        model, inputs = _inputs_of(ctx)
        p = ctx.params
        up = ctx.upstream.get("model")
        result = run_profile(model, inputs, ctx.out_dir, warmup=p.get("warmup", 5),
                             iterations=p.get("iterations", 20), batch_size=p.get("batch_size"), say=ctx.say,
                             title=model_title(model, ctx.name, up.stage if up is not None else None))
    except UserError as err:
        raise err.with_location(stage=ctx.name) from None
    return StageResult(metrics=result["metrics"], info=result["info"])


def _trials_unit(ctx) -> str:
    """``trials (each in build/tune.log)``: a build's status line counts tune's trials and names the log
    that has every one (``ascendpipe.ticker``; on a terminal only)."""
    import os

    log = getattr(ctx.log, "name", None)
    if not isinstance(log, str):
        return "trials"
    if os.path.isabs(log):
        try:
            log = os.path.relpath(log, str(ctx.workspace))
        except ValueError:  # another drive (Windows)
            pass
    return f"trials (each in {log})"


def tune(ctx):
    from ascendpipe.errors import UserError
    from ascendpipe.contract import StageResult

    try:
        model, inputs = _inputs_of(ctx)
        p = ctx.params
        result = run_tune(model, inputs, ctx.out_dir, job_type=p.get("job_type", 1), repeats=p.get("repeats", 7),
                          iterations=p.get("iterations"), max_candidates=p.get("max_candidates", 24),
                          thresholds={**ctx.thresholds, **p.get("thresholds", {})}, baseline=p.get("baseline"),
                          min_gain_pct=p.get("min_gain_pct", 2.0), batch_size=p.get("batch_size"), say=ctx.say,
                          progress_unit=_trials_unit(ctx))
    except UserError as err:
        raise err.with_location(stage=ctx.name) from None
    return StageResult(metrics=result["metrics"], info=result["info"],
                       remedy_files={"tune_bank.json": result["files"]["bank"]})
