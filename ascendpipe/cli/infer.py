"""``ascendpipe infer``: run a model over inputs and print an ais_bench-like latency summary."""

from __future__ import annotations

import argparse
import json
from pathlib import Path

HELP = "run a model over inputs (.npy, .npz or a directory), batched; write outputs and a latency summary"


def add_arguments(parser: argparse.ArgumentParser) -> None:
    from ascendpipe.cli.common import add_batch_axes_arg

    parser.add_argument("--model", required=True, help=".onnx file or a convert output directory")
    parser.add_argument("--input", help=".npy, .npz or a directory of them (default: random inputs)")
    parser.add_argument("--output", required=True, help="directory for outputs/*.npy and summary.json")
    parser.add_argument("--batch-size", "--batch_size", "--batchsize", dest="batch_size", type=int)
    parser.add_argument("--loops", "--loop", dest="loops", type=int, default=1)
    parser.add_argument("--warmup", "--warmup-count", "--warmup_count", dest="warmup", type=int, default=1)
    parser.add_argument("--seed", type=int, default=0, help="seed of the random inputs when --input is not given")
    add_batch_axes_arg(parser)
    parser.add_argument("--json", action="store_true", help="print the summary as JSON")
    parser.add_argument("--backend", choices=("onnxruntime", "ascend"), default="onnxruntime",
                        help="ascend: ais_bench on the OM of an ascend convert output directory")


def main(args: argparse.Namespace) -> int:
    from ascendpipe.backends.onnxruntime.infer import console_summary, infer_model
    from ascendpipe.backends.onnxruntime.session import input_specs, make_session
    from ascendpipe.cli.common import batch_axes
    from ascendpipe.inputs import load_inputs, random_inputs
    from ascendpipe.cli import guard

    guard.refuse_output_over_inputs(args.output, {"--model": args.model, "--input": args.input})
    if args.backend == "ascend":
        from ascendpipe.backends.ascend.standalone import run

        run("infer", {"batch_size": args.batch_size, "loops": args.loops, "warmup": args.warmup, "seed": args.seed},
            {"model": args.model, "inputs": args.input}, Path(args.output))
        summary = json.loads((Path(args.output) / "summary.json").read_text())
        if args.json:
            print(json.dumps({k: v for k, v in summary.items() if k != "npu_compute_time_list"}, indent=2))
        else:
            print(f"[INFO] {summary['samples']} samples in {summary['batches']} batches; outputs in "
                  f"{Path(args.output) / 'outputs'}")
        return 0
    model = guard.model_file(args.model)
    if not args.input:
        guard.random_input_size(model, args.batch_size)
    session = make_session(model)
    specs = input_specs(session)
    if args.input:
        batches, source = load_inputs(args.input, specs, batch_size=args.batch_size, batch_axes=batch_axes(args)), args.input
    else:
        batches, source = ([random_inputs(specs, seed=args.seed, batch_size=args.batch_size, batch_axes=batch_axes(args))],
                           f"random(seed={args.seed})")
    summary = infer_model(model, batches, Path(args.output), warmup=args.warmup, loops=args.loops,
                          session=session, source=source)
    if args.json:
        shown = {k: v for k, v in summary.items() if k != "npu_compute_time_list"}
        print(json.dumps(shown, indent=2))
    else:
        print(console_summary(summary))
        print(f"[INFO] {summary['samples']} samples in {summary['batches']} batches; outputs in "
              f"{Path(args.output) / 'outputs'}")
    return 0
