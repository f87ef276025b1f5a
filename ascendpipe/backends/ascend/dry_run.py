"""``--dry-run`` on the ascend backend: the argv lists a kind would run (tools named even if missing),
built by the same plan functions the run uses and checked by the same path rules (tool_paths.py).
"""

from __future__ import annotations

from pathlib import Path

from ascendpipe.backends.ascend.convert_settings import convert_plan, tune_plan
from ascendpipe.backends.ascend.host import host_note, host_onnx
from ascendpipe.backends.ascend.plan import compare_plan, dump_plan, infer_plan, profile_plan
from ascendpipe.backends.ascend.tool_paths import check_argv
from ascendpipe.backends.ascend.toolkit import discover
from ascendpipe.errors import Location, UserError


PLANS = {"convert": convert_plan, "tune": tune_plan, "infer": infer_plan, "dump": dump_plan,
         "profile": profile_plan, "compare": compare_plan}


def commands(kind: str, ctx) -> list[list[str]]:
    """The argv lists ``kind`` would run, without running anything (tools named even if missing)."""
    plan_of = PLANS.get(kind)
    if plan_of is None:
        return []
    if kind in ("infer", "dump", "profile") and host_onnx(ctx):
        return [host_note(ctx, kind)]
    from ascendpipe.backends.ascend.host import InProcess

    try:
        plan = plan_of(ctx, discover(), False, Path(ctx.final_out_dir))
        for argv in plan.argvs:
            if not getattr(argv, "note", None):
                check_argv(argv, location=Location(stage=ctx.name))
        # what the run will decide without a command line of its own (a dynamic model made static)
        return [InProcess(n) for n in plan.data.get("notes", [])] + plan.argvs
    except UserError as err:
        if kind in ("convert", "tune"):
            err = _board_words(ctx, err)
        raise err.with_location(stage=ctx.name) from None


def _board_words(ctx, err: UserError) -> UserError:
    """An input with an open dim and no shape for it: name every such input and what to give (a decoder's
    prefill and decode OMs, or gears: ``board``), the words the emulated convert warns with."""
    from ascendpipe.backends.ascend import board
    from ascendpipe.backends.ascend.convert_settings import model_specs, onnx_model

    if board.NEEDS not in err.message:
        return err
    try:
        specs = model_specs(ctx, onnx_model(ctx, False))
    except UserError:
        return err
    if not specs or not board.open_inputs(specs):
        return err
    return UserError(f"{board.needs_shapes(specs)}: {board.advice(specs)}", err.location, hint=err.hint)
