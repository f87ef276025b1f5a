"""The ``compare`` stage kind: per-op accuracy of a target (converted model or dump) against a golden.

Inputs: ``golden`` (an fp32 .onnx, a stage that made one, or a dump), ``target`` (a converted model
dir of either backend, an .onnx, or a dump dir),
``inputs`` (optional .npy/.npz; without it a seeded random input, said in the log and result.json),
``golden_inputs`` (optional: the training-preprocessed float input for the golden, when the target
takes other data: with AIPP the first row checks the device's preprocessing against it).
Outputs: result.csv, result.json, report.html and the first failure's remedy file, if any. Every
batch of ``inputs`` is compared; each op's row shows its worst batch.
Dumps: the golden's dump is shared (``store.dump_cache``): every compare stage (and dump stage) of the
same golden model and inputs reads one dump in ``cache/``, made by the first that needs it; this
stage's folder lists it in ``object_refs.json`` (so gc keeps it) and holds the target's dump
(``target_dump/``, fp16 where the device keeps fp16). After the compare it keeps (``dump_keep``) what a
rerun of the failure needs: the failing ops' tensors and those feeding the first failure (``rerun``, the
default), only the failing ops' (``failing``) or every tensor (``all``); ``dump_keep_max: K`` keeps the
first K of them.
``summary.dumps`` in result.json and the ``dump_bytes`` metric say how many bytes of dumps it keeps.
A target that is a device model the backend runs (an ascend convert dir, model.om) is dumped through
the backend (``Backend.dump_model``: ais_bench + acl.json + msaccucmp) and compared through the OM
JSON's op mapping; the backend may add its own compare beside ours (``Backend.compare_extras``: on
ascend, ``msit`` (auto|on|off) runs ``msit debug compare`` where it is installed: msit_result.json).
"""

from __future__ import annotations

from ascendpipe.errors import Location
from ascendpipe.stages.base import StageContext, StageKind, StageResult, write_metrics

_THRESHOLD_PROPS = {name: {"type": "number"} for name in ("cosine", "relative_euclidean", "kl", "rmse", "mean_relative_error")}


