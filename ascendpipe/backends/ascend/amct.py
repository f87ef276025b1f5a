"""The ascend backend of the quantize stage: ``amct_onnx calibration`` (AMCT's command line).

The argv, as CANN's AMCT documents it (options as ``--name=value``)::

    amct_onnx calibration --model=M.onnx --save_path=DIR/model --input_shape="image:16,1,32,32"
        --data_dir="DIR/data/image" --data_types="float32" (--batch_num=N | --calibration_config=quant.cfg)

``--data_dir`` holds one raw ``.bin`` file per batch and input (the arrays' bytes, shape
``--input_shape``), read in name order; several inputs are joined with ``;``. ``--batch_num`` and
``--calibration_config`` exclude each other, so when the settings need the simple config file
(skip layers, offsets, per-layer overrides) ``batch_num`` goes into that file. AMCT writes
``<save_path>_fake_quant_model.onnx`` (ONNX Runtime accuracy simulation) and
``<save_path>_deploy_model.onnx`` (for ATC); this module finds them by those keywords, as the docs
name them. Verified against the documentation and the test double only.
"""

from __future__ import annotations

import shutil
from dataclasses import dataclass, field
from pathlib import Path

from ascendpipe.errors import Location, StageFailed, UserError
from ascendpipe.quantize.config import QUANTIZABLE_TYPES, QuantSettings

TOOL = "amct_onnx"
SAVE_PREFIX = "model"
WORK = "amct_work"


@dataclass
class AmctPlan:
    argv: list[str]
    config_text: str
    data_dirs: list[Path] = field(default_factory=list)
    save_dir: Path = Path(".")
    config_path: Path | None = None


def input_shape_arg(specs, batch_size: int, shapes: dict[str, tuple] | None = None) -> str:
    """``name:n,c,h,w;name2:...`` with the calibration batch size on axis 0 (other dynamic dims from
    the data, when known)."""
    if not specs:  # a dry run before the model exists
        return f"<input>:{batch_size},..."
    parts = []
    for spec in specs:
        dims = list((shapes or {}).get(spec.name) or spec.shape)
        dims = [batch_size if i == 0 else d for i, d in enumerate(dims)]
        if not all(isinstance(d, int) for d in dims):
            raise UserError(f"input '{spec.name}' has a dynamic dim besides the batch ({spec.shape}); "
                            "amct_onnx needs a fixed --input_shape: give calibration data so the shape is known")
        parts.append(f"{spec.name}:{','.join(str(d) for d in dims)}")
    return ";".join(parts)


def needs_config(settings: QuantSettings) -> bool:
    """Whether AMCT's defaults (batch_num only) differ from the settings."""
    return bool(settings.skip_layers or settings.skip_layer_types or not settings.activation_offset
                or not settings.channel_wise or settings.ifmr or settings.override_layer_types
                or settings.override_layer_configs or settings.extra)


def calibration_argv(tool: str, *, model: Path, save_path: Path, input_shape: str, data_dirs: list[Path],
                     data_types: list[str], batch_num: int, config: Path | None) -> list[str]:
    argv = [tool, "calibration", f"--model={model}", f"--save_path={save_path}", f"--input_shape={input_shape}",
            f"--data_dir={';'.join(str(d) for d in data_dirs)}", f"--data_types={';'.join(data_types)}"]
    argv.append(f"--calibration_config={config}" if config is not None else f"--batch_num={batch_num}")
    return argv


def find_outputs(save_dir: Path) -> tuple[Path | None, Path | None]:
    """(deploy model, fake-quant model) written under ``save_dir``, found by their documented keywords."""
    models = sorted(Path(save_dir).rglob("*.onnx"))
    deploy = next((m for m in models if "deploy" in m.name), None)
    fake = next((m for m in models if "fake_quant" in m.name or "fakequant" in m.name), None)
    return deploy, fake


def _plan(settings: QuantSettings, model: Path, specs, batch_size: int, out: Path, tool: str,
          shapes: dict | None = None) -> AmctPlan:
    from ascendpipe.quantize.config import format_simple_config

    work = out / WORK
    config_text = format_simple_config(settings.amct_config(),
                                       header="AMCT simple config (calibration_config_onnx.proto) of this calibration")
    config_path = out / "quant.cfg" if needs_config(settings) else None
    dirs = [work / "data" / f"{i}_{_safe(spec.name)}" for i, spec in enumerate(specs)] or [work / "data" / "<input>"]
    argv = calibration_argv(tool, model=model, save_path=work / "results" / SAVE_PREFIX,
                            input_shape=input_shape_arg(specs, batch_size, shapes), data_dirs=dirs,
                            data_types=[spec.dtype for spec in specs] or ["float32"], batch_num=settings.batch_num, config=config_path)
    return AmctPlan(argv, config_text, dirs, work / "results", config_path)


def _safe(name: str) -> str:
    return "".join(c if c.isalnum() or c in "-_." else "_" for c in name) or "input"


def _settings(ctx) -> QuantSettings:
    from ascendpipe.quantize.config import resolve

    return resolve(ctx.params, lambda p: ctx.path(p).read_text(), Location(stage=ctx.name))


