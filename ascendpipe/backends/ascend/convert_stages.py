"""The ascend backend's ``convert`` (atc) and ``tune`` (aoe) stages.
"""

from __future__ import annotations

import json
import shutil
from pathlib import Path

from ascendpipe.backends.ascend import aoe
from ascendpipe.backends.ascend.convert_settings import convert_plan, tune_plan
from ascendpipe.backends.ascend.om_facts import write_om_facts
from ascendpipe.backends.ascend.plan import final_paths, located
from ascendpipe.backends.ascend.runner import runner_for
from ascendpipe.backends.ascend.toolkit import discover
from ascendpipe.contract import MODEL_STEM
from ascendpipe.fsutil import write_json_atomic


@located
def convert(ctx):
    """atc conversion, then ``atc --mode=1`` for the OM JSON; remedy files in ATC's formats."""
    from ascendpipe.fsutil import write_text_atomic
    from ascendpipe.precision.settings import REMEDY_NAMES
    from ascendpipe.contract import StageResult, write_metrics

    tk = discover()
    out = Path(ctx.out_dir)
    plan = convert_plan(ctx, tk, True, out)
    _refuse_custom_ops(ctx)
    for note in plan.data["notes"]:
        ctx.say(f"{ctx.name}: {note}")
    remedy_files = {}
    for name, text in plan.data["settings"].remedy_files().items():
        remedy_files[REMEDY_NAMES[name]] = write_text_atomic(out / REMEDY_NAMES[name], text)
    work = out / "atc_work"  # atc writes fusion_result.json and kernel_meta/ into its cwd
    work.mkdir(exist_ok=True)
    runner = runner_for(ctx)
    env = {**tk.env, **plan.env}
    for argv in plan.argvs:
        runner.run(argv, cwd=work, env=env, log=ctx.log)
    om, om_json = out / f"{MODEL_STEM}.om", out / f"{MODEL_STEM}.json"
    if not om.is_file() or not om_json.is_file():
        from ascendpipe.errors import StageFailed

        raise StageFailed(ctx.name, f"atc ran but {om.name} or {om_json.name} is missing", getattr(ctx.log, "name", None))
    if (work / "fusion_result.json").is_file():
        shutil.move(str(work / "fusion_result.json"), out / "fusion_result.json")
    shutil.rmtree(work, ignore_errors=True)
    info, fused_map, record = write_om_facts(ctx, out, plan, {
        "atc_argv": final_paths(plan.argvs[0], ctx), "atc_json_argv": final_paths(plan.argvs[1], ctx),
        "tune_bank": str(plan.data["bank"]) if plan.data["bank"] else None, "tool_versions": tk.versions(("atc",))})
    metrics = {"om_ops": len(info.ops), "fused_ops": len(fused_map["fused"]), "om_bytes": om.stat().st_size}
    write_metrics(out, metrics)
    return StageResult(metrics=metrics, remedy_files=remedy_files,
                       info={"atc_cmdline": info.atc_cmdline or " ".join(plan.argvs[0]), "atc_argv": record["atc_argv"],
                             "tool_versions": record["tool_versions"]})


def _refuse_custom_ops(ctx) -> None:
    """Ops outside ai.onnx: atc has no parser for them (E19010), so they are refused before it runs,
    one line naming each (allow_custom_ops emulates them on onnxruntime only)."""
    from ascendpipe.backends.ascend.atc import unconvertible_error, unconvertible_ops
    from ascendpipe.backends.ascend.convert_settings import onnx_model
    from ascendpipe.onnxgraph import load_graph, name_nodes

    graph = load_graph(onnx_model(ctx)).graph
    name_nodes(graph)
    nodes, stack = [], [graph]
    while stack:
        current = stack.pop()
        nodes += [(n.name, n.op_type, n.domain) for n in current.node]
        stack += [sub for n in current.node for attr in n.attribute for sub in (attr.g, *attr.graphs) if sub.node]
    ops = unconvertible_ops(nodes)
    if ops:
        raise unconvertible_error(ops, emulated=False)


@located
def tune(ctx):
    """AOE subgraph (1) then operator (2) tuning into a knowledge bank kept in this stage's output."""
    from ascendpipe.errors import StageFailed
    from ascendpipe.fsutil import write_text_atomic
    from ascendpipe.precision.settings import REMEDY_NAMES
    from ascendpipe.contract import StageResult, write_metrics

    tk = discover()
    out = Path(ctx.out_dir)
    plan = tune_plan(ctx, tk, True, out)
    for note in plan.data["notes"]:
        ctx.say(f"{ctx.name}: {note}")
    for name, text in plan.data["settings"].remedy_files().items():
        write_text_atomic(out / REMEDY_NAMES[name], text)
    (out / "bank").mkdir(exist_ok=True)
    work = out / "aoe_work"
    work.mkdir(exist_ok=True)
    runner = runner_for(ctx)
    env = {**tk.env, **plan.env}
    env.pop("ASCEND_WORK_PATH", None)  # keep aoe_result_*.json in our work dir
    logs = []
    for argv in plan.argvs[:-1]:
        proc = runner.run(argv, cwd=work, env=env, log=ctx.log)
        logs.append(getattr(proc, "stdout", "") or "")
    tuned = aoe.find_tuned_om(work)
    if tuned is None:
        raise StageFailed(ctx.name, "aoe finished but no aoe_workspace/*/tunespace/result/*_tune*.om was written",
                          getattr(ctx.log, "name", None))
    shutil.copyfile(tuned, out / f"{MODEL_STEM}.om")
    runner.run(plan.argvs[-1], cwd=work, env=env, log=ctx.log)
    results = [aoe.parse_result(json.loads(p.read_text())) | {"file": p.name} for p in aoe.find_result_files(work)]
    for p in aoe.find_result_files(work):
        shutil.copyfile(p, out / p.name)
    shutil.rmtree(work, ignore_errors=True)
    # the tuned OM's dir is a converted model dir too: infer, dump and compare take a tune stage
    write_om_facts(ctx, out, plan, {"aoe_argv": [final_paths(a, ctx) for a in plan.argvs[:-1]],
                                     "atc_json_argv": final_paths(plan.argvs[-1], ctx), "tune_bank": str(out / "bank"),
                                     "tool_versions": tk.versions(("aoe", "atc"))})
    ops = [op for r in results for op in r["ops"]]
    model = next((r["model"] for r in results if r["model"]), {})
    log = aoe.parse_log("\n".join(logs))
    write_json_atomic(out / "tune.json", {"results": results, "log": log, "jobs": plan.data["jobs"],
                                                   "tuned_om": str(tuned.name)})
    improvements = [op["improvement_pct"] for op in ops if op["improvement_pct"] is not None]
    metrics = {"tuned_ops": len(ops),
               "tune_op_improvement_pct_mean": sum(improvements) / len(improvements) if improvements else 0.0,
               "tune_baseline_ms": model.get("baseline_ms"), "tune_best_ms": model.get("result_ms"),
               "tune_improvement_pct": model.get("improvement_pct",
                                                 log["improvements_pct"][-1] if log["improvements_pct"] else 0.0)}
    metrics = {k: v for k, v in metrics.items() if v is not None}
    write_metrics(out, metrics)
    return StageResult(metrics=metrics, info={"aoe_argv": plan.argvs[:-1], "tool_versions": tk.versions(("aoe", "atc"))})
