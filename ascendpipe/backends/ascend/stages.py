"""The ascend backend's stage functions: ``<kind>(ctx) -> StageResult`` and ``commands(kind, ctx)``.

Each kind first builds a plan (the argv lists and paths, no I/O beyond tool lookup) that both
``commands`` (for ``--dry-run``) and the run share, so what is printed is what is run. Output
layouts match the onnxruntime backend's (docs/contracts.md), so downstream stages read either.
"""

from __future__ import annotations

import json
import shutil
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from ascendpipe.backends.ascend import acl_dump, aoe, ais_bench, atc, msprof
from ascendpipe.backends.ascend.runner import runner_for
from ascendpipe.backends.ascend.toolkit import Toolkit, discover
from ascendpipe.errors import Location, UserError

OM_NAME = "model"  # model.om / model.json in a converted model directory
CONVERT_INFO = "convert.json"
FUSED_MAP = "fused_map.json"
KIND_TOOLS = {"convert": ("atc",), "tune": ("aoe", "atc"), "infer": ("python3",), "dump": ("python3",),
              "profile": ("msprof", "python3"), "compare": ("python3", "msit")}
# ATC only: options the emulator does not model, taken from the convert params as given
ASCEND_ONLY = ("op_select_implmode", "optypelist_for_implmode", "buffer_optimize", "out_nodes", "log")
ASCEND_ONLY_MODES = {"allow_mix_precision_bf16", "allow_fp32_to_bf16", "mixed_bfloat16", "mixed_hif8"}


@dataclass
class Plan:
    argvs: list[list[str]]
    env: dict[str, str] = field(default_factory=dict)  # added to the toolkit's environment
    data: dict[str, Any] = field(default_factory=dict)


def tool_versions(kind: str, env: dict[str, str] | None = None) -> dict[str, str]:
    """CANN and tool versions for the stage key: file stats only, never runs a tool."""
    from ascendpipe.versions import package_version

    tk = discover(env)
    versions = tk.versions(tuple(t for t in KIND_TOOLS.get(kind, ()) if t != "python3"))
    if "python3" in KIND_TOOLS.get(kind, ()):
        versions["ais_bench"] = package_version("ais_bench")
    return versions


def _tool(tk: Toolkit, name: str, ctx, strict: bool) -> str:
    if strict:
        return str(tk.tool(name, stage=ctx.name))
    found = tk.find(name)
    return str(found) if found else name


def _located(fn):
    def wrapper(ctx, *args, **kwargs):
        try:
            return fn(ctx, *args, **kwargs)
        except UserError as err:
            raise err.with_location(stage=ctx.name) from None
    wrapper.__name__, wrapper.__doc__ = fn.__name__, fn.__doc__
    return wrapper


# ---- convert ------------------------------------------------------------------------------------

def _settings(ctx):
    """The emulator's resolved settings (one reader of remedy files), plus ATC-only modes."""
    from ascendpipe.precision.settings import resolve

    params = dict(ctx.params)
    special = {k: params.pop(k) for k in ("precision_mode", "precision_mode_v2")
               if params.get(k) in ASCEND_ONLY_MODES}
    mixlist = params.pop("modify_mixlist", None) if special else None
    s = resolve(params, read_path=ctx.path, where=Location(stage=ctx.name))
    if special:
        s.precision_mode = special.get("precision_mode")
        s.precision_mode_v2 = special.get("precision_mode_v2")
        if mixlist:
            from ascendpipe.precision import remedy

            s.modify_mixlist = (remedy.read_mixlist(ctx.path(mixlist)) if isinstance(mixlist, str)
                                else remedy.validate_mixlist(mixlist))
    return s


def _final_paths(argv: list[str], ctx) -> list[str]:
    """An argv as recorded: paths in the temporary out dir shown where the outputs will live."""
    tmp, final = str(ctx.out_dir), str(ctx.final_out_dir)
    return [a.replace(tmp, final) for a in argv] if tmp != final else list(argv)


