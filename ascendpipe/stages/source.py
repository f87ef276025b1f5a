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
        try:
            external = any(init.data_location == onnx.TensorProto.EXTERNAL
                           for init in onnx.load(str(path), load_external_data=False).graph.initializer)
            model = onnx.load(str(path), load_external_data=True)
        except Exception as exc:
            raise UserError(f"{path} is not a readable ONNX model: {str(exc).strip().splitlines()[0]}", where) from None
        try:
            onnx.checker.check_model(model, full_check=ctx.params.get("full_check", True))
        except Exception as exc:
            raise UserError(f"onnx.checker rejects {path}: {str(exc).strip().splitlines()[0]}", where) from None
        target = ctx.out_dir / "model.onnx"
        if external:
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
