"""ATC settings from a convert (or tune) stage's params: the emulator's resolved settings (one reader of
remedy files) plus the ATC-only options and modes, and the plans of ``atc`` and ``aoe`` runs.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from ascendpipe.backends.ascend import aoe, atc
from ascendpipe.backends.ascend.plan import Plan, tool_path
from ascendpipe.backends.ascend.toolkit import Toolkit
from ascendpipe.contract import MODEL_STEM
from ascendpipe.errors import Location, UserError


ASCEND_ONLY = ("buffer_optimize", "out_nodes", "log")  # the impl-mode options are emulated (precision/implmode.py)


ASCEND_ONLY_MODES = {"mixed_hif8", "cube_hif8"}  # HiFloat8 (Ascend 950): passed to atc, not emulated


def convert_settings(ctx):
    """The emulator's resolved settings (one reader of remedy files), plus ATC-only modes."""
    from ascendpipe.precision.settings import UNDOCUMENTED_MODES, check_soc_modes, resolve

    params = dict(ctx.params)
    where = Location(stage=ctx.name)
    check_soc_modes(params.get("precision_mode"), params.get("precision_mode_v2"), params.get("soc_version"), where)
    if params.get("precision_mode") in UNDOCUMENTED_MODES:
        raise UserError(f"precision_mode '{params['precision_mode']}' is refused by atc's option check (E10001: not in "
                        "its --precision_mode values, GE compiler/api/aclgrph/option_utils.cc); the emulation "
                        "(--backend onnxruntime) accepts it", Location(stage=ctx.name, field="precision_mode"))
    special = {k: params.pop(k) for k in ("precision_mode", "precision_mode_v2")
               if params.get(k) in ASCEND_ONLY_MODES}
    mixlist = params.pop("modify_mixlist", None) if special else None
    s = resolve(params, read_path=ctx.path, where=where)
    if special:
        s.precision_mode = special.get("precision_mode")
        s.precision_mode_v2 = special.get("precision_mode_v2")
        if mixlist:
            from ascendpipe.precision import remedy

            s.modify_mixlist = (remedy.read_mixlist(ctx.path(mixlist)) if isinstance(mixlist, str)
                                else remedy.validate_mixlist(mixlist))
    return s


def settings_record(settings) -> dict[str, Any]:
    """The settings as recorded; an ATC-only mode (bf16, hif8) has no emulator policy to name."""
    from dataclasses import asdict

    try:
        return settings.record()
    except KeyError:
        data = asdict(settings)
        data["policy"] = "ascend-only"
        return data


def onnx_model(ctx, strict: bool = True) -> Path:
    """The ONNX FILE atc reads (never the folder: atc's --model takes a file). A dry run names the file the
    upstream stage will write when its folder is not built yet."""
    from ascendpipe.backends.ascend.plan import placeholder_model
    from ascendpipe.contract import find_model_file

    source = ctx.inputs.get("model")
    if source is None:
        raise UserError("convert needs a 'model' input (an .onnx file or an export stage)")
    if not strict:
        return placeholder_model(source, ".onnx")
    from ascendpipe import onnxexternal

    model = find_model_file(Path(source))
    # its external data checked as our reader checks it (inside the model's folder after links are
    # resolved, regular files, whole offsets and lengths within them) before a path is handed to atc
    onnxexternal.check_model(model)
    return model


def bank_dir(ctx, settings) -> Path | None:
    """A knowledge bank to convert with: an upstream tune stage's bank/, or the tune_bank param."""
    for upstream in ctx.upstream.values():
        if upstream.kind == "tune" and (upstream.out_dir / "bank").is_dir():
            return upstream.out_dir / "bank"
    if getattr(settings, "tune_bank", None):
        path = Path(settings.tune_bank)
        return path / "bank" if (path / "bank").is_dir() else path
    return None


def example_shapes(ctx) -> dict | None:
    """The shapes the pipeline feeds the model, where known: an upstream export stage's input_shapes
    (its export.json once built; its params in a dry run)."""
    import json

    up = ctx.upstream.get("model")
    if up is None or up.kind != "export":
        return None
    record = Path(up.out_dir) / "export.json"
    if record.is_file():
        return json.loads(record.read_text()).get("input_shapes")
    return (up.params or {}).get("input_shapes")


def model_specs(ctx, model: Path):
    """The ONNX's input specs; in a dry run before the export ran, its params' names and example shapes
    with its dynamic_axes as named dims (what the exported ONNX will declare)."""
    from ascendpipe.inputs import InputSpec

    if model.is_file():
        from ascendpipe.onnxgraph import read_input_specs

        return read_input_specs(model)
    up = ctx.upstream.get("model")
    params = (up.params or {}) if up is not None else {}
    if not params.get("input_shapes"):
        return None
    specs = []
    for name, dims in params["input_shapes"].items():
        axes = (params.get("dynamic_axes") or {}).get(name) or {}
        named = {int(a): str(v) for a, v in axes.items()} if isinstance(axes, dict) else {int(a): f"dim{a}" for a in axes}
        specs.append(InputSpec(name, tuple(named.get(a, d) for a, d in enumerate(dims)), "float32"))
    return specs


