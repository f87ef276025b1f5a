"""``ascendpipe doctor [PIPELINE] [--backend B] [--json]``: check the machine before the first build."""

from __future__ import annotations

import json
import sys
from pathlib import Path

HELP = "check the machine: toolkit, tools and versions, the board's SoC, the workspace path, free disk"
DESCRIPTION = (HELP + ". Each check prints ok or MISSING with its fix (an optional tool, msit: absent); exit 0 "
               "when every required check passes, 1 otherwise. With PIPELINE, the board's SoC is checked "
               "against its convert and tune stages' soc_version (one that sets none is reported).")


def add_arguments(parser) -> None:
    parser.add_argument("pipeline", nargs="?", help="a pipeline file: check its soc_version against the board")
    parser.add_argument("--backend", default=None, help="onnxruntime (default, or the pipeline's) or ascend")
    parser.add_argument("--set", dest="overrides", action="append", default=[], metavar="KEY=VALUE",
                        help="override a pipeline value (e.g. stages.convert.params.soc_version=Ascend310P3)")
    parser.add_argument("--json", action="store_true", help="print the checks as JSON")


def _wanted_socs(pipeline) -> dict[str, str]:
    """stage -> soc_version; "" for a convert or tune stage that sets none (atc and aoe need one)."""
    stages = pipeline.stages.values() if isinstance(pipeline.stages, dict) else pipeline.stages
    return {s.name: str(s.params.get("soc_version") or "") for s in stages
            if s.kind in ("convert", "tune") or (s.kind == "quantize" and s.params.get("soc_version"))}


def host_probes(env: dict | None = None):
    """The probes of this machine: package versions, disk, and the ascend toolkit/board probes."""
    import os

    from ascendpipe import doctor
    from ascendpipe.backends.ascend import doctor as ascend
    from ascendpipe.versions import package_version

    def version(dist: str) -> str | None:
        found = package_version(dist)
        return None if not found or found == "not installed" else found

    env = dict(os.environ if env is None else env)
    probes = doctor.Probes(package_version=version, free_bytes=doctor.disk_free)
    ascend.attach(probes, env)
    return probes


def main(args) -> int:
    from ascendpipe import doctor
    from ascendpipe.backends.registry import names
    from ascendpipe.errors import Location, UserError

    workspace, wanted, backend = Path.cwd(), {}, args.backend
    if args.pipeline:
        from ascendpipe import api

        pipeline = api.load(args.pipeline, set=args.overrides, backend=backend)
        workspace, wanted = Path(pipeline.workspace), _wanted_socs(pipeline)
        backend = backend or pipeline.backend
    backend = backend or "onnxruntime"
    if backend not in names():
        raise UserError(f"unknown backend '{backend}'; known: {', '.join(names())}", Location(field="--backend"))
    checks = doctor.run_checks(backend, workspace.resolve(), host_probes(), wanted)
    if args.json:
        sys.stdout.write(json.dumps({"backend": backend, "workspace": str(workspace.resolve()),
                                     "ok": doctor.passed(checks),
                                     "checks": [c.to_json() for c in checks]}, indent=2) + "\n")
    else:
        sys.stdout.write(f"ascendpipe doctor --backend {backend}\n" + doctor.render(checks))
    return 0 if doctor.passed(checks) else 1
