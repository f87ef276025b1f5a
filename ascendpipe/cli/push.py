"""ascendpipe push"""

from __future__ import annotations

from ascendpipe.cli.common import add_pipeline_args, add_remote_args, print_json

HELP = "upload the selected stages' outputs and run-cache entries to the remote cache"


def add_arguments(p) -> None:
    add_pipeline_args(p, stages=True)
    add_remote_args(p, optional=False)
    p.add_argument("--json", action="store_true")


def main(args) -> int:
    import io
    import sys

    from ascendpipe.engine.push import push

    result = push(args.pipeline, args.stages, url=args.remote, overrides=args.overrides, backend=args.backend,
                  stream=io.StringIO() if args.json else sys.stdout)
    if args.json:
        print_json(result)
    return 1 if any(s["state"] == "not pushed" for s in result["stages"].values()) else 0