def _settings_record(settings) -> dict[str, Any]:
    """The settings as recorded; an ATC-only mode (bf16, hif8) has no emulator policy to name."""
    from dataclasses import asdict

    try:
        return settings.record()
    except KeyError:
        data = asdict(settings)
        data["policy"] = "ascend-only"
        return data


def _onnx_model(ctx) -> Path:
    from ascendpipe.contract import find_model_file

    source = ctx.inputs.get("model")
    if source is None:
        raise UserError("convert needs a 'model' input (an .onnx file or an export stage)")
    return find_model_file(Path(source))


def _bank_dir(ctx, settings) -> Path | None:
    """A knowledge bank to convert with: an upstream tune stage's bank/, or the tune_bank param."""
    for upstream in ctx.upstream.values():
        if upstream.kind == "tune" and (upstream.out_dir / "bank").is_dir():
            return upstream.out_dir / "bank"
    if getattr(settings, "tune_bank", None):
        path = Path(settings.tune_bank)
        return path / "bank" if (path / "bank").is_dir() else path
    return None


def _atc_settings(ctx, settings, model: Path, out_dir: Path) -> atc.AtcSettings:
    from ascendpipe.precision.settings import REMEDY_NAMES

    soc = settings.soc_version or ctx.params.get("soc_version")
    if not soc:
        raise UserError("soc_version is required on the ascend backend (e.g. soc_version: Ascend310P3)",
                        Location(stage=ctx.name, field="soc_version"))
    files = settings.remedy_files()
    option = {"keep_dtype": "keep_dtype", "fusion_switch": "fusion_switch_file", "aipp": "insert_op_conf",
              "modify_mixlist": "modify_mixlist"}
    paths = {option[name]: out_dir / REMEDY_NAMES[name] for name in files}
    extra = {k: ctx.params[k] for k in ASCEND_ONLY if ctx.params.get(k) not in (None, "", [])}
    return atc.AtcSettings(model=model, output=out_dir / OM_NAME, soc_version=soc,
                           input_shape=settings.input_shape or None, input_format=settings.input_format,
                           precision_mode=settings.precision_mode, precision_mode_v2=settings.precision_mode_v2,
                           **paths, **extra)


def _convert_plan(ctx, tk: Toolkit, strict: bool, out_dir: Path) -> Plan:
    settings = _settings(ctx)
    model = _onnx_model(ctx) if strict else Path(ctx.inputs.get("model", "model.onnx"))
    s = _atc_settings(ctx, settings, model, out_dir)
    tool = _tool(tk, "atc", ctx, strict)
    bank = _bank_dir(ctx, settings)
    return Plan([atc.convert_argv(tool, s), atc.json_argv(tool, out_dir / f"{OM_NAME}.om", out_dir / f"{OM_NAME}.json")],
                env=aoe.bank_env(bank) if bank else {}, data={"settings": settings, "atc": s, "bank": bank})


def _onnx_facts(model: Path) -> dict[str, Any]:
    """Input specs, output names and each node's outputs from the ONNX (for infer and the op mapping)."""
    import onnx

    m = onnx.load(str(model), load_external_data=False)
    inits = {i.name for i in m.graph.initializer}
    elem = {1: "float32", 10: "float16", 11: "float64", 2: "uint8", 3: "int8", 6: "int32", 7: "int64", 9: "bool"}
    inputs = []
    for value in m.graph.input:
        if value.name in inits:
            continue
        t = value.type.tensor_type
        dims = [d.dim_value if d.HasField("dim_value") else (d.dim_param or None) for d in t.shape.dim]
        inputs.append({"name": value.name, "shape": dims, "dtype": elem.get(t.elem_type, "float32")})
    nodes = {n.name: (list(n.input), list(n.output)) for n in m.graph.node if n.name}
    return {"inputs": inputs, "outputs": [o.name for o in m.graph.output], "node_io": nodes}