class CompareKind(StageKind):
    name = "compare"
    # 4: the golden's dump shared in cache/ (object_refs.json), dumps kept as dump_keep says (default rerun)
    # 5: issue 49: words by the overflow mode, a mask's fill contained, no cause blamed where the outputs meet
    #    the device's accuracy standard, statistics first past the dumps' disk budget (dump_budget)
    version = "5"
    summary = "per-op accuracy vs the fp32 golden (msit metrics), first failure and advice"
    input_fields = ("golden", "target", "inputs", "golden_inputs")
    required_inputs = ("golden", "target")
    params_schema = {
        "type": "object",
        "properties": {
            "strategy": {"enum": ["first-overall", "first-per-output", "all"], "default": "first-overall"},
            "thresholds": {"type": "object", "properties": _THRESHOLD_PROPS, "additionalProperties": False},
            "seed": {"type": "integer", "default": 0},
            # input name -> its batch axis where not 0 (a state [2, B, H]: 1); null: not batched
            "batch_axes": {"type": "object", "additionalProperties": {"type": ["integer", "null"], "minimum": 0}},
            # ascend backend, OM target: also run `msit debug compare` (auto: where msit is found)
            "msit": {"enum": ["auto", "on", "off"], "default": "auto"},
            # after the compare, keep only these ops' tensors in this stage's dumps (the shared golden stays whole):
            # rerun (default) the failing ops' and those feeding the first failure; failing; all
            "dump_keep": {"enum": ["rerun", "failing", "all"], "default": "rerun"},
            "dump_keep_max": {"type": "integer", "minimum": 0},  # at most the first K of them, in graph order
            # the disk the dumps may take ("2G", "500M", bytes; none: no limit; auto, when absent: half the free
            # space): past it, statistics first and only the first failure's neighbourhood in full
            "dump_budget": {"type": ["string", "integer"],
                            "description": "the disk the dumps may take (`2G`, `500M`, bytes; `none`: no limit; "
                                           "absent: `auto`, half the free space): past it, both sides as statistics "
                                           "and only the first failure's neighbourhood in full (docs/decoders.md)"},
        },
    }

    def run(self, ctx: StageContext) -> StageResult:
        from ascendpipe.backends import registry
        from ascendpipe.compare import thresholds as thr
        from ascendpipe.backends.compare_sources import run_compare
        from ascendpipe.compare.writers import terminal_text, write_results
        from ascendpipe.fsutil import write_json_atomic, write_text_atomic
        from ascendpipe.store.dump_cache import OBJECT_REFS, DumpCache, refs_document

        events: dict = {}
        where = Location(stage=ctx.name, field="params.thresholds")
        limits = thr.resolve(ctx.thresholds, ctx.params.get("thresholds"), location=where)
        upstream = ctx.upstream.get("target")
        # None: a dump target names the stage behind it (backends.compare_sources, source.json), else 'convert'
        convert_stage = upstream.stage if upstream is not None and upstream.kind == "convert" else None
        result, note = run_compare(
            ctx.inputs["golden"], ctx.inputs["target"], input_path=ctx.inputs.get("inputs"), work_dir=ctx.out_dir,
            limits=limits, strategy=ctx.params.get("strategy", "first-overall"), seed=int(ctx.params.get("seed", 0)),
            convert_stage=convert_stage, golden_inputs=ctx.inputs.get("golden_inputs"),
            backend=ctx.backend, log=ctx.log, run_command=ctx.run_command, stage=ctx.name,
            batch_axes=ctx.params.get("batch_axes"),
            dump_cache=DumpCache.for_workspace(ctx.workspace), keep=ctx.params.get("dump_keep", "rerun"),
            keep_max=ctx.params.get("dump_keep_max"), events=events,
            dump_budget=_budget(ctx),
        )
        dumps = result["summary"]["dumps"]
        if dumps["golden_shared"]:  # gc keeps the shared golden while this output is recorded
            refs = [{"what": f"golden dump, batch {x['batch']}", **{k: x[k] for k in ("digest", "key", "bytes")}}
                    for x in dumps["golden_shared"]]
            write_json_atomic(ctx.out_dir / OBJECT_REFS, refs_document(refs))
        write_results(result, ctx.out_dir, note)
        ctx.say(terminal_text(result, input_note=note))
        ctx.say(dumps_line(dumps, events.get("golden_dumped", [])))
        remedies = {}
        first = result["first_failure"]
        for item in (first or {}).get("advice", []):
            if item.get("file"):
                remedies[item["file"]["name"]] = write_text_atomic(ctx.out_dir / item["file"]["name"], item["file"]["content"])
        s = result["summary"]
        metrics = {k: s[k] for k in ("first_failure_index", "failed_ops", "min_cosine", "output_cosine", "overflow_ops")}
        metrics["dump_bytes"] = dumps["bytes_kept"]
        if s.get("contained_ops"):  # failed_ops still counts them (msit's sense); these do not reach an output
            metrics["contained_ops"] = s["contained_ops"]
        if s.get("golden_nonfinite"):  # pairs without metrics (their golden holds NaN/inf): never a pass
            metrics["golden_nonfinite"] = s["golden_nonfinite"]
        metrics.update(registry.get(ctx.backend).compare_extras(ctx, result))
        write_metrics(ctx.out_dir, metrics)
        if first:  # the op, its kind and its ATC pass: what the build summary and `show` name
            first_info = {k: first.get(k) for k in ("op_name", "op_type", "reason", "kind")}
            first_info["pass_name"] = result["rows"][first["index"]].get("pass_name") if "index" in first else None
        info = {"first_failure": first_info if first else None, "verdict": result.get("verdict"),
                "input": note, "thresholds": limits, "golden_dumped_here": events.get("golden_dumped", [])}
        return StageResult(metrics=metrics, remedy_files=remedies, info=info)


_KEPT = {"rerun": "the failing ops' and those feeding the first failure", "failing": "the failing ops'"}


def dumps_line(dumps: dict, dumped_here: list[bool]) -> str:
    """One line: the bytes of dumps this stage keeps, and the shared golden's."""
    mb = 1e6
    kept = "all tensors" if dumps["keep"] == "all" and dumps["keep_max"] is None else (
        f"{dumps['kept_tensors']} of {dumps['of_tensors']} tensors ({_KEPT.get(dumps['keep'], dumps['keep'])}"
        + (f", first {dumps['keep_max']}" if dumps["keep_max"] is not None else "")
        + "; params.dump_keep: all keeps every tensor)")
    line = f"dumps kept in this stage: {dumps['bytes_kept'] / mb:.1f} MB ({kept})"
    if dumps["golden_shared"]:
        how = "dumped by this stage" if any(dumped_here) else "dumped once, by another stage or build"
        line += f"; golden shared in cache/: {dumps['golden_shared_bytes'] / mb:.1f} MB ({how})"
    return line


def _budget(ctx):
    """The dump_budget param as bytes, 'auto' or None (none), refused in one located line when not a size."""
    from ascendpipe.backends.compare_sources import parse_budget

    return parse_budget(ctx.params.get("dump_budget"), Location(stage=ctx.name, field="params.dump_budget"))
