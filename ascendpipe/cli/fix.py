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

HELP = "search the fewest keep_dtype ops / fusion switches that restore the metric (or output cosine) in fp16"


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
    alone.add_argument("--precision-mode", "--precision_mode", dest="precision_mode", default="force_fp16",
                       help="ATC precision mode to fix (default force_fp16)")
    alone.add_argument("--min-cosine", "--min_cosine", dest="min_cosine", type=float, default=0.99,
                       help="target: cosine similarity at every final output >= this (default 0.99)")
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
    parser.add_argument("--output", type=Path, help="write keep_dtype.cfg, fusion_switch.cfg and fix.json here "
                        "(pipeline mode default: BUILD_DIR/fix/STAGE)")
    parser.add_argument("--json", action="store_true", help="print the result JSON on stdout and nothing else")


def main(args: argparse.Namespace) -> int:
    from ascendpipe.cli.common import batch_axes, print_json
    from ascendpipe.errors import Location, UserError
    from ascendpipe.fix.run import fix_pipeline, fix_quantize, fix_standalone

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
        result = fix_standalone(args.golden, input_path=args.input, precision_mode=args.precision_mode,
                                min_cosine=args.min_cosine, max_attempts=args.max_attempts, output=args.output,
                                seed=args.seed, soc_version=args.soc_version, batch_axes=batch_axes(args),
                                params=_convert_params(args) or None,
                                cases=cases)
    elif args.pipeline:
        from ascendpipe.cli import guard

        guard.refuse_output_over_inputs(args.output, {"PIPELINE": args.pipeline})
        if not args.metric:
            raise UserError("pipeline mode needs --metric STAGE.METRIC, e.g. --metric eval.mAP", Location(field="--metric"))
        result = fix_pipeline(args.pipeline, stage=args.stage or "convert", metric=args.metric,
                              tolerance=0.01 if args.tolerance is None else args.tolerance,
                              golden_stage=args.golden_stage, compare_stage=args.compare_stage,
                              overrides=args.overrides, backend=args.backend, max_attempts=args.max_attempts,
                              output=args.output)
    else:
        raise UserError("give a PIPELINE file (pipeline mode) or --golden MODEL.onnx (standalone mode)",
                        Location(field="pipeline"))
    if args.json:
        lines = result.apply_lines()
        print_json({**result.summary, **({"apply": [l.strip() for l in lines if l.strip()]} if lines else {})})
    else:
        sys.stdout.write(result.text())
    return 0 if result.outcome.passed else 1


def _convert_params(args: argparse.Namespace) -> dict:
    """The convert settings standalone mode takes besides --precision-mode and --soc-version."""
    names = ("input_shape", "op_select_implmode", "op_precision_mode", "optypelist_for_implmode")
    return {name: getattr(args, name) for name in names if getattr(args, name, None)}


def _cases(args: argparse.Namespace) -> list:
    """``--case MODEL[:INPUT]`` pairs, each checked as --golden/--input are; without --golden the first
    case becomes --golden/--input."""
    from ascendpipe.cli import guard
    from ascendpipe.errors import Location, UserError
    from ascendpipe.fix.cases import parse_case

    pairs = [parse_case(text) for text in args.cases]
    for model, given in pairs:
        guard.model_file(model, "--case")
        if given is not None and not given.is_file():
            raise UserError(f"--case input {given} does not exist", Location(file=str(given), field="--case"))
        if given is None:
            guard.random_input_size(model, None, flag="--case")
    if pairs and args.golden is None:
        (args.golden, args.input), pairs = pairs[0], pairs[1:]
    return pairs
