"""The ascend backend's ``infer``, ``dump`` and ``profile`` stages: ais_bench (with acl.json for a dump,
under msprof for a profile) over a converted OM; ``dump_om`` dumps one for compare.
"""

from __future__ import annotations

import json
import os
import shutil
from pathlib import Path

from ascendpipe.backends.ascend import acl_dump, ais_bench, atc, msprof
from ascendpipe.backends.ascend.ais_io import collect_outputs, run_ais, with_inputs, write_ais_inputs
from ascendpipe.backends.ascend.host import host_onnx, on_host
from ascendpipe.backends.ascend.plan import converted_om, dump_plan, infer_plan, input_specs, located, profile_plan
from ascendpipe.backends.ascend.runner import runner_for
from ascendpipe.backends.ascend.toolkit import Toolkit, discover
from ascendpipe.backends.compare_sources import DUMP_SOURCE
from ascendpipe.contract import FUSED_MAP, MODEL_STEM
from ascendpipe.errors import UserError
from ascendpipe.fsutil import write_json_atomic


@located
def infer(ctx):
    """``python3 -m ais_bench`` over the inputs; outputs/*.npy and summary.json as on onnxruntime."""
    if host_onnx(ctx):
        return on_host(ctx, "infer")
    from ascendpipe.backends.onnxruntime.infer import (SUMMARY_FILE, TIMING_KEYS, console_summary,
                                                       deterministic_summary, stage_batches)
    from ascendpipe.contract import StageResult
    from ascendpipe.inputs import write_json_atomic  # numpy-aware, strict JSON (summary.json)

    tk = discover()
    out = Path(ctx.out_dir)
    om, record = converted_om(ctx)
    batches, source = stage_batches(ctx, input_specs(record), batch_size=ctx.params.get("batch_size"),
                                    seed=ctx.params.get("seed", 0))
    plan = infer_plan(ctx, tk, True, out, feed=checked_feed(ctx, record, batches))
    names = [i["name"] for i in record["inputs"]]
    parsed = run_ais(ctx, tk, plan, batches, names, out, runner_for(ctx))
    wanted = ctx.params.get("output_names") or record["outputs"]
    outputs = collect_outputs(out / "ais_output" / "result", batches, record["outputs"], out)
    outputs = {n: outputs[n] for n in wanted if n in outputs}
    rows = next(iter(batches[0].values())).shape[0]
    summary = {**parsed["raw"], "latency_ms": parsed["latency_ms"], "batch_size": rows, "batches": len(batches),
               "samples": sum(b.valid for b in batches), "outputs": outputs, "backend": "ascend"}
    summary.setdefault("throughput", parsed["throughput"])
    # timings go to the run record, never to outputs that feed keys (as on onnxruntime)
    write_json_atomic(out / SUMMARY_FILE, deterministic_summary(summary, ctx.workspace))
    shutil.rmtree(out / "ais_input", ignore_errors=True)
    ctx.say(console_summary({**summary, "throughput": parsed["throughput"] or 0.0}))
    metrics = {"latency_ms_mean": parsed["latency_ms"]["mean"], "latency_ms_p99": parsed["latency_ms"]["p99"],
               "throughput": parsed["throughput"]}
    latency = {k: summary[k] for k in TIMING_KEYS if k in summary and k != "pid"}
    return StageResult(metrics=metrics, info={"model": str(om), "inputs": source, "samples": summary["samples"],
                                              "ais_bench_argv": plan.argvs[0], "latency": latency})


def checked_feed(ctx, record: dict, batches) -> dict[str, tuple]:
    """The feed shapes (name -> shape) of ``batches``, each one the OM takes (convert.json ``shapes``), as the
    device checks them (ais_bench: "tensorsize ... filesize ... not match"); one ais_bench run takes one gear."""
    from ascendpipe.precision.dynamic_shapes import feed_error

    shapes = record.get("shapes")
    feeds = [{n: tuple(a.shape) for n, a in b.items()} for b in batches]
    for feed in feeds if shapes else []:
        err = feed_error(shapes, feed, stage=ctx.name)
        if err is not None:
            raise err
    if shapes and shapes.get("mode") not in ("static", "dynamic_batch_size") and any(f != feeds[0] for f in feeds):
        raise UserError(f"the inputs come in more than one shape ({feeds[0]} and another); one ais_bench run takes "
                        f"one gear of the OM", hint="give inputs of one shape per stage")
    return feeds[0]


