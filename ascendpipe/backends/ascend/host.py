"""The host fallback: a plain ONNX (the fp32 golden) given to an ascend infer/dump/profile stage runs on
the host's onnxruntime, as msit runs the golden side of a compare; only OMs go to ais_bench.
"""

from __future__ import annotations

from pathlib import Path



def host_onnx(ctx) -> bool:
    """True when the model input is a plain ONNX (the fp32 golden): it runs on the host's onnxruntime,
    as msit runs the golden side of a compare; only OMs go to ais_bench."""
    source = ctx.inputs.get("model")
    if source is None:
        return False
    path = Path(source)
    if path.is_file():
        return path.suffix == ".onnx"
    return path.is_dir() and not any(path.glob("*.om")) and len(list(path.glob("*.onnx"))) == 1


def on_host(ctx, kind: str):
    from ascendpipe.backends import registry

    ctx.say(f"{ctx.name}: the model is an ONNX, not an OM: running it on the host's onnxruntime (golden side)")
    result = registry.get("onnxruntime").run(kind, ctx)
    result.info["ran_on"] = "host onnxruntime (golden ONNX)"
    return result
