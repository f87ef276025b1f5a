"""``ascendpipe profile``: profile one model outside a pipeline (the emulation backend)."""

from __future__ import annotations

import argparse
import json
from pathlib import Path

HELP = "profile a model: latency, throughput, timeline.json, op_summary/op_statistic CSVs, profile.html"


def add_arguments(parser: argparse.ArgumentParser) -> None:
    from ascendpipe.cli.common import add_batch_axes_arg, positive_int

    parser.add_argument("--model", required=True, help="an .onnx file or a convert output directory")
    parser.add_argument("--input", help=".npy/.npz file or a directory of them (default: random data)")
    parser.add_argument("--output", required=True, help="directory for the profile files")
    parser.add_argument("--warmup", "--warmup-count", "--warmup_count", dest="warmup", type=int, default=5)
    parser.add_argument("--iterations", "--loop", dest="iterations", type=int, default=20)
    parser.add_argument("--batch-size", "--batch_size", "--batchsize", dest="batch_size", type=positive_int)
    add_batch_axes_arg(parser)
    parser.add_argument("--json", action="store_true", help="print the metrics as JSON instead of the table")
    parser.add_argument("--backend", choices=("onnxruntime", "ascend"), default="onnxruntime",
                        help="ascend: msprof around ais_bench on the OM of an ascend convert output directory")


def main(args: argparse.Namespace) -> int:
    from ascendpipe.backends.onnxruntime.profile_tune_stages import run_profile
    from ascendpipe.cli.common import batch_axes
    from ascendpipe.errors import Location, UserError

    if args.warmup < 0 or args.iterations < 1:
        raise UserError("--warmup must be >= 0 and --iterations >= 1", Location(field="--iterations"))
    from ascendpipe.cli import guard

    guard.refuse_output_over_inputs(args.output, {"--model": args.model, "--input": args.input})
    if args.backend == "ascend":
        from ascendpipe.backends.ascend.standalone import run

        result = run("profile", {"warmup": args.warmup, "iterations": args.iterations, "batch_size": args.batch_size},
                     {"model": args.model, "inputs": args.input}, Path(args.output))
        print(json.dumps({"metrics": result.metrics, "info": result.info}, indent=2) if args.json else
              (Path(args.output) / "top_ops.txt").read_text(), end="" if not args.json else "\n")
        return 0
    model = guard.model_file(args.model)
    if not args.input:
        guard.random_input_size(model, args.batch_size)
    quiet = (lambda _: None) if args.json else print
    result = run_profile(model, Path(args.input) if args.input else None, Path(args.output),
                         warmup=args.warmup, iterations=args.iterations, batch_size=args.batch_size, say=quiet,
                         batch_axes=batch_axes(args))
    if args.json:
        print(json.dumps({"metrics": result["metrics"], "info": result["info"]}, indent=2))
    return 0
