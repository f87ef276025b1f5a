"""ascendpipe validate"""

from __future__ import annotations

from ascendpipe.cli.common import add_pipeline_args

HELP = "check a pipeline file (YAML, templates, schema, graph) without building"


def add_arguments(p) -> None:
    add_pipeline_args(p)


def main(args) -> int:
    from ascendpipe.api import validate

    info = validate(args.pipeline, set=args.overrides, backend=args.backend)
    print(f"{info['pipeline']}: ok, {len(info['stages'])} stages on backend {info['backend']}: {', '.join(info['stages'])}")
    return 0
