"""``ascendpipe fix``: search the fewest fp32 ops (and fusion switches) that restore accuracy.

Two forms: ``fix PIPELINE --stage convert@fp16 --metric eval.mAP --tolerance 0.01`` (every attempt
an engine build, cached and recorded as runs) and ``fix --golden M.onnx --input X.npy
--precision-mode force_fp16 --min-cosine 0.99`` (in-process, judged on the final outputs).
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

from ascendpipe.backends import registry as backends

HELP = ("search the fewest keep_dtype ops / fusion switches / op_precision_mode lines that restore the metric (or "
        "output cosine) in fp16")


def add_arguments(parser: argparse.ArgumentParser) -> None:
    from ascendpipe.cli.common import add_batch_axes_arg

    parser.add_argument("pipeline", nargs="?", help="pipeline YAML (pipeline mode); leave out and give --golden "
                        "for standalone mode")
    pipe = parser.add_argument_group("pipeline mode")
    pipe.add_argument("--stage", help="the convert stage or variant to fix, e.g. convert@fp16 (default convert; "
                      "with --quantize the quantize stage, default quantize)")
    pipe.add_argument("--quantize", action="store_true",
                      help="accuracy-based automatic quantization: the fewest layers of the quantize stage kept in "
                      "float (skip_layers) so that --metric holds; --metric/--tolerance default to its params.auto")
    pipe.add_argument("--metric", help="STAGE.METRIC to restore, e.g. eval.mAP (the stage downstream of --stage)")
    pipe.add_argument("--tolerance", type=float, default=None,
                      help="target: metric >= golden metric - tolerance (default 0.01, one point of mAP)")
    pipe.add_argument("--golden-stage", "--golden_stage", dest="golden_stage",
                      help="stage whose metric is the golden (default: the metric stage's `golden` input)")
    pipe.add_argument("--compare-stage", "--compare_stage", dest="compare_stage",
                      help="compare stage giving per-op evidence (default: the one whose target is --stage)")
    pipe.add_argument("--set", dest="overrides", action="append", default=[], metavar="KEY=VALUE",
                      help="override a pipeline value for every attempt (repeatable)")
    pipe.add_argument("--backend", choices=backends.names(), help="toolchain backend (default: the pipeline's)")
    alone = parser.add_argument_group("standalone mode")
    alone.add_argument("--golden", type=Path, help="fp32 .onnx model (selects standalone mode)")
    alone.add_argument("--input", type=Path, help=".npy (one input) or .npz keyed by input name; default: seeded random")
    alone.add_argument("--precision-mode", "--precision_mode", dest="precision_mode", default=None,
                       help="ATC precision mode to fix (default force_fp16)")
    alone.add_argument("--precision-mode-v2", "--precision_mode_v2", dest="precision_mode_v2",
                       help="ATC precision_mode_v2 instead (fp16, origin, mixed_float16, cube_fp16in_fp32out, "
                       "mixed_bfloat16): as convert takes it")
    alone.add_argument("--keep-dtype", "--keep_dtype", dest="keep_dtype",
                       help="what the conversion already keeps (a keep_dtype file, or a comma list of op names / "
                       "OpType::T): kept by every attempt, as convert takes it")
    alone.add_argument("--fusion-switch-file", "--fusion_switch_file", dest="fusion_switch_file",
                       help="the conversion's fusion switch file (either ATC format): applied by every attempt")
    alone.add_argument("--modify-mixlist", "--modify_mixlist", dest="modify_mixlist",
                       help="modify_mixlist JSON, as convert takes it")
    alone.add_argument("--overflow-mode", "--overflow_mode", dest="overflow_mode", choices=("inf_nan", "saturation"),
                       help="fp16 overflow: inf_nan or saturation (default: the SoC's)")
    alone.add_argument("--allow-hf32", "--allow_hf32", dest="allow_hf32",
                       help="true/false: fp32 Conv and MatMul read HF32 on Atlas A2/A3 (default: conv on, matmul off)")
    alone.add_argument("--input-format", "--input_format", dest="input_format", help="NCHW, NHWC, ND... as convert")
    alone.add_argument("--allow-custom-ops", "--allow_custom_ops", dest="allow_custom_ops", action="store_true",
                       help="emulate ops outside the ai.onnx domain instead of refusing them, as convert does")
    alone.add_argument("--min-cosine", "--min_cosine", dest="min_cosine", type=float, default=None,
                       help="target: cosine similarity at every final output >= this (default 0.99); in pipeline "
                       "mode with a compare metric (--metric compare.output_cosine), the same as --tolerance 1-X")
    alone.add_argument("--seed", type=int, default=0, help="seed of the random input (default 0)")
    alone.add_argument("--soc-version", "--soc_version", dest="soc_version",
                       help="SoC to convert for, e.g. Ascend910B1 (a kept cube op reads fp32 only on Atlas A2/A3)")
    alone.add_argument("--op-select-implmode", "--op_select_implmode", dest="op_select_implmode",
                       help="ATC's --op_select_implmode for the conversions (default: high_performance)")
    alone.add_argument("--op-precision-mode", "--op_precision_mode", dest="op_precision_mode",
                       help="ATC's --op_precision_mode ini (OpType=mode lines) for the conversions")
    alone.add_argument("--optypelist-for-implmode", "--optypelist_for_implmode", dest="optypelist_for_implmode",
                       help="op types that alone take --op-select-implmode")
    alone.add_argument("--input-shape", "--input_shape", dest="input_shape",
                       help="ATC --input_shape for the conversion and the random input, e.g. "
                       "'ids:1,8;past_key_0:2,2,0,16' (0: an empty KV cache)")
    add_batch_axes_arg(alone)
    alone.add_argument("--case", dest="cases", action="append", default=[], metavar="MODEL[:INPUT]",
                       help="another (model, input) the same keep set must restore, e.g. a decoder's decode graph "
                       "with its KV cache (repeatable; --golden/--input is the first case; without --golden the "
                       "first --case is)")
    parser.add_argument("--max-attempts", "--max_attempts", dest="max_attempts", type=int, default=30,
                        help="most conversions to try (default 30)")
    parser.add_argument("--output", type=Path, help="write keep_dtype.cfg, fusion_switch.cfg, op_precision_mode.ini "
                        "and fix.json here "
                        "(pipeline mode default: BUILD_DIR/fix/STAGE)")
    parser.add_argument("--json", action="store_true", help="print the result JSON on stdout and nothing else")


def main(args: argparse.Namespace) -> int:
    from ascendpipe.cli.common import batch_axes, print_json
    from ascendpipe.errors import Location, UserError
    from ascendpipe.fix.run import fix_pipeline, fix_quantize, fix_standalone

    args.min_cosine_given = args.min_cosine is not None
    if args.min_cosine is None:
        args.min_cosine = 0.99
    if args.quantize:
        if not args.pipeline or args.golden:
            raise UserError("--quantize searches a pipeline's quantize stage: give the PIPELINE file", Location(field="--quantize"))
        result = fix_quantize(args.pipeline, stage=args.stage or "quantize", metric=args.metric, tolerance=args.tolerance,
                              golden_stage=args.golden_stage, compare_stage=args.compare_stage,
                              overrides=args.overrides, backend=args.backend, max_attempts=args.max_attempts,
                              output=args.output)
        if args.json:
            print_json(result.summary)
        else:
            sys.stdout.write(result.text())
        return 0 if result.outcome.passed else 1
    if args.cases and args.pipeline:
        raise UserError("--case is for standalone mode (--golden); pipeline mode fixes the pipeline's stages",
                        Location(field="--case"))
    if args.pipeline and args.golden:
        raise UserError("give a PIPELINE (pipeline mode) or --golden (standalone mode), not both", Location(field="--golden"))
    from ascendpipe.precision.settings import check_params

    # the flags atc's checks cover (an empty mode, a SoC name holding a newline, bf16 on a SoC without it),
    # named as the user wrote them
    check_params({k: v for k, v in (("precision_mode", args.precision_mode), ("soc_version", args.soc_version))
                  if v is not None}, spelled=lambda key: "--" + key.replace("_", "-"))
    if args.soc_version is not None:
        from ascendpipe.precision.atc_passes import soc_version_problem

        problem = soc_version_problem(args.soc_version)
        if problem:
            raise UserError(f"--soc-version {problem}", Location(field="--soc-version"))
    cases = _cases(args)
    if args.golden:
        from ascendpipe.cli import guard

        guard.refuse_output_over_inputs(args.output, {"--golden": args.golden, "--input": args.input})
        golden = guard.model_file(args.golden, "--golden")
        if args.input is None:
            guard.random_input_size(golden, None, flag="--golden")
        if args.precision_mode and args.precision_mode_v2:  # ATC refuses both, so does convert
            raise UserError("give --precision-mode or --precision-mode-v2, not both (ATC takes one)",
                            Location(field="--precision-mode-v2"))
        guard.refuse_output_over_inputs(args.output, {f"--{k.replace('_', '-')}": getattr(args, k) for k in
                                                      ("keep_dtype", "fusion_switch_file", "modify_mixlist")
                                                      if getattr(args, k) and Path(getattr(args, k)).exists()})
        mode = None if args.precision_mode_v2 else (args.precision_mode or "force_fp16")
        result = fix_standalone(args.golden, input_path=args.input, precision_mode=mode,
                                min_cosine=args.min_cosine, max_attempts=args.max_attempts, output=args.output,
                                seed=args.seed, soc_version=args.soc_version, batch_axes=batch_axes(args),
                                params=_convert_params(args), cases=cases, progress=_progress(args),
                                allow_custom_ops=args.allow_custom_ops)
    elif args.pipeline:
        from ascendpipe.cli import guard

        guard.refuse_output_over_inputs(args.output, {"PIPELINE": args.pipeline})
        if not args.metric:
            raise UserError("pipeline mode needs --metric STAGE.METRIC, e.g. --metric eval.mAP", Location(field="--metric"))
        if args.precision_mode and args.precision_mode_v2:
            raise UserError("give --precision-mode or --precision-mode-v2, not both (ATC takes one)",
                            Location(field="--precision-mode-v2"))
        on_stage = [k for k in ("keep_dtype", "fusion_switch_file", "modify_mixlist", "input_format", "input_shape",
                                "allow_custom_ops", "input", "cases") if getattr(args, k)]
        if on_stage:
            flag = "--" + on_stage[0].replace("_", "-").replace("cases", "case")
            raise UserError(f"{flag} is for standalone mode; a pipeline's convert stage (or its variant) holds that "
                            f"setting: put it there, or give --set stages.<convert>.params.{on_stage[0]}=... for every "
                            "attempt", Location(field=flag))
        # the SoC and precision settings apply to every attempt, where --set would put them
        settings = {k: getattr(args, k) for k in ("precision_mode", "precision_mode_v2", "soc_version", "overflow_mode",
                                                  "allow_hf32") if getattr(args, k)}
        if settings.get("allow_hf32") in ("true", "false"):  # the stage's param is a boolean
            settings["allow_hf32"] = settings["allow_hf32"] == "true"
        result = fix_pipeline(args.pipeline, stage=args.stage or "convert", metric=args.metric,
                              tolerance=args.tolerance, min_cosine=args.min_cosine if args.min_cosine_given else None,
                              golden_stage=args.golden_stage,
                              compare_stage=args.compare_stage, overrides=args.overrides, backend=args.backend,
                              max_attempts=args.max_attempts, output=args.output, progress=_progress(args),
                              convert_params=settings or None)
    else:
        raise UserError("give a PIPELINE file (pipeline mode) or --golden MODEL.onnx (standalone mode)",
                        Location(field="pipeline"))
    if args.json:
        lines = result.apply_lines()
        print_json({**result.summary, **({"apply": [l.strip() for l in lines if l.strip()]} if lines else {})})
    else:
        sys.stdout.write(result.text())
    if result.outcome.interrupted:
        return 130  # as the shell reports ^C; what was done is kept and printed
    return 0 if result.outcome.passed else 1


def _convert_params(args: argparse.Namespace) -> dict | None:
    """The convert settings fix standalone takes, as convert's params (``precision.settings.resolve``)."""
    from ascendpipe.precision.settings import keep_dtype_arg

    params = {k: getattr(args, k) for k in ("precision_mode_v2", "fusion_switch_file", "modify_mixlist",
                                            "overflow_mode", "allow_hf32", "input_format", "input_shape",
                                            "op_select_implmode", "op_precision_mode", "optypelist_for_implmode")
              if getattr(args, k, None)}
    if args.keep_dtype:
        params["keep_dtype"] = keep_dtype_arg(args.keep_dtype)
    return params or None


