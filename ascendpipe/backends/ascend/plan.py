"""What each ascend stage would run: argv lists, environment and paths (``Plan``), built without running
anything, shared by the run and by ``--dry-run`` so what is printed is what is run. Also the pieces every
ascend stage uses: tool lookup, stage-located errors, the converted-model dir it reads.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from ascendpipe.backends.ascend import acl_dump, ais_bench, msprof
from ascendpipe.backends.ascend.toolkit import Toolkit, discover
from ascendpipe.contract import CONVERT_INFO, MODEL_STEM
from ascendpipe.errors import UserError


KIND_TOOLS = {"convert": ("atc",), "tune": ("aoe", "atc"), "infer": ("python3",), "dump": ("python3",),
              "profile": ("msprof", "python3"), "compare": ("python3", "msit")}


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


def tool_path(tk: Toolkit, name: str, ctx, strict: bool) -> str:
    if strict:
        return str(tk.tool(name, stage=ctx.name))
    found = tk.find(name)
    return str(found) if found else name


def located(fn):
    def wrapper(ctx, *args, **kwargs):
        try:
            return fn(ctx, *args, **kwargs)
        except UserError as err:
            raise err.with_location(stage=ctx.name) from None
    wrapper.__name__, wrapper.__doc__ = fn.__name__, fn.__doc__
    return wrapper


def final_paths(argv: list[str], ctx) -> list[str]:
    """An argv as recorded: paths in the temporary out dir shown where the outputs will live."""
    tmp, final = str(ctx.out_dir), str(ctx.final_out_dir)
    return [a.replace(tmp, final) for a in argv] if tmp != final else list(argv)


def python_tool(tk: Toolkit, ctx, strict: bool) -> str:
    return tool_path(tk, "python3", ctx, strict)


def converted_om(ctx) -> tuple[Path, dict]:
    from ascendpipe.contract import find_model_file

    source = ctx.inputs.get("model")
    if source is None:
        raise UserError(f"{ctx.kind} needs a 'model' input (a convert stage on the ascend backend)")
    from ascendpipe.backends.ascend.tool_paths import real_path

    # ais_bench and msit refuse a symbolic link (tool_paths.py): hand them the file it points at
    om = Path(real_path(find_model_file(Path(source), suffixes=(".om",), what="OM model")))
    info_path = om.parent / CONVERT_INFO
    if not info_path.is_file():
        raise UserError(f"{info_path} is missing: on the ascend backend the model must come from a convert stage",
                        hint="add a convert stage with backend ascend before this one")
    return om, json.loads(info_path.read_text())


def input_specs(record: dict):
    from ascendpipe.inputs import InputSpec

    return [InputSpec(i["name"], tuple(i["shape"]), i["dtype"]) for i in record["inputs"]]


def om_record(ctx, strict: bool) -> tuple[Path, dict | None]:
    """The OM and its convert.json (None in a dry run before the convert stage ran)."""
    if strict:
        return converted_om(ctx)
    folder = Path(ctx.inputs.get("model", "model.om"))
    try:
        return converted_om(ctx)
    except UserError:
        return folder / f"{MODEL_STEM}.om", None


def planned_shapes(ctx) -> dict | None:
    """A dry run before the convert stage ran: its gear option, from its params (the OM will take those)."""
    from ascendpipe.precision.dynamic_shapes import GEAR_OPTIONS, parse_gears

    up = ctx.upstream.get("model")
    params = (getattr(up, "params", None) or {}) if up is not None and up.kind in ("convert", "tune") else {}
    option = next((o for o in GEAR_OPTIONS if params.get(o) not in (None, "", [])), None)
    if option is None:
        return None
    try:
        return {"mode": option, "gears": parse_gears(option, params[option], None)}
    except UserError:
        return None  # the convert stage's own dry-run line names the problem


def ais_input_dirs(out_dir: Path, record: dict | None) -> list[Path]:
    """One folder per model input (ais_io.write_ais_inputs writes them), named tool-safe."""
    from ascendpipe.backends.ascend.tool_paths import file_name

    if record is None:
        return [out_dir / "ais_input" / "<one folder per input>"]
    return [out_dir / "ais_input" / file_name(i["name"], k) for k, i in enumerate(record["inputs"])]


def infer_plan(ctx, tk: Toolkit, strict: bool, out_dir: Path, *, acl_json: Path | None = None,
               feed: dict | None = None) -> Plan:
    """ais_bench over the OM; ``feed`` (name -> shape) picks a dynamic OM's gear (a dry run shows the default)."""
    om, record = om_record(ctx, strict)
    shapes = (record or {}).get("shapes") or planned_shapes(ctx)
    params = ctx.params
    loop = 1 if acl_json else params.get("loops", params.get("iterations", 1))
    warmup = 0 if acl_json else params.get("warmup", 1)
    argv = ais_bench.infer_argv(python_tool(tk, ctx, strict), model=om, inputs=ais_input_dirs(out_dir, record),
                                output=out_dir / "ais_output", output_dirname="result", outfmt="NPY",
                                loop=loop, warmup_count=warmup, device=params.get("device", 0),
                                acl_json_path=acl_json,
                                extra=ais_bench.dynamic_args(shapes, feed))
    return Plan([argv], data={"om": om, "record": record})


