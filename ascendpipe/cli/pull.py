"""ascendpipe pull"""

from __future__ import annotations

import sys

from ascendpipe.cli.common import add_pipeline_args, add_remote_args, print_json

HELP = "restore the selected stages from the remote cache into the workspace (runs nothing)"


def add_arguments(p) -> None:
    add_pipeline_args(p, stages=True)
    add_remote_args(p, optional=False)
    p.add_argument("-j", "--jobs", type=int, default=None, metavar="N", help="restore up to N stages at once")
    p.add_argument("-q", "--quiet", action="store_true", help="print only what could not be restored and the summary")
    p.add_argument("--json", action="store_true", help="print the run record as JSON")


def main(args) -> int:
    from ascendpipe.engine.build import BuildOptions, build

    options = BuildOptions(
        targets=args.stages, jobs=args.jobs, overrides=args.overrides, backend=args.backend, keep_going=True,
        quiet=args.quiet, argv=["ascendpipe", *sys.argv[1:]], remote=args.remote, restore_only=True,
    )
    record = build(args.pipeline, options, stream=sys.stderr if args.json else sys.stdout)
    if args.json:
        print_json(record)
    return 1 if any(s["state"] in ("failed", "skipped") for s in record["stages"].values()) else 0