@located
def dump(ctx):
    """An acl.json dump through ais_bench, read into index.json + tensors/ in the golden's layouts."""
    if host_onnx(ctx):
        return on_host(ctx, "dump")
    from ascendpipe.backends.onnxruntime.dump_stage import first_samples
    from ascendpipe.backends.onnxruntime.infer import stage_batches
    from ascendpipe.contract import StageResult, write_metrics

    tk = discover()
    out = Path(ctx.out_dir)
    om, record = converted_om(ctx)
    from ascendpipe.inputs import Batch, with_batch_axes

    # as the onnxruntime dump: max_batch caps a batch; a file that fits the OM runs as given
    specs = with_batch_axes(input_specs(record), ctx.params.get("batch_axes"))
    static = any(s.static_batch is not None for s in specs)
    max_batch = ctx.params.get("max_batch", 8)
    batches, source = stage_batches(ctx, specs, batch_size=None if static else max_batch,
                                    seed=ctx.params.get("seed", 0), cap=True)

    feeds = Batch(first_samples(batches, max_batch, static))
    index_path, leaf = dump_with_ais(ctx, tk, om, feeds, [s.name for s in specs], out,
                                      keep_raw=ctx.params.get("keep_raw", False))
    upstream = ctx.upstream.get("model")
    if upstream is not None:  # the stage that made the OM: a compare of this dump advises on it (as on onnxruntime)
        write_json_atomic(out / DUMP_SOURCE, {"stage": upstream.stage, "kind": upstream.kind,
                                              "model_dir": os.path.relpath(om.parent, ctx.final_out_dir)})
    entries = json.loads(index_path.read_text())["tensors"]
    metrics = {"tensors": len(entries), "tensors_with_nan": sum(1 for t in entries if t.get("nan")),
               "tensors_with_inf": sum(1 for t in entries if t.get("inf"))}
    write_metrics(out, metrics)
    return StageResult(metrics=metrics, info={"model": str(om), "inputs": source, "dump_leaf": leaf})


def dump_with_ais(ctx, tk: Toolkit, om: Path, feeds: dict, input_names: list[str], out: Path, *,
                   keep_raw: bool) -> tuple[Path, str]:
    """ais_bench with acl.json, then our index from the first dump's files read in-process; the OM JSON and
    fused_map.json are copied beside index.json so compare finds the op mapping with the dump."""
    from ascendpipe.inputs import Batch

    _, record = converted_om(ctx)
    plan = dump_plan(ctx, tk, True, out, feed=checked_feed(ctx, record, [feeds]))
    dump_path = (out / "npu_dump").resolve()
    dump_path.mkdir(parents=True, exist_ok=True)
    write_json_atomic(plan.data["acl_json"], acl_dump.acl_config(om.stem, dump_path, mode="output"))
    runner = runner_for(ctx)
    run_ais(ctx, tk, plan, [Batch(dict(feeds))], input_names, out, runner)
    leaves = acl_dump.find_dump_dirs(dump_path)
    if not leaves:
        raise UserError(f"ais_bench wrote no dump under {dump_path}/<time>/<device>/<model>/<id>/<index>/",
                        hint="check acl.json's model_name matches the OM name")
    info = atc.load_om_json(om.parent / f"{MODEL_STEM}.json")
    fused_path = om.parent / FUSED_MAP
    tensors = json.loads(fused_path.read_text()).get("tensors", {}) if fused_path.is_file() else {}
    named = {}
    for key, tensor in tensors.items():
        op_name, _, index = key.rpartition(":output:")
        named[(op_name, int(index))] = tensor
    from ascendpipe.compare.mapping import om_output_origins

    # the OM JSON's per-output origins, which each dumped output's original_op is checked against
    origins = om_output_origins(json.loads((om.parent / f"{MODEL_STEM}.json").read_text()))
    naming = acl_dump.OpNaming.from_om(info.op_types(), named, origins)
    # the device's dump files read in-process, each tensor in the golden's layout (acl_dump, device_layout)
    index_path = acl_dump.index_from_device_dumps(leaves[0], out, naming, model=str(om), feeds=dict(feeds))
    for name in (f"{MODEL_STEM}.json", FUSED_MAP, "precision_plan.json"):
        if (om.parent / name).is_file() and om.parent.resolve() != out.resolve():
            shutil.copyfile(om.parent / name, out / name)
    if not keep_raw:
        for sub in ("npu_dump", "ais_output", "ais_input"):
            shutil.rmtree(out / sub, ignore_errors=True)
    return index_path, str(leaves[0].relative_to(dump_path))


