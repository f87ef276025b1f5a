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
    parser.add_argument("--job-type", "--job_type", dest="job_type", type=_job_type, default=[1],
                        help="1: graph level, 2: per op (fusion switches), 1,2: both in AOE's order")
    parser.add_argument("--repeats", type=int, default=7, help="paired rounds per comparison (more, up to 3x, while the 95%% interval is undecided)")
    parser.add_argument("--iterations", type=int, help="runs per timed round (default: rounds of about 40 ms of the faster setting)")
    parser.add_argument("--max-candidates", "--max_candidates", dest="max_candidates", type=int, default=24)
    parser.add_argument("--batch-size", "--batch_size", dest="batch_size", type=int)
    parser.add_argument("--json", action="store_true", help="print the result as JSON")


def main(args: argparse.Namespace) -> int:
    from ascendpipe.backends.onnxruntime.profile_tune_stages import run_tune
    from ascendpipe.errors import Location, UserError
    from ascendpipe.stages.base import find_model_file

    if args.repeats < 3 or (args.iterations is not None and args.iterations < 1) or args.max_candidates < 1:
        raise UserError("--repeats must be >= 3, --iterations and --max-candidates >= 1", Location(field="--repeats"))
    model = find_model_file(Path(args.model))
    quiet = (lambda _: None) if args.json else print
    result = run_tune(model, Path(args.input) if args.input else None, Path(args.output), job_type=args.job_type,
                      repeats=args.repeats, iterations=args.iterations, max_candidates=args.max_candidates,
                      batch_size=args.batch_size, say=quiet)
    if args.json:
        print(json.dumps({"metrics": result["metrics"], "info": result["info"],
                          "files": {k: str(v) for k, v in result["files"].items()}}, indent=2))
    return 0
