"""``ascendpipe compare``: per-op accuracy of a target against a golden, msit-style."""

from __future__ import annotations

import argparse
import sys
import tempfile
from pathlib import Path

from ascendpipe.backends import registry as backends

HELP = "compare a converted model or dump against the fp32 golden, op by op (msit metrics, first failure, advice)"


def add_arguments(parser: argparse.ArgumentParser) -> None:
    from ascendpipe.cli.common import add_batch_axes_arg

    parser.add_argument("--golden", required=True, type=Path, help="fp32 .onnx model or golden dump dir")
    parser.add_argument("--target", required=True, type=Path, help="converted model dir, .onnx, or dump dir")
    parser.add_argument("--input", type=Path, default=None, help=".npy (one input), .npz keyed by input name, or a "
                        "directory of them: every batch is compared, each op shown at its worst batch; "
                        "default: a seeded random input")
    parser.add_argument("--golden-input", "--golden_input", dest="golden_input", type=Path, default=None,
                        help="the golden's own input (training-preprocessed float data) when the target takes other "
                        "data; with AIPP it is checked against the device's preprocessing first")
    parser.add_argument("--output", type=Path, default=None, help="write result.csv, result.json, report.html here")
    parser.add_argument("--json", action="store_true", help="print the result JSON on stdout and nothing else")
    parser.add_argument("--strategy", default="first-overall", choices=["first-overall", "first-per-output", "all"])
    parser.add_argument("--seed", type=int, default=0, help="seed of the random input (default 0)")
    add_batch_axes_arg(parser)
    parser.add_argument("--threshold", action="append", default=[], metavar="NAME=VALUE",
                        help="override a threshold: cosine, relative_euclidean, kl, rmse, mean_relative_error")
    parser.add_argument("--backend", choices=backends.names(), default=backends.DEFAULT,
                        help="ascend: the target is an OM dir (dumped on the NPU with ais_bench + acl.json)")
    parser.add_argument("--convert-stage", "--convert_stage", dest="convert_stage", default=None,
                        help="stage name used in the advice's --set lines (default: the stage a dump stage's "
                        "target names in its source.json, else convert)")


def _parse_thresholds(items: list[str]) -> dict:
    from ascendpipe.errors import Location, UserError

    result = {}
    for item in items:
        name, sep, value = item.partition("=")
        try:
            result[name.strip()] = float(value)
        except ValueError:
            sep = ""
        if not sep:
            raise UserError(f"--threshold expects NAME=NUMBER, got '{item}'", Location(field="--threshold"))
    return result


def main(args: argparse.Namespace) -> int:
    from ascendpipe.cli.common import batch_axes
    from ascendpipe.compare import thresholds as thr
    from ascendpipe.backends.compare_sources import run_compare
    from ascendpipe.cli.common import use_color
    from ascendpipe.compare.writers import json_text, terminal_text, write_results

    from ascendpipe.cli import guard

    guard.refuse_output_over_inputs(args.output, {"--golden": args.golden, "--target": args.target,
                                                  "--input": args.input, "--golden-input": args.golden_input})
    golden = guard.onnx_side(args.golden, "--golden")
    if args.backend != "ascend":
        guard.onnx_side(args.target, "--target")
    if golden is not None and args.input is None:
        guard.random_input_size(golden, None, flag="--golden")
    limits = thr.resolve(_parse_thresholds(args.threshold))
    with tempfile.TemporaryDirectory(prefix="ascendpipe-compare-") as scratch:
        work = args.output or Path(scratch)
        result, note = run_compare(args.golden, args.target, input_path=args.input, work_dir=work, limits=limits,
                                   strategy=args.strategy, seed=args.seed, convert_stage=args.convert_stage,
                                   golden_inputs=args.golden_input, backend=args.backend, log=sys.stderr,
                                   batch_axes=batch_axes(args))
        if args.output:
            write_results(result, args.output, note)
    if args.json:
        sys.stdout.write(json_text(result, note))
    else:
        sys.stdout.write(terminal_text(result, color=use_color(sys.stdout), input_note=note))
        if args.output:
            sys.stdout.write(f"results: {args.output / 'result.csv'}, {args.output / 'result.json'}, {args.output / 'report.html'}\n")
    return 0