def _progress(args: argparse.Namespace):
    """Where each attempt is printed as it ends: stdout on a terminal (stderr when stdout carries --json);
    nowhere off a terminal (fix.progress)."""
    from ascendpipe.fix.progress import is_terminal

    stream = sys.stderr if args.json else sys.stdout
    return stream if is_terminal(stream) else None


def _cases(args: argparse.Namespace) -> list:
    """``--case MODEL[:INPUT]`` pairs, each checked as --golden/--input are; without --golden the first
    case becomes --golden/--input."""
    from ascendpipe.cli import guard
    from ascendpipe.errors import Location, UserError
    from ascendpipe.cli.common import batch_axes
    from ascendpipe.fix.cases import parse_case

    pairs = [parse_case(text) for text in args.cases]
    for text, (model, given) in zip(args.cases, pairs):
        found = guard.model_file(model, "--case")
        if given is not None and not given.is_file():
            raise UserError(f"--case input {given} does not exist", Location(file=str(given), field="--case"))
        if given is None:
            guard.random_input_size(model, None, flag="--case")
            continue
        from ascendpipe.inputs import load_inputs

        try:  # each case's input against its own model, named by its --case (two cases may share a file)
            load_inputs(given, guard.model_specs(found, "--case"), batch_axes=batch_axes(args))
        except UserError as err:
            raise UserError(str(err), Location(file=f"--case {text}")) from None
    if pairs and args.golden is None:
        (args.golden, args.input), pairs = pairs[0], pairs[1:]
    return pairs