def shape_plan(ctx, settings, model: Path):
    """The OM's input shapes and gears (precision/dynamic_shapes.py), or None when the model's inputs are
    not known yet (a dry run before the model exists, with no export params to read)."""
    from ascendpipe.precision.dynamic_shapes import resolve

    specs = model_specs(ctx, model)
    if specs is None:
        return None
    soc = settings.soc_version or ctx.params.get("soc_version")
    return resolve(specs, ctx.params, soc_version=soc, examples=example_shapes(ctx), aipp=bool(settings.aipp),
                   stage=ctx.name)


def atc_settings(ctx, settings, model: Path, out_dir: Path) -> atc.AtcSettings:
    from ascendpipe.precision.settings import REMEDY_NAMES

    soc = settings.soc_version or ctx.params.get("soc_version")
    if not soc:
        raise UserError("soc_version is required on the ascend backend (e.g. soc_version: Ascend310P3)",
                        Location(stage=ctx.name, field="soc_version"),
                        hint="set it in this stage's params, or for every convert and tune stage at once: "
                             "--set params.soc_version=Ascend310P3")
    files = settings.remedy_files()
    paths = {name: out_dir / REMEDY_NAMES[name] for name in files}
    if getattr(settings, "fusion_switch_source", None):  # the user's file goes to atc as it is
        paths["fusion_switch"] = Path(settings.fusion_switch_source[0])
    extra = {k: ctx.params[k] for k in ASCEND_ONLY if ctx.params.get(k) not in (None, "", [])}
    s = atc.from_convert_settings(settings, model, out_dir / MODEL_STEM, paths, soc_version=soc, **extra)
    shapes = shape_plan(ctx, settings, model)
    if shapes is not None:
        s.input_shape, s.shape_options = shapes.input_shape or None, shapes.atc_options()
    s.shapes = shapes
    return s


def static_note(ctx, s: atc.AtcSettings, model: Path) -> str | None:
    """What the dry run and the log say when an ONNX with open dims becomes a static OM: with which shape,
    and where the shape came from (the export's input_shapes, else batch 1)."""
    shapes = s.shapes
    if shapes is None:  # a dry run before the model exists, with no export params to read its inputs from
        return (f"{model} is not built yet, so its inputs are not known: an input with open dims gets its "
                f"--input_shape when it is (e.g. batch 1), and the atc line below then has it")
    if not shapes.derived or shapes.mode != "static" or not shapes.input_shape:
        return None
    specs = model_specs(ctx, model) or []
    opened = [sp.name for sp in specs if any(not (isinstance(d, int) and d > 0) for d in sp.shape)]
    if not opened:
        return None
    fixed = ";".join(f"{n}:{','.join(map(str, shapes.input_shape[n]))}" for n in opened if n in shapes.input_shape)
    source = "the export's input_shapes" if example_shapes(ctx) else "an open batch axis taken as 1"
    return (f"the ONNX's dynamic input(s) {', '.join(opened)} become a static OM: --input_shape={fixed} ({source}); "
            f"for several batch sizes give dynamic_batch_size (e.g. \"1,4,8\")")


def convert_plan(ctx, tk: Toolkit, strict: bool, out_dir: Path) -> Plan:
    settings = convert_settings(ctx)
    model = onnx_model(ctx, strict)
    s = atc_settings(ctx, settings, model, out_dir)
    tool = tool_path(tk, "atc", ctx, strict)
    bank = bank_dir(ctx, settings)
    note = static_note(ctx, s, model)
    return Plan([atc.convert_argv(tool, s), atc.json_argv(tool, out_dir / f"{MODEL_STEM}.om", out_dir / f"{MODEL_STEM}.json")],
                env=aoe.bank_env(bank) if bank else {},
                data={"settings": settings, "atc": s, "bank": bank, "notes": [note] if note else []})


def tune_plan(ctx, tk: Toolkit, strict: bool, out_dir: Path) -> Plan:
    settings = convert_settings(ctx)
    if settings.customize_dtypes:  # an atc option (atc_option_map.cc L58); AOE's option pages we read do not name it
        raise UserError("customize_dtypes is an atc option that ascendpipe does not pass to aoe: tune without it, "
                        "and give it to the convert stage that builds the OM", Location(stage=ctx.name,
                                                                                        field="customize_dtypes"))
    model = onnx_model(ctx, strict)
    s = atc_settings(ctx, settings, model, out_dir)
    jobs = ctx.params.get("job_type") or aoe.default_jobs(s.soc_version)
    jobs = sorted(set(jobs if isinstance(jobs, list) else [jobs]))
    aoe.check_jobs(jobs, s.soc_version)
    tool = tool_path(tk, "aoe", ctx, strict)
    argvs = [aoe.tune_argv(tool, s, job) for job in jobs]
    argvs.append(atc.json_argv(tool_path(tk, "atc", ctx, strict), out_dir / f"{MODEL_STEM}.om", out_dir / f"{MODEL_STEM}.json"))
    note = static_note(ctx, s, model)
    return Plan(argvs, env=aoe.bank_env(out_dir / "bank"),
                data={"settings": settings, "atc": s, "jobs": jobs, "notes": [note] if note else []})