def fused_map_from_om(info: atc.OmInfo, node_io: dict[str, tuple[list[str], list[str]]]) -> dict[str, Any]:
    """fused_map.json from the OM JSON: fused op -> originals; its outputs -> the last original's outputs.

    The last original is the one whose outputs no other original of the same fused op reads
    (Conv+Relu -> Relu); when that is not unique, the last one listed.
    """
    fused, tensors = {}, {}
    for op in info.ops:
        originals = [n for n in op.original_names if n]
        if len(originals) > 1:
            fused[op.name] = originals
        read = {t for n in originals for t in node_io.get(n, ([], []))[0]}
        ends = [n for n in originals if n in node_io and not set(node_io[n][1]) & read]
        last = ends[0] if len(ends) == 1 else (originals[-1] if originals else op.name)
        for i, tensor in enumerate(node_io.get(last, ([], []))[1]):
            tensors[f"{op.name}:output:{i}"] = tensor
    return {"format": "ascendpipe-fused-map/1", "fused": fused, "tensors": tensors,
            "rules": {op.name: op.pass_names[0] for op in info.ops if op.pass_names}}


def _write_om_facts(ctx, out: Path, plan: Plan, extra: dict[str, Any]) -> tuple[atc.OmInfo, dict, dict]:
    """fused_map.json and convert.json from the OM JSON and the ONNX: what makes ``out`` a converted
    model dir (docs/contracts.md) that infer, dump and compare read, whether atc or aoe wrote the OM."""
    info = atc.load_om_json(out / f"{OM_NAME}.json")
    facts = _onnx_facts(plan.data["atc"].model)
    fused_map = fused_map_from_om(info, facts.pop("node_io"))
    acl_dump.write_json_atomic(out / FUSED_MAP, fused_map)
    record = {"backend": "ascend", "settings": _settings_record(plan.data["settings"]), **extra,
              "atc_cmdline": info.atc_cmdline, "om_name": info.name, "soc_version": info.attrs.get("soc_version"),
              "opp_version": info.attrs.get("opp_version"), "model": str(plan.data["atc"].model), **facts}
    acl_dump.write_json_atomic(out / CONVERT_INFO, record)
    return info, fused_map, record


@_located
def convert(ctx):
    """atc conversion, then ``atc --mode=1`` for the OM JSON; remedy files in ATC's formats."""
    from ascendpipe.precision.remedy import write_text_atomic
    from ascendpipe.precision.settings import REMEDY_NAMES
    from ascendpipe.contract import StageResult, write_metrics

    tk = discover()
    out = Path(ctx.out_dir)
    plan = _convert_plan(ctx, tk, True, out)
    remedy_files = {}
    for name, text in plan.data["settings"].remedy_files().items():
        remedy_files[REMEDY_NAMES[name]] = write_text_atomic(out / REMEDY_NAMES[name], text)
    work = out / "atc_work"  # atc writes fusion_result.json and kernel_meta/ into its cwd
    work.mkdir(exist_ok=True)
    runner = runner_for(ctx)
    env = {**tk.env, **plan.env}
    for argv in plan.argvs:
        runner.run(argv, cwd=work, env=env, log=ctx.log)
    om, om_json = out / f"{OM_NAME}.om", out / f"{OM_NAME}.json"
    if not om.is_file() or not om_json.is_file():
        from ascendpipe.errors import StageFailed

        raise StageFailed(ctx.name, f"atc ran but {om.name} or {om_json.name} is missing", getattr(ctx.log, "name", None))
    if (work / "fusion_result.json").is_file():
        shutil.move(str(work / "fusion_result.json"), out / "fusion_result.json")
    shutil.rmtree(work, ignore_errors=True)
    info, fused_map, record = _write_om_facts(ctx, out, plan, {
        "atc_argv": _final_paths(plan.argvs[0], ctx), "atc_json_argv": _final_paths(plan.argvs[1], ctx),
        "tune_bank": str(plan.data["bank"]) if plan.data["bank"] else None, "tool_versions": tk.versions(("atc",))})
    metrics = {"om_ops": len(info.ops), "fused_ops": len(fused_map["fused"]), "om_bytes": om.stat().st_size}
    write_metrics(out, metrics)
    return StageResult(metrics=metrics, remedy_files=remedy_files,
                       info={"atc_cmdline": info.atc_cmdline or " ".join(plan.argvs[0]), "atc_argv": record["atc_argv"],
                             "tool_versions": record["tool_versions"]})


