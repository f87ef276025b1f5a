"""The ``ascend`` backend: the real CANN tools (atc, aoe, ais_bench, msprof, msaccucmp, msit)."""

from __future__ import annotations

from ascendpipe.backends.base import Backend
from ascendpipe.versions import package_version

_KINDS = ("convert", "tune", "infer", "dump", "profile", "quantize")


class AscendBackend(Backend):
    name = "ascend"
    summary = "the CANN tools on an Ascend host (atc, aoe, ais_bench, msprof, msaccucmp, msit)"
    kinds = _KINDS
    device_models = (".om",)

    def tool_versions(self, kind: str) -> dict[str, str]:
        from ascendpipe.backends.ascend.plan import tool_versions

        if kind == "convert":  # the ONNX is read for the op mapping and input specs
            return {"onnx": package_version("onnx"), **tool_versions(kind)}
        if kind == "quantize":  # amct_onnx (a wheel beside CANN); the ONNX is read for layers and inputs
            return {"onnx": package_version("onnx"), "amct_onnx": package_version("amct_onnx"),
                    **tool_versions(kind)}
        if kind == "compare":  # the golden runs on the host; the OM is dumped with the CANN tools
            return {"numpy": package_version("numpy"), "onnxruntime": package_version("onnxruntime"),
                    **tool_versions(kind)}
        return tool_versions(kind)

    def commands(self, kind, ctx) -> list[list[str]]:
        if kind == "quantize":
            from ascendpipe.backends.ascend import amct

            return amct.commands(ctx)
        from ascendpipe.backends.ascend.dry_run import commands

        return commands(kind, ctx)

    def run(self, kind, ctx):
        if kind not in _KINDS:
            raise self.unsupported(kind, ctx)
        if kind == "quantize":
            from ascendpipe.backends.ascend import amct

            return amct.quantize(ctx)
        from ascendpipe.backends.ascend import stages

        return getattr(stages, kind)(ctx)

    def dump_model(self, model, feeds, out, *, log=None, run_command=None, stage="compare"):
        import io
        from pathlib import Path

        from ascendpipe.backends.ascend.device_stages import dump_om

        index = dump_om(model, feeds, out, log=log if log is not None else io.StringIO(), run_command=run_command,
                        stage=stage)
        return Path(index).parent

    def compare_extras(self, ctx, result: dict) -> dict:
        """``msit debug compare`` on the same OM and feeds, beside ours (see om_compare.py)."""
        from ascendpipe.backends.compare_sources import compare_feeds, resolve_side

        golden, target = resolve_side(ctx.inputs["golden"], "golden"), resolve_side(ctx.inputs["target"], "target")
        if target.om_dir is None:
            return {}
        from ascendpipe.backends.ascend.om_compare import msit_beside

        feeds, _ = compare_feeds(golden, target, ctx.inputs.get("inputs"), int(ctx.params.get("seed", 0)))
        return msit_beside(ctx, golden_model=golden.model, om_dir=target.om_dir, feeds=feeds, ours=result,
                           mode=ctx.params.get("msit", "auto"))
