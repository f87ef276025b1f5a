"""``--dry-run`` on the ascend backend: the argv lists a kind would run (tools named even if missing).
"""

from __future__ import annotations

from pathlib import Path

from ascendpipe.backends.ascend.convert_settings import convert_plan, tune_plan
from ascendpipe.backends.ascend.plan import compare_plan, dump_plan, infer_plan, profile_plan
from ascendpipe.backends.ascend.toolkit import discover
from ascendpipe.errors import UserError


PLANS = {"convert": convert_plan, "tune": tune_plan, "infer": infer_plan, "dump": dump_plan,
         "profile": profile_plan, "compare": compare_plan}


def commands(kind: str, ctx) -> list[list[str]]:
    """The argv lists ``kind`` would run, without running anything (tools named even if missing)."""
    plan_of = PLANS.get(kind)
    if plan_of is None:
        return []
    try:
        return plan_of(ctx, discover(), False, Path(ctx.final_out_dir)).argvs
    except UserError as err:
        raise err.with_location(stage=ctx.name) from None
