"""``ascendpipe convert|infer|dump --backend ascend``: one stage kind outside a pipeline, run by the same
stage functions a pipeline runs (so the same argv, path checks and shapes), writing into ``--output``.
"""

from __future__ import annotations

import sys
from pathlib import Path


def run(kind: str, params: dict, inputs: dict, output: Path):
    """Run ``kind`` on the ascend backend with the CANN tools; returns its StageResult."""
    from ascendpipe.backends import registry
    from ascendpipe.backends.ascend.tool_paths import check_path
    from ascendpipe.contract import StageContext
    from ascendpipe.errors import Location

    output = Path(output).resolve()
    check_path(output, tool="the CANN tools", what="--output", location=Location(field="output"))
    output.mkdir(parents=True, exist_ok=True)
    ctx = StageContext(name=kind, kind=kind, workspace=Path.cwd(), out_dir=output, final_out_dir=output,
                       params={k: v for k, v in params.items() if v is not None},
                       inputs={k: Path(v).resolve() for k, v in inputs.items() if v is not None}, upstream={},
                       backend="ascend", log=sys.stderr)
    return registry.get("ascend").run(kind, ctx)
