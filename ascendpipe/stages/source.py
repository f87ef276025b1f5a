"""``source``: start a pipeline from an existing ONNX model.

``model`` names an ``.onnx`` file (or a directory holding exactly one). The model is checked with
``onnx.checker`` and copied into the stage's output as ``model.onnx``, so downstream stages read it
the same way as an ``export`` stage's output. It is copied, not linked: an in-place edit of the
source must not change a built output behind the cache's back. A model whose weights are external
data keeps them in their files: each reference is checked by the strict reader
(``onnxexternal.references``) and each file copied once beside ``model.onnx`` (a reflink where the
file system shares blocks); the cache then shares that copy's bytes (``store/objects.py``).
"""

from __future__ import annotations

import shutil

from ascendpipe.errors import Location, UserError
from ascendpipe.stages.base import StageContext, StageKind, StageResult, find_model_file, package_version, write_metrics


class SourceKind(StageKind):
    name = "source"
    uses_backend = False
    version = "1"
    summary = "an existing ONNX model, checked, as the start of a pipeline"
    input_fields = ("model",)
    required_inputs = ("model",)
    params_schema = {"type": "object", "properties": {
        "full_check": {"type": "boolean", "default": True},
    }}

    def tool_versions(self, backend: str) -> dict[str, str]:
        return {"onnx": package_version("onnx")}

    def run(self, ctx: StageContext) -> StageResult:
        import onnx

        from ascendpipe import onnxexternal

        where = Location(stage=ctx.name, field="model")
        try:
            path = find_model_file(ctx.inputs["model"])
        except UserError as err:
            raise err.with_location(stage=ctx.name, field="model") from None
        if path.suffix != ".onnx":
            raise UserError(f"{path} is not an .onnx file", where)
        # every external reference resolved strictly (inside the folder, links resolved, regular files,
        # whole offsets and lengths within them) before a byte of them is read or copied
        refs = onnxexternal.check_model(path, stage=ctx.name)
        try:
            model = onnx.load(str(path), load_external_data=False)  # the graph; weights stay in their files
        except Exception as exc:
            raise UserError(f"{path} is not a readable ONNX model: {str(exc).strip().splitlines()[0]}", where) from None
        external = onnxexternal.has_external(model) or bool(refs)
        full = ctx.params.get("full_check", True)
        try:
            if external:  # its weights are the strict reader's (onnx's own refuses a hard-linked file)
                onnxexternal.check_structure(model)
                if full:  # full_check's shape inference, with the small weights it reads inline
                    light = onnx.ModelProto()
                    light.CopyFrom(model)
                    onnxexternal.inline_small(light, path.parent, 64 << 10)
                    onnx.shape_inference.infer_shapes(light, check_type=True, strict_mode=True)
            else:  # by path: onnx reads the model as a user's script would
                onnx.checker.check_model(str(path), full_check=full)
        except UserError as err:
            raise err.with_location(stage=ctx.name, field="model") from None
        except Exception as exc:
            raise UserError(f"onnx.checker rejects {path}: {str(exc).strip().splitlines()[0]}", where) from None
        target = ctx.out_dir / "model.onnx"
        if external:  # the weights files beside it, under the names the model gives them (never inlined)
            _check_names(refs, where)
            _check_disk(refs, ctx.out_dir, where)
            try:
                onnxexternal.place_weights(list(onnxexternal.external_tensors(model)), path.parent, ctx.out_dir,
                                           label=str(path))
            except UserError as err:
                raise err.with_location(stage=ctx.name, field="model") from None
            onnx.save(model, str(target))
        else:
            shutil.copyfile(path, target)
        from ascendpipe.onnxgraph import graph_input_specs

        inputs = {s.name: list(s.shape) for s in graph_input_specs(model.graph)}
        ctx.say(f"source {path}: opset {[o.version for o in model.opset_import]}, {len(model.graph.node)} nodes")
        metrics = {"nodes": len(model.graph.node)}
        write_metrics(ctx.out_dir, metrics)
        return StageResult(metrics=metrics, info={"model": str(path), "inputs": inputs,
                                                   "opset": {o.domain or "ai.onnx": o.version for o in model.opset_import}})


OWN_NAMES = frozenset({"model.onnx", "metrics.json"})  # what the stage writes itself beside the weights


def _check_names(refs, where: Location) -> None:
    """A weights file named as one of the stage's own outputs would be written over by it."""
    import os

    for ref in refs:
        if os.path.normpath(ref.location).lower() in OWN_NAMES:
            raise UserError(f"tensor '{ref.tensor}': its weights file is named '{ref.location}', a name the source "
                            "stage writes itself: rename the weights file (and the model's location for it)", where)


def _check_disk(refs, out_dir, where: Location) -> None:
    """The weights files are copied once (a reflink where the file system shares blocks): a copy past
    the free space says so, with the numbers, before a byte is written."""
    import os

    from ascendpipe.onnxexternal import size_text

    need = sum(os.path.getsize(p) for p in {ref.path for ref in refs})
    try:
        free = shutil.disk_usage(out_dir).free
    except OSError:
        return
    if need > free:
        raise UserError(f"copying the model's weights files needs {size_text(need)} of disk in {out_dir} and "
                        f"{size_text(free)} is free: free space there (the build and cache folders share the copy)",
                        where)