def commands(ctx) -> list[list[str]]:
    """The amct_onnx argv ``quantize`` would run (``--dry-run``); the model need not exist yet."""
    from ascendpipe.backends.ascend.toolkit import discover

    try:
        settings = _settings(ctx)
        model_in = Path(ctx.inputs.get("model", "model.onnx"))
        model = _model_file(model_in) if model_in.exists() else model_in / "model.onnx"
        specs = _specs(model) if model.is_file() else []
        size, shapes = settings.batch_size or 16, None
        calibration = ctx.inputs.get("calibration")
        if specs and calibration is not None and Path(calibration).exists():
            # the batches the run will take (a fixed batch dim, too few samples: refused as the run refuses them)
            from ascendpipe.quantize import artifacts

            batches, used = artifacts.calibration_batches(Path(calibration), specs, settings, Location(stage=ctx.name))
            size, shapes = used["batch_size"], {name: tuple(a.shape) for name, a in batches[0].items()}
        found = discover().find(TOOL)
        plan = _plan(settings, model, specs, size, Path(ctx.final_out_dir), str(found) if found else TOOL, shapes)
    except UserError as err:
        raise err.with_location(stage=ctx.name) from None
    return [plan.argv]


def _model_file(path: Path) -> Path:
    from ascendpipe import onnxexternal
    from ascendpipe.contract import find_model_file

    model = find_model_file(path, what="input model")
    onnxexternal.check_model(model)  # its external data, strictly, before amct_onnx is handed the path
    return model


def _specs(model: Path):
    from ascendpipe.onnxgraph import read_input_specs

    return read_input_specs(model)


def write_bins(batches: list[dict], specs, dirs: list[Path]) -> None:
    """One raw .bin per batch and input (AMCT's --data_dir layout), named so they sort in batch order."""
    import numpy as np

    for spec, folder in zip(specs, dirs):
        folder.mkdir(parents=True, exist_ok=True)
        for i, batch in enumerate(batches):
            np.ascontiguousarray(batch[spec.name], dtype=np.dtype(spec.dtype)).tofile(folder / f"batch_{i:05d}.bin")


def quantize(ctx):
    """Write the calibration data as .bin files, run amct_onnx, lay out the outputs like the emulation's."""
    from ascendpipe.backends.ascend.runner import runner_for
    from ascendpipe.backends.ascend.toolkit import discover
    from ascendpipe.quantize import artifacts
    from ascendpipe.contract import StageResult, write_metrics

    where = Location(stage=ctx.name)
    out = Path(ctx.out_dir)
    try:
        settings = _settings(ctx)
        model = _model_file(Path(ctx.inputs["model"]))
        layers = artifacts.quantizable_layers(model, QUANTIZABLE_TYPES)
        artifacts.check_skip_layers(settings, layers, where)
        specs = _specs(model)
        batches, calibration = artifacts.calibration_batches(ctx.inputs["calibration"], specs, settings, where)
        tk = discover()
        tool = str(tk.tool(TOOL, stage=ctx.name))
        shapes = {name: tuple(a.shape) for name, a in batches[0].items()}
        settings.batch_size = calibration["batch_size"]
        plan = _plan(settings, model, specs, calibration["batch_size"], out, tool, shapes)
    except UserError as err:
        raise err.with_location(stage=ctx.name) from None
    write_bins(batches, specs, plan.data_dirs)
    if plan.config_path is not None:
        plan.config_path.write_text(plan.config_text)
    plan.save_dir.mkdir(parents=True, exist_ok=True)
    runner_for(ctx).run(plan.argv, cwd=out / WORK, env=tk.env, log=ctx.log)
    deploy, fake = find_outputs(plan.save_dir)
    if deploy is None or fake is None:
        raise StageFailed(ctx.name, f"amct_onnx ran but wrote no *deploy*.onnx / *fake_quant*.onnx under {plan.save_dir}",
                          getattr(ctx.log, "name", None))
    argv = [a.replace(str(ctx.out_dir), str(ctx.final_out_dir)) for a in plan.argv]
    metrics, record = artifacts.write_outputs(
        out, fake_quant=fake, deploy=deploy, original=model, settings=settings, config_text=plan.config_text,
        calibration=calibration, layers=layers,
        record={"backend": "ascend", "stage": ctx.name, "model": str(model), "calibration_method": "IFMR (AMCT)",
                "amct_argv": argv, "amct_outputs": {"deploy": deploy.name, "fake_quant": fake.name},
                "tool_versions": tk.versions(())})
    shutil.rmtree(out / WORK, ignore_errors=True)
    write_metrics(out, metrics)
    ctx.say(f"amct_onnx: {metrics['quantized_layers']} layers quantized, skipped: "
            f"{', '.join(record['skipped_layers']) or 'none'}; deploy model for atc: deploy/model.onnx")
    return StageResult(metrics=metrics, remedy_files={artifacts.CONFIG: artifacts.CONFIG},
                       info={"amct_argv": argv, "calibration_sha256": calibration["sha256"],
                             "quantized_layers": record["quantized_layers"], "skipped_layers": record["skipped_layers"],
                             "scales_file": artifacts.SCALES})