def dump_plan(ctx, tk: Toolkit, strict: bool, out_dir: Path, feed: dict | None = None) -> Plan:
    acl_json = out_dir / "acl.json"
    plan = infer_plan(ctx, tk, strict, out_dir, acl_json=acl_json, feed=feed)
    from ascendpipe.backends.ascend.host import InProcess

    # no msaccucmp convert: without -f it keeps the device's layout; the files are read here (acl_dump)
    plan.argvs.append(InProcess(f"read the device's dump files in-process (DumpData header; NC1HWC0, FRACTAL_Z, "
                                f"FRACTAL_NZ, ... laid out as the golden): {out_dir / 'npu_dump/<run>'}"))
    plan.data["acl_json"] = acl_json
    return plan


def profile_plan(ctx, tk: Toolkit, strict: bool, out_dir: Path, feed: dict | None = None) -> Plan:
    inner = infer_plan(ctx, tk, strict, out_dir, feed=feed)
    params = ctx.params
    app = list(inner.argvs[0])
    app[app.index("--loop") + 1] = str(params.get("iterations", 20))
    app[app.index("--warmup_count") + 1] = str(params.get("warmup", 5))
    form = params.get("msprof_form", "application")
    argv = msprof.collect_argv(tool_path(tk, "msprof", ctx, strict), out_dir / "msprof", app, form=form)
    return Plan([argv], data={"app": app, "form": form, "om": inner.data["om"]})


def placeholder_model(path, suffix: str) -> Path:
    """A model file inside a stage dir, for a dry run where the dir may not be built yet: the one file
    there, else ``model<suffix>`` (the name export, convert and tune stages write)."""
    path = Path(path)
    if path.is_file() or path.suffix == suffix:
        return path
    found = sorted(path.glob(f"*{suffix}")) if path.is_dir() else []
    return found[0] if len(found) == 1 else path / f"{MODEL_STEM}{suffix}"


def compare_plan(ctx, tk: Toolkit, strict: bool, out_dir: Path) -> Plan:
    """The device dump of an OM target (as ``dump_om`` runs it) and, where msit runs, its argv."""
    from ascendpipe.backends.ascend import msit

    from ascendpipe.backends.ascend.host import host_note, host_onnx
    from ascendpipe.backends.ascend.om_compare import msit_argv

    target, upstream = ctx.inputs.get("target"), ctx.upstream.get("target")
    om_target = (upstream is not None and upstream.kind in ("convert", "tune")) or (
        target is not None and (Path(target) / f"{MODEL_STEM}.om").is_file())
    golden_on_host = host_onnx(ctx, "golden")
    head = [host_note(ctx, "dump of the golden side", "golden")] if golden_on_host else []
    if target is None or not om_target:
        return Plan(head)
    dump_dir = out_dir / "target_dump"
    dump_ctx = ctx.derive(kind="dump", inputs={"model": Path(target)},
                          upstream={"model": upstream} if upstream is not None else {}, params={}, out_dir=dump_dir,
                          final_out_dir=dump_dir)
    plan = dump_plan(dump_ctx, tk, strict, dump_dir)
    plan.argvs[:0] = head
    mode, exe = ctx.params.get("msit", "auto"), tk.find("msit")
    if golden_on_host and (mode == "on" or (mode == "auto" and exe is not None)):
        plan.argvs.append(msit_argv(ctx, exe or "msit", tk, golden_model=placeholder_model(ctx.inputs["golden"], ".onnx"),
                                    om_dir=Path(target), out=out_dir, inputs=[out_dir / "msit_input" / "<input>.npy"],
                                    input_shape="<the fed shapes>"))
    return plan
