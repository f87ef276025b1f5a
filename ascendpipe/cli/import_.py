"""``ascendpipe import PATH [--json] [-o FILE]``: bring a CANN result made elsewhere into ascendpipe's JSON."""

from __future__ import annotations

import argparse
import json
import sys

HELP = "read an msprof PROF_* dir, msit compare CSV, aoe_result JSON or ais_bench summary into ascendpipe's JSON"


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("path", help="PROF_* directory, result_*.csv, aoe_result_*.json or *_summary.json")
    parser.add_argument("--json", action="store_true", help="print the normalised JSON instead of a summary")
    parser.add_argument("-o", "--output", help="also write the normalised JSON to this file")


def main(args: argparse.Namespace) -> int:
    from ascendpipe.fsutil import write_json_atomic
    from ascendpipe.backends.ascend.importer import describe, import_path

    from ascendpipe.cli import guard

    guard.refuse_output_over_inputs(args.output, {"PATH": args.path}, flag="-o", instead="write the JSON to another file")
    result = import_path(args.path)
    if args.output:
        from pathlib import Path

        write_json_atomic(Path(args.output), result)
    if args.json:
        json.dump(result, sys.stdout, indent=2)
        sys.stdout.write("\n")
    else:
        print(describe(result))
    return 0
