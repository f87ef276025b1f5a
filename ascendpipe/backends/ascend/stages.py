"""The ascend backend's stage functions, one per kind (``<kind>(ctx) -> StageResult``), and
``commands(kind, ctx)`` for ``--dry-run``. ``backend.py`` dispatches here.

Where the work lives: ``plan`` (argv lists shared by the run and the dry run), ``convert_settings``
(ATC settings from params), ``om_facts`` (fused map and convert.json), ``convert_stages`` (atc,
aoe), ``ais_io`` (ais_bench file staging), ``device_stages`` (infer, dump, profile on the device),
``host`` (a golden ONNX on the host's onnxruntime), ``dry_run``. Output layouts match the
onnxruntime backend's (docs/contracts.md), so downstream stages read either.
"""

from __future__ import annotations

from ascendpipe.backends.ascend.convert_stages import convert, tune
from ascendpipe.backends.ascend.device_stages import dump, dump_om, infer, profile
from ascendpipe.backends.ascend.dry_run import commands
from ascendpipe.backends.ascend.om_facts import fused_map_from_om
from ascendpipe.backends.ascend.plan import tool_versions

__all__ = ["convert", "tune", "infer", "dump", "profile", "dump_om", "commands", "tool_versions", "fused_map_from_om"]
