"""``ascendpipe dump``: every op output of a model for the given inputs, one .npy per tensor."""

from __future__ import annotations

import argparse
import json
from pathlib import Path

HELP = "dump every op output of a model (tensors/*.npy + index.json) for the first samples of the inputs"


def add_arguments(parser: argparse.ArgumentParser) -> None:
    from ascendpipe.cli.common import add_batch_axes_arg, positive_int, positive_number

    parser.add_argument("--model", required=True, help=".onnx file or a convert output directory")
    parser.add_argument("--input", help=".npy, .npz or a directory of them (default: random inputs)")
    parser.add_argument("--output", required=True, help="dump directory")
    fusions = parser.add_mutually_exclusive_group()
    fusions.add_argument("--no-fusions", "--no_fusions", dest="fusions", action="store_false", default=None,
                         help="run with onnxruntime fusions off (default for a plain ONNX)")
    fusions.add_argument("--fusions", dest="fusions", action="store_true",
                         help="run with fusions on (default for a converted model)")
    parser.add_argument("--max-batch", "--max_batch", dest="max_batch", type=positive_int, default=8,
                        help="samples dumped, the first of the inputs (default 8)")
    parser.add_argument("--seed", type=int, default=0)
    add_batch_axes_arg(parser)
    parser.add_argument("--memory-budget-mb", "--memory_budget_mb", dest="memory_budget_mb", type=positive_number,
                        help="MB a dump segment holds, its tensors and weights: above it the model runs "
                             "in segments, each tensor computed once (default: one run for a dump of at "
                             "most 128 MB, else segments of 16 MB)")
    parser.add_argument("--json", action="store_true",
                        help='print {"index", "tensors", "fusions", "nan_or_inf": [TENSOR...]}')
    parser.add_argument("--backend", choices=("onnxruntime", "ascend"), default="onnxruntime",
                        help="ascend: ais_bench with acl.json and msaccucmp on the OM of an ascend convert directory")


def main(args: argparse.Namespace) -> int:
    from ascendpipe.cli import guard

    guard.refuse_output_over_inputs(args.output, {"--model": args.model, "--input": args.input})
    if getattr(args, "backend", "onnxruntime") == "ascend":
        from ascendpipe.backends.ascend.standalone import run

        result = run("dump", {"max_batch": args.max_batch, "seed": args.seed},
                     {"model": args.model, "inputs": args.input}, Path(args.output))
        print(f"{Path(args.output) / 'index.json'}: {result.metrics['tensors']} tensors")
        return 0
    from ascendpipe.backends.onnxruntime.dump import AUTO, dump_model, model_input_specs
    from ascendpipe.backends.onnxruntime.dump_stage import first_samples, is_converted
    from ascendpipe.cli.common import batch_axes
    from ascendpipe.inputs import load_inputs, random_inputs, with_batch_axes

    model = guard.model_file(args.model)
    if not args.input:
        guard.random_input_size(model, args.max_batch)
    fusions = is_converted(model) if args.fusions is None else args.fusions
    # from the graph, as the dump stage reads them (a session made only to list them cost ~140 ms)
    specs = with_batch_axes(model_input_specs(model), batch_axes(args))  # a state's may be 1
    static = any(s.static_batch is not None for s in specs)
    if args.input:
        batches = load_inputs(args.input, specs, batch_size=None if static else args.max_batch, cap=True)
    else:
        batches = [random_inputs(specs, seed=args.seed, batch_size=args.max_batch, batch_axes=batch_axes(args))]
    budget = int(args.memory_budget_mb * (1 << 20)) if args.memory_budget_mb else AUTO
    index_path = dump_model(model, first_samples(batches, args.max_batch, static), Path(args.output),
                            fusions=fusions, memory_budget_bytes=budget)
    index = json.loads(index_path.read_text())
    bad = [t["name"] for t in index["tensors"] if t["nan"] or t["inf"]]
    from ascendpipe.backends.onnxruntime.dump_stage import first_nonfinite, first_text

    first = first_nonfinite(index["tensors"])
    if args.json:
        from ascendpipe.cli.common import print_json

        print_json({"index": str(index_path), "tensors": len(index["tensors"]), "fusions": bool(fusions), "nan_or_inf": bad,
                    "first_nan_or_inf": first})
        return 0
    print(f"dumped {len(index['tensors'])} tensors (fusions {'on' if fusions else 'off'}) to {index_path}")
    if bad:
        print(f"{len(bad)} tensors hold NaN or Inf; first: {first_text(first)}")
    return 0