# ---- tune ---------------------------------------------------------------------------------------

def _tune_plan(ctx, tk: Toolkit, strict: bool, out_dir: Path) -> Plan:
    settings = _settings(ctx)
    model = _onnx_model(ctx) if strict else Path(ctx.inputs.get("model", "model.onnx"))
    s = _atc_settings(ctx, settings, model, out_dir)
    jobs = ctx.params.get("job_type", [1, 2])
    jobs = sorted(set(jobs if isinstance(jobs, list) else [jobs]))
    tool = _tool(tk, "aoe", ctx, strict)
    argvs = [aoe.tune_argv(tool, s, job) for job in jobs]
    argvs.append(atc.json_argv(_tool(tk, "atc", ctx, strict), out_dir / f"{OM_NAME}.om", out_dir / f"{OM_NAME}.json"))
    return Plan(argvs, env=aoe.bank_env(out_dir / "bank"), data={"settings": settings, "atc": s, "jobs": jobs})


@_located
def tune(ctx):
    """AOE subgraph (1) then operator (2) tuning into a knowledge bank kept in this stage's output."""
    from ascendpipe.errors import StageFailed
    from ascendpipe.precision.remedy import write_text_atomic
    from ascendpipe.precision.settings import REMEDY_NAMES
    from ascendpipe.contract import StageResult, write_metrics

    tk = discover()
    out = Path(ctx.out_dir)
    plan = _tune_plan(ctx, tk, True, out)
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
    shutil.copyfile(tuned, out / f"{OM_NAME}.om")
    runner.run(plan.argvs[-1], cwd=work, env=env, log=ctx.log)
    results = [aoe.parse_result(json.loads(p.read_text())) | {"file": p.name} for p in aoe.find_result_files(work)]
    for p in aoe.find_result_files(work):
        shutil.copyfile(p, out / p.name)
    shutil.rmtree(work, ignore_errors=True)
    # the tuned OM's dir is a converted model dir too: infer, dump and compare take a tune stage
    _write_om_facts(ctx, out, plan, {"aoe_argv": [_final_paths(a, ctx) for a in plan.argvs[:-1]],
                                     "atc_json_argv": _final_paths(plan.argvs[-1], ctx), "tune_bank": str(out / "bank"),
                                     "tool_versions": tk.versions(("aoe", "atc"))})
    ops = [op for r in results for op in r["ops"]]
    model = next((r["model"] for r in results if r["model"]), {})
    log = aoe.parse_log("\n".join(logs))
    acl_dump.write_json_atomic(out / "tune.json", {"results": results, "log": log, "jobs": plan.data["jobs"],
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


# ---- infer, dump, profile: ais_bench over a converted model --------------------------------------

def _host_onnx(ctx) -> bool:
    """True when the model input is a plain ONNX (the fp32 golden): it runs on the host's onnxruntime,
    as msit runs the golden side of a compare; only OMs go to ais_bench."""
    source = ctx.inputs.get("model")
    if source is None:
        return False
    path = Path(source)
    if path.is_file():
        return path.suffix == ".onnx"
    return path.is_dir() and not any(path.glob("*.om")) and len(list(path.glob("*.onnx"))) == 1


def _on_host(ctx, kind: str):
    from ascendpipe.backends import registry

    ctx.say(f"{ctx.name}: the model is an ONNX, not an OM: running it on the host's onnxruntime (golden side)")
    result = registry.get("onnxruntime").run(kind, ctx)
    result.info["ran_on"] = "host onnxruntime (golden ONNX)"
    return result


def _om_dir(ctx) -> tuple[Path, dict]:
    from ascendpipe.contract import find_model_file

    source = ctx.inputs.get("model")
    if source is None:
        raise UserError(f"{ctx.kind} needs a 'model' input (a convert stage on the ascend backend)")
    om = find_model_file(Path(source), suffixes=(".om",), what="OM model")
    info_path = om.parent / CONVERT_INFO
    if not info_path.is_file():
        raise UserError(f"{info_path} is missing: on the ascend backend the model must come from a convert stage",
                        hint="add a convert stage with backend ascend before this one")
    return om, json.loads(info_path.read_text())


def _specs(record: dict):
    from ascendpipe.inputs import InputSpec

    return [InputSpec(i["name"], tuple(i["shape"]), i["dtype"]) for i in record["inputs"]]


def _write_ais_inputs(batches, names: list[str], root: Path) -> list[Path]:
    """One directory per model input, one .npy per batch; ais_bench pairs files across dirs by order."""
    import numpy as np

    dirs = []
    for name in names:
        d = root / acl_dump.sanitize(name)
        d.mkdir(parents=True, exist_ok=True)
        for i, batch in enumerate(batches):
            np.save(d / f"{i:05d}.npy", np.ascontiguousarray(batch[name]))
        dirs.append(d)
    return dirs


def _python(tk: Toolkit, ctx, strict: bool) -> str:
    return _tool(tk, "python3", ctx, strict)


def _infer_plan(ctx, tk: Toolkit, strict: bool, out_dir: Path, *, acl_json: Path | None = None) -> Plan:
    om = _om_dir(ctx)[0] if strict else Path(ctx.inputs.get("model", "model.om")) / f"{OM_NAME}.om"
    params = ctx.params
    loop = 1 if acl_json else params.get("loops", params.get("iterations", 1))
    warmup = 0 if acl_json else params.get("warmup", 1)
    argv = ais_bench.infer_argv(_python(tk, ctx, strict), model=om, inputs=[out_dir / "ais_input"],
                                output=out_dir / "ais_output", output_dirname="result", outfmt="NPY",
                                loop=loop, warmup_count=warmup, device=params.get("device", 0),
                                acl_json_path=acl_json)
    return Plan([argv], data={"om": om})


def _with_inputs(argv: list[str], dirs: list[Path]) -> list[str]:
    argv = list(argv)
    argv[argv.index("--input") + 1] = ",".join(str(d) for d in dirs)
    return argv


def _collect_outputs(result_dir: Path, batches, names: list[str], out_dir: Path) -> dict[str, dict]:
    """ais_bench's ``{batch}_{k}.npy`` files into the emulator's ``outputs/<name>.npy`` (padding dropped)."""
    import numpy as np

    from ascendpipe.backends.onnxruntime.infer import OUTPUTS_DIR, unique_file_names
    from ascendpipe.inputs import save_npy_atomic

    files = unique_file_names(names)
    (out_dir / OUTPUTS_DIR).mkdir(parents=True, exist_ok=True)
    described = {}
    for k, name in enumerate(names):
        parts = []
        for i, batch in enumerate(batches):
            path = result_dir / f"{i:05d}_{k}.npy"
            if not path.is_file():
                raise UserError(f"ais_bench wrote no {path.name} for output '{name}' in {result_dir}")
            value = np.load(path)
            rows = next(iter(batch.values())).shape[0]
            parts.append(value[: batch.valid] if value.ndim and value.shape[0] == rows else value[np.newaxis])
        array = np.concatenate(parts)
        save_npy_atomic(out_dir / OUTPUTS_DIR / files[name], array)
        described[name] = {"file": f"{OUTPUTS_DIR}/{files[name]}", "shape": list(array.shape), "dtype": str(array.dtype)}
    return described


def _run_ais(ctx, tk, plan, batches, names, out, runner) -> dict:
    dirs = _write_ais_inputs(batches, names, out / "ais_input")
    argv = _with_inputs(plan.argvs[0], dirs)
    runner.run(argv, cwd=out, env={**tk.env, **plan.env}, log=ctx.log)
    summary_path = ais_bench.find_summary(out / "ais_output")
    if summary_path is None:
        raise UserError(f"ais_bench wrote no *_summary.json under {out / 'ais_output'}")
    return ais_bench.parse_summary(json.loads(summary_path.read_text()))


@_located
def infer(ctx):
    """``python3 -m ais_bench`` over the inputs; outputs/*.npy and summary.json as on onnxruntime."""
    if _host_onnx(ctx):
        return _on_host(ctx, "infer")
    from ascendpipe.backends.onnxruntime.infer import SUMMARY_FILE, console_summary, stage_batches
    from ascendpipe.inputs import write_json_atomic
    from ascendpipe.contract import StageResult, write_metrics

    tk = discover()
    out = Path(ctx.out_dir)
    om, record = _om_dir(ctx)
    batches, source = stage_batches(ctx, _specs(record), batch_size=ctx.params.get("batch_size"),
                                    seed=ctx.params.get("seed", 0))
    plan = _infer_plan(ctx, tk, True, out)
    names = [i["name"] for i in record["inputs"]]
    parsed = _run_ais(ctx, tk, plan, batches, names, out, runner_for(ctx))
    wanted = ctx.params.get("output_names") or record["outputs"]
    outputs = _collect_outputs(out / "ais_output" / "result", batches, record["outputs"], out)
    outputs = {n: outputs[n] for n in wanted if n in outputs}
    rows = next(iter(batches[0].values())).shape[0]
    summary = {**parsed["raw"], "latency_ms": parsed["latency_ms"], "batch_size": rows, "batches": len(batches),
               "samples": sum(b.valid for b in batches), "outputs": outputs, "backend": "ascend"}
    summary.setdefault("throughput", parsed["throughput"])
    write_json_atomic(out / SUMMARY_FILE, summary)
    shutil.rmtree(out / "ais_input", ignore_errors=True)
    ctx.say(console_summary({**summary, "throughput": parsed["throughput"] or 0.0}))
    metrics = {"latency_ms_mean": parsed["latency_ms"]["mean"], "latency_ms_p99": parsed["latency_ms"]["p99"],
               "throughput": parsed["throughput"]}
    write_metrics(out, metrics)
    return StageResult(metrics=metrics, info={"model": str(om), "inputs": source, "samples": summary["samples"],
                                              "ais_bench_argv": plan.argvs[0]})


def _dump_plan(ctx, tk: Toolkit, strict: bool, out_dir: Path) -> Plan:
    acl_json = out_dir / "acl.json"
    plan = _infer_plan(ctx, tk, strict, out_dir, acl_json=acl_json)
    try:
        script = str(tk.msaccucmp(stage=ctx.name)) if strict or tk.home else "msaccucmp.py"
    except UserError:
        if strict:
            raise
        script = "msaccucmp.py"
    plan.argvs.append(acl_dump.convert_argv(_python(tk, ctx, strict), Path(script), out_dir / "npu_dump/<run>",
                                            out_dir / "converted"))
    plan.data["acl_json"] = acl_json
    return plan


@_located
def dump(ctx):
    """An acl.json dump through ais_bench, converted with msaccucmp into index.json + tensors/."""
    if _host_onnx(ctx):
        return _on_host(ctx, "dump")
    from ascendpipe.backends.onnxruntime.dump import first_samples
    from ascendpipe.backends.onnxruntime.infer import stage_batches
    from ascendpipe.contract import StageResult, write_metrics

    tk = discover()
    out = Path(ctx.out_dir)
    om, record = _om_dir(ctx)
    specs = _specs(record)
    static = any(s.static_batch is not None for s in specs)
    max_batch = ctx.params.get("max_batch", 8)
    batches, source = stage_batches(ctx, specs, batch_size=None if static else max_batch, seed=ctx.params.get("seed", 0))
    from ascendpipe.inputs import Batch

    feeds = Batch(first_samples(batches, max_batch, static))
    index_path, leaf = _dump_with_ais(ctx, tk, om, feeds, [s.name for s in specs], out,
                                      keep_raw=ctx.params.get("keep_raw", False))
    entries = json.loads(index_path.read_text())["tensors"]
    metrics = {"tensors": len(entries), "tensors_with_nan": sum(1 for t in entries if t.get("nan")),
               "tensors_with_inf": sum(1 for t in entries if t.get("inf"))}
    write_metrics(out, metrics)
    return StageResult(metrics=metrics, info={"model": str(om), "inputs": source, "dump_leaf": leaf})


def _dump_with_ais(ctx, tk: Toolkit, om: Path, feeds: dict, input_names: list[str], out: Path, *,
                   keep_raw: bool) -> tuple[Path, str]:
    """ais_bench with acl.json, msaccucmp convert of the first dump, then our index; the OM JSON and
    fused_map.json are copied beside index.json so compare finds the op mapping with the dump."""
    from ascendpipe.inputs import Batch

    plan = _dump_plan(ctx, tk, True, out)
    dump_path = (out / "npu_dump").resolve()
    dump_path.mkdir(parents=True, exist_ok=True)
    acl_dump.write_json_atomic(plan.data["acl_json"], acl_dump.acl_config(om.stem, dump_path, mode="output"))
    runner = runner_for(ctx)
    _run_ais(ctx, tk, plan, [Batch(dict(feeds))], input_names, out, runner)
    leaves = acl_dump.find_dump_dirs(dump_path)
    if not leaves:
        raise UserError(f"ais_bench wrote no dump under {dump_path}/<time>/<device>/<model>/<id>/<index>/",
                        hint="check acl.json's model_name matches the OM name")
    convert_argv = list(plan.argvs[1])
    convert_argv[convert_argv.index("-d") + 1] = str(leaves[0])
    (out / "converted").mkdir(exist_ok=True)
    runner.run(convert_argv, cwd=out, env=tk.env, log=ctx.log)
    info = atc.load_om_json(om.parent / f"{OM_NAME}.json")
    fused_path = om.parent / FUSED_MAP
    tensors = json.loads(fused_path.read_text()).get("tensors", {}) if fused_path.is_file() else {}
    named = {}
    for key, tensor in tensors.items():
        op_name, _, index = key.rpartition(":output:")
        named[(op_name, int(index))] = tensor
    naming = acl_dump.OpNaming.from_om(info.op_types(), named)
    index_path = acl_dump.build_index(out / "converted", out, naming, model=str(om), feeds=dict(feeds))
    for name in (f"{OM_NAME}.json", FUSED_MAP, "precision_plan.json"):
        if (om.parent / name).is_file() and om.parent.resolve() != out.resolve():
            shutil.copyfile(om.parent / name, out / name)
    if not keep_raw:
        for sub in ("converted", "npu_dump", "ais_output", "ais_input"):
            shutil.rmtree(out / sub, ignore_errors=True)
    return index_path, str(leaves[0].relative_to(dump_path))


def dump_om(om_dir: Path, feeds: dict, out_dir: Path, *, log, run_command=None, stage: str = "compare",
            keep_raw: bool = False) -> Path:
    """Library entry for compare on the ascend backend: dump a converted OM dir for ``feeds`` into
    ``out_dir`` (index.json + tensors/, model.json, fused_map.json); returns the index path."""
    from ascendpipe.contract import StageContext

    out_dir = Path(out_dir)
    out_dir.mkdir(parents=True, exist_ok=True)
    ctx = StageContext(name=stage, kind="dump", workspace=out_dir, out_dir=out_dir, final_out_dir=out_dir, params={},
                       inputs={"model": Path(om_dir)}, upstream={}, backend="ascend", log=log,
                       run_command=run_command)
    try:
        om, record = _om_dir(ctx)
        return _dump_with_ais(ctx, discover(), om, feeds, [i["name"] for i in record["inputs"]], out_dir,
                              keep_raw=keep_raw)[0]
    except UserError as err:
        raise err.with_location(stage=stage) from None


def _profile_plan(ctx, tk: Toolkit, strict: bool, out_dir: Path) -> Plan:
    inner = _infer_plan(ctx, tk, strict, out_dir)
    params = ctx.params
    app = list(inner.argvs[0])
    app[app.index("--loop") + 1] = str(params.get("iterations", 20))
    app[app.index("--warmup_count") + 1] = str(params.get("warmup", 5))
    form = params.get("msprof_form", "application")
    argv = msprof.collect_argv(_tool(tk, "msprof", ctx, strict), out_dir / "msprof", app, form=form)
    return Plan([argv], data={"app": app, "form": form, "om": inner.data["om"]})


def _totals(op_statistic: list[dict]) -> list[dict]:
    """op_statistic rows in the emulator's op_type_totals() shape, largest total first."""
    rows = [{"op_type": str(r.get("OP Type") or "?"), "core_type": str(r.get("Core Type") or "?"), "count": r.get("Count") or 0,
             "total_us": r.get("Total Time(us)") or 0.0, "avg_us": r.get("Avg Time(us)") or 0.0,
             "min_us": r.get("Min Time(us)") or 0.0, "max_us": r.get("Max Time(us)") or 0.0,
             "ratio_pct": r.get("Ratio(%)") or 0.0} for r in op_statistic]
    return sorted(rows, key=lambda r: (-r["total_us"], str(r["op_type"])))


@_located
def profile(ctx):
    """msprof around ais_bench; the PROF_* op_summary/op_statistic CSVs kept and read."""
    if _host_onnx(ctx):
        return _on_host(ctx, "profile")
    from ascendpipe.backends.onnxruntime.infer import stage_batches
    from ascendpipe.profiling import report
    from ascendpipe.profiling.files import write_json_atomic, write_text_atomic
    from ascendpipe.contract import StageResult, write_metrics

    tk = discover()
    out = Path(ctx.out_dir)
    om, record = _om_dir(ctx)
    batches, _ = stage_batches(ctx, _specs(record), batch_size=ctx.params.get("batch_size"), seed=0)
    plan = _profile_plan(ctx, tk, True, out)
    dirs = _write_ais_inputs(batches, [i["name"] for i in record["inputs"]], out / "ais_input")
    app = _with_inputs(plan.data["app"], dirs)
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


# ---- compare: what it runs on an OM target (the comparing itself is ascendpipe.compare) ----------

def _placeholder_model(path, suffix: str) -> Path:
    """A model file inside a stage dir, for a dry run where the dir may not be built yet."""
    path = Path(path)
    if path.is_file():
        return path
    found = sorted(path.glob(f"*{suffix}")) if path.is_dir() else []
    return found[0] if len(found) == 1 else path / f"<model>{suffix}"


def _compare_plan(ctx, tk: Toolkit, strict: bool, out_dir: Path) -> Plan:
    """The device dump of an OM target (as ``dump_om`` runs it) and, where msit runs, its argv."""
    from ascendpipe.backends.ascend import msit

    target, upstream = ctx.inputs.get("target"), ctx.upstream.get("target")
    om_target = (upstream is not None and upstream.kind in ("convert", "tune")) or (
        target is not None and (Path(target) / f"{OM_NAME}.om").is_file())
    if target is None or not om_target:
        return Plan([])
    dump_dir = out_dir / "target_dump"
    dump_ctx = ctx.derive(kind="dump", inputs={"model": Path(target)}, upstream={}, params={}, out_dir=dump_dir,
                          final_out_dir=dump_dir)
    plan = _dump_plan(dump_ctx, tk, strict, dump_dir)
    mode, exe = ctx.params.get("msit", "auto"), tk.find("msit")
    if mode == "on" or (mode == "auto" and exe is not None):
        plan.argvs.append(msit.compare_argv(exe or "msit", golden_model=_placeholder_model(ctx.inputs["golden"], ".onnx"),
                                            om_model=Path(target) / f"{OM_NAME}.om", output=out_dir / "msit",
                                            inputs=[out_dir / "msit_input" / "<input>.npy"], cann_path=tk.home,
                                            device=0))
    return plan


# ---- dry run ------------------------------------------------------------------------------------

PLANS = {"convert": _convert_plan, "tune": _tune_plan, "infer": _infer_plan, "dump": _dump_plan,
         "profile": _profile_plan, "compare": _compare_plan}


def commands(kind: str, ctx) -> list[list[str]]:
    """The argv lists ``kind`` would run, without running anything (tools named even if missing)."""
    plan_of = PLANS.get(kind)
    if plan_of is None:
        return []
    try:
        return plan_of(ctx, discover(), False, Path(ctx.final_out_dir)).argvs
    except UserError as err:
        raise err.with_location(stage=ctx.name) from None