def dump_om(om_dir: Path, feeds: dict, out_dir: Path, *, log, run_command=None, stage: str = "compare",
            keep_raw: bool = False) -> Path:
    """Library entry for compare on the ascend backend: dump a converted OM dir for ``feeds`` into
    ``out_dir`` (index.json + tensors/, model.json, fused_map.json); returns the index path."""
    from ascendpipe.contract import StageContext

    out_dir = Path(out_dir).resolve()  # the tools run with cwd=out_dir: a relative path would point elsewhere
    out_dir.mkdir(parents=True, exist_ok=True)
    ctx = StageContext(name=stage, kind="dump", workspace=out_dir, out_dir=out_dir, final_out_dir=out_dir, params={},
                       inputs={"model": Path(om_dir)}, upstream={}, backend="ascend", log=log,
                       run_command=run_command)
    try:
        om, record = converted_om(ctx)
        return dump_with_ais(ctx, discover(), om, feeds, [i["name"] for i in record["inputs"]], out_dir,
                              keep_raw=keep_raw)[0]
    except UserError as err:
        raise err.with_location(stage=stage) from None


def _totals(op_statistic: list[dict]) -> list[dict]:
    """op_statistic rows in the emulator's op_type_totals() shape, largest total first."""
    rows = [{"op_type": str(r.get("OP Type") or "?"), "core_type": str(r.get("Core Type") or "?"), "count": r.get("Count") or 0,
             "total_us": r.get("Total Time(us)") or 0.0, "avg_us": r.get("Avg Time(us)") or 0.0,
             "min_us": r.get("Min Time(us)") or 0.0, "max_us": r.get("Max Time(us)") or 0.0,
             "ratio_pct": r.get("Ratio(%)") or 0.0} for r in op_statistic]
    return sorted(rows, key=lambda r: (-r["total_us"], str(r["op_type"])))


@located
def profile(ctx):
    """msprof around ais_bench; the PROF_* op_summary/op_statistic CSVs kept and read."""
    if host_onnx(ctx):
        return on_host(ctx, "profile")
    from ascendpipe.backends.onnxruntime.infer import stage_batches
    from ascendpipe.profiling import report
    from ascendpipe.fsutil import write_json_atomic, write_text_atomic
    from ascendpipe.contract import StageResult, write_metrics

    tk = discover()
    out = Path(ctx.out_dir)
    om, record = converted_om(ctx)
    batches, _ = stage_batches(ctx, input_specs(record), batch_size=ctx.params.get("batch_size"), seed=0)
    plan = profile_plan(ctx, tk, True, out, feed=checked_feed(ctx, record, batches))
    dirs = write_ais_inputs(batches, [i["name"] for i in record["inputs"]], out / "ais_input")
    app = with_inputs(plan.data["app"], dirs)
    argv = msprof.collect_argv(plan.argvs[0][0], out / "msprof", app, form=plan.data["form"])
    runner = runner_for(ctx)
    runner.run(argv, cwd=out, env=tk.env, log=ctx.log)
    prof_dirs = msprof.find_prof_dirs(out / "msprof")
    if not prof_dirs:
        raise UserError(f"msprof wrote no PROF_* directory under {out / 'msprof'}")
    prof = prof_dirs[-1]
    if not msprof.find_csvs(prof, "op_summary"):
        runner.run(msprof.export_argv(plan.argvs[0][0], prof), cwd=out, env=tk.env, log=ctx.log)
    data = msprof.read_prof_dir(prof)
    for stem in ("op_summary", "op_statistic"):
        found = msprof.find_csvs(prof, stem)
        if found:
            shutil.copyfile(found[-1], out / f"{stem}.csv")
    summary_path = ais_bench.find_summary(out / "ais_output")
    latency = ais_bench.parse_summary(json.loads(summary_path.read_text())) if summary_path else None
    totals = _totals(data["op_statistic"])
    write_json_atomic(out / "profile.json", data)
    write_text_atomic(out / "top_ops.txt", report.top_ops_table(totals) + "\n")
    if latency:
        write_json_atomic(out / "summary.json", {**latency["raw"], "batch_size": next(iter(batches[0].values())).shape[0]})
    shutil.rmtree(out / "ais_input", ignore_errors=True)
    metrics = {"op_rows": data["summary"]["ops"], "total_task_duration_us": data["summary"]["total_task_duration_us"],
               "top_op_type_ratio_pct": totals[0]["ratio_pct"] if totals else 0.0}
    if latency:
        metrics.update(latency_ms_mean=latency["latency_ms"]["mean"], latency_ms_median=latency["latency_ms"]["median"],
                       latency_ms_p99=latency["latency_ms"]["p99"], throughput=latency["throughput"])
    write_metrics(out, metrics)
    return StageResult(metrics=metrics, info={"prof_dir": prof.name, "msprof_argv": argv,
                                              "top_op_type": totals[0]["op_type"] if totals else None})
