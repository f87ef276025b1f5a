"""``ascendpipe tune``: measured tuning of one model outside a pipeline (the emulation backend)."""

from __future__ import annotations

import argparse
import json
from pathlib import Path

HELP = "tune session settings by measurement; writes tune_bank.json and aoe_result_opat.json"


def _job_type(text: str) -> list[int]:
    try:
        values = sorted({int(v) for v in text.split(",")})
    except ValueError:
        values = []
    if not values or any(v not in (1, 2) for v in values):
        raise argparse.ArgumentTypeError(f"expected 1, 2 or 1,2, given {text!r}")
    return values


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--model", required=True, help="an .onnx file or a convert output directory")
    parser.add_argument("--input", help=".npy/.npz file or a directory of them (default: random data)")
    parser.add_argument("--output", required=True, help="directory for tune_bank.json and aoe_result_opat.json")
    parser.add_argument("--job-type", "--job_type", dest="job_type", type=_job_type, default=None,
                        help="1: graph level, 2: per op (fusion switches), 1,2: both in AOE's order (default: 1; "
                             "ascend: the SoC's)")
    parser.add_argument("--repeats", type=int, default=7, help="paired rounds per comparison (more, up to 3x, while the 95%% interval is undecided)")
    parser.add_argument("--iterations", type=int, help="runs per timed round (default: rounds of about 40 ms of the faster setting)")
    parser.add_argument("--max-candidates", "--max_candidates", dest="max_candidates", type=int, default=24)
    parser.add_argument("--batch-size", "--batch_size", dest="batch_size", type=int)
    parser.add_argument("--json", action="store_true", help="print the result as JSON")
    parser.add_argument("--backend", choices=("onnxruntime", "ascend"), default="onnxruntime",
                        help="ascend: aoe on the .onnx (job types: the SoC's unless --job-type is given)")
    parser.add_argument("--soc-version", "--soc_version", dest="soc_version",
                        help="ascend: the chip, e.g. Ascend310P3 (required there)")


def main(args: argparse.Namespace) -> int:
    from ascendpipe.backends.onnxruntime.profile_tune_stages import run_tune
    from ascendpipe.errors import Location, UserError

    if args.repeats < 3 or (args.iterations is not None and args.iterations < 1) or args.max_candidates < 1:
        raise UserError("--repeats must be >= 3, --iterations and --max-candidates >= 1", Location(field="--repeats"))
    from ascendpipe.cli import guard

    guard.refuse_output_over_inputs(args.output, {"--model": args.model, "--input": args.input})
    if args.soc_version is not None:  # empty or holding whitespace: refused as convert refuses it
        from ascendpipe.precision.settings import check_params

        check_params({"soc_version": args.soc_version}, spelled=lambda key: "--" + key.replace("_", "-"))
    if args.backend == "ascend":
        from ascendpipe.backends.ascend.standalone import run

        if not args.soc_version:
            raise UserError("tune --backend ascend needs the chip: --soc-version (e.g. Ascend310P3)",
                            Location(field="--soc-version"))
        done = run("tune", {"soc_version": args.soc_version, "job_type": args.job_type},
                   {"model": args.model, "inputs": args.input}, Path(args.output))
        print(json.dumps({"metrics": done.metrics, "info": done.info}, indent=2) if args.json else
              f"[INFO] tuned OM and knowledge bank in {args.output}")
        return 0
    model = guard.model_file(args.model)
    if not args.input:
        guard.random_input_size(model, args.batch_size)
    quiet = (lambda _: None) if args.json else print
    result = run_tune(model, Path(args.input) if args.input else None, Path(args.output), job_type=args.job_type or [1],
                      repeats=args.repeats, iterations=args.iterations, max_candidates=args.max_candidates,
                      batch_size=args.batch_size, say=quiet)
    if args.json:
        print(json.dumps({"metrics": result["metrics"], "info": result["info"],
                          "files": {k: str(v) for k, v in result["files"].items()}}, indent=2))
    return 0
