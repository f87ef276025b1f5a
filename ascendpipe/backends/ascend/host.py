"""The host fallback: a plain ONNX (the fp32 golden) given to an ascend infer/dump/profile stage runs on
the host's onnxruntime, as msit runs the golden side of a compare; only OMs go to ais_bench.
"""

from __future__ import annotations

from pathlib import Path

DEVICE_KINDS = ("convert", "tune")  # upstream kinds whose folder holds an OM on this backend
ONNX_KINDS = ("export", "quantize")  # upstream kinds whose folder holds a plain ONNX


class InProcess(list):
    """A dry-run line for work done in-process (no argv runs): shown as ``= note``, not ``$ argv``."""

    def __init__(self, note: str):
        super().__init__()
        self.note = note


def host_onnx(ctx, field: str = "model") -> bool:
    """True when the model input is a plain ONNX (the fp32 golden): it runs on the host's onnxruntime,
    as msit runs the golden side of a compare; only OMs go to ais_bench. Decided by the upstream kind
    where there is one (so a dry run over folders not built yet decides as the run will), else by the files."""
    source = ctx.inputs.get(field)
    if source is None:
        return False
    upstream = ctx.upstream.get(field)
    if upstream is not None and upstream.kind in DEVICE_KINDS:
        return False
    path = Path(source)
    if path.is_file():
        return path.suffix == ".onnx"
    if path.is_dir():
        return not any(path.glob("*.om")) and len(list(path.glob("*.onnx"))) == 1
    return path.suffix == ".onnx" or (upstream is not None and upstream.kind in ONNX_KINDS)


def host_model_path(ctx, field: str = "model") -> Path:
    """The ONNX file a host run reads (a dry run may name it before its folder is built)."""
    path = Path(ctx.inputs[field])
    if path.suffix == ".onnx" or path.is_file():
        return path
    found = sorted(path.glob("*.onnx")) if path.is_dir() else []
    return found[0] if len(found) == 1 else path / "model.onnx"


def host_note(ctx, kind: str, field: str = "model") -> InProcess:
    return InProcess(f"host onnxruntime ({kind}, in-process; a plain ONNX is not an OM, so no ais_bench): "
                     f"{host_model_path(ctx, field)}")


def on_host(ctx, kind: str):
    from ascendpipe.backends import registry

    ctx.say(f"{ctx.name}: the model is an ONNX, not an OM: running it on the host's onnxruntime (golden side)")
    result = registry.get("onnxruntime").run(kind, ctx)
    result.info["ran_on"] = "host onnxruntime (golden ONNX)"
    return result
