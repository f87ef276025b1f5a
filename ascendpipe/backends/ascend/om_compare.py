"""``msit debug compare`` beside ascendpipe's own compare of an OM (the ascend backend's compare stage).

msit runs the golden ONNX and the OM itself (its own ais_bench dump and msaccucmp compare); we read
its ``result_*.csv`` (``msit.read_result_csv``) into ``msit_result.json`` and count the rows whose
cosine agrees with ours. Mode ``auto`` runs it where an ``msit`` executable is found and never fails
the stage for it; ``on`` requires it; ``off`` skips it.
"""

from __future__ import annotations

import shutil
from pathlib import Path
from typing import Any

from ascendpipe.backends.ascend import msit
from ascendpipe.backends.ascend.runner import runner_for
from ascendpipe.backends.ascend.toolkit import discover
from ascendpipe.errors import Location, StageFailed, UserError
from ascendpipe.fsutil import write_json_atomic

RESULT_JSON = "msit_result.json"
RESULT_CSV = "msit_result.csv"


def _input_shape(feeds: dict) -> str:
    """``-is name:d1,d2;...`` for msit: the shapes we fed, so a dynamic-batch ONNX runs at the same shape."""
    return ";".join(f"{name}:{','.join(str(d) for d in array.shape)}" for name, array in feeds.items())


def _write_inputs(feeds: dict, root: Path) -> list[Path]:
    import numpy as np

    from ascendpipe.backends.ascend.tool_paths import file_name

    root.mkdir(parents=True, exist_ok=True)
    files = []
    for k, (name, array) in enumerate(feeds.items()):
        path = root / f"{file_name(name, k)}.npy"
        np.save(path, np.require(array, requirements="C"))  # ascontiguousarray makes a 0-d input 1-d
        files.append(path)
    return files


def msit_argv(ctx, exe, tk, *, golden_model: Path, om_dir: Path, out: Path, inputs: list[Path],
              input_shape: str) -> list[str]:
    """The one msit argv builder (the run and the dry run): golden ONNX, the OM, our feeds and their shapes."""
    from ascendpipe.backends.ascend.tool_paths import real_path

    return msit.compare_argv(exe, golden_model=golden_model, om_model=Path(real_path(Path(om_dir) / "model.om")),
                             output=out / "msit", inputs=inputs, cann_path=tk.home, input_shape=input_shape,
                             device=int(ctx.params.get("device", 0)))


def _skip(ctx, mode: str, why: str) -> None:
    if mode == "on":
        raise UserError(f"msit: {why}", Location(stage=ctx.name, field="params.msit"),
                        hint="`pip install msit` and `msit install compare`, or set msit: auto|off")
    ctx.say(f"msit debug compare skipped: {why}")


def msit_beside(ctx, *, golden_model: Path | None, om_dir: Path, feeds: dict, ours: dict, mode: str) -> dict[str, Any]:
    """Run msit on the same OM and feeds when ``mode`` asks for it; returns metrics to add (maybe empty)."""
    if mode == "off":
        return {}
    tk = discover()
    exe = tk.find("msit")
    if exe is None:
        _skip(ctx, mode, "no msit executable in $ASCEND_TOOLKIT_HOME/bin or on PATH")
        return {}
    if golden_model is None:
        _skip(ctx, mode, "the golden is a dump, and msit needs the golden model")
        return {}
    out = Path(ctx.out_dir)
    work = out / "msit"
    argv = msit_argv(ctx, exe, tk, golden_model=golden_model, om_dir=om_dir, out=out,
                     inputs=_write_inputs(feeds, out / "msit_input"), input_shape=_input_shape(feeds))
    try:
        work.mkdir(parents=True, exist_ok=True)
        # msaccucmp's compare exits 2 when it found errors; msit passes that on and it still counts as done
        runner_for(ctx).run(argv, cwd=out, env=tk.env, log=ctx.log, ok_codes=(0, 2))
        found = msit.find_result_csv(work)
        if found is None:
            raise StageFailed(ctx.name, f"msit wrote no result_*.csv under {work}", getattr(ctx.log, "name", None))
        data = msit.read_result_csv(found)
    except (StageFailed, ValueError) as exc:
        if mode == "on":
            raise
        ctx.say(f"msit debug compare did not give a result (ours stands): {exc}")
        return {}
    finally:
        shutil.rmtree(out / "msit_input", ignore_errors=True)
    shutil.copyfile(found, out / RESULT_CSV)
    shutil.rmtree(work, ignore_errors=True)  # its dumps: as large as ours, and ours are kept
    agreement = msit.cosine_agreement(ours["rows"], data["rows"])
    data.update(path=RESULT_CSV, argv=[str(a) for a in argv], agreement=agreement)
    from ascendpipe.backends.ascend.importer import json_safe

    write_json_atomic(out / RESULT_JSON, json_safe(data))
    ctx.say(f"msit debug compare: {agreement['agree']} of {agreement['paired_rows']} paired rows agree with ours "
            f"within {agreement['tolerance']:g} on cosine ({len(data['rows'])} msit rows; {RESULT_JSON})")
    return {"msit_rows_paired": agreement["paired_rows"], "msit_rows_agree": agreement["agree"],
            "msit_failed_ops": data["summary"]["failed_ops"]}
