"""``source``: start a pipeline from an existing ONNX model.

``model`` names an ``.onnx`` file (or a directory holding exactly one). The model is checked with
``onnx.checker`` and copied (hard-linked when possible) into the stage's output as ``model.onnx``,
so downstream stages read it the same way as an ``export`` stage's output. It is copied, not linked:
an in-place edit of the source must not change a built output behind the cache's back. A model
with external data files is saved back as a single file.
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

        where = Location(stage=ctx.name, field="model")
        try:
            path = find_model_file(ctx.inputs["model"])
        except UserError as err:
            raise err.with_location(stage=ctx.name, field="model") from None
        if path.suffix != ".onnx":
            raise UserError(f"{path} is not an .onnx file", where)
        from ascendpipe import onnxexternal

        try:
            model = onnx.load(str(path), load_external_data=False)  # the graph; weights stay in their files
        except Exception as exc:
            raise UserError(f"{path} is not a readable ONNX model: {str(exc).strip().splitlines()[0]}", where) from None
        external = onnxexternal.has_external(model)
        full = ctx.params.get("full_check", True)
        try:  # by path: onnx finds external weights in the model's folder, past protobuf's 2 GB too
            onnx.checker.check_model(str(path), full_check=full and not external)
            if full and external:  # full_check's shape inference, with the small weights it reads inline
                light = onnx.ModelProto()
                light.CopyFrom(model)
                onnxexternal.inline_small(light, path.parent, 64 << 10)
                onnx.shape_inference.infer_shapes(light, check_type=True, strict_mode=True)
        except UserError as err:
            raise err.with_location(stage=ctx.name, field="model") from None
        except Exception as exc:
            raise UserError(f"onnx.checker rejects {path}: {str(exc).strip().splitlines()[0]}", where) from None
        target = ctx.out_dir / "model.onnx"
        if external:  # the weights files beside it, under the names the model gives them (never inlined)
            try:
                onnxexternal.place_weights(model, path.parent, ctx.out_dir)
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
